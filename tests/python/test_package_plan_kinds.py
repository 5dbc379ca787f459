"""The eager fold executes every kind of plan the analysis makes (issue 32), each on the model
where it first went wrong: transformers 5.24 tiny configs, norms and biases perturbed.

- scaled centering (scale absorption, method.md section 7): Dinov2's LayerScale;
- inserted centering (method.md section 8): RobertaPreLayerNorm, after embeddings.LayerNorm;
- untied copy: GPT-2's tied wte/lm_head (the head keeps the original, the embedding is centered).

Each test fails without its part of python/foldnorm/_fold.py: before issue 32 the eager fold
executed only plain centerings and raised FoldError "diverged in float64" (relative 4e-2 / 2e-2)
on the first two, where fold_traced of the same models was exact.
"""
import functools
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from package_common import count, max_rel, run, tiny_dinov2, tiny_gpt2, tiny_roberta_prelayernorm, ids  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

import foldnorm  # noqa: E402


def _exact(model, folded, x, key="last_hidden_state"):
    s = folded.foldnorm_summary
    assert s.verified and s.worst_relative_float64 <= foldnorm.FLOAT64_TOLERANCE, s
    with torch.no_grad():
        a, b = getattr(model(**x), key), getattr(folded(**x), key)
    assert max_rel(a, b) < 1e-4, max_rel(a, b)
    return s


def _get(model, path):
    """A tensor by its dotted path, also where it is parametrized (trainable=True)."""
    return functools.reduce(getattr, path.split("."), model)


def _scaled_rows_mean(model, plan):
    """Worst row mean of gamma * W over the scaled weights of ``plan`` (2-D ones): what the
    scaled centering makes zero."""
    worst = 0.0
    for p in plan:
        for a in p.actions:
            w = _get(model, p.parameter).detach().double()
            if a.scale is None or w.dim() != 2:
                continue
            gamma = _get(model, a.scale).detach().double()
            worst = max(worst, float((gamma[:, None] * w).mean(0).abs().max()))
    return worst


def test_scaled_centering_dinov2():
    model, x = tiny_dinov2()
    report = foldnorm.analyze(model, x)
    scaled = [p for p in report.plan if p.scaled]
    assert report.data["scale_absorptions"] and scaled, report
    assert all("layer_scale" in a.scale for p in scaled for a in p.actions if a.scale), scaled
    folded = foldnorm.fold(model, x)
    s = _exact(model, folded, x)
    assert sorted(s.scaled) == sorted(p.parameter for p in scaled) and count(folded, foldnorm.RMSNorm) > 0
    # What the scaled centering guarantees: gamma * (W' h + b') has mean-zero rows.
    assert _scaled_rows_mean(model, scaled) > 1e-4 and _scaled_rows_mean(folded, scaled) < 1e-6  # 9.4e-4 -> 3e-11 (torch 2.14)
    # Without scale absorption fewer LNs fold: the absorption is what this test exercises.
    plain = foldnorm.analyze(model, x, scale_absorb=False)
    assert len(plain.foldable) < len(report.foldable) == len(report.layer_norms), (plain, report)


def test_scaled_centering_trainable_follows_the_scale():
    model, x = tiny_dinov2()
    scaled = [p for p in foldnorm.analyze(model, x).plan if p.scaled]
    folded = foldnorm.fold(model, x, trainable=True)
    assert folded.foldnorm_summary.verified and folded.foldnorm_summary.scaled
    with torch.no_grad():  # a training step moves gamma: the projection must follow it
        for p in scaled:
            for a in p.actions:
                gamma = folded.get_parameter(a.scale)
                gamma.mul_(1 + 0.3 * torch.randn_like(gamma))
    assert _scaled_rows_mean(folded, scaled) < 1e-6


def test_inserted_centering_roberta_prelayernorm():
    model, x = tiny_roberta_prelayernorm()
    report = foldnorm.analyze(model, x)
    inserted = [i for i in report.insertions if i.inserted]
    assert [i.module for i in inserted] == ["embeddings.LayerNorm"], report.insertions
    folded = foldnorm.fold(model, x)
    s = _exact(model, folded, x)
    assert len(s.inserted) == 1 and s.inserted[0].startswith("embeddings.LayerNorm"), s.inserted
    # The centering is a hook on the module: state_dict keys unchanged, and the model pickles.
    assert list(folded.state_dict()) == list(model.state_dict())
    buffer = io.BytesIO()
    torch.save(folded, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    with torch.no_grad():
        assert torch.equal(again(**x).last_hidden_state, folded(**x).last_hidden_state)
    # Without the insertion fewer LNs fold: the insertion is what this test exercises.
    plain = foldnorm.analyze(model, x, insert_centering=False)
    assert len(plain.foldable) < len(report.foldable), (plain, report)


def test_untied_copy_gpt2():
    model = tiny_gpt2()
    x = {"input_ids": ids()}
    report = foldnorm.analyze(model, x)
    untied = [p for p in report.plan if p.untie]
    # The tied storage has two eager names; a trace reads it as transformer.wte.weight, an export
    # as lm_head.weight (redirect-reads: the embedding's reads get the centered copy).
    tied = {"transformer.wte.weight", "lm_head.weight"}
    assert len(untied) == 1 and untied[0].parameter in tied, report.plan
    folded = foldnorm.fold(model, x)
    s = folded.foldnorm_summary
    assert s.verified and s.worst_relative_float64 <= foldnorm.FLOAT64_TOLERANCE and s.untied == [untied[0].parameter]
    assert folded.lm_head.weight is not folded.transformer.wte.weight
    assert torch.equal(folded.lm_head.weight, model.lm_head.weight)  # the head keeps the original
    assert float(folded.transformer.wte.weight.detach().double().mean(-1).abs().max()) < 1e-6
    assert folded.config.tie_word_embeddings is False
    with torch.no_grad():
        assert max_rel(model(**x).logits, folded(**x).logits) < 1e-4


if __name__ == "__main__":
    run(globals())
