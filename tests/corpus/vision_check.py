"""Stand-alone check of the timm and torchvision corpus builders, before and beside the driver.

For every selected architecture: build, corpus_lib.prepare, check that no norm or LayerScale
parameter is degenerate, torch.jit.trace, save with the embedded input spec, check the trace against
eager on two inputs and that the second input changes the output, then run
`foldnorm analyze --json` on the saved file and print the LayerNorm count, the foldable count and
the reasons. It proves the builders; it does not confirm verdicts (the float64 oracle of the
driver does that).

    python tests/corpus/vision_check.py [--filter REGEX] [--old] [--foldnorm BIN] [--out DIR] [--json FILE]

Exit status 1 when any architecture fails a check or foldnorm fails on its trace.

The old=True builders (then including the torchvision ones, unmarked since: the driver's old
environment keeps torch 2.11, see tv_corpus.py) were run (--old) under torch 2.0.1 + torchvision
0.15.2 + timm 0.9.16 (+ numpy<2), the oldest pair with CPython 3.11 wheels on PyPI (torchvision 0.14 has none); `pip install` of those
pins into a fresh venv pulls the CUDA 11 wheels, about 4.4 GB. Every timm builder also builds under
timm 0.9.16 with torch 2.11.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "tests", "fixtures")]

import corpus_lib  # noqa: E402
import timm_corpus  # noqa: E402,F401  (registers the timm architectures)
import tv_corpus  # noqa: E402,F401  (registers the torchvision architectures)
from fixture_lib import save_traced  # noqa: E402

# A second random image must move the logits by more than this (relative): an output that does not
# depend on its input makes every fold look exact.
MIN_INPUT_EFFECT = 1e-3
TRACE_RTOL, TRACE_ATOL = 1e-4, 1e-5
SCALE_NAMES = re.compile(r"(^|\.)(gamma(_\d)?|ls\d?\.gamma|layer_scale\w*|alpha|beta)$")


class CheckError(Exception):
    pass


def norm_modules(model: nn.Module):
    """(LayerNorm modules incl. subclasses such as timm's LayerNorm2d, GroupNorms, other norms)."""
    lns, gns, other = [], [], []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.LayerNorm):
            lns.append(name)
        elif isinstance(mod, nn.GroupNorm):
            gns.append(name)
        elif "Norm" in type(mod).__name__ or type(mod).__name__ == "Affine":
            if not isinstance(mod, nn.modules.batchnorm._BatchNorm):
                other.append(f"{name} ({type(mod).__name__})")
    return lns, gns, other


def degenerate_parameters(model: nn.Module):
    """Norm affines and LayerScale vectors whose entries are all equal or that hold a zero: with
    those, centering mistakes cancel (a constant gamma is a scalar) or divide by zero (section 7)."""
    bad = []
    for mname, mod in model.named_modules():
        is_norm = isinstance(mod, (nn.LayerNorm, nn.GroupNorm)) or type(mod).__name__ == "Affine"
        for pname, p in mod.named_parameters(recurse=False):
            full = f"{mname}.{pname}" if mname else pname
            if not (is_norm or SCALE_NAMES.search(full)) or p.numel() < 2:
                continue
            flat = p.detach().reshape(-1)
            if bool((flat == flat[0]).all()):
                bad.append(f"{full}: all entries {float(flat[0]):g}")
            elif "weight" in pname or "gamma" in full or "alpha" in pname or "layer_scale" in full:
                if bool((flat == 0).any()):
                    bad.append(f"{full}: holds a zero")
    return bad


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def check_torch(arch: corpus_lib.Architecture, out_dir: str) -> dict:
    t0 = time.time()
    sample = corpus_lib.prepare(arch.build())
    model, inputs = sample.model, sample.inputs
    lns, gns, other = norm_modules(model)
    bad = degenerate_parameters(model)
    if bad:
        raise CheckError("degenerate after prepare: " + "; ".join(bad[:4]))
    second = tuple(corpus_lib.image(*x.shape, seed=1) for x in inputs)
    with torch.no_grad():
        eager = corpus_lib.as_tuple(model(*inputs))
        eager2 = corpus_lib.as_tuple(model(*second))
        traced = torch.jit.trace(model, inputs, check_trace=False)
        got = corpus_lib.as_tuple(traced(*inputs))
        got2 = corpus_lib.as_tuple(traced(*second))
    for e, g, e2, g2 in zip(eager, got, eager2, got2):
        close = (torch.allclose(g, e, TRACE_RTOL, TRACE_ATOL)
                 and torch.allclose(g2, e2, TRACE_RTOL, TRACE_ATOL))
        if not close:
            raise CheckError(f"trace differs from eager: {relative(g, e):.2e} / {relative(g2, e2):.2e}")
    effect = min(relative(e2, e) for e, e2 in zip(eager, eager2))
    if not effect > MIN_INPUT_EFFECT:
        raise CheckError(f"output barely depends on the input (a second image moves it by {effect:.1e})")
    path = os.path.join(out_dir, f"{arch.name}.pt")
    save_traced(path, traced, sample.specs)
    return dict(path=path, ln_modules=len(lns), group_norms=len(gns), other_norms=other,
                params=sum(p.numel() for p in model.parameters()), input_effect=effect,
                notes=sample.notes, torch_s=round(time.time() - t0, 2))


def run_foldnorm(binary: str, path: str) -> dict:
    t0 = time.time()
    proc = subprocess.run([binary, "analyze", path, "--json"], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        raise CheckError(f"foldnorm analyze rc={proc.returncode}: {' | '.join(tail)}")
    report = json.loads(proc.stdout)
    reasons = collections.Counter(ln["reason"] for ln in report["layer_norms"] if not ln["foldable"])
    examples = {}
    for ln in report["layer_norms"]:
        if not ln["foldable"] and ln["reason"] not in examples:
            examples[ln["reason"]] = f"{ln['module']}: {ln.get('explanation', '')}"
    return dict(layer_norms=report["summary"]["layer_norms"], foldable=report["summary"]["foldable"],
                foldable_modules=[ln["module"] for ln in report["layer_norms"] if ln["foldable"]],
                reasons=dict(reasons), examples=examples, foldnorm_s=round(time.time() - t0, 2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--filter", default="^(timm|tv)-", help="regex over architecture names")
    ap.add_argument("--old", action="store_true", help="only the architectures marked old=True")
    ap.add_argument("--foldnorm", default=os.path.join(ROOT, "build", "bin", "foldnorm"),
                    help="foldnorm binary ('' to skip the analysis)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "corpus-vision"), help="where traces go")
    ap.add_argument("--json", default="", help="also write the results here")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    archs = [a for n, a in sorted(corpus_lib.REGISTRY.items())
             if re.search(args.filter, n) and (a.old or not args.old)]
    if not archs:
        print(f"no architecture matches '{args.filter}'", file=sys.stderr)
        return 1
    import torchvision
    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__}
    try:
        import timm
        versions["timm"] = timm.__version__
    except ImportError:
        versions["timm"] = None
    print(json.dumps(versions))
    results, failed = {}, 0
    for arch in archs:
        row = dict(library=arch.library, family=arch.family, old=arch.old)
        try:
            row.update(check_torch(arch, args.out))
            if args.foldnorm:
                row.update(run_foldnorm(args.foldnorm, row["path"]))
                if row["layer_norms"] != row["ln_modules"]:
                    row["mismatch"] = (f"eager has {row['ln_modules']} LayerNorm modules, "
                                       f"foldnorm sees {row['layer_norms']}")
            print(f"{arch.name:28s} LNs {row.get('layer_norms', row['ln_modules']):3} foldable "
                  f"{row.get('foldable', '-'):>3}  {row.get('reasons', '')}  GN {row['group_norms']}"
                  f"  effect {row['input_effect']:.2f}  {row['torch_s']}s+{row.get('foldnorm_s', 0)}s"
                  + (f"  !! {row['mismatch']}" if "mismatch" in row else ""), flush=True)
        except Exception as err:  # one architecture's failure must not hide the others'
            failed += 1
            row["error"] = f"{type(err).__name__}: {err}"
            print(f"{arch.name:28s} FAILED {row['error'][:400]}", flush=True)
        results[arch.name] = row
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(versions=versions, results=results), f, indent=1)
    print(f"{len(archs) - failed} of {len(archs)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
