"""Gradients through the Python package: gradcheck (float64) of foldnorm.RMSNorm and the
functional ops, and backprop through folded models with no "silently incorrect" warning.

Usage: test_package_grad.py [test_name...]
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from package_common import assert_depends_on_input, max_rel, run  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.autograd import gradcheck  # noqa: E402

import foldnorm  # noqa: E402


def _leaf(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def test_gradcheck_rms_norm_module():
    norm = foldnorm.RMSNorm(6).double()
    with torch.no_grad():
        norm.weight.copy_(torch.rand(6) + 0.5)
        norm.bias.copy_(torch.randn(6))
    x = _leaf(3, 4, 6)
    assert gradcheck(lambda t, w, b: torch.ops.foldnorm.rms_norm(t, [6], w, b, norm.eps),
                     (x, norm.weight, norm.bias))
    assert gradcheck(norm, (x,))
    no_affine = foldnorm.RMSNorm((4, 6), elementwise_affine=False).double()
    assert gradcheck(no_affine, (x,))


def test_gradcheck_functional_ops():
    x, r, w, b = _leaf(5, 8), _leaf(5, 8), _leaf(8), _leaf(8)
    assert gradcheck(lambda *a: foldnorm.rms_norm(a[0], 8, a[1], a[2]), (x, w, b))
    assert gradcheck(lambda *a: foldnorm.layer_norm(a[0], 8, a[1], a[2]), (x, w, b))
    assert gradcheck(lambda *a: foldnorm.add_rms_norm(a[0], a[1], 8, a[2], a[3]), (x, r, w, b))
    assert gradcheck(lambda *a: foldnorm.rms_norm(a[0], 8, None, None), (x,))


class Block(nn.Module):
    """Pre-LN residual MLP block with float inputs (so input gradients can be compared)."""

    def __init__(self, d=16):
        super().__init__()
        self.embed = nn.Linear(8, d)
        self.ln = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x):
        h = self.embed(x)
        h = h + self.mlp(self.ln(h))
        return self.ln_f(h)


def _input_grad(model, x):
    x = x.clone().requires_grad_(True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model(x)
        out = out[0] if isinstance(out, tuple) else out
        (out * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum().backward()
    silent = [str(w.message) for w in caught if "silently incorrect" in str(w.message)]
    assert not silent, silent
    return x.grad


def test_backprop_through_folded_models():
    torch.manual_seed(0)
    model = Block().double().eval()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    reference = _input_grad(model, x)
    traced = foldnorm.fold_traced(model, x)
    assert "foldnorm::rms_norm" in str(traced.graph)
    eager = foldnorm.fold(model, x)
    assert sum(isinstance(m, foldnorm.RMSNorm) for m in eager.modules()) == 2
    for folded in (traced, eager):
        assert max_rel(reference, _input_grad(folded, x)) < 1e-9
    assert_depends_on_input(lambda t: traced(t)[0], x, torch.randn(3, 5, 8, dtype=torch.float64))


if __name__ == "__main__":
    run(globals())
