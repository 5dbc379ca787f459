"""The eager fold: the analysis' plan executed on a deep copy of an ``nn.Module``.

The plan is made on the trace, whose attribute paths are the eager module's parameter names
(_trace.py), so each ParameterPlan names an eager parameter or buffer. Its untie modes map as:

- ``in-place``: nothing but centered leaves reads the storage: every name holding that Parameter
  sees the centered values (one Parameter, changed in place).
- ``own-attribute``: other names share the storage (a tied embedding: GPT-2's ``lm_head.weight``
  is ``transformer.wte.weight``); this name gets its own centered Parameter, the others keep the
  original. The tie is split, so a Hugging Face config's ``tie_word_embeddings`` is turned off in
  the copy (saving and reloading would otherwise tie them again).
- ``redirect-reads``: the trace read one attribute for the leaf and for other ops. The tracer
  names a tied tensor once (GPT-2's head reads ``transformer.wte.weight`` in the trace), while in
  the eager module each reader has its own name: the names held by the leaves' modules get the
  centered copy, the others keep the original. When the eager module has no such separate name,
  this is a FoldError (``fold_traced`` redirects the reads in the graph).

With ``trainable=True`` nothing is overwritten: each planned tensor is reparametrised with
``torch.nn.utils.parametrize`` as its centered projection (CBWC, src/train/cbwc.cpp), so training
keeps it centered. A split tie stays one trained Parameter there (the centered side reads its
projection), which is what keeps the trainable fold's gradients those of the original.

Each foldable ``nn.LayerNorm`` module becomes ``foldnorm.RMSNorm`` holding its weight, bias and
eps. A LayerNorm called functionally, or through a module with its own forward (timm's
LayerNorm2d permutes around it), has no module to swap: it stays a LayerNorm, which is exact (its
input is only shifted by the centering) and is reported in ``FoldSummary.functional``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
from torch import nn
from torch.nn.utils import parametrize

from .errors import FoldError
from .nn import RMSNorm
from .report import ParameterPlan, Report


class Center(nn.Module):
    """The centering projection of a plan entry, the arithmetic of src/fold/fold_support.cpp
    (centered64): for each action in order, an unscaled one splits the axis into ``groups``
    equal parts and subtracts each part's mean; a scaled one (scale absorption, method.md
    section 7) subtracts ``mean_k(s_k x[k]) / s_c`` along the axis, so that ``s * x`` is
    mean-zero. ``scales`` holds, per action, the scale tensor or None. As a parametrization
    (``trainable=True``) they are the model's own scale Parameters, read live (kept in a plain
    list, so they are not registered twice): the projection follows the scale as it trains."""

    def __init__(self, actions: List[Tuple[int, ...]], scales: Optional[List[Optional[torch.Tensor]]] = None) -> None:
        super().__init__()
        self.actions = [(int(a[0]), int(a[1])) for a in actions]
        self._scales: List[Optional[torch.Tensor]] = list(scales) if scales is not None else [None] * len(actions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for (axis, groups), scale in zip(self.actions, self._scales):
            n = x.shape[axis]
            moved = x.movedim(axis, -1)
            if scale is not None:
                s = scale.to(x.dtype).reshape(-1)
                x = (moved - (moved * s).mean(-1, keepdim=True) / s).movedim(-1, axis)
                continue
            grouped = moved.reshape(-1, groups, n // groups)
            grouped = grouped - grouped.mean(-1, keepdim=True)
            x = grouped.reshape(moved.shape).movedim(-1, axis)
        return x

    def extra_repr(self) -> str:
        return ", ".join(f"axis={a}, groups={g}" + (", scaled" if s is not None else "")
                         for (a, g), s in zip(self.actions, self._scales))


class CenterOutput:
    """A forward hook that centers a module's output: ``y - y.mean(axes, keepdim=True)``, an
    inserted centering (method.md section 8, what src/fold/apply_plan.cpp's insertCenterings
    writes as aten mean + sub after the planned node). A class, not a closure, so a folded model
    still pickles with ``torch.save``."""

    def __init__(self, axes: List[int], rank: int, where: str) -> None:
        self.axes, self.rank, self.where = [int(a) for a in axes], int(rank), where

    def __call__(self, module: nn.Module, args, output):
        if not isinstance(output, torch.Tensor) or (self.rank >= 0 and output.dim() != self.rank):
            raise FoldError(f"the inserted centering after {self.where} expects a tensor of rank {self.rank} "
                            f"from that module, which returned {_describe(output)}: use foldnorm.fold_traced")
        return output - output.mean(self.axes, keepdim=True)

    def __repr__(self) -> str:
        return f"CenterOutput(axes={self.axes})"


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of rank {x.dim()}"
    return f"a {type(x).__name__}"


@dataclass
class FoldSummary:
    """What ``foldnorm.fold`` did, attached to the folded module as ``foldnorm_summary``."""

    folded: List[str] = field(default_factory=list)       #: LN modules replaced by RMSNorm
    kept: Dict[str, str] = field(default_factory=dict)    #: LN module -> why it stays LayerNorm
    functional: List[str] = field(default_factory=list)   #: foldable LNs with no module to swap
    centered: List[str] = field(default_factory=list)     #: parameters changed (or reparametrised)
    untied: List[str] = field(default_factory=list)       #: parameters given their own copy
    scaled: List[str] = field(default_factory=list)       #: centered with a scale absorbed (method.md 7)
    inserted: List[str] = field(default_factory=list)     #: inserted centerings (module: description)
    trainable: bool = False
    capture: str = ""                                     #: torch.export | torch.jit.trace
    verified: bool = False
    verification: str = ""                                #: "float64 on cpu" (where it ran)
    worst_relative_float64: float = 0.0                   #: over all outputs and input sets
    relative_error_native: Dict[str, float] = field(default_factory=dict)  #: in the model's dtype


def _owner(root: nn.Module, path: str) -> Tuple[nn.Module, str]:
    parent, _, name = path.rpartition(".")
    try:
        return (root.get_submodule(parent) if parent else root), name
    except AttributeError as e:
        raise FoldError(f"the plan's parameter {path} is not in the eager module ({e})") from e


def _tensor(owner: nn.Module, name: str, path: str) -> torch.Tensor:
    if name in owner._parameters and owner._parameters[name] is not None:
        return owner._parameters[name]
    if name in owner._buffers and owner._buffers[name] is not None:
        return owner._buffers[name]
    raise FoldError(f"the plan's parameter {path} is not a parameter or buffer of the eager module "
                    "(a tensor the trace baked in as a constant): use foldnorm.fold_traced")


def _scale(root: nn.Module, path: str, planned: str) -> torch.Tensor:
    """The scale a scaled centering of ``planned`` absorbs (LayerScale's gamma): the copy's own
    tensor (a Parameter, so a trainable fold reads it as it trains)."""
    owner, name = _owner(root, path)
    if parametrize.is_parametrized(owner, name):
        raise FoldError(f"the scale {path} that {planned} absorbs is parametrized in the model; "
                        "foldnorm cannot read it")
    t = _tensor(owner, name, path)
    if not bool((t != 0).all()):
        raise FoldError(f"the scale {path} that {planned} absorbs has a zero entry: it cannot be absorbed")
    return t


def _names_holding(root: nn.Module, tensor: torch.Tensor) -> List[Tuple[nn.Module, str]]:
    found = []
    for m in root.modules():
        for store in (m._parameters, m._buffers):
            for n, t in store.items():
                if t is tensor:
                    found.append((m, n))
    return found


def _set_tensor(owner: nn.Module, name: str, original: torch.Tensor, value: torch.Tensor) -> None:
    """``value`` (a Parameter when ``original`` is one, shared by every name it is set on)."""
    if isinstance(original, nn.Parameter):
        setattr(owner, name, value)
    else:
        owner.register_buffer(name, value, persistent=name not in owner._non_persistent_buffers_set)


def _module_paths(root: nn.Module) -> Dict[int, str]:
    return {id(m): path for path, m in root.named_modules(remove_duplicate=False)}


def _redirected_holders(root: nn.Module, p: ParameterPlan, original: torch.Tensor,
                        leaf_modules: Dict[int, str]) -> List[Tuple[nn.Module, str]]:
    """redirect-reads: the trace read one attribute for a tensor that several eager names hold
    (the tracer names a tied tensor once: GPT-2's head reads ``transformer.wte.weight``). In the
    eager module each reader reads its own name, so the names held by the leaves' modules get
    the centered copy and the others keep the original. Verification checks the result."""
    paths = _module_paths(root)
    readers = {leaf_modules[l] for l in p.leaves if l in leaf_modules}
    holders = _names_holding(root, original)
    centered = [(m, n) for m, n in holders if paths.get(id(m)) in readers]
    if not centered or len(centered) == len(holders):
        raise FoldError(f"{p.parameter} is read through one attribute by a centered leaf and by other "
                        "ops, and the eager module has no separate name for the leaf's reads: use "
                        "foldnorm.fold_traced (which redirects the reads in the graph), or untie=False")
    return centered


def apply_plan(root: nn.Module, plan: List[ParameterPlan], trainable: bool, summary: FoldSummary,
               leaf_modules: Dict[int, str]) -> None:
    """Centers (or reparametrises) the planned parameters of ``root`` as the plan says;
    ``leaf_modules`` maps leaf ids to the module path of the leaf's op."""
    done = set()
    for p in plan:
        owner, name = _owner(root, p.parameter)
        if parametrize.is_parametrized(owner, name):
            if (id(owner), name) in done:
                continue
            raise FoldError(f"{p.parameter} is already parametrized in the model; foldnorm cannot "
                            "center it")
        original = _tensor(owner, name, p.parameter)
        if list(original.shape) != p.shape:
            raise FoldError(f"{p.parameter} has shape {list(original.shape)} in the eager module but "
                            f"{p.shape} in the trace")
        actions = p.actions
        scale_names = [a.scale for a in actions]
        live = [_scale(root, n, p.parameter) if n else None for n in scale_names]
        center = Center(actions, [t.detach().to(torch.float64) if t is not None else None for t in live])
        if p.untie_mode == "in-place":
            targets = _names_holding(root, original)
        elif p.untie_mode == "redirect-reads":
            targets = _redirected_holders(root, p, original, leaf_modules)
        else:
            targets = [(owner, name)]
        if trainable:
            for m, n in targets:
                if (id(m), n) not in done:
                    parametrize.register_parametrization(m, n, Center(actions, live))
                    done.add((id(m), n))
        else:
            with torch.no_grad():
                value = center(original.detach().to(torch.float64)).to(original.dtype).contiguous()
                if p.untie_mode == "in-place":
                    original.copy_(value)
                elif isinstance(original, nn.Parameter):  # one new Parameter the centered names share
                    value = nn.Parameter(value, requires_grad=original.requires_grad)
                for m, n in ([] if p.untie_mode == "in-place" else targets):
                    _set_tensor(m, n, original, value)
                    done.add((id(m), n))
            done.add((id(owner), name))
        summary.centered.append(p.parameter)
        if any(scale_names):
            summary.scaled.append(p.parameter)
        if p.untie:
            summary.untied.append(p.parameter)


def _plain_layer_norm(m: nn.Module) -> bool:
    """An nn.LayerNorm whose forward is layer_norm over its last dims (nn.LayerNorm's own, or a
    subclass known to compute just that), so RMSNorm can take its place."""
    if not isinstance(m, nn.LayerNorm):
        return False
    forward = type(m).forward
    if forward is nn.LayerNorm.forward:
        return True
    try:  # timm's LayerNorm: F.layer_norm (or its fast-norm twin) over the last dims
        from timm.layers.norm import LayerNorm as TimmLayerNorm
        return forward is TimmLayerNorm.forward
    except ImportError:
        return False


def swap_layer_norms(root: nn.Module, report: Report, summary: FoldSummary) -> None:
    """Replaces each foldable LayerNorm module (every call of it foldable) by RMSNorm."""
    calls: Dict[str, List] = {}
    for v in report.layer_norms:
        calls.setdefault(v.module, []).append(v)
    for path, verdicts in calls.items():
        not_foldable = [v for v in verdicts if not v.foldable]
        if not_foldable:
            summary.kept[path or "<top>"] = not_foldable[0].explanation
            continue
        try:
            module = root.get_submodule(path) if path else None
        except AttributeError:
            module = None
        shape = verdicts[0].normalized_shape
        if module is None or not _plain_layer_norm(module) or list(module.normalized_shape) != shape:
            summary.functional.append(path or "<top>")
            continue
        parent, _, name = path.rpartition(".")
        setattr(root.get_submodule(parent) if parent else root, name, RMSNorm.from_layer_norm(module))
        summary.folded.append(path)


def insert_centerings(root: nn.Module, report: Report, summary: FoldSummary) -> None:
    """Each inserted centering of the plan as a forward hook on the module whose output the
    planned node makes (the module of ``after``: an embedding LayerNorm in BLOOM and pre-LN
    RoBERTa). Runs after the LN swap, so the hook sits on the module the folded model calls."""
    for ins in report.insertions:
        if not ins.inserted:
            continue
        where = f"{ins.op} @ {ins.module or '<top>'}"
        try:
            module = root.get_submodule(ins.module) if ins.module else None
        except AttributeError:
            module = None
        if module is None or module is root:
            raise FoldError(f"the plan inserts a centering after {where}, which is not the output of a "
                            "submodule of the eager model: use foldnorm.fold_traced (which inserts it in the graph)")
        module.register_forward_hook(CenterOutput(ins.axes, ins.rank, where))
        summary.inserted.append(f"{ins.module}: {ins.description}")


def untie_config(root: nn.Module, summary: FoldSummary) -> None:
    """A split tie must stay split through save_pretrained/from_pretrained."""
    config = getattr(root, "config", None)
    if not summary.untied or config is None:
        return
    for c in {id(config): config, id(getattr(config, "get_text_config", lambda: config)()):
              getattr(config, "get_text_config", lambda: config)()}.values():
        if getattr(c, "tie_word_embeddings", False):
            c.tie_word_embeddings = False


def build(model: nn.Module, report: Report, trainable: bool, float64: bool,
          device: Optional[torch.device] = None) -> Tuple[nn.Module, FoldSummary]:
    folded = copy.deepcopy(model)
    if device is not None:
        folded = folded.to(device)
    if float64:
        folded = folded.double()
    summary = FoldSummary(trainable=trainable)
    leaf_modules = {leaf["id"]: leaf["node"]["module"] for leaf in report.data.get("leaves", [])}
    apply_plan(folded, report.plan, trainable, summary, leaf_modules)
    swap_layer_norms(folded, report, summary)
    insert_centerings(folded, report, summary)
    untie_config(folded, summary)
    return folded, summary
