#!/bin/bash
# analyses/compare_folded.py (docs/performance.md's Python check of the folded GPT-2 XL) on the zoo's
# tiny GPT-2: it passes a true fold (exit 0) and fails a "fold" that is another model (exit 1).
# Usage: test_compare_folded.sh FOLDNORM PYTHON SOURCE_DIR OUT_DIR
set -u
foldnorm=$1 python=$2 src=$3 out=$4
mkdir -p "$out" || exit 1
spec='2x16:int64[0,1000)'
"$foldnorm" zoo gpt2 --preset tiny -o "$out/a.pt" >/dev/null || exit 1
"$foldnorm" zoo gpt2 --preset tiny --seed 7 -o "$out/b.pt" >/dev/null || exit 1
"$foldnorm" fold "$out/a.pt" -o "$out/a_folded.pt" >/dev/null 2>&1 || exit 1
"$python" "$src/analyses/compare_folded.py" "$out/a.pt" "$out/a_folded.pt" --input "$spec" || { echo "FAIL: a true fold was not accepted"; exit 1; }
if "$python" "$src/analyses/compare_folded.py" "$out/a.pt" "$out/b.pt" --input "$spec"; then
  echo "FAIL: another model's outputs were accepted as the fold's"; exit 1
fi
echo "ok: the fold matches, another model does not"
