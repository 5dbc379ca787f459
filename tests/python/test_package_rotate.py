"""foldnorm.rotate and fold_traced(absorb_affine=True) on Hugging Face models (issue 30).

Each model is tiny, built from a config with random weights, its norms' affines and biases
perturbed (a norm with weight 1 and bias 0 would make an absorb that forgets them look right).
The oracle is the eager model itself: the rotated ScriptModule must compute its outputs on an
input the stage never saw, and the report must say what rotated and why the rest did not.

Usage: test_package_rotate.py [FOLDNORM_CLI] [test_name...]
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from package_common import Logits, assert_depends_on_input, ids, max_rel, perturb, run, tiny_gpt2, tiny_opt, \
    transformers  # noqa: E402

import torch  # noqa: E402

import foldnorm  # noqa: E402


class Hidden(torch.nn.Module):
    """An encoder as a plain tensor function: its last hidden state."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x).last_hidden_state


def check_rotated(model, x, streams_rotated: int, **kwargs):
    """Rotates `model` on example `x`, checks the result against the eager model on another
    input, returns the stage report."""
    model = model.eval()  # the wrappers too (BLOOM's GELU is a Python autograd function in training)
    other = ids(seed=7) if x.dtype == torch.int64 else torch.randn(x.shape, generator=torch.Generator().manual_seed(7))
    assert_depends_on_input(model, x, other)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rotated.pt")
        rotated = foldnorm.rotate(model, x, out=out, **kwargs)
        stage = rotated.foldnorm_report["stage"]
        assert stage["verification"]["passed"], stage
        assert stage["verification"]["worst_relative_float64"] <= 1e-12, stage["verification"]
        assert sum(s["rotated"] for s in stage["streams"]) == streams_rotated, stage["streams"]
        loaded = torch.jit.load(out)
        if all(a["absorbed"] for a in stage["absorbed"]):  # then the file needs none of our ops
            assert "foldnorm::" not in str(loaded.inlined_graph)
        with torch.no_grad():
            want, got = model(other), loaded(other)
        got = got[0] if isinstance(got, tuple) else got
        assert max_rel(want, got) < 1e-4, max_rel(want, got)
    return stage


def test_opt_rotates():
    stage = check_rotated(Logits(perturb(tiny_opt())), ids(), 1)
    assert all(a["absorbed"] for a in stage["absorbed"]), stage["absorbed"]


def test_gpt2_rotates_randomly_too():
    stage = check_rotated(Logits(perturb(tiny_gpt2())), ids(), 1, rotation="random", seed=3)
    assert stage["streams"][0]["rotation"] == {"kind": "random", "seed": 3}


def test_falcon_rotates():
    tf = transformers()
    torch.manual_seed(0)
    config = tf.FalconConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             parallel_attn=True, new_decoder_architecture=False, bias=False, alibi=False,
                             hidden_dropout=0.0, attention_dropout=0.0, bos_token_id=0, eos_token_id=0)
    check_rotated(Logits(perturb(tf.FalconForCausalLM(config).eval())), ids(), 1)


def test_bloom_rotates_after_its_embedding_norm():
    # BLOOM normalizes the embeddings before the first block: that norm's output IS the stream
    # (read by a residual add), so its gain cannot move into a reader: the rotation is inserted
    # after it as an op; without insertions the stream is refused.
    tf = transformers()
    torch.manual_seed(0)
    config = tf.BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=4, hidden_dropout=0.0,
                            attention_dropout=0.0, bos_token_id=0, eos_token_id=0)
    # Its GeLU is a Python autograd.Function that torch.jit.save refuses: rotate traces the
    # model's torch.export program instead (no skip: that fallback failing is a failure).
    model = Logits(perturb(tf.BloomForCausalLM(config).eval()))
    stage = check_rotated(model, ids(), 1)
    assert any(not a["absorbed"] and "reads it" in a["reason"] for a in stage["absorbed"]), stage["absorbed"]
    rotated = [s for s in stage["streams"] if s["rotated"]]
    assert any(i.startswith("after ") for i in rotated[0]["inserted"]), rotated
    refused = check_rotated(model, ids(), 0, insert_rotations=False)
    assert all(s["reason"] for s in refused["streams"]), refused["streams"]


def test_whisper_encoder_rotates_with_inserted_rotations():
    tf = transformers()
    torch.manual_seed(0)
    config = tf.WhisperConfig(vocab_size=64, d_model=32, encoder_layers=2, encoder_attention_heads=4,
                              decoder_layers=1, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                              num_mel_bins=8, max_source_positions=16, max_target_positions=16, dropout=0.0,
                              pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    encoder = tf.WhisperModel(config).get_encoder().eval()
    x = torch.randn(1, 8, 32, generator=torch.Generator().manual_seed(1))
    # Its stream starts at gelu(conv2(x)) and ends in a norm whose output the model returns: Q is
    # inserted after the first and Q^T before the second; without insertions it is refused.
    model = Hidden(perturb(encoder))
    stage = check_rotated(model, x, 1)
    inserted = stage["streams"][0]["inserted"]
    assert sorted(i.split(" ")[0] for i in inserted) == ["after", "before"], inserted
    refused = check_rotated(model, x, 0, insert_rotations=False)
    assert all(s["reason"] for s in refused["streams"]), refused["streams"]


def test_bert_post_ln_is_refused():
    tf = transformers()
    torch.manual_seed(0)
    config = tf.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
    stage = check_rotated(Hidden(perturb(tf.BertModel(config, add_pooling_layer=False).eval())), ids(), 0)
    assert all(s["reason"] for s in stage["streams"]), stage["streams"]


def test_absorb_affine_only():
    model = Logits(perturb(tiny_opt())).eval()
    absorbed = foldnorm.fold_traced(model, ids(), absorb_affine=True)
    stage = absorbed.foldnorm_report["stage"]
    assert all(a["absorbed"] for a in stage["absorbed"]), stage["absorbed"]
    assert not any(s["rotated"] for s in stage["streams"])
    with torch.no_grad():
        got = absorbed(ids(seed=9))
        got = got[0] if isinstance(got, tuple) else got
        assert max_rel(model(ids(seed=9)), got) < 1e-4


if __name__ == "__main__":
    run(globals())
