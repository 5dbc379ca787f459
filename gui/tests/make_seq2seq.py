"""Traces one encoder-decoder of the public-architecture corpus (tests/corpus/hf_corpus.py) for
the GUI's first-sight test: usage make_seq2seq.py NAME OUT.pt (NAME e.g. hf-mbart).

The corpus builds, perturbs and traces its models the same way; this reuses its builder so the
GUI test sees the architecture the corpus checks, without waiting for the whole corpus. The
model must answer a second input differently (the picture is of a model that reads its input).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tests", "corpus"), os.path.join(ROOT, "tests", "fixtures")]


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: make_seq2seq.py NAME OUT.pt", file=sys.stderr)
        return 2
    name, out = sys.argv[1], sys.argv[2]
    import torch
    import corpus_lib
    import hf_corpus  # noqa: F401  (registers the transformers architectures)
    from fixture_lib import make_inputs, save_traced

    if name not in corpus_lib.REGISTRY:
        print(f"make_seq2seq.py: no corpus architecture {name!r}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    sample = corpus_lib.prepare(corpus_lib.REGISTRY[name].build())
    with torch.no_grad():
        traced = torch.jit.trace(sample.model, tuple(sample.inputs), check_trace=False, strict=False)
        first = corpus_lib.as_tuple(traced(*sample.inputs))
        second = corpus_lib.as_tuple(traced(*make_inputs(sample.specs, seed=1)))
    if all(torch.equal(a, b) for a, b in zip(first, second)):
        print(f"make_seq2seq.py: {name} gives the same outputs for two inputs", file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)  # a fresh build has no gui-test/ yet
    save_traced(out, traced, sample.specs)
    print(f"make_seq2seq.py: {name} traced to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
