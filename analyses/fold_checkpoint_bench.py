"""fold-checkpoint against checkpoint size (issue 29; numbers in docs/performance.md).

For each size: a random OPT saved as float32 safetensors in ~500 MB shards; its plan made once
(`python -m foldnorm.checkpoint plan`, outside the measurement); then
`/usr/bin/time -v prlimit --as=LIMIT foldnorm fold-checkpoint SRC --plan PLAN -o OUT`, LIMIT a
quarter of the checkpoint unless --limit-mb says otherwise (the peak resident size and the wall
time are /usr/bin/time's); then the original and the fold are loaded one after the other (the
fold with foldnorm.load_folded, LayerNorms as RMSNorm) and their logits compared.

    PYTHONPATH=build/python python analyses/fold_checkpoint_bench.py --foldnorm build/bin/foldnorm \\
        --work /tmp/ckpt-bench --sizes 6x1024,12x1536,24x2048

A size is LAYERSxWIDTH (24x2048 is OPT-1.3B's shape: 1.3B parameters, 5.3 GB in float32).
Checkpoints are deleted after each size unless --keep.
"""
import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import time

import torch


def build(work: str, layers: int, width: int, seed: int = 0, dtype: str = "float32") -> str:
    import transformers as tf
    tf.logging.set_verbosity_error()
    src = os.path.join(work, f"opt-{layers}x{width}" + ("" if dtype == "float32" else f"-{dtype}"))
    if os.path.exists(os.path.join(src, "config.json")):
        return src
    cfg = tf.OPTConfig(hidden_size=width, num_attention_heads=width // 64, ffn_dim=4 * width,
                       num_hidden_layers=layers, word_embed_proj_dim=width, dropout=0.0)
    torch.manual_seed(seed)
    model = tf.OPTForCausalLM(cfg).eval()
    with torch.no_grad():  # nonzero biases and LN parameters: every planned tensor changes
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(0, 0.05).add_(1.0 if "norm" in name and name.endswith("weight") else 0.0)
    model.to(getattr(torch, dtype)).save_pretrained(src, max_shard_size="500MB")
    del model
    gc.collect()
    return src


def startup_address_space(cmd) -> int:
    """VmPeak of `cmd` (a dry run: libraries mapped, no tensor read), sampled until it exits."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    if line.startswith("VmPeak:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            break
        time.sleep(0.002)
    return peak


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits.double()


def measure(args, layers: int, width: int) -> dict:
    import transformers as tf
    import foldnorm
    os.makedirs(args.work, exist_ok=True)
    t = time.time()
    src = build(args.work, layers, width, dtype=args.dtype)
    made = time.time() - t
    size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src) if f.endswith(".safetensors"))
    plan, out = os.path.join(args.work, "plan.json"), os.path.join(args.work, f"folded-{layers}x{width}")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "foldnorm.checkpoint", "plan", src, "-o", plan], check=True)
    # The CLI links LibTorch, whose libraries are mapped before main() runs: their address space
    # (VmSize at start, measured on a dry run) is not the fold's. The limit is that plus a quarter
    # of the checkpoint, or at least what the fold says it needs (a small checkpoint's embedding
    # can be bigger than a quarter of it).
    base = startup_address_space([args.foldnorm, "fold-checkpoint", src, "--plan", plan, "--dry-run", "--json"])
    bound = json.loads(subprocess.run([args.foldnorm, "fold-checkpoint", src, "--plan", plan, "--dry-run", "--json"],
                                      capture_output=True, text=True, check=True).stdout)["memory_bound_bytes"]
    share = args.limit_mb * 2**20 if args.limit_mb else max(size // 4, bound + 64 * 2**20)
    limit = base + share
    cmd = ["/usr/bin/time", "-v", "prlimit", f"--as={limit}", args.foldnorm, "fold-checkpoint", src,
           "--plan", plan, "-o", out, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"fold failed under a {limit / 2**20:.0f} MiB limit:\n{r.stderr[-2000:]}")
    result = json.loads(r.stdout)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) * 1024
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", r.stderr).group(1)
    seconds = sum(float(x) * 60 ** i for i, x in enumerate(reversed(wall.split(":"))))
    ids = torch.randint(0, 50272, (1, 32), generator=torch.Generator().manual_seed(0))
    original = tf.OPTForCausalLM.from_pretrained(src, dtype=torch.float32).eval()  # run in float32
    ref = logits(original, ids)
    del original
    gc.collect()
    folded = foldnorm.load_folded(out, dtype=torch.float32)
    got = logits(folded, ids)
    swapped = sum(isinstance(m, foldnorm.RMSNorm) for m in folded.modules())
    del folded
    gc.collect()
    rel = float((ref - got).abs().max() / ref.abs().max())
    row = {"layers": layers, "width": width, "parameters": size // 4, "bytes": size,
           "shards": result["shards"], "largest_tensor": result["largest_tensor_bytes"], "limit": limit,
           "startup_address_space": base, "limit_share": share, "memory_bound": bound,
           "seconds": seconds, "fold_seconds": result["seconds"], "peak_rss": rss,
           "centered": len(result["centered"]), "rms_norms": swapped,
           "worst_axis_sum": result["worst_axis_sum_relative"], "relative_error_float32": rel,
           "gb_per_s": 2 * size / seconds / 1e9, "build_seconds": made}
    if not args.keep:
        shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--foldnorm", required=True, help="the foldnorm CLI")
    ap.add_argument("--work", default="/tmp/foldnorm-ckpt-bench")
    ap.add_argument("--sizes", default="6x1024,12x1536,24x2048", help="LAYERSxWIDTH,... (OPT shapes)")
    ap.add_argument("--limit-mb", type=int, default=0, help="address-space limit (default: a quarter of the checkpoint)")
    ap.add_argument("--keep", action="store_true", help="keep the random checkpoints")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "float64"],
                    help="dtype the checkpoints are saved in (both models are run in float32)")
    args = ap.parse_args()
    rows = []
    for s in args.sizes.split(","):
        layers, width = (int(x) for x in s.split("x"))
        row = measure(args, layers, width)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n| checkpoint ({args.dtype}) | shards | largest tensor | limit (--as): LibTorch + share | wall | peak RSS | "
          "read+write | logits vs original (float32) | worst sum/mag |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| OPT {r['layers']}x{r['width']}, {r['bytes'] / 1e9:.2f} GB | {r['shards']} | "
              f"{r['largest_tensor'] / 1e6:.0f} MB | {r['startup_address_space'] / 2**20:.0f} + "
              f"{r['limit_share'] / 2**20:.0f} MiB | {r['seconds']:.1f} s | "
              f"{r['peak_rss'] / 2**20:.0f} MiB | {r['gb_per_s']:.2f} GB/s | {r['relative_error_float32']:.1e} | "
              f"{r['worst_axis_sum']:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
