"""Ablation of the end-to-end speed-up (issue 16 part 2): which part of original -> folded + fused moves the time.

One process, one model, one sequence length; every round runs each variant once, in an order that rotates
from round to round (each variant equally often in each position), and each variant's per-round ratio
original / variant is summed up as e2e_speed does (median, percentile-bootstrap 95% interval of the
median, rounds resampled whole, 4000 resamples, seed 0; "faster" / "slower" / "within noise"):

    copy      a second torch.jit.load of the original file: the same model in other allocations (a null
              fold: what the bench reads when nothing changed); copy2, copy3, ...: more loads
    cbwc+ln   the original graph (aten::layer_norm) with the folded model's centered weights copied into
              its own parameters: the fold's weights without its ops
    folded    foldnorm fold --no-fuse: RMSNorm, adds separate
    fused     foldnorm fold: RMSNorm, each residual add -> norm pair one foldnorm::add_rms_norm

Large buffers stay on the heap, as e2e_speed's keepLargeBuffersOnHeap() does (MALLOC_MMAP_MAX_=0,
MALLOC_TRIM_THRESHOLD_: set here, then the script runs itself again). THP_MEM_ALLOC_ENABLE=1 in the
environment puts LibTorch's buffers of 2 MiB and more on huge pages (e2e_speed --huge-pages on).
Run it on a quiet machine:

    PYTHONPATH=build/python python3 analyses/ablate_e2e.py --bin build/bin/foldnorm --model opt:125m --seq 32

Measured on the loaded dev machine (load 7-9; --threads 1 --clock cpu, OPT-125m seq 32, 240-280 s each):
4 KiB pages, four more loads of the original: 1.026 (1.009-1.040) faster, 1.012, 1.029 (1.011-1.047)
faster, 0.983 against the first (173-187 ms a forward); --layout page0: 167-171 ms, one copy still 1.015
faster; THP_MEM_ALLOC_ENABLE=1: 144-146 ms, all four within noise (0.994-1.003); and on huge pages
copy 1.002 (0.999-1.007), cbwc+ln 1.001, folded 0.999, fused 1.008 (1.005-1.012) faster.
GPT-2 small seq 32 (180 s each): 4 KiB pages, copy 1.015 (1.011-1.019) and copy2 1.016 (1.010-1.020)
"faster" than the first load, fused 1.014; huge pages: copies 1.001 and 0.999, fused 1.000 (0.999-1.001).
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

_HEAP_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}
if any(os.environ.get(k) != v for k, v in _HEAP_ENV.items()):
    os.environ.update(_HEAP_ENV)
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402

import foldnorm  # noqa: E402,F401  (registers the foldnorm:: ops)


def inputs_for(module, seq):
    n = len(module.forward.schema.arguments) - 1
    # Token ids, then (BERT) an attention mask of ones and token types of zeros.
    extra = [torch.ones(1, seq, dtype=torch.long), torch.zeros(1, seq, dtype=torch.long)]
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 1000, (1, seq), generator=g)] + extra[: n - 1]


def quantile(v, q):
    s = sorted(v)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def paired(ratios, resamples=4000, seed=0):
    rng = random.Random(seed)
    n = len(ratios)
    meds = sorted(statistics.median(rng.choices(ratios, k=n)) for _ in range(resamples))
    low, high = quantile(meds, 0.025), quantile(meds, 0.975)
    verdict = "too few rounds" if n < 10 else "faster" if low > 1 else "slower" if high < 1 else "within noise"
    return statistics.median(ratios), low, high, verdict


def cbwc_into_original(original_path, folded):
    """The original module with the folded module's values copied into its own parameters (same names and
    shapes): CBWC weights, aten::layer_norm ops, the original's allocations and ties."""
    m = torch.jit.load(original_path).eval()
    src = dict(folded.named_parameters())
    src.update(dict(folded.named_buffers()))
    copied = 0
    with torch.no_grad():
        for name, p in list(m.named_parameters()) + list(m.named_buffers()):
            s = src.get(name)
            if s is not None and s.shape == p.shape and not torch.equal(s, p):
                p.copy_(s)
                copied += 1
    return m, copied


def relocate(module, offset_of):
    """Every parameter and buffer storage of `module` moved to a fresh allocation whose start lies at
    offset_of(name) bytes into its 4 KiB page (tied tensors stay tied), values unchanged: what e2e_speed's
    --layouts does with drawn offsets."""
    moved = {}
    with torch.no_grad():
        for path, sub in module.named_modules():
            tensors = list(sub.named_parameters(recurse=False)) + list(sub.named_buffers(recurse=False))
            for name, t in tensors:
                if t.numel() == 0 or not t.is_contiguous():
                    continue
                key = t.untyped_storage().data_ptr()
                if key not in moved:
                    nbytes = t.untyped_storage().nbytes()
                    raw = torch.empty(nbytes + 4096, dtype=torch.uint8)
                    skip = (offset_of(path + "." + name) - raw.data_ptr()) % 4096
                    fresh = raw[skip:skip + nbytes]
                    fresh.copy_(torch.tensor([], dtype=torch.uint8).set_(t.untyped_storage()))
                    moved[key] = fresh
                typed = moved[key].view(t.dtype)
                new = typed.as_strided(t.shape, t.stride(), typed.storage_offset() + t.storage_offset())
                assert torch.equal(new, t)
                sub._c.setattr(name, new)


def op_count(module):
    """Ops of the inlined forward (prim:: nodes, constants and attribute reads not counted), by kind."""
    g = module.forward.graph.copy()
    torch._C._jit_pass_inline(g)
    kinds = {}
    for n in g.nodes():
        if not n.kind().startswith("prim::"):
            kinds[n.kind()] = kinds.get(n.kind(), 0) + 1
    return sum(kinds.values()), kinds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the foldnorm CLI (build/bin/foldnorm)")
    ap.add_argument("--model", default="opt:125m")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=40, help="at least this many rounds")
    ap.add_argument("--seconds", type=float, default=120, help="then more rounds until this many seconds")
    ap.add_argument("--variants", default="copy,cbwc+ln,folded,fused")
    ap.add_argument("--ops", action="store_true", help="print each variant's op kinds and counts")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: wall clock (what e2e_speed times); cpu: this thread's CPU time, which a loaded "
                         "machine stretches less (only with --threads 1: OpenMP workers' time is not counted)")
    ap.add_argument("--layout", choices=("load", "page0", "random"), default="load",
                    help="load: each model where its load put it; page0: every storage moved to the start of a "
                         "4 KiB page (all models alike); random: moved to drawn 64-byte offsets")
    ap.add_argument("--workdir", help="keep the built and folded models here and reuse them (default: a temporary "
                                      "folder)")
    a = ap.parse_args()
    if a.clock == "cpu" and a.threads != 1:
        sys.exit("ablate_e2e: --clock cpu needs --threads 1 (other threads' CPU time is not this thread's)")
    clock = time.perf_counter if a.clock == "wall" else time.thread_time
    torch.set_num_threads(a.threads)
    wanted = a.variants.split(",")
    if any(not (v.startswith("copy") or v in ("cbwc+ln", "folded", "fused")) for v in wanted):
        sys.exit(f"ablate_e2e: unknown variant in {a.variants} (copy, copy2, ..., cbwc+ln, folded, fused)")
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ablate-e2e-") as scratch:
        work = a.workdir or scratch
        name, _, preset = a.model.partition(":")
        orig = os.path.join(work, name + ".pt")
        paths = {"folded": os.path.join(work, name + "_unfused.pt"), "fused": os.path.join(work, name + "_fused.pt")}
        cmds = [[a.bin, "zoo", name, "-o", orig] + (["-p", preset] if preset else [])]
        if "folded" in wanted:
            cmds.append([a.bin, "fold", orig, "-o", paths["folded"], "--no-fuse", "--random", "0"])
        if "fused" in wanted or "cbwc+ln" in wanted:
            cmds.append([a.bin, "fold", orig, "-o", paths["fused"], "--random", "0"])
        for cmd in cmds:
            if a.workdir and os.path.exists(cmd[cmd.index("-o") + 1]):
                continue
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"ablate_e2e: {' '.join(cmd)} failed: {r.stderr.strip().splitlines()[-1:]}")
        # Loaded in this order: the original first, as e2e_speed does.
        models = {"original": torch.jit.load(orig).eval()}
        for v in wanted:
            if v.startswith("copy"):
                models[v] = torch.jit.load(orig).eval()
            elif v == "cbwc+ln":
                models[v], copied = cbwc_into_original(orig, torch.jit.load(paths["fused"]))
                print(f"cbwc+ln: {copied} parameters copied from the fold")
            else:
                models[v] = torch.jit.load(paths[v]).eval()
        if a.layout != "load":
            rng = random.Random(1)
            for m in models.values():
                relocate(m, (lambda _: 0) if a.layout == "page0" else (lambda _: 64 * rng.randrange(64)))
        args = inputs_for(models["original"], a.seq)
        with torch.inference_mode():
            for _ in range(a.warmup):
                for m in models.values():
                    m(*args)
            ref = models["original"](*args)
            ref = ref[0] if isinstance(ref, tuple) else ref
            for k, m in models.items():
                out = m(*args)
                out = out[0] if isinstance(out, tuple) else out
                print(f"{k:10s} ops/forward {op_count(m)[0]:5d}  max |out - original| "
                      f"{(out - ref).abs().max().item():.3e}  params {sum(p.numel() for p in m.parameters())}")
            if a.ops:
                for k, m in models.items():
                    print(k, sorted(op_count(m)[1].items()))
            sys.stdout.flush()
            names = list(models)
            times = {k: [] for k in names}
            start = time.monotonic()
            rnd = 0
            while rnd < a.rounds or time.monotonic() - start < a.seconds or rnd % len(names):
                order = names[rnd % len(names):] + names[: rnd % len(names)]
                for k in order:
                    t0 = clock()
                    models[k](*args)
                    times[k].append((clock() - t0) * 1e3)
                rnd += 1
        print(f"\n{a.model} seq {a.seq}, {a.threads} threads, {a.clock} clock, layout {a.layout}, "
              f"THP_MEM_ALLOC_ENABLE={os.environ.get('THP_MEM_ALLOC_ENABLE', '')}, {rnd} rounds ({time.monotonic() - start:.0f} s), "
              f"load {os.getloadavg()[0]:.2f}")
        print(f"{'variant':10s} {'median ms':>10s} {'orig/variant':>13s} {'95% interval':>14s}  verdict")
        print(f"{'original':10s} {statistics.median(times['original']):10.2f}")
        for k in names[1:]:
            ratios = [o / t for o, t in zip(times["original"], times[k])]
            med, low, high, verdict = paired(ratios)
            print(f"{k:10s} {statistics.median(times[k]):10.2f} {med:13.4f} {low:7.4f}-{high:.4f}  {verdict}")


if __name__ == "__main__":
    main()
