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
# Usage: scripts/bench-quant.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
smol="$(bash scripts/fetch-smollm2.sh)"
gemma="$(bash scripts/fetch-gemma3.sh)"
. scripts/bench-lib.sh
bench_setup bench-quant
ids64=$(python3 -c 'print(",".join(str(1000 + 37 * i % 9000) for i in range(64)))')

printf '%-8s %-5s %10s %10s %10s %10s %10s %10s\n' model form "irpa MB" "decode ms" "prefill ms" "fwd64 ms" "gen RSS MB" "exp RSS MB"
for model in smollm2 gemma3; do
  gguf=$smol; [[ $model == gemma3 ]] && gguf=$gemma
  for form in bf16 keep w8a8; do
    n="${model}_${form}"
    /usr/bin/time -f %M -o "$out/rss" "$kiln" export "$gguf" --seq 64 --out "$out" --name "$n" --weights "$form" \
      --kv-cache --prompt-len 64 --max-context 128 >/dev/null 2>&1
    exp_rss=$(tail -1 "$out/rss")
    $kiln compile "$out/$n-kv-gen.mlir" --target host >/dev/null 2>&1
    $kiln compile "$out/$n-gen.mlir" --target host >/dev/null 2>&1
    read -r cache count dtype < <(python3 -c "import json; k=json.load(open('$out/$n.json'))['kv']; print('x'.join(map(str, k['cache_shape'])), k.get('cache_count', 1), k['cache_dtype'])")
    caches=()
    for _ in $(seq $((2 * count))); do caches+=("${cache}x${dtype}=0"); done
    decode=$(bm "$out/$n-kv-host.vmfb" "${n}_decode" "$out/$n.irpa" "1xi32=1234" "i32=127" "${caches[@]}")
    prefill=$(bm "$out/$n-kv-host.vmfb" "${n}_prefill" "$out/$n.irpa" "1x64xi32=$ids64" "i32=0" "i32=64" "${caches[@]}")
    fwd=$(bm "$out/$n-host.vmfb" "$n" "$out/$n.irpa" "1x64xi32=$ids64")
    /usr/bin/time -f %M -o "$out/rss" "$kiln" generate "$out/$n-kv-host.vmfb" --kv-cache --tokens "$ids64" \
      --max-new-tokens 64 >/dev/null 2>&1
    gen_rss=$(tail -1 "$out/rss")
    printf '%-8s %-5s %10.1f %10.1f %10.1f %10.1f %10.0f %10.0f\n' "$model" "$form" \
      "$(echo "$(stat -c %s "$out/$n.irpa") / 1000000" | bc -l)" "$decode" "$prefill" "$fwd" \
      "$(echo "$gen_rss / 1024" | bc -l)" "$(echo "$exp_rss / 1024" | bc -l)"
  done
  printf '%-8s %-5s %10.1f\n' "$model" gguf "$(echo "$(stat -c %s "$gguf") / 1000000" | bc -l)"
done
