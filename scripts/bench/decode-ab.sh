#!/usr/bin/env bash
# Two builds of one KV pair's decode, A against B, in interleaved rounds on
# this host (2 threads), and llama.cpp's decode beside them when a GGUF is
# given. Each DIR holds a host-compiled KV pair (`kiln export … --kv-cache
# --name NAME`, then `kiln compile DIR/NAME-kv-gen.mlir -t host`): its one
# `*-kv-host.vmfb`, NAME.irpa and NAME.json. A round runs one decode call
# at the pair's last position by iree-benchmark-module (median of RUNS
# calls, default 10) for A and B, alternating which goes first, then
# `llama-bench -p 0 -n 64 -t 2 -r 2` on GGUF. Prints each round, then the
# medians over the rounds. The VM is noisy: compare only one run's figures.
# Usage: [RUNS=10] scripts/bench/decode-ab.sh ROUNDS DIR_A DIR_B [GGUF]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -ge 3 ]] || { sed -n 2,11p "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
rounds="$1"; a="$2"; b="$3"; gguf="${4:-}"
runs="${RUNS:-10}"
bench_setup bench-decode-ab
[[ -n $gguf ]] && llama_bench="$(bash scripts/bench/build-llama.sh)"

# decode DIR: one decode call's median time (ms) of the pair in DIR.
decode() {
  local vmfb json n last caches
  vmfb="$(ls "$1"/*-kv-host.vmfb)"
  json="$(ls "$1"/*.json)"
  n="$(basename "$json" .json)"
  last=$(last_position "$json")
  read -ra caches < <(zero_caches "$json")
  bm "$vmfb" "${n}_decode" "$1/$n.irpa" "1xi32=1234" "i32=$last" "${caches[@]}"
}

# llama: llama.cpp's decode time per token (ms) on $gguf.
llama() {
  LD_LIBRARY_PATH="$(dirname "$llama_bench")" "$llama_bench" -m "$gguf" -p 0 -n 64 -t 2 -r 2 -o json 2>/dev/null |
    python3 -c 'import json, sys; print("%.2f" % (1000 / json.load(sys.stdin)[0]["avg_ts"]))'
}

echo "start: $(uptime)" >&2
echo "round A B${gguf:+ llama.cpp} (ms)"
for r in $(seq "$rounds"); do
  if (( r % 2 )); then ta=$(decode "$a"); tb=$(decode "$b"); else tb=$(decode "$b"); ta=$(decode "$a"); fi
  tl=""; [[ -n $gguf ]] && tl=" $(llama)"
  echo "$r $ta $tb$tl"
done | tee "$out/rounds"
echo "end: $(uptime)" >&2
read -ra med < <(medians "$out/rounds")
python3 - "${med[@]}" <<'EOF'
import sys
med = [float(v) for v in sys.argv[1:]]
line = f"medians: A {med[0]:.2f} ms, B {med[1]:.2f} ms, B/A {med[1] / med[0]:.3f}"
if len(med) > 2:
    line += f"; llama.cpp {med[2]:.2f} ms, A/llama.cpp {med[0] / med[2]:.3f}, B/llama.cpp {med[1] / med[2]:.3f}"
print(line)
EOF
