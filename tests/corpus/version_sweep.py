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


def table(results: str) -> None:
    import build_corpus
    main = build_corpus.load_expectations().get("main", {})
    print("| torch | architecture | LNs | foldable (.pt / .pt2) | = 2.11 | .pt2 schema | fold float64 (.pt / .pt2) "
          "| load-back in that torch (.pt / .pt2) | in torch 2.11 (.pt / .pt2) | outcome |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for env in sorted(os.listdir(results)):
        for name in SWEEP:
            path = os.path.join(results, env, name + ".json")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                r = json.load(f)
            e, v = r.get("export", {}), r.get("load_in_venv_torch", {})
            s, es = r.get("summary", {}), e.get("summary", {})

            def g(x, k="{:.1e}"):
                return k.format(x) if isinstance(x, float) else ("-" if x is None else str(x))
            outcome = "; ".join(r["failures"])[:160] if r.get("failures") else "ok, oracle confirmed"
            if "refused" in e:
                outcome += f"; .pt2 refused: {e['refused'][e['refused'].find(' is ') + 1:][:90]}"
            same = "-" if name not in main or "layer_norms" not in r else \
                ("yes" if build_corpus.expectation_of(r) == main[name] else "**no**")
            print(f"| {r['versions']['torch']} | {name} | {s.get('layer_norms', '-')} | "
                  f"{s.get('foldable', '-')} / {es.get('foldable', '-')} | {same} | {e.get('versions', {}).get('schema', '-')} | "
                  f"{g(r.get('tool_fold', {}).get('worst_relative_float64'))} / "
                  f"{g(e.get('tool_fold', {}).get('worst_relative_float64'))} | "
                  f"{g(r.get('folded_file', {}).get('float32_relative'))} / {g(e.get('load_back_relative_float32'))} | "
                  f"{g(v.get('pt'))} / {g(v.get('pt2'))} | {outcome} |")


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
