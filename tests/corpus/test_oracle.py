#!/usr/bin/env python3
"""The oracle must be able to say no: hand-written analyses of small eager models, right and wrong.

- a pre-LN model with the right plan folds exactly; the same plan without one leaf does not;
- a post-LN KEEP is confirmed (its input carries the previous LN's affine output);
- a KEEP whose input is mean-zero once the model is centered (an identity the rules might not know,
  here dropout with p=0 in training mode) is UNCONFIRMED;
- an unsafe-shift KEEP is confirmed by the change its centering makes to an output;
- a shared (tied) parameter is untied for one name only.
Run by ctest (corpus_oracle_self_test); prints one line per case, exits 1 on the first wrong answer.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

D = 8


class PreLN(nn.Module):
    """emb -> +fc(ln1(x)) -> ln2 -> output; with `train_dropout` the residual passes through
    F.dropout(p=0, training=True), an identity."""

    def __init__(self, train_dropout=False, post=False):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(10, D)
        self.ln1 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.head = nn.Linear(D, 3)
        self.train_dropout, self.post = train_dropout, post
        with torch.no_grad():
            for p in self.parameters():
                p.add_(0.1 * torch.randn_like(p))

    def forward(self, ids):
        x = self.emb(ids)
        if self.train_dropout:
            x = F.dropout(x, p=0.0, training=True)
        h = self.ln1(x)
        x = (h if self.post else x) + self.fc(h)
        return (self.head(self.ln2(x)),)


class Unsafe(PreLN):
    """emb -> fc -> ln2 -> head, and (when return_fc) fc's output returned as well."""

    def __init__(self, return_fc=True):
        super().__init__()
        self.return_fc = return_fc

    def forward(self, ids):
        y = self.fc(self.emb(ids))
        out = self.head(self.ln2(y))
        return (out, y) if self.return_fc else (out,)


class Scaled(PreLN):
    """emb -> x + gamma * fc(ln1(x)) -> ln2 -> head: LayerScale after fc (docs/method.md section 7)."""

    def __init__(self):
        super().__init__()
        self.gamma = nn.Parameter(0.2 + torch.rand(D))

    def forward(self, ids):
        x = self.emb(ids)
        x = x + self.gamma * self.fc(self.ln1(x))
        return (self.head(self.ln2(x)),)


class EmbLN(PreLN):
    """emb -> ln0 -> x + fc(ln1(x)) -> ln2 -> head: the stream starts at ln0's output (section 8)."""

    def __init__(self):
        super().__init__()
        self.ln0 = nn.LayerNorm(D)
        with torch.no_grad():
            self.ln0.bias.add_(0.3 * torch.randn(D))

    def forward(self, ids):
        x = self.ln0(self.emb(ids))
        x = x + self.fc(self.ln1(x))
        return (self.head(self.ln2(x)),)


class ChannelsFirstLayerNorm(nn.LayerNorm):
    """timm's LayerNorm2d in one dimension: [B, C, T] -> permute -> F.layer_norm over C -> permute back."""

    def forward(self, x):
        x = F.layer_norm(x.permute(0, 2, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 2, 1)


class EmbLN2d(EmbLN):
    """EmbLN with ln0 channels-first: the value after the F.layer_norm call is [B, T, C], the
    module's output [B, C, T], so an insertion along C must center inside the module."""

    def __init__(self):
        super().__init__()
        old = self.ln0
        self.ln0 = ChannelsFirstLayerNorm(D)
        with torch.no_grad():
            self.ln0.weight.copy_(old.weight)
            self.ln0.bias.copy_(old.bias)

    def forward(self, ids):
        x = self.ln0(self.emb(ids).transpose(1, 2)).transpose(1, 2)
        x = x + self.fc(self.ln1(x))
        return (self.head(self.ln2(x)),)


def ln(module, foldable, reason="none", leaves=()):
    return {"module": module, "foldable": foldable, "reason": reason, "explanation": reason,
            "leaves": list(leaves)}


LEAVES = [{"id": 0, "center": [{"parameter": "emb.weight", "axis": 1, "groups": 1}]},
          {"id": 1, "center": [{"parameter": "fc.weight", "axis": 0, "groups": 1},
                               {"parameter": "fc.bias", "axis": 0, "groups": 1}]}]
PLAN = [{"parameter": "emb.weight", "center": [{"axis": 1, "groups": 1}], "untie": False},
        {"parameter": "fc.weight", "center": [{"axis": 0, "groups": 1}], "untie": False},
        {"parameter": "fc.bias", "center": [{"axis": 0, "groups": 1}], "untie": False}]
IDS = [(torch.tensor([[1, 2, 3, 4]]),), (torch.tensor([[5, 6, 7, 8]]),)]


def expect(what, ok):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        sys.exit(1)


def main():
    both = {"layer_norms": [ln("ln1", True, leaves=[0]), ln("ln2", True, leaves=[0, 1])],
            "leaves": LEAVES, "plan": PLAN}
    rep = oracle.check(PreLN(), IDS, both)
    expect(f"right plan folds exactly ({max(rep.fold_rel):.2g})", max(rep.fold_rel) <= oracle.EXACT_REL)
    expect("the output depends on the input", min(rep.input_dependence) > oracle.CHANGED_REL)

    missing = dict(both, plan=PLAN[:1])
    rep = oracle.check(PreLN(), IDS, missing)
    expect(f"a plan without fc's centering is caught ({max(rep.fold_rel):.2g})",
           max(rep.fold_rel) > oracle.CHANGED_REL)

    post = {"layer_norms": [ln("ln1", True, leaves=[0]), ln("ln2", False, "breaker")],
            "leaves": LEAVES, "plan": PLAN[:1]}
    rep = oracle.check(PreLN(post=True), IDS, post)
    expect("a post-LN KEEP is confirmed (input not mean-zero)",
           rep.keeps["ln2"].get("confirmed_by") == "not-mean-zero" and not rep.unconfirmed)

    missed = {"layer_norms": [ln("ln1", False, "breaker"), ln("ln2", False, "breaker")],
              "leaves": LEAVES, "plan": []}
    rep = oracle.check(PreLN(train_dropout=True), IDS, missed)
    expect("KEEPs behind an identity dropout are UNCONFIRMED",
           sorted(u["module"] for u in rep.unconfirmed) == ["ln1", "ln2"])

    # ln2 kept for an unsafe shift: fc's output is also returned, so centering fc (which would make
    # ln2's input mean-zero) changes that output. (a) cannot confirm it; (b) must.
    unsafe = {"layer_norms": [ln("ln2", False, "unsafe-shift", leaves=[1])], "leaves": LEAVES, "plan": []}
    rep = oracle.check(Unsafe(), IDS, unsafe)
    expect("an unsafe-shift KEEP is confirmed by its centering changing an output",
           rep.keeps["ln2"].get("confirmed_by") == "unsafe-centering")
    rep = oracle.check(Unsafe(return_fc=False), IDS, unsafe)
    expect("the same KEEP without the extra output is UNCONFIRMED (a missed fold)",
           [u["module"] for u in rep.unconfirmed] == ["ln2"])

    tied = PreLN()
    tied.head = nn.Linear(D, D)  # a head over D outputs whose weight is fc's (one storage)
    tied.head.weight = tied.fc.weight
    plan = [dict(p, untie=(p["parameter"] == "fc.weight")) for p in PLAN]
    rep = oracle.check(tied, IDS, dict(both, plan=plan))
    expect(f"untie centers one name only ({max(rep.fold_rel):.2g})", max(rep.fold_rel) <= oracle.EXACT_REL)
    rep = oracle.check(tied, IDS, both)
    expect("centering the shared storage without untie is caught", max(rep.fold_rel) > oracle.CHANGED_REL)
    try:
        oracle.check(PreLN(), IDS, dict(both, layer_norms=both["layer_norms"][:1]))
        expect("an LN missing from the analysis is caught", False)
    except oracle.OracleError as e:
        expect(f"an LN missing from the analysis is caught ({e})", "calls F.layer_norm 2 times" in str(e))
    # Scaled centering (docs/method.md section 7): the plan's actions name the scale they center under.
    scaled = [dict(p, center=[dict(a, scale="gamma") for a in p["center"]]) if p["parameter"].startswith("fc.")
              else p for p in PLAN]
    scaled_analysis = dict(both, plan=scaled)
    rep = oracle.check(Scaled(), IDS, scaled_analysis)
    expect(f"a scaled centering folds exactly ({max(rep.fold_rel):.2g})", max(rep.fold_rel) <= oracle.EXACT_REL)
    rep = oracle.check(Scaled(), IDS, both)
    expect(f"plain centering under a per-channel scale is caught ({max(rep.fold_rel):.2g})",
           max(rep.fold_rel) > oracle.CHANGED_REL)

    # Inserted centering (section 8): x - mean(x) after ln0, then ln1 and ln2 fold.
    inserted = {"layer_norms": [ln("ln0", True, leaves=[0]), ln("ln1", True, leaves=[2]),
                                ln("ln2", True, leaves=[1, 2])],
                "leaves": LEAVES, "plan": PLAN,
                "insertions": [{"after": {"op": "aten::layer_norm", "module": "ln0"}, "axes": [2], "rank": 3,
                                "inserted": True}]}
    rep = oracle.check(EmbLN(), IDS, inserted)
    expect(f"an inserted centering folds exactly ({max(rep.fold_rel):.2g})", max(rep.fold_rel) <= oracle.EXACT_REL)
    rep = oracle.check(EmbLN(), IDS, dict(inserted, insertions=[]))
    expect(f"the same verdicts without the insertion are caught ({max(rep.fold_rel):.2g})",
           max(rep.fold_rel) > oracle.CHANGED_REL)
    rep = oracle.check(EmbLN2d(), IDS, inserted)
    expect(f"an insertion after a channels-first LN centers the F.layer_norm value, not the permuted module "
           f"output ({max(rep.fold_rel):.2g})", max(rep.fold_rel) <= oracle.EXACT_REL)
    try:
        bad = dict(inserted, insertions=[dict(inserted["insertions"][0], after={"op": "aten::add", "module": ""})])
        oracle.check(EmbLN(), IDS, bad)
        expect("an insertion at a value with no module output is refused", False)
    except oracle.OracleError as e:
        expect(f"an insertion at a value with no module output is refused ({e})", "aten::add" in str(e))
    print("all cases: the oracle confirms right answers and rejects wrong ones")
    return 0


if __name__ == "__main__":
    sys.exit(main())
