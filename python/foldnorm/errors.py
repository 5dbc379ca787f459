"""The package's exceptions.

FoldnormError is the C++ core's foldnorm::Error (a bad path, a damaged archive, an unsupported op,
a bad setting): raised with the same one-line text the CLI prints. FoldError is a fold that does
not compute the original's function (or cannot be executed on an eager module).
"""
import torch  # noqa: F401  (LibTorch must be loaded before the extension)

from ._foldnorm import FoldnormError


class FoldError(FoldnormError):
    """A fold that failed: verification found an output that differs in float64 (the message
    names the output and the error), or the plan cannot be executed on the eager module."""


__all__ = ["FoldnormError", "FoldError"]
