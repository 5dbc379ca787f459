"""Every fixture foldnorm folds must load in Python (issue 31): fold, then load in another process.

Usage: check_fixture_folds.py --foldnorm BIN --ops LIBRARY --models DIR --out DIR [--only NAME...]

For every model the test fixtures wrote into DIR (the traced fixtures of make_models.py, listed in
manifest.json; the torch.export fixtures of export_models.py and their traced twins, listed in
export_manifest.json) and both forms of the folded LayerNorm (--rms-op foldnorm and aten):
  - `foldnorm fold MODEL -o OUT --json` succeeds, and its report says the saved file was loaded
    back (saved_file.reloaded: foldnorm's own check of what it wrote);
  - a separate Python process (a fresh interpreter: nothing of foldnorm in it but, for the foldnorm
    form, libfoldnorm_ops.so; the aten form with torch alone) loads OUT with torch.jit.load or
    torch.export.load and runs it on two input sets drawn from the model's spec; its outputs equal
    the original file's (loaded the same way) within 1e-4 relative (float32; the fold is verified
    in float64 by foldnorm itself).
Exits 1 naming every problem; 0 when all hold; 77 (skipped) when DIR holds no fixture.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
TOLERANCE = 1e-4
# Fixtures that are not models to fold: the scripted one is refused by design (prim::If).
NOT_FOLDED = {"scripted_control_flow", "invalid"}


def models_in(models_dir, only):
    """(name, path) of every fixture model in `models_dir`, both trace forms."""
    found = []
    try:
        with open(os.path.join(models_dir, "manifest.json")) as f:
            traced = json.load(f).get("fixtures", {})
    except (OSError, ValueError):
        traced = {}
    for name, entry in sorted(traced.items()):
        if name in NOT_FOLDED or "expectation" not in entry or entry.get("status") in ("skipped", "failed"):
            continue
        found.append((name, os.path.join(models_dir, entry["file"])))
    try:
        with open(os.path.join(models_dir, "export_manifest.json")) as f:
            exported = json.load(f)
    except (OSError, ValueError):
        exported = {}
    for name, entry in sorted(exported.items()):
        if "error" in entry:
            continue
        for ext in (".pt2", ".pt"):
            path = os.path.join(models_dir, name + ext)
            if os.path.exists(path):
                found.append((name + ext.replace(".", "-"), path))
    if only:
        found = [m for m in found if m[0] in only]
    return [m for m in found if os.path.exists(m[1])]


def fold(foldnorm, name, path, form, out_dir):
    """Runs the CLI; returns (folded path, problems)."""
    ext = ".pt2" if path.endswith(".pt2") else ".pt"
    out = os.path.join(out_dir, f"{name}.{form}{ext}")
    if os.path.exists(out):
        os.remove(out)
    cmd = [foldnorm, "fold", path, "-o", out, "--rms-op", form, "--random", "0", "--json"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        return None, [f"{name} [{form}]: cannot run {foldnorm}: {e}"]
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        return None, [f"{name} [{form}]: foldnorm fold exited {r.returncode}: {tail}"]
    try:
        report = json.loads(r.stdout)
    except ValueError:
        return None, [f"{name} [{form}]: the fold report is not JSON"]
    problems = []
    if not report.get("saved_file", {}).get("reloaded"):
        problems.append(f"{name} [{form}]: the report does not say the saved file was loaded back")
    if not os.path.exists(out):
        problems.append(f"{name} [{form}]: foldnorm exited 0 but wrote no {out}")
        return None, problems
    return out, problems


def load_and_compare(jobs, library):
    """In this (fresh) process: load each folded file and its original, compare on two input sets."""
    import torch
    sys.path.insert(0, FIXTURES)
    from fixture_lib import INPUT_SPEC_EXTRA_FILE, make_inputs
    if library:
        torch.ops.load_library(library)
    problems = []

    def load(path):
        if path.endswith(".pt2"):
            ep = torch.export.load(path)
            example = ep.example_inputs
            keyword = example is not None and len(example[0]) == 0 and len(example[1]) > 0
            names = list(example[1].keys()) if keyword else []
            m = ep.module()
            return (lambda *xs: m(**dict(zip(names, xs)))) if keyword else m, example
        extra = {INPUT_SPEC_EXTRA_FILE: ""}
        m = torch.jit.load(path, _extra_files=extra)
        specs = json.loads(extra[INPUT_SPEC_EXTRA_FILE])["inputs"] if extra[INPUT_SPEC_EXTRA_FILE] else None
        return m, specs

    def input_sets(meta):
        if isinstance(meta, list):  # a TorchScript file's embedded spec
            return [make_inputs(meta, seed) for seed in (1, 2)]
        flat, _ = torch.utils._pytree.tree_flatten(meta)  # a .pt2's example inputs, then a second set
        second = [t.clone().random_(0, max(2, int(t.max()) + 1)) if not t.is_floating_point()
                  else torch.randn_like(t) for t in flat]
        return [flat, second]

    for name, original, folded in jobs:
        try:
            ref, meta = load(original)
            got, _ = load(folded)
        except Exception as e:  # noqa: BLE001 (what the loader says is the finding)
            line = next((l for l in str(e).splitlines() if "Expected" in l or "rror" in l), str(e).splitlines()[0])
            problems.append(f"{name}: Python cannot load {os.path.basename(folded)}: {line.strip()}")
            continue
        if meta is None:
            problems.append(f"{name}: the original holds no input spec to run it with")
            continue
        with torch.no_grad():
            for s, inputs in enumerate(input_sets(meta)):
                try:
                    want, _ = torch.utils._pytree.tree_flatten(ref(*inputs))
                    have, _ = torch.utils._pytree.tree_flatten(got(*inputs))
                except Exception as e:  # noqa: BLE001
                    problems.append(f"{name}: running {os.path.basename(folded)} failed: {str(e).splitlines()[0]}")
                    break
                want = [t for t in want if isinstance(t, torch.Tensor)]
                have = [t for t in have if isinstance(t, torch.Tensor)]
                if len(want) != len(have):
                    problems.append(f"{name}: {len(have)} outputs, the original has {len(want)}")
                    break
                for i, (w, h) in enumerate(zip(want, have)):
                    if not w.is_floating_point():
                        ok = torch.equal(w, h)
                        err = 0.0 if ok else float("inf")
                    else:
                        err = float((h.double() - w.double()).abs().max() / w.double().abs().max().clamp_min(1e-30))
                    if not err <= TOLERANCE:
                        problems.append(f"{name}: output {i} on input set {s + 1} differs from the original's "
                                        f"(relative {err:.3e} > {TOLERANCE:.0e})")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--foldnorm")
    ap.add_argument("--ops")
    ap.add_argument("--models")
    ap.add_argument("--out")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--load-jobs", help=argparse.SUPPRESS)  # the child: a JSON file of jobs
    ap.add_argument("--library", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.load_jobs:
        with open(args.load_jobs) as f:
            problems = load_and_compare(json.load(f), args.library)
        for p in problems:
            print(p)
        return 1 if problems else 0

    models = models_in(args.models, args.only)
    if not models:
        print(f"skipped: no fixture models in {args.models}")
        return 77
    os.makedirs(args.out, exist_ok=True)
    t0 = time.monotonic()
    problems, jobs = [], {"foldnorm": [], "aten": []}
    for name, path in models:
        for form in ("foldnorm", "aten"):
            out, found = fold(args.foldnorm, name, path, form, args.out)
            problems += found
            if out:
                jobs[form].append((name + f" [{form}]", path, out))
        print(f"[{time.monotonic() - t0:6.1f}s] folded {name}", flush=True)
    # One fresh Python per form: the aten form's loads must not see our op library at all.
    for form, library in (("aten", ""), ("foldnorm", args.ops)):
        job_file = os.path.join(args.out, f"jobs-{form}.json")
        with open(job_file, "w") as f:
            json.dump(jobs[form], f)
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--load-jobs", job_file,
                            "--library", library], capture_output=True, text=True)
        problems += [l for l in r.stdout.splitlines() if l.strip()]
        if r.returncode not in (0, 1):
            problems.append(f"the {form} loader process failed (exit {r.returncode}): "
                            f"{(r.stderr.strip().splitlines() or [''])[-1]}")
    n = sum(len(j) for j in jobs.values())
    print(f"{len(models)} models, {n} folded files loaded in a separate Python process, "
          f"{time.monotonic() - t0:.0f} s")
    for p in problems:
        print("PROBLEM:", p)
    print("all folded fixtures load in Python and match" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
