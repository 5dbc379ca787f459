"""foldnorm.analyze / foldnorm.fold on eager models (the Python package's API, docs/python.md).

Usage: test_package_api.py [FOLDNORM_CLI] [test_name...]  (the CLI, when given, checks that the
Report's JSON and the errors are the CLI's.) Every verdict asserted here is confirmed by the fold's
float64 verification (the oracle) against the original model.
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from package_common import Logits, assert_depends_on_input, count, greedy_tokens, ids, max_rel, run, \
    tiny_gpt2  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import foldnorm  # noqa: E402

CLI = next((a for a in sys.argv[1:] if not a.startswith("test_")), None)


def test_ops_registered_on_import():
    x = torch.randn(4, 8, dtype=torch.float64)
    x = x - x.mean(-1, keepdim=True)
    w, b = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    ours = foldnorm.rms_norm(x, 8, w, b, 1e-5)
    assert max_rel(F.layer_norm(x, (8,), w, b, 1e-5), ours) < 1e-12  # mean-zero input: LN == RMSNorm


def test_analyze_gpt2_report():
    model = tiny_gpt2()
    report = foldnorm.analyze(model, {"input_ids": ids()})
    modules = [ln.module for ln in report.layer_norms]
    assert modules == ["transformer.h.0.ln_1", "transformer.h.0.ln_2", "transformer.h.1.ln_1",
                       "transformer.h.1.ln_2", "transformer.ln_f"], modules
    data = json.loads(report.to_json())
    assert data["schema"] == "foldnorm-analysis/1" and len(data["layer_norms"]) == 5
    eager = dict(model.named_parameters(remove_duplicate=False))
    assert report.plan and all(p.parameter in eager for p in report.plan), [p.parameter for p in report.plan]
    for ln in report.layer_norms:
        assert isinstance(ln.foldable, bool) and ln.explanation and ln.normalized_shape == [32]
        assert ln.foldable == (ln.reason == "none")
        if ln.foldable:
            assert ln.leaves, ln
    text = repr(report)
    assert "foldnorm.Report" in text and "transformer.ln_f" in text
    page = report._repr_html_()
    assert "<table" in page and "<svg" in page and "transformer.h.0.ln_1" in page
    assert report.svg("transformer.ln_f").lstrip().startswith("<?xml") or "<svg" in report.svg("transformer.ln_f")
    # The model was traced in eval mode and handed back as it came.
    assert not model.training and "forward" not in model.__dict__


def test_fold_gpt2_eager():
    model = tiny_gpt2()
    before = copy.deepcopy(model.state_dict())
    x = ids()
    report = foldnorm.analyze(model, {"input_ids": x})
    folded = foldnorm.fold(model, {"input_ids": x})
    summary = folded.foldnorm_summary
    assert summary.verified and summary.worst_relative_float64 <= foldnorm.FLOAT64_TOLERANCE
    assert count(folded, foldnorm.RMSNorm) == len(report.foldable) == len(summary.folded) > 0
    assert count(folded, nn.LayerNorm) == len(report.layer_norms) - len(report.foldable)
    # The original is untouched, and still ties lm_head to wte; the fold split the tie.
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.lm_head.weight is model.transformer.wte.weight
    if "transformer.wte.weight" in summary.untied:
        assert folded.lm_head.weight is not folded.transformer.wte.weight
        assert folded.config.tie_word_embeddings is False
        assert torch.equal(folded.lm_head.weight, model.lm_head.weight)  # the head keeps the original
    wte = folded.transformer.wte.weight.detach().double()
    assert float(wte.mean(-1).abs().max()) < 1e-6, "embedding rows are not centered"
    with torch.no_grad():
        assert max_rel(model(x).logits, folded(x).logits) < 1e-4
    assert_depends_on_input(lambda t: folded(t).logits, x, ids(seed=7))


def test_generate_same_greedy_tokens():
    model = tiny_gpt2()
    folded = foldnorm.fold(model, {"input_ids": ids()})
    prompt = ids(batch=1, seq=5, seed=3)
    a, b = greedy_tokens(model, prompt, 8), greedy_tokens(folded, prompt, 8)
    assert torch.equal(a, b), (a, b)
    assert not torch.equal(greedy_tokens(model, ids(batch=1, seq=5, seed=4), 8)[:, 5:], a[:, 5:])


def test_scriptmodule_and_path_inputs():
    model = tiny_gpt2()
    x = ids()
    eager = foldnorm.analyze(model, {"input_ids": x})
    traced = torch.jit.trace(Logits(model), (x,), check_trace=False)
    scripted = foldnorm.analyze(traced, x)
    assert [ln.foldable for ln in scripted.layer_norms] == [ln.foldable for ln in eager.layer_norms]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.pt")
        traced.save(path)
        from_path = foldnorm.analyze(path, x)
    assert [ln.module for ln in from_path.layer_norms] == ["m." + ln.module for ln in eager.layer_norms]
    if CLI:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.pt")
            traced.save(path)
            ours = json.loads(foldnorm.analyze(path, x).to_json())
            spec = f"{x.shape[0]}x{x.shape[1]}:int64[{int(x.min())},{int(x.max()) + 1})"
            cli = json.loads(subprocess.run([CLI, "analyze", path, "--json", "--input", spec], check=True,
                                            capture_output=True, text=True).stdout)
        for j in (ours, cli):
            j["summary"].pop("milliseconds")
        assert ours == cli, "Report.to_json() is not the CLI's JSON"


def test_errors_carry_the_cli_messages():
    try:
        foldnorm.analyze("/nonexistent/model.pt")
        raise AssertionError("no error for a missing file")
    except foldnorm.FoldnormError as e:
        message = str(e)
    assert "/nonexistent/model.pt" in message and "\n" not in message
    if CLI:
        r = subprocess.run([CLI, "analyze", "/nonexistent/model.pt"], capture_output=True, text=True)
        assert r.returncode != 0 and message in r.stderr, (message, r.stderr)
    try:
        foldnorm.analyze(tiny_gpt2(), {"input_ids": "not a tensor"})
        raise AssertionError("no error for a bad example input")
    except TypeError as e:
        assert "input_ids" in str(e)


class FunctionalBlock(nn.Module):
    """A pre-LN residual block whose first LN is called functionally on the block's own
    parameters (no LayerNorm module to swap) and whose final LN is an nn.LayerNorm."""

    def __init__(self, d=16):
        super().__init__()
        self.d = d
        self.embed = nn.Linear(8, d)
        self.norm_weight = nn.Parameter(torch.rand(d) + 0.5)
        self.norm_bias = nn.Parameter(torch.randn(d))
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.final = nn.LayerNorm(d)
        self.head = nn.Linear(d, 5)

    def forward(self, x):
        h = self.embed(x)
        h = h + self.mlp(F.layer_norm(h, (self.d,), self.norm_weight, self.norm_bias, 1e-5))
        return self.head(self.final(h))


def test_functional_layer_norm_is_kept_and_exact():
    torch.manual_seed(0)
    model = FunctionalBlock().eval()
    x = torch.randn(3, 4, 8)
    report = foldnorm.analyze(model, x)
    assert [ln.foldable for ln in report.layer_norms] == [True, True], report
    folded = foldnorm.fold(model, x)
    s = folded.foldnorm_summary
    assert s.functional == [report.layer_norms[0].module or "<top>"] and s.folded == ["final"], s
    assert isinstance(folded.final, foldnorm.RMSNorm) and s.verified
    assert_depends_on_input(folded, x, torch.randn(3, 4, 8))


def test_wrong_plan_is_caught_by_verification():
    """The verifier can fail: centering a linear weight along its input axis instead of its
    output axis changes the function, and the float64 check names the output."""
    from foldnorm import _fold
    from foldnorm.api import _verify
    torch.manual_seed(0)
    model = FunctionalBlock().eval()
    x = torch.randn(3, 4, 8)
    report = foldnorm.analyze(model, x)
    weight = next(p for p in report.plan if p.parameter == "embed.weight")
    assert weight.center == [(0, 1)], weight
    weight.center = [(1, 1)]
    try:
        _verify(model, report, foldnorm._trace.Inputs(x), {}, False, 1, _fold.FoldSummary())
        raise AssertionError("a wrong plan passed verification")
    except foldnorm.FoldError as e:
        assert "output" in str(e) and "float64" in str(e), str(e)


if __name__ == "__main__":
    run(globals())
