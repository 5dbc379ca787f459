#!/usr/bin/env bash
# The GPU check (docs/gpu.md): build foldnorm on a machine that has an NVIDIA GPU, PyTorch 2.11,
# CMake and nvcc but no internet and no Debian packages, run the kernel tests, time the kernels
# (bench-norm) and zoo models end to end (bench), and put every result in one folder.
#
#   scripts/gpu-check.sh --vendor DIR
#       On a machine WITH Debian's packages (this project's dev machine): write the header
#       libraries the build needs into DIR (a bcp subset of Boost.Graph, nlohmann-json, CLI11,
#       Catch2 v2 and its CMake scripts, each with its copyright file). Carry DIR to the GPU box.
#   scripts/gpu-check.sh [--vendor-dir DIR] [--vendor-only] [--build DIR] [--budget SECONDS]
#       Build and run. Results go to $OUT if set, else ./gpu-results. DIR defaults to
#       ./build-vendor (ignored by git, so it travels only when carried). --vendor-only ignores
#       system packages even where they exist (to test the carried copies on the dev machine).
#       Without a usable CUDA device the GPU steps are skipped (said in summary.txt) and the
#       CPU parts still run (tiny models: what CI runs, tests/CMakeLists.txt gpu_check_cpu_mode).
#   scripts/gpu-check.sh --reuse-build DIR ...
#       Skip configure and build: run the steps with the binaries already in DIR.
#   scripts/gpu-check.sh --prebuild DIR [--torch VERSION]
#       On the dev machine, before a lent GPU is first called: build the three targets against the
#       GPU box's torch (VERSION, default 2.11.0, in a venv under ~/.cache/foldnorm/torch-envs made
#       here once) with the carried headers only (make them first with --vendor), and put
#       bin/foldnorm, bin/e2e_speed, lib/libfoldnorm_ops.so and a PREBUILT stamp (the torch, a
#       digest of the sources) into DIR (about 26 MB): carried, it saves the box's 4-5 minute build.
#       --from-build BUILD packs BUILD's binaries instead (configured for the torch to match).
#   scripts/gpu-check.sh --prebuilt DIR ...
#       Use DIR's binaries where its stamp matches this machine's torch and these sources and
#       they load here; otherwise say why and build as usual (carry build-vendor as well).
#   scripts/gpu-check.sh --reuse-build DIR --rehearse-cuda
#       On a machine without a GPU: take the CUDA branch anyway, with tiny zoo models, and expect
#       every CUDA step to get past its argument parsing and be refused only for want of a CUDA
#       device ("[ok]   NAME: refused: no CUDA device"); any other failure is a FAIL. So a typo in
#       the steps a lent GPU runs shows here, not on the device (CI: gpu_check_cuda_rehearsal).
#
# Everything is time-boxed: each step gets a timeout and the whole run stops starting steps when
# --budget (default 560 s, for a 10-minute slot with time to copy results back) is spent.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
vendor_dir=$repo/build-vendor
build_dir=$repo/build-gpu
vendor_only=OFF
reuse=0
prebuild=
prebuilt=
prebuild_torch=2.11.0
from_build=
rehearse=0
budget=560
python=${FOLDNORM_PYTHON:-python3}

die() { echo "gpu-check: $*" >&2; exit 2; }

# ---- --vendor DIR: make the carried headers (needs the Debian packages and bcp) ----------------
make_vendor() {
  local dir=$1
  command -v bcp >/dev/null || die "bcp not found: apt-get install libboost-tools-dev (scripts/setup.sh)"
  for f in /usr/include/boost/graph/adjacency_list.hpp /usr/include/nlohmann/json.hpp \
           /usr/include/CLI/CLI.hpp /usr/include/catch2/catch.hpp /usr/lib/cmake/Catch2/Catch.cmake; do
    [[ -e $f ]] || die "$f missing: install the Debian packages of scripts/setup.sh first"
  done
  rm -rf "$dir" && mkdir -p "$dir/include" "$dir/cmake" "$dir/licenses" || die "cannot write $dir"
  # bcp scans everything under --boost: give it a root holding only boost/, or it would also copy
  # glibc headers (stdlib.h, ...) that must never shadow the target machine's own.
  local root
  root=$(mktemp -d)
  ln -s /usr/include/boost "$root/boost"
  # Every Boost header our sources include (the Boost.Graph pieces), with all they include.
  local headers
  headers=$(grep -rhoE '#include <boost/[^>]+>' "$repo/src" "$repo/include" "$repo/gui" "$repo/analyses" \
              "$repo/tests" 2>/dev/null | sed -E 's/#include <(.*)>/\1/' | sort -u)
  echo "gpu-check: Boost headers used: $(echo $headers)"
  # shellcheck disable=SC2086
  bcp --boost="$root" $headers "$dir/include" >"$dir/bcp.log" 2>&1 || { rm -rf "$root"; die "bcp failed (see $dir/bcp.log)"; }
  rm -rf "$root"
  cp -r /usr/include/nlohmann /usr/include/CLI /usr/include/catch2 "$dir/include/"
  cp /usr/lib/cmake/Catch2/Catch.cmake /usr/lib/cmake/Catch2/CatchAddTests.cmake "$dir/cmake/"
  for pkg in libboost1.74-dev nlohmann-json3-dev libcli11-dev catch2; do
    [[ -f /usr/share/doc/$pkg/copyright ]] && cp "/usr/share/doc/$pkg/copyright" "$dir/licenses/$pkg.copyright"
  done
  {
    echo "Made by scripts/gpu-check.sh --vendor on $(hostname) at $(date -u +%FT%TZ)"
    dpkg-query -W libboost1.74-dev nlohmann-json3-dev libcli11-dev catch2 2>/dev/null
  } >"$dir/VERSIONS"
  echo "gpu-check: wrote $dir: $(du -sh "$dir" | cut -f1), $(find "$dir" -type f | wc -l) files"
}

while [[ $# -gt 0 ]]; do
  case $1 in
    --vendor) [[ $# -ge 2 ]] || die "--vendor needs a folder"; make_vendor "$2"; exit $? ;;
    --vendor-dir) vendor_dir=$(cd "$2" 2>/dev/null && pwd) || die "no folder $2"; shift 2 ;;
    --vendor-only) vendor_only=ON; shift ;;
    --build) build_dir=$2; shift 2 ;;
    --reuse-build) build_dir=$(cd "$2" 2>/dev/null && pwd) || die "no folder $2"; reuse=1; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --rehearse-cuda) rehearse=1; shift ;;
    --prebuild) [[ $# -ge 2 ]] || die "--prebuild needs a folder"; prebuild=$2; shift 2 ;;
    --from-build) from_build=$(cd "$2" 2>/dev/null && pwd) || die "no folder $2"; shift 2 ;;
    --torch) [[ $# -ge 2 ]] || die "--torch needs a version"; prebuild_torch=$2; shift 2 ;;
    --prebuilt) prebuilt=$(cd "$2" 2>/dev/null && pwd) || die "no folder $2"; shift 2 ;;
    -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

# What a prebuilt folder must match: the sources its binaries come from (a digest of the text of
# every file the build compiles or configures, so a checkout anywhere, committed or not, gives the
# same one; the Python scripts and docs beside them do not count).
sources_digest() {
  (cd "$repo" && find CMakeLists.txt cmake src include analyses -type f \( -name CMakeLists.txt -o -name '*.cmake' \
     -o -name '*.in' -o -name '*.h' -o -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null \
    | LC_ALL=C sort | xargs md5sum | md5sum | cut -c1-32)
}
torch_of() { "$1" -c 'import torch; print(torch.__version__)' 2>/dev/null; }
# The folders LibTorch's libraries and the wheel's CUDA libraries live in, for LD_LIBRARY_PATH.
torch_lib_path() {
  "$1" -c 'import glob, os, torch; d = os.path.dirname(torch.__file__); print(":".join([os.path.join(d, "lib")] + sorted(glob.glob(os.path.join(d, "..", "nvidia", "*", "lib")))))' 2>/dev/null
}

# ---- --prebuild DIR: the binaries for the GPU box, made here ----------------------------------
if [[ -n $prebuild ]]; then
  if [[ -n $from_build ]]; then
    pb_build=$from_build
    pb_python=$(sed -n 's/^FOLDNORM_PYTHON:[A-Z]*=//p' "$pb_build/CMakeCache.txt" 2>/dev/null)
    [[ -n $pb_python ]] || die "$pb_build is no configured foldnorm build (no FOLDNORM_PYTHON in its CMakeCache.txt)"
  else
    [[ -d $vendor_dir/include ]] || die "no carried headers in $vendor_dir: run scripts/gpu-check.sh --vendor $vendor_dir first"
    env_dir=$HOME/.cache/foldnorm/torch-envs/torch$prebuild_torch-gpu-box
    if [[ $(torch_of "$env_dir/bin/python") != "$prebuild_torch"* ]]; then
      echo "gpu-check: making $env_dir (torch==$prebuild_torch, the GPU box's)"
      rm -rf "$env_dir"
      python3 -m venv "$env_dir" && "$env_dir/bin/pip" install -q "torch==$prebuild_torch" numpy \
        || die "cannot make a venv with torch==$prebuild_torch in $env_dir"
    fi
    pb_python=$env_dir/bin/python
    pb_build=$HOME/.cache/foldnorm/build-gpu-box-torch$prebuild_torch
    generator=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    echo "gpu-check: configuring $pb_build against torch $(torch_of "$pb_python")"
    cmake -S "$repo" -B "$pb_build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFOLDNORM_PYTHON="$pb_python" \
      -DFOLDNORM_GUI=OFF -DFOLDNORM_RENDER=OFF -DFOLDNORM_VENDOR_DIR="$vendor_dir" -DFOLDNORM_VENDOR_ONLY=ON \
      >"$pb_build.configure.log" 2>&1 || die "configure failed (see $pb_build.configure.log)"
    echo "gpu-check: building foldnorm e2e_speed foldnorm_ops (a cold build takes 30-45 minutes on 2 cores)"
    cmake --build "$pb_build" -j "$(nproc)" --target foldnorm e2e_speed foldnorm_ops || die "the build failed"
  fi
  rm -rf "$prebuild" && mkdir -p "$prebuild/bin" "$prebuild/lib" || die "cannot write $prebuild"
  cp "$pb_build/bin/foldnorm" "$pb_build/bin/e2e_speed" "$prebuild/bin/" && cp "$pb_build/lib/libfoldnorm_ops.so" "$prebuild/lib/" \
    || die "the build made no binaries in $pb_build"
  {
    echo "torch=$(torch_of "$pb_python")"
    echo "sources=$(sources_digest)"
    echo "commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null) $(git -C "$repo" status --porcelain 2>/dev/null | wc -l) changed files"
    echo "made=$(date -u +%FT%TZ) on $(hostname)"
  } >"$prebuild/PREBUILT"
  echo "gpu-check: wrote $prebuild: $(du -sh "$prebuild" | cut -f1); carry it with build-vendor, run with --prebuilt $prebuild"
  exit 0
fi

# Results: every log and table in $out/gpu-results/, packed at the end (and on any exit) into
# $out/gpu-results.tar.gz beside a copy of summary.txt: the device tool brings back at most 8
# files from $OUT, and a run leaves dozens.
top=${OUT:-$PWD}
out=$top/gpu-results
mkdir -p "$out" || die "cannot create $out"
summary=$out/summary.txt
: >"$summary"
start=$(date +%s)
pack() { tar -C "$top" -czf "$top/gpu-results.tar.gz" gpu-results 2>/dev/null; cp "$summary" "$top/summary.txt" 2>/dev/null; }
trap pack EXIT
note() { echo "$*" | tee -a "$summary"; }
remaining() { echo $(( budget - ($(date +%s) - start) )); }

# step NAME TIMEOUT CMD...: runs CMD with stdout+stderr in $out/NAME.log, time-boxed to
# min(TIMEOUT, what is left of the budget); records the outcome in summary.txt.
step() {
  local name=$1 limit=$2
  shift 2
  local left
  left=$(remaining)
  if (( left < 15 )); then
    note "[skip] $name: budget spent ($budget s)"
    return 124
  fi
  (( limit > left )) && limit=$left
  local t0=$(date +%s) rc=0
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  local took=$(( $(date +%s) - t0 ))
  # A rehearsal's CUDA step passes when the command refused for want of a device, nothing else.
  if (( rehearse && rc != 0 )) && tail -n 3 "$out/$name.log" | grep -qE \
       'needs a CUDA device|no CUDA device is available|torch.cuda.is_available\(\) is false'; then
    note "[ok]   $name: refused: no CUDA device (${took} s)"
    return 0
  fi
  case $rc in
    0) note "[ok]   $name (${took} s)" ;;
    124|137) note "[TIME] $name: stopped after ${limit} s (log: $name.log)" ;;
    *) note "[FAIL] $name: exit $rc after ${took} s (log: $name.log; last lines below)"
       tail -n 5 "$out/$name.log" | sed 's/^/         /' | tee -a "$summary" ;;
  esac
  return $rc
}

# table NAME: the results of a bench step without its progress lines ("[...] ...") as NAME.txt.
table() { [[ -f $out/$1.log ]] && grep -v '^\[' "$out/$1.log" >"$out/$1.txt"; return 0; }

# ---- the machine ----
{
  echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"; echo "cpus: $(nproc)"
  echo "repo: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null) $(git -C "$repo" status --porcelain 2>/dev/null | wc -l) changed files"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.sm,clocks.max.sm,power.limit --format=csv
  command -v nvcc >/dev/null && nvcc --version | tail -n 2
  cmake --version | head -n 1
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

cuda=0
if (( rehearse )); then
  export CUDA_VISIBLE_DEVICES=  # no device even where there is one: each CUDA step must refuse
  cuda=1
  note "REHEARSAL: the CUDA steps with tiny models and no device; each must be refused only for want of one"
elif "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  cuda=1
  note "CUDA device: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
else
  note "NO CUDA DEVICE: torch.cuda.is_available() is false here; the GPU steps are skipped, the CPU parts still run"
fi

# ---- configure + build ----
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
arch_args=()
if (( cuda )); then
  # Only the GPU that is here: one architecture compiles in half the time of the default two.
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')
  [[ $cap =~ ^[0-9]+\.[0-9]+$ ]] && arch_args=(-DCMAKE_CUDA_ARCHITECTURES="${cap/./}" -DTORCH_CUDA_ARCH_LIST="$cap")
fi
[[ -d $vendor_dir/include ]] || note "no carried headers in $vendor_dir: relying on system packages (make them with --vendor DIR)"
# --prebuilt DIR: its binaries instead of a build, where they fit this machine (else build).
if [[ -n $prebuilt ]] && (( ! reuse )); then
  why=
  stamp=$prebuilt/PREBUILT
  if [[ ! -f $stamp ]]; then why="no PREBUILT stamp in $prebuilt"
  elif [[ $(sed -n 's/^torch=//p' "$stamp") != "$(torch_of "$python")" ]]; then
    why="made for torch $(sed -n 's/^torch=//p' "$stamp"), this machine has $(torch_of "$python")"
  elif [[ $(sed -n 's/^sources=//p' "$stamp") != "$(sources_digest)" ]]; then
    why="made from other sources (digest $(sed -n 's/^sources=//p' "$stamp"), these are $(sources_digest))"
  else
    export LD_LIBRARY_PATH="$prebuilt/lib:$(torch_lib_path "$python")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ! "$prebuilt/bin/foldnorm" --help >/dev/null 2>"$out/prebuilt-load.log"; then
      why="its foldnorm does not start here ($(tail -n 1 "$out/prebuilt-load.log"))"
    elif ! "$python" -c "import sys, torch; torch.ops.load_library(sys.argv[1])" "$prebuilt/lib/libfoldnorm_ops.so" \
           2>>"$out/prebuilt-load.log"; then
      why="its libfoldnorm_ops.so does not load into this torch ($(tail -n 1 "$out/prebuilt-load.log"))"
    fi
  fi
  if [[ -z $why ]]; then
    build_dir=$prebuilt
    reuse=1
    note "prebuilt binaries: $prebuilt ($(tr '\n' ' ' <"$stamp"))"
  else
    note "prebuilt binaries not used: $why; building here"
  fi
fi
if (( reuse )); then
  note "reusing the build in $build_dir (no configure, no build)"
else
step configure 180 cmake -S "$repo" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DFOLDNORM_PYTHON="$python" -DFOLDNORM_GUI=OFF -DFOLDNORM_RENDER=OFF \
  -DFOLDNORM_VENDOR_DIR="$vendor_dir" -DFOLDNORM_VENDOR_ONLY=$vendor_only "${arch_args[@]}" \
  || { note "configure failed: nothing else can run"; exit 1; }
step build 420 cmake --build "$build_dir" -j "$(nproc)" --target foldnorm e2e_speed foldnorm_ops \
  || { note "build failed: nothing else can run"; exit 1; }
fi
bin=$build_dir/bin

# ---- helpers of the steps below ----
models=$build_dir/gpu-models
[[ $build_dir == "$prebuilt" ]] && models=$build_dir-models  # the carried folder stays as carried
(( rehearse )) && models=$models-rehearsal  # tiny files under real names: kept apart
mkdir -p "$models"
device=cpu
(( cuda )) && device=cuda
# zoo_fold NAME PRESET: the zoo model (traced here, in seconds) and its fold, verified on $device.
# A CPU trace names the CPU in its constants (devices, `device=None` factories): the fold's
# verification retargets both models to the GPU (issue 28); GPT-2 and OPT failed here before.
# A rehearsal builds the tiny preset under the requested name (the later steps find it there).
zoo_fold() {
  local build_preset=$2
  (( rehearse )) && build_preset=tiny
  step "zoo-$1-$2" 120 "$bin/foldnorm" zoo "$1" --preset "$build_preset" -o "$models/$1-$2.pt" || return 0
  step "fold-$1-$2-$device" 150 "$bin/foldnorm" fold "$models/$1-$2.pt" \
    -o "$models/$1-$2-folded.pt" --device "$device" --random 1 --json
  return 0
}
# e2e NAME LIMIT ARGS...: an e2e_speed table as NAME.md and NAME.dat.
e2e() {
  local name=$1 limit=$2
  shift 2
  step "$name" "$limit" "$bin/e2e_speed" "$@" --case-seconds 0 --layouts 1 --out "$out/$name.md" --data "$out/$name.dat"
}
# profile NAME LIMIT ARGS...: analyses/profile_e2e.py on the models zoo_fold made (others it makes).
profile() {
  local name=$1 limit=$2
  shift 2
  step "$name" "$limit" "$python" "$repo/analyses/profile_e2e.py" --bin "$bin/foldnorm" \
    --ops-lib "$build_dir/lib/libfoldnorm_ops.so" --models-dir "$models" "$@"
}
# bench_norm NAME LIMIT ARGS...: a bench-norm table, NAME.txt without the progress lines.
bench_norm() {
  local name=$1 limit=$2
  shift 2
  step "$name" "$limit" "$bin/foldnorm" bench-norm "$@"
  table "$name"
}
# cli_bench NAME PRESET DTYPE SEQS LIMIT ARGS...: the CLI's bench of a model zoo_fold made (null
# fold beside, paired ratios).
cli_bench() {
  local name=$1 preset=$2 dtype=$3 seqs=$4 limit=$5
  shift 5
  local model=$models/$name-$preset.pt tag="bench-$name-$preset-$device-$dtype"
  [[ -f $model ]] || { note "[skip] $tag: the zoo step made no model"; return 0; }
  step "$tag" "$limit" "$bin/foldnorm" bench "$model" --device "$device" --dtype "$dtype" --seq "$seqs" \
    --json-out "$out/$tag.json" "$@"
  table "$tag"
}

# ---- the steps, most important first: a run the budget cuts short still brings back the
# correctness checks, the kernel table and the first end-to-end table ----
# Correctness: the kernels against float64 (gradcheck through the ops, on the GPU too).
step python-gradcheck 90 "$python" "$repo/tests/python/test_ops_grad.py" "$build_dir/lib/libfoldnorm_ops.so"
if (( cuda )); then
  # The two models whose CUDA fold failed before issue 28, folded and verified on the GPU.
  zoo_fold gpt2 small
  zoo_fold opt 125m
  # The kernel tables: ours against aten (goal: >= 0.9 of copy bandwidth), each with the fused
  # residual add + RMSNorm against its unfused forms.
  bench_norm bench-norm-cuda 120 --device cuda --dtype float32 --hidden 768,1024,4096,8192 --rows 2048,8192,32768 --reps 30
  bench_norm bench-norm-cuda-16bit 120 --device cuda --dtype bfloat16,float16 \
    --hidden 768,1024,2048,4096,8192 --rows 8192,32768 --reps 30
  # End to end where folding matters, BERT (post-LN, 1 of 25 LNs folds) as the control:
  # original vs folded vs folded + fused, the null fold beside each.
  e2e e2e-cuda-bfloat16-b8 150 --device cuda --dtype bfloat16 --fuse both --batch 8 \
    --models gpt2:small,opt:125m,vit:b_16,bert:base --seq 128,512 --warmup 10 --reps 15 --huge-pages off
  # Where the time goes: each op's device time (the norms' share bounds the fold's gain), and
  # both forwards as CUDA graph replays (launch overhead out).
  profile profile-cuda-bfloat16-b8 150 --device cuda --dtype bfloat16 --batch 8 \
    --models gpt2:small,opt:125m --seq 128,512 --reps 10 --top 10 --cuda-graphs
  e2e e2e-cuda-float32-b8 150 --device cuda --dtype float32 --fuse both --batch 8 \
    --models gpt2:small,opt:125m,vit:b_16,bert:base --seq 128,512 --warmup 10 --reps 15 --huge-pages off
  # The rest of the zoo, folded and verified on the GPU; then the larger models end to end at
  # batch 1 up to their position tables (launch-bound sizes).
  zoo_fold vit b_16
  zoo_fold bert base
  zoo_fold gpt2 medium
  zoo_fold phi phi-2
  e2e e2e-cuda-bfloat16-b1 150 --device cuda --dtype bfloat16 --fuse both --batch 1 \
    --models gpt2:small,gpt2:medium,opt:125m,phi:phi-2 --seq 128,1024 --warmup 10 --reps 15 --huge-pages off
  profile profile-cuda-float32-b1 120 --device cuda --dtype float32 --batch 1 \
    --models gpt2:small,opt:125m,vit:b_16 --seq 128,1024 --reps 10 --top 10 --cuda-graphs
  profile profile-cuda-bfloat16-b1-large 150 --device cuda --dtype bfloat16 --batch 1 \
    --models gpt2:medium,phi:phi-2 --seq 128,1024 --reps 5 --top 10 --cuda-graphs
  # 16-bit inputs with float32 weight and bias (autocast-style models): the register path with
  # two 16-byte parameter loads per vector, the fused add_rms_norm included.
  bench_norm bench-norm-cuda-16bit-f32params 90 --device cuda --dtype bfloat16,float16 \
    --float32-params --hidden 768,4096,8192 --rows 8192,32768 --reps 20
  # The CLI's bench on the two models the e2e tables lead with, up to their position tables.
  cli_bench gpt2 small bfloat16 128,512,1024 120 --batch 8 --warmup 20 --reps 30
  cli_bench opt 125m bfloat16 128,512,2048 120 --batch 8 --warmup 20 --reps 30
else
  note "[skip] the CUDA steps (fold and verify on cuda, bench-norm, e2e, profile, bench): no CUDA device"
  zoo_fold gpt2 tiny
  zoo_fold opt tiny
  # The same profile script's CPU path on retargeted bfloat16 files (what the GPU steps run, less CUDA).
  profile profile-cpu-bfloat16 120 --dtype bfloat16 --batch 2 --models gpt2:tiny --seq 16 --reps 2 --top 4
  e2e e2e-cpu-tiny 200 --device cpu --fuse both --models gpt2:tiny,bert:tiny,opt:tiny --seq 32 --warmup 2 --reps 3
  cli_bench gpt2 tiny float32 32 240 --warmup 2 --reps 3
  cli_bench opt tiny float32 32 240 --warmup 2 --reps 3
fi
# The CPU's 16-bit rows against copy bandwidth (issue 16 item 2: goal >= 0.9 of copy), on this
# machine's cores: a quiet box measures what the loaded dev machine cannot.
bench_norm bench-norm-cpu-16bit 120 --device cpu --dtype float32,bfloat16,float16 \
  --hidden 768,4096,8192 --rows 8192 --reps $(( cuda && !rehearse ? 21 : 5 ))

note "done in $(( $(date +%s) - start )) s; results in $out"
grep -q '^\[FAIL\]\|^\[TIME\]' "$summary" && exit 1
exit 0
