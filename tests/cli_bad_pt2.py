"""Every command that takes a model, given a .pt2 it cannot read: one clear line, a non-zero exit.

Usage: cli_bad_pt2.py --foldnorm BIN --out DIR [--gui BIN]

Issue 17 part 6 (bad .pt2 input gets one clear line) across analyze, render, fold, bench,
inspect and the GUI (opened headless under xvfb-run, when --gui is given and xvfb-run exists).
The bad files, each made here from a small real export (torch.export.save) or from nothing:
  empty        a 0-byte file                     directory   a folder named x.pt2
  text         a text file                       renamed-pt  a TorchScript .pt renamed .pt2
  no-program   a zip without models/model.json   legacy      the pre-2.8 layout
  too-new      export schema major 9             truncated   the real export cut in half
  unknown-op   the real export with its first linear renamed to an op no library registers
  bad-json     the real export with models/model.json cut mid-way (a valid zip)
Each run must exit 1 or 2 with exactly one `<tool>: error:` line on stderr and nothing else but
progress ("[foldnorm] ..."), write no output (the -o file, no temporary beside it) and leave the
input as it was. A command that ran (exit 0) on a bad file, crashed, or said several lines fails
the test, with one exception: an op without a schema is imported as an op the analysis has no
rule for (it breaks, and is named), so on unknown-op inspect, analyze, render and the GUI may
answer, when their output names the op (render: in the image written; the GUI: it opened). The intact export must pass every command (so a refusal here means the file, not the
command line). Prints one line per run; exits 1 on any failure.
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
UNKNOWN_OP = "no_such_op_foldnorm"


def make_export(path):
    """A small model with two LayerNorms (one foldable), exported and saved by torch itself."""
    import torch
    import torch.nn as nn

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.ln = nn.LayerNorm(8)
            self.head = nn.Linear(8, 5)

        def forward(self, x):
            return self.head(self.ln(self.fc(x)))

    torch.manual_seed(0)
    model = Tiny().eval()
    x = torch.randn(3, 6, 8)
    with torch.no_grad():
        program = torch.export.export(model, (x,), strict=False)
        torch.export.save(program, path)
        loaded = torch.export.load(path).module()
        if torch.equal(loaded(x), loaded(torch.randn(3, 6, 8))):
            raise SystemExit("the fixture export does not read its input")


def rewrite(src, dst, edit):
    """dst: src with each record's bytes passed through edit(name, data) (None keeps them)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            new = edit(info.filename, data)
            zout.writestr(info.filename, data if new is None else new)


def zip_of(path, records):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in records.items():
            z.writestr(name, data)


def make_bad_files(out, real, torchscript):
    bad = {}
    bad["empty"] = os.path.join(out, "empty.pt2")
    open(bad["empty"], "wb").close()
    bad["directory"] = os.path.join(out, "directory.pt2")
    os.makedirs(bad["directory"], exist_ok=True)
    bad["text"] = os.path.join(out, "text.pt2")
    with open(bad["text"], "w") as f:
        f.write("hello, not a model\n")
    if torchscript:
        bad["renamed-pt"] = os.path.join(out, "renamed.pt2")
        shutil.copy(torchscript, bad["renamed-pt"])
    bad["no-program"] = os.path.join(out, "no_program.pt2")
    zip_of(bad["no-program"], {"no_program/readme.txt": "hello", "no_program/.data/version": "6\n"})
    bad["legacy"] = os.path.join(out, "legacy.pt2")
    zip_of(bad["legacy"], {"legacy/serialized_exported_program.json": "{}", "legacy/version": "8.7",
                           "legacy/.data/version": "6\n"})

    def schema9(name, data):
        if name.endswith("models/model.json"):
            return data.replace(b'"major": 8', b'"major": 9').replace(b'"major":8', b'"major":9')
        return None

    bad["too-new"] = os.path.join(out, "too_new.pt2")
    rewrite(real, bad["too-new"], schema9)
    blob = open(real, "rb").read()
    bad["truncated"] = os.path.join(out, "truncated.pt2")
    with open(bad["truncated"], "wb") as f:
        f.write(blob[:len(blob) // 2])

    def unknown_op(name, data):
        if name.endswith("models/model.json"):
            text = data.decode()
            target = "torch.ops.aten.linear.default"  # the first: fc, a leaf of the LN
            if target not in text:
                raise SystemExit("the fixture export has no linear")
            return text.replace(target, "torch.ops.aten." + UNKNOWN_OP + ".default", 1).encode()
        return None

    bad["unknown-op"] = os.path.join(out, "unknown_op.pt2")
    rewrite(real, bad["unknown-op"], unknown_op)
    bad["bad-json"] = os.path.join(out, "bad_json.pt2")
    rewrite(real, bad["bad-json"], lambda n, d: d[:len(d) // 2] if n.endswith("models/model.json") else None)
    return bad


def digest(path):
    if os.path.isdir(path):
        return "directory"
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def commands(foldnorm, gui, model, scratch):
    out = {
        "inspect": [foldnorm, "inspect", model],
        "analyze": [foldnorm, "analyze", model],
        "render": [foldnorm, "render", model, "-o", os.path.join(scratch, "out.svg")],
        "fold": [foldnorm, "fold", model, "-o", os.path.join(scratch, "out.pt2")],
        "bench": [foldnorm, "bench", model, "--reps", "2", "--warmup", "2", "--threads", "1"],
    }
    xvfb = shutil.which("xvfb-run")
    if gui and xvfb:
        out["gui"] = [xvfb, "-a", "-s", "-screen 0 1280x800x24", gui, model, "--screenshot",
                      os.path.join(scratch, "out.png"), "--timeout", "120"]
    return out


def judge(name, argv, model, expect_ok, scratch, named=None):
    """named: an op whose name, in the output (stdout, or the file render wrote), makes exit 0 right."""
    before = digest(model)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        run = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=600, env=env)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    tool = "foldnorm-gui" if name == "gui" else "foldnorm"
    lines = [l for l in run.stderr.splitlines() if l.strip() and not l.startswith("[foldnorm] ")
             and not l.startswith("[bench] ")]
    errors = [l for l in lines if l.startswith(tool + ": error: ")]
    left = os.listdir(scratch)
    shown = run.stdout
    if "out.svg" in left:
        with open(os.path.join(scratch, "out.svg"), errors="replace") as f:
            shown += f.read()
    for f in left:
        os.remove(os.path.join(scratch, f))
    # The GUI saves its screenshot (of the error) before it exits: that is no model output.
    written = [f for f in left if f != "out.png"]
    if digest(model) != before:
        return False, "the input changed"
    if expect_ok:
        ok = run.returncode == 0
        return ok, "ran" if ok else f"exit {run.returncode}: {' | '.join(lines[:3])}"
    if run.returncode < 0:
        return False, f"killed by signal {-run.returncode}"
    if named and run.returncode == 0 and (name == "gui" or named in shown):
        return True, f"answered, naming {named}" if name != "gui" else "opened it"
    if run.returncode not in (1, 2):
        return False, f"exit {run.returncode}: {' | '.join(lines[:3])}"
    if len(errors) != 1 or len(lines) != 1:
        return False, f"{len(lines)} lines on stderr: {' | '.join(lines[:4])}"
    if written:
        return False, f"left {written} behind"
    return True, errors[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--foldnorm", required=True)
    ap.add_argument("--gui")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    scratch = os.path.join(args.out, "scratch")
    os.makedirs(scratch)
    real = os.path.join(args.out, "tiny.pt2")
    make_export(real)
    torchscript = os.path.join(args.out, "gpt2.pt")
    subprocess.run([args.foldnorm, "zoo", "gpt2", "--preset", "tiny", "-o", torchscript], check=True,
                   capture_output=True)
    failures = 0
    for name, argv in commands(args.foldnorm, args.gui, real, scratch).items():
        ok, what = judge(name, argv, real, True, scratch)
        print(f"{'ok ' if ok else 'BAD'} intact export, {name}: {what}", flush=True)
        failures += not ok
    # The intact export folded under another ending: refused before any fold work.
    argv = [args.foldnorm, "fold", real, "-o", os.path.join(scratch, "out.pt")]
    ok, what = judge("fold", argv, real, False, scratch)
    print(f"{'ok ' if ok else 'BAD'} intact export folded into a .pt: {what}", flush=True)
    failures += not ok
    for kind, path in make_bad_files(args.out, real, torchscript).items():
        for name, argv in commands(args.foldnorm, args.gui, path, scratch).items():
            named = UNKNOWN_OP if kind == "unknown-op" and name in ("inspect", "analyze", "render", "gui") else None
            ok, what = judge(name, argv, path, False, scratch, named)
            print(f"{'ok ' if ok else 'BAD'} {kind}, {name}: {what}", flush=True)
            failures += not ok
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
