"""Shared by the tests of the Python package (tests/python/test_package_*.py).

Each test file is a script: it runs its test_* functions, prints one line per test, exits 1 when
one failed and 77 (ctest's SKIP_RETURN_CODE) when every test skipped. The package is imported
from PYTHONPATH (build/python, set by CMake). Models are tiny and built from configs: nothing is
downloaded (HF_HUB_OFFLINE).
"""
import os
import sys
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

SKIP = 77


class Skip(Exception):
    """This test cannot run here (missing optional dependency); it is reported skipped."""


def run(namespace) -> None:
    tests = [(n, f) for n, f in sorted(namespace.items()) if n.startswith("test_") and callable(f)]
    only = sys.argv[1:] and [a for a in sys.argv[1:] if a.startswith("test_")]
    failed, skipped = [], []
    for name, fn in tests:
        if only and name not in only:
            continue
        try:
            torch.manual_seed(0)
            fn()
            print(f"PASS {name}", flush=True)
        except Skip as e:
            skipped.append(name)
            print(f"SKIP {name}: {e}", flush=True)
        except Exception:  # noqa: BLE001  (the runner reports every failure, then exits 1)
            failed.append(name)
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
    ran = len(tests) if not only else len(only)
    print(f"{ran - len(failed) - len(skipped)} passed, {len(failed)} failed, {len(skipped)} skipped")
    if failed:
        sys.exit(1)
    if skipped and len(skipped) == ran:
        sys.exit(SKIP)


def transformers():
    import transformers as tf
    tf.logging.set_verbosity_error()
    return tf


def tiny_gpt2(seed: int = 0, **overrides):
    """A 2-layer GPT-2 LM with random weights; tied lm_head/wte as Hugging Face builds it."""
    tf = transformers()
    args = dict(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2, bos_token_id=0,
                eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    args.update(overrides)
    torch.manual_seed(seed)
    return tf.GPT2LMHeadModel(tf.GPT2Config(**args)).eval()


def tiny_opt(seed: int = 0):
    tf = transformers()
    torch.manual_seed(seed)
    config = tf.OPTConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
                          max_position_embeddings=32, word_embed_proj_dim=32, bos_token_id=0,
                          eos_token_id=0, pad_token_id=1, dropout=0.0, attention_dropout=0.0)
    return tf.OPTForCausalLM(config).eval()


def ids(batch: int = 2, seq: int = 8, vocab: int = 64, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, vocab, (batch, seq), generator=g)


def max_rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / a.abs().max().clamp_min(1e-300))


def count(module: torch.nn.Module, cls) -> int:
    return sum(1 for m in module.modules() if type(m) is cls)


def assert_depends_on_input(fn, x1, x2) -> None:
    """A test model's output must depend on its input: two inputs, two outputs."""
    with torch.no_grad():
        y1, y2 = fn(x1), fn(x2)
    assert max_rel(y1, y2) > 1e-3, "the model's output does not depend on its input"


def greedy_tokens(model, prompt: torch.Tensor, n: int = 6) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=n, do_sample=False, num_beams=1,
                              attention_mask=torch.ones_like(prompt), pad_token_id=0)


class Logits(torch.nn.Module):
    """A causal LM as a plain tensor function (what a user traces and saves by hand)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(input_ids=x, use_cache=False).logits


def perturb(model: torch.nn.Module, seed: int = 1) -> torch.nn.Module:
    """The corpus' perturbation (tests/corpus/corpus_lib.py): norm affines, biases and constant
    parameters (LayerScale gammas) get noise, so a fold that forgets one of them shows."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus"))
    from corpus_lib import perturb as corpus_perturb
    corpus_perturb(model, seed)
    return model.eval()


def tiny_dinov2(seed: int = 0):
    """Dinov2Model (LayerScale: the plan absorbs each lambda into the projection before it),
    perturbed; returns (model, keyword inputs)."""
    tf = transformers()
    torch.manual_seed(seed)
    config = tf.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                             image_size=32, patch_size=8, layerscale_value=0.1, attn_implementation="eager")
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(seed + 1))
    return perturb(tf.Dinov2Model(config)), {"pixel_values": pixels}


def tiny_roberta_prelayernorm(seed: int = 0):
    """RobertaPreLayerNormModel (the stream starts at embeddings.LayerNorm's affine output: the
    plan inserts one centering after it), perturbed; returns (model, keyword inputs)."""
    tf = transformers()
    torch.manual_seed(seed)
    config = tf.RobertaPreLayerNormConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                          intermediate_size=64, max_position_embeddings=40, pad_token_id=1,
                                          attn_implementation="eager")
    x = ids(vocab=64)
    return perturb(tf.RobertaPreLayerNormModel(config)), {"input_ids": x, "attention_mask": torch.ones_like(x)}


def tiny_bloom(seed: int = 0):
    """BloomForCausalLM: its GeLU is a Python autograd.Function in transformers 5.24, which
    torch.jit.trace refuses and torch.export captures; perturbed; returns (model, keyword inputs)."""
    tf = transformers()
    torch.manual_seed(seed)
    config = tf.BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=2, attn_implementation="eager")
    x = ids(vocab=64)
    return perturb(tf.BloomForCausalLM(config)), {"input_ids": x, "attention_mask": torch.ones_like(x)}
