#!/usr/bin/env bash
# The quiet-machine CPU measurement of issue 16 (docs/kernels.md, docs/e2e-cpu.md): run it when
# nothing else runs on the box (the dev machine's 2 cores are shared; a loaded run measures the
# load). About 20-25 minutes at full size on the 2-core Zen 4 dev machine.
#
#   scripts/quiet-bench.sh OUTDIR [--tiny] [--build DIR]
#
# OUTDIR must not exist or be empty (results are never overwritten). It gets:
#   machine.txt                 date, CPU, load before and after every step, the commit
#   commands.txt                every command as run (paste them into the docs with the numbers)
#   bench-norm.{json,txt}       foldnorm bench-norm, float32/bfloat16/float16 x hidden 768/4096/8192,
#                               8192 rows, 41 rounds, 2 threads, the library's CPU kernels: our
#                               RMSNorm vs copy bandwidth and the fused add_rms_norm vs its unfused
#                               pairs (every table has both)
#   bench-norm-avx2.{json,txt}  the same with our kernels forced to AVX2 (an AVX2-only CPU's path)
#   bench-norm-1thread.{json,txt}  the 16-bit rows on one thread (is it memory or the core?)
#                               (.json: the run; .txt: its BW/copy and fused speed-ups per case)
#   e2e-cpu.md, e2e_cpu.dat     e2e_speed --fuse on: GPT-2 small, BERT base, OPT-125m at the
#                               lengths and rounds docs/e2e-cpu.md uses (its regeneration command,
#                               with the null-fold control, 2 parameter layouts, huge pages; ~9 min)
#   summary.txt                 each step's outcome and time
# --tiny runs every step at toy sizes (a check of the script, not a measurement).
# --build DIR: the build with bin/foldnorm and bin/e2e_speed (default $FOLDNORM_BUILD or ./build).
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${FOLDNORM_BUILD:-$repo/build}
tiny=0
out=

die() { echo "quiet-bench: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case $1 in
    --tiny) tiny=1; shift ;;
    --build) [[ $# -ge 2 ]] || die "--build needs a folder"; build=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [[ -z $out ]] || die "one output folder only (got $out and $1)"; out=$1; shift ;;
  esac
done
[[ -n $out ]] || die "give the output folder: scripts/quiet-bench.sh OUTDIR [--tiny] [--build DIR]"
if [[ -e $out ]]; then
  [[ -d $out ]] || die "$out exists and is not a folder"
  [[ -z $(ls -A "$out") ]] || die "$out is not empty: results are never overwritten, give a new folder"
fi
foldnorm=$build/bin/foldnorm
e2e=$build/bin/e2e_speed
for b in "$foldnorm" "$e2e"; do
  [[ -x $b ]] || die "$b not found: cmake --build $build --target foldnorm e2e_speed"
done
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)

summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "avx512: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null) ($(git -C "$repo" status --porcelain 2>/dev/null | wc -l) changed files)"
  echo "build: $build"
  (( tiny )) && echo "TINY: toy sizes, not a measurement"
} >"$out/machine.txt"
cat "$out/machine.txt"

# step NAME TIMEOUT CMD...: stdout to NAME.out, stderr (progress) to NAME.log, the command to
# commands.txt, the load average before and after to machine.txt.
step() {
  local name=$1 limit=$2
  shift 2
  echo "$*" >>"$out/commands.txt"
  echo "$name: load before $(load)" >>"$out/machine.txt"
  local t0 rc=0
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.out" 2>"$out/$name.log" || rc=$?
  local took=$(( $(date +%s) - t0 ))
  echo "$name: load after $(load), ${took} s" >>"$out/machine.txt"
  case $rc in
    0) note "[ok]   $name (${took} s)" ;;
    124|137) note "[TIME] $name: stopped after ${limit} s (log: $name.log)" ;;
    *) note "[FAIL] $name: exit $rc after ${took} s (log: $name.log)"; tail -n 3 "$out/$name.log" | tee -a "$summary" ;;
  esac
  return $rc
}

if (( tiny )); then
  dtypes=float32,bfloat16; hidden=64,100; rows=64; reps=3; warmup=1
  models=gpt2:tiny,bert:tiny,opt:tiny; seqs=16; e2e_warmup=2; e2e_reps=2; e2e_seconds=0; e2e_layouts=2
else
  dtypes=float32,bfloat16,float16; hidden=768,4096,8192; rows=8192; reps=41; warmup=3
  # docs/e2e-cpu.md's regeneration command: 2 threads, 3 warm-up, at least 24 rounds and 25 s of
  # rounds per length over 2 parameter layouts, weights on transparent huge pages, each round also
  # timing a second load of the original (null fold), paired ratios with a bootstrap interval over
  # layouts and rounds, seq 32,128,512, fused fold. About 9 minutes on the quiet 2-core machine.
  models=gpt2:small,bert:base,opt:125m; seqs=32,128,512; e2e_warmup=3; e2e_reps=24; e2e_seconds=25; e2e_layouts=2
fi
norm_args=(bench-norm --device cpu --threads 2 --dtype "$dtypes" --hidden "$hidden" --rows "$rows"
           --warmup "$warmup" --json)

# (a) the kernels: our RMSNorm against copy bandwidth, the fused add + RMSNorm against the pairs.
step bench-norm 300 "$foldnorm" "${norm_args[@]}" --reps "$reps"
if grep -qw avx512f /proc/cpuinfo; then
  # The AVX2 kernels on the same cores: what an AVX2-only CPU runs.
  step bench-norm-avx2 240 "$foldnorm" "${norm_args[@]}" --reps $(( tiny ? 3 : 21 )) --cpu-isa avx2
else
  note "[skip] bench-norm-avx2: this CPU has no AVX-512, so bench-norm already ran the AVX2 kernels"
fi
step bench-norm-1thread 180 "$foldnorm" bench-norm --device cpu --threads 1 \
  --dtype "$( (( tiny )) && echo bfloat16 || echo bfloat16,float16)" --hidden "$hidden" --rows "$rows" \
  --warmup "$warmup" --reps $(( tiny ? 3 : 21 )) --json

# (b) the models end to end: original vs folded + fused (the issue's claim), paired rounds.
step e2e 900 "$e2e" --device cpu --dtype float32 --threads 2 --fuse on --models "$models" \
  --seq "$seqs" --huge-pages on --null-control on --layouts "$e2e_layouts" --warmup "$e2e_warmup" --reps "$e2e_reps" \
  --case-seconds "$e2e_seconds" \
  --out "$out/e2e-cpu.md" --data "$out/e2e_cpu.dat"

# The bench-norm JSON as tables: the two figures the issue asks for, per case.
for name in bench-norm bench-norm-avx2 bench-norm-1thread; do
  [[ -s $out/$name.out ]] || continue
  mv "$out/$name.out" "$out/$name.json"
  python3 - "$out/$name.json" >"$out/$name.txt" <<'EOF' || note "[FAIL] table of $name"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"device {r['device']}, {r['threads']} threads, CPU kernels {r['cpu_kernel_isa']}, "
      f"{r['reps']} rounds after {r['warmup']} warm-up")
print(f"{'dtype':<9} {'rows x hidden':>14} {'rms BW/copy':>12} {'fused x add+ours':>17} {'fused x add+aten LN':>20}")
for c in r["cases"]:
    rms = next(v for v in c["variants"] if v["name"] == "foldnorm::rms_norm")
    print(f"{c['dtype']:<9} {str(c['rows']) + ' x ' + str(c['hidden']):>14} {rms['bandwidth_vs_copy']:>12.2f} "
          f"{c['fused_speedup_vs_aten_add_rms_norm']:>16.2f}x {c['fused_speedup_vs_aten_add_layer_norm']:>19.2f}x")
EOF
done
[[ -s $out/e2e.out ]] || rm -f "$out/e2e.out"

note "done; results in $out"
grep -q '^\[FAIL\]\|^\[TIME\]' "$summary" && exit 1
exit 0
