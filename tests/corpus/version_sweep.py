#!/usr/bin/env python3
"""The torch-version sweep of docs/held-out.md: the corpus driver in a torch2.X environment over a
wider set than its ctest entries (SWEEP, not only torch_envs.CORPUS_ARCHITECTURES), plus two
RMSNorm-only models the corpus leaves out (T5's encoder, a Llama): they must show 0 LayerNorms.

    version_sweep.py --env torch2.10 --foldnorm build/bin/foldnorm --ops build/lib/libfoldnorm_ops.so \\
        --results /tmp/sweep-results        (then --env torch2.9; --only NAME ... narrows it)

Each architecture gets what a torch-env corpus entry gets (torch_envs.py: trace and export, analyze,
fold, the float64 oracle, both folded files loaded back in that torch and in the venv's); the
results are <results>/<env>/<name>.json and `--table` prints the docs table from them.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SWEEP = ["hf-gpt2", "hf-bert", "hf-opt", "hf-bloom", "hf-vit", "hf-whisper", "hf-bart", "sweep-t5_encoder",
         "sweep-llama", "timm-vit_tiny", "timm-deit3_small", "timm-convnext_atto", "timm-swin_tiny",
         "timm-beit_base", "timm-mixer_s16", "tv-vit_b_16", "tv-swin_t", "tv-convnext"]


def register_extra() -> None:
    """RMSNorm-only models (T5LayerNorm, LlamaRMSNorm: no mean subtracted), built as hf_corpus builds."""
    import hf_corpus
    from corpus_lib import architecture

    @architecture("sweep-t5_encoder", library="transformers", family="RMSNorm only")
    def _t5():
        """T5EncoderModel: T5LayerNorm is an RMSNorm already."""
        return hf_corpus._text("T5EncoderModel", "T5Config",
                               dict(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2), use_cache=False)

    @architecture("sweep-llama", library="transformers", family="RMSNorm only")
    def _llama():
        """LlamaModel: LlamaRMSNorm, rotary positions."""
        return hf_corpus._text("LlamaModel", "LlamaConfig",
                               dict(hf_corpus.WIDTH, max_position_embeddings=64, num_key_value_heads=2,
                                    **hf_corpus.DECODER))


def cell(r: dict, twin: dict) -> str:
    """One architecture in one torch: verdicts vs the 2.11 twin; the worst float32 error of the
    folded .pt and .pt2, each loaded in that torch and in 2.11; worst float64 of foldnorm's check."""
    import build_corpus
    import torch_envs
    if r.get("failures") or torch_envs.missing_checks(r):
        return "**" + ("; ".join(r["failures"]) or torch_envs.missing_checks(r))[:120] + "**"
    e, v = r.get("export", {}), r.get("load_in_venv_torch", {})
    same = "=" if twin is not None and build_corpus.expectation_of(r) == twin else ("?" if twin is None else "**≠**")
    pt = max(r["folded_file"]["float32_relative"], v["pt"])
    if "refused" in e:
        pt2 = "refused"
    else:
        pt2 = f"{max(e['load_back_relative_float32'], v['pt2']):.1e}"
    f64 = max(x for x in (r["tool_fold"]["worst_relative_float64"], e.get("tool_fold", {}).get("worst_relative_float64"))
              if x is not None)
    return f"{same} {pt:.1e} / {pt2} ({f64:.0e})"


def table(results: str) -> None:
    import build_corpus
    import torch_envs
    expectations = build_corpus.load_expectations()
    envs = sorted((e for e in os.listdir(results) if os.path.isdir(os.path.join(results, e))),
                  key=lambda e: [int(x) for x in torch_envs.pins_of(e)["torch"].split(".")])
    print("| architecture | LNs | foldable | " + " | ".join(f"torch {torch_envs.pins_of(e)['torch']}" for e in envs) + " |")
    print("|---|---|---|" + "---|" * len(envs))
    for name in SWEEP:
        runs = {}
        for env in envs:
            path = os.path.join(results, env, name + ".json")
            if os.path.exists(path):
                with open(path) as f:
                    runs[env] = json.load(f)
        if not runs:
            continue
        first = next(r for r in runs.values() if "summary" in r)
        cells = []
        for env in envs:
            # torch 2.5 ran with the old environment's libraries: its twin is env old's trace
            twin = expectations.get("old" if env in torch_envs.WITH_OLD_LIBRARIES else "main", {}).get(name)
            cells.append(cell(runs[env], twin) if env in runs else "-")
        print(f"| {name} | {first['summary']['layer_norms']} | {first['summary']['foldable']} | " + " | ".join(cells) + " |")


def main(argv) -> int:
    if "--table" in argv:
        table(argv[argv.index("--table") + 1])
        return 0
    import build_corpus
    import corpus_lib
    if os.environ.get("FOLDNORM_CORPUS_CHILD"):
        import importlib
        for mod in build_corpus.BUILDER_MODULES:
            importlib.import_module(mod)
        register_extra()
        import torch_envs
        torch_envs.CORPUS_ARCHITECTURES[:] = SWEEP
        if "--only" not in argv:
            argv = argv + ["--only"] + SWEEP
    build_corpus.__file__ = os.path.abspath(__file__)  # the child is this script again
    return build_corpus.main(argv)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.exit(main(sys.argv[1:]))
