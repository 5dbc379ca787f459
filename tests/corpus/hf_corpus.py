"""Hugging Face transformers architectures of the corpus: tiny configs, random weights, nothing downloaded.

Every model is the library's own class, built from a config written here (2 layers, width 32) and
wrapped the way tests/fixtures/hf_models.py wraps its models: a forward on the instance (class and
module names stay the library's) that calls the class's forward with return_dict=True and returns a
tuple of named tensors, because a traced module should return plain tensors and transformers 5
ignores the old `torchscript=True` flag. Text models take an attention mask of all ones in their spec;
the driver pads one row and checks that the trace still follows the eager model (the mask is live).

The same builders run under the old transformers of the "old" environment (old=True): they use only
config fields and classes both versions have, and `attn_implementation="eager"` (4.36 and later).
T5 and Llama-like models are left out on purpose: they use RMSNorm already (nothing to fold).
"""
import os
import types
from typing import Dict, List, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from corpus_lib import Sample, architecture, image, token_ids  # noqa: E402

VOCAB = 128
BATCH, SEQ = 2, 16
WIDTH = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
IDS_SPEC = f"{BATCH}x{SEQ}:int64[0,{VOCAB})"
MASK_SPEC = f"{BATCH}x{SEQ}:int64[1,2)"  # all ones; the driver checks a padded mask too
IMAGE = (1, 3, 32, 32)
IMAGE_SPEC = "1x3x32x32:float32"


def _tf():
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers


def _wrap(model, cls, call_kwargs: Dict, input_names: Sequence[str], output_names: Sequence[str]):
    """Gives `model` a forward(*inputs) -> tuple of the named outputs (None outputs are an error)."""
    def forward(self, *args):
        out = cls.forward(self, **dict(zip(input_names, args)), return_dict=True, **call_kwargs)
        values = tuple(getattr(out, n) for n in output_names)
        missing = [n for n, v in zip(output_names, values) if v is None]
        if missing:
            raise RuntimeError(f"{cls.__name__} returned no {missing}")
        return values

    model.forward = types.MethodType(forward, model)
    return model


def _build(class_name: str, config_name: str, config: Dict, *, eager_attention: bool = True):
    tf = _tf()
    cls, cfg_cls = getattr(tf, class_name), getattr(tf, config_name)
    if eager_attention:
        config = dict(config, attn_implementation="eager")
    torch.manual_seed(0)
    model = cls(cfg_cls(**config)).eval()
    for m in model.modules():
        # Some libraries draw BatchNorm gains from N(0, 0.02) like a linear's weight; a trained
        # BatchNorm has gains near one, and with 0.02 the signal of a deep conv stack vanishes (the
        # output stops depending on the input). perturb() then spreads them around one.
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_parameters()
    return cls, model


def _text(class_name, config_name, config, outputs=("last_hidden_state",), use_cache=True, notes=()):
    """An encoder or decoder over token ids with an attention mask."""
    cls, model = _build(class_name, config_name, dict(config, vocab_size=VOCAB))
    kwargs = {"use_cache": False} if use_cache else {}
    names = ["input_ids", "attention_mask"]
    _wrap(model, cls, kwargs, names, outputs)
    ids = token_ids(BATCH, SEQ, VOCAB)
    return Sample(model, (ids, torch.ones_like(ids)), [IDS_SPEC, MASK_SPEC], names, list(outputs),
                  notes=list(notes))


def _seq2seq(class_name, config_name, config, notes=()):
    cls, model = _build(class_name, config_name, dict(config, vocab_size=VOCAB, decoder_start_token_id=0))
    names = ["input_ids", "attention_mask", "decoder_input_ids"]
    outputs = ["last_hidden_state", "encoder_last_hidden_state"]
    _wrap(model, cls, {"use_cache": False}, names, outputs)
    ids = token_ids(BATCH, SEQ, VOCAB)
    dec = token_ids(BATCH, SEQ // 2, VOCAB, seed=3)
    return Sample(model, (ids, torch.ones_like(ids), dec),
                  [IDS_SPEC, MASK_SPEC, f"{BATCH}x{SEQ // 2}:int64[0,{VOCAB})"], names, outputs,
                  notes=list(notes))


def _vision(class_name, config_name, config, outputs=("last_hidden_state",), eager_attention=True,
            shape=IMAGE, notes=()):
    cls, model = _build(class_name, config_name, config, eager_attention=eager_attention)
    _wrap(model, cls, {}, ["pixel_values"], outputs)
    spec = "x".join(map(str, shape)) + ":float32"
    return Sample(model, (image(*shape),), [spec], ["pixel_values"], list(outputs), notes=list(notes))


BART_LIKE = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                 decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                 max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2)
ENCODER = dict(WIDTH, max_position_embeddings=64)

# ---------------------------------------------------------------- encoder-only, post-LN


@architecture("hf-bert", library="transformers", family="encoder post-LN", old=True)
def _bert():
    """BertModel: post-LN; only the embedding LN can fold."""
    return _text("BertModel", "BertConfig", ENCODER, outputs=("last_hidden_state", "pooler_output"),
                 use_cache=False)


@architecture("hf-roberta", library="transformers", family="encoder post-LN")
def _roberta():
    """RobertaModel: positions from cumsum(input_ids != pad) (padding_idx 1)."""
    return _text("RobertaModel", "RobertaConfig", dict(ENCODER, max_position_embeddings=80, pad_token_id=1),
                 use_cache=False)


@architecture("hf-xlm_roberta", library="transformers", family="encoder post-LN")
def _xlm_roberta():
    """XLMRobertaModel (RoBERTa layout, its own classes)."""
    return _text("XLMRobertaModel", "XLMRobertaConfig", dict(ENCODER, max_position_embeddings=80, pad_token_id=1),
                 use_cache=False)


@architecture("hf-electra", library="transformers", family="encoder post-LN")
def _electra():
    """ElectraModel: embeddings of size 16 projected to 32 (embeddings_project)."""
    return _text("ElectraModel", "ElectraConfig", dict(ENCODER, embedding_size=16), use_cache=False)


@architecture("hf-distilbert", library="transformers", family="encoder post-LN", old=True)
def _distilbert():
    """DistilBertModel: its own config names (dim, n_layers); sinusoidal positions off."""
    return _text("DistilBertModel", "DistilBertConfig",
                 dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64),
                 use_cache=False)


@architecture("hf-albert", library="transformers", family="encoder post-LN")
def _albert():
    """AlbertModel: one shared layer applied twice, factorised embeddings (16 -> 32)."""
    return _text("AlbertModel", "AlbertConfig", dict(ENCODER, embedding_size=16), use_cache=False)


@architecture("hf-mpnet", library="transformers", family="encoder post-LN")
def _mpnet():
    """MPNetModel: relative position bias added to the attention scores."""
    return _text("MPNetModel", "MPNetConfig", dict(ENCODER, max_position_embeddings=80, pad_token_id=1),
                 use_cache=False, outputs=("last_hidden_state",))


@architecture("hf-esm", library="transformers", family="protein encoder pre-LN", old=True)
def _esm():
    """EsmModel (ESM-2 layout): pre-LN with rotary positions and token dropout (masked_fill of mask tokens)."""
    return _text("EsmModel", "EsmConfig",
                 dict(ENCODER, max_position_embeddings=80, pad_token_id=1, mask_token_id=4,
                      position_embedding_type="rotary", token_dropout=True, emb_layer_norm_before=False),
                 use_cache=False)


# ---------------------------------------------------------------- decoders, pre-LN

DECODER = dict(bos_token_id=0, eos_token_id=0)


@architecture("hf-gpt2", library="transformers", family="decoder pre-LN", old=True)
def _gpt2():
    """GPT2Model: Conv1D (addmm with W[in,out]) projections."""
    return _text("GPT2Model", "GPT2Config", dict(DECODER, n_positions=64, n_embd=32, n_layer=2, n_head=2))


@architecture("hf-gpt_neo", library="transformers", family="decoder pre-LN")
def _gpt_neo():
    """GPTNeoModel: alternating global and local attention."""
    return _text("GPTNeoModel", "GPTNeoConfig",
                 dict(DECODER, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                      max_position_embeddings=64, attention_types=[[["global", "local"], 1]], window_size=8))


@architecture("hf-opt", library="transformers", family="decoder pre-LN", old=True)
def _opt():
    """OPTModel (OPT-125m layout): learned positions from cumsum(attention_mask)."""
    return _text("OPTModel", "OPTConfig",
                 dict(DECODER, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
                      max_position_embeddings=64, word_embed_proj_dim=32, do_layer_norm_before=True))


@architecture("hf-bloom", library="transformers", family="decoder pre-LN")
def _bloom():
    """BloomModel: ALiBi (baddbmm of the scores), word_embeddings_layernorm right after the lookup."""
    sample = _text("BloomModel", "BloomConfig", dict(DECODER, hidden_size=32, n_layer=2, n_head=2))
    # transformers 5 computes BLOOM's GELU in a torch.autograd.Function, which a trace cannot save;
    # its inference path is the same tanh formula as a plain function (bloom_gelu_forward).
    from transformers.models.bloom import modeling_bloom
    for m in sample.model.modules():
        if type(m).__name__ == "BloomGelu":
            m.forward = types.MethodType(lambda self, x: modeling_bloom.bloom_gelu_forward(x), m)
    sample.notes.append("BloomGelu's autograd.Function replaced by bloom_gelu_forward (same values)")
    return sample


@architecture("hf-falcon", library="transformers", family="decoder parallel")
def _falcon():
    """FalconModel (7B layout): parallel attention + MLP on one LN, multi-query attention, rotary."""
    return _text("FalconModel", "FalconConfig",
                 dict(DECODER, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, parallel_attn=True,
                      new_decoder_architecture=False, multi_query=True, alibi=False, bias=False))


@architecture("hf-gptj", library="transformers", family="decoder parallel")
def _gptj():
    """GPTJModel: x + attn(ln(x)) + mlp(ln(x)), rotary on part of the head."""
    return _text("GPTJModel", "GPTJConfig",
                 dict(DECODER, n_embd=32, n_layer=2, n_head=2, n_positions=64, rotary_dim=8))


@architecture("hf-gpt_neox", library="transformers", family="decoder parallel", old=True)
def _gpt_neox():
    """GPTNeoXModel (Pythia layout): parallel residual with two LNs per block."""
    return _text("GPTNeoXModel", "GPTNeoXConfig",
                 dict(DECODER, **WIDTH, max_position_embeddings=64, use_parallel_residual=True, rotary_pct=0.25))


@architecture("hf-phi", library="transformers", family="decoder parallel")
def _phi():
    """PhiModel: parallel attention + MLP on one LN, partial rotary, final LN."""
    return _text("PhiModel", "PhiConfig", dict(DECODER, **WIDTH, max_position_embeddings=64))


@architecture("hf-codegen", library="transformers", family="decoder parallel")
def _codegen():
    """CodeGenModel: GPT-J-style parallel block, fused qkv projection."""
    return _text("CodeGenModel", "CodeGenConfig",
                 dict(DECODER, n_embd=32, n_layer=2, n_head=2, n_positions=64, n_ctx=64, rotary_dim=8))


@architecture("hf-biogpt", library="transformers", family="decoder pre-LN")
def _biogpt():
    """BioGptModel: pre-LN with scaled embeddings and learned positions."""
    return _text("BioGptModel", "BioGptConfig", dict(WIDTH, max_position_embeddings=64))


# ---------------------------------------------------------------- encoder-decoder


@architecture("hf-bart", library="transformers", family="encoder-decoder post-LN", old=True)
def _bart():
    """BartModel: post-LN, layernorm_embedding in each stack."""
    return _seq2seq("BartModel", "BartConfig", BART_LIKE)


@architecture("hf-mbart", library="transformers", family="encoder-decoder pre-LN")
def _mbart():
    """MBartModel: pre-LN with layernorm_embedding and a final LN per stack."""
    return _seq2seq("MBartModel", "MBartConfig", BART_LIKE)


@architecture("hf-marian", library="transformers", family="encoder-decoder post-LN")
def _marian():
    """MarianModel: post-LN, sinusoidal position table, no embedding LN."""
    return _seq2seq("MarianModel", "MarianConfig", dict(BART_LIKE, decoder_vocab_size=VOCAB))


@architecture("hf-pegasus", library="transformers", family="encoder-decoder pre-LN")
def _pegasus():
    """PegasusModel: pre-LN, sinusoidal positions, final LN per stack."""
    return _seq2seq("PegasusModel", "PegasusConfig", BART_LIKE)


# ---------------------------------------------------------------- speech


@architecture("hf-whisper", library="transformers", family="speech encoder-decoder", old=True)
def _whisper():
    """WhisperModel: conv + GELU stem, sinusoidal encoder positions, pre-LN both stacks."""
    cls, model = _build("WhisperModel", "WhisperConfig",
                        dict(vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=2,
                             encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                             decoder_ffn_dim=64, max_source_positions=16, max_target_positions=16,
                             decoder_start_token_id=0, pad_token_id=1, bos_token_id=0, eos_token_id=2))
    names = ["input_features", "decoder_input_ids"]
    outputs = ["last_hidden_state", "encoder_last_hidden_state"]
    _wrap(model, cls, {"use_cache": False}, names, outputs)
    feats = image(1, 8, 32)
    dec = token_ids(1, 6, VOCAB, seed=3)
    return Sample(model, (feats, dec), ["1x8x32:float32", f"1x6:int64[0,{VOCAB})"], names, outputs)


@architecture("hf-wav2vec2", library="transformers", family="speech encoder")
def _wav2vec2():
    """Wav2Vec2Model (base layout): conv feature encoder with group norm, post-LN transformer."""
    cls, model = _build("Wav2Vec2Model", "Wav2Vec2Config",
                        dict(WIDTH, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                             num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
                             feat_extract_norm="group", do_stable_layer_norm=False, mask_time_prob=0.0))
    _wrap(model, cls, {}, ["input_values"], ["last_hidden_state", "extract_features"])
    return Sample(model, (image(1, 400),), ["1x400:float32"], ["input_values"],
                  ["last_hidden_state", "extract_features"])


# ---------------------------------------------------------------- vision

VIT = dict(WIDTH, image_size=32, patch_size=8, num_channels=3)


@architecture("hf-vit", library="transformers", family="vision pre-LN", old=True)
def _vit():
    """ViTModel: conv patch embedding, class token, position table, final LN."""
    return _vision("ViTModel", "ViTConfig", VIT, outputs=("last_hidden_state", "pooler_output"))


@architecture("hf-deit", library="transformers", family="vision pre-LN")
def _deit():
    """DeiTModel: class and distillation tokens."""
    return _vision("DeiTModel", "DeiTConfig", VIT, outputs=("last_hidden_state",))


@architecture("hf-beit", library="transformers", family="LayerScale")
def _beit():
    """BeitModel: LayerScale (lambda_1, lambda_2), relative position bias, mean pooling with LN."""
    return _vision("BeitModel", "BeitConfig",
                   dict(VIT, layer_scale_init_value=0.1, use_relative_position_bias=True, use_mean_pooling=True),
                   outputs=("last_hidden_state", "pooler_output"))


@architecture("hf-dinov2", library="transformers", family="LayerScale")
def _dinov2():
    """Dinov2Model: LayerScale, interpolated position table, final LN."""
    return _vision("Dinov2Model", "Dinov2Config", dict(VIT, mlp_ratio=2, layerscale_value=0.1),
                   outputs=("last_hidden_state", "pooler_output"))


@architecture("hf-vit_mae", library="transformers", family="vision pre-LN")
def _vit_mae():
    """ViTMAEModel: random masking keeps a quarter of the patches, gathered with the index
    ids_keep.unsqueeze(-1).repeat(1, 1, dim) (second held-out sweep: the gather rule knows that a
    repeat of a size-1 axis is constant along it). The noise is an input, so the trace keeps the
    argsort instead of freezing one draw."""
    cls, model = _build("ViTMAEModel", "ViTMAEConfig", dict(VIT, mask_ratio=0.75))
    _wrap(model, cls, {}, ["pixel_values", "noise"], ["last_hidden_state"])
    return Sample(model, (image(*IMAGE), image(1, 16, seed=1)), [IMAGE_SPEC, "1x16:float32"],
                  ["pixel_values", "noise"], ["last_hidden_state"])


@architecture("hf-swin", library="transformers", family="hierarchical", old=True)
def _swin():
    """SwinModel: patch-embed LN, shifted windows (roll), patch merging (4-way concat), pooled LN."""
    return _vision("SwinModel", "SwinConfig",
                   dict(image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=4,
                        mlp_ratio=2.0), outputs=("last_hidden_state", "pooler_output"))


@architecture("hf-segformer", library="transformers", family="hierarchical", old=True)
def _segformer():
    """SegformerModel: overlapping patch embeddings with LN per stage, efficient attention (sr conv + LN)."""
    return _vision("SegformerModel", "SegformerConfig",
                   dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                        patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2]),
                   eager_attention=False)


@architecture("hf-convnext", library="transformers", family="conv")
def _convnext():
    """ConvNextModel: depthwise convs read the stream, channels-first LN in the downsampling layers."""
    return _vision("ConvNextModel", "ConvNextConfig",
                   dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], layer_scale_init_value=0.1),
                   outputs=("last_hidden_state", "pooler_output"), eager_attention=False)


@architecture("hf-mobilevit", library="transformers", family="conv + transformer")
def _mobilevit():
    """MobileViTModel: unfold of patches into tokens, pre-LN transformer, fold back (merged axes)."""
    # 2x3x64x64: MobileViT downsamples 32x, and at 1x3x32x32 its last BatchNorm sees one value per
    # channel, which cannot be calibrated.
    return _vision("MobileViTModel", "MobileViTConfig",
                   dict(image_size=64, patch_size=2, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                        num_attention_heads=2, mlp_ratio=2.0, expand_ratio=2.0),
                   outputs=("last_hidden_state", "pooler_output"), eager_attention=False, shape=(2, 3, 64, 64))


@architecture("hf-clip_vision", library="transformers", family="vision pre-LN")
def _clip_vision():
    """CLIPVisionModel: pre_layrnorm on the embeddings before the stack (the stream starts at an LN)."""
    return _vision("CLIPVisionModel", "CLIPVisionConfig", VIT, outputs=("last_hidden_state", "pooler_output"))


# ---------------------------------------------------------------- held-out sweep (docs/held-out.md)
# Architectures the sweep of 2026-12-01 traced from outside the corpus whose traces use ops that
# had no rule then (comparisons building masks, cumsum positions, floor_divide/ceil buckets,
# weight norm): kept so CI runs the rules those ops got.


@architecture("hf-roberta_prelayernorm", library="transformers", family="encoder pre-LN", old=True)
def _roberta_prelayernorm():
    """RobertaPreLayerNormModel: pre-LN RoBERTa, positions from cumsum(input_ids != pad), a final
    LN; the mask from ge/__and__."""
    return _text("RobertaPreLayerNormModel", "RobertaPreLayerNormConfig",
                 dict(ENCODER, max_position_embeddings=80, pad_token_id=1), use_cache=False)


@architecture("hf-deberta_v2", library="transformers", family="encoder post-LN")
def _deberta_v2():
    """DebertaV2Model: disentangled attention with log-bucketed relative positions (floor_divide,
    ceil, sign, comparisons), post-LN. Not in "old": transformers 4.41's XSoftmax is an
    autograd.Function, which a trace cannot save."""
    return _text("DebertaV2Model", "DebertaV2Config",
                 dict(ENCODER, relative_attention=True, position_buckets=8, max_relative_positions=16,
                      pos_att_type=["p2c", "c2p"]), use_cache=False)


@architecture("hf-funnel", library="transformers", family="encoder post-LN", old=True)
def _funnel():
    """FunnelBaseModel: pooling between blocks, token-type masks built with eq/__or__, post-LN."""
    return _text("FunnelBaseModel", "FunnelConfig",
                 dict(block_sizes=[1, 1], d_model=32, n_head=2, d_head=16, d_inner=64), use_cache=False)


@architecture("hf-persimmon", library="transformers", family="decoder pre-LN", old=True)
def _persimmon():
    """PersimmonModel: fused qkv with q/k LayerNorms per head, partial rotary (floor_divide)."""
    return _text("PersimmonModel", "PersimmonConfig", dict(DECODER, **WIDTH, max_position_embeddings=64,
                                                           qk_layernorm=True))


@architecture("hf-m2m100", library="transformers", family="encoder-decoder pre-LN", old=True)
def _m2m100():
    """M2M100Model: pre-LN, sinusoidal positions indexed by cumsum(input_ids != pad)."""
    return _seq2seq("M2M100Model", "M2M100Config", BART_LIKE)



@architecture("hf-opt_postln", library="transformers", family="decoder post-LN")
def _opt_postln():
    """OPTModel (350m layout): post-LN, project_in/project_out around a 16-wide embedding,
    positions from cumsum(attention_mask)."""
    return _text("OPTModel", "OPTConfig",
                 dict(DECODER, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
                      max_position_embeddings=64, word_embed_proj_dim=16, do_layer_norm_before=False))



def _speech(class_name, config_name, extra):
    cls, model = _build(class_name, config_name,
                        dict(WIDTH, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                             num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2, mask_time_prob=0.0,
                             **extra))
    _wrap(model, cls, {}, ["input_values"], ["last_hidden_state"])
    return Sample(model, (image(1, 400),), ["1x400:float32"], ["input_values"], ["last_hidden_state"])


@architecture("hf-hubert_stable", library="transformers", family="speech encoder pre-LN", old=True)
def _hubert_stable():
    """HubertModel (large layout): LNs in the conv feature encoder (over channels, transposed),
    a weight-normed positional conv (_weight_norm), pre-LN transformer."""
    return _speech("HubertModel", "HubertConfig", dict(feat_extract_norm="layer", do_stable_layer_norm=True))


@architecture("hf-data2vec_audio", library="transformers", family="speech encoder", old=True)
def _data2vec_audio():
    """Data2VecAudioModel: LNs in the conv feature encoder, a stack of positional conv layers in
    a ModuleList (pos_conv_embed.layers.i), each with an LN without affine parameters, whose
    module path comes from the call stack alone (which skips the ModuleList's name)."""
    return _speech("Data2VecAudioModel", "Data2VecAudioConfig", dict(feat_extract_norm="layer"))


@architecture("hf-swinv2", library="transformers", family="hierarchical", old=True)
def _swinv2():
    """Swinv2Model: cosine attention (linalg_vector_norm), log-spaced continuous position bias,
    window masks from remainder/floor_divide/ge, res-post-norm."""
    return _vision("Swinv2Model", "Swinv2Config",
                   dict(image_size=32, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=4,
                        mlp_ratio=2.0), outputs=("last_hidden_state", "pooler_output"))
