"""foldnorm.bench: the original and the folded eager model timed side by side.

The statistics are the CLI's (``foldnorm bench``, src/bench/paired_ratio.cpp): the models run in
rounds, each round one timed sample of each back to back (the order alternating between rounds, so
neither always runs second), after a warm-up. A round's ratio original/folded compares two samples
taken under the same load; the speed-up is the median of the per-round ratios, with a 95%
percentile-bootstrap interval of that median (rounds resampled whole, fixed seed), and a verdict:
"faster" when the interval lies above 1, "slower" below, "within noise" across it, "too few
rounds" under 10. Per model: median and p10-p90 spread of its samples. On a shared machine only
ratios within one run mean anything (docs/performance.md).

A benchmark is a program: call it from a script, not from a test (the tests check its structure).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional

import torch
from torch import nn

from ._trace import ExampleInputs, Inputs, eval_mode, hf_call_options
from .errors import ArgumentError, public, stage

MIN_ROUNDS_TO_DECIDE = 10  # kMinRoundsToDecide in paired_ratio.cpp


def _quantile(values: List[float], q: float) -> float:
    """Linear interpolation between order statistics (foldnorm::quantile, common/measure.h)."""
    s = sorted(values)
    if not s:
        return float("nan")
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass
class BenchResult:
    """What ``foldnorm.bench`` measured. Times are milliseconds per call."""

    original_ms: float                 #: median over rounds
    folded_ms: float
    original_spread: tuple             #: (p10, p90)
    folded_spread: tuple
    speedup: float                     #: median of per-round original/folded ratios
    speedup_low: float                 #: 95% bootstrap interval of that median
    speedup_high: float
    verdict: str                       #: faster | slower | within noise | too few rounds
    rounds: int
    calls_per_sample: int
    compiled: bool
    threads: int
    original_samples: List[float] = field(default_factory=list, repr=False)
    folded_samples: List[float] = field(default_factory=list, repr=False)

    def __repr__(self) -> str:
        mode = "compiled" if self.compiled else "eager"
        return (f"<foldnorm.BenchResult ({mode}, {self.rounds} rounds x {self.calls_per_sample} call(s), "
                f"{self.threads} thread(s)): original {self.original_ms:.3f} ms "
                f"[p10-p90 {self.original_spread[0]:.3f}-{self.original_spread[1]:.3f}], folded "
                f"{self.folded_ms:.3f} ms [{self.folded_spread[0]:.3f}-{self.folded_spread[1]:.3f}]; "
                f"speed-up {self.speedup:.3f}x (95% {self.speedup_low:.3f}-{self.speedup_high:.3f}): {self.verdict}>")


def paired_ratio(ratios: List[float], seed: int = 0, resamples: int = 1000):
    """(median, low, high, verdict) of per-round ratios, as pairedRatio (paired_ratio.cpp)."""
    if len(ratios) < 2:
        raise ArgumentError("bench: at least two rounds are needed")
    rng = random.Random(seed)
    medians = [_quantile([rng.choice(ratios) for _ in ratios], 0.5) for _ in range(resamples)]
    median, low, high = _quantile(ratios, 0.5), _quantile(medians, 0.025), _quantile(medians, 0.975)
    if len(ratios) < MIN_ROUNDS_TO_DECIDE:
        verdict = "too few rounds"
    else:
        verdict = "faster" if low > 1 else "slower" if high < 1 else "within noise"
    return median, low, high, verdict


def _timer(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) * 1e3 / calls


@public
def bench(model: nn.Module, folded: nn.Module, example_inputs: ExampleInputs, *, compiled: bool = False,
          rounds: int = 20, warmup: int = 3, min_sample_ms: float = 5.0, seed: int = 0) -> BenchResult:
    """Times ``model`` and ``folded`` (from ``foldnorm.fold``) on ``example_inputs``, interleaved
    (see the module doc); ``compiled=True`` times ``torch.compile`` of each instead (compiled during
    the warm-up). Each sample repeats the call until it lasts ``min_sample_ms`` (calibrated once, the
    same count for both models). Returns a BenchResult."""
    if not isinstance(model, nn.Module) or not isinstance(folded, nn.Module):
        raise ArgumentError("bench() takes two nn.Modules: the original and its fold")
    if rounds < 2 or warmup < 0:
        raise ArgumentError("bench: rounds must be at least 2 and warmup at least 0")
    inputs = Inputs(example_inputs)
    extra = hf_call_options(model)
    with stage("bench: preparing the models"):
        a, b = (torch.compile(model), torch.compile(folded)) if compiled else (model, folded)
    calls = {}
    for name, m in (("original", a), ("folded", b)):
        calls[name] = (lambda m=m: inputs.call(m, extra))
    with eval_mode(model), eval_mode(folded), torch.inference_mode(), stage("bench: running the models"):
        for _ in range(max(warmup, 1)):
            calls["original"](), calls["folded"]()
        one = max(_timer(calls["original"], 1), _timer(calls["folded"], 1), 1e-6)
        per_sample = max(1, int(min_sample_ms / one))
        samples = {"original": [], "folded": []}
        for r in range(rounds):
            order = ("original", "folded") if r % 2 == 0 else ("folded", "original")
            for name in order:
                samples[name].append(_timer(calls[name], per_sample))
    ratios = [o / f for o, f in zip(samples["original"], samples["folded"])]
    median, low, high, verdict = paired_ratio(ratios, seed)
    so, sf = samples["original"], samples["folded"]
    return BenchResult(original_ms=_quantile(so, 0.5), folded_ms=_quantile(sf, 0.5),
                       original_spread=(_quantile(so, 0.1), _quantile(so, 0.9)),
                       folded_spread=(_quantile(sf, 0.1), _quantile(sf, 0.9)),
                       speedup=median, speedup_low=low, speedup_high=high, verdict=verdict, rounds=rounds,
                       calls_per_sample=per_sample, compiled=compiled, threads=torch.get_num_threads(),
                       original_samples=so, folded_samples=sf)
