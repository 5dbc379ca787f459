#!/usr/bin/env bash
# pip install of this repository into a researcher's environment (issue 32), checked end to end:
#   1. a venv with torch==VERSION (and transformers for the tests), cached under
#      $FOLDNORM_CACHE/pip-envs/torchVERSION and keyed by the versions it holds;
#   2. `pip install --no-build-isolation <repo>` (the README's command) builds the extension, the op
#      library and the C++ CLI against THAT torch (build dir $FOLDNORM_CACHE/pip-build/torchVERSION-<checkout hash>, so
#      a second run is incremental; ccache under $FOLDNORM_CACHE/ccache);
#   3. from a directory outside the repository, with no PYTHONPATH: `import foldnorm` must load the
#      installed copy, the `foldnorm` console script must run, the README's "Python in five lines"
#      block (extracted from README.md, run verbatim) must run, and the package's test suites
#      (tests/python/test_package_*.py) run against the installed package and its CLI.
# Usage: pip_install_check.sh TORCH_VERSION [--cuda]   (CUDA kernels are off unless --cuda: the
# check is about the build against that torch; the kernels are the same sources either way.)
set -euo pipefail
version=${1:?usage: pip_install_check.sh TORCH_VERSION [--cuda]}
cuda=OFF; [ "${2:-}" = "--cuda" ] && cuda=ON
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${FOLDNORM_CACHE:-$HOME/.cache/foldnorm}
env=$cache/pip-envs/torch$version
# one build dir per checkout: CMake refuses a build dir configured from another source dir (CI's clone, a worktree)
build=$cache/pip-build/torch$version-$(printf %s "$repo" | md5sum | cut -c1-8)
transformers_version=5.24.0
py=${FOLDNORM_BASE_PYTHON:-python3}
say() { printf '[pip-check torch %s] %s\n' "$version" "$*"; }
t0=$(date +%s)

want="$version $transformers_version"
have=$("$env/bin/python" -c 'import torch; from importlib.metadata import version; print(torch.__version__.split("+")[0], version("transformers"))' 2>/dev/null || true)
if [ "$have" != "$want" ]; then
  say "creating $env (torch==$version, transformers==$transformers_version, build tools)"
  rm -rf "$env"
  "$py" -m venv "$env"
  "$env/bin/pip" install -q --progress-bar off "torch==$version" "transformers==$transformers_version" \
    "scikit-build-core>=0.10" "cmake>=3.25" ninja
fi
say "environment: $("$env/bin/python" -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])')"

say "pip install --no-build-isolation $repo (build dir $build, CUDA $cuda)"
CCACHE_DIR=${CCACHE_DIR:-$cache/ccache} "$env/bin/pip" install -q --progress-bar off --no-build-isolation --no-deps \
  --force-reinstall -Cbuild-dir="$build" -Ccmake.define.FOLDNORM_CUDA=$cuda "$repo"
say "installed in $(( $(date +%s) - t0 )) s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # nowhere near the repository: only the installed package can be imported
unset PYTHONPATH
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
"$env/bin/python" - "$env" <<'EOF'
import os, sys, foldnorm
where = os.path.realpath(foldnorm.__file__)
env = os.path.realpath(sys.argv[1])
assert where.startswith(env + os.sep), f"import foldnorm found {where}, not the copy installed in {env}"
print(f"import foldnorm: {where}")
EOF
cli=$("$env/bin/python" -c 'import foldnorm._cli as c; print(c.cli_path())')
"$env/bin/foldnorm" --help | head -n 3
say "console script: $env/bin/foldnorm -> $cli"

# The README's Python example, verbatim.
awk '/^## Python in five lines/{on=1} on && /^```python/{grab=1; next} grab && /^```/{exit} grab' \
  "$repo/README.md" > readme_example.py
[ -s readme_example.py ] || { echo "README.md has no Python block under '## Python in five lines'" >&2; exit 1; }
say "README example ($(wc -l < readme_example.py) lines)"
"$env/bin/python" readme_example.py | tail -n 12

failed=()
for suite in api grad trainable portable plan_kinds capture compile checkpoint; do
  say "test_package_$suite.py"
  rc=0
  "$env/bin/python" "$repo/tests/python/test_package_$suite.py" "$cli" > "suite_$suite.log" 2>&1 || rc=$?
  tail -n 1 "suite_$suite.log"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    failed+=("$suite"); cat "suite_$suite.log"
  fi
done
say "done in $(( $(date +%s) - t0 )) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "pip-installed foldnorm with torch $version: failing suites: ${failed[*]}" >&2
  exit 1
fi
