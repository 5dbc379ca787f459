"""timm architectures of the public corpus: tiny configurations of timm's own model classes.

Every builder calls `timm.create_model(<registered name>, pretrained=False, ...)` with size kwargs
that override the registered configuration (nothing is downloaded), so the trace has exactly the
ops users get from that architecture; only the widths, depths and image sizes are small. timm is
imported inside the builders (the registry can be listed without it).

Version tolerance: kwargs that changed name between timm 0.9 and 1.0 are given as alternatives
(`_create` tries them in order). LayerScale inits are raised to 0.1 (timm's 1e-5..1e-6 would make
every branch a near-zero addend, so a wrong fold of the branch would hardly show in the outputs),
and near-zero token/position inits (timm's std 1e-6 class tokens) get std 0.02, before `prepare`.

Each docstring says what the method (docs/method.md) predicts, read from timm's code:
"predict k of n" counts the LayerNorm modules (aten::layer_norm, incl. timm's LayerNorm2d) that
the full method folds exactly; GroupNorms and Affine "norms" are named apart.
"""
import zlib
from typing import Dict

import torch

from corpus_lib import Sample, architecture, image

NUM_CLASSES = 10
LAYER_SCALE = 0.1
TOKEN_STD = 0.02


def _create(name: str, *alternatives: Dict, **common):
    """timm.create_model(name) with `common` kwargs plus the first alternative kwargs set the
    installed timm accepts (a TypeError names an unknown kwarg; any other error is real)."""
    import timm
    torch.manual_seed(0)
    errors = []
    for alt in alternatives or ({},):
        try:
            return timm.create_model(name, pretrained=False, num_classes=NUM_CLASSES, **common, **alt)
        except TypeError as err:
            errors.append(f"{alt}: {err}")
    raise TypeError(f"timm {timm.__version__} builds {name} with none of the kwargs sets: "
                    + "; ".join(errors))


def _undegenerate_tokens(model: torch.nn.Module) -> None:
    """Class/register/distillation tokens and position tables that timm draws with std ~1e-6 (or
    zero) get std 0.02 like trained ones: a token of 1e-6 is "mean-zero" to within rounding, and
    forgetting to center it would not show."""
    with torch.no_grad():
        for pname, p in model.named_parameters():
            leaf = pname.rsplit(".", 1)[-1]
            if any(k in leaf for k in ("cls_token", "reg_token", "dist_token", "pos_embed", "pos_embedding")):
                if float(p.detach().abs().max()) < 1e-3:
                    gen = torch.Generator().manual_seed(zlib.crc32(pname.encode()))
                    p.copy_(TOKEN_STD * torch.randn(p.shape, generator=gen))


def _undegenerate_heads(model: torch.nn.Module) -> None:
    """Heads that timm scales down (BEiT's head_init_scale 1e-3) get a fan-in draw: a 1e-5 head
    makes the logits the head bias for every image. (Zero-initialised norm weights, Swin V2's
    res-post-norms, are prepare()'s: corpus_lib.perturb gives them 1 + noise.)"""
    with torch.no_grad():
        heads = model.get_classifier() if hasattr(model, "get_classifier") else ()
        for head in heads if isinstance(heads, tuple) else (heads,):
            if isinstance(head, torch.nn.Linear) and float(head.weight.std()) < 1e-2:
                gen = torch.Generator().manual_seed(head.in_features)
                head.weight.copy_(torch.randn(head.weight.shape, generator=gen) / head.in_features ** 0.5)


def _sample(model: torch.nn.Module, *shape: int) -> Sample:
    _undegenerate_tokens(model)
    _undegenerate_heads(model)
    spec = "x".join(str(d) for d in shape) + ":float32"
    return Sample(model, inputs=(image(*shape),), specs=[spec], input_names=["image"],
                  output_names=["logits"])


def _vit_size(**extra) -> Dict:
    return dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, **extra)


# ------------------------------------------------------------------------ ViT variants

@architecture("timm-vit_tiny", library="timm", family="ViT", old=True)
def _vit_tiny() -> Sample:
    """vit_tiny_patch16_224: pre-LN blocks, conv patch embed + class token + learned position table,
    fused qkv linear, attention proj and fc2 linears write the stream; norm at the end, head reads
    the class token after it. Predict 5 of 5: every LN reads the stream that starts at the conv leaf
    + cls_token + pos_embed tables, and every branch ends in a linear (proj, fc2)."""
    return _sample(_create("vit_tiny_patch16_224", **_vit_size()), 1, 3, 32, 32)


@architecture("timm-deit_tiny_distilled", library="timm", family="ViT", old=True)
def _deit_tiny_distilled() -> Sample:
    """deit_tiny_distilled_patch16_224: ViT with a second (distillation) token; two heads read
    tokens 0 and 1 after the final norm, averaged in eval. Predict 5 of 5 (as ViT; dist_token is one
    more table leaf)."""
    return _sample(_create("deit_tiny_distilled_patch16_224", **_vit_size()), 1, 3, 32, 32)


@architecture("timm-deit3_small", library="timm", family="LayerScale", old=True)
def _deit3_small() -> Sample:
    """deit3_small_patch16_224: ViT with LayerScale (`x + ls1.gamma * proj(...)`) and no_embed_class
    (the position table is added to the patch tokens before the class token is concatenated).
    Predict 5 of 5 with the LayerScale fold (section 7: center gamma * proj and gamma * fc2; checked
    in float64 by hooks: 2.7e-16), 1 of 5 without it (blocks.0.norm1 only: the first gamma breaks
    the stream)."""
    return _sample(_create("deit3_small_patch16_224", **_vit_size(init_values=LAYER_SCALE)), 1, 3, 32, 32)


@architecture("timm-vit_small_reg4_dinov2", library="timm", family="LayerScale")
def _vit_small_reg4_dinov2() -> Sample:
    """vit_small_patch14_reg4_dinov2: DINOv2-style ViT, LayerScale, 4 register tokens,
    no_embed_class. Predict 5 of 5 with the LayerScale fold (reg_token is one more table leaf;
    float64 hook check 5.4e-16), 1 of 5 without it."""
    return _sample(_create("vit_small_patch14_reg4_dinov2", **_vit_size(init_values=LAYER_SCALE)),
                   1, 3, 32, 32)


@architecture("timm-beit_base", library="timm", family="LayerScale")
def _beit_base() -> Sample:
    """beit_base_patch16_224: relative position bias per block, q/v biases concatenated with a zero
    k bias into one functional qkv linear, LayerScale gamma_1/gamma_2, mean-pooled fc_norm. Predict
    5 of 5 with the LayerScale fold (gamma_1/gamma_2 are bare Parameters multiplied in
    Block.forward; fc_norm reads a mean over tokens, a reduction over another axis), 1 of 5 without
    it."""
    return _sample(_create("beit_base_patch16_224", **_vit_size(init_values=LAYER_SCALE)), 1, 3, 32, 32)


@architecture("timm-eva02_tiny", library="timm", family="ViT")
def _eva02_tiny() -> Sample:
    """eva02_tiny_patch14_224: rotary position embedding on q/k, SwiGLU MLP. Predict 5 of 5: rope
    only rotates q and k, SwiGLU ends in fc2, no LayerScale (init_values None), fc_norm reads a mean
    over tokens."""
    return _sample(_create("eva02_tiny_patch14_224", **_vit_size()), 1, 3, 32, 32)


@architecture("timm-cait_xxs24", library="timm", family="LayerScale")
def _cait_xxs24() -> Sample:
    """cait_xxs24_224: talking-heads self-attention blocks with LayerScale, then class-attention
    blocks where only the class token attends (and is updated). Predict 7 of 7 with the LayerScale
    fold: class attention reads cat(cls, patches) along tokens and only the class token is updated,
    through gamma * proj and gamma * fc2; 1 of 7 without it."""
    return _sample(_create("cait_xxs24_224", {"depth_token_only": 1}, **_vit_size(init_values=LAYER_SCALE)),
                   1, 3, 32, 32)


@architecture("timm-xcit_nano", library="timm", family="ViT")
def _xcit_nano() -> Sample:
    """xcit_nano_12_p16_224: conv+BatchNorm+GELU patch stem, Fourier position encoding, cross-
    covariance attention, local patch interaction (depthwise convs), LayerScale, class attention.
    Predict 2 of 9 (blocks.0.norm1: last stem conv + BatchNorm in eval is gamma * conv, a section-7
    leaf, plus the Fourier table's 1x1 conv, float64 hook check 3.4e-16; blocks.0.norm3: one more
    LayerScale'd proj); the others read the stream after gamma3 * LPI, which ends in a depthwise
    conv (not centerable). Today: 0 (BatchNorm and LayerScale break)."""
    return _sample(_create("xcit_nano_12_p16_224", {"cls_attn_layers": 1},
                           img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, eta=LAYER_SCALE),
                   1, 3, 32, 32)


@architecture("timm-pit_ti", library="timm", family="ViT")
def _pit_ti() -> Sample:
    """pit_ti_224: pooling ViT; between stages the tokens are downsampled by a grouped conv (groups
    = channels, 2 outputs per group) and the class token by a linear. Predict 1 of 5: the stage-0
    stream (conv + pos table + cls token, proj, fc2) is read by the pooling conv (a consumer that
    sees a centering shift: unsafe), and the stage-1 stream starts at that grouped conv (groups = C,
    2 outputs per group): centering within groups makes it mean-zero but changes it by a per-group
    amount, which no LN absorbs, so it is no leaf for an exact fold. The final norm reads only the
    class row, written by the pooling linear and stage 1's writers: it folds (issue 31 item 4)."""
    return _sample(_create("pit_ti_224", img_size=32, patch_size=4, stride=2, base_dims=[8, 8],
                           depth=[1, 1], heads=[2, 4]), 1, 3, 32, 32)


@architecture("timm-convit_tiny", library="timm", family="ViT")
def _convit_tiny() -> Sample:
    """convit_tiny: gated positional self-attention (GPSA) blocks, then plain blocks after the class
    token joins. Predict 5 of 5: GPSA mixes attention maps (sigmoid gate, renormalised) but ends in
    proj; the class token joins by concatenation along tokens; conv patch embed + position table."""
    return _sample(_create("convit_tiny", img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
                           local_up_to_layer=1), 1, 3, 32, 32)


# ------------------------------------------------------------------------ hierarchical

@architecture("timm-swin_tiny", library="timm", family="hierarchical", old=True)
def _swin_tiny() -> Sample:
    """swin_tiny_patch4_window7_224: conv patch embed + LN, shifted-window attention (roll, window
    partition reshapes, relative position bias, masks), PatchMerging (2x2 slices concatenated along
    C, LN over 4C, linear). Predict 4 of 7: patch_embed.norm (reads the conv), and stage 1 (its
    stream starts at the bias-free reduction linear: both block LNs and the final norm; float64 hook
    check 3.1e-16). Stage 0 and downsample.norm read patch_embed.norm's affine output; an explicit
    centering there (section 8) is not exact because PatchMerging concatenates slices shifted by
    different amounts."""
    return _sample(_create("swin_tiny_patch4_window7_224", img_size=32, window_size=4, embed_dim=16,
                           depths=(1, 1), num_heads=(1, 2)), 1, 3, 32, 32)


@architecture("timm-swinv2_tiny", library="timm", family="hierarchical")
def _swinv2_tiny() -> Sample:
    """swinv2_tiny_window8_256: res-post-norm blocks (`x + norm1(attn(x))`), cosine attention with a
    continuous position bias MLP, PatchMerging that normalizes after the reduction. Predict 6 of 7:
    every block LN normalizes a branch that ends in a linear (res-post-norm), downsample.norm reads
    the reduction linear, patch_embed.norm the conv; the final norm reads the stream, which starts
    at patch_embed.norm's output."""
    return _sample(_create("swinv2_tiny_window8_256", img_size=32, window_size=4, embed_dim=16,
                           depths=(1, 1), num_heads=(1, 2)), 1, 3, 32, 32)


@architecture("timm-pvt_v2_b0", library="timm", family="hierarchical")
def _pvt_v2_b0() -> Sample:
    """pvt_v2_b0: overlapping conv patch embed + LN per stage, spatial-reduction attention (a
    strided conv + LN makes the keys/values), MLP with a depthwise conv. Predict 3 of 9 by centering
    leaves (both patch-embed LNs read a conv; attn.norm reads the spatial-reduction conv); the other
    6 read streams that start at a patch-embed LN output. With an explicit centering after each
    patch-embed LN (section 8) all 9 fold (float64 hook check 1.5e-16)."""
    return _sample(_create("pvt_v2_b0", depths=(1, 1), embed_dims=(16, 32), num_heads=(1, 2),
                           sr_ratios=(2, 1), mlp_ratios=(2, 2)), 1, 3, 64, 64)


@architecture("timm-twins_svt_small", library="timm", family="hierarchical")
def _twins_svt_small() -> Sample:
    """twins_svt_small: locally-grouped and global sub-sampled attention alternating, a conditional
    position encoding (depthwise conv + residual) after each stage's first block. Predict 3 of 12:
    the two patch-embed LNs (conv) and blocks.0.1.attn.norm (sub-sampling conv). Streams start at
    patch-embed LN outputs and PosConv's depthwise conv reads them (section 8 is not exact here).
    timm nests blocks as blocks[stage][block]: names must stay unique."""
    return _sample(_create("twins_svt_small", img_size=64, embed_dims=[16, 32], num_heads=[1, 2],
                           mlp_ratios=[2, 2], depths=[2, 2], wss=[4, 4], sr_ratios=[2, 1]), 1, 3, 64, 64)


@architecture("timm-nest_tiny", library="timm", family="hierarchical")
def _nest_tiny() -> Sample:
    """nest_tiny: nested blocks of local attention with a position table per level, block
    aggregation by conv + LN + max pool. Predict 2 of 9: the two ConvPool LNs read their conv. Level
    0's LNs would fold but its stream is read by the next level's pooling conv (unsafe shift);
    levels 1-2 start at a max pool of an LN output."""
    from timm.models.nest import Nest
    torch.manual_seed(0)
    return _sample(Nest(img_size=32, patch_size=4, num_levels=3, embed_dims=(16, 32, 64), num_heads=(1, 2, 4),
                        depths=(1, 1, 1), num_classes=NUM_CLASSES), 1, 3, 32, 32)


@architecture("timm-tiny_vit_5m", library="timm", family="hierarchical")
def _tiny_vit_5m() -> Sample:
    """tiny_vit_5m_224: conv+BatchNorm stem and MBConv first stage, then window attention stages
    whose attention and MLP each start with their own LN, conv+BN patch merging. Predict 0 of 7:
    attn.norm reads conv3 + BatchNorm (a section-7 leaf) but the stream is then read by local_conv
    (depthwise conv + BN: unsafe shift); mlp.norm and head.norm read local_conv's output."""
    return _sample(_create("tiny_vit_5m_224", embed_dims=[16, 32, 48, 64], depths=[1, 1, 1, 1],
                           num_heads=[1, 2, 3, 4], window_sizes=[4, 4, 4, 4]), 1, 3, 64, 64)


# ------------------------------------------------------------------------ conv and MLP mixers

@architecture("timm-convnext_atto", library="timm", family="LayerScale", old=True)
def _convnext_atto() -> Sample:
    """convnext_atto: conv stem + LayerNorm2d, blocks of depthwise conv -> LN (channels last) -> MLP
    -> LayerScale gamma, downsampling LayerNorm2d + strided conv, head norm. Predict 1 of 9: stem.1
    reads the stem conv. Block LNs read depthwise convs; the stage streams (downsample conv + gamma
    * fc2) are read by the next depthwise conv, so neither downsample LNs nor head.norm can fold."""
    return _sample(_create("convnext_atto", depths=(1, 1, 1, 1), dims=(8, 16, 24, 32),
                           ls_init_value=LAYER_SCALE),
                   1, 3, 32, 32)


@architecture("timm-mixer_s16", library="timm", family="MLP mixer", old=True)
def _mixer_s16() -> Sample:
    """mixer_s16_224: token-mixing MLP on the transposed LN output, channel MLP. Predict 1 of 5 by
    centering leaves (blocks.0.norm1 reads the stem conv); the token MLP's output is mean-zero along
    tokens, not channels. With an explicit centering of each token-MLP output (section 8) all 5 fold
    (float64 hook check 6.2e-16)."""
    from timm.models.mlp_mixer import MlpMixer
    torch.manual_seed(0)
    return _sample(MlpMixer(num_classes=NUM_CLASSES, img_size=32, patch_size=8, num_blocks=2, embed_dim=32),
                   1, 3, 32, 32)


@architecture("timm-gmlp_ti16", library="timm", family="MLP mixer")
def _gmlp_ti16() -> Sample:
    """gmlp_ti16_224: gMLP blocks; the spatial gating unit normalizes half of the GELU output and
    mixes it over tokens, then multiplies. Predict 3 of 5: the block LNs and the final norm read a
    stream that starts at the stem conv and gets fc2 outputs; each gate.norm reads a chunk of a GELU
    output."""
    from timm.models.mlp_mixer import MlpMixer, SpatialGatingBlock
    from timm.layers import GatedMlp
    torch.manual_seed(0)
    return _sample(MlpMixer(num_classes=NUM_CLASSES, img_size=32, patch_size=8, num_blocks=2, embed_dim=32,
                            mlp_ratio=6, block_layer=SpatialGatingBlock, mlp_layer=GatedMlp), 1, 3, 32, 32)


@architecture("timm-resmlp_12", library="timm", family="MLP mixer")
def _resmlp_12() -> Sample:
    """resmlp_12_224: Affine "norms" (alpha * x + beta, addcmul) instead of LNs, a linear over
    tokens, LayerScale. Predict 0 of 0: no LayerNorm (Affine is addcmul); the analysis must not
    report any."""
    from timm.models.mlp_mixer import Affine, MlpMixer, ResBlock
    torch.manual_seed(0)
    return _sample(MlpMixer(num_classes=NUM_CLASSES, img_size=32, patch_size=8, num_blocks=2, embed_dim=32,
                            mlp_ratio=4, block_layer=ResBlock, norm_layer=Affine), 1, 3, 32, 32)


@architecture("timm-poolformer_s12", library="timm", family="MLP mixer")
def _poolformer_s12() -> Sample:
    """poolformer_s12: MetaFormer with GroupNorm(1) norms, `pool(x) - x` token mixer, conv MLP,
    LayerScale. Predict 0 of 1 LNs (head.norm reads a pooled stream with pool(x) - x in it) and 0 of
    4 GroupNorm(1)s: a GroupNorm(1) normalizes over C,H,W, and centering the stem conv over C shifts
    each pixel by a different amount, which GroupNorm does not absorb (float64: 0.15 relative
    error), so a group_norm rule must not accept a conv leaf centered over C."""
    from timm.models.metaformer import MetaFormer, GroupNorm1
    torch.manual_seed(0)
    return _sample(MetaFormer(depths=(1, 1), dims=(16, 32), downsample_norm=None, mlp_act=torch.nn.GELU,
                              mlp_bias=True, norm_layers=GroupNorm1, layer_scale_init_values=LAYER_SCALE,
                              res_scale_init_values=None, use_mlp_head=False, num_classes=NUM_CLASSES),
                   1, 3, 32, 32)


@architecture("timm-convmixer_768_32", library="timm", family="conv mixer")
def _convmixer() -> Sample:
    """convmixer_768_32: patch conv + ReLU + BatchNorm, depthwise conv residual blocks, 1x1 convs.
    Predict 0 of 0: BatchNorm only; a model with no LN must analyse cleanly."""
    from timm.models.convmixer import ConvMixer
    torch.manual_seed(0)
    return _sample(ConvMixer(dim=32, depth=2, kernel_size=3, patch_size=4, num_classes=NUM_CLASSES,
                             act_layer=torch.nn.ReLU), 1, 3, 32, 32)


# ------------------------------------------------------------------------ efficient hybrids

@architecture("timm-levit_128s", library="timm", family="efficient hybrid")
def _levit_128s() -> Sample:
    """levit_128s: conv+BN stem, attention with attention-bias tables indexed by offsets, every
    linear followed by BatchNorm1d. Predict 0 of 0: BatchNorm only (attention-bias tables reached by
    aten::index)."""
    # batch 2: calibrating the head's BatchNorm1d needs more than one value per channel
    return _sample(_create("levit_128s", img_size=64), 2, 3, 64, 64)


@architecture("timm-mobilevit_xxs", library="timm", family="efficient hybrid", old=True)
def _mobilevit_xxs() -> Sample:
    """mobilevit_xxs: MobileNetV2 blocks, then MobileViT blocks: conv 3x3 + 1x1 conv, unfold into
    patches (reshape/transpose merging the channel axis with others), transformer with LNs, fold
    back, 1x1 conv, concat with the input, conv. Predict 21 of 21: each MobileViT transformer reads
    conv_1x1 through an unfold that merges C with other axes ([B,C,H,W] -> [B*C*nh, ph, nw, pw] ->
    ... -> [B*P, N, C]); its blocks end in proj/fc2 and the stream reaches only LNs before the fold
    back (float64 hook check 9.8e-15). Today: 0 (merged axes)."""
    return _sample(_create("mobilevit_xxs"), 1, 3, 64, 64)


@architecture("timm-efficientformer_l1", library="timm", family="efficient hybrid")
def _efficientformer_l1() -> Sample:
    """efficientformer_l1: conv+BN stem, pooling MetaFormer blocks with BatchNorm MLPs and
    LayerScale, then flattening and one attention block with LNs, LayerScale. Predict 3 of 3: the
    flattened stream starts at the last downsample's conv + BatchNorm (a section-7 leaf) and the
    attention block adds ls1 * proj and ls2 * fc2 (section 7); float64 hook check 2.4e-16. Today: 0
    (BatchNorm and LayerScale break)."""
    # 224 x 224: the attention bias table is fixed at 7 x 7 tokens (stride 32)
    return _sample(_create("efficientformer_l1", depths=(1, 1, 1, 1), embed_dims=(16, 24, 32, 48), num_vit=1),
                   1, 3, 224, 224)


@architecture("timm-edgenext_xx_small", library="timm", family="LayerScale")
def _edgenext_xx_small() -> Sample:
    """edgenext_xx_small: conv stem + LayerNorm2d, conv encoder blocks (depthwise conv -> LN -> MLP
    -> gamma) and split depthwise transpose attention blocks (LN, XCA, gamma). Predict 1 of 12:
    stem.1 reads the stem conv; every other LN reads a stream written by depthwise convs (conv
    blocks, SDTA's depthwise split convs)."""
    return _sample(_create("edgenext_xx_small", dims=(24, 32, 48, 64), depths=(1, 1, 1, 1),
                           ls_init_value=LAYER_SCALE), 1, 3, 64, 64)


# ------------------------------------------------------------------------ held-out sweep (docs/held-out.md)
# Architectures the sweep of 2026-12-01 traced from outside the corpus whose traces use ops that
# had no rule then (addcmul, linalg_vector_norm, lstm, copy_, remainder/floor_divide) or whose
# insertion after a channels-first LayerNorm2d the oracle could not place.

@architecture("timm-convnextv2_atto", library="timm", family="LayerScale", old=True)
def _convnextv2_atto() -> Sample:
    """convnextv2_atto: ConvNeXt blocks with global response norm (x.norm over H, W ->
    linalg_vector_norm; addcmul(bias, weight, x * n)) instead of LayerScale. Predict 1 of 9: the
    stem LN reads the stem conv; GRN scales each channel by a different factor, which breaks the
    stream's zero mean."""
    return _sample(_create("convnextv2_atto", depths=(1, 1, 1, 1), dims=(8, 16, 24, 32)), 1, 3, 32, 32)


@architecture("timm-sequencer2d_s", library="timm", family="LSTM mixer", old=True)
def _sequencer2d_s() -> Sample:
    """sequencer2d_s: bidirectional LSTMs along H and W (aten::lstm) mix tokens, fc after; pre-LN
    blocks. The LSTMs are nonlinear: LNs whose stream passes through them are kept."""
    return _sample(_create("sequencer2d_s", layers=(1, 1), patch_sizes=(4, 2), embed_dims=(16, 32),
                           hidden_sizes=(8, 16), mlp_ratios=(2.0, 2.0)), 1, 3, 32, 32)


@architecture("timm-focalnet_tiny_srf", library="timm", family="hierarchical", old=True)
def _focalnet_tiny_srf() -> Sample:
    """focalnet_tiny_srf: focal modulation (depthwise convs, gates) with channels-first LayerNorm2d
    norms (permute, F.layer_norm, permute back), LayerScale. An inserted centering after the
    downsample's LN frees stage 1, which the oracle confirms by centering the F.layer_norm value
    inside the norm module (not its permuted output)."""
    from timm.models.focalnet import FocalNet
    torch.manual_seed(0)
    return _sample(FocalNet(embed_dim=16, depths=(1, 1), focal_levels=(2, 2), focal_windows=(3, 3),
                            layerscale_value=LAYER_SCALE, num_classes=NUM_CLASSES), 1, 3, 32, 32)


@architecture("timm-convformer_s18", library="timm", family="MetaFormer")
def _convformer_s18() -> Sample:
    """convformer_s18 layout (MetaFormer with separable-conv token mixers, LayerNorm2d without
    bias, an MLP head with StarReLU and an LN). An insertion after the stem's LayerNorm2d (a
    permute, F.layer_norm, a permute back) frees stage 0."""
    from timm.models.metaformer import MetaFormer, SepConv
    torch.manual_seed(0)
    return _sample(MetaFormer(depths=(1, 1), dims=(16, 32), token_mixers=SepConv, num_classes=NUM_CLASSES),
                   1, 3, 32, 32)


@architecture("timm-mvitv2_tiny", library="timm", family="hierarchical", old=True)
def _mvitv2_tiny() -> Sample:
    """mvitv2_tiny layout: pooling attention (strided depthwise convs on q, k, v, each with an LN),
    decomposed relative positions, residual pooling; its trace writes into a tensor with copy_ (an
    in-place write, which the analysis does not follow)."""
    from timm.models.mvitv2 import MultiScaleVit, MultiScaleVitCfg
    torch.manual_seed(0)
    cfg = MultiScaleVitCfg(depths=(1, 1), embed_dim=(16, 32), num_heads=(1, 2))
    return _sample(MultiScaleVit(cfg, img_size=(64, 64), num_classes=NUM_CLASSES), 1, 3, 64, 64)


@architecture("timm-davit_tiny", library="timm", family="hierarchical", old=True)
def _davit_tiny() -> Sample:
    """davit_tiny: spatial window attention and channel group attention alternating, conv
    position encodings (depthwise) read the stream; window padding from remainder/floor_divide."""
    return _sample(_create("davit_tiny", depths=(1, 1), embed_dims=(16, 32), num_heads=(1, 2), window_size=4),
                   1, 3, 64, 64)
