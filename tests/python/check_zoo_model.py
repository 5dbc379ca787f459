"""Loads zoo models saved by the C++ tests in Python and checks them against the C++ outputs.

Usage: check_zoo_model.py MODEL.pt DATA.pt [MODEL.pt DATA.pt ...]

DATA.pt is a TorchScript module written by tests/test_zoo.cpp whose buffers are input_0..,
output_0.. (the C++ traced model's outputs) and, optionally, a string attribute "tied" naming two
parameters that must share storage ("lm_head.weight transformer.wte.weight").
Prints one line per model and exits 1 if any check fails.
"""
import sys

import torch


def tensors(data, prefix):
    found = []
    while hasattr(data, f"{prefix}_{len(found)}"):
        found.append(getattr(data, f"{prefix}_{len(found)}"))
    return found


def check(model_path, data_path):
    model = torch.jit.load(model_path)
    model.eval()
    data = torch.jit.load(data_path)
    inputs, expected = tensors(data, "input"), tensors(data, "output")
    with torch.no_grad():
        out = model(*inputs)
    outs = list(out) if isinstance(out, tuple) else [out]
    problems = []
    if len(outs) != len(expected):
        problems.append(f"{len(outs)} outputs, C++ gave {len(expected)}")
    for i, (got, want) in enumerate(zip(outs, expected)):
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
            problems.append(f"output {i} differs (max |diff| "
                            f"{(got - want).abs().max().item() if got.shape == want.shape else 'shape'})")
    params = dict(model.named_parameters(remove_duplicate=False))
    if not any("." in name for name in params):
        problems.append("parameter names are not hierarchical")
    if hasattr(data, "tied") and data.tied:
        a, b = data.tied.split()
        if a not in params or b not in params:
            problems.append(f"tied parameters {a}, {b} missing")
        elif params[a].data_ptr() != params[b].data_ptr():
            problems.append(f"{a} and {b} do not share storage")
    status = "ok" if not problems else "FAIL: " + "; ".join(problems)
    print(f"{model_path}: {len(params)} parameters, {status}")
    return not problems


def main(argv):
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__)
        return 2
    ok = all([check(argv[i], argv[i + 1]) for i in range(0, len(argv), 2)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
