"""Round trip of the .pt2 fold: foldnorm folds each torch.export fixture, Python loads the result.

Usage: check_export_fold.py --foldnorm BIN --ops LIBRARY --out DIR

For every program of tests/fixtures/export_fold_models.py and both forms of the folded LayerNorm
(--rms-op aten: aten.rms_norm + a bias add; --rms-op foldnorm: foldnorm::rms_norm):
  - `foldnorm fold X.pt2 -o Y.pt2 --json` succeeds and its float64 verification (the C++
    interpreter) says equivalent, worst relative error <= 1e-9;
  - torch.export.load(Y.pt2) loads (the aten form in a fresh Python WITHOUT the foldnorm
    library, and both forms with it), the program holds the RMSNorm nodes the report promises,
    and its outputs on the example input and a second input equal the original's (from the
    fixture's reference, computed by torch.export.load of the original) within 1e-5 relative;
  - the plans beyond the paper are in the file as the report says: one aten.mean.dim per inserted
    centering, one foldnorm.add_rms_norm per fused add (the foldnorm form; none in the aten form);
    the LayerScale fixture folds every LN (scaled centerings), embed_ln inserts one centering;
  - the folded program still decomposes (run_decompositions) and runs.
Exits 1 on any problem, naming each; 0 when all hold.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "export_fold_models.py")
TOLERANCE = 1e-5


def relative(got, want):
    got, want = got.double(), want.double()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def check_load(path, ref_path, op, library, fused=0, inserted=0):
    """Loads `path` in this process and compares with the reference; returns the problems."""
    import torch
    if library:
        torch.ops.load_library(library)
    problems = []
    ep = torch.export.load(path)
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    want = "aten.rms_norm.default" if op == "aten" else "foldnorm.rms_norm.default"
    if not any(t in (want, "foldnorm.add_rms_norm.default") for t in targets):
        problems.append(f"no {want} in the loaded program")
    if targets.count("foldnorm.add_rms_norm.default") != fused:
        problems.append(f"{targets.count('foldnorm.add_rms_norm.default')} foldnorm.add_rms_norm nodes, "
                        f"the report says {fused} fused adds")
    if targets.count("aten.mean.dim") < inserted:
        problems.append(f"{targets.count('aten.mean.dim')} aten.mean.dim nodes for {inserted} inserted centerings")
    ref = torch.load(ref_path)
    m = ep.module()
    # Keyword-only programs (Hugging Face style) take their inputs by the example's keywords.
    example = ep.example_inputs
    keyword = example is not None and len(example[0]) == 0 and len(example[1]) > 0
    names = list(example[1].keys()) if keyword else []
    with torch.no_grad():
        for s, (inputs, outputs) in enumerate(zip(ref["inputs"], ref["outputs"])):
            got = m(**dict(zip(names, inputs))) if keyword else m(*inputs)
            got, _ = torch.utils._pytree.tree_flatten(got)
            if len(got) != len(outputs):
                problems.append(f"input set {s}: {len(got)} outputs, the original has {len(outputs)}")
                continue
            for i, (g, w) in enumerate(zip(got, outputs)):
                g = g if isinstance(g, torch.Tensor) else torch.tensor(g)
                if g.shape != w.shape or (w.is_floating_point() and relative(g, w) > TOLERANCE):
                    problems.append(f"input set {s} output {i}: relative error "
                                    f"{relative(g, w) if g.shape == w.shape else 'shape'} > {TOLERANCE}")
                elif not w.is_floating_point() and not torch.equal(g, w):
                    problems.append(f"input set {s} output {i} differs")
        try:
            d = ep.run_decompositions().module()
            inputs = ref["inputs"][0]
            d(**dict(zip(names, inputs))) if keyword else d(*inputs)
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            problems.append(f"run_decompositions of the folded program failed: {type(e).__name__}: {e}"[:300])
    return problems


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--foldnorm")
    p.add_argument("--ops")
    p.add_argument("--out")
    p.add_argument("--load-check", nargs=5, metavar=("PT2", "REF", "OP", "FUSED", "INSERTED"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.load_check:  # the child: load without the library
        pt2, ref, op, fused, inserted = a.load_check
        problems = check_load(pt2, ref, op, None, int(fused), int(inserted))
        print("\n".join(problems) if problems else "ok")
        return 1 if problems else 0

    src = os.path.join(a.out, "programs")
    os.makedirs(a.out, exist_ok=True)
    r = subprocess.run([sys.executable, FIXTURES, "--out", src], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"could not export the fixtures:\n{r.stderr[-2000:]}")
        return 1
    names = [f[:-4] for f in sorted(os.listdir(src)) if f.endswith(".pt2")]
    problems, results = [], []
    for name in names:
        for op in ("aten", "foldnorm"):
            where = f"{name} ({op})"
            out = os.path.join(a.out, f"{name}-{op}.pt2")
            if os.path.exists(out):
                os.remove(out)
            cmd = [a.foldnorm, "fold", os.path.join(src, name + ".pt2"), "-o", out, "--json", "--random", "2",
                   "--rms-op", op]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"{where}: foldnorm fold exited {r.returncode}: {r.stderr.strip()[-400:]}")
                continue
            report = json.loads(r.stdout)
            v = report["verification"]
            if not v["float64_equivalent"] or v["worst_relative_float64"] > 1e-9:
                problems.append(f"{where}: C++ float64 verification: {v['worst_relative_float64']:.2e}")
            if not report["folded"]:
                problems.append(f"{where}: nothing was folded")
            fused, inserted = report["fused_add_norms"], len(report["inserted_centerings"])
            if op == "aten" and fused:
                problems.append(f"{where}: {fused} fused adds in the portable form")
            if op == "foldnorm" and name in ("prenorm", "layerscale", "embed_ln") and not fused:
                problems.append(f"{where}: no residual add fused with its folded norm")
            if name == "layerscale" and report["kept"]:
                problems.append(f"{where}: LayerScale keeps {report['kept']} (scaled centerings not folded)")
            if name == "embed_ln" and (inserted != 1 or report["kept"]):
                problems.append(f"{where}: {inserted} inserted centerings, kept {report['kept']}")
            ref = os.path.join(src, name + ".ref.pt")
            if op == "aten":  # loads with torch alone: a fresh Python that never saw our library
                c = subprocess.run([sys.executable, __file__, "--load-check", out, ref, op, str(fused), str(inserted)],
                                   capture_output=True, text=True)
                if c.returncode != 0:
                    problems.append(f"{where} without the library: {(c.stdout + c.stderr).strip()[-600:]}")
            problems += [f"{where} with the library: {x}" for x in check_load(out, ref, op, a.ops, fused, inserted)]
            results.append(f"{where}: folded {len(report['folded'])}, kept {len(report['kept'])}, "
                           f"inserted {inserted}, fused {fused}, "
                           f"float64 {v['worst_relative_float64']:.1e}, float32 {v['worst_relative_float32']:.1e}")
    print("\n".join(results))
    print("\n".join(problems) if problems else f"ok: {len(results)} folded programs load and match")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
