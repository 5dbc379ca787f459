"""fold-checkpoint (issue 29): a plan made on a small capture, applied to a sharded safetensors
checkpoint tensor by tensor, loaded back with foldnorm.load_folded.

Usage: test_package_checkpoint.py FOLDNORM_CLI [test_name...]. Models are tiny random OPT and
BLOOM models saved sharded; the dry runs use the real OPT-66B, BLOOM-176B and Falcon-40B
configurations (checkpoint_configs/) as weightless sparse checkpoints.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from package_common import Skip, run  # noqa: E402
import checkpoint_common as cc  # noqa: E402

import torch  # noqa: E402

import foldnorm  # noqa: E402
from foldnorm import checkpoint as ck  # noqa: E402

CLI = next((a for a in sys.argv[1:] if not a.startswith("test_")), None)
HERE = os.path.dirname(os.path.abspath(__file__))
IDS = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))


def _logits(model, dtype=torch.float64):
    with torch.no_grad():
        return model.to(dtype)(IDS).logits


def _rel(a, b):
    return float((a.double() - b.double()).abs().max() / a.double().abs().max())


def _cli(*args, **kw):
    if CLI is None:
        raise Skip("no foldnorm CLI given")
    return subprocess.run([CLI, *args], capture_output=True, text=True, **kw)


def _round_trip(make, dtype, tol):
    """Save ``make()`` in ``dtype``, fold it, load it back, compare in float64 with the original."""
    tf = cc.transformers()
    with tempfile.TemporaryDirectory() as d:
        src, out = cc.save(make(), os.path.join(d, "src"), dtype), os.path.join(d, "out")
        before = cc.folder_hashes(src)
        result = foldnorm.fold_checkpoint(src, out, progress=False)
        assert cc.folder_hashes(src) == before, "the input changed"
        assert result["centered"] and result["rms_norms"], result
        original = getattr(tf, result["architecture"]).from_pretrained(src, dtype=torch.float64).eval()
        folded = foldnorm.load_folded(out, dtype=torch.float64)
        swapped = [n for n, m in folded.named_modules() if isinstance(m, foldnorm.RMSNorm)]
        assert sorted(swapped) == sorted(result["rms_norms"]), (swapped, result["rms_norms"])
        err = _rel(_logits(original), _logits(folded))
        assert err <= tol, f"{dtype}: relative error {err:.3e} > {tol:.0e}"
        _check_tensors(src, out, result, dtype)
        return result, err


def _check_tensors(src, out, result, dtype):
    """Every centered tensor is torch's float64 centering of the original rounded to its dtype
    (bit for bit), its sums along the axis are ~0 in float64, and everything else is unchanged."""
    from safetensors.torch import load_file
    def load(folder):
        t = {}
        for f in sorted(os.listdir(folder)):
            if f.endswith(".safetensors"):
                t.update(load_file(os.path.join(folder, f)))
        return t
    a, b = load(src), load(out)
    centered = {c["name"]: c["center"] for c in result["centered"]}
    u = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8}[dtype]
    for name, t in a.items():
        if name not in centered:
            assert torch.equal(t, b[name]), f"{name} changed but is not planned"
            continue
        x = t.double()
        for c in centered[name]:
            x = ck_center(x, c["axis"], c["groups"])
        assert torch.equal(x.to(dtype), b[name]), f"{name} is not the float64 centering rounded to {dtype}"
        y = b[name].double()
        axis = centered[name][-1]["axis"]
        rel = float(y.sum(axis).abs().max() / y.abs().sum(axis).max())
        assert rel <= 2 * u + 1e-13, f"{name}: sums along axis {axis} are {rel:.2e} of the magnitudes"
    for u_ in result["untied"]:
        assert torch.equal(b[u_["name"]], a[u_["copy_of"]]), "the untied head is not the original"


def ck_center(x, axis, groups):
    moved = x.movedim(axis, -1)
    g = moved.reshape(-1, groups, moved.shape[-1] // groups)
    return (g - g.mean(-1, keepdim=True)).reshape(moved.shape).movedim(-1, axis)


def test_opt_float64_round_trip_is_exact():
    result, err = _round_trip(cc.tiny_opt, torch.float64, 1e-12)
    assert result["untied"] == [{"name": "lm_head.weight", "copy_of": "model.decoder.embed_tokens.weight"}], result["untied"]
    print(f"  float64: relative error {err:.2e}, {len(result['centered'])} tensors centered")


def test_opt_float32_round_trip():
    _, err = _round_trip(cc.tiny_opt, torch.float32, 1e-5)
    print(f"  float32: relative error {err:.2e}")


def test_opt_bfloat16_round_trip_within_rounding():
    # The folded weights are the exact centering rounded once to bfloat16 (checked bit for bit):
    # the model's outputs then differ from the original's by that rounding, a few units of 2^-8.
    _, err = _round_trip(cc.tiny_opt, torch.bfloat16, 8 * 2.0 ** -8)
    print(f"  bfloat16: relative error {err:.2e} (unit roundoff {2.0 ** -8:.1e})")


def test_bloom_single_file_round_trip():
    result, err = _round_trip(lambda: cc.tiny_bloom(), torch.float64, 1e-12)
    print(f"  BLOOM float64: relative error {err:.2e}, {len(result['rms_norms'])} LNs to RMSNorm")


def test_plain_from_pretrained_and_use_rms_norms():
    tf = cc.transformers()
    with tempfile.TemporaryDirectory() as d:
        src, out = cc.save(cc.tiny_opt(), os.path.join(d, "src"), torch.float64), os.path.join(d, "out")
        foldnorm.fold_checkpoint(src, out, progress=False)
        plain = tf.OPTForCausalLM.from_pretrained(out).eval()  # exact as it is: LN of a mean-zero input
        assert not plain.config.tie_word_embeddings
        ref = _logits(tf.OPTForCausalLM.from_pretrained(src).eval())
        assert _rel(ref, _logits(plain)) <= 1e-12
        foldnorm.checkpoint.use_rms_norms(plain, out)
        assert any(isinstance(m, foldnorm.RMSNorm) for m in plain.modules())
        assert _rel(ref, _logits(plain)) <= 1e-12


def test_cli_without_plan_writes_what_python_writes():
    with tempfile.TemporaryDirectory() as d:
        src = cc.save(cc.tiny_opt(), os.path.join(d, "src"), torch.float32)
        foldnorm.fold_checkpoint(src, os.path.join(d, "py"), progress=False)
        r = _cli("fold-checkpoint", src, "-o", os.path.join(d, "cli"), "--json")
        assert r.returncode == 0, r.stderr
        assert "small capture" in r.stderr, r.stderr
        a, b = cc.folder_hashes(os.path.join(d, "py")), cc.folder_hashes(os.path.join(d, "cli"))
        a.pop(ck.FOLDED_PLAN_FILE), b.pop(ck.FOLDED_PLAN_FILE)  # they name their source
        assert a == b, "the CLI and Python folds differ"


def _refused(args, *, names, cwd=None):
    r = _cli(*args, cwd=cwd)
    lines = [l for l in r.stderr.splitlines() if not l.startswith("[foldnorm]")]
    assert r.returncode != 0, f"accepted: {args}"
    assert len(lines) == 1 and lines[0].startswith("foldnorm: error: "), r.stderr
    for n in names:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    return lines[0]


def _edit_checkpoint(src, dst, edit):
    """A copy of checkpoint ``src`` (one file) with its tensors changed by ``edit(dict)``."""
    from safetensors.torch import load_file, save_file
    os.makedirs(dst)
    tensors = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(src, f)))
    edit(tensors)
    save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f)


def test_refusals_name_the_tensor_in_one_line():
    with tempfile.TemporaryDirectory() as d:
        src = cc.save(cc.tiny_opt(), os.path.join(d, "src"), torch.float32)
        plan = os.path.join(d, "plan.json")
        with open(plan, "w") as f:
            json.dump(ck.plan_checkpoint(src), f)
        missing, wrong_rank, gap = (os.path.join(d, n) for n in ("missing", "rank", "gap"))
        _edit_checkpoint(src, missing, lambda t: t.pop("model.decoder.layers.2.fc2.weight"))
        _edit_checkpoint(src, wrong_rank, lambda t: t.update({"model.decoder.layers.1.fc2.weight":
                                                              t["model.decoder.layers.1.fc2.weight"].flatten()}))
        _edit_checkpoint(src, gap, lambda t: [t.pop(k) for k in list(t) if k.startswith("model.decoder.layers.3.")])
        for case, names in ((missing, ["model.decoder.layers.2.fc2.weight"]),
                            (wrong_rank, ["model.decoder.layers.1.fc2.weight", "rank 1", "rank 2"]),
                            (gap, ["num_hidden_layers = 4", "model.decoder.layers.0..2"])):
            out = os.path.join(d, "out-" + os.path.basename(case))
            print("  " + _refused(["fold-checkpoint", case, "--plan", plan, "-o", out], names=names))
            assert not os.path.exists(out)
        # A plan step a checkpoint cannot take (a scale absorption) is refused by name.
        with open(plan) as f:
            j = json.load(f)
        j["scale_absorptions"] = [{"description": "absorb h.0.ls1.gamma into h.0.attn.proj"}]
        with open(plan, "w") as f:
            json.dump(j, f)
        print("  " + _refused(["fold-checkpoint", src, "--plan", plan, "-o", os.path.join(d, "o")],
                              names=["absorb h.0.ls1.gamma into h.0.attn.proj"]))
        print("  " + _refused(["fold-checkpoint", src, "-o", src], names=["exists"]))
        print("  " + _refused(["fold-checkpoint", os.path.join(d, "nope"), "-o", os.path.join(d, "o")], names=["nope"]))


def test_layers_that_differ_from_the_small_capture_are_refused():
    entries = {"m.layers.0.fc2.weight": [(0, 1)], "m.layers.1.fc2.weight": [(0, 1)],
               "m.layers.2.fc2.weight": [(0, 1)], "m.layers.1.fc1.weight": [(0, 1)], "m.head": [(1, 1)]}
    try:
        ck.generalize(entries, "m.layers", 3, "centered tensors")
    except foldnorm.FoldnormError as e:
        assert "layer 1 differs from layer 0" in str(e) and "m.layers.1.fc1.weight" in str(e), e
        print(f"  {e}")
    else:
        raise AssertionError("layers that differ were generalized")
    same = {k: v for k, v in entries.items() if "fc1" not in k}
    assert ck.generalize(same, "m.layers", 3, "x") == {"m.layers.{i}.fc2.weight": [(0, 1)], "m.head": [(1, 1)]}


def _synthetic(folder, mb=96, shards=6):
    """A weightless-config checkpoint of ``mb`` MB of float32 tensors, and a plan centering them."""
    from safetensors.torch import save_file
    os.makedirs(folder)
    per = mb // shards
    weight_map, g = {}, torch.Generator().manual_seed(0)
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        t = {f"layers.{s}.w": torch.randn(per * 1024 * 1024 // 4 // 512, 512, generator=g)}
        save_file(t, os.path.join(folder, file), metadata={"format": "pt"})
        weight_map.update({k: file for k in t})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"num_hidden_layers": shards}, f)
    return {"schema": ck.PLAN_SCHEMA, "layers": {"prefix": "layers", "count_key": "num_hidden_layers"},
            "center": [{"pattern": "layers.{i}.w", "rank": 2, "center": [{"axis": 0, "groups": 1}]}]}


def test_interrupted_fold_leaves_nothing_and_the_input_untouched():
    if CLI is None:
        raise Skip("no foldnorm CLI given")
    with tempfile.TemporaryDirectory() as d:
        src, plan = os.path.join(d, "src"), os.path.join(d, "plan.json")
        with open(plan, "w") as f:
            json.dump(_synthetic(src), f)
        before = cc.folder_hashes(src)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
            out = os.path.join(d, f"out-{sig.name}")
            p = subprocess.Popen([CLI, "fold-checkpoint", src, "--plan", plan, "-o", out],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.time() + 30
            while not any(n.startswith(f".out-{sig.name}.foldnorm-partial") for n in os.listdir(d)):
                assert p.poll() is None and time.time() < deadline, "the fold ended before it could be interrupted"
                time.sleep(0.002)
            p.send_signal(sig)
            _, err = p.communicate(timeout=60)
            assert p.returncode != 0, f"{sig.name}: exit 0"
            assert not os.path.exists(out), f"{sig.name}: {out} exists"
            partial = [n for n in os.listdir(d) if ".foldnorm-partial" in n]
            if sig != signal.SIGKILL:  # a killed process cannot clean up: its hidden staging folder stays
                assert not partial, f"{sig.name}: {partial} left"
                assert "interrupted" in err, err
            print(f"  {sig.name}: exit {p.returncode}, no {os.path.basename(out)}, staging left: {partial or 'none'}")
            assert cc.folder_hashes(src) == before, f"{sig.name}: the input changed"
        # And completed, it centers what the plan says.
        r = _cli("fold-checkpoint", src, "--plan", plan, "-o", os.path.join(d, "done"), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["worst_axis_sum_relative"] <= 2 * 2.0 ** -24


def test_dry_run_on_real_configurations():
    # (layers, LNs that become RMSNorm). OPT and Falcon: every LN (2 per layer and the final one).
    # BLOOM: only word_embeddings_layernorm; its output (scaled and shifted) starts the residual
    # stream, which only an inserted centering would make mean-zero again (method.md section 8),
    # and that is not a tensor-by-tensor step, so the layers' LNs stay LayerNorm (listed as kept).
    expected = {"opt-66b": (64, 129), "bloom-176b": (70, 1), "falcon-40b": (60, 121)}
    with tempfile.TemporaryDirectory() as d:
        for name, (layers, norms) in expected.items():
            src = os.path.join(d, name)
            info = cc.weightless_checkpoint(os.path.join(HERE, "checkpoint_configs", f"{name}.json"), src)
            t = time.time()
            r = _cli("fold-checkpoint", src, "--dry-run", "--json")
            assert r.returncode == 0, r.stderr
            j = json.loads(r.stdout)
            assert j["layers"] == layers and j["tensors"] == info["tensors"] and j["bytes"] == info["bytes"], j
            assert len(j["rms_norms"]) == norms, (name, len(j["rms_norms"]), j["kept"][:3])
            assert bool(j["kept"]) == (norms < 2 * layers), (name, j["kept"])  # kept: the plan's patterns
            print(f"  {name}: {info['parameters'] / 1e9:.1f}B parameters, {j['shards']} shards, "
                  f"{len(j['centered'])} tensors to center ({j['centered_bytes'] / 1e9:.1f} GB), "
                  f"{len(j['untied'])} untied, {len(j['rms_norms'])} LNs to RMSNorm, kept {len(j['kept'])}, "
                  f"memory bound {j['memory_bound_bytes'] / 1e9:.2f} GB ({time.time() - t:.1f} s)")


if __name__ == "__main__":
    run(globals())
