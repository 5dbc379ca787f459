"""Loads a folded model in Python with the foldnorm op library and checks it against C++.

Usage: check_folded_model.py OPS_LIBRARY MODEL.pt DATA.pt [--fused N]

DATA.pt is a TorchScript module whose buffers input_0.., output_0.. hold the inputs and the
folded model's outputs as computed in C++. Exits 1 on any difference, 0 when Python computes the
same outputs and the graph really contains foldnorm::rms_norm. With --fused N the graph must hold
N foldnorm::add_rms_norm nodes (the fused residual adds) and the outputs must be the same bits
(the same kernels ran in C++).
"""
import sys

import torch


def tensors(data, prefix):
    found = []
    while hasattr(data, f"{prefix}_{len(found)}"):
        found.append(getattr(data, f"{prefix}_{len(found)}"))
    return found


def main(argv):
    fused = None
    if len(argv) == 5 and argv[3] == "--fused":
        fused, argv = int(argv[4]), argv[:3]
    if len(argv) != 3:
        print(__doc__)
        return 2
    library, model_path, data_path = argv
    torch.ops.load_library(library)
    model = torch.jit.load(model_path)
    data = torch.jit.load(data_path)
    inputs, expected = tensors(data, "input"), tensors(data, "output")
    with torch.no_grad():
        out = model(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    problems = []
    graph = str(model.inlined_graph)
    if fused is None and "foldnorm::rms_norm" not in graph:
        problems.append("no foldnorm::rms_norm in the loaded graph")
    if fused is not None and graph.count("foldnorm::add_rms_norm(") != fused:
        problems.append(f"{graph.count('foldnorm::add_rms_norm(')} foldnorm::add_rms_norm nodes, expected {fused}")
    if len(outs) != len(expected):
        problems.append(f"{len(outs)} outputs, C++ gave {len(expected)}")
    for i, (got, want) in enumerate(zip(outs, expected)):
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-6, atol=1e-6):
            problems.append(f"output {i} differs")
        elif fused is not None and not torch.equal(got, want):
            problems.append(f"output {i} is close but not the same bits")
    print(f"{model_path}: " + ("ok" if not problems else "FAIL: " + "; ".join(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
