#!/usr/bin/env bash
# Same-run A/B of two foldnorm builds' norm kernels: runs `foldnorm bench-norm` with OLD and NEW
# alternately (OLD, NEW, OLD, NEW, ...), so both see the same machine state, then prints per
# (dtype, hidden, variant) the range over the runs of BW/copy and of the median time, old and new
# side by side, for our unfused rms_norm and the fused add_rms_norm (and the copy, whose old and
# new columns should agree: if they do not, the machine changed between runs).
#
#   scripts/ab-bench-norm.sh OLD_BIN NEW_BIN OUTDIR [options]
#
#   --pairs N          alternations (default 3: six bench-norm runs)
#   --dtype LIST       default bfloat16,float16,float32
#   --hidden LIST      default 768,1024,2048,4096,8192
#   --rows N           default 8192
#   --reps N           timed rounds per run (default 21); --warmup N (default 3)
#   --threads N        default 2
#   --cpu-isa ISA      passed to both (auto, avx512, avx2, portable; default auto)
#   --old-lib DIR      LD_LIBRARY_PATH for OLD only (a libfoldnorm_ops.so to A/B under one binary:
#   --new-lib DIR      the binary's RUNPATH yields to LD_LIBRARY_PATH)
#   --tiny             toy sizes: a check of the script, not a measurement
#
# OUTDIR must not exist or be empty. It gets run-K-{old,new}.json (each run's JSON), .log
# (progress), commands.txt, machine.txt (load before each run) and summary.txt (the table).
# At the defaults one bench-norm run took 4.5 minutes on the 2-core dev machine at load 7 (so a
# loaded A/B takes about 27 minutes and times only the load); quiet, expect well under that.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
die() { echo "ab-bench-norm: $*" >&2; exit 2; }

pairs=3 dtype=bfloat16,float16,float32 hidden=768,1024,2048,4096,8192 rows=8192 reps=21 warmup=3
threads=2 isa=auto old_lib= new_lib=
positional=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --pairs|--dtype|--hidden|--rows|--reps|--warmup|--threads|--cpu-isa|--old-lib|--new-lib)
      [[ $# -ge 2 ]] || die "$1 needs a value"
      case $1 in
        --pairs) pairs=$2 ;; --dtype) dtype=$2 ;; --hidden) hidden=$2 ;; --rows) rows=$2 ;;
        --reps) reps=$2 ;; --warmup) warmup=$2 ;; --threads) threads=$2 ;; --cpu-isa) isa=$2 ;;
        --old-lib) old_lib=$2 ;; --new-lib) new_lib=$2 ;;
      esac
      shift 2 ;;
    --tiny) pairs=1 hidden=64,100 rows=64 reps=3 warmup=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) positional+=("$1"); shift ;;
  esac
done
[[ ${#positional[@]} -eq 3 ]] || die "usage: ab-bench-norm.sh OLD_BIN NEW_BIN OUTDIR [options] (see --help)"
old=${positional[0]} new=${positional[1]} out=${positional[2]}
for b in "$old" "$new"; do [[ -x $b ]] || die "$b is not an executable foldnorm"; done
for d in "$old_lib" "$new_lib"; do [[ -z $d || -f $d/libfoldnorm_ops.so ]] || die "$d has no libfoldnorm_ops.so"; done
[[ $pairs =~ ^[1-9][0-9]*$ ]] || die "--pairs must be a positive whole number (got $pairs)"
if [[ -e $out ]]; then
  [[ -d $out ]] || die "$out exists and is not a folder"
  [[ -z $(ls -A "$out") ]] || die "$out is not empty: results are never overwritten, give a new folder"
fi
mkdir -p "$out" || die "cannot create $out"

args=(bench-norm --dtype "$dtype" --hidden "$hidden" --rows "$rows" --threads "$threads"
      --warmup "$warmup" --reps "$reps" --cpu-isa "$isa" --json)
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "old: $old${old_lib:+ (LD_LIBRARY_PATH=$old_lib)}"
  echo "new: $new${new_lib:+ (LD_LIBRARY_PATH=$new_lib)}"
} >"$out/machine.txt"

# run LABEL BIN LIB K
run() {
  local label=$1 bin=$2 lib=$3 k=$4 name="run-$4-$1"
  echo "${lib:+LD_LIBRARY_PATH=$lib }$bin ${args[*]}" >>"$out/commands.txt"
  echo "$name: load before $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
  echo "ab-bench-norm: $name" >&2
  if ! env ${lib:+LD_LIBRARY_PATH=$lib} "$bin" "${args[@]}" >"$out/$name.json" 2>"$out/$name.log"; then
    die "$name failed (see $out/$name.log)"
  fi
}
for ((k = 1; k <= pairs; ++k)); do
  run old "$old" "$old_lib" "$k"
  run new "$new" "$new_lib" "$k"
done
echo "end: load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
python3 "$here/ab_bench_norm_summary.py" "$out" | tee "$out/summary.txt"
