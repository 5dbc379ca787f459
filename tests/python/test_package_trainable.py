"""foldnorm.fold(..., trainable=True): the centered tensors are reparametrised (CBWC), so training
the fold is training the original: a few SGD and Adam steps give the same losses in float64.

Usage: test_package_trainable.py [test_name...]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from package_common import ids, run, tiny_gpt2  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.utils import parametrize  # noqa: E402

import foldnorm  # noqa: E402

STEPS = 6


def _losses(model, make_optimizer, batches):
    model.train()
    opt = make_optimizer(model.parameters())
    losses = []
    for x in batches:
        logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


def _compare(make_optimizer):
    model = tiny_gpt2().double()
    x = ids()
    folded = foldnorm.fold(model, {"input_ids": x}, trainable=True)
    assert folded.foldnorm_summary.verified and folded.foldnorm_summary.trainable
    assert sum(isinstance(m, foldnorm.RMSNorm) for m in folded.modules()) > 0
    wte = folded.transformer.wte
    assert parametrize.is_parametrized(wte, "weight")
    # The split tie stays one trained tensor: the head reads it raw, the embedding its projection.
    assert folded.lm_head.weight is wte.parametrizations.weight.original
    batches = [ids(seed=10)] * STEPS  # one batch: the loss must fall, so the steps are real
    original = _losses(model, make_optimizer, batches)
    ours = _losses(folded, make_optimizer, batches)
    for step, (a, b) in enumerate(zip(original, ours)):
        assert abs(a - b) <= 1e-9 * abs(a), (step, a, b)
    assert original[-1] < original[0] - 1e-3, f"training did not move the loss: {original}"
    # Still centered after training: the embedding the model reads has mean-zero rows.
    assert float(wte.weight.detach().mean(-1).abs().max()) < 1e-12
    assert float(wte.parametrizations.weight.original.detach().mean(-1).abs().max()) > 1e-6
    return original


def test_sgd_steps_match_the_original():
    _compare(lambda p: torch.optim.SGD(p, lr=0.5))


def test_adam_steps_match_the_original():
    _compare(lambda p: torch.optim.Adam(p, lr=1e-2))


if __name__ == "__main__":
    run(globals())
