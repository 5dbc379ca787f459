"""The saved float32 fold run in float64, against the original in float64 (what a user who checks
the file sees; foldnorm fold reports it as "saved file in float64").

Usage: saved_float64_error.py OPS_LIBRARY ORIGINAL.pt FOLDED.pt DATA.pt

DATA.pt is a TorchScript module whose buffers input_0.. hold the inputs. Prints, per output,
"output I: relative R" with R = max |folded - original| / max |original|, both modules converted
with .double() and fed float64 versions of floating inputs. Exits 1 when a run does not stay in
float64 (a cast baked into the trace would make the figure a float32 one).
"""
import sys

import torch

from check_folded_model import tensors  # same folder: the DATA.pt convention lives there


def flat(out):
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return [out]


def main(argv):
    if len(argv) != 4:
        print(__doc__)
        return 2
    library, original_path, folded_path, data_path = argv
    torch.ops.load_library(library)
    inputs = [t.double() if t.is_floating_point() else t for t in tensors(torch.jit.load(data_path), "input")]
    outs = []
    for path in (original_path, folded_path):
        model = torch.jit.load(path).double()
        with torch.no_grad():
            outs.append(flat(model(*inputs)))
    status = 0
    for i, (a, b) in enumerate(zip(*outs)):
        if a.is_floating_point() and (a.dtype != torch.float64 or b.dtype != torch.float64):
            print(f"output {i}: not float64 ({a.dtype}, {b.dtype})")
            status = 1
            continue
        rel = ((b - a).abs().max() / a.abs().max()).item() if a.is_floating_point() else float(not a.equal(b))
        print(f"output {i}: relative {rel:.6e}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
