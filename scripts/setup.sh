#!/usr/bin/env bash
# One idempotent set-up: Debian packages, the project venv (torch + torchvision from PyPI),
# then a CMake build. Everything big lives outside the clone, under $FOLDNORM_CACHE.
# The Python package (python/, docs/python.md) is built into $build/python/foldnorm; a .pth file in
# the venv makes `import foldnorm` work there (an editable install: rebuilding updates it).
# pybind11 is the copy torch ships (torch/include/pybind11), so torch's casters fit.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${FOLDNORM_CACHE:-$HOME/.cache/foldnorm}
venv=$cache/venv
build=${FOLDNORM_BUILD:-$here/build}
torch_version=2.14.1
torchvision_version=0.29.2
# transformers: only the Python test fixtures use it (tests/fixtures/hf_models.py); 5.24 traces
# GPT-2/Phi/Llama with torch 2.11, where 4.57's vmap-built attention masks do not.
transformers_version=5.24.0
# timm: the public-architecture corpus (tests/corpus) traces its models; the corpus's "old"
# environment (older transformers and timm) and its torch2.X environments (another torch, under
# $cache/torch-envs, tests/corpus/torch_envs.py) are installed by tests/corpus/build_corpus.py itself.
timm_version=1.0.31
say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

apt_packages=(
  build-essential cmake ninja-build ccache pkg-config python3-venv python3-dev
  libboost-graph-dev libboost-tools-dev libgraphviz-dev graphviz
  libimgui-dev libglfw3-dev libgl-dev libstb-dev
  catch2 nlohmann-json3-dev libcli11-dev libfmt-dev
  xvfb xauth libgl1-mesa-dri libglx-mesa0 mesa-utils gnuplot-nox
  fonts-dejavu-core
  fortunes
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  say "Debian packages: all ${#apt_packages[@]} present"
fi

mkdir -p "$cache"
py=${FOLDNORM_PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  say "creating venv $venv"
  "$py" -m venv "$venv"
fi
have=$("$venv/bin/python" -c 'import torch, torchvision; from importlib.metadata import version; print(torch.__version__.split("+")[0], torchvision.__version__.split("+")[0], version("transformers"), version("timm"))' 2>/dev/null || true)
if [ "$have" != "$torch_version $torchvision_version $transformers_version $timm_version" ]; then
  say "installing torch==$torch_version torchvision==$torchvision_version transformers==$transformers_version timm==$timm_version into $venv (several GB the first time)"
  "$venv/bin/pip" install --progress-bar on "torch==$torch_version" "torchvision==$torchvision_version" "transformers==$transformers_version" "timm==$timm_version"
else
  say "venv: torch $torch_version, torchvision $torchvision_version, transformers $transformers_version, timm $timm_version present"
fi

[ "${1:-}" = "--no-build" ] && exit 0

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  say "configuring $build"
  cmake -S "$here" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DFOLDNORM_PYTHON="$venv/bin/python" -DFOLDNORM_RENDER=ON -DFOLDNORM_GUI=ON -DFOLDNORM_CUDA=ON
fi
# FOLDNORM_WERROR=ON (CI): a compiler warning in our sources fails the build (CMakeLists.txt).
if [ -n "${FOLDNORM_WERROR:-}" ]; then
  cmake -S "$here" -B "$build" -DFOLDNORM_WERROR="$FOLDNORM_WERROR" >/dev/null
fi
say "building (ccache dir: ${CCACHE_DIR:-$cache/ccache})"
CCACHE_DIR=${CCACHE_DIR:-$cache/ccache} cmake --build "$build" -j "$(nproc)"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$build/python" > "$site/foldnorm.pth"
say "python package: $build/python/foldnorm (import foldnorm in $venv via $site/foldnorm.pth)"
