"""foldnorm.analyze, foldnorm.fold and foldnorm.fold_traced (docs/python.md)."""
from __future__ import annotations

import copy
import json
import os
from typing import List, Optional, Union

import torch
from torch import nn

from . import _foldnorm
from ._fold import FoldSummary, build
from ._trace import ExampleInputs, Inputs, eval_mode, flatten_outputs, hf_call_options, read_model
from .errors import ArgumentError, FoldError, public, stage
from .report import Report

ModelLike = Union[nn.Module, torch.jit.ScriptModule, str, os.PathLike]

#: Relative float64 error above which a fold is a bug (FoldOptions::float64Tolerance).
FLOAT64_TOLERANCE = 1e-9


@public
def analyze(model: ModelLike, example_inputs: Optional[ExampleInputs] = None, *,
            untie: bool = True, scale_absorb: bool = True, insert_centering: bool = True) -> Report:
    """Which LayerNorms of ``model`` fold into RMSNorm, which parameters to center, and why not.

    ``model``: an ``nn.Module`` (captured here in eval mode with ``torch.export`` (non-strict),
    else traced, with ``example_inputs``: a tensor, a tuple of tensors, or a dict of keyword
    tensors for Hugging Face models; ``Report.capture`` says which), a ``ScriptModule`` or the
    path of a traced ``.pt`` or a ``.pt2`` (which carry their own input specs). ``untie=False``
    never copies a tied parameter: the LNs that need one are reported not foldable.
    ``scale_absorb=False`` / ``insert_centering=False``: the analysis' ``--no-scale-absorb`` /
    ``--no-insert-centering``. Every failure is one FoldnormError line.
    """
    return _analyze(model, example_inputs, untie, scale_absorb, insert_centering)


def _analyze(model, example_inputs, untie: bool = True, scale_absorb: bool = True,
             insert_centering: bool = True) -> Report:
    def read(path, specs):
        return _foldnorm.analyze(path, specs, untie, [], scale_absorb, insert_centering)
    analysis, names, how = read_model(model, example_inputs, read)
    with stage("reading the analysis"):
        return Report(analysis, names, how)


def _random_like(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    if t.is_floating_point():
        return torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype)
    if t.dtype == torch.bool or t.numel() == 0:
        return t.clone()
    lo, hi = int(t.min()), int(t.max()) + 1
    return torch.randint(lo, hi, t.shape, generator=g, dtype=t.dtype)


def _outputs(model: nn.Module, inputs: Inputs, extra) -> List:
    with torch.no_grad():
        return flatten_outputs(inputs.call(model, extra))


def _compare(reference, folded, what: str) -> float:
    if [n for n, _ in reference] != [n for n, _ in folded]:
        raise FoldError(f"the folded model returns other outputs than the original ({what})")
    worst = 0.0
    for (name, a), (_, b) in zip(reference, folded):
        if not a.is_floating_point():
            if not torch.equal(a, b):
                raise FoldError(f"output {name} {list(a.shape)} differs after the fold ({what})")
            continue
        a64, b64 = a.detach().double().cpu(), b.detach().double().cpu()
        scale = float(a64.abs().max()) if a64.numel() else 0.0
        err = float((a64 - b64).abs().max()) if a64.numel() else 0.0
        rel = err / max(scale, torch.finfo(torch.float64).tiny)
        if not (rel <= FLOAT64_TOLERANCE) and what.startswith("float64"):
            raise FoldError(f"output {name} {list(a.shape)} diverged in float64 ({what}): relative error "
                            f"{rel:.3e} > {FLOAT64_TOLERANCE:.0e}")
        worst = max(worst, rel)
    return worst


@public
def fold(model: nn.Module, example_inputs: ExampleInputs, *, untie: bool = True, verify: bool = True,
         trainable: bool = False, random_inputs: int = 3, scale_absorb: bool = True,
         insert_centering: bool = True, verify_device: Union[str, torch.device] = "cpu") -> nn.Module:
    """A deep copy of the eager ``model`` with the planned parameters centered (float64
    arithmetic, cast back), ties split where the plan unties, and each foldable ``nn.LayerNorm``
    replaced by ``foldnorm.RMSNorm`` (same weight, bias, eps). ``model`` itself is not changed.

    ``verify``: the fold applied to a float64 copy is compared with a float64 copy of the original
    on ``example_inputs`` and ``random_inputs`` random input sets (floats standard normal,
    integers within the example's range); an output off by more than 1e-9 (relative) raises
    FoldError naming it. ``trainable``: the centered tensors are reparametrised as their centered
    projection (CBWC), so fine-tuning keeps the fold exact. The returned module carries a
    ``foldnorm_summary`` (FoldSummary): what was folded, kept, centered, scaled, inserted,
    untied, the capture used, and the errors. The plan executed is the analysis' (the report's
    ``plan``, ``scale_absorptions`` and ``insertions``, the description the C++ fold executes).
    ``verify_device``: where the float64 copies run ("cpu" by default, whatever the model's device
    and dtype: a bfloat16 or CUDA model is checked in float64 on the CPU; the summary says where).
    Every failure is one FoldnormError line (FoldError for a fold that does not verify).
    """
    if not isinstance(model, nn.Module) or isinstance(model, torch.jit.ScriptModule):
        raise ArgumentError("fold() takes an eager nn.Module; use fold_traced() for a ScriptModule or a path")
    name = type(model).__name__
    report = _analyze(model, example_inputs, untie, scale_absorb, insert_centering)
    with stage(f"the eager fold of {name} failed", FoldError):
        folded, summary = build(model, report, trainable, float64=False)
    summary.capture = report.capture
    inputs = Inputs(example_inputs)
    extra = hf_call_options(model)
    with stage(f"running the folded {name} failed", FoldError):
        with eval_mode(model), eval_mode(folded):  # practical equivalence, reported, not enforced
            reference, ours = _outputs(model, inputs, extra), _outputs(folded, inputs, extra)
        _compare(reference, ours, "native dtype")  # same outputs, same integer outputs
        summary.relative_error_native = {n: _compare([(n, a)], [(n, b)], "native dtype")
                                         for (n, a), (_, b) in zip(reference, ours)}
    if verify:
        with stage(f"verifying the fold of {name} in float64 failed", FoldError):
            _verify(model, report, inputs, extra, trainable, random_inputs, summary, torch.device(verify_device))
    folded.foldnorm_summary = summary
    return folded


def _verify(model: nn.Module, report: Report, inputs: Inputs, extra, trainable: bool,
            random_inputs: int, summary: FoldSummary, device: torch.device = torch.device("cpu")) -> None:
    reference = copy.deepcopy(model).to(device).double()
    folded64, _ = build(model, report, trainable, float64=True, device=device)
    g = torch.Generator().manual_seed(0)
    on_device = inputs.mapped(lambda t: t.to(device))
    input_sets = [on_device] + [on_device.mapped(lambda t: _random_like(t.cpu(), g).to(device))
                                for _ in range(random_inputs)]
    # Factory calls without a dtype follow the default: float64 here, or a model's own
    # torch.full(..., finfo(float64).min) overflows float32 (OPT in transformers 4.41).
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _verify_runs(reference, folded64, input_sets, extra, summary)
    finally:
        torch.set_default_dtype(default)
    summary.verified = True
    summary.verification = f"float64 on {device}"


def _verify_runs(reference: nn.Module, folded64: nn.Module, input_sets: List[Inputs], extra,
                 summary: FoldSummary) -> None:
    with eval_mode(reference), eval_mode(folded64):
        for i, x in enumerate(input_sets):
            x64 = x.mapped(lambda t: t.double() if t.is_floating_point() else t)
            what = "float64, example inputs" if i == 0 else f"float64, random input set {i}"
            worst = _compare(_outputs(reference, x64, extra), _outputs(folded64, x64, extra), what)
            summary.worst_relative_float64 = max(summary.worst_relative_float64, worst)


@public
def fold_traced(path_or_scriptmodule: ModelLike, example_inputs: Optional[ExampleInputs] = None,
                out: Optional[Union[str, os.PathLike]] = None, rms_op: str = "foldnorm", *,
                untie: bool = True, verify: bool = True, random_inputs: int = 3,
                device: str = "cpu", absorb_affine: bool = False) -> torch.jit.ScriptModule:
    """The CLI's ``foldnorm fold`` from Python, on a traced model (a path, a ScriptModule, or an
    nn.Module traced here): returns the folded ScriptModule, and writes it to ``out`` (never the
    input) when given. ``rms_op="foldnorm"`` writes our fused op (loading the file needs
    foldnorm's op library); ``"aten"`` writes ``aten::rms_norm`` plus a bias add, which runs in
    plain PyTorch. Raises FoldError when float64 verification finds a divergent output (nothing
    is written then). The fold report (schema foldnorm-fold/1) is the result's
    ``foldnorm_report`` attribute. ``absorb_affine=True`` (TorchScript only) also moves each
    folded norm's weight and bias into its linear readers (foldnorm.rotate without the rotation;
    the report is then {"fold": ..., "stage": ...}).
    """
    if absorb_affine:
        from .rotate import absorb_affine as _absorb
        return _absorb(path_or_scriptmodule, example_inputs, out, random_inputs)

    def read(path, specs):
        analysis = _foldnorm.analyze(path, specs, untie)
        return analysis.fold(rms_op, verify, random_inputs, device, os.fspath(out) if out is not None else "")
    # An eager module is traced (the result is a ScriptModule); a .pt2 path folds into a .pt2.
    (text, module), names, _ = read_model(path_or_scriptmodule, example_inputs, read, export_first=False)
    fold_report = json.loads(text)
    v = fold_report["verification"]
    if v.get("ran") and not v["float64_equivalent"]:
        bad = [c for c in v["checks"] if c["dtype"] == "float64" and not c["max_rel"] <= FLOAT64_TOLERANCE]
        named = [f"output {names[c['output']] if c['output'] < len(names) else c['output']} ({c['shape']}): "
                 f"relative error {c['max_rel']:.3e}" for c in bad]
        raise FoldError("diverged in float64: " + "; ".join(named) + f" > {FLOAT64_TOLERANCE:.0e}"
                        + ("; nothing written" if out is not None else ""))
    if module is None:  # a .pt2: the folded program was written to `out`
        if out is None:
            return None
        with stage(f"loading the folded program {os.fspath(out)}"):
            program = torch.export.load(os.fspath(out))
        program.foldnorm_report = fold_report
        return program
    folded = torch.jit._recursive.wrap_cpp_module(module)
    folded.foldnorm_report = fold_report
    return folded
