#!/usr/bin/env python3
"""Corrupted copies of a real model, each analysed by `foldnorm analyze` in a child process.

Issue 13 ("Corrupted archives"): no file may crash the tool; every corrupted copy gives one clear
error line (exit 1 or 2, as for any bad input) or an answer. Run from the repository root:

    python3 analyses/corrupt_archives.py --foldnorm build/bin/foldnorm --n 1000 --seed 0 \\
        --out docs/robustness.md

The model is the zoo GPT-2 (tiny preset, `foldnorm zoo gpt2 --preset tiny -o`). Each copy gets one
corruption, the kinds in turn:
  flip       1-8 bytes anywhere XOR-ed with a random non-zero byte
  truncate   the file cut at a random length
  code       1-4 bytes overwritten inside one code/ entry         (zip CRCs fixed: a valid zip)
  debug      1-4 bytes overwritten inside one .debug_pkl entry    (zip CRCs fixed)
  data       1-4 bytes overwritten inside data.pkl or constants.pkl (zip CRCs fixed)
Outcomes: "same answer" (exit 0, the intact model's verdicts), "other answer" (exit 0, other
verdicts: the edit made another valid model), "refused" (exit 1/2, exactly one
`foldnorm: error:` line and nothing but progress besides), "unclear" (refused otherwise: no
message, several, or a stack), "crash" (killed by a signal), "timeout". Exits 1 when any copy
crashed, timed out or was unclear. Python's standard library only.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import zipfile
import zlib

KINDS = ["flip", "truncate", "code", "debug", "data"]


def entries(archive: bytes, path: str):
    """(name, data offset, size, local header offset, central-directory CRC offset) per stored entry."""
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        start_dir = zf.start_dir
    central = {}
    pos = start_dir
    while archive[pos:pos + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", archive, pos + 28)
        name = archive[pos + 46:pos + 46 + name_len].decode("utf-8", "replace")
        central[name] = pos + 16
        pos += 46 + name_len + extra_len + comment_len
    out = []
    for info in infos:
        local = info.header_offset
        name_len, extra_len = struct.unpack_from("<HH", archive, local + 26)
        data = local + 30 + name_len + extra_len
        if info.compress_type == zipfile.ZIP_STORED and info.filename in central:
            out.append((info.filename, data, info.file_size, local, central[info.filename]))
    return out


def edit_entry(archive: bytearray, entry, rng: random.Random):
    name, data, size, local, central = entry
    n = rng.randint(1, 4)
    for _ in range(n):
        if size:
            archive[data + rng.randrange(size)] = rng.randrange(256)
    crc = zlib.crc32(bytes(archive[data:data + size])) & 0xFFFFFFFF
    struct.pack_into("<I", archive, local + 14, crc)  # local header and central directory agree,
    struct.pack_into("<I", archive, central, crc)     # so the zip stays valid
    return f"{n} byte(s) in {name.split('/', 1)[-1]}"


def corrupt(original: bytes, table, kind: str, rng: random.Random):
    archive = bytearray(original)
    if kind == "flip":
        n = rng.randint(1, 8)
        for _ in range(n):
            archive[rng.randrange(len(archive))] ^= rng.randint(1, 255)
        return bytes(archive), f"{n} byte(s) flipped"
    if kind == "truncate":
        cut = rng.randrange(len(archive))
        return bytes(archive[:cut]), f"cut at {cut} of {len(archive)} bytes"
    wanted = {"code": lambda n: "/code/" in n and n.endswith(".py"),
              "debug": lambda n: n.endswith(".debug_pkl"),
              "data": lambda n: n.endswith("/data.pkl") or n.endswith("/constants.pkl")}[kind]
    candidates = [e for e in table if wanted(e[0])]
    what = edit_entry(archive, rng.choice(candidates), rng)
    return bytes(archive), what


def verdicts(stdout: str):
    report = json.loads(stdout)
    return sorted((ln.get("module"), ln.get("foldable")) for ln in report.get("layer_norms", []))


def classify(foldnorm, path, timeout, reference):
    try:
        run = subprocess.run([foldnorm, "analyze", path, "--json"], capture_output=True, text=True,
                             timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired:
        return "timeout", ""
    if run.returncode < 0:
        return "crash", f"signal {-run.returncode}"
    lines = [l for l in run.stderr.splitlines() if l.strip() and not l.startswith("[foldnorm] ")]
    if run.returncode == 0:
        try:
            same = verdicts(run.stdout) == reference
        except (ValueError, AttributeError):
            return "unclear", "exit 0 without a JSON report"
        return ("same answer" if same else "other answer"), ""
    errors = [l for l in lines if l.startswith("foldnorm: error: ") and l[len("foldnorm: error: "):].strip()]
    if run.returncode in (1, 2) and len(errors) == 1 and len(lines) == 1:
        return "refused", errors[0][len("foldnorm: error: "):]
    return "unclear", f"exit {run.returncode}: " + " | ".join(lines[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--foldnorm", required=True, help="the foldnorm binary")
    ap.add_argument("--n", type=int, default=1000, help="corrupted copies (default 1000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="copies analysed at once")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per analysis")
    ap.add_argument("--out", help="write the result table (Markdown) here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="corrupt-archives-") as scratch:
        model = os.path.join(scratch, "gpt2_tiny.pt")
        subprocess.run([args.foldnorm, "zoo", "gpt2", "--preset", "tiny", "-o", model], check=True,
                       capture_output=True)
        original = open(model, "rb").read()
        table = entries(original, model)
        intact = subprocess.run([args.foldnorm, "analyze", model, "--json"], capture_output=True, text=True,
                                check=True)
        reference = verdicts(intact.stdout)
        rng = random.Random(args.seed)
        jobs = []
        for i in range(args.n):
            kind = KINDS[i % len(KINDS)]
            data, what = corrupt(original, table, kind, rng)
            path = os.path.join(scratch, f"copy_{i:05d}.pt")
            with open(path, "wb") as f:
                f.write(data)
            jobs.append((i, kind, what, path))
        tally = collections.Counter()
        bad, messages = [], collections.Counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {pool.submit(classify, args.foldnorm, p, args.timeout, reference): (i, k, w)
                       for i, k, w, p in jobs}
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                i, kind, what = futures[future]
                outcome, detail = future.result()
                tally[(kind, outcome)] += 1
                if outcome == "refused":  # grouped by their words, quoted paths and names left out
                    messages[re.sub(r"'[^']*'", "'...'", detail)[:70]] += 1
                if outcome in ("crash", "timeout", "unclear"):
                    bad.append(f"copy {i} ({kind}: {what}): {outcome} {detail}")
                if done % 50 == 0 or done == len(jobs):
                    print(f"[corrupt] {done}/{len(jobs)} analysed, {len(bad)} bad", file=sys.stderr, flush=True)

    outcomes = ["same answer", "other answer", "refused", "unclear", "crash", "timeout"]
    lines = [f"| kind | copies | " + " | ".join(outcomes) + " |", "|---|---|" + "---|" * len(outcomes)]
    for kind in KINDS + ["all"]:
        row = [sum(v for (k, o), v in tally.items() if o == out and kind in (k, "all")) for out in outcomes]
        lines.append(f"| {kind} | {sum(row)} | " + " | ".join(str(v) for v in row) + " |")
    table_md = "\n".join(lines)
    print(table_md)
    for b in bad:
        print(b)
    if args.out:
        command = (f"python3 analyses/corrupt_archives.py --foldnorm build/bin/foldnorm --n {args.n} "
                   f"--seed {args.seed} --out {args.out}")
        common = "\n".join(f"| {n} | {m} |" for m, n in messages.most_common(12))
        text = (f"# Robustness: corrupted archives\n\nGenerated by `analyses/corrupt_archives.py`; do not edit by "
                f"hand. Regenerate with\n\n```\n{command}\n```\n\n{__doc__.split(chr(10) + chr(10), 3)[3]}\n"
                f"## Result ({args.n} copies, seed {args.seed})\n\n{table_md}\n\n"
                f"Copies that crashed, timed out or were refused unclearly: {len(bad)}.\n"
                + "".join(f"- {b}\n" for b in bad)
                + f"\n## The most common refusals\n\n| copies | message (start) |\n|---|---|\n{common}\n")
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, args.out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
