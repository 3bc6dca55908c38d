# The one setup library of scripts/bench/ and scripts/dev/, sourced first
# (`. "$(dirname "$0")/lib.sh"`): it goes to the repository root, sets CACHE
# by kiln's cache rule (scripts/cache-dir.sh) and defines the helpers below.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
. scripts/cache-dir.sh

# bench_build: builds kiln (release) and sets $kiln to its absolute path
# (under $CARGO_TARGET_DIR when it is set, else target/).
bench_build() {
  cargo build --release -q -p kiln-cli --bin kiln
  kiln="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/kiln"
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
  bench_kv_export "$gguf" "$n" "$form"
  "$kiln" compile "$out/$n-kv-gen.mlir" --target host -q "$@" >/dev/null 2>&1
  local caches
  read -ra caches < <(zero_caches "$out/$n.json")
  decode=$(bm "$out/$n-kv-host.vmfb" "${n}_decode" "$out/$n.irpa" "1xi32=1234" "i32=127" "${caches[@]}")
  prefill=$(bm "$out/$n-kv-host.vmfb" "${n}_prefill" "$out/$n.irpa" "1x64xi32=$ids64" "i32=0" "i32=64" "${caches[@]}")
  /usr/bin/time -f %M -o "$out/rss" "$kiln" generate "$out/$n-kv-host.vmfb" --kv-cache --tokens "$ids64" \
    --max-new-tokens "$new" >/dev/null 2>&1
  gen_rss=$(( $(tail -1 "$out/rss") / 1024 ))
}

# bench_kv_export GGUF NAME FORM: `kiln export GGUF --seq 64 --kv-cache
# --prompt-len 64 --max-context 128 --weights FORM` as NAME into $out (its
# messages shown only when it fails); sets $export_rss (peak RSS, MB) and
# $archive_mb (NAME.irpa, MB).
bench_kv_export() {
  /usr/bin/time -f %M -o "$out/rss" "$kiln" export "$1" --seq 64 --out "$out" --name "$2" \
    --weights "$3" --kv-cache --prompt-len 64 --max-context 128 -q >/dev/null 2>"$out/export.log" \
    || { cat "$out/export.log" >&2; return 1; }
  export_rss=$(( $(tail -1 "$out/rss") / 1024 ))
  archive_mb=$(mb "$(stat -c %s "$out/$2.irpa")")
}

# medians ROUNDS_FILE: the median of each figure column over the rounds
# (lines "ROUND FIGURE…"; other lines are skipped), space-separated.
medians() {
  python3 -c '
import statistics, sys
rows = [list(map(float, l.split()[1:])) for l in open(sys.argv[1]) if l[:1].isdigit()]
print(" ".join(str(statistics.median(c)) for c in zip(*rows)))' "$1"
}

# bench_llama_cpp GGUF: llama.cpp's llama-bench ($llama_bench, which
# scripts/bench/build-llama.sh builds and prints) on GGUF: pp64 and tg64,
# 2 threads, $runs repetitions. Sets $llama_prefill (ms of the 64-token
# prefill) and $llama_decode (ms per decoded token), both from llama-bench's
# mean tokens/s, and $llama_rss (peak RSS of the llama-bench process, MB).
# Needs $out.
bench_llama_cpp() {
  LD_LIBRARY_PATH="$(dirname "$llama_bench")" /usr/bin/time -f %M -o "$out/rss" \
    "$llama_bench" -m "$1" -p 64 -n 64 -t 2 -r "$runs" -o json >"$out/llama.json" 2>/dev/null
  read -r llama_prefill llama_decode < <(python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))
pp = next(r for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
tg = next(r for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
print("%.1f %.1f" % (pp["n_prompt"] / pp["avg_ts"] * 1000, 1000 / tg["avg_ts"]))' "$out/llama.json")
  llama_rss=$(( $(tail -1 "$out/rss") / 1024 ))
  [[ -n $llama_decode ]] || { echo "bench_llama_cpp: no figures from llama-bench on $1" >&2; return 1; }
}

# bench_vs_llama MODEL GGUF: one model against llama.cpp, the rows of
# scripts/bench/llama.sh and stand.sh: llama.cpp (bench_llama_cpp), then
# kiln's weight forms $forms, then the forms $pack_forms compiled with `kiln
# compile --pack` (bench_kv_form, 32 new tokens), in that order. Prints one
# tab-separated line per row:
#   MODEL RUNTIME ARCHIVE_MB PACKED_MB PREFILL_MS DECODE_MS PEAK_RSS_MB
# RUNTIME is "llama.cpp", "kiln FORM" or "kiln FORM --pack"; ARCHIVE_MB is
# the GGUF's size for llama.cpp; PACKED_MB is the packed archive of a --pack
# row, "-" elsewhere. Each row is also logged on stderr. Needs $kiln,
# $bench, $out, $runs and $llama_bench.
bench_vs_llama() {
  local model="$1" gguf="$2" form n packed
  _vs_llama_row() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$@"
    local packed_note=""
    [[ $3 != - ]] && packed_note=" + $3 packed"
    echo "  $model $1: archive $2$packed_note MB, prefill $4 ms, decode $5 ms/token, peak RSS $6 MB" >&2
  }
  bench_llama_cpp "$gguf"
  _vs_llama_row llama.cpp "$(mb "$(stat -c %s "$gguf")")" - "$llama_prefill" "$llama_decode" "$llama_rss"
  for form in $forms; do
    n="${model}_${form}"
    bench_kv_form "$gguf" "$n" "$form" 32
    _vs_llama_row "kiln $form" "$archive_mb" - "$prefill" "$decode" "$gen_rss"
    rm -f "$out/$n"*
  done
  for form in $pack_forms; do
    n="${model}_${form}_pack"
    bench_kv_form "$gguf" "$n" "$form" 32 --pack
    packed=$(mb "$(stat -c %s "$out/$n-kv-host.packed.irpa")")
    _vs_llama_row "kiln $form --pack" "$archive_mb" "$packed" "$prefill" "$decode" "$gen_rss"
    rm -f "$out/$n"*
  done
}
