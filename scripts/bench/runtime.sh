#!/usr/bin/env bash
# kiln's own runtime against IREE's benchmark tool, in one run (issue 52's
# lines): SmolLM2-135M Q4_1, `--weights fast`, KV pair P 64 / N 128, host,
# 2 threads, compiled with and without `kiln compile --pack`. For each module,
# ROUNDS interleaved rounds of:
#   - `kiln generate --kv-cache --tokens <64 ids> --max-new-tokens 64 --json`:
#     its decode ms/token (the mean over 63 decode calls);
#   - the same decode call (position 100) by `iree-benchmark-module` under
#     SCHED_BATCH (lib.sh's `bm`), the median of 3;
#   - start to first id: the wall time of `kiln generate … --max-new-tokens
#     1 --json` minus the prefill seconds it reports.
# Prints one markdown table: the medians over the rounds, the decode ratio
# kiln ÷ iree-benchmark-module and the first id past the prefill. Then the
# same decode in kiln-runtime with the session's SCHED_BATCH policy and
# without it, interleaved (runtime/examples/sched_policy.rs, ROUNDS + 2
# rounds, the module packed at load). The machine must be idle.
# Usage: scripts/bench/runtime.sh [ROUNDS] (default 3)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
rounds="${1:-3}"
runs=3
gguf="$(bash scripts/fetch-smollm2.sh)"
bench_setup bench-runtime
echo "start: $(date -u '+%F %T') UTC, $(git rev-parse --short HEAD), $(uptime)" >&2
"$kiln" export "$gguf" --seq 64 --out "$out/plain" --name smollm2 --weights fast \
  --kv-cache --prompt-len 64 --max-context 128 -q >/dev/null
cp -r "$out/plain" "$out/pack"
"$kiln" compile "$out/plain/smollm2-kv-gen.mlir" --target host -q >/dev/null
"$kiln" compile "$out/pack/smollm2-kv-gen.mlir" --target host --pack -q >/dev/null
read -ra caches < <(zero_caches "$out/plain/smollm2.json")
# JSON_FILE -> "decode_ms_per_token prefill_seconds"
figures() {
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["decode"]["ms_per_token"] or 0, r["prefill"]["seconds"])' "$1"
}
for form in plain pack; do
  dir="$out/$form"
  : >"$out/$form.rounds"
  for r in $(seq "$rounds"); do
    "$kiln" generate "$dir/smollm2-kv-host.vmfb" --kv-cache --tokens "$ids64" \
      --max-new-tokens 64 --json >"$out/gen.json" 2>/dev/null
    read -r kiln_decode _ < <(figures "$out/gen.json")
    bench_decode=$(bm "$dir/smollm2-kv-host.vmfb" smollm2_decode "$dir/smollm2.irpa" \
      "1xi32=1234" "i32=100" "${caches[@]}")
    t0=$(date +%s.%N)
    "$kiln" generate "$dir/smollm2-kv-host.vmfb" --kv-cache --tokens "$ids64" \
      --max-new-tokens 1 --json >"$out/first.json" 2>/dev/null
    t1=$(date +%s.%N)
    read -r _ prefill_s < <(figures "$out/first.json")
    wall_ms=$(python3 -c "print(($t1 - $t0) * 1000)")
    prefill_ms=$(python3 -c "print($prefill_s * 1000)")
    past_ms=$(python3 -c "print($wall_ms - $prefill_ms)")
    echo "$r $kiln_decode $bench_decode $wall_ms $prefill_ms $past_ms" >>"$out/$form.rounds"
  done
done
echo "end: $(date -u '+%F %T') UTC, $(uptime)" >&2
echo "| module | kiln generate decode ms/token | iree-benchmark-module decode ms | kiln ÷ benchmark | start to first id ms | prefill ms | first id past the prefill ms |"
echo "|---|---|---|---|---|---|---|"
for form in plain pack; do
  read -r kd bd wall pre past < <(medians "$out/$form.rounds")
  label="fast, packed at load"
  [[ $form == pack ]] && label="fast, \`--pack\`"
  python3 -c "print(f'| $label | {$kd:.2f} | {$bd:.2f} | {$kd / $bd:.2f}× | {$wall:.0f} | {$pre:.0f} | {$past:.0f} |')"
done
echo
cargo build --release -q -p kiln-runtime --example sched_policy
"$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/examples/sched_policy" \
  "$out/plain/smollm2-kv-host.vmfb" "$out/plain/smollm2.irpa" "$out/plain/smollm2.json" \
  $((rounds + 2)) | tail -1
