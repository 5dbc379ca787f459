"""Other torch versions as corpus environments: models traced AND exported by a torch that is not ours.

foldnorm links the torch of the venv (2.14.1), but the files it meets are written by whatever torch a
user has. An environment `torch2.X` (TORCH_ENVS) is that torch and its torchvision installed with
`pip --target` under $FOLDNORM_CACHE/torch-envs (keyed by their versions; with the nvidia-* wheels
torch names, which `import torch` loads even on a CPU) and put first on PYTHONPATH; transformers and timm stay
the venv's. For each architecture of CORPUS_ARCHITECTURES the driver there, besides the usual trace
(folded with `--rms-op aten`, so the file needs no foldnorm library), also

  - exports it (torch.export.export, strict=False, outside no_grad, as users do) and saves the .pt2;
  - runs `foldnorm analyze --json` on the .pt2: its verdicts must equal the trace's, LN by LN;
  - folds the .pt2 (the default aten form): foldnorm's float64 verification must say equivalent;
  - loads both folded files back IN THAT TORCH (torch.jit.load, torch.export.load, no foldnorm
    library) and runs them on two input sets against the eager model (float32, <= 1e-5 relative);
  - records the schema versions of the original and the folded .pt2.

Back in the venv's torch the parent process loads the same folded files once more
(`check_in_this_torch`): a file folded from a torch 2.10 export must run in both.
"""
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import zipfile
from typing import Callable, Dict, List

# torch and its torchvision (the pair torchvision's release notes name).
TORCH_ENVS = {
    "torch2.10": {"torch": "2.10.0", "torchvision": "0.25.0"},
    "torch2.9": {"torch": "2.9.1", "torchvision": "0.24.1"},
}
# Sweep only (version_sweep.py): torch before the 2.9 archive layout. Their traces get the whole
# check; their .pt2 must be refused in one line.
LEGACY_ENVS = {
    "torch2.8": {"torch": "2.8.0", "torchvision": "0.23.0"},
    "torch2.7": {"torch": "2.7.1", "torchvision": "0.22.1"},
    "torch2.5": {"torch": "2.5.1", "torchvision": "0.20.1"},
}
# Sweep only: CUDA 13 builds, which take the venv's CUDA toolkit wheels and install the nvidia-*
# wheels they name. torch 2.11 is the lent GPU machine's torch (2.11.0+cu130) and was the venv's
# until issue 32; 2.15 has no torchvision on PyPI yet (the venv's torchvision breaks transformers'
# imports under another torch), so the newest torch a sweep can hold is the venv's own 2.14.1.
CUDA13_ENVS = {"torch2.11": {"torch": "2.11.0", "torchvision": "0.26.0"}}
# All of these are CUDA 12 builds; every one but CUDA_DONOR loads the CUDA libraries of the donor's
# install (the same sonames; 2.9 and 2.10 pin the same wheels but nvshmem), saving 5 GB each.
CUDA_DONOR = "torch2.10"
# transformers 5 needs torch >= 2.6: torch 2.5 runs with the "old" environment's transformers and timm
# (4.41.2, 0.9.16: its own era), layered between it and the venv.
WITH_OLD_LIBRARIES = {"torch2.5"}
FOLD_FILE_REL = 1e-5
# The corpus architectures with ctest entries in every TORCH_ENVS environment: the three libraries,
# decoder, post-LN encoder, speech encoder-decoder, ViT, hierarchical, LayerNorm2d (permuted). Kept
# here, not as a builder flag, so choosing them leaves the main corpus's trace cache valid.
# tests/corpus/CMakeLists.txt reads this list: keep it one literal list of names.
CORPUS_ARCHITECTURES = ["hf-gpt2", "hf-bert", "hf-whisper", "timm-vit_tiny", "timm-swin_tiny", "tv-convnext"]


def pins_of(env: str) -> Dict[str, str]:
    return TORCH_ENVS.get(env) or LEGACY_ENVS.get(env) or CUDA13_ENVS[env]


def is_torch_env(env: str) -> bool:
    return env in TORCH_ENVS or env in LEGACY_ENVS or env in CUDA13_ENVS


def is_legacy(env: str) -> bool:
    return env in LEGACY_ENVS


def env_key(env: str) -> str:
    return "-".join(f"{k}{v}" for k, v in sorted(pins_of(env).items()))


def env_dir(cache: str, env: str) -> str:
    """Under $FOLDNORM_CACHE/torch-envs (cache is $FOLDNORM_CACHE/corpus)."""
    return os.path.join(os.path.dirname(cache), "torch-envs", env_key(env))


def cuda_pins(target: str) -> List[str]:
    """The nvidia-* wheels the installed torch names (its METADATA): the PyPI wheel links its CUDA
    libraries, so `import torch` fails without them even on a CPU-only run."""
    meta = [os.path.join(target, d, "METADATA") for d in os.listdir(target)
            if d.startswith("torch-") and d.endswith(".dist-info")]
    pins = []
    with open(meta[0]) as f:
        for line in f:
            if line.startswith("Requires-Dist: nvidia-"):
                pins.append(line.split(":", 1)[1].split(";")[0].replace(" ", ""))
    return pins


def pip_install_target(target: str, steps: List[Callable[[str], List[str]]], what: str) -> None:
    """pip --target into target + ".partial", renamed into place only when every step succeeded;
    each step gives pip's arguments (after `install --target DIR`) from the partial folder."""
    tmp = target + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    for step in steps:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "--target", tmp] + step(tmp), capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SystemExit(f"corpus: installing {what} failed: {tail[0]}")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(tmp, target)


def ensure_env(cache: str, env: str, say) -> List[str]:
    """pip --target into a fresh folder, renamed into place only when every install succeeded; the
    folders to put first on PYTHONPATH."""
    target = env_dir(cache, env)
    extra = ensure_env(cache, CUDA_DONOR, say) if env != CUDA_DONOR and env not in CUDA13_ENVS else []
    if os.path.isdir(target):
        return [target] + extra
    pins = [f"{k}=={v}" for k, v in sorted(pins_of(env).items())]
    say(f"installing {' '.join(pins)}{'' if extra else ' and their CUDA libraries'} into {target}")
    # --no-deps: torch's pure-Python dependencies are the venv's; only the CUDA wheels are added.
    steps = [lambda tmp: ["--no-deps"] + pins] + ([] if extra else [lambda tmp: ["--no-deps"] + cuda_pins(tmp)])
    pip_install_target(target, steps, f"the {env} environment")
    return [target] + extra


def check_versions(env: str, versions: Dict[str, str]) -> None:
    want = pins_of(env)
    got = {k: versions.get(k, "absent").split("+")[0] for k in want}
    if got != want:
        raise SystemExit(f"corpus: the {env} environment has {got}, expected {want}")


def pt2_versions(path: str) -> dict:
    """The schema and torch versions a .pt2's program records (models/model.json)."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/models/model.json"))
        program = json.loads(z.read(name))
    s = program.get("schema_version", {})
    return {"schema": f"{s.get('major')}.{s.get('minor')}", "torch": program.get("torch_version")}


def _max_rel(ref, got) -> float:
    import oracle
    return max(oracle.relative_diff(ref, got))


def _flat(out):
    import torch
    flat, _ = torch.utils._pytree.tree_flatten(out)
    return tuple(flat)


def foldnorm_op_calls(path: str) -> int:
    """How many nodes of a .pt2's program call foldnorm's ops (the aten form must have none: in env
    main our library is loaded anyway, so loading the file back would not show one)."""
    with zipfile.ZipFile(path) as z:
        text = z.read(next(n for n in z.namelist() if n.endswith("/models/model.json"))).decode()
    return text.count('"torch.ops.foldnorm.')


def run_folded(path: str, input_sets) -> List[tuple]:
    """The outputs of a folded file, loaded the way a user of this torch loads it (no foldnorm library)."""
    import torch
    if path.endswith(".pt2"):
        module = torch.export.load(path).module()
    else:
        module = torch.jit.load(path).eval()
    with torch.no_grad():
        return [_flat(module(*inputs)) for inputs in input_sets]


def verdicts(layer_norms) -> List[list]:
    """(module, foldable) per LN call, sorted: the two importers may list the calls in another order."""
    return sorted([l["module"], bool(l["foldable"])] for l in layer_norms)


def export_and_fold(sample, input_sets, eager, work: str, keys: Dict[str, str], args, result: dict,
                    run_tool, forms=("aten",)) -> None:
    """The .pt2 half of a torch-env entry (module doc); appends to result['failures']. forms: the
    `--rms-op` forms to fold and load back; "foldnorm" (env main only: our library is built for the
    venv's torch) is loaded after torch.ops.load_library(args.ops), into result['export']['foldnorm_form']."""
    import torch
    pt2 = os.path.join(work, f"export-{keys['trace'][:16]}.pt2")
    if not os.path.exists(pt2):
        t = time.time()
        try:
            ep = torch.export.export(sample.model, tuple(sample.inputs), strict=False)
            torch.export.save(ep, pt2 + ".partial.pt2")
        except Exception as e:  # noqa: BLE001 (this torch cannot export the model: say so, go on)
            result["failures"].append(f"torch.export in torch {torch.__version__} failed: "
                                      f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
            result["export_traceback"] = traceback.format_exc()[-3000:]
            return
        os.replace(pt2 + ".partial.pt2", pt2)
        result["seconds"]["export_only"] = time.time() - t
    if is_legacy(result["env"]):
        result["export"] = refused_in_one_line(args.foldnorm, pt2, result)
        return
    analysis = json.loads(run_tool([args.foldnorm, "analyze", "--json", pt2], 300).stdout)
    out = {"file": pt2, "versions": pt2_versions(pt2), "summary": analysis["summary"]}
    result["export"] = out
    mine, theirs = verdicts(analysis["layer_norms"]), verdicts(result["layer_norms"])
    if mine != theirs:
        diff = [f"{a} vs {b}" for a, b in zip(mine, theirs) if a != b][:3]
        result["failures"].append(f".pt2 verdicts differ from the trace's: {len(mine)} LNs vs "
                                  f"{len(theirs)}; (.pt2 vs trace) {diff}")
        return
    for form in forms:
        # the aten form (the .pt2 default) keeps its keys at the top of result['export']
        rec = out if form == "aten" else out.setdefault(f"{form}_form", {})
        _fold_and_load(pt2, form, input_sets, eager, keys, args, result, run_tool, analysis, out, rec)


def _fold_and_load(pt2: str, form: str, input_sets, eager, keys, args, result, run_tool, analysis,
                   out: dict, rec: dict) -> None:
    import torch
    tag = "" if form == "aten" else f" (--rms-op {form})"
    what, file = "the .pt2 fold" + tag, "the folded .pt2" + tag
    folded = os.path.join(os.path.dirname(pt2), f"folded-{keys['result'][:16]}" +
                          ("" if form == "aten" else f"-{form}") + ".pt2")
    report = json.loads(run_tool([args.foldnorm, "fold", pt2, "-o", folded, "--json"] +
                                 ([] if form == "aten" else ["--rms-op", form]), 600).stdout)
    ver = report.get("verification", {})
    rec["tool_fold"] = {k: ver.get(k) for k in ("float64_equivalent", "worst_relative_float64")}
    if analysis["summary"]["foldable"] and ver.get("float64_equivalent") is not True:
        result["failures"].append(f"{what} is not float64-equivalent ({ver.get('worst_relative_float64')})")
    rec["folded_file"] = folded
    rec["folded_versions"] = pt2_versions(folded)
    rec["foldnorm_op_calls"] = foldnorm_op_calls(folded)
    if (rec["foldnorm_op_calls"] > 0) != (form == "foldnorm" and bool(report.get("folded"))):
        result["failures"].append(f"{file} calls foldnorm's ops {rec['foldnorm_op_calls']} times "
                                  f"({len(report.get('folded', []))} LNs folded)")
    if rec["folded_versions"]["schema"] != out["versions"]["schema"]:
        result["failures"].append(f"{file} records schema {rec['folded_versions']['schema']}, "
                                  f"the original {out['versions']['schema']}")
    try:
        if form == "foldnorm":
            torch.ops.load_library(args.ops)
        got = run_folded(folded, input_sets)
        rec["load_back_relative_float32"] = max(_max_rel(e, g) for e, g in zip(eager, got))
    except Exception as e:  # noqa: BLE001 (the finding: this torch cannot load what we wrote)
        result["failures"].append(f"torch {torch.__version__} cannot load {file}: "
                                  f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
        return
    if rec["load_back_relative_float32"] > FOLD_FILE_REL:
        result["failures"].append(f"{file} loaded in torch {torch.__version__} differs from eager by "
                                  f"{rec['load_back_relative_float32']:.3g} relative")


def refused_in_one_line(foldnorm: str, pt2: str, result: dict) -> dict:
    """A pre-2.9 archive: foldnorm must say so in one line and exit non-zero, without a crash."""
    r = subprocess.run([foldnorm, "analyze", pt2], capture_output=True, text=True, timeout=120)
    # "[foldnorm] ..." lines are progress on stderr, not part of the message
    lines = [l for l in (r.stderr + r.stdout).strip().splitlines() if l.strip() and not l.startswith("[foldnorm]")]
    out = {"file": pt2, "exit": r.returncode, "message": lines}
    if r.returncode <= 0 or len(lines) != 1 or "layout" not in lines[0]:
        result["failures"].append(f"a pre-2.9 .pt2 was not refused in one line naming its layout: exit "
                                  f"{r.returncode}, {len(lines)} lines: {' | '.join(lines)[:300]}")
    else:
        out["refused"] = lines[0]
    return out


def save_reference(path: str, input_sets, eager) -> None:
    """Inputs and eager outputs, for the parent's load in its own torch."""
    import torch
    torch.save({"inputs": [list(x) for x in input_sets], "outputs": [list(o) for o in eager]}, path)


def check_in_this_torch(result: dict) -> None:
    """In the venv's torch: the folded .pt and .pt2 written from the other torch's files load and
    match the eager outputs recorded there."""
    import torch
    ref_path = result.get("reference_file")
    if not ref_path or not os.path.exists(ref_path):
        return
    ref = torch.load(ref_path)
    checks = result.setdefault("load_in_venv_torch", {"torch": torch.__version__})
    for what, path in (("pt", result.get("folded_trace_file")), ("pt2", result.get("export", {}).get("folded_file"))):
        if not path or not os.path.exists(path):
            continue
        try:
            got = run_folded(path, ref["inputs"])
            rel = max(_max_rel(tuple(o), g) for o, g in zip(ref["outputs"], got))
        except Exception as e:  # noqa: BLE001
            result["failures"].append(f"torch {torch.__version__} cannot load the folded .{what}: "
                                      f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}")
            continue
        checks[what] = rel
        if rel > FOLD_FILE_REL:
            result["failures"].append(f"the folded .{what} loaded in torch {torch.__version__} differs "
                                      f"from eager by {rel:.3g} relative")


def missing_checks(result: dict) -> str:
    """What a passing torch-env result lacks (empty when complete): every check must have run."""
    legacy = is_legacy(result["env"])
    if "export" not in result or ("refused" if legacy else "load_back_relative_float32") not in result["export"]:
        return "no .pt2 round trip in the result (an old driver's result? rerun the setup step)"
    venv = result.get("load_in_venv_torch", {})
    if "pt" not in venv or ("pt2" not in venv and not legacy):
        return "the folded files were not loaded in the venv's torch (rerun the setup step)"
    return ""


def describe(result: dict) -> str:
    e, venv = result["export"], result["load_in_venv_torch"]
    if is_legacy(result["env"]):
        return f".pt2 refused: {e['refused']}; the folded .pt loads in torch {venv['torch']} ({venv['pt']:.2g})"
    return (f".pt2 (schema {e['versions']['schema']}) same verdicts, folded float64 "
            f"{e['tool_fold']['worst_relative_float64']:.2g}, loads in torch {result['versions']['torch']} "
            f"({e['load_back_relative_float32']:.2g}) and {venv['torch']} (.pt {venv['pt']:.2g}, .pt2 {venv['pt2']:.2g})")
