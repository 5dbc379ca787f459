"""Capture and errors of the Python API (issue 32): torch.export first, torch.jit.trace where export
fails (Report.capture says which), and every failure as one FoldnormError line.

BLOOM (transformers 5.24) computes its GeLU in a Python autograd.Function, which torch.jit.trace
refuses: it analyses and folds from Python only through torch.export.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from package_common import max_rel, run, tiny_bloom  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

import foldnorm  # noqa: E402


class Square(torch.autograd.Function):
    """A Python autograd.Function, as BLOOM's GeLUFunction: torch.jit.trace cannot save it."""

    @staticmethod
    def forward(ctx, x):
        return x * x

    @staticmethod
    def backward(ctx, g):
        return g


class Block(nn.Module):
    """emb -> fc -> LN, with optional obstacles for one capture or the other."""

    def __init__(self, autograd_function=False, data_dependent=False):
        super().__init__()
        self.emb, self.fc, self.ln = nn.Embedding(16, 8), nn.Linear(8, 8), nn.LayerNorm(8)
        self.head = nn.Linear(8, 4)
        self.autograd_function, self.data_dependent = autograd_function, data_dependent
        with torch.no_grad():
            self.ln.weight.add_(0.1 * torch.randn(8))
            self.ln.bias.add_(0.1 * torch.randn(8))

    def forward(self, ids):
        h = self.fc(self.emb(ids))
        if self.autograd_function:
            h = h + 0.01 * Square.apply(self.emb(ids)).mean(-1, keepdim=True)
        if self.data_dependent and float(ids.sum()) >= 0:  # export cannot guard on a value
            h = h * 1.0
        return self.head(self.ln(h))


def _ids():
    return torch.randint(0, 16, (2, 5), generator=torch.Generator().manual_seed(0))


def _one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and len(text) < 1000, text
    assert e.__cause__ is None and e.__suppress_context__, "the raw exception would be printed too"
    return text


def test_bloom_analyses_and_folds_through_export():
    model, x = tiny_bloom()
    report = foldnorm.analyze(model, x)
    assert report.capture == "torch.export", report.capture
    assert len(report.foldable) == len(report.layer_norms) > 0, report
    folded = foldnorm.fold(model, x)
    s = folded.foldnorm_summary
    assert s.capture == "torch.export" and s.verified and s.worst_relative_float64 <= foldnorm.FLOAT64_TOLERANCE, s
    with torch.no_grad():
        assert max_rel(model(**x).logits, folded(**x).logits) < 1e-4


def test_trace_is_the_fallback_and_is_said():
    model = Block(data_dependent=True).eval()
    report = foldnorm.analyze(model, _ids())
    assert report.capture == "torch.jit.trace", report.capture
    folded = foldnorm.fold(model, _ids())
    assert folded.foldnorm_summary.capture == "torch.jit.trace" and folded.foldnorm_summary.verified
    assert foldnorm.analyze(Block().eval(), _ids()).capture == "torch.export"


def test_both_captures_fail_in_one_line():
    model = Block(autograd_function=True, data_dependent=True).eval()
    try:
        foldnorm.analyze(model, _ids())
        raise AssertionError("no error")
    except foldnorm.FoldnormError as e:
        text = _one_line(e)
    assert text.startswith("cannot capture Block with torch.export: ") and "; tracing refused: " in text, text
    assert "Square" in text or "autograd" in text.lower() or "Python" in text, text
    assert "forward" not in model.__dict__  # the instance is handed back as it came


def test_pt2_paths_analyse_and_fold():
    import tempfile
    model, x = Block().eval(), _ids()
    with tempfile.TemporaryDirectory() as d:
        path, out = os.path.join(d, "block.pt2"), os.path.join(d, "folded.pt2")
        torch.export.save(torch.export.export(model, (x,), strict=False), path)
        report = foldnorm.analyze(path)
        assert report.capture == "file" and [ln.foldable for ln in report.layer_norms] == [True], report
        program = foldnorm.fold_traced(path, out=out, rms_op="aten")
        assert program.foldnorm_report["verification"]["float64_equivalent"], program.foldnorm_report
        with torch.no_grad():
            assert max_rel(model(x), program.module()(x)) < 1e-4


def test_every_failure_is_one_foldnorm_error_line():
    class Raises(nn.Module):
        def forward(self, x):
            raise ValueError("model says no\nsecond line")

    cases = [
        ("a forward that raises", lambda: foldnorm.fold(Raises(), torch.randn(2, 3))),
        ("bad example inputs", lambda: foldnorm.analyze(Block(), "ids")),
        ("an unknown keyword", lambda: foldnorm.fold(Block(), _ids(), bogus=1)),
        ("a missing file", lambda: foldnorm.analyze("/nonexistent/model.pt2")),
        ("a bad setting", lambda: foldnorm.fold_traced(Block().eval(), _ids(), rms_op="nope")),
        ("a ScriptModule for fold", lambda: foldnorm.fold(torch.jit.trace(Block().eval(), _ids()), _ids())),
        ("bench of a non-module", lambda: foldnorm.bench(Block(), None, _ids())),
    ]
    for what, call in cases:
        try:
            call()
            raise AssertionError(f"{what}: no error")
        except foldnorm.FoldnormError as e:
            _one_line(e)
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"{what}: {type(e).__name__} reached the user: {e}") from e
    try:  # argument errors are also TypeErrors, as Python has them
        foldnorm.analyze(Block(), "ids")
    except TypeError:
        pass


def test_a_failing_fold_stage_is_named():
    model, x = Block().eval(), _ids()
    report = foldnorm.analyze(model, x)
    import foldnorm._fold as fold_module
    original = fold_module.swap_layer_norms

    def broken(*args):
        raise KeyError("boom")

    fold_module.swap_layer_norms = broken
    try:
        foldnorm.fold(model, x)
        raise AssertionError("no error")
    except foldnorm.FoldError as e:
        assert _one_line(e).startswith("the eager fold of Block failed: KeyError"), e
    finally:
        fold_module.swap_layer_norms = original
    assert report.plan


if __name__ == "__main__":
    run(globals())
