#!/usr/bin/env bash
# One KV pair on IREE's worker threads (local-task, 2 cores here), on them
# under the SCHED_BATCH policy (as kiln's session runs: `chrt -b 0`), and on
# the calling thread alone (local-sync), against llama.cpp on 2 threads and
# on 1, in interleaved rounds on this host. DIR holds a host-compiled KV pair
# (`kiln export GGUF … --kv-cache --prompt-len 64 --max-context 128 --name
# NAME`, then `kiln compile DIR/NAME-kv-gen.mlir -t host`): its one
# `*-kv-host.vmfb`, NAME.irpa and NAME.json. A round times one decode call
# at the pair's last position and one 64-token prefill (iree-benchmark-
# module, median of RUNS calls, default 10) each way, in a rotating order, then `llama-bench -p 64 -n 64 -r 2` with -t 2 and -t 1
# on GGUF. Prints each round, then the medians over the rounds. The VM is
# noisy: compare only one run's figures.
# Usage: [RUNS=10] scripts/bench/threads.sh ROUNDS DIR GGUF
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[[ $# -eq 3 ]] || { sed -n 2,13p "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
rounds="$1"; dir="$2"; gguf="$3"
runs="${RUNS:-10}"
bench_setup bench-threads
llama_bench="$(bash scripts/bench/build-llama.sh)"
vmfb="$(ls "$dir"/*-kv-host.vmfb)"
json="$(ls "$dir"/*.json)"
n="$(basename "$json" .json)"
last=$(last_position "$json")
read -ra caches < <(zero_caches "$json")

# kiln_on DEVICE [BATCH]: "decode prefill" (ms) of the pair on DEVICE,
# under SCHED_BATCH when BATCH is 1.
kiln_on() {
  local device="$1" batch="${2:-0}" d p
  d=$(bm "$vmfb" "${n}_decode" "$dir/$n.irpa" "1xi32=1234" "i32=$last" "${caches[@]}")
  p=$(bm "$vmfb" "${n}_prefill" "$dir/$n.irpa" "1x64xi32=$ids64" "i32=0" "i32=64" "${caches[@]}")
  echo "$d $p"
}

# llama THREADS: llama.cpp's "decode-per-token prefill-64" (ms) on $gguf.
llama() {
  LD_LIBRARY_PATH="$(dirname "$llama_bench")" "$llama_bench" -m "$gguf" -p 64 -n 64 -t "$1" -r 2 -o json 2>/dev/null |
    python3 -c '
import json, sys
rows = json.load(sys.stdin)
pre = next(r for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
dec = next(r for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
print("%.2f %.1f" % (1000 / dec["avg_ts"], pre["avg_ns"] / 1e6))'
}

echo "start: $(uptime)" >&2
echo "round | decode: task task-batch sync llama-t2 llama-t1 | prefill 64: the same (ms)"
for r in $(seq "$rounds"); do
  case $(( r % 3 )) in
    1) read -r dt pt < <(kiln_on local-task); read -r db pb < <(kiln_on local-task 1); read -r ds ps < <(kiln_on local-sync) ;;
    2) read -r db pb < <(kiln_on local-task 1); read -r ds ps < <(kiln_on local-sync); read -r dt pt < <(kiln_on local-task) ;;
    0) read -r ds ps < <(kiln_on local-sync); read -r dt pt < <(kiln_on local-task); read -r db pb < <(kiln_on local-task 1) ;;
  esac
  read -r d2 p2 < <(llama 2); read -r d1 p1 < <(llama 1)
  echo "$r $dt $db $ds $d2 $d1 $pt $pb $ps $p2 $p1"
done | tee "$out/rounds"
echo "end: $(uptime)" >&2
read -ra m < <(medians "$out/rounds")
python3 - "${m[@]}" <<'PY'
import sys
m = [float(v) for v in sys.argv[1:]]
for what, o, f in (("decode ms", 0, "%.2f"), ("prefill 64 ms", 5, "%.1f")):
    t, b, y, l2, l1 = m[o:o + 5]
    print(f"medians, {what}: local-task {f % t}, under SCHED_BATCH {f % b}, local-sync {f % y}, "
          f"llama.cpp -t 2 {f % l2}, -t 1 {f % l1}; kiln/llama.cpp -t 2: task {t / l2:.3f}, "
          f"batch {b / l2:.3f}, sync {y / l2:.3f}")
PY
