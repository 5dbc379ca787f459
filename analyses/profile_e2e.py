"""Op by op: where an original and its folded + fused model spend a forward (issue 16 part 2).

For each zoo model it builds the model and its fold with the foldnorm CLI, runs both on LibTorch's
graph executor from Python (torch.jit.load, the foldnorm ops library loaded by `import foldnorm`)
and prints, per sequence length, each op's self CPU time per forward under torch.profiler, then
the part the fold changes: the original's aten::add + LayerNorm against the folded model's
aten::add + broadcast_tensors + foldnorm::add_rms_norm / rms_norm, as a share of the forward.
That share bounds what the fold can gain end to end; e2e_speed measures the whole forward.

    PYTHONPATH=build/python python3 analyses/profile_e2e.py --bin build/bin/foldnorm \\
        --models gpt2:small,opt:125m,bert:base --seq 32,128,512 --reps 10 --threads 2

On a GPU (issue 28 item 4): `--device cuda --dtype bfloat16 --batch 8` retargets both files with
`foldnorm retarget` (every method's device and dtype constants, not module.to), profiles each
op's device time (the kernels it launched) instead of its CPU time, and with `--cuda-graphs`
also times both forwards captured as CUDA graphs and replayed, original and folded alternating
(launch overhead out: small models on a fast GPU are launch-bound), printing the medians, their
spread and the paired ratio. `--dtype` works on the CPU too (the retargeted bfloat16 files).

Run it on a quiet machine: on an oversubscribed one every OpenMP region waits for a descheduled
thread and the times measure the load. Profiler overhead is in both models alike.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile


# What the fold rewrites: every LayerNorm, and each residual add that feeds one. All adds are
# counted on both sides (the unfused ones alike), so the difference is the fold's.
ORIGINAL_OPS = ("aten::add", "aten::layer_norm", "aten::native_layer_norm")
# The LNs a fold keeps (BERT's post-LN blocks) stay on the folded side.
FOLDED_OPS = ORIGINAL_OPS + ("aten::broadcast_tensors", "aten::expand", "foldnorm::add_rms_norm",
                             "foldnorm::rms_norm")


SPEC = re.compile(r"^(?P<shape>[0-9x]+):(?P<dtype>[a-z0-9]+)(\[(?P<lo>-?[0-9.]+),(?P<hi>-?[0-9.]+)\))?$")


def input_specs(path):
    """The input spec the zoo embedded in the file (foldnorm_input_spec.json)."""
    extra = {"foldnorm_input_spec.json": ""}
    torch.jit.load(path, _extra_files=extra)
    specs = json.loads(extra["foldnorm_input_spec.json"] or "{}").get("inputs", [])
    if not specs:
        sys.exit(f"profile_e2e: {path} carries no input spec")
    return specs


def inputs_for(specs, seq, batch=1, device="cpu", dtype=torch.float32):
    """Inputs from the file's spec with the batch replaced and, for token inputs (integer, rank
    2), the sequence length: ids, masks and types in the spec's range. Images keep their size."""
    out = []
    gen = torch.Generator().manual_seed(0)
    for text in specs:
        m = SPEC.match(text)
        if not m:
            sys.exit(f"profile_e2e: cannot read the input spec {text!r}")
        shape = [int(d) for d in m.group("shape").split("x")]
        shape[0] = batch
        if m.group("dtype").startswith("int"):
            if len(shape) == 2:
                shape[1] = seq
            lo, hi = (int(float(m.group("lo"))), int(float(m.group("hi")))) if m.group("lo") else (0, 2)
            out.append(torch.randint(lo, hi, shape, generator=gen).to(device))
        else:
            out.append(torch.randn(shape, generator=gen).to(device=device, dtype=dtype))
    return out


def per_forward(module, args, reps, device):
    """Per op key: (self time per forward in ms, calls per forward). On the CPU the op's own CPU
    time; on CUDA the device time of the kernels it launched (an op's kernels are its own: the
    profiler attributes each kernel to the op that launched it)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as p:
        for _ in range(reps):
            module(*args)
        if device == "cuda":
            torch.cuda.synchronize()
    out = {}
    for e in p.key_averages():
        if device == "cuda":
            # ops: device time of their kernels; kernels themselves are left out (no double count)
            t = getattr(e, "device_time_total", None)
            t = e.cuda_time_total if t is None else t
            if e.device_type != torch.autograd.DeviceType.CPU or not e.key.startswith(("aten::", "foldnorm::")):
                continue
            # an op nested in another (linear -> addmm) would be counted twice: keep leaves only
            if e.key in NESTING_OPS:
                continue
            out[e.key] = (t / reps / 1e3, e.count // reps)
        else:
            out[e.key] = (e.self_cpu_time_total / reps / 1e3, e.count // reps)
    return out


# Composite ops whose kernels the profiler also attributes to the ops they call (aten::linear ->
# addmm/matmul, aten::layer_norm -> native_layer_norm, ...): their device time would be counted
# twice, so only the ops they call are kept. On the CPU self times need no such list.
NESTING_OPS = {"aten::linear", "aten::matmul", "aten::layer_norm", "aten::dropout", "aten::to", "aten::_to_copy",
               "aten::contiguous", "aten::reshape", "aten::softmax", "aten::scaled_dot_product_attention",
               "aten::embedding", "aten::index_select", "aten::copy_", "aten::einsum", "aten::conv2d",
               "aten::convolution", "aten::_convolution", "aten::rms_norm"}


def graph_replay_times(models, args, reps):
    """Milliseconds per replay of each model's forward captured as a CUDA graph, original and
    folded alternating, `reps` rounds: launch overhead out of both."""
    graphs = {}
    for key, m in models.items():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                m(*args)
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            m(*args)
        graphs[key] = g
    times = {k: [] for k in graphs}
    for _ in range(reps):
        for key, g in graphs.items():
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            g.replay()
            stop.record()
            stop.synchronize()
            times[key].append(start.elapsed_time(stop))
    return times


def retargeted(bin_, path, device, dtype, work):
    """`foldnorm retarget` of a saved model to `device` and `dtype`: every method's constants, not
    only the tensors (module.to leaves a trace's float32 and device constants behind)."""
    if device == "cpu" and dtype == "float32":
        return path
    out = os.path.join(work, os.path.basename(path)[:-3] + f".{device}.{dtype}.pt")
    cmd = [bin_, "retarget", path, "-o", out, "--device", device, "--dtype", dtype]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"profile_e2e: {' '.join(cmd)} failed: {r.stderr.strip().splitlines()[-1:]}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the foldnorm CLI (build/bin/foldnorm)")
    ap.add_argument("--models", default="gpt2:small,opt:125m,bert:base")
    ap.add_argument("--seq", default="32,128,512")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=12, help="ops listed per length")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--cuda-graphs", action="store_true",
                    help="also time both forwards as CUDA graph replays, alternating (CUDA only)")
    ap.add_argument("--ops-lib", help="load the foldnorm:: ops from this library (libfoldnorm_ops.so) instead of "
                                      "importing the foldnorm package (the GPU check builds no Python extension)")
    ap.add_argument("--models-dir", help="use NAME-PRESET.pt and NAME-PRESET-folded.pt from here where both exist")
    a = ap.parse_args()
    if a.ops_lib:
        torch.ops.load_library(a.ops_lib)
    else:
        import foldnorm  # noqa: F401  (registers the foldnorm:: ops)
    if a.reps < 1 or a.threads < 1 or a.batch < 1:
        sys.exit("profile_e2e: --reps, --threads and --batch must be positive")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("profile_e2e: --device cuda, but torch.cuda.is_available() is false here")
    if a.cuda_graphs and a.device != "cuda":
        sys.exit("profile_e2e: --cuda-graphs needs --device cuda")
    dtype = getattr(torch, a.dtype)
    unit = "device" if a.device == "cuda" else "self CPU"
    if not os.access(a.bin, os.X_OK):
        sys.exit(f"profile_e2e: {a.bin} is not an executable foldnorm CLI")
    torch.set_num_threads(a.threads)
    failures = []
    with tempfile.TemporaryDirectory(prefix="profile-e2e-") as work:
        for spec in a.models.split(","):
            name, _, preset = spec.partition(":")
            orig, folded = os.path.join(work, name + ".pt"), os.path.join(work, name + "_folded.pt")
            made = [os.path.join(a.models_dir, f"{name}-{preset}{s}.pt") for s in ("", "-folded")] if a.models_dir else []
            if made and all(os.path.exists(p) for p in made):
                orig, folded = made  # the GPU check's zoo and fold steps made them
            else:
                zoo = [a.bin, "zoo", name, "-o", orig] + (["-p", preset] if preset else [])
                for cmd in (zoo, [a.bin, "fold", orig, "-o", folded]):
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    if r.returncode != 0:
                        sys.exit(f"profile_e2e: {' '.join(cmd)} failed: {r.stderr.strip().splitlines()[-1:]}")
            paths = {"original": retargeted(a.bin, orig, a.device, a.dtype, work),
                     "folded": retargeted(a.bin, folded, a.device, a.dtype, work)}
            models = {k: torch.jit.load(p, map_location=a.device).eval() for k, p in paths.items()}
            specs = input_specs(orig)
            with torch.inference_mode():
                for seq in (int(s) for s in a.seq.split(",")):
                    args = inputs_for(specs, seq, a.batch, a.device, dtype)
                    for m in models.values():
                        for _ in range(3):  # the profiling executor optimises on the second run
                            m(*args)
                    t = {k: per_forward(m, args, a.reps, a.device) for k, m in models.items()}
                    # A profile of the wrong model would compare a model with itself.
                    ours = sum(t["folded"].get(k, (0, 0))[1] for k in ("foldnorm::add_rms_norm", "foldnorm::rms_norm"))
                    if ours == 0 or any(k.startswith("foldnorm::") for k in t["original"]):
                        sys.exit(f"profile_e2e: {spec}: the folded forward ran no foldnorm op (or the original did)")
                    total = {k: sum(v[0] for v in t[k].values()) for k in t}
                    print(f"\n== {spec} seq {seq} batch {a.batch} {a.dtype} on {a.device}, {a.threads} threads, "
                          f"{a.reps} forwards each: {unit} ms per forward, (calls)")
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
                    if a.cuda_graphs:
                        try:
                            times = graph_replay_times(models, args, max(a.reps, 20))
                        except RuntimeError as e:  # a capture the runner does not allow: say why, go on
                            cause = [line for line in str(e).splitlines() if line.strip()]
                            print(f"CUDA graph replays: capture failed: {cause[-1] if cause else type(e).__name__}")
                            failures.append(f"{spec} seq {seq}: CUDA graph capture")
                            torch.cuda.synchronize()
                            continue
                        med = {k: statistics.median(v) for k, v in times.items()}
                        ratios = sorted(o / f for o, f in zip(times["original"], times["folded"]))
                        q = len(ratios) // 4
                        print(f"CUDA graph replays ({len(ratios)} rounds, alternating): original {med['original']:.4f} ms, "
                              f"folded {med['folded']:.4f} ms; paired speed-up original/folded median "
                              f"{statistics.median(ratios):.4f} (quartiles {ratios[q]:.4f}-{ratios[-1 - q]:.4f})")
                    sys.stdout.flush()
    if failures:
        sys.exit("profile_e2e: failed: " + "; ".join(failures))


if __name__ == "__main__":
    main()
