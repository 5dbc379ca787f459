#!/usr/bin/env python3
"""The corpus driver: build, trace, analyse, fold and confirm every registered architecture.

    build_corpus.py --foldnorm build/bin/foldnorm --ops build/lib/libfoldnorm_ops.so \\
        --results build/corpus-results [--env main|old|torch2.10|torch2.9] [--only hf-gpt2 timm-vit_tiny ...]
    build_corpus.py --env main --export ...   (also the .pt2 round trip of torch_envs.export_and_fold,
        both --rms-op forms; not CI's)
    build_corpus.py --check hf-gpt2 --env main --results build/corpus-results   (one ctest entry)
    build_corpus.py --update-expectations --results build/corpus-results        (after a reviewed change)
    build_corpus.py --update-expectations --missing-only ...   (only architectures without one yet)

For each architecture: build (corpus_lib.prepare), trace (torch.jit.trace, check_trace=False,
strict=False), save with the embedded input spec, run `foldnorm analyze --json` and `foldnorm fold
--json`, load the folded file back in Python, run the float64 eager oracle (oracle.py), and write
<results>/<env>/<name>.json. Traces are cached under $FOLDNORM_CACHE/corpus (default
~/.cache/foldnorm/corpus) keyed by the builder scripts, the name and the library versions; results
also by the driver, the oracle and the hashes of the foldnorm binary and the ops library, so a
warm rerun only copies files.
The "old" environment is older transformers and timm installed with `pip --target` under the cache
(keyed by their versions) and put first on PYTHONPATH; torch stays the same. The "torch2.X"
environments are another torch itself (torch_envs.py): the architectures it lists are
traced and exported there, folded, and the folded files loaded back in that torch and in ours.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
sys.path[:0] = [HERE, FIXTURES]
import torch_envs  # noqa: E402

CACHE = os.path.join(os.environ.get("FOLDNORM_CACHE", os.path.expanduser("~/.cache/foldnorm")), "corpus")
OLD_PINS = {"transformers": "4.41.2", "timm": "0.9.16"}
# transformers 4.41 needs a huggingface_hub before 1.0 and tokenizers 0.19; timm's own dependencies
# (torch, torchvision) must stay the venv's, so timm is installed without them.
OLD_EXTRA = ["huggingface_hub<1.0", "tokenizers<0.20"]
OLD_KEY = "-".join(f"{k}{v}" for k, v in sorted(OLD_PINS.items()))
BUILDER_MODULES = ["hf_corpus", "timm_corpus", "tv_corpus"]
EXPECTATIONS = os.path.join(HERE, "expectations.json")
# Rule gaps the oracle has shown and nobody has fixed yet: {env: {architecture: {LN: why}}}. A listed
# LN may be an UNCONFIRMED KEEP (a fold the rules miss, never an unsafe fold); everything else about
# that architecture is still checked, and a listed LN that the oracle confirms (or that folds) fails
# the entry until it is taken off the list.
KNOWN_GAPS = os.path.join(HERE, "known_gaps.json")
FOLD_FILE_REL = 1e-5      # the saved float32 fold run in float32 against the eager model
TRACE_REL = 1e-4          # the trace against the eager model, float32
TIMEOUT_ANALYZE, TIMEOUT_FOLD = 300, 600


def say(msg: str) -> None:
    print(f"[corpus] {msg}", flush=True)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def scripts_hash(files: List[str]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode())
        with open(os.path.join(HERE, f), "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def builder_files() -> List[str]:
    """What makes a trace: the builders, the registry and preparation, the fixture helpers."""
    return sorted(f for f in os.listdir(HERE) if f.endswith("_corpus.py")) + \
        ["corpus_lib.py", "../fixtures/fixture_lib.py"]


CHECKER_FILES = ["build_corpus.py", "oracle.py", "torch_envs.py"]  # what makes a result from a trace


def library_versions() -> Dict[str, str]:
    from importlib import metadata
    out = {"python": sys.version.split()[0]}
    for lib in ("torch", "transformers", "timm", "torchvision"):
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = "absent"
    return out


# ---------------------------------------------------------------- the old environment

def old_env_dir() -> str:
    return os.path.join(CACHE + "-old", OLD_KEY)


def ensure_old_env() -> str:
    """pip --target into a fresh folder, renamed into place only when both installs succeeded."""
    target = old_env_dir()
    if os.path.isdir(target):
        return target
    say(f"installing the old environment {OLD_KEY} into {target}")
    torch_envs.pip_install_target(target, [lambda _: [f"transformers=={OLD_PINS['transformers']}"] + OLD_EXTRA,
                                           lambda _: ["--no-deps", f"timm=={OLD_PINS['timm']}"]],
                                  "the old environment")
    return target


def reexec_in_env(name: str, argv: List[str]) -> int:
    first = [ensure_old_env()] if name == "old" else torch_envs.ensure_env(CACHE, name, say)
    if name in torch_envs.WITH_OLD_LIBRARIES:
        first.insert(1, ensure_old_env())
    env = dict(os.environ, FOLDNORM_CORPUS_CHILD=name,
               PYTHONPATH=os.pathsep.join(first + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.run([sys.executable, os.path.abspath(__file__)] + argv, env=env).returncode


def check_in_venv_torch(env: str, results_dir: str) -> None:
    """After a torch-env run, in the venv's torch: every folded file written there loads here too."""
    folder = os.path.join(results_dir, env)
    for fname in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if fname.endswith(".json"):
            with open(os.path.join(folder, fname)) as f:
                result = json.load(f)
            torch_envs.check_in_this_torch(result)
            write_atomic_json(os.path.join(folder, fname), result)


# ---------------------------------------------------------------- one architecture

class Failed(Exception):
    """One architecture's run stops here; the message goes into its result."""


def run_tool(cmd: List[str], timeout: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise Failed(f"{os.path.basename(cmd[0])} {cmd[1]} timed out after {timeout} s")
    if r.returncode != 0:
        how = f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        raise Failed(f"foldnorm {cmd[1]} failed ({how}): {last}")
    return r


def _max_rel(ref, got) -> float:
    import oracle
    return max(oracle.relative_diff(ref, got))


def check_mask_live(sample, traced, failures: List[str], notes: List[str]) -> None:
    """Text specs give an all-ones mask; a trace that specialised on it would ignore padding."""
    import torch
    from corpus_lib import as_tuple
    if "attention_mask" not in sample.input_names:
        return
    i = sample.input_names.index("attention_mask")
    inputs = list(sample.inputs)
    padded = inputs[i].clone()
    padded[-1, -3:] = 0
    inputs[i] = padded
    with torch.no_grad():
        base = as_tuple(sample.model(*sample.inputs))
        eager = as_tuple(sample.model(*inputs))
        got = as_tuple(traced(*inputs))
    if _max_rel(base, eager) <= 1e-6:
        failures.append("padding the attention mask does not change the eager outputs")
    elif _max_rel(eager, got) > TRACE_REL:
        failures.append(f"the trace ignores attention_mask: padded, it differs from eager by "
                        f"{_max_rel(eager, got):.3g} relative")
    else:
        notes.append("attention_mask is live: a right-padded mask matches eager through the trace")


def load_folded(path: str, ops: Optional[str], sample, input_sets) -> dict:
    """The saved fold against eager; ops None: a portable (aten) fold, loaded without our library."""
    import torch
    from corpus_lib import as_tuple
    if ops:
        torch.ops.load_library(ops)
    folded = torch.jit.load(path).eval()
    out = {"float32_relative": 0.0}
    with torch.no_grad():
        for inputs in input_sets:
            rel = _max_rel(as_tuple(sample.model(*inputs)), as_tuple(folded(*inputs)))
            out["float32_relative"] = max(out["float32_relative"], rel)
        try:  # a trace bakes float32 constants; where it does not, the file runs in float64 too
            import oracle
            ref = copy_double(sample.model)
            x = oracle.to_float64(input_sets[0])
            out["float64_relative"] = _max_rel(as_tuple(ref(*x)), as_tuple(folded.double()(*x)))
        except Exception as e:  # noqa: BLE001 (any failure just means: no float64 run of the file)
            out["float64_run"] = f"not possible: {str(e).strip().splitlines()[0][:160]}"
    return out


def copy_double(model):
    import copy
    return copy.deepcopy(model).double().eval()


def run_architecture(arch, env: str, args, versions: Dict[str, str], keys: Dict[str, str]) -> dict:
    import torch
    import corpus_lib
    import oracle
    from fixture_lib import make_inputs, save_traced
    result = {"format": "foldnorm-corpus-result", "version": 1, "name": arch.name, "env": env,
              "library": arch.library, "family": arch.family, "description": arch.description,
              "versions": versions, "failures": [], "notes": [], "seconds": {}}
    work = os.path.join(CACHE, env, arch.name)
    os.makedirs(work, exist_ok=True)
    trace_path = os.path.join(work, f"trace-{keys['trace'][:16]}.pt")
    fold_path = os.path.join(work, f"folded-{keys['result'][:16]}.pt")
    secs = result["seconds"]

    t = time.time()
    torch.manual_seed(0)
    try:
        sample = corpus_lib.prepare(arch.build())
    except Exception as e:  # noqa: BLE001 (a library's API missing in this version, say)
        msg = f"builder failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        if env in arch.absent:
            result["absent"] = msg
            return result
        result["failures"].append(msg)
        result["traceback"] = traceback.format_exc()[-2000:]
        return result
    secs["build"] = time.time() - t
    result["notes"] += sample.notes
    input_sets = [tuple(sample.inputs), make_inputs(sample.specs, seed=1)]
    with torch.no_grad():
        eager = [corpus_lib.as_tuple(sample.model(*x)) for x in input_sets]
    if not all(bool(torch.isfinite(o).all()) for outs in eager for o in outs if o.is_floating_point()):
        result["failures"].append("the eager model produced non-finite outputs")
        return result

    t = time.time()
    traced = None
    if os.path.exists(trace_path):
        traced = torch.jit.load(trace_path)
        result["trace_cached"] = True
    # A cached trace is checked as the eager model and a fresh trace run, under no_grad (in the
    # second held-out sweep GroupViT's cached trace, run with grad on, failed this check).
    with torch.no_grad():
        stale = traced is None or any(_max_rel(e, corpus_lib.as_tuple(traced(*x))) > TRACE_REL
                                      for e, x in zip(eager, input_sets))
    if stale:
        with torch.no_grad():
            traced = torch.jit.trace(sample.model, tuple(sample.inputs), check_trace=False, strict=False)
        save_traced(trace_path, traced, sample.specs)
        result["trace_cached"] = False
    with torch.no_grad():
        trace_rel = max(_max_rel(e, corpus_lib.as_tuple(traced(*x))) for e, x in zip(eager, input_sets))
    secs["trace"] = time.time() - t
    result["trace_relative_float32"] = trace_rel
    if trace_rel > TRACE_REL:
        result["failures"].append(f"the trace disagrees with the eager model ({trace_rel:.3g} relative)")
    check_mask_live(sample, traced, result["failures"], result["notes"])
    result["trace_file"] = trace_path
    result["inputs"] = {"names": sample.input_names, "specs": sample.specs, "outputs": sample.output_names}

    t = time.time()
    analysis = json.loads(run_tool([args.foldnorm, "analyze", "--json", trace_path], TIMEOUT_ANALYZE).stdout)
    secs["analyze"] = time.time() - t
    result["summary"] = analysis["summary"]
    result["layer_norms"] = [{k: l.get(k) for k in ("module", "foldable", "reason", "explanation")}
                             for l in analysis["layer_norms"]]

    t = time.time()
    other_torch = torch_envs.is_torch_env(env)  # our library is built for the venv's torch: aten form
    fold_report = json.loads(run_tool([args.foldnorm, "fold", trace_path, "-o", fold_path, "--json"] +
                                      (["--rms-op", "aten"] if other_torch else []), TIMEOUT_FOLD).stdout)
    secs["fold"] = time.time() - t
    ver = fold_report.get("verification", {})
    result["tool_fold"] = {k: ver.get(k) for k in ("float64_equivalent", "predictions_unchanged",
                                                   "worst_relative_float64", "worst_relative_float32")}
    if analysis["summary"]["foldable"] and ver.get("float64_equivalent") is not True:
        result["failures"].append(f"foldnorm fold's own verification: not float64-equivalent "
                                  f"({ver.get('worst_relative_float64')})")
    t = time.time()
    result["folded_file"] = load_folded(fold_path, None if other_torch else args.ops, sample, input_sets)
    if result["folded_file"]["float32_relative"] > FOLD_FILE_REL:
        result["failures"].append(f"the saved fold differs from the eager model by "
                                  f"{result['folded_file']['float32_relative']:.3g} relative (float32)")
    if other_torch:  # kept for the venv's torch to load (check_in_venv_torch), with the .pt2 half
        result["folded_trace_file"] = fold_path
        result["reference_file"] = os.path.join(work, f"reference-{keys['trace'][:16]}.pt")
        torch_envs.save_reference(result["reference_file"], input_sets, eager)
        torch_envs.export_and_fold(sample, input_sets, eager, work, keys, args, result, run_tool)
        secs["export"] = time.time() - t
    else:
        os.remove(fold_path)  # verified; only the trace is worth keeping
    if getattr(args, "export", False) and not other_torch:  # env main, --export: the .pt2 round trip
        t_export = time.time()
        try:
            torch_envs.export_and_fold(sample, input_sets, eager, work, keys, args, result, run_tool,
                                       forms=("aten", "foldnorm"))
        except Failed as e:  # foldnorm on the .pt2: keep the trace's half of the result
            result["failures"].append(f".pt2: {e}")
        secs["export"] = time.time() - t_export
        t += secs["export"]  # the oracle's seconds stay its own

    try:
        report = oracle.check(sample.model, input_sets, analysis)
    except oracle.OracleError as e:  # keeps what the tool said: the result still names the verdicts
        result["failures"].append(f"oracle: {e}")
        return result
    secs["oracle"] = time.time() - t
    result["oracle"] = report.to_json()
    weak = [i for i, d in enumerate(report.input_dependence) if d <= oracle.CHANGED_REL]
    if weak:
        result["failures"].append(f"outputs {weak} do not depend on the input (a second input set "
                                  f"changes them by {min(report.input_dependence):.3g} relative)")
    if report.fold_rel and max(report.fold_rel) > oracle.EXACT_REL:
        result["failures"].append(f"FOLD not exact in float64: {max(report.fold_rel):.3g} relative")
    for u in report.unconfirmed:
        result["failures"].append(f"UNCONFIRMED KEEP {u['module']} (reason {u['reason']}: "
                                  f"{u['explanation'][:200]}); maximal-plan input mean "
                                  f"{u.get('maximal_plan_input_mean')}, centering its leaves changes "
                                  f"outputs by {u.get('centering_changes_output', 'n/a')}")
    return result


# ---------------------------------------------------------------- expectations

def expectation_of(result: dict) -> dict:
    """LN count, foldable count, and per kept LN its reason; a module called twice (ALBERT's shared
    layer) has one reason per call, in graph order, joined by '+'."""
    keep: Dict[str, str] = {}
    for l in result["layer_norms"]:
        if not l["foldable"]:
            keep[l["module"]] = keep[l["module"]] + "+" + l["reason"] if l["module"] in keep else l["reason"]
    return {"layer_norms": len(result["layer_norms"]),
            "foldable": sum(1 for l in result["layer_norms"] if l["foldable"]), "keep": keep}


def load_expectations() -> dict:
    if not os.path.exists(EXPECTATIONS):
        return {}
    with open(EXPECTATIONS) as f:
        return json.load(f)


def load_known_gaps() -> dict:
    if not os.path.exists(KNOWN_GAPS):
        return {}
    with open(KNOWN_GAPS) as f:
        return {env: archs for env, archs in json.load(f).items() if not env.startswith("_")}


def check_known_gaps(name: str, env: str, result: dict, gaps: Dict[str, str]) -> int:
    """An architecture with listed rule gaps: every failure must be an UNCONFIRMED KEEP of a listed
    LN, and every listed LN must still be one (a fixed gap is taken off the list)."""
    prefix = "UNCONFIRMED KEEP "
    unconfirmed = {msg[len(prefix):].split(" ", 1)[0]: msg for msg in result["failures"] if msg.startswith(prefix)}
    status = 0
    for msg in result["failures"]:
        module = msg[len(prefix):].split(" ", 1)[0] if msg.startswith(prefix) else None
        if module not in gaps:
            print(f"{name} [{env}]: {msg}")
            status = 1
    for module, why in sorted(gaps.items()):
        if module in unconfirmed:
            print(f"{name} [{env}]: known rule gap {module}: {why}")
        else:
            print(f"{name} [{env}]: {module} is listed in {KNOWN_GAPS} but is no longer an unconfirmed "
                  f"KEEP: the gap is fixed; take it off the list and record the expectation")
            status = 1
    if status == 0:
        print(f"{name} [{env}]: {len(gaps)} known rule gaps, everything else confirmed by the oracle")
    return status


def check_one(name: str, env: str, results_dir: str, export: bool = False) -> int:
    """One ctest entry: the result exists, nothing failed, the verdicts equal the expectation; with
    `export`, also that its .pt2 round trip ran to the end in both --rms-op forms (a result of
    --export)."""
    path = os.path.join(results_dir, env, name + ".json")
    if not os.path.exists(path):
        print(f"corpus: no result {path} (did the corpus setup step run?)")
        return 1
    with open(path) as f:
        result = json.load(f)
    if "absent" in result:
        print(f"{name} [{env}]: declared absent in this environment ({result['absent']})")
        return 0
    gaps = load_known_gaps().get(env, {}).get(name, {})
    if gaps:
        return check_known_gaps(name, env, result, gaps)
    if result["failures"]:
        for msg in result["failures"]:
            print(f"{name} [{env}]: {msg}")
        return 1
    if torch_envs.is_torch_env(env):
        missing = torch_envs.missing_checks(result)
        if missing:
            print(f"{name} [{env}]: {missing}")
            return 1
    if export:
        e = result.get("export", {})
        for form, rec in (("aten", e), ("foldnorm", e.get("foldnorm_form", {}))):
            if "load_back_relative_float32" not in rec:
                print(f"{name} [{env}]: no .pt2 round trip in the {form} form (run the setup step with --export)")
                return 1
    got = expectation_of(result)
    # Another torch, the same libraries and weights: the verdicts must be the venv torch's (env main's).
    want = load_expectations().get("main" if torch_envs.is_torch_env(env) else env, {}).get(name)
    hint = (f"if the new verdicts are intended (and the oracle confirmed them, as it did), run:\n"
            f"  {os.path.abspath(__file__)} --update-expectations --results {results_dir} --env {env} --only {name}")
    if torch_envs.is_torch_env(env):
        hint = (f"the expectation is env main's (the venv's torch): a verdict that depends on the torch that wrote "
                f"the file is an importer bug, not a new expectation")
    if want is None:
        print(f"{name} [{env}]: no expectation in {EXPECTATIONS}; {hint}")
        return 1
    if got != want:
        print(f"{name} [{env}]: verdicts changed: expected {want['foldable']}/{want['layer_norms']} "
              f"foldable, got {got['foldable']}/{got['layer_norms']}")
        for m in sorted(set(want["keep"]) | set(got["keep"])):
            if want["keep"].get(m) != got["keep"].get(m):
                print(f"  {m}: expected {want['keep'].get(m, 'FOLD')}, got {got['keep'].get(m, 'FOLD')}")
        print(hint)
        return 1
    o = result["oracle"]
    print(f"{name} [{env}]: {got['foldable']}/{got['layer_norms']} foldable as expected; FOLD exact to "
          f"{max(o['fold_relative_float64'] or [0]):.2g}, {len(o['keeps'])} KEEPs confirmed"
          + (f"; {torch_envs.describe(result)}" if torch_envs.is_torch_env(env) else ""))
    return 0


def update_expectations(results_dir: str, envs: List[str], only: Optional[List[str]],
                        missing_only: bool = False) -> int:
    """Writes the confirmed verdicts; with missing_only, only for architectures that have no
    expectation yet (a fixed rule gap goes green, a changed verdict stays a failure to review)."""
    if any(torch_envs.is_torch_env(e) for e in envs):
        raise SystemExit("corpus: a torch2.X environment has no expectations of its own: its verdicts must "
                         "equal env main's (the venv's torch, the same libraries and weights)")
    data = load_expectations()
    changed = 0
    for env in envs:
        folder = os.path.join(results_dir, env)
        for fname in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            name = fname[:-5]
            if not fname.endswith(".json") or (only and name not in only):
                continue
            if missing_only and name in data.get(env, {}):
                continue
            with open(os.path.join(folder, fname)) as f:
                result = json.load(f)
            if "absent" in result or result["failures"]:
                say(f"{env}/{name}: not written (it has failures: only confirmed verdicts go in)")
                continue
            data.setdefault(env, {})[name] = expectation_of(result)
            changed += 1
    tmp = EXPECTATIONS + ".partial"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, EXPECTATIONS)
    say(f"wrote {changed} expectations to {EXPECTATIONS}")
    return 0


# ---------------------------------------------------------------- main

def write_atomic_json(path: str, obj: dict) -> None:
    tmp = path + ".partial"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def run_env(env: str, args) -> int:
    import importlib
    import torch
    import corpus_lib
    import oracle
    torch.set_num_threads(1)
    for mod in BUILDER_MODULES:
        if os.path.exists(os.path.join(HERE, mod + ".py")):
            importlib.import_module(mod)
    registry = corpus_lib.REGISTRY
    if args.expect_names:
        with open(args.expect_names) as f:
            listed = {line.split()[0] for line in f if line.strip()}
        if listed != set(registry):
            raise SystemExit(f"corpus: the ctest entries ({len(listed)}) and the registry ({len(registry)}) "
                             f"differ: {sorted(listed ^ set(registry))}; re-run cmake")
    names = [n for n, a in registry.items()
             if env == "main" or (a.old if env == "old" else n in torch_envs.CORPUS_ARCHITECTURES)]
    if args.only:
        unknown = sorted(set(args.only) - set(registry))
        if unknown:
            raise SystemExit(f"corpus: unknown architectures {unknown}")
        names = [n for n in names if n in args.only]
    versions = library_versions()
    if env == "old" and any(versions.get(k) != v for k, v in OLD_PINS.items()):
        raise SystemExit(f"corpus: the old environment has {versions}, expected {OLD_PINS}")
    if torch_envs.is_torch_env(env):
        torch_envs.check_versions(env, versions)
    shash = scripts_hash(builder_files())
    vkey = json.dumps(versions, sort_keys=True)
    tool = sha256_file(args.foldnorm) + sha256_file(args.ops) + scripts_hash(CHECKER_FILES) + \
        ("|export" if args.export else "")
    out_dir = os.path.join(args.results, env)
    os.makedirs(out_dir, exist_ok=True)
    say(f"{env}: {len(names)} architectures; versions {versions}")
    start, failed = time.time(), 0
    for i, name in enumerate(names, 1):
        tkey = hashlib.sha256(f"{shash}|{name}|{vkey}".encode()).hexdigest()
        keys = {"trace": tkey, "result": hashlib.sha256(f"{tkey}|{tool}".encode()).hexdigest()}
        cached = os.path.join(CACHE, env, name, f"result-{keys['result'][:16]}.json")
        t = time.time()
        if os.path.exists(cached) and not args.force:
            with open(cached) as f:
                result = json.load(f)
            how = "cached"
        else:
            try:
                result = run_architecture(registry[name], env, args, versions, keys)
            except (Failed, oracle.OracleError) as e:
                result = {"name": name, "env": env, "library": registry[name].library,
                          "family": registry[name].family, "versions": versions,
                          "failures": [("oracle: " if isinstance(e, oracle.OracleError) else "") + str(e)]}
            except Exception as e:  # noqa: BLE001 (the oracle or the driver on a new model: report, go on)
                result = {"name": name, "env": env, "library": registry[name].library,
                          "family": registry[name].family, "versions": versions,
                          "failures": [f"driver error: {type(e).__name__}: {e}"],
                          "traceback": traceback.format_exc()[-3000:]}
            result["seconds_total"] = time.time() - t
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            write_atomic_json(cached, result)
            how = f"{time.time() - t:.1f} s"
        write_atomic_json(os.path.join(out_dir, name + ".json"), result)
        if result.get("failures"):
            failed += 1
            verdict = "FAILED: " + result["failures"][0][:160]
        elif "absent" in result:
            verdict = "absent in this environment"
        else:
            s = result["summary"]
            verdict = f"{s['foldable']}/{s['layer_norms']} foldable, oracle confirmed"
        say(f"[{i}/{len(names)}] {env}/{name}: {verdict} ({how})")
    say(f"{env}: {len(names)} architectures in {time.time() - start:.0f} s, {failed} with failures "
        f"(each named by its own ctest entry)")
    return 0


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", choices=["main", "old"] + sorted(torch_envs.TORCH_ENVS) +
                   sorted(torch_envs.LEGACY_ENVS) + sorted(torch_envs.CUDA13_ENVS), default="main")
    p.add_argument("--only", nargs="+")
    p.add_argument("--foldnorm", help="the foldnorm binary")
    p.add_argument("--ops", help="libfoldnorm_ops.so (to load folded files)")
    p.add_argument("--results", required=True, help="folder of <env>/<name>.json")
    p.add_argument("--force", action="store_true", help="ignore cached results (traces are still reused)")
    p.add_argument("--check", metavar="NAME", help="check one result against its expectation (ctest)")
    p.add_argument("--update-expectations", action="store_true")
    p.add_argument("--missing-only", action="store_true",
                   help="with --update-expectations: leave existing expectations as they are")
    p.add_argument("--export", action="store_true",
                   help="env main: also export each model (torch.export) and run the .pt2 round trip "
                        "(analyze, fold in both --rms-op forms, torch.export.load) into its result")
    p.add_argument("--expect-names", help="file of the names ctest has entries for (from CMake)")
    args = p.parse_args(argv)
    if args.export and args.env != "main" and not args.check:
        raise SystemExit("corpus: --export is for env main (the torch2.X environments always export)")
    if args.check:
        return check_one(args.check, args.env, args.results, args.export)
    if args.update_expectations:
        return update_expectations(args.results, [args.env], args.only, args.missing_only)
    for what, path in (("--foldnorm", args.foldnorm), ("--ops", args.ops)):
        if not path or not os.path.isfile(path):
            raise SystemExit(f"corpus: {what} must name an existing file (got {path})")
    args.foldnorm, args.ops = os.path.abspath(args.foldnorm), os.path.abspath(args.ops)
    if args.env != "main" and os.environ.get("FOLDNORM_CORPUS_CHILD") != args.env:
        status = reexec_in_env(args.env, argv)
        if status == 0 and torch_envs.is_torch_env(args.env):
            check_in_venv_torch(args.env, args.results)
        return status
    return run_env(args.env, args)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.exit(main(sys.argv[1:]))
