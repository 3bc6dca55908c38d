# The one setup library of scripts/bench/ and scripts/dev/, sourced first
# (`. "$(dirname "$0")/lib.sh"`): it goes to the repository root, sets CACHE
# by kiln's cache rule (scripts/cache-dir.sh) and defines the helpers below.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/cache-dir.sh

# bench_build: builds kiln (release) and sets $kiln to its absolute path.
bench_build() {
  cargo build --release -q -p kiln-cli --bin kiln
  kiln="$PWD/target/release/kiln"
}

# bench_tool NAME: the path of the IREE tool NAME (iree-benchmark-module,
# iree-convert-parameters, …) as `kiln toolchain` reports it; needs $kiln.
bench_tool() {
  "$kiln" toolchain 2>/dev/null | awk -v k="$1:" '$1 == k {print $2}'
}

# bench_setup NAME: bench_build, then sets $bench (iree-benchmark-module)
# and $out (a temporary directory removed on exit).
bench_setup() {
  bench_build
  bench="$(bench_tool iree-benchmark-module)"
  [[ -x "$bench" ]] || { echo "$1: iree-benchmark-module not found (run kiln toolchain install)" >&2; exit 1; }
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
}

# bm VMFB FUNCTION PARAMS INPUT...: the median real time (ms) of one call
# over $runs repetitions (the one time when $runs is 1: iree-benchmark-module
# prints no median row then). A module compiled with `kiln compile --pack`
# also reads its packed archive (VMFB's stem + .packed.irpa, scope packed).
# The device is $device when set (local-sync: the calling thread alone),
# else local-task (IREE's worker threads). The run is under the SCHED_BATCH
# policy (`chrt -b 0`), as kiln's session runs (spec/iree.md, "The
# session's scheduling policy"), unless $batch is 0.
bm() {
  local vmfb="$1" fn="$2" params="$3"; shift 3
  local args=()
  for i in "$@"; do args+=("--input=$i"); done
  local packed="${vmfb%.vmfb}.packed.irpa"
  [[ -f "$packed" ]] && args+=("--parameters=packed=$packed")
  local wrap=()
  [[ ${batch:-1} == 1 ]] && wrap=(chrt -b 0)
  "${wrap[@]}" "$bench" --device="${device:-local-task}" --module="$vmfb" --parameters=model="$params" --function="$fn" \
    "${args[@]}" --benchmark_repetitions="$runs" --benchmark_min_time=1x 2>/dev/null |
    awk -v runs="$runs" '(runs == 1 && /^BM_/) || /_median/ {for (i=1;i<=NF;i++) if ($(i+1)=="ms") {print $i; exit}}'
}

# zero_caches MANIFEST: the KV caches' zeroed inputs of the export whose
# manifest is MANIFEST, one `SHAPExDTYPE=0` per cache (K and V of each
# cache set), space-separated, for iree-benchmark-module's --input.
zero_caches() {
  python3 -c 'import json,sys; k=json.load(open(sys.argv[1]))["kv"]; t="x".join(map(str,k["cache_shape"]))+"x"+k["cache_dtype"]+"=0"; print(" ".join([t]*(2*k.get("cache_count",1))))' "$1"
}

# last_position MANIFEST: the last position of the KV pair whose manifest
# is MANIFEST (its max context N - 1), where the decode benchmarks run.
last_position() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kv"]["max_context"] - 1)' "$1"
}

# A 64-token prompt of ids every benchmarked vocabulary holds, and bytes as
# whole MB.
ids64=$(python3 -c 'print(",".join(str(1000 + 37 * i % 9000) for i in range(64)))')
mb() { python3 -c "print(f'{$1 / 1e6:.0f}')"; }

# bench_kv_form GGUF NAME FORM NEW_TOKENS [COMPILE_FLAG...]: one weight form's
# KV pair, the setup every per-form table shares. Exports GGUF as NAME (`kiln
# export --seq 64 --kv-cache --prompt-len 64 --max-context 128 --weights
# FORM`), compiles NAME-kv-gen.mlir for the host with kiln's CPU preset plus
# COMPILE_FLAGs, and sets:
#   $archive_mb  NAME.irpa in MB;
#   $export_rss  peak RSS of the export, MB;
#   $decode      one decode call at position 127, ms (median of $runs);
#   $prefill     the 64-token prefill, ms (median of $runs);
#   $gen_rss     peak RSS of `kiln generate --kv-cache` on the 64-token
#                prompt with NEW_TOKENS new tokens, MB.
# The files stay in $out (NAME*) for the caller to use or remove.
bench_kv_form() {
  local gguf="$1" n="$2" form="$3" new="$4"; shift 4
  /usr/bin/time -f %M -o "$out/rss" "$kiln" export "$gguf" --seq 64 --out "$out" --name "$n" \
    --weights "$form" --kv-cache --prompt-len 64 --max-context 128 -q >/dev/null 2>&1
  export_rss=$(( $(tail -1 "$out/rss") / 1024 ))
  "$kiln" compile "$out/$n-kv-gen.mlir" --target host -q "$@" >/dev/null 2>&1
  local caches
  read -ra caches < <(zero_caches "$out/$n.json")
  decode=$(bm "$out/$n-kv-host.vmfb" "${n}_decode" "$out/$n.irpa" "1xi32=1234" "i32=127" "${caches[@]}")
  prefill=$(bm "$out/$n-kv-host.vmfb" "${n}_prefill" "$out/$n.irpa" "1x64xi32=$ids64" "i32=0" "i32=64" "${caches[@]}")
  /usr/bin/time -f %M -o "$out/rss" "$kiln" generate "$out/$n-kv-host.vmfb" --kv-cache --tokens "$ids64" \
    --max-new-tokens "$new" >/dev/null 2>&1
  gen_rss=$(( $(tail -1 "$out/rss") / 1024 ))
  archive_mb=$(mb "$(stat -c %s "$out/$n.irpa")")
}

# medians ROUNDS_FILE: the median of each figure column over the rounds
# (lines "ROUND FIGURE…"; other lines are skipped), space-separated.
medians() {
  python3 -c '
import statistics, sys
rows = [list(map(float, l.split()[1:])) for l in open(sys.argv[1]) if l[:1].isdigit()]
print(" ".join(str(statistics.median(c)) for c in zip(*rows)))' "$1"
}
