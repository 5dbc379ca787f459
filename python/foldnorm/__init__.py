"""foldnorm: which LayerNorms of a PyTorch model fold exactly into RMSNorm, and the fold itself.

    import foldnorm
    report = foldnorm.analyze(model, {"input_ids": ids})   # verdicts, reasons, the plan
    folded = foldnorm.fold(model, {"input_ids": ids})      # eager copy: centered, RMSNorm, verified
    folded.generate(ids, max_new_tokens=8)                 # same greedy tokens as the original
    foldnorm.fold_checkpoint("opt-66b", "opt-66b-folded")  # a checkpoint too big to load, shard by shard
    foldnorm.load_folded("opt-66b-folded")                 # ... loaded with RMSNorm

See docs/python.md. The C++ core (import, analysis, render, traced fold) is the extension
``foldnorm._foldnorm``; the norm kernels are ``torch.ops.foldnorm.*`` (foldnorm.nn).
"""
import torch  # noqa: F401  (LibTorch before the extension, which links it)

from . import _foldnorm  # noqa: F401
from .api import FLOAT64_TOLERANCE, analyze, fold, fold_traced
from .bench import BenchResult, bench
from .errors import ArgumentError, FoldError, FoldnormError
from .nn import RMSNorm, add_rms_norm, layer_norm, rms_norm
from .report import CenterAction, Insertion, LayerNormVerdict, ParameterPlan, Report
from ._fold import FoldSummary
from . import checkpoint
from .rotate import rotate
from .checkpoint import fold_checkpoint, load_folded

__version__ = "0.1.0"
__all__ = ["analyze", "fold", "fold_traced", "bench", "RMSNorm", "rms_norm", "layer_norm", "add_rms_norm",
           "Report", "LayerNormVerdict", "ParameterPlan", "CenterAction", "Insertion", "FoldSummary",
           "BenchResult", "FoldError", "FoldnormError", "ArgumentError", "FLOAT64_TOLERANCE",
           "fold_checkpoint", "load_folded", "checkpoint", "rotate"]
