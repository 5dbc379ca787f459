"""The package on models from another transformers/timm than the fixtures' (the corpus's "old"
environment: transformers 4.41.2, timm 0.9.16, installed by tests/corpus/build_corpus.py under
~/.cache/foldnorm/corpus-old and put first on PYTHONPATH; torch stays the same). GPT-2-, BERT-,
OPT- and ViT-style models and a timm ViT: analyze, fold (float64-verified), greedy generation.

Usage: test_package_old_env.py [test_name...]  Skips (77) when the old environment is not installed.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OLD = os.path.join(os.environ.get("FOLDNORM_CACHE", os.path.expanduser("~/.cache/foldnorm")),
                   "corpus-old", "timm0.9.16-transformers4.41.2")

if os.environ.get("FOLDNORM_OLD_ENV_CHILD") != "1":
    if not os.path.isdir(OLD):
        print(f"SKIP: no old environment at {OLD} (tests/corpus/build_corpus.py installs it)")
        sys.exit(77)
    env = dict(os.environ, FOLDNORM_OLD_ENV_CHILD="1",
               PYTHONPATH=os.pathsep.join([OLD] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    sys.exit(subprocess.run([sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env=env).returncode)

sys.path.insert(0, HERE)
from package_common import assert_depends_on_input, count, greedy_tokens, ids, run, tiny_gpt2, \
    tiny_opt, transformers  # noqa: E402

import torch  # noqa: E402

import foldnorm  # noqa: E402


def _check_versions():
    import timm
    tf = transformers()
    assert tf.__version__ == "4.41.2" and timm.__version__ == "0.9.16", (tf.__version__, timm.__version__)


def _fold_and_check(model, inputs, first, second):
    _check_versions()
    report = foldnorm.analyze(model, inputs)
    folded = foldnorm.fold(model, inputs)
    s = folded.foldnorm_summary
    assert s.verified and s.worst_relative_float64 <= foldnorm.FLOAT64_TOLERANCE, s
    assert count(folded, foldnorm.RMSNorm) == len(s.folded)
    assert len(s.folded) + len(s.functional) + len(s.kept) >= 1 and len(report.layer_norms) >= 1
    assert_depends_on_input(lambda t: first(folded, t), second[0], second[1])
    return report, folded


def test_gpt2_old_transformers():
    model = tiny_gpt2()
    report, folded = _fold_and_check(model, {"input_ids": ids()}, lambda m, t: m(t).logits, (ids(), ids(seed=5)))
    assert len(report.foldable) == 5, report
    prompt = ids(batch=1, seq=5, seed=3)
    assert torch.equal(greedy_tokens(model, prompt), greedy_tokens(folded, prompt))


def test_opt_old_transformers():
    model = tiny_opt()
    x = ids()
    inputs = {"input_ids": x, "attention_mask": torch.ones_like(x)}
    report, folded = _fold_and_check(model, inputs, lambda m, t: m(input_ids=t).logits, (x, ids(seed=5)))
    assert report.foldable, report
    prompt = ids(batch=1, seq=5, seed=3)
    assert torch.equal(greedy_tokens(model, prompt), greedy_tokens(folded, prompt))


def test_bert_old_transformers():
    tf = transformers()
    torch.manual_seed(0)
    model = tf.BertModel(tf.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64, max_position_embeddings=32,
                                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).eval()
    x = ids()
    _fold_and_check(model, {"input_ids": x, "attention_mask": torch.ones_like(x)},
                    lambda m, t: m(input_ids=t).last_hidden_state, (x, ids(seed=5)))


def test_vit_old_transformers():
    tf = transformers()
    torch.manual_seed(0)
    model = tf.ViTModel(tf.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                     image_size=32, patch_size=8, num_channels=3, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)).eval()
    x = torch.randn(2, 3, 32, 32)
    report, _ = _fold_and_check(model, {"pixel_values": x}, lambda m, t: m(pixel_values=t).last_hidden_state,
                                (x, torch.randn(2, 3, 32, 32)))
    assert report.foldable, report


def test_timm_vit_old_timm():
    from timm.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    report, _ = _fold_and_check(model, x, lambda m, t: m(t), (x, torch.randn(2, 3, 32, 32)))
    assert report.foldable, report


if __name__ == "__main__":
    run(globals())
