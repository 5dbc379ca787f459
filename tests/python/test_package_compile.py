"""The folded eager model under torch.compile (CPU, inductor), a bfloat16 fold verified in float64,
and foldnorm.bench's result (issue 32).

The foldnorm ops have Meta kernels (src/ops/register_ops.cpp), so inductor traces the folded model
without a graph break: it compiles fullgraph where the original does, and its outputs equal the
original's within float32 rounding. Compiling takes tens of seconds per model on a CPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from package_common import count, ids, max_rel, run, tiny_gpt2, tiny_roberta_prelayernorm  # noqa: E402

import torch  # noqa: E402

import foldnorm  # noqa: E402


def _compiled_outputs(model, x, fullgraph):
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=fullgraph)
    with torch.no_grad():
        return compiled(**x).last_hidden_state


def test_folded_model_compiles_fullgraph():
    # RobertaPreLayerNorm: RMSNorm modules, a fused plan and the inserted centering's hook.
    model, x = tiny_roberta_prelayernorm()
    folded = foldnorm.fold(model, x)
    assert folded.foldnorm_summary.inserted and count(folded, foldnorm.RMSNorm) > 0
    try:
        reference, fullgraph = _compiled_outputs(model, x, fullgraph=True), True
    except Exception:  # noqa: BLE001  (the original breaks the graph: compare without fullgraph)
        reference, fullgraph = _compiled_outputs(model, x, fullgraph=False), False
    ours = _compiled_outputs(folded, x, fullgraph=fullgraph)  # fullgraph where the original is
    with torch.no_grad():
        eager = model(**x).last_hidden_state
    assert max_rel(eager, reference) < 1e-4
    assert max_rel(eager, ours) < 1e-4, max_rel(eager, ours)
    print(f"  compiled {'fullgraph' if fullgraph else 'with graph breaks'}: relative {max_rel(eager, ours):.1e}")


def test_bfloat16_fold_verified_in_float64_on_cpu():
    model = tiny_gpt2().to(torch.bfloat16)
    x = {"input_ids": ids()}
    folded = foldnorm.fold(model, x)
    s = folded.foldnorm_summary
    assert s.verified and s.verification == "float64 on cpu", s
    assert s.worst_relative_float64 <= foldnorm.FLOAT64_TOLERANCE, s
    assert folded.transformer.wte.weight.dtype == torch.bfloat16
    assert count(folded, foldnorm.RMSNorm) > 0
    with torch.no_grad():
        a, b = model(**x).logits, folded(**x).logits
    assert b.dtype == torch.bfloat16 and max_rel(a, b) < 0.1, max_rel(a, b)


def test_bench_result_structure():
    model = tiny_gpt2()
    x = {"input_ids": ids()}
    folded = foldnorm.fold(model, x, verify=False)
    r = foldnorm.bench(model, folded, x, rounds=4, warmup=1, min_sample_ms=0.0)
    assert isinstance(r, foldnorm.BenchResult) and r.rounds == 4 and not r.compiled
    assert len(r.original_samples) == len(r.folded_samples) == 4
    assert r.original_ms > 0 and r.folded_ms > 0 and r.speedup_low <= r.speedup <= r.speedup_high
    assert r.original_spread[0] <= r.original_ms <= r.original_spread[1]
    assert r.verdict == "too few rounds", r.verdict
    text = repr(r)
    assert "speed-up" in text and "original" in text and "\n" not in text, text


if __name__ == "__main__":
    run(globals())
