"""Portable output: a fold written with aten::rms_norm (plus a bias add) runs in a plain Python
that never loads foldnorm (no package import, no torch.ops.load_library), and matches the original.

Usage: test_package_portable.py [FOLDNORM_CLI] [test_name...]  (with the CLI, `foldnorm fold
--rms-op aten` is checked the same way.)
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from package_common import Logits, Skip, ids, max_rel, run, tiny_gpt2  # noqa: E402

import torch  # noqa: E402

import foldnorm  # noqa: E402

CLI = next((a for a in sys.argv[1:] if not a.startswith("test_")), None)

# Runs in a fresh interpreter without PYTHONPATH: only torch is importable from the venv.
PLAIN = r"""
import sys, torch
model_path, data_path = sys.argv[1], sys.argv[2]
data = torch.load(data_path)
m = torch.jit.load(model_path)
with torch.no_grad():
    out = m(*data["inputs"])
out = out[0] if isinstance(out, tuple) else out
err = float((out.double() - data["expected"].double()).abs().max() / data["expected"].double().abs().max())
assert "foldnorm" not in sys.modules, "foldnorm was imported"
try:
    torch.ops.foldnorm.rms_norm
    loaded = True
except (AttributeError, RuntimeError):
    loaded = False
assert not loaded, "foldnorm's op library is loaded"
print(err)
"""


def _run_plain(model_path, inputs, expected):
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "data.pt")
        torch.save({"inputs": list(inputs), "expected": expected}, data)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD")}
        r = subprocess.run([sys.executable, "-c", PLAIN, model_path, data], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return float(r.stdout.strip().splitlines()[-1])


def _portable_graph(path):
    graph = str(torch.jit.load(path).graph)
    assert "aten::rms_norm" in graph and "foldnorm::" not in graph and "aten::layer_norm" not in graph
    return graph


def test_python_fold_aten_runs_without_foldnorm():
    model = tiny_gpt2()
    x = ids()
    with torch.no_grad():
        expected = model(x).logits
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "folded-aten.pt")
        folded = foldnorm.fold_traced(model, {"input_ids": x}, out=out, rms_op="aten")
        assert folded.foldnorm_report["verification"]["float64_equivalent"]
        graph = _portable_graph(out)
        assert "aten::add" in graph  # GPT-2's LNs have biases: aten::rms_norm has no bias argument
        assert _run_plain(out, (x,), expected) < 1e-4
        other = ids(seed=9)
        with torch.no_grad():
            assert max_rel(model(other).logits, folded(other)[0]) < 1e-4
            assert max_rel(folded(x)[0], folded(other)[0]) > 1e-3  # the output depends on the input


def test_default_op_is_ours_and_bad_op_is_refused():
    model = tiny_gpt2()
    x = ids()
    folded = foldnorm.fold_traced(model, {"input_ids": x})
    assert "foldnorm::rms_norm" in str(folded.graph)
    try:
        foldnorm.fold_traced(model, {"input_ids": x}, rms_op="triton")
        raise AssertionError("rms_op='triton' was accepted")
    except foldnorm.FoldnormError as e:
        assert "rms_op" in str(e) and "triton" in str(e), str(e)


def test_cli_rms_op_aten():
    if not CLI:
        raise Skip("no CLI path given")
    model = tiny_gpt2()
    x = ids()
    with torch.no_grad():
        expected = model(x).logits
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "gpt2.pt"), os.path.join(d, "folded.pt")
        torch.jit.trace(Logits(model), (x,), check_trace=False).save(src)
        spec = f"{x.shape[0]}x{x.shape[1]}:int64[{int(x.min())},{int(x.max()) + 1})"
        r = subprocess.run([CLI, "fold", src, "-o", out, "--input", spec, "--rms-op", "aten"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        _portable_graph(out)
        assert _run_plain(out, (x,), expected) < 1e-4
        bad = subprocess.run([CLI, "fold", src, "-o", out + "2", "--input", spec, "--rms-op", "triton"],
                             capture_output=True, text=True)
        assert bad.returncode != 0 and "--rms-op" in bad.stderr and not os.path.exists(out + "2")


if __name__ == "__main__":
    run(globals())
