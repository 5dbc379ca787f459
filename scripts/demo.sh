#!/usr/bin/env bash
# README command 1: set up (idempotent), build, then the main job on the built-in GPT-2:
# inspect, analyze, fold + verify, and time original vs folded.
# Usage: scripts/demo.sh [preset]   (tiny by default; small = GPT-2 small, 124M parameters)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
preset=${1:-tiny}
"$here/scripts/setup.sh"
bin=${FOLDNORM_BUILD:-$here/build}/bin/foldnorm
out=$here/out
mkdir -p "$out"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
step "foldnorm zoo gpt2 --preset $preset -o out/gpt2.pt"
"$bin" zoo gpt2 --preset "$preset" -o "$out/gpt2.pt"
step "foldnorm inspect out/gpt2.pt"
"$bin" inspect "$out/gpt2.pt"
step "foldnorm analyze out/gpt2.pt"
"$bin" analyze "$out/gpt2.pt"
step "foldnorm fold out/gpt2.pt -o out/gpt2-folded.pt"
"$bin" fold "$out/gpt2.pt" -o "$out/gpt2-folded.pt"
# The tiny preset has 64 positions; GPT-2 small has 1024.
seqs=32,64
[ "$preset" = tiny ] || seqs=64,128
step "foldnorm bench out/gpt2.pt --seq $seqs (CPU)"
"$bin" bench "$out/gpt2.pt" --seq "$seqs" --reps 5
step "foldnorm render out/gpt2.pt -o out/gpt2-ln.svg --view ln:transformer.h.1.ln_2"
"$bin" render "$out/gpt2.pt" -o "$out/gpt2-ln.svg" --view ln:transformer.h.1.ln_2
echo "wrote out/gpt2-folded.pt (run it from Python: README.md) and out/gpt2-ln.svg"
