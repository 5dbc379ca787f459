"""The analysis as Python objects: which LayerNorms fold, why not, and the parameter plan.

Everything here is read from the C++ core's JSON (schema foldnorm-analysis/1, docs/json-schema.md),
so ``Report.to_json()`` is byte for byte what ``foldnorm analyze --json`` prints for the same file,
and the notebook view (``_repr_html_``) draws an LN's mean-zero graph with the renderer the CLI's
``render --view ln:PATH`` uses.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Tuple


def _node(j: Optional[Dict[str, Any]]) -> Optional[str]:
    if not j:
        return None
    where = j.get("module") or "<top>"
    return f"{j['op']} @ {where}"


@dataclass
class LayerNormVerdict:
    """One LayerNorm call of the traced model."""

    index: int                    #: position among the LNs, graph order
    name: str                     #: the name the ln: view takes (module path, "#k" when shared)
    module: str                   #: module path ("" for an LN outside any module)
    foldable: bool
    reason: str                   #: "none" when foldable, else why not (toString(VerdictReason))
    explanation: str              #: one line, as the CLI prints it
    breaker: Optional[str]        #: "op @ module" of the node that breaks mean-zero, if any
    path: List[str]               #: LN ... breaker, or unsafe leaf ... consumer ("op @ module")
    leaves: List[str]             #: the leaves to center ("Linear @ h.0.attn.c_proj", ...)
    normalized_shape: List[int]
    eps: float
    has_weight: bool
    has_bias: bool
    raw: Dict[str, Any] = field(repr=False, default_factory=dict)

    def __repr__(self) -> str:
        verdict = "foldable" if self.foldable else f"not foldable ({self.reason})"
        return f"<LayerNorm {self.module or '<top>'}: {verdict}>"


class CenterAction(NamedTuple):
    """One centering of a plan entry (CenterAction in include/foldnorm/analysis/facts.h, the
    JSON's ``plan[].center[]``): subtract the mean along ``axis`` within ``groups`` equal parts;
    with a ``scale`` (a parameter path: scale absorption, method.md section 7) subtract
    ``mean_k(scale_k x[k]) / scale_c`` instead, so that ``scale * x`` becomes mean-zero."""

    axis: int
    groups: int
    scale: Optional[str] = None


@dataclass
class ParameterPlan:
    """One parameter the fold changes (ParameterPlan in include/foldnorm/analysis/analysis.h, the
    JSON's ``plan[]``): the one description of it that the eager fold executes."""

    parameter: str                      #: attribute path (= the eager parameter name)
    shape: List[int]
    actions: List[CenterAction]         #: the centerings, applied in order
    untie: bool                         #: other reads of its storage keep the original
    untie_mode: str                     #: in-place | own-attribute | redirect-reads
    untie_bytes: int
    leaves: List[int] = field(default_factory=list)  #: ids of the centered leaves that read it

    @property
    def center(self) -> List[Tuple[int, int]]:
        """(axis, groups) of each action (``actions`` also has the scales)."""
        return [(a.axis, a.groups) for a in self.actions]

    @center.setter
    def center(self, pairs: List[Tuple[int, int]]) -> None:
        self.actions = [CenterAction(int(a), int(g)) for a, g in pairs]

    @property
    def scaled(self) -> bool:
        return any(a.scale is not None for a in self.actions)


@dataclass
class Insertion:
    """One inserted centering the analysis considered (InsertedCentering in analysis.h, the
    JSON's ``insertions[]``, method.md section 8): ``x - x.mean(axes, keepdim=True)`` at the output
    of the node ``op @ module``, a tensor of rank ``rank``. Only ``inserted`` ones are executed."""

    op: str
    module: str
    axes: List[int]
    rank: int
    inserted: bool
    description: str
    why: str = ""                       #: refused: why


class Report:
    """What ``foldnorm.analyze`` returns. ``layer_norms`` (graph order), ``plan``, ``to_json()``;
    ``repr`` is the CLI's text report, ``_repr_html_`` a verdict table and one LN's graph."""

    def __init__(self, analysis, output_names: Optional[List[str]] = None, capture: str = "file") -> None:
        self._analysis = analysis  # _foldnorm.Analysis: keeps the graph for rendering and folding
        self._json = analysis.json()
        self.data: Dict[str, Any] = json.loads(self._json)
        self.output_names: List[str] = list(output_names or [])
        leaves = {leaf["id"]: leaf for leaf in self.data.get("leaves", [])}
        names = analysis.ln_names()
        self.layer_norms: List[LayerNormVerdict] = []
        for i, ln in enumerate(self.data["layer_norms"]):
            self.layer_norms.append(LayerNormVerdict(
                index=i, name=names[i], module=ln["module"], foldable=ln["foldable"],
                reason=ln["reason"], explanation=ln["explanation"], breaker=_node(ln.get("breaker")),
                path=[_node(n) for n in ln.get("path", [])],
                leaves=[_leaf(leaves[l]) for l in ln["leaves"] if l in leaves],
                normalized_shape=list(ln["normalized_shape"]), eps=float(ln["eps"]),
                has_weight=ln["has_weight"], has_bias=ln["has_bias"], raw=ln))
        self.plan: List[ParameterPlan] = [
            ParameterPlan(parameter=p["parameter"], shape=list(p["shape"]),
                          actions=[CenterAction(int(a["axis"]), int(a["groups"]), a.get("scale"))
                                   for a in p["center"]],
                          untie=bool(p["untie"]), untie_mode=p["untie_mode"],
                          untie_bytes=int(p["untie_bytes"]), leaves=[int(l) for l in p["leaves"]])
            for p in self.data["plan"]]
        self.insertions: List[Insertion] = [
            Insertion(op=i["after"]["op"], module=i["after"]["module"], axes=[int(a) for a in i["axes"]],
                      rank=int(i["rank"]), inserted=bool(i["inserted"]), description=i["description"],
                      why=i.get("why", ""))
            for i in self.data.get("insertions", [])]
        #: How the model was captured for the analysis: "torch.export", "torch.jit.trace", or
        #: "file" / "scriptmodule" for what came captured.
        self.capture: str = capture

    @property
    def foldable(self) -> List[LayerNormVerdict]:
        return [ln for ln in self.layer_norms if ln.foldable]

    def to_json(self) -> str:
        """The CLI's JSON (``foldnorm analyze --json``, schema foldnorm-analysis/1)."""
        return self._json

    def text(self, verbose: bool = False) -> str:
        """The CLI's text report (``foldnorm analyze [-v]``)."""
        return self._analysis.text(verbose)

    def svg(self, ln: Optional[str] = None) -> str:
        """SVG of one LN's mean-zero graph (the ``ln:`` view): ``ln`` is a name or module path
        from ``layer_norms``; by default the first LN that does not fold (else the first)."""
        return self._analysis.svg(self._pick(ln).name)

    def _pick(self, ln: Optional[str]) -> LayerNormVerdict:
        if not self.layer_norms:
            raise ValueError("the model has no LayerNorm")
        if ln is None:
            return next((v for v in self.layer_norms if not v.foldable), self.layer_norms[0])
        for v in self.layer_norms:
            if ln in (v.name, v.module):
                return v
        raise KeyError(f"no LayerNorm named {ln!r}; names: {', '.join(v.name for v in self.layer_norms)}")

    def __repr__(self) -> str:
        n, k = len(self.layer_norms), len(self.foldable)
        head = f"<foldnorm.Report: {k} of {n} LayerNorm(s) foldable, {len(self.plan)} parameter(s) to center>"
        return head + "\n" + self.text().rstrip()

    def _repr_html_(self, ln: Optional[str] = None) -> str:
        rows = []
        for v in self.layer_norms:
            colour = "#d9f2d9" if v.foldable else "#f8d7d7"
            verdict = "foldable" if v.foldable else f"not foldable ({html.escape(v.reason)})"
            rows.append(f"<tr style='background:{colour}'><td><code>{html.escape(v.module or '<top>')}</code></td>"
                        f"<td>{verdict}</td><td>{html.escape(self._analysis.verdict_sentence(v.index))}</td></tr>")
        table = ("<table><thead><tr><th>LayerNorm</th><th>verdict</th><th>why</th></tr></thead><tbody>"
                 + "".join(rows) + "</tbody></table>")
        k, n = len(self.foldable), len(self.layer_norms)
        out = f"<div><p><b>foldnorm</b>: {k} of {n} LayerNorm(s) foldable, {len(self.plan)} parameter(s) to center</p>{table}"
        if self.layer_norms:
            chosen = self._pick(ln)
            try:
                svg = self._analysis.svg(chosen.name)
                start = svg.find("<svg")
                out += (f"<p>mean-zero graph of <code>{html.escape(chosen.name)}</code> "
                        f"({html.escape(self._analysis.verdict_sentence(chosen.index))})</p>"
                        + (svg[start:] if start >= 0 else svg))
            except Exception as e:  # rendering is a view: the table stands without it
                out += f"<p>(no graph: {html.escape(str(e))})</p>"
        return out + "</div>"


def _leaf(leaf: Dict[str, Any]) -> str:
    node = leaf.get("node", {})
    if leaf.get("kind") == "Parameter" and leaf.get("center"):
        return f"Parameter {leaf['center'][0]['parameter']}"
    where = node.get("module") or f"({node.get('op', '?')})"
    return f"{leaf.get('kind', '?')} @ {where}"
