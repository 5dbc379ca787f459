"""Loads libfoldnorm_ops.so into Python's torch and checks foldnorm::rms_norm / layer_norm
against float64 references, directly and inside a TorchScript module saved and loaded again
(the path a folded model takes). Run by tests/test_ops.cpp; prints 'foldnorm ops ok' on success.

Usage: python test_ops_load.py <path to libfoldnorm_ops.so>
"""
import io
import sys

import torch


def reference(x, w, b, eps, layer):
    xd = x.double()
    if layer:
        xd = xd - xd.mean(-1, keepdim=True)
    y = xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + eps)
    return y * w.double() + b.double()


class Block(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden))
        self.bias = torch.nn.Parameter(torch.randn(hidden))
        self.hidden = hidden

    def forward(self, x):
        return torch.ops.foldnorm.rms_norm(x, [self.hidden], self.weight, self.bias, 1e-5)


def main():
    torch.ops.load_library(sys.argv[1])
    torch.manual_seed(0)
    failures = []
    for dtype, tol in [(torch.float32, 1e-5), (torch.float64, 1e-12), (torch.bfloat16, 2e-2)]:
        for hidden in (3, 768, 1000):
            x = torch.randn(4, 7, hidden).to(dtype)
            w = torch.randn(hidden).to(dtype)
            b = torch.randn(hidden).to(dtype)
            for layer, op in ((False, torch.ops.foldnorm.rms_norm), (True, torch.ops.foldnorm.layer_norm)):
                y = op(x, [hidden], w, b, 1e-5)
                err = ((y.double() - reference(x, w, b, 1e-5, layer)).abs()
                       / (1 + reference(x, w, b, 1e-5, layer).abs())).max().item()
                if err > tol:
                    failures.append(f"{op} {dtype} hidden={hidden}: error {err:.3g} > {tol}")

    # The schema is the one the fold step writes into graphs.
    schema = str(torch.ops.foldnorm.rms_norm.default._schema)
    if "Tensor? weight, Tensor? bias, float eps" not in schema:
        failures.append(f"unexpected schema {schema}")

    # TorchScript: script, save, load, run.
    block = Block(24).eval()
    scripted = torch.jit.script(block)
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    x = torch.randn(2, 3, 24)
    with torch.no_grad():
        y = loaded(x)
    expected = reference(x, block.weight.detach(), block.bias.detach(), 1e-5, False)
    if not torch.allclose(y.double(), expected, atol=1e-5, rtol=1e-5):
        failures.append("TorchScript round trip differs from the reference")
    if "foldnorm::rms_norm" not in str(loaded.graph):
        failures.append("loaded graph has no foldnorm::rms_norm node")

    # Inference mode and the out= overload.
    with torch.inference_mode():
        out = torch.empty(2, 3, 24)
        torch.ops.foldnorm.rms_norm.out(x, [24], block.weight, block.bias, 1e-5, out=out)
    if not torch.allclose(out.double(), expected, atol=1e-5, rtol=1e-5):
        failures.append("rms_norm.out differs from the reference")

    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("foldnorm ops ok")


if __name__ == "__main__":
    main()
