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
# Usage: scripts/bench-keep.sh [RUNS] (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
smol="$(bash scripts/fetch-smollm2.sh)"
gemma="$(bash scripts/fetch-gemma3.sh)"
. scripts/bench-lib.sh
bench_setup bench-keep
ids64=$(python3 -c 'print(",".join(str(1000 + 37 * i % 9000) for i in range(64)))')
mb() { python3 -c "print(f'{$1 / 1e6:.0f}')"; }
echo "start: $(uptime)" >&2
rows=()
for model in smollm2 gemma3; do
  gguf=$smol; [[ $model == gemma3 ]] && gguf=$gemma
  for variant in bf16 keep keep:--low-memory; do
    form="${variant%%:*}"
    flag=""; [[ $variant == *:* ]] && flag="${variant#*:}"
    n="${model}_${form}"
    "$kiln" export "$gguf" --seq 64 --out "$out" --name "$n" --weights "$form" \
      --kv-cache --prompt-len 64 --max-context 128 -q >/dev/null 2>&1
    # shellcheck disable=SC2086
    "$kiln" compile "$out/$n-kv-gen.mlir" --target host -q $flag >/dev/null 2>&1
    read -r cache count dtype < <(python3 -c "import json; k=json.load(open('$out/$n.json'))['kv']; print('x'.join(map(str, k['cache_shape'])), k.get('cache_count', 1), k['cache_dtype'])")
    caches=()
    for _ in $(seq $((2 * count))); do caches+=("${cache}x${dtype}=0"); done
    decode=$(bm "$out/$n-kv-host.vmfb" "${n}_decode" "$out/$n.irpa" "1xi32=1234" "i32=127" "${caches[@]}")
    prefill=$(bm "$out/$n-kv-host.vmfb" "${n}_prefill" "$out/$n.irpa" "1x64xi32=$ids64" "i32=0" "i32=64" "${caches[@]}")
    /usr/bin/time -f %M -o "$out/rss" "$kiln" generate "$out/$n-kv-host.vmfb" --kv-cache --tokens "$ids64" \
      --max-new-tokens 32 >/dev/null 2>&1
    rows+=("| $model | $form ${flag:-(preset)} | $(mb "$(stat -c %s "$out/$n.irpa")") | $prefill | $decode | $(( $(tail -1 "$out/rss") / 1024 )) |")
    rm -f "$out/$n"*
  done
done
echo "end: $(uptime)" >&2
echo "| model | form, compile | archive MB | prefill 64 ms | decode ms/token | peak RSS MB |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
