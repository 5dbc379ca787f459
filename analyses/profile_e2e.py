"""Op by op: where an original and its folded + fused model spend a forward (issue 16 part 2).

For each zoo model it builds the model and its fold with the foldnorm CLI, runs both on LibTorch's
graph executor from Python (torch.jit.load, the foldnorm ops library loaded by `import foldnorm`)
and prints, per sequence length, each op's self CPU time per forward under torch.profiler, then
the part the fold changes: the original's aten::add + LayerNorm against the folded model's
aten::add + broadcast_tensors + foldnorm::add_rms_norm / rms_norm, as a share of the forward.
That share bounds what the fold can gain end to end; e2e_speed measures the whole forward.

    PYTHONPATH=build/python python3 analyses/profile_e2e.py --bin build/bin/foldnorm \\
        --models gpt2:small,opt:125m,bert:base --seq 32,128,512 --reps 10 --threads 2

Run it on a quiet machine: on an oversubscribed one every OpenMP region waits for a descheduled
thread and the times measure the load. Profiler overhead is in both models alike.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

import foldnorm  # noqa: F401  (registers the foldnorm:: ops)

# What the fold rewrites: every LayerNorm, and each residual add that feeds one. All adds are
# counted on both sides (the unfused ones alike), so the difference is the fold's.
ORIGINAL_OPS = ("aten::add", "aten::layer_norm", "aten::native_layer_norm")
# The LNs a fold keeps (BERT's post-LN blocks) stay on the folded side.
FOLDED_OPS = ORIGINAL_OPS + ("aten::broadcast_tensors", "aten::expand", "foldnorm::add_rms_norm",
                             "foldnorm::rms_norm")


def inputs_for(module, seq):
    n = len(module.forward.schema.arguments) - 1
    # Token ids, then (BERT) an attention mask of ones and token types of zeros.
    extra = [torch.ones(1, seq, dtype=torch.long), torch.zeros(1, seq, dtype=torch.long)]
    return [torch.randint(0, 1000, (1, seq))] + extra[: n - 1]


def per_forward(module, args, reps):
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(reps):
            module(*args)
    return {e.key: (e.self_cpu_time_total / reps / 1e3, e.count // reps) for e in p.key_averages()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the foldnorm CLI (build/bin/foldnorm)")
    ap.add_argument("--models", default="gpt2:small,opt:125m,bert:base")
    ap.add_argument("--seq", default="32,128,512")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=12, help="ops listed per length")
    a = ap.parse_args()
    if a.reps < 1 or a.threads < 1:
        sys.exit("profile_e2e: --reps and --threads must be positive")
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"profile_e2e: {a.bin} is not an executable foldnorm CLI")
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory(prefix="profile-e2e-") as work:
        for spec in a.models.split(","):
            name, _, preset = spec.partition(":")
            orig, folded = os.path.join(work, name + ".pt"), os.path.join(work, name + "_folded.pt")
            zoo = [a.bin, "zoo", name, "-o", orig] + (["-p", preset] if preset else [])
            for cmd in (zoo, [a.bin, "fold", orig, "-o", folded]):
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"profile_e2e: {' '.join(cmd)} failed: {r.stderr.strip().splitlines()[-1:]}")
            models = {"original": torch.jit.load(orig).eval(), "folded": torch.jit.load(folded).eval()}
            with torch.inference_mode():
                for seq in (int(s) for s in a.seq.split(",")):
                    args = inputs_for(models["original"], seq)
                    for m in models.values():
                        for _ in range(3):  # the profiling executor optimises on the second run
                            m(*args)
                    t = {k: per_forward(m, args, a.reps) for k, m in models.items()}
                    # A profile of the wrong model would compare a model with itself.
                    ours = sum(t["folded"].get(k, (0, 0))[1] for k in ("foldnorm::add_rms_norm", "foldnorm::rms_norm"))
                    if ours == 0 or any(k.startswith("foldnorm::") for k in t["original"]):
                        sys.exit(f"profile_e2e: {spec}: the folded forward ran no foldnorm op (or the original did)")
                    total = {k: sum(v[0] for v in t[k].values()) for k in t}
                    print(f"\n== {spec} seq {seq}, {a.threads} threads, {a.reps} forwards each: "
                          f"self CPU ms per forward, (calls)")
                    keys = sorted(set(t["original"]) | set(t["folded"]),
                                  key=lambda k: -max(t["original"].get(k, (0, 0))[0], t["folded"].get(k, (0, 0))[0]))
                    print(f"{'op':<34}{'original':>20}{'folded':>20}")
                    for key in keys[: a.top]:
                        cells = "".join(f"{t[k].get(key, (0, 0))[0]:13.3f} ({t[k].get(key, (0, 0))[1]:4d})" for k in t)
                        print(f"{key[:34]:<34}{cells}")
                    norm = {"original": sum(t["original"].get(k, (0, 0))[0] for k in ORIGINAL_OPS),
                            "folded": sum(t["folded"].get(k, (0, 0))[0] for k in FOLDED_OPS)}
                    print(f"{'total':<34}{total['original']:20.3f}{total['folded']:20.3f}")
                    print(f"adds + norms: original {norm['original']:.3f} ms ({100 * norm['original'] / total['original']:.2f}%"
                          f" of its forward), folded {norm['folded']:.3f} ms; the fold's bound on the end-to-end"
                          f" speed-up: {total['original'] / (total['original'] - norm['original'] + norm['folded']):.4f}")
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
