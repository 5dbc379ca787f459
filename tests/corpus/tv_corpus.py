"""torchvision architectures of the public corpus: torchvision's own classes with tiny arguments.

Every torchvision model family that has LayerNorms (ViT, Swin, Swin V2, ConvNeXt, MaxViT) is here,
ViT twice (patch conv and the conv-stem variant). The classes are instantiated directly, so nothing
is downloaded; the constructor arguments used exist unchanged since torchvision 0.15 (their author
traced them under torch 2.0.1 + torchvision 0.15.2 once, with vision_check.py --old in a separate
venv). None is marked old=True: the driver's "old" environment keeps the venv's torch 2.11, and
torchvision's versions are tied to torch's, so it runs the same torchvision 0.26 as "main" and a
second trace there would repeat the first, not test an older API.
Stochastic depth is 0 everywhere: in eval it is an identity anyway, and p=0 keeps the trace free
of the op. Each docstring says what the method predicts ("predict k of n": LayerNorm modules the
full method folds exactly), read from torchvision's code.
"""
import torch

from corpus_lib import Sample, architecture, image

NUM_CLASSES = 10
LAYER_SCALE = 0.1


def _sample(model: torch.nn.Module, side: int) -> Sample:
    return Sample(model, inputs=(image(1, 3, side, side),), specs=[f"1x3x{side}x{side}:float32"],
                  input_names=["image"], output_names=["logits"])


def _vit(patch_size: int = 8, **extra) -> torch.nn.Module:
    from torchvision.models import VisionTransformer
    torch.manual_seed(0)
    # class_token and the head start at zero in torchvision; prepare() gives every all-equal
    # parameter a spread, so neither stays degenerate.
    return VisionTransformer(image_size=32, patch_size=patch_size, num_layers=2, num_heads=2, hidden_dim=32,
                             mlp_dim=64, num_classes=NUM_CLASSES, **extra)


@architecture("tv-vit_b_16", library="torchvision", family="ViT")
def _vit_b_16() -> Sample:
    """VisionTransformer (vit_b_16's class, tiny): conv_proj patch embed, class token, position
    table, pre-LN encoder blocks with nn.MultiheadAttention (traced as the fused
    aten::_native_multi_head_attention in eval), MLP, final encoder.ln, head on token 0. Predict 5
    of 5 (zero class token and head get spread by prepare())."""
    return _sample(_vit(), 32)


@architecture("tv-vit_conv_stem", library="torchvision", family="ViT")
def _vit_conv_stem() -> Sample:
    """VisionTransformer with conv_stem_configs (the "ViT-C" stem of Xiao et al.): two conv +
    BatchNorm + ReLU stages, then a 1x1 conv makes the tokens. Predict 5 of 5: the token stream
    starts at the stem's last 1x1 conv (conv_last), a leaf."""
    from torchvision.models.vision_transformer import ConvStemConfig
    stem = [ConvStemConfig(out_channels=8, kernel_size=3, stride=2),
            ConvStemConfig(out_channels=16, kernel_size=3, stride=2)]
    return _sample(_vit(patch_size=4, conv_stem_configs=stem), 32)  # patch = product of the strides


def _swin(v2: bool) -> torch.nn.Module:
    from torchvision.models.swin_transformer import SwinTransformer
    extra = {}
    if v2:
        from torchvision.models.swin_transformer import PatchMergingV2, SwinTransformerBlockV2
        extra = dict(block=SwinTransformerBlockV2, downsample_layer=PatchMergingV2)
    torch.manual_seed(0)
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[1, 1], num_heads=[1, 2],
                           window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=NUM_CLASSES, **extra)


@architecture("tv-swin_t", library="torchvision", family="hierarchical")
def _swin_t() -> Sample:
    """SwinTransformer (swin_t's class, tiny): conv patch embed + LN (features.0), shifted-window
    attention blocks, PatchMerging (2x2 slices concatenated along C, LN over 4C, linear without
    bias), final norm, avg pool, head. Predict 4 of 7: features.0.2 (conv), features.3.* and norm
    (stage 1 starts at the reduction linear); stage 0 and features.2.norm read features.0.2's
    output."""
    return _sample(_swin(v2=False), 32)


@architecture("tv-swin_v2_t", library="torchvision", family="hierarchical")
def _swin_v2_t() -> Sample:
    """SwinTransformer with SwinTransformerBlockV2 and PatchMergingV2 (swin_v2_t's classes, tiny):
    res-post-norm blocks `x + norm(attn(x))`, cosine attention, continuous position bias MLP,
    PatchMergingV2 normalizes after the reduction. Predict 6 of 7: res-post-norm LNs read linears,
    PatchMergingV2 normalizes its reduction; the final norm reads the stream that starts at
    features.0.2."""
    return _sample(_swin(v2=True), 32)


@architecture("tv-convnext", library="torchvision", family="LayerScale")
def _convnext() -> Sample:
    """ConvNeXt (convnext_tiny's class, tiny block settings): conv stem + LayerNorm2d, CNBlocks
    (depthwise 7x7 conv, permute, LN, linear, GELU, linear, permute, layer_scale), downsampling
    LayerNorm2d + strided conv, classifier LayerNorm2d + flatten + linear. Predict 1 of 5:
    features.0.1 (stem conv); block LNs read depthwise convs; features.2.0 and classifier.0 read
    streams that the next depthwise conv (or the pooled head) sees."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    torch.manual_seed(0)
    return _sample(ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, None, 1)], stochastic_depth_prob=0.0,
                            layer_scale=LAYER_SCALE, num_classes=NUM_CLASSES), 32)


@architecture("tv-maxvit", library="torchvision", family="hierarchical")
def _maxvit() -> Sample:
    """MaxVit (maxvit_t's class, tiny): conv+BN stem, per block an MBConv (BN, GELU, depthwise conv,
    squeeze-excitation) then block attention and grid attention, each a pre-LN attention and a
    pre-LN MLP with relative position bias; head: avg pool, LN, linear, tanh, linear. Predict 5 of
    9: block 1's four LNs (its stream starts at MBConv's proj conv + conv_c, then merge and MLP
    linears) and classifier.2, because the only other consumer of block 1's stream is the head's
    adaptive average pool (linear over H,W: the channel mean stays zero and a shift stays a shift);
    float64 hook check 3.9e-16. Block 0's four do not: its stream is read by block 1's BatchNorm and
    pooling conv (float64: 0.58). Today: 0 (avg pooling has no rule)."""
    from torchvision.models.maxvit import MaxVit
    torch.manual_seed(0)
    return _sample(MaxVit(input_size=(64, 64), stem_channels=8, partition_size=4, block_channels=[16, 32],
                          block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0,
                          num_classes=NUM_CLASSES), 64)
