"""Checkpoints for the fold-checkpoint tests and the benchmark (issue 29): random Hugging Face
models saved as sharded safetensors, and weightless checkpoints of real configurations.

``weightless_checkpoint`` builds a model's names, shapes and dtype on the meta device and writes
each shard as its header followed by a hole (``truncate``): a sparse file of the right size that
holds no weights, so ``--dry-run`` can be checked against OPT-66B or BLOOM-176B on any machine.
"""
import hashlib
import json
import os
import struct

import torch

_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.bool: "BOOL", torch.uint8: "U8"}


def transformers():
    import transformers as tf
    tf.logging.set_verbosity_error()
    return tf


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Nonzero biases and LayerNorm parameters, so every planned tensor really changes."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * noise)
            elif p.dim() == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.05 * noise)
    return model


def tiny_opt(layers: int = 4, hidden: int = 32, seed: int = 0, **overrides):
    tf = transformers()
    args = dict(vocab_size=128, hidden_size=hidden, num_attention_heads=4, ffn_dim=2 * hidden,
                num_hidden_layers=layers, max_position_embeddings=64, word_embed_proj_dim=hidden,
                dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    args.update(overrides)
    torch.manual_seed(seed)
    return randomize(tf.OPTForCausalLM(tf.OPTConfig(**args)), seed).eval()


def tiny_bloom(layers: int = 3, hidden: int = 32, seed: int = 0):
    tf = transformers()
    torch.manual_seed(seed)
    cfg = tf.BloomConfig(vocab_size=128, hidden_size=hidden, n_layer=layers, n_head=4)
    return randomize(tf.BloomForCausalLM(cfg), seed).eval()


def save(model: torch.nn.Module, folder: str, dtype: torch.dtype, shard: str = "40KB") -> str:
    model.to(dtype).save_pretrained(folder, max_shard_size=shard)
    return folder


def folder_hashes(folder: str) -> dict:
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def weightless_checkpoint(config_path: str, folder: str, shard_bytes: int = 10 << 30) -> dict:
    """The checkpoint save_pretrained would write for ``config_path``'s model (tied tensors once,
    names and shapes from the meta device, the config's dtype), as sparse shards with no weights.
    Returns {"tensors", "bytes", "parameters"}."""
    tf = transformers()
    os.makedirs(folder, exist_ok=True)
    with open(config_path) as f:
        raw = json.load(f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
    config = tf.AutoConfig.from_pretrained(folder)
    dtype = getattr(torch, raw.get("torch_dtype", "float32"))
    cls = getattr(tf, config.architectures[0])
    with torch.device("meta"):
        model = cls(config)
    seen, entries = set(), []
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if id(t) in seen:  # a tied tensor is saved once, under its first name
            continue
        seen.add(id(t))
        if name.split(".")[-1] in getattr(model, "_keys_to_ignore_on_save", None) or []:
            continue
        if not isinstance(t, torch.nn.Parameter):
            continue  # buffers (position ids, masks) are not persistent in these models
        entries.append((name, list(t.shape), dtype if t.is_floating_point() else t.dtype))
    shards, current, size = [], [], 0
    for e in entries:
        n = _numel(e[1]) * torch.empty((), dtype=e[2]).element_size()
        if current and size + n > shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append((e, n))
        size += n
    shards.append(current)
    weight_map, total = {}, 0
    for k, shard in enumerate(shards):
        file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for (name, shape, dt), n in shard:
            header[name] = {"dtype": _DTYPES[dt], "shape": shape, "data_offsets": [offset, offset + n]}
            weight_map[name] = file
            offset += n
        text = json.dumps(header).encode()
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
        with open(os.path.join(folder, file), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            f.truncate(8 + len(text) + offset)  # a hole: no weights on disk
        total += offset
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return {"tensors": len(entries), "bytes": total, "parameters": sum(_numel(e[1]) for e in entries)}


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
