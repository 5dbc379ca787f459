"""Capturing an eager model for the C++ core: torch.export first, torch.jit.trace where export fails.

``torch.export.export(model, (), kwargs, strict=False)`` is the successor of TorchScript (whose
trace and save warn as deprecated since torch 2.10) and follows what a trace refuses: a Python
``autograd.Function`` (BLOOM's GeLU in transformers 5.24), data-dependent Python control flow
that export can guard. The model's forward is overridden on the instance for the capture only
(class and module names stay the model's, so the program's parameter names are the eager ones,
and the plan maps back onto the module), takes the example inputs as keywords (a dict) or
positionally, calls the real forward with ``use_cache=False, return_dict=True`` where it takes
them, and returns every tensor of the output flattened (pytree outputs such as a Hugging Face
``ModelOutput`` by key, caches and Nones left out), as the trace does. The program is saved as a
``.pt2`` that the core reads with the same importer as ``foldnorm analyze MODEL.pt2``.

When export fails, or the core cannot read its program, the model is traced (_trace.py); when
both fail, one FoldnormError names both causes. ``Report.capture`` says which was used.
"""
from __future__ import annotations

import os
from typing import Callable, List, Tuple

import torch
from torch import nn

from .errors import FoldnormError, first_line
from ._trace import Inputs, eval_mode, flatten_outputs, hf_call_options, save_with_specs, trace

EXPORT = "torch.export"
TRACE = "torch.jit.trace"


def exported_program(model: nn.Module, inputs: Inputs):
    """``model`` exported (non-strict, eval mode): (the ExportedProgram, the names of its flattened
    outputs). Raises what torch.export raises."""
    extra = hf_call_options(model)
    own_forward = model.__dict__.get("forward")
    bound = model.forward
    names_out: List[str] = []

    def flat(out):
        found = flatten_outputs(out)
        names_out[:] = [n for n, _ in found]
        return tuple(t for _, t in found)

    if inputs.names is not None:
        def forward(self, **kwargs):
            return flat(bound(**kwargs, **extra))
        args, kwargs = (), dict(zip(inputs.names, inputs.tensors))
    else:
        def forward(self, *tensors):
            return flat(bound(*tensors, **extra))
        args, kwargs = tuple(inputs.tensors), {}
    model.forward = forward.__get__(model)
    try:
        with eval_mode(model):
            program = torch.export.export(model, args, kwargs, strict=False)
    finally:
        if own_forward is not None:
            model.forward = own_forward
        else:
            del model.forward
    if not names_out:
        raise FoldnormError(f"{type(model).__name__} returns no tensor on the example inputs")
    return program, names_out


def export(model: nn.Module, inputs: Inputs, folder: str) -> Tuple[str, List[str]]:
    """``model`` exported and saved as ``folder/model.pt2``; returns the path and the names of
    its flattened outputs. Raises what torch.export raises."""
    program, names = exported_program(model, inputs)
    path = os.path.join(folder, "model.pt2")
    torch.export.save(program, path)
    return path, names


def trace_through_export(model: nn.Module, inputs: Inputs, folder: str, why: str) -> Tuple[str, List[str]]:
    """Where a trace of ``model`` cannot be made or saved (``why``: BLOOM's GeLU is a Python
    autograd.Function, which torch.jit.save refuses), the trace of its torch.export program as a
    module: the same parameters under the same names, every op an ATen op. Saved with the input
    specs; returns (path, output names). One FoldnormError line with both reasons otherwise."""
    name = type(model).__name__
    try:
        program, names = exported_program(model, inputs)
        traced, _ = trace(program.module(), inputs, set_eval=False)  # exported in eval mode already
        return save_with_specs(traced, inputs.specs(), folder), names
    except Exception as e:  # noqa: BLE001  (one line with both causes)
        raise FoldnormError(f"cannot trace {name}: {why}; nor its torch.export program: {first_line(e)}") from None


def capture(model: nn.Module, inputs: Inputs, folder: str, read: Callable[[str, List[str]], object]):
    """``read(path, specs)`` (the core's import + analysis) of ``model`` exported, else traced.
    Returns (what read returned, output names, the capture used)."""
    name = type(model).__name__
    try:
        path, names = export(model, inputs, folder)
    except FoldnormError:
        raise
    except Exception as e:  # noqa: BLE001  (any export failure: tried again by tracing)
        export_error = f"cannot capture {name} with torch.export: {first_line(e)}"
    else:
        try:
            # The archive carries its example inputs: the core takes the input specs from them.
            return read(path, []), names, EXPORT
        except FoldnormError as e:
            export_error = f"foldnorm cannot read {name}'s torch.export program: {first_line(e)}"
    try:
        traced, names = trace(model, inputs)
        path = save_with_specs(traced, inputs.specs(), folder)
    except FoldnormError as e:
        trace_error = first_line(e)
    except Exception as e:  # noqa: BLE001  (torch.jit.save refuses a Python autograd.Function)
        trace_error = f"cannot save the trace of {name}: {first_line(e)}"
    else:
        try:
            return read(path, inputs.specs()), names, TRACE
        except FoldnormError as e:
            trace_error = f"foldnorm cannot read {name}'s trace: {first_line(e)}"
    raise FoldnormError(f"{export_error}; tracing refused: {trace_error}") from None
