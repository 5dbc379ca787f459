"""The public-architecture corpus: a registry of model builders and the preparation every model gets.

A builder makes one architecture from its library's own classes with a tiny configuration and random
weights (nothing is downloaded), and returns a `Sample`. The corpus driver (build_corpus.py) then
prepares it the same way for every architecture (`prepare`), traces it, runs foldnorm on the trace and
confirms every verdict with the float64 eager oracle (oracle.py).

Registering an architecture:

    @architecture("timm-vit_tiny", library="timm", family="ViT", old=True)
    def _vit_tiny():
        import timm
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, ...)
        return Sample(model, inputs=(image(1, 3, 32, 32),), specs=["1x3x32x32:float32"],
                      input_names=["image"], output_names=["logits"])

`old=True` marks the architectures that are traced a second time under the older library versions of
the "old" fixture environment (a model that must build with both APIs). `absent=("old",)` declares that
the library of an environment lacks the architecture: its builder failing there is expected, not a
failure. tests/corpus/CMakeLists.txt reads the names and the old flag from the decorator's text (one
ctest entry per architecture), so keep its arguments literal.
"""
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn


@dataclass
class Sample:
    """One architecture, ready to prepare and trace. `model` returns a tensor or a tuple of tensors
    (wrap dict-returning library models); `inputs` match `specs` (the CLI's --input form)."""
    model: nn.Module
    inputs: Tuple[torch.Tensor, ...]
    specs: List[str]
    input_names: List[str]
    output_names: List[str]
    notes: List[str] = field(default_factory=list)


@dataclass
class Architecture:
    name: str                      # unique: "<library prefix>-<model>", e.g. hf-gpt2, timm-vit_tiny, tv-swin_t
    library: str                   # transformers | timm | torchvision
    family: str                    # e.g. "decoder pre-LN", "encoder post-LN", "hierarchical", "LayerScale"
    build: Callable[[], Sample]
    old: bool = False              # traced again under the old library versions
    description: str = ""
    absent: Tuple[str, ...] = ()   # environments whose library lacks it (a failing build is expected)


REGISTRY: Dict[str, Architecture] = {}


def architecture(name: str, library: str, family: str, old: bool = False, description: str = "",
                 absent: Sequence[str] = ()):
    def register(fn: Callable[[], Sample]) -> Callable[[], Sample]:
        if name in REGISTRY:
            raise ValueError(f"architecture '{name}' registered twice")
        REGISTRY[name] = Architecture(name, library, family, fn, old, description or (fn.__doc__ or "").strip(),
                                      tuple(absent))
        return fn
    return register


def image(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def token_ids(batch: int, seq: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _is_norm(mod: nn.Module) -> bool:
    return "Norm" in type(mod).__name__


def perturb(model: nn.Module, seed: int = 1) -> None:
    """Gives random weights the look of trained ones, so that a wrong fold shows in the outputs.

    Libraries initialise LayerNorm to weight 1, bias 0, most biases to 0, class tokens and some heads to
    zero, and LayerScale gammas to one small constant. With those values an LN output is already
    mean-zero, a zero bias needs no centering and a constant gamma is a scalar: a fold that forgot a
    bias, let an LN output into the stream or ignored a per-channel scale would still look exact. So:
    biases and norm affines get noise, every parameter whose entries are all equal (zeros, constants)
    gets a spread around its value (or a normal draw when it is zero). A norm weight that starts at
    zero (Swin V2's res-post-norms, zero-init-last BatchNorms) gets 1 + noise, not a multiple of
    zero: a zero gain silences its branch, so a wrong fold of that branch would not show."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in model.modules():
            norm = _is_norm(mod)
            for pname, p in mod.named_parameters(recurse=False):
                if not p.is_floating_point() or p.numel() == 0:
                    continue
                noise = torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype)
                constant = p.numel() > 1 and bool((p == p.reshape(-1)[0]).all())
                if pname == "bias":
                    p.add_(0.05 * noise)
                elif norm and pname == "weight":
                    if bool(p.any()):
                        p.mul_(1 + 0.1 * noise)
                    else:
                        p.copy_(1 + 0.1 * noise)
                elif constant or (p.numel() == 1 and float(p) == 0.0):
                    value = float(p.reshape(-1)[0])
                    if value == 0.0:
                        p.copy_(0.02 * noise)
                    else:
                        p.copy_(value * (1 + 0.5 * noise))


def calibrate_batchnorm(model: nn.Module, inputs: Sequence[torch.Tensor]) -> int:
    """BatchNorm running statistics from one forward pass in train mode (cumulative average), then
    eval. With the default statistics (mean 0, var 1) a BN is a near-identity and an image model's
    output barely depends on its input. Returns how many BN layers were calibrated."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return 0
    saved = [(m.momentum, m.training) for m in bns]
    model.eval()
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    with torch.no_grad():
        model(*inputs)
    for m, (momentum, _) in zip(bns, saved):
        m.momentum = momentum
    model.eval()
    return len(bns)


def prepare(sample: Sample, seed: int = 1) -> Sample:
    """Eval mode, perturbed weights, calibrated BatchNorms: what every corpus model gets before tracing."""
    sample.model.eval()
    perturb(sample.model, seed)
    n = calibrate_batchnorm(sample.model, sample.inputs)
    if n:
        sample.notes.append(f"{n} BatchNorm layers calibrated on the example batch")
    return sample


def as_tuple(out) -> Tuple[torch.Tensor, ...]:
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)):
        return tuple(out)
    raise TypeError(f"model output is {type(out).__name__}; a corpus builder must return tensors")
