"""Fold Hugging Face checkpoints too big to load (issue 29, docs/method.md section 11).

The plan depends on the architecture's code, not on its width or depth. ``plan_checkpoint(src)``
builds the checkpoint's own config (``src/config.json``) with 3 layers and a small width,
instantiates it with random weights, analyses it with :func:`foldnorm.analyze` and writes the
plan over parameter names with the layer index abstracted (``model.decoder.layers.{i}.fc2.weight``:
center axis 0; untie ``lm_head.weight``; ``model.decoder.layers.{i}.final_layer_norm`` becomes
RMSNorm), checked to be the same for every layer of the small model. ``fold_checkpoint`` hands it
to the C++ core, which checks it against the checkpoint's index and writes the folded shards
tensor by tensor (src/checkpoint/). ``load_folded`` loads the result with the listed LayerNorms
as :class:`foldnorm.RMSNorm`.

    python -m foldnorm.checkpoint plan SRC_DIR -o PLAN.json   # what `foldnorm fold-checkpoint` runs
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from . import _foldnorm
from ._fold import (FoldSummary, _module_paths, _names_holding, _owner, _plain_layer_norm, _redirected_holders,
                    _tensor)
from ._trace import Inputs, as_file, hf_call_options
from .errors import FoldnormError
from .nn import RMSNorm
from .report import Report

PLAN_SCHEMA = "foldnorm-checkpoint-plan/1"
FOLDED_PLAN_FILE = "foldnorm_plan.json"
PathLike = Union[str, os.PathLike]

_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_FFN_KEYS = ("ffn_dim", "intermediate_size", "n_inner", "ffn_hidden_size", "inner_hidden_size")


def _transformers():
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers


def small_config(config, layers: int = 3, head_dim: int = 8):
    """``config`` with ``layers`` layers and a small width: at most 4 attention heads (or, with
    fewer key/value heads, at most 2 of those, each with its share of query heads up to 4) of
    ``head_dim``, feed-forward widths scaled with the hidden size."""
    c = copy.deepcopy(config)
    if getattr(c, "num_hidden_layers", None) is None:
        raise FoldnormError(f"the config ({type(config).__name__}) has no layer count foldnorm knows")
    c.num_hidden_layers = layers
    hidden = getattr(c, "hidden_size", None)
    heads = getattr(c, "num_attention_heads", None)
    if not isinstance(hidden, int) or not isinstance(heads, int):
        raise FoldnormError(f"the config ({type(config).__name__}) has no hidden_size and num_attention_heads")
    kv_key = next((k for k in ("num_key_value_heads", "num_kv_heads") if isinstance(getattr(c, k, None), int)), None)
    kv = getattr(c, kv_key) if kv_key else None
    if kv and kv < heads:
        kv2 = min(kv, 2)
        heads2 = kv2 * min(heads // kv, 4)
        setattr(c, kv_key, kv2)
    else:
        heads2 = min(heads, 4)
        if kv_key:
            setattr(c, kv_key, heads2)
    hidden2 = heads2 * head_dim
    c.num_attention_heads = heads2
    c.hidden_size = hidden2
    if isinstance(getattr(c, "head_dim", None), int) and not isinstance(getattr(type(c), "head_dim", None), property):
        c.head_dim = head_dim
    for key in _FFN_KEYS:
        v = getattr(c, key, None)
        if isinstance(v, int) and v > 0:
            setattr(c, key, max(1, round(v * hidden2 / hidden)))
    if isinstance(getattr(c, "word_embed_proj_dim", None), int):  # OPT's projected embeddings
        w = c.word_embed_proj_dim
        c.word_embed_proj_dim = hidden2 if w == hidden else max(head_dim, round(w * hidden2 / hidden))
    return c


def _model_class(config):
    tf = _transformers()
    for name in getattr(config, "architectures", None) or []:
        cls = getattr(tf, name, None)
        if cls is not None:
            return cls
    return tf.AutoModelForCausalLM._model_mapping[type(config)]


def _traceable(model: nn.Module) -> nn.Module:
    """The small model with the ops a trace cannot save replaced by their plain twins (same values):
    transformers 5 computes BLOOM's GELU in a torch.autograd.Function; its inference formula is
    bloom_gelu_forward (as the corpus does, tests/corpus/hf_corpus.py)."""
    import types
    for m in model.modules():
        if type(m).__name__ == "BloomGelu":
            from transformers.models.bloom import modeling_bloom
            m.forward = types.MethodType(lambda self, x: modeling_bloom.bloom_gelu_forward(x), m)
    return model


def _layer_list(model: nn.Module, layers: int) -> str:
    found = [p for p, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m) == layers
             and any(True for _ in m.parameters())]
    found = [p for p in found if not any(q != p and p.startswith(q + ".") for q in found)]
    if len(found) != 1:
        raise FoldnormError(f"the small capture has {'no' if not found else 'several'} list(s) of {layers} layers "
                            f"({', '.join(found) or 'none'}): foldnorm plans checkpoints with one stack of layers")
    return found[0]


def _split(name: str, prefix: str) -> Tuple[Optional[int], str]:
    """(layer, name with the layer index as {i}) for a name under ``prefix``; (None, name) else."""
    m = re.match(re.escape(prefix) + r"\.(\d+)(\..*)?$", name) if prefix else None
    if not m:
        return None, name
    return int(m.group(1)), f"{prefix}.{{i}}{m.group(2) or ''}"


def generalize(entries: Dict[str, Any], prefix: str, layers: int, what: str) -> Dict[str, Any]:
    """Turns {name: value} into {pattern: value} with the layer index of names under ``prefix``
    abstracted; every layer 0..layers-1 must have the same patterns with the same values, else
    FoldnormError naming the first layer that differs from layer 0 and how."""
    per_layer: Dict[int, Dict[str, Any]] = {i: {} for i in range(layers)}
    out: Dict[str, Any] = {}
    for name, value in entries.items():
        layer, pattern = _split(name, prefix)
        if layer is None:
            out[name] = value
        else:
            per_layer.setdefault(layer, {})[pattern] = value
    first = per_layer.get(0, {})
    for i in sorted(per_layer):
        if per_layer[i] == first:
            continue
        for pattern in sorted(set(first) | set(per_layer[i])):
            here, there = per_layer[i].get(pattern), first.get(pattern)
            if here != there:
                name = pattern.replace("{i}", str(i))
                raise FoldnormError(
                    f"layer {i} differs from layer 0 in the small capture ({what}): {name} is "
                    f"{json.dumps(here) if here is not None else 'absent'} there but "
                    f"{json.dumps(there) if there is not None else 'absent'} in layer 0: a checkpoint plan "
                    "needs every layer alike")
    out.update(first)
    return out


def _raw_config(src: PathLike) -> Dict[str, Any]:
    path = os.path.join(os.fspath(src), "config.json")
    if not os.path.exists(path):
        raise FoldnormError(f"{os.fspath(src)} has no config.json (a Hugging Face checkpoint folder is expected)")
    with open(path) as f:
        return json.load(f)


def plan_checkpoint(src: PathLike, *, layers: int = 3, report=None) -> Dict[str, Any]:
    """The plan (schema foldnorm-checkpoint-plan/1) for the checkpoint folder ``src``, made on a
    small random model of its config: which tensors to center along which axis (patterns over
    names, ``{i}`` the layer), which tied heads to write untied, which LayerNorms become RMSNorm.
    ``report`` receives the small capture's Report (a list to append to), for tests."""
    from . import api
    tf = _transformers()
    raw = _raw_config(src)
    try:
        config = tf.AutoConfig.from_pretrained(os.fspath(src))
    except Exception as e:  # noqa: BLE001  (transformers' own message, in one line)
        raise FoldnormError(f"transformers cannot read {os.fspath(src)}/config.json: {str(e).splitlines()[0]}") from e
    small = small_config(config, layers)
    torch.manual_seed(0)
    model = _traceable(_model_class(small)(small).eval())
    prefix = _layer_list(model, layers)
    vocab = int(getattr(small, "vocab_size", 256) or 256)
    ids = torch.randint(0, min(vocab, 256), (1, 8))
    # A scale absorption reads a second tensor and an inserted centering changes the model's code:
    # neither is a tensor-by-tensor step, so the capture is analysed without them (the LNs they
    # would free stay LayerNorm, listed in "kept"), as `foldnorm analyze --no-scale-absorb
    # --no-insert-centering` would.
    with as_file(model, {"input_ids": ids}) as (path, specs, names):
        rep = Report(_foldnorm.analyze(path, specs, True, [], False, False), names)
    if report is not None:
        report.append(rep)
    refused = [f"scale absorption {s.get('description', '')}" for s in rep.data.get("scale_absorptions", [])]
    refused += [f"inserted centering {s.get('description', '')}" for s in rep.data.get("insertions", []) if s.get("inserted")]
    if refused:  # cannot happen with both turned off; a plan with them would be applied wrongly
        raise FoldnormError("the small capture's plan has steps a checkpoint cannot take tensor by tensor (they need "
                            "another tensor's values or a change to the model's code): " + "; ".join(refused))
    # This plan, executed on the small model as the eager fold does, is verified in float64 (as
    # foldnorm.fold verifies), so the plan written is a proven one.
    summary = FoldSummary()
    api._verify(model, rep, Inputs({"input_ids": ids}), hf_call_options(model), False, 3, summary)
    center, untie, optional = _eager_plan(model, rep)
    center = generalize(center, prefix, layers, "centered tensors")
    untie = generalize(untie, prefix, layers, "untied tensors")
    shapes = {n: list(t.shape) for n, t in list(model.named_parameters(remove_duplicate=False))
              + list(model.named_buffers(remove_duplicate=False))}
    norms, kept = _norms(model, rep)
    norms = generalize(norms, prefix, layers, "LayerNorms made RMSNorm")
    # Kept LNs must be the same per layer; their explanations name their own layer's modules (and
    # layer 0's may name the embedding), so only membership is compared, with layer 0's reason.
    kept_patterns = generalize({m: True for m in kept}, prefix, layers, "LayerNorms kept")
    kept = {p: kept[p.replace("{i}", "0")] for p in kept_patterns}
    def rank(pattern):
        return len(shapes[pattern.replace("{i}", "0")])
    return {
        "schema": PLAN_SCHEMA,
        "architecture": type(model).__name__,
        "model_type": getattr(config, "model_type", ""),
        "layers": {"prefix": prefix, "count_key": next((k for k in _LAYER_KEYS if k in raw), "")},
        "base_model_prefix": getattr(model, "base_model_prefix", "") or "",
        "center": [{"pattern": p, "rank": rank(p), "center": [{"axis": a, "groups": g} for a, g in c],
                    **({"optional": True} if p in optional else {})} for p, c in sorted(center.items())],
        "untie": [{"name": n, "copy_of": src_name} for n, src_name in sorted(untie.items())],
        "rms_norms": [{"module": m, "has_weight": w, "has_bias": b} for m, (w, b) in sorted(norms.items())],
        "kept": [{"module": m, "reason": r} for m, r in sorted(kept.items())],
        "capture": {"layers": layers, "hidden_size": small.hidden_size, "num_attention_heads": small.num_attention_heads,
                    "layer_norms": len(rep.layer_norms), "foldable": len(rep.foldable),
                    "worst_relative_float64": summary.worst_relative_float64,
                    "transformers": tf.__version__, "torch": torch.__version__},
    }


def _eager_plan(model: nn.Module, rep) -> Tuple[Dict[str, list], Dict[str, str], set]:
    """The analysis' plan on eager names, as the eager fold (_fold.apply_plan) executes it:
    {name: [(axis, groups)]} to center, {head: tensor it was tied to} to write untied, and the
    names of a tied storage centered in place that a saved checkpoint may leave out."""
    paths = _module_paths(model)
    leaf_modules = {leaf["id"]: leaf["node"]["module"] for leaf in rep.data.get("leaves", [])}
    center: Dict[str, list] = {}
    untie: Dict[str, str] = {}
    optional = set()
    for p in rep.plan:
        owner, name = _owner(model, p.parameter)
        original = _tensor(owner, name, p.parameter)
        holders = _names_holding(model, original)
        if p.untie_mode == "in-place":
            targets = holders
        elif p.untie_mode == "redirect-reads":
            targets = _redirected_holders(model, p, original, leaf_modules)
        else:
            targets = [(owner, name)]
        names = [_join(paths[id(m)], n) for m, n in targets]
        actions = [(int(a), int(g)) for a, g in p.center]
        for n in names:
            center[n] = actions
        if p.untie_mode == "in-place":
            optional.update(n for n in names if n != p.parameter)
        source = names[0]
        for m, n in holders:
            full = _join(paths[id(m)], n)
            if full not in names:
                untie[full] = source
    return center, untie, optional


def _join(module: str, name: str) -> str:
    return f"{module}.{name}" if module else name


def _norms(model: nn.Module, rep) -> Tuple[Dict[str, tuple], Dict[str, str]]:
    calls: Dict[str, list] = {}
    for v in rep.layer_norms:
        calls.setdefault(v.module, []).append(v)
    norms, kept = {}, {}
    for path, verdicts in calls.items():
        bad = [v for v in verdicts if not v.foldable]
        if bad:
            kept[path or "<top>"] = bad[0].explanation
            continue
        try:
            module = model.get_submodule(path) if path else None
        except AttributeError:
            module = None
        if module is None or not _plain_layer_norm(module):
            continue  # a functional LN stays LayerNorm: exact, its input is only shifted
        norms[path] = (module.weight is not None, module.bias is not None)
    return norms, kept


def fold_checkpoint(src: PathLike, out: Optional[PathLike], plan: Optional[Union[PathLike, Dict[str, Any]]] = None,
                    dry_run: bool = False, *, progress: bool = True) -> Dict[str, Any]:
    """Folds the safetensors checkpoint folder ``src`` into the new folder ``out`` (the CLI's
    ``foldnorm fold-checkpoint``). ``plan``: a plan dict or JSON file; by default
    ``plan_checkpoint(src)``. ``dry_run``: check and report from the index, read no weights.
    Returns the result (schema foldnorm-fold-checkpoint/1). Raises FoldnormError in one line for
    a checkpoint that does not fit the plan; Ctrl-C stops it and leaves no output folder."""
    if plan is None:
        plan = plan_checkpoint(src)
    elif not isinstance(plan, dict):
        with open(plan) as f:
            plan = json.load(f)
    text = _foldnorm.fold_checkpoint(os.fspath(src), os.fspath(out) if out is not None else "", json.dumps(plan),
                                     dry_run, progress)
    return json.loads(text)


def use_rms_norms(model: nn.Module, path: PathLike) -> nn.Module:
    """Makes the LayerNorms a folded checkpoint's plan lists (``path/foldnorm_plan.json``)
    :class:`foldnorm.RMSNorm`, holding the same Parameters: the one call after
    ``from_pretrained(path)`` (which loads a folded folder as it is, LayerNorms and all: exact,
    but not cheaper). Returns ``model``."""
    with open(os.path.join(os.fspath(path), FOLDED_PLAN_FILE)) as f:
        listed = json.load(f)["rms_norms"]
    for name in listed:
        parent, _, attr = name.rpartition(".")
        try:
            ln = model.get_submodule(name)
        except AttributeError as e:
            raise FoldnormError(f"the folded plan names LayerNorm {name}, which the model does not have") from e
        if isinstance(ln, RMSNorm):
            continue
        if not isinstance(ln, nn.LayerNorm):
            raise FoldnormError(f"the folded plan names {name}, which is a {type(ln).__name__}, not a LayerNorm")
        setattr(model.get_submodule(parent) if parent else model, attr, RMSNorm.from_layer_norm(ln))
    return model


def load_folded(path: PathLike, dtype: Optional[torch.dtype] = None, **kwargs) -> nn.Module:
    """The folded checkpoint in ``path`` as a transformers model (the class its config names,
    weights in their saved dtype unless ``dtype``) with the listed LayerNorms as RMSNorm, in
    eval mode: ``from_pretrained`` then :func:`use_rms_norms`."""
    tf = _transformers()
    config = tf.AutoConfig.from_pretrained(os.fspath(path))
    model = _model_class(config).from_pretrained(os.fspath(path), dtype=dtype or "auto", **kwargs)
    return use_rms_norms(model, path).eval()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldnorm.checkpoint",
                                     description="Make a checkpoint fold plan from a small capture of SRC's architecture")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="write the plan for the checkpoint folder SRC")
    p.add_argument("src")
    p.add_argument("-o", "--out", required=True, help="plan JSON to write")
    p.add_argument("--layers", type=int, default=3, help="layers of the small capture (default 3)")
    args = parser.parse_args(argv)
    try:
        plan = plan_checkpoint(args.src, layers=args.layers)
    except FoldnormError as e:
        print(f"foldnorm: error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  (transformers or the trace failing on this architecture)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"foldnorm: error: the small capture of {args.src} failed: {type(e).__name__}: {first}", file=sys.stderr)
        return 2
    with open(args.out, "w") as f:
        json.dump(plan, f, indent=2)
    print(f"[foldnorm] plan: {len(plan['center'])} tensor pattern(s) to center, {len(plan['untie'])} to untie, "
          f"{len(plan['rms_norms'])} LayerNorm pattern(s) to RMSNorm ({plan['architecture']}, captured with "
          f"{args.layers} layers of width {plan['capture']['hidden_size']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
