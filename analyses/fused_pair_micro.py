"""One residual add + norm pair as TorchScript runs it: what the fold's rewrite costs or saves per pair.

Times, in one process and interleaved, three scripted functions on [1, seq, hidden] float32 rows
under inference mode (what `foldnorm bench` and e2e_speed use):

  original  s = x + r; layer_norm(s)                          (aten::add + aten::layer_norm)
  fused     broadcast_tensors(x, r) -> foldnorm::add_rms_norm (the node the fold writes, guard and all)
  unguarded foldnorm::add_rms_norm alone                      (so the guard's own cost shows)

and prints each one's median microseconds per call (median of 9 batches). Multiplied by the pairs
of a model (24 in GPT-2 small / OPT-125m) it bounds what the fold changes in a forward; the
forward itself is e2e_speed's.

    PYTHONPATH=build/python ~/.cache/foldnorm/venv/bin/python analyses/fused_pair_micro.py --seq 32,128 --threads 2
"""
import argparse
import time

import torch

import foldnorm  # noqa: F401  (registers the foldnorm:: ops)


@torch.jit.script
def fused(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor, n: int):
    a2, b2 = torch.broadcast_tensors(x, r)
    return torch.ops.foldnorm.add_rms_norm(a2, b2, [n], w, b, 1e-5)


@torch.jit.script
def unguarded(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor, n: int):
    return torch.ops.foldnorm.add_rms_norm(x, r, [n], w, b, 1e-5)


@torch.jit.script
def original(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor, n: int):
    s = x + r
    return torch.layer_norm(s, [n], w, b, 1e-5), s


def per_call_us(f, args, calls):
    start = time.perf_counter()
    for _ in range(calls):
        f(*args)
    return (time.perf_counter() - start) / calls * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", default="32,128", help="comma-separated sequence lengths (rows)")
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=3000, help="calls per batch")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    variants = [("original", original), ("fused", fused), ("unguarded", unguarded)]
    print(f"{args.threads} threads, float32 [1, seq, {args.hidden}], median of 9 batches of {args.calls} calls")
    for seq in [int(s) for s in args.seq.split(",")]:
        x, r = torch.randn(1, seq, args.hidden), torch.randn(1, seq, args.hidden)
        w, b = torch.randn(args.hidden), torch.randn(args.hidden)
        call = (x, r, w, b, args.hidden)
        with torch.inference_mode():
            # The fold's node computes the same sum and (for mean-zero rows) the same norm: check the sum.
            assert torch.equal(fused(*call)[1], original(*call)[1])
            for _, f in variants:
                per_call_us(f, call, 300)  # the profiling executor optimises on its second run
            times = {name: [] for name, _ in variants}
            for _ in range(9):  # interleaved batches: a drift hits every variant alike
                for name, f in variants:
                    times[name].append(per_call_us(f, call, args.calls))
        med = {name: sorted(t)[4] for name, t in times.items()}
        print(f"seq {seq}: " + ", ".join(f"{name} {med[name]:.2f} us" for name, _ in variants)
              + f"; saved per pair {med['original'] - med['fused']:.2f} us, guard {med['fused'] - med['unguarded']:.2f} us")


if __name__ == "__main__":
    main()
