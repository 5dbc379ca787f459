#!/usr/bin/env bash
# The corpus re-run after a tool change, in one command (from the repository root):
#
#     bash tests/corpus/refresh.sh [BUILD]        (BUILD defaults to build)
#
# 0. the tools it runs are (re)built, so the results are the merged tool's;
# 1. `ctest -L corpus` in BUILD: both environments traced (cached) and checked by the oracle;
# 2. expectations added for every architecture the oracle now confirms that has none yet
#    (existing expectations are left alone: a changed verdict stays a failing entry to review,
#    then `build_corpus.py --update-expectations --only NAME`);
# 3. docs/corpus.md and docs/foldability.md regenerated from the results;
# 4. the per-architecture entries checked again; its exit status is that check's, and ctest names
#    every architecture that still fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) || { echo "refresh: no build folder ${1:-$root/build}"; exit 2; }
python=$(sed -n 's/^FOLDNORM_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
[[ -x "$python" ]] || { echo "refresh: $build is not a configured foldnorm build (no FOLDNORM_PYTHON)"; exit 2; }
results=$build/corpus-results
driver=$root/tests/corpus/build_corpus.py

cmake --build "$build" -j 2 --target foldnorm foldnorm_ops foldability_table > /dev/null \
  || { echo "refresh: building foldnorm, foldnorm_ops and foldability_table in $build failed"; exit 1; }
(cd "$build" && ctest -L corpus -j 2 --output-on-failure --timeout 2700 > "$build/corpus-refresh.log" 2>&1)
echo "refresh: first corpus run done (log: $build/corpus-refresh.log)"
for env in main old; do
  "$python" "$driver" --update-expectations --missing-only --results "$results" --env "$env" || exit 1
done
"$python" "$root/tests/corpus/corpus_docs.py" --results "$results" --out "$root/docs/corpus.md" || exit 1
[[ -f "$build/test-models/manifest.json" ]] || (cd "$build" && ctest -R '^make_test_models$' > /dev/null) \
  || { echo "refresh: making $build/test-models failed (ctest -R make_test_models)"; exit 1; }
(cd "$root" && "$build/bin/foldability_table" --fixtures "$build/test-models" --corpus "$results" \
    --out docs/foldability.md) || exit 1
cd "$build" && ctest -L corpus -j 2 --output-on-failure --timeout 2700
