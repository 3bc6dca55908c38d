#!/usr/bin/env bash
# Where a decode step's CPU time goes, kiln's `--weights fast` against
# llama.cpp on the same GGUF, in one run (host, 2 threads): SmolLM2-135M
# Q4_1 and Gemma 3 270M Q4_K_M. For each model, ROUNDS interleaved rounds of
#   - kiln: the KV pair (`kiln export GGUF --seq 64 --kv-cache --prompt-len 64
#     --max-context 128 --weights fast`, `kiln compile … -t host`, kiln's CPU
#     preset), $CALLS (default 800) decode calls at position 127 by
#     iree-benchmark-module (local-task, under SCHED_BATCH as kiln's session
#     runs) under `perf record -e cpu-clock -F 1000` (a software clock: it
#     samples in a VM without a PMU too), from 2 s in (after the load);
#   - llama.cpp: `llama-bench -p 0 -n 64 -t 2 -r 10` under the same perf,
#     from 1 s in.
# Each recording is split by scripts/dev/profile_split.py into core-ms per token
# for the products, the other ops, the runtime's threads and the caller.
# Prints one markdown row per model, runtime and round. Needs `perf` (Linux
# perf_events) and objdump; the suite does not use this script.
# Usage: scripts/dev/profile-decode.sh [ROUNDS] (default 3)
set -euo pipefail
. "$(dirname "$0")/../bench/lib.sh"
rounds="${1:-3}"
command -v perf >/dev/null || { echo "profile-decode: perf not found (install linux-perf)" >&2; exit 1; }
command -v objdump >/dev/null || { echo "profile-decode: objdump not found (install binutils)" >&2; exit 1; }
llama_bench="$(bash scripts/bench/build-llama.sh)"
smol="$(bash scripts/fetch-smollm2.sh)"
gemma="$(bash scripts/fetch-gemma3.sh)"
bench_setup profile-decode
echo "start: $(uptime)" >&2
echo "| model | runtime | round | ms/token | products | other ops | runtime threads | caller | total core-ms |"
echo "|---|---|---|---|---|---|---|---|---|"
for model in smollm2 gemma3; do
  gguf=$smol; [[ $model == gemma3 ]] && gguf=$gemma
  n="${model}_fast"
  "$kiln" export "$gguf" --seq 64 --out "$out" --name "$n" --weights fast --kv-cache \
    --prompt-len 64 --max-context 128 -q >/dev/null 2>&1
  # The dump flag leaves the .vmfb byte-identical; the ELF is what perf
  # sees as anonymous memory.
  "$kiln" compile "$out/$n-kv-gen.mlir" --target host -q -- \
    --iree-hal-dump-executable-binaries-to="$out/bin-$model" >/dev/null 2>&1
  elf="$(ls "$out/bin-$model"/*.so | head -1)"
  read -ra caches < <(zero_caches "$out/$n.json")
  for r in $(seq "$rounds"); do
    perf record -q -e cpu-clock -F 1000 -D 2000 -o "$out/k.data" -- chrt -b 0 "$bench" --device=local-task \
      --module="$out/$n-kv-host.vmfb" --parameters=model="$out/$n.irpa" --function="${n}_decode" \
      --input=1xi32=1234 --input=i32=127 "${caches[@]/#/--input=}" --benchmark_repetitions=1 \
      --benchmark_min_time="${CALLS:-800}x" >"$out/k.txt" 2>/dev/null
    ms=$(awk '/^BM_/ {for (i=1;i<=NF;i++) if ($(i+1)=="ms") {print $i; exit}}' "$out/k.txt")
    split=$(python3 scripts/dev/profile_split.py kiln "$out/k.data" "$ms" "$elf" | awk '{printf "%s | ", $2}')
    echo "| $model | kiln fast | $r | $ms | ${split% | } |"
    LD_LIBRARY_PATH="$(dirname "$llama_bench")" perf record -q -e cpu-clock -F 1000 -D 1000 -o "$out/l.data" -- \
      "$llama_bench" -m "$gguf" -p 0 -n 64 -t 2 -r 10 -o json >"$out/l.json" 2>/dev/null
    ms=$(python3 -c "import json; r=json.load(open('$out/l.json'))[0]; print(f\"{1000 / r['avg_ts']:.1f}\")")
    split=$(python3 scripts/dev/profile_split.py llama "$out/l.data" "$ms" | awk '{printf "%s | ", $2}')
    echo "| $model | llama.cpp | $r | $ms | ${split% | } |"
  done
done
echo "end: $(uptime)" >&2
