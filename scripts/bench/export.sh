#!/usr/bin/env bash
# Export benchmark (issue 4): SmolLM2-135M-Instruct Q4_1 GGUF → MLIR +
# safetensors + irpa + manifest at SEQ 64, wall time and peak RSS, median
# of 3 runs. Usage: scripts/bench/export.sh [RUNS]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
runs="${1:-3}"
gguf="$(bash scripts/fetch-smollm2.sh)"
bench_build
out="$(mktemp -d)"
times="$(mktemp -d)"
trap 'rm -rf "$out" "$times"' EXIT
for i in $(seq "$runs"); do
  rm -rf "${out:?}"/*
  /usr/bin/time -f "%e %M" -o "$times/time.$i" "$kiln" export "$gguf" --seq 64 --out "$out/x" --name smollm2 2>/dev/null
done
cat "$times"/time.* | sort -n | awk -v n="$runs" '{t[NR]=$1; m[NR]=$2} END {i=int((n+1)/2); printf "kiln export SmolLM2 SEQ 64 (4 files): median wall %.2f s, peak RSS %.0f MiB (median of %d)\n", t[i], m[i]/1024, n}'
