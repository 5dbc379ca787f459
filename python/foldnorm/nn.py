"""foldnorm's norm kernels as PyTorch functions and modules, with autograd.

The ops (``torch.ops.foldnorm.rms_norm``, ``layer_norm``, ``add_rms_norm``) come from
libfoldnorm_ops.so, which the package's extension loads; their backward ops are registered with
autograd in C++ (src/ops/norm_autograd.cpp), so ``torch.autograd.gradcheck`` passes through them.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch
from torch import nn

from . import _foldnorm  # noqa: F401  (loads libfoldnorm_ops.so: registers torch.ops.foldnorm)

ShapeLike = Union[int, Sequence[int], torch.Size]


def _shape(normalized_shape: ShapeLike) -> list:
    if isinstance(normalized_shape, int):
        return [normalized_shape]
    return [int(d) for d in normalized_shape]


def rms_norm(input: torch.Tensor, normalized_shape: ShapeLike, weight: Optional[torch.Tensor] = None,
             bias: Optional[torch.Tensor] = None, eps: float = 1e-5) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight + bias`` over the last ``normalized_shape`` dims
    (foldnorm::rms_norm: equal to layer_norm when x is mean-zero over those dims)."""
    return torch.ops.foldnorm.rms_norm(input, _shape(normalized_shape), weight, bias, float(eps))


def layer_norm(input: torch.Tensor, normalized_shape: ShapeLike, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm on foldnorm's kernels (the baseline the RMSNorm kernel is compared with)."""
    return torch.ops.foldnorm.layer_norm(input, _shape(normalized_shape), weight, bias, float(eps))


def add_rms_norm(input: torch.Tensor, residual: torch.Tensor, normalized_shape: ShapeLike,
                 weight: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                 eps: float = 1e-5) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(input + residual), input + residual)`` in one pass over both."""
    return torch.ops.foldnorm.add_rms_norm(input, residual, _shape(normalized_shape), weight, bias,
                                           float(eps))


class RMSNorm(nn.Module):
    """RMSNorm with LayerNorm's parameters: ``weight`` and ``bias`` (either optional), ``eps``.

    On a mean-zero input (the fold's guarantee) it computes exactly what ``nn.LayerNorm`` with the
    same parameters computes, without the mean pass. Parameter names match ``nn.LayerNorm``'s, so
    a folded model's state_dict keys are the original's.
    """

    def __init__(self, normalized_shape: ShapeLike, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = tuple(_shape(normalized_shape))
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        factory = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, **factory))
            self.bias = nn.Parameter(torch.zeros(self.normalized_shape, **factory)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    @classmethod
    def from_layer_norm(cls, ln: nn.LayerNorm) -> "RMSNorm":
        """An RMSNorm holding ``ln``'s own weight and bias Parameters (not copies) and its eps."""
        rms = cls.__new__(cls)
        nn.Module.__init__(rms)
        rms.normalized_shape = tuple(ln.normalized_shape)
        rms.eps = float(ln.eps)
        rms.elementwise_affine = ln.weight is not None
        rms.register_parameter("weight", ln.weight)
        rms.register_parameter("bias", ln.bias)
        return rms

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.ops.foldnorm.rms_norm(input, list(self.normalized_shape), self.weight, self.bias,
                                           self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")
