#!/usr/bin/env bash
# kiln against llama.cpp, in one run, on the host (2 threads): SmolLM2-135M
# Q4_1 and Gemma 3 270M Q4_K_M, the same GGUF files. For each model:
#   - llama.cpp's llama-bench (built once by scripts/bench/build-llama.sh):
#     pp64 (prefill of 64 tokens) and tg64 (decode), -t 2 -r RUNS, peak RSS
#     of the llama-bench process;
#   - kiln's weight forms ($FORMS, default bf16 keep w8a8 w8a16): `kiln
#     export GGUF --seq 64
#     --kv-cache --prompt-len 64 --max-context 128 --weights FORM`, `kiln
#     compile … -t host` (kiln's CPU preset), one decode call at position 127
#     and the 64-token prefill by iree-benchmark-module (median of RUNS),
#     peak RSS of `kiln generate --kv-cache` (64-token prompt, 32 new tokens);
#   - the forms in $PACK_FORMS (default none, e.g. PACK_FORMS=w8a16) again,
#     compiled with `kiln compile --pack` (the memory line of issue 29).
# MODELS="smollm2" (or "gemma3") runs one model only.
# Prints a markdown table (file MB, prefill 64 ms, decode ms/token, peak RSS
# MB) and a mermaid bar chart of decode ms/token, for docs/benchmarks.md.
# The machine must be idle: llama.cpp's threads spin-wait and collapse
# under CPU contention (20-100x), where IREE slows 4-5x; `uptime` is
# printed before and after. Usage: scripts/bench/llama.sh [RUNS] (default 3)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
runs="${1:-3}"
llama_bench="$(bash scripts/bench/build-llama.sh)"
smol="$(bash scripts/fetch-smollm2.sh)"
gemma="$(bash scripts/fetch-gemma3.sh)"
bench_setup bench-llama
echo "start: $(uptime)" >&2
rows=()
chart_labels=()
chart_values=()
for model in ${MODELS:-smollm2 gemma3}; do
  gguf=$smol; [[ $model == gemma3 ]] && gguf=$gemma
  LD_LIBRARY_PATH="$(dirname "$llama_bench")" /usr/bin/time -f %M -o "$out/rss" \
    "$llama_bench" -m "$gguf" -p 64 -n 64 -t 2 -r "$runs" -o json >"$out/llama.json" 2>/dev/null
  read -r pre dec < <(python3 - "$out/llama.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
pp = next(r for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
tg = next(r for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
print(f"{pp['n_prompt'] / pp['avg_ts'] * 1000:.1f} {1000 / tg['avg_ts']:.1f}")
PY
  )
  rows+=("| $model | llama.cpp | $(mb "$(stat -c %s "$gguf")") | $pre | $dec | $(( $(tail -1 "$out/rss") / 1024 )) |")
  chart_labels+=("\"$model llama.cpp\""); chart_values+=("$dec")
  for form in ${FORMS:-bf16 keep w8a8 w8a16}; do
    n="${model}_${form}"
    bench_kv_form "$gguf" "$n" "$form" 32
    rows+=("| | kiln $form | $archive_mb | $prefill | $decode | $gen_rss |")
    chart_labels+=("\"$model $form\""); chart_values+=("$decode")
    rm -f "$out/$n"*
  done
  for form in ${PACK_FORMS:-}; do
    n="${model}_${form}_pack"
    bench_kv_form "$gguf" "$n" "$form" 32 --pack
    packed_mb=$(mb "$(stat -c %s "$out/$n-kv-host.packed.irpa")")
    rows+=("| | kiln $form --pack | $archive_mb + $packed_mb packed | $prefill | $decode | $gen_rss |")
    chart_labels+=("\"$model $form --pack\""); chart_values+=("$decode")
    rm -f "$out/$n"*
  done
done
echo "end: $(uptime)" >&2
echo "| model | runtime / form | file MB | prefill 64 ms | decode ms/token | peak RSS MB |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo '```mermaid'
echo 'xychart-beta horizontal'
echo '    title "decode, ms per token (host, 2 threads; lower is better)"'
echo "    x-axis [$(IFS=,; echo "${chart_labels[*]}")]"
echo '    y-axis "ms per token"'
echo "    bar [$(IFS=,; echo "${chart_values[*]}")]"
echo '```'
