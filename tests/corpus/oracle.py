"""The corpus's float64 eager oracle: every verdict of `foldnorm analyze --json` checked on the eager model.

- FOLD: the JSON plan is applied by parameter name to a float64 copy of the eager model (centering
  along the plan's axis and groups, exactly as src/fold/fold.cpp does; a scaled centering reads its
  scale parameter, docs/method.md section 7; untie gives the other names of that storage their own copy
  first), every inserted centering of the JSON becomes a forward hook on the module whose output it
  centers (section 8), the foldable LNs compute RMSNorm, and every output must agree with the
  unchanged float64 model within EXACT_REL (max|diff| / max|orig|), on every input set.
- KEEP, confirmed one of two ways:
  (a) "not mean-zero": under the maximal plan (every centerable leaf of the model centered, plus the
      tool's own actions) the LN's input still has row means over its normalized axes larger than
      NONZERO_REL of its row RMS;
  (b) "unsafe": centering the leaves the verdict names changes some output by more than CHANGED_REL.
  A KEEP confirmed by neither is UNCONFIRMED: most likely a fold the rules miss.

The model is never traced here: what runs is the library's Python code, so the oracle does not share
a bug with the trace or the tool.
"""
import copy
import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

EXACT_REL = 1e-9      # a fold in float64: rounding only
CHANGED_REL = 1e-6    # a real difference
NONZERO_REL = 1e-6    # an LN input whose row mean is this large relative to its RMS is not mean-zero

# Free parameters (not a linear/conv/embedding/norm weight) whose names say they multiply: centering
# them is no leaf (LayerScale gammas, temperatures); every other free parameter is an additive table
# (class token, position table) and is centered along its last axis in the maximal plan.
_MULTIPLICATIVE = re.compile(r"(gamma|lambda|scale|alpha|beta|temperature|logit)", re.IGNORECASE)


class OracleError(Exception):
    """The JSON names something the eager model does not have, or a patch did not take."""


def _as_tuple(out) -> Tuple[torch.Tensor, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def to_float64(inputs: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, ...]:
    return tuple(t.double() if t.is_floating_point() else t for t in inputs)


def relative_diff(ref: Sequence[torch.Tensor], got: Sequence[torch.Tensor]) -> List[float]:
    """max|got - ref| / max|ref| per output (the fold report's max_rel)."""
    out = []
    for r, g in zip(ref, got):
        scale = r.abs().max().item()
        out.append((g - r).abs().max().item() / max(scale, 1e-300))
    return out


def _tensors(model: nn.Module) -> Dict[str, torch.Tensor]:
    named = dict(model.named_parameters(remove_duplicate=False))
    named.update(dict(model.named_buffers(remove_duplicate=False)))
    return named


def _owner(model: nn.Module, dotted: str) -> Tuple[nn.Module, str]:
    parent, _, last = dotted.rpartition(".")
    return (model.get_submodule(parent) if parent else model), last


def center_actions(t: torch.Tensor, actions: Sequence[dict], scale_of=None) -> torch.Tensor:
    """src/fold/apply_plan.cpp's centered(): per action, the axis split into `groups` contiguous
    chunks, each chunk's mean subtracted; an action with a "scale" s (a parameter name) subtracts
    mean_k(s_k x[k]) / s_c along the axis instead, so that s * x is mean-zero."""
    x = t.detach().double()
    for a in actions:
        axis, groups = int(a["axis"]), int(a.get("groups", 1))
        n = x.shape[axis]
        if a.get("scale"):
            if scale_of is None:
                raise OracleError(f"a scaled centering by {a['scale']} without the model to read it from")
            s = scale_of(a["scale"]).detach().double().reshape(-1)
            if s.numel() != n:
                raise OracleError(f"scale {a['scale']} has {s.numel()} entries, axis {axis} has {n}")
            moved = x.movedim(axis, -1)
            x = (moved - (moved * s).mean(-1, keepdim=True) / s).movedim(-1, axis)
            continue
        if n % groups:
            raise OracleError(f"groups {groups} do not divide axis {axis} of size {n}")
        moved = x.movedim(axis, -1).contiguous()
        grouped = moved.reshape(-1, groups, n // groups)
        grouped = grouped - grouped.mean(-1, keepdim=True)
        x = grouped.reshape(moved.shape).movedim(-1, axis)
    return x.to(t.dtype).contiguous()


def _assign(model: nn.Module, name: str, value: torch.Tensor) -> None:
    owner, last = _owner(model, name)
    if last in owner._parameters:
        setattr(owner, last, nn.Parameter(value, requires_grad=False))
    elif last in owner._buffers:
        owner._buffers[last] = value
    else:
        raise OracleError(f"{name} is neither a parameter nor a buffer of the eager model")


def apply_actions(model: nn.Module, entries: Sequence[Tuple[str, List[dict], bool]]) -> None:
    """entries: (parameter name, center actions, untie). Centering is in place, as fold.cpp does
    it, so every name of a shared storage sees it; untie first gives every other name of that
    storage its own copy of the original, so only `name` is centered. Scales are read from the
    model as it is (the tool never centers a scale it absorbs)."""
    def scale_of(scale_name: str) -> torch.Tensor:
        named = _tensors(model)
        if scale_name not in named:
            raise OracleError(f"the plan scales by '{scale_name}', which the eager model does not have")
        return named[scale_name]

    for name, actions, untie in entries:
        named = _tensors(model)
        if name not in named:
            raise OracleError(f"the plan centers '{name}', which the eager model does not have "
                              f"(a trace constant or a renamed attribute)")
        original = named[name]
        if untie:
            for other, t in named.items():
                if other != name and t.data_ptr() == original.data_ptr():
                    _assign(model, other, t.detach().clone())
            original = _tensors(model)[name]
        with torch.no_grad():
            original.copy_(center_actions(original, actions, scale_of))


def plan_entries(analysis: dict) -> List[Tuple[str, List[dict], bool]]:
    return [(p["parameter"], p["center"], bool(p.get("untie"))) for p in analysis.get("plan", [])]


def leaf_entries(analysis: dict, leaf_ids: Sequence[int]) -> List[Tuple[str, List[dict], bool]]:
    by_id = {l["id"]: l for l in analysis.get("leaves", [])}
    merged: Dict[str, List[dict]] = {}
    for i in leaf_ids:
        for c in by_id[i]["center"]:
            acts = merged.setdefault(c["parameter"], [])
            act = {"axis": c["axis"], "groups": c.get("groups", 1)}
            if c.get("scale"):
                act["scale"] = c["scale"]
            if act not in acts:
                acts.append(act)
    return [(n, a, False) for n, a in merged.items()]


class InsertedCenterings:
    """Within the context, each inserted centering of the analysis centers the eager value it names:
    x - x.mean(axes, keepdim=True). Where the node is a module's whole computation (an LN or GELU
    module, an exact nn.Linear, BatchNorm or pooling class) by a forward hook on that module; where it is a functional call (Whisper's
    nn.functional.gelu after its conv stem) by wrapping that function for calls from the node's
    source line (file:line, which the trace kept). Anything else: the oracle refuses, not guesses."""

    _FUNCTIONAL = {"aten::gelu": "gelu"}

    def __init__(self, model: nn.Module, analysis: dict):
        self.model = model
        self.points = [i for i in analysis.get("insertions", []) if i.get("inserted")]
        self._handles = []
        self._wrapped: Dict[str, object] = {}
        self._active: List[object] = []  # the F.layer_norm each running norm module replaced

    _WHOLE_MODULE_OPS = {
        # MLP-Mixer's token-mixing fc2 (its output is mean-zero along tokens; the centering goes
        # there, before the transpose back).
        "aten::linear": (nn.Linear,),
        "aten::batch_norm": (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d),
        "aten::max_pool2d": (nn.MaxPool2d,),
        "aten::avg_pool2d": (nn.AvgPool2d,),
    }

    def _hook_module(self, node: dict, dims) -> bool:
        name = node.get("module", "")
        try:
            module = self.model.get_submodule(name)
        except AttributeError:
            return False
        kind = type(module).__name__
        # A module whose whole forward is that one op, so its output is the value: exact torch.nn
        # classes only (a subclass such as timm's BatchNormAct2d adds ops after it).
        whole = type(module) in self._WHOLE_MODULE_OPS.get(node["op"], ())
        if "Norm" in kind and node["op"] == "aten::layer_norm":
            return self._hook_layer_norm_call(module, dims)
        if not ((kind == "GELU" and node["op"] == "aten::gelu") or whole):
            return False
        self._handles.append(module.register_forward_hook(
            lambda mod, args, out, dims=dims: out - out.mean(dim=dims, keepdim=True)))
        return True

    def _hook_layer_norm_call(self, module: nn.Module, dims) -> bool:
        """The value is the F.layer_norm call inside the norm module, not the module's output: a
        channels-first norm (timm's LayerNorm2d) permutes after it, so centering the module output
        along the node's axes would center another axis. While that module runs, F.layer_norm is
        whatever is installed then (NormPatch's RMSNorm for a folded LN) with its result centered."""
        def enter(mod, args):
            inner = F.layer_norm
            self._active.append(inner)

            def centered(*a, **k):
                out = inner(*a, **k)
                return out - out.mean(dim=dims, keepdim=True)

            F.layer_norm = centered

        def leave(mod, args, out):
            F.layer_norm = self._active.pop()

        self._handles.append(module.register_forward_pre_hook(enter))
        self._handles.append(module.register_forward_hook(leave))
        return True

    def _wrap_functional(self, node: dict, dims) -> bool:
        fname, source = self._FUNCTIONAL.get(node["op"]), node.get("source", "")
        if not fname or ":" not in source:
            return False
        original = self._wrapped.get(fname, getattr(F, fname))
        self._wrapped.setdefault(fname, original)

        def wrapper(*args, _inner=getattr(F, fname), _source=source, _dims=dims, **kwargs):
            out = _inner(*args, **kwargs)
            caller = sys._getframe(1)
            if f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}" == _source:
                return out - out.mean(dim=_dims, keepdim=True)
            return out

        setattr(F, fname, wrapper)
        return True

    def __enter__(self):
        for point in self.points:
            node, rank = point["after"], int(point["rank"])
            dims = tuple(int(a) - rank for a in point["axes"])
            if not (self._hook_module(node, dims) or self._wrap_functional(node, dims)):
                raise OracleError(f"an inserted centering follows {node['op']} @ {node.get('module', '')}: "
                                  f"the eager model has no module output or functional call that is that value")
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        if self._active:  # a forward that raised inside a norm module
            F.layer_norm = self._active[0]
            self._active.clear()
        for fname, original in self._wrapped.items():
            setattr(F, fname, original)
        return False


# ---------------------------------------------------------------- the maximal plan

def _leaf_modules(model: nn.Module):
    try:
        from transformers.pytorch_utils import Conv1D  # GPT-2's W[in,out] linear
    except Exception:  # no transformers in this environment
        Conv1D = ()
    for name, m in model.named_modules():
        prefix = name + "." if name else ""
        if Conv1D and isinstance(m, Conv1D):
            yield prefix, m, [("weight", 1, 1), ("bias", 0, 1)]
        elif isinstance(m, nn.Linear):
            yield prefix, m, [("weight", 0, 1), ("bias", 0, 1)]
        elif isinstance(m, nn.modules.conv._ConvNd) and not m.transposed:
            g = m.groups
            if m.out_channels // g > 1:  # a depthwise conv (one output per group) has nothing to center
                yield prefix, m, [("weight", 0, g), ("bias", 0, g)]
        elif isinstance(m, nn.Embedding):
            yield prefix, m, [("weight", 1, 1)]
        elif "Norm" in type(m).__name__:
            yield prefix, m, []


def maximal_entries(model: nn.Module, analysis: dict) -> List[Tuple[str, List[dict], bool]]:
    """Every linear, conv (within its groups), embedding and additive free parameter of the model
    centered along its output axis, plus whatever else the tool's plan centers."""
    entries: Dict[str, List[dict]] = {}
    owned = set()
    for prefix, m, slots in _leaf_modules(model):
        for pname, _ in m.named_parameters(recurse=False):
            owned.add(prefix + pname)
        for pname, axis, groups in slots:
            p = m._parameters.get(pname)
            if p is not None and p.is_floating_point() and p.dim() > axis and p.shape[axis] > 1:
                entries.setdefault(prefix + pname, []).append({"axis": axis, "groups": groups})
    for name, p in list(model.named_parameters()) + list(model.named_buffers()):
        if name in owned or name in entries or not p.is_floating_point() or p.dim() == 0:
            continue
        if _MULTIPLICATIVE.search(name.rsplit(".", 1)[-1]) or p.shape[-1] < 2:
            continue
        # Buffers are masks and statistics unless their own name (the last component: not the
        # module's, or patch_embed.bn.running_var would be "centered" into a negative variance)
        # reads like a table.
        if name in dict(model.named_buffers()) and not re.search(r"pos|embed|table|token",
                                                                  name.rsplit(".", 1)[-1]):
            continue
        entries.setdefault(name, []).append({"axis": p.dim() - 1, "groups": 1})
    for name, actions, _ in plan_entries(analysis):
        for a in actions:
            act = {"axis": a["axis"], "groups": a.get("groups", 1)}
            if a.get("scale"):  # after the plain centering of that tensor: it makes s * x mean-zero
                act["scale"] = a["scale"]
            if act not in entries.setdefault(name, []):
                entries[name].append(act)
    # One action per tensor: two axes of one table (a row and a column centering) compose.
    return [(n, acts, False) for n, acts in entries.items()]


# ---------------------------------------------------------------- LayerNorm patching

class NormPatch:
    """Within the context: the chosen LNs compute RMSNorm; the watched LNs' inputs are measured.

    LNs with a weight are recognised by the weight tensor's identity inside F.layer_norm (every
    flavour, nn.LayerNorm or a library's channels-first LN, ends there); LNs without one by their
    module, through a forward pre-hook and a wrapper of that instance's forward."""

    def __init__(self, model: nn.Module, rms: Sequence[str], watch: Sequence[str],
                 has_weight: Optional[Dict[str, bool]] = None):
        self.model = model
        self.keys: Dict[str, object] = {}
        for module in set(rms) | set(watch):
            self.keys[module] = self._key(module, (has_weight or {}).get(module, False))
        self.rms = {self.keys[m]: m for m in rms}
        self.watch = {self.keys[m]: m for m in watch}
        self.calls: Dict[str, int] = {}
        self.total = 0  # every F.layer_norm call, chosen or not
        self.stats: Dict[str, float] = {}
        self._current: Optional[str] = None
        self._handles = []

    def _key(self, module: str, has_weight: bool):
        named = dict(self.model.named_parameters(remove_duplicate=False))
        if module + ".weight" in named:
            return ("w", id(named[module + ".weight"]))
        if has_weight:  # an LN with a weight is named by its weight's path; anything else is a wrong name
            raise OracleError(f"the analysis names a LayerNorm with a weight '{module}', but the eager "
                              f"model has no parameter '{module}.weight' (a wrong LN name)")
        try:
            sub = self.model.get_submodule(module)
        except AttributeError:
            raise OracleError(f"the analysis names LayerNorm '{module}', which the eager model does not have")
        if "Norm" not in type(sub).__name__:
            raise OracleError(f"the analysis names LayerNorm '{module}', which is a {type(sub).__name__} "
                              f"in the eager model (a wrong LN name)")
        return ("m", id(sub))

    def _measure(self, name: str, x: torch.Tensor, ndims: int) -> None:
        dims = tuple(range(-ndims, 0))
        mean = x.mean(dim=dims)
        rms = x.pow(2).mean(dim=dims).sqrt()
        value = (mean.abs() / rms.clamp_min(1e-300)).max().item()
        previous = self.stats.get(name, 0.0)
        if math.isnan(value) or math.isnan(previous):
            # max(0.0, nan) is 0.0, which would read as "mean-zero": a NaN input (a plan that broke
            # the model) is unmeasured, so it confirms nothing.
            self.stats[name] = math.nan
            return
        self.stats[name] = max(previous, value)

    def __enter__(self):
        original = F.layer_norm
        self.original = original
        patch = self

        def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
            patch.total += 1
            key = ("w", id(weight)) if weight is not None else None
            name = patch.rms.get(key) or patch.watch.get(key) or patch._current
            patch._current = None
            if name is None:
                return original(x, normalized_shape, weight, bias, eps)
            patch.calls[name] = patch.calls.get(name, 0) + 1
            ndims = len(normalized_shape) if isinstance(normalized_shape, (tuple, list, torch.Size)) else 1
            if name in patch.watch.values():
                patch._measure(name, x, ndims)
            if name not in patch.rms.values():
                return original(x, normalized_shape, weight, bias, eps)
            dims = tuple(range(-ndims, 0))
            y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
            if weight is not None:
                y = y * weight
            return y + bias if bias is not None else y

        F.layer_norm = layer_norm
        torch.nn.functional.layer_norm = layer_norm
        for key, name in list(self.rms.items()) + list(self.watch.items()):
            if key[0] == "m":
                sub = self.model.get_submodule(name)
                self._handles.append(sub.register_forward_pre_hook(
                    lambda mod, args, name=name: setattr(patch, "_current", name)))
        return self

    def __exit__(self, *exc):
        F.layer_norm = self.original
        torch.nn.functional.layer_norm = self.original
        for h in self._handles:
            h.remove()
        return False


# ---------------------------------------------------------------- the checks

@dataclass
class OracleReport:
    fold_rel: List[float] = field(default_factory=list)          # worst over input sets, per output
    fold_ln_input_mean: Dict[str, float] = field(default_factory=dict)
    keeps: Dict[str, dict] = field(default_factory=dict)          # module -> how it was confirmed
    unconfirmed: List[dict] = field(default_factory=list)
    input_dependence: List[float] = field(default_factory=list)   # second set vs first, per output
    layer_norm_calls: int = 0                                     # F.layer_norm calls of one eager forward

    def to_json(self) -> dict:
        return {"fold_relative_float64": self.fold_rel, "fold_ln_input_mean": self.fold_ln_input_mean,
                "keeps": self.keeps, "unconfirmed": self.unconfirmed,
                "input_dependence": self.input_dependence, "layer_norm_calls": self.layer_norm_calls}


def _run(model: nn.Module, input_sets, rms=(), watch=(), has_weight=None) -> Tuple[List[Tuple[torch.Tensor, ...]], NormPatch]:
    outs = []
    # float64 by default too: library code that makes tensors without a dtype (transformers 4.41's
    # causal mask: torch.full(..., finfo(float64).min)) would otherwise overflow or round to float32.
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad(), NormPatch(model, rms, watch, has_weight) as patch:
            for inputs in input_sets:
                outs.append(_as_tuple(model(*inputs)))
    finally:
        torch.set_default_dtype(saved)
    return outs, patch


def _worst(ref_sets, got_sets) -> List[float]:
    worst: List[float] = []
    for ref, got in zip(ref_sets, got_sets):
        rel = relative_diff(ref, got)
        worst = rel if not worst else [max(a, b) for a, b in zip(worst, rel)]
    return worst


def float64_copy(model: nn.Module) -> nn.Module:
    """A float64 copy with parametrizations (weight norm) baked into plain parameters: a trace
    records the computed weight, and an eager model would recompute it from its factors over
    whatever centering was applied to it."""
    from torch.nn.utils import parametrize
    out = copy.deepcopy(model).double().eval()
    for m in list(out.modules()):
        if parametrize.is_parametrized(m):
            for pname in list(m.parametrizations.keys()):
                parametrize.remove_parametrizations(m, pname, leave_parametrized=True)
    return out


def check(eager: nn.Module, input_sets: Sequence[Sequence[torch.Tensor]], analysis: dict) -> OracleReport:
    """All of the oracle on one model. input_sets: at least two (the second shows input dependence)."""
    rep = OracleReport()
    sets64 = [to_float64(s) for s in input_sets]
    eager = float64_copy(eager)
    base = copy.deepcopy(eager)
    ref, counted = _run(base, sets64[:1])
    ref += _run(base, sets64[1:])[0]
    rep.input_dependence = relative_diff(ref[0], ref[1])
    rep.layer_norm_calls = counted.total
    if counted.total != len(analysis["layer_norms"]):
        # Every LN the eager forward runs must be in the analysis (one verdict per call): an LN the
        # importer does not see (another op, a norm under another name) would go unjudged.
        raise OracleError(f"the eager forward calls F.layer_norm {counted.total} times, the analysis "
                          f"lists {len(analysis['layer_norms'])} LayerNorms")

    lns = analysis["layer_norms"]
    has_weight = {l["module"]: bool(l.get("has_weight")) for l in lns}
    fold = [l["module"] for l in lns if l["foldable"]]
    keep = [l for l in lns if not l["foldable"]]

    if fold:
        folded = copy.deepcopy(eager)
        apply_actions(folded, plan_entries(analysis))
        with InsertedCenterings(folded, analysis):
            got, patch = _run(folded, sets64, rms=fold, watch=fold, has_weight=has_weight)
        missing = [m for m in fold if not patch.calls.get(m)]
        if missing:
            raise OracleError(f"the RMSNorm patch never reached {missing}")
        rep.fold_rel = _worst(ref, got)
        rep.fold_ln_input_mean = dict(patch.stats)

    if keep:
        maximal = copy.deepcopy(eager)
        apply_actions(maximal, maximal_entries(eager, analysis))
        with InsertedCenterings(maximal, analysis):
            _, patch = _run(maximal, sets64[:1], watch=[l["module"] for l in keep], has_weight=has_weight)
        for l in keep:
            mean = patch.stats.get(l["module"])
            entry = {"reason": l["reason"], "maximal_plan_input_mean": mean}
            if mean is not None and mean > NONZERO_REL:
                entry["confirmed_by"] = "not-mean-zero"
            elif l.get("leaves"):
                unsafe = copy.deepcopy(eager)
                apply_actions(unsafe, leaf_entries(analysis, l["leaves"]))
                got, _ = _run(unsafe, sets64)
                change = max(max(r) for r in (relative_diff(a, b) for a, b in zip(ref, got)))
                entry["centering_changes_output"] = change
                if change > CHANGED_REL:
                    entry["confirmed_by"] = "unsafe-centering"
            rep.keeps[l["module"]] = entry
            if "confirmed_by" not in entry:
                rep.unconfirmed.append({"module": l["module"], "reason": l["reason"],
                                        "explanation": l.get("explanation", ""), **entry})
    return rep
