#!/usr/bin/env bash
# Quantized-weights benchmark (issue 17's goal table), in one run, on the
# host: SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M, each exported as bf16
# (the default), with `--weights keep` (exact) and with `--weights w8a8`
# (lossy: i8 weights and activations), KV pair P 64 / N 128 and the
# SEQ-64 forward, compiled with kiln's CPU preset (spec/iree.md):
#   - archive bytes against the GGUF file;
#   - one decode step (N 128), the P-64 prefill and the SEQ-64 forward
#     (iree-benchmark-module, median of RUNS, default 3);
#   - peak RSS of `kiln generate --kv-cache` (64-token prompt, up to 64 new
#     tokens) and of `kiln export` (/usr/bin/time -f %M).
# Usage: scripts/bench/quant.sh [RUNS]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
runs="${1:-3}"
smol="$(bash scripts/fetch-smollm2.sh)"
gemma="$(bash scripts/fetch-gemma3.sh)"
bench_setup bench-quant
printf '%-8s %-5s %10s %10s %10s %10s %10s %10s\n' model form "irpa MB" "decode ms" "prefill ms" "fwd64 ms" "gen RSS MB" "exp RSS MB"
for model in smollm2 gemma3; do
  gguf=$smol; [[ $model == gemma3 ]] && gguf=$gemma
  for form in bf16 keep w8a8; do
    n="${model}_${form}"
    bench_kv_form "$gguf" "$n" "$form" 64
    $kiln compile "$out/$n-gen.mlir" --target host >/dev/null 2>&1
    fwd=$(bm "$out/$n-host.vmfb" "$n" "$out/$n.irpa" "1x64xi32=$ids64")
    printf '%-8s %-5s %10s %10.1f %10.1f %10.1f %10s %10s\n' "$model" "$form" \
      "$archive_mb" "$decode" "$prefill" "$fwd" "$gen_rss" "$export_rss"
    rm -f "$out/$n"*
  done
  printf '%-8s %-5s %10s\n' "$model" gguf "$(mb "$(stat -c %s "$gguf")")"
done
