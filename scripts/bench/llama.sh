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
# MODELS="smollm2" (or "gemma3") runs one model only. The rows are
# bench_vs_llama's (lib.sh); scripts/bench/stand.sh measures the same ones,
# with the peer path, for docs/benchmarks.md.
# Prints a markdown table (file MB, prefill 64 ms, decode ms/token, peak RSS
# MB) and a mermaid bar chart of decode ms/token.
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
forms="${FORMS:-bf16 keep w8a8 w8a16}"
pack_forms="${PACK_FORMS:-}"
echo "start: $(uptime)" >&2
for model in ${MODELS:-smollm2 gemma3}; do
  gguf=$smol; [[ $model == gemma3 ]] && gguf=$gemma
  bench_vs_llama "$model" "$gguf" >>"$out/rows.tsv"
done
echo "end: $(uptime)" >&2
echo "| model | runtime / form | file MB | prefill 64 ms | decode ms/token | peak RSS MB |"
echo "|---|---|---|---|---|---|"
awk -F'\t' '{
  file = $3; if ($4 != "-") file = file " + " $4 " packed"
  printf "| %s | %s | %s | %s | %s | %s |\n", ($1 == last ? "" : $1), $2, file, $5, $6, $7
  last = $1
}' "$out/rows.tsv"
echo
echo '```mermaid'
echo 'xychart-beta horizontal'
echo '    title "decode, ms per token (host, 2 threads; lower is better)"'
echo "    x-axis [$(awk -F'\t' '{l = $2; sub(/^kiln /, "", l); printf "%s\"%s %s\"", (NR > 1 ? "," : ""), $1, l}' "$out/rows.tsv")]"
echo '    y-axis "ms per token"'
echo "    bar [$(cut -f6 "$out/rows.tsv" | paste -sd,)]"
echo '```'
