#!/usr/bin/env bash
# `--weights keep` against bf16 in one run, on the host (2 threads):
# SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M. For each model and form
# (bf16; keep with kiln's CPU preset, each matrix widened once at load;
# keep compiled with --low-memory, widened on every call): `kiln export GGUF
# --seq 64 --kv-cache --prompt-len 64 --max-context 128 --weights FORM`,
# `kiln compile … -t host [--low-memory]`, one decode call at position 127
# and the 64-token prefill by iree-benchmark-module (median of RUNS), peak
# RSS of `kiln generate --kv-cache` (64-token prompt, 32 new tokens).
# Prints a markdown table for spec/quantized-weights.md.
# Usage: scripts/bench/keep.sh [RUNS] (default 3)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
runs="${1:-3}"
smol="$(bash scripts/fetch-smollm2.sh)"
gemma="$(bash scripts/fetch-gemma3.sh)"
bench_setup bench-keep
echo "start: $(uptime)" >&2
rows=()
for model in smollm2 gemma3; do
  gguf=$smol; [[ $model == gemma3 ]] && gguf=$gemma
  for variant in bf16 keep keep:--low-memory; do
    form="${variant%%:*}"
    flag=""; [[ $variant == *:* ]] && flag="${variant#*:}"
    n="${model}_${form}"
    # shellcheck disable=SC2086
    bench_kv_form "$gguf" "$n" "$form" 32 $flag
    rows+=("| $model | $form ${flag:-(preset)} | $archive_mb | $prefill | $decode | $gen_rss |")
    rm -f "$out/$n"*
  done
done
echo "end: $(uptime)" >&2
echo "| model | form, compile | archive MB | prefill 64 ms | decode ms/token | peak RSS MB |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
