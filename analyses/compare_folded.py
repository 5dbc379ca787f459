"""Runs an original and its folded TorchScript model in Python and compares their outputs.

Usage: compare_folded.py ORIGINAL.pt FOLDED.pt --input 1x128:int64[0,50257) [--seed 1]

What a user's Python does with a folded file: `import foldnorm` (which loads the op library),
`torch.jit.load`, call. Two inputs drawn from the spec (integers in [lo, hi), floats normal);
each model is loaded alone (the original's outputs kept, the model dropped) so a model as large
as GPT-2 XL needs its bytes twice at most, not three times. Prints per input the worst
|difference| / max |original| and how many argmax positions agree, and checks the two inputs give
different outputs (a model that ignores its input proves nothing). Exit 1 when an output differs
by more than --tolerance (relative to its largest magnitude) or the inputs do not matter.
"""
import argparse
import re
import sys
import time

import torch

import foldnorm  # noqa: F401  (registers foldnorm::rms_norm and foldnorm::add_rms_norm)


def make_input(spec, generator):
    m = re.fullmatch(r"([0-9x]+):(\w+)(?:\[(-?[0-9.]+),(-?[0-9.]+)\))?", spec)
    if not m:
        raise SystemExit(f"compare_folded: bad --input '{spec}' (SHAPE:DTYPE[lo,hi), e.g. 1x128:int64[0,50257))")
    shape = [int(d) for d in m.group(1).split("x")]
    dtype = getattr(torch, m.group(2))
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator, dtype=dtype)
    lo, hi = int(float(m.group(3) or 0)), int(float(m.group(4) or 2))
    return torch.randint(lo, hi, shape, generator=generator, dtype=dtype)


def first_tensor(out):
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def run(path, inputs):
    with torch.inference_mode():
        model = torch.jit.load(path)
        model.eval()
        return [first_tensor(model(*x)) for x in inputs], str(model.inlined_graph)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("original")
    p.add_argument("folded")
    p.add_argument("--input", action="append", required=True, help="one per model input, SHAPE:DTYPE[lo,hi)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tolerance", type=float, default=1e-4)
    a = p.parse_args()
    start = time.time()
    g = torch.Generator().manual_seed(a.seed)
    inputs = [[make_input(s, g) for s in a.input] for _ in range(2)]
    ref, _ = run(a.original, inputs)
    out, graph = run(a.folded, inputs)
    ok = True
    for k, (r, o) in enumerate(zip(ref, out)):
        rel = ((r.double() - o.double()).abs().max() / r.double().abs().max()).item()
        same = (r.argmax(-1) == o.argmax(-1)).float().mean().item()
        print(f"input {k + 1}: output {tuple(o.shape)} {o.dtype}: max |diff| / max |original| {rel:.2e}, "
              f"argmax equal at {100 * same:.2f}% of positions")
        ok = ok and rel <= a.tolerance
    differ = not torch.equal(ref[0], ref[1])
    print(f"the two inputs give different outputs: {differ}; foldnorm ops in the folded graph: "
          f"{'foldnorm::' in graph}; torch {torch.__version__}; {time.time() - start:.0f} s")
    return 0 if ok and differ else 1


if __name__ == "__main__":
    sys.exit(main())
