"""Exports the GUI tests' torch.export programs (.pt2): usage make_pt2.py OUT_DIR.

Two hand-written models of tests/fixtures (the fixture oracle checked their verdicts on the traced
twins), exported with torch.export and saved with torch.export.save, with a dynamic batch:
  preln_lm.pt2    edge_models.PreLnLM: emb + position table -> 2 pre-LN blocks -> ln_f -> head
                  (every LN folds under the paper's rules; blocks to collapse at first sight)
  layerscale.pt2  edge_beyond_paper.layerscale_lm: the same with LayerScale after each branch
                  (every LN folds only with scale absorption on)
Each program must answer a second input differently (the tests look at a model that reads its
input), and load back with torch.export.load.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tests", "fixtures")]


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: make_pt2.py OUT_DIR", file=sys.stderr)
        return 2
    out = sys.argv[1]
    import torch
    import edge_beyond_paper
    import edge_models

    os.makedirs(out, exist_ok=True)
    builders = {
        "preln_lm": lambda: edge_models.PreLnLM(return_hidden=False),
        "layerscale": lambda: edge_beyond_paper.layerscale_lm(False),
    }
    vocab, seq, batch = edge_models.VOCAB, edge_models.SEQ, edge_models.BATCH
    for name, build in builders.items():
        torch.manual_seed(0)
        model = build().eval()
        gen = torch.Generator().manual_seed(1)
        first = torch.randint(0, vocab, (batch, seq), generator=gen)
        second = torch.randint(0, vocab, (batch, seq), generator=gen)
        dims = {"ids": {0: torch.export.Dim("batch", min=1, max=16)}}
        with torch.no_grad():
            program = torch.export.export(model, (first,), dynamic_shapes=dims, strict=False)
        path = os.path.join(out, name + ".pt2")
        tmp = os.path.join(out, name + ".tmp.pt2")  # torch.export.save wants the .pt2 ending
        torch.export.save(program, tmp)
        loaded = torch.export.load(tmp).module()
        with torch.no_grad():
            a, b = loaded(first), loaded(second)
            if not torch.allclose(a, model(first), rtol=1e-5, atol=1e-6):
                print(f"make_pt2.py: {name}: the loaded program differs from the model", file=sys.stderr)
                return 1
        if torch.equal(a, b):
            print(f"make_pt2.py: {name} gives the same outputs for two inputs", file=sys.stderr)
            return 1
        os.replace(tmp, path)
        print(f"make_pt2.py: {name} exported to {path} ({len(program.graph.nodes)} FX nodes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
