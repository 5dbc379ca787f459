"""From a Python model to what the C++ core reads: a traced TorchScript file and input specs.

An ``nn.Module`` is traced in eval mode with its own class and module names (its ``forward`` is
overridden on the instance for the trace only, as the test fixtures do), so the traced attribute
paths are the eager parameter names and the plan's parameters map back onto the eager module.
The traced forward returns every tensor of the model's output flattened into a tuple (dicts and
``ModelOutput``s by key), since the importer reads tensors, tuples and lists. Hugging Face models
get ``use_cache=False`` and ``return_dict=True`` where their forward takes them.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import os
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from .errors import ArgumentError, FoldnormError, first_line

ExampleInputs = Union[torch.Tensor, Sequence[torch.Tensor], Mapping[str, torch.Tensor]]

_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
           torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32", torch.bool: "bool"}
_INPUT_SPEC_FILE = "foldnorm_input_spec.json"  # kInputSpecExtraFile (include/foldnorm/import/input_spec.h)


class Inputs:
    """Example inputs as positional tensors, with their keyword names when given as a dict."""

    def __init__(self, example_inputs: ExampleInputs) -> None:
        if isinstance(example_inputs, torch.Tensor):
            self.names: Optional[List[str]] = None
            self.tensors: Tuple[torch.Tensor, ...] = (example_inputs,)
        elif isinstance(example_inputs, Mapping):
            self.names = [str(k) for k in example_inputs]
            self.tensors = tuple(example_inputs.values())
        elif isinstance(example_inputs, (tuple, list)):
            self.names = None
            self.tensors = tuple(example_inputs)
        else:
            raise ArgumentError("example_inputs must be a tensor, a tuple/list of tensors or a dict of "
                            f"keyword tensors, not {type(example_inputs).__name__}")
        for i, t in enumerate(self.tensors):
            if not isinstance(t, torch.Tensor):
                name = self.names[i] if self.names else f"#{i}"
                raise ArgumentError(f"example input {name} is a {type(t).__name__}, not a tensor")
            if t.dtype not in _DTYPES:
                raise ArgumentError(f"example input {i} has dtype {t.dtype}; foldnorm reads "
                                f"{', '.join(_DTYPES.values())}")

    def specs(self) -> List[str]:
        """The input specs (include/foldnorm/import/input_spec.h) the importer records shapes with:
        floats standard normal, integers uniform over the example's own range."""
        out = []
        for t in self.tensors:
            shape = "x".join(str(d) for d in t.shape) or "scalar"
            spec = f"{shape}:{_DTYPES[t.dtype]}"
            if t.dtype in (torch.int64, torch.int32) and t.numel() > 0:
                spec += f"[{int(t.min())},{int(t.max()) + 1})"
            out.append(spec)
        return out

    def mapped(self, fn) -> "Inputs":
        copy = Inputs.__new__(Inputs)
        copy.names = self.names
        copy.tensors = tuple(fn(t) for t in self.tensors)
        return copy

    def call(self, model: nn.Module, extra: Dict[str, Any]) -> Any:
        if self.names is not None:
            return model(**dict(zip(self.names, self.tensors)), **extra)
        return model(*self.tensors, **extra)


def hf_call_options(model: nn.Module) -> Dict[str, Any]:
    """Keyword settings a Hugging Face forward needs for a trace: no KV cache, dict outputs."""
    try:
        params = inspect.signature(type(model).forward).parameters
    except (TypeError, ValueError):
        return {}
    extra = {}
    if "use_cache" in params:
        extra["use_cache"] = False
    if "return_dict" in params:
        extra["return_dict"] = True
    return extra


def flatten_outputs(out: Any, name: str = "output") -> List[Tuple[str, torch.Tensor]]:
    """Every tensor of a model's output, named by its key or index (``logits``, ``output[1]``);
    non-tensor leaves (None, caches) are left out."""
    if isinstance(out, torch.Tensor):
        return [(name, out)]
    found: List[Tuple[str, torch.Tensor]] = []
    if isinstance(out, Mapping):
        for k, v in out.items():
            found += flatten_outputs(v, str(k) if name == "output" else f"{name}.{k}")
    elif isinstance(out, (tuple, list)):
        for i, v in enumerate(out):
            found += flatten_outputs(v, f"{name}[{i}]")
    return found


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def trace(model: nn.Module, inputs: Inputs, set_eval: bool = True) -> Tuple[torch.jit.ScriptModule, List[str]]:
    """Traces ``model`` in eval mode (``set_eval=False``: as it is; a torch.export program's module
    refuses eval()); returns the trace and the names of its flattened outputs."""
    extra = hf_call_options(model)
    own_forward = model.__dict__.get("forward")
    bound = model.forward
    names_out: List[str] = []

    def forward(self, *tensors):
        if inputs.names is not None:
            out = bound(**dict(zip(inputs.names, tensors)), **extra)
        else:
            out = bound(*tensors, **extra)
        flat = flatten_outputs(out)
        names_out[:] = [n for n, _ in flat]
        return tuple(t for _, t in flat)

    model.forward = forward.__get__(model)
    try:
        with (eval_mode(model) if set_eval else contextlib.nullcontext()), torch.no_grad():
            traced = torch.jit.trace(model, inputs.tensors, check_trace=False)
    except FoldnormError:
        raise
    except Exception as e:  # a model the tracer cannot follow: one line, the tracer's reason
        raise FoldnormError(f"cannot trace {type(model).__name__}: {first_line(e)}") from None
    finally:
        if own_forward is not None:
            model.forward = own_forward
        else:
            del model.forward
    if not names_out:
        raise FoldnormError(f"{type(model).__name__} returns no tensor on the example inputs")
    return traced, names_out


def save_with_specs(module: torch.jit.ScriptModule, specs: List[str], folder: str) -> str:
    path = os.path.join(folder, "model.pt")
    spec = json.dumps({"format": "foldnorm-input-spec", "version": 1, "inputs": specs})
    torch.jit.save(module, path, _extra_files={_INPUT_SPEC_FILE: spec})
    return path


@contextlib.contextmanager
def as_file(model: Union[str, os.PathLike, torch.jit.ScriptModule, nn.Module],
            example_inputs: Optional[ExampleInputs]) -> Iterator[Tuple[str, List[str], List[str]]]:
    """(path, input specs, output names) of a path, a ScriptModule or an eager module (traced:
    what the checkpoint planner reads), with files made here living for the block only. The
    public calls use read_model, which exports first."""
    if isinstance(model, (str, os.PathLike)):
        yield os.fspath(model), (Inputs(example_inputs).specs() if example_inputs is not None else []), []
        return
    inputs = Inputs(example_inputs)
    with tempfile.TemporaryDirectory(prefix="foldnorm-") as folder:
        if isinstance(model, torch.jit.ScriptModule):
            yield save_with_specs(model, inputs.specs(), folder), inputs.specs(), []
        else:
            traced, names = trace(model, inputs)
            yield save_with_specs(traced, inputs.specs(), folder), inputs.specs(), names


def read_model(model: Union[str, os.PathLike, torch.jit.ScriptModule, nn.Module],
               example_inputs: Optional[ExampleInputs], read: Callable[[str, List[str]], Any], *,
               export_first: bool = True) -> Tuple[Any, List[str], str]:
    """``read(path, input specs)`` (the core's import and what follows) of a path, a ScriptModule
    or an eager module, the latter captured with torch.export (else traced; ``export_first=False``:
    traced only). Files made here live in a temporary folder while ``read`` runs. Returns (what
    ``read`` returned, output names, the capture: "torch.export", "torch.jit.trace",
    "scriptmodule" or "file")."""
    if isinstance(model, (str, os.PathLike)):
        specs = Inputs(example_inputs).specs() if example_inputs is not None else []
        return read(os.fspath(model), specs), [], "file"
    if not isinstance(model, nn.Module):
        raise ArgumentError(f"model must be an nn.Module, a ScriptModule or a path, not {type(model).__name__}")
    if example_inputs is None:
        raise ArgumentError("example_inputs are needed to analyse a module (only a saved file can carry "
                        "its own input spec)")
    inputs = Inputs(example_inputs)
    with tempfile.TemporaryDirectory(prefix="foldnorm-") as folder:
        if isinstance(model, torch.jit.ScriptModule):
            return read(save_with_specs(model, inputs.specs(), folder), inputs.specs()), [], "scriptmodule"
        if export_first:
            from ._capture import capture
            return capture(model, inputs, folder, read)
        try:
            traced, names = trace(model, inputs)
            path, how = save_with_specs(traced, inputs.specs(), folder), "torch.jit.trace"
        except Exception as e:  # noqa: BLE001  (a Python autograd.Function: trace the export instead)
            from ._capture import trace_through_export
            path, names = trace_through_export(model, inputs, folder, first_line(e))
            how = "torch.export + torch.jit.trace"
        return read(path, inputs.specs()), names, how
