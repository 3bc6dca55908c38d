#!/usr/bin/env bash
# Long-context KV-cache benchmark (issue 32): SmolLM2-135M-Instruct Q4_1 on
# the host, 2 threads, kiln against llama.cpp's llama-bench on the same GGUF,
# in one run:
#   - decode, one token at depth 0, 512 and 2000 with N = 4096: the span
#     function kiln's driver picks for that position (iree-benchmark-module),
#     against llama-bench's `tg32 @ dD` (-n 32 -d 0,512,2000);
#   - decode at position 64, N = 4096 (its 256 span, and the function over
#     all N) against the same weights' pair with N = 128, alternately;
#   - a 1500-token prompt: `kiln generate --kv-cache --json` (prefill in
#     chunks of P = 64, each on the smallest span holding it; prefill
#     seconds and peak RSS) against llama-bench's `pp1500` (-p 1500);
#   - decode after a 2000-token prompt through `kiln generate` (the whole
#     driver: session, span switches), ms per token;
#   - each for the default bf16 weights and for `--weights w8a8` (the
#     fastest CPU form), and "today's" module (f32 caches, no spans) for
#     reference; the caches' bytes from the manifests.
# llama-bench: $LLAMA_BENCH, else scripts/bench/build-llama.sh's (built once into
# kiln's cache folder); when that build fails the llama.cpp column is left
# out. The machine is shared: `uptime` is
# printed before and after, so a run can be judged (re-run in a quiet
# window; all figures of one run compare with each other).
# Usage: scripts/bench/kv.sh [RUNS] [build]   (RUNS repetitions per figure,
# default 3). With KILN_BENCH_DIR=DIR the modules are exported and compiled
# into DIR and kept, and a later run with the same DIR reuses them, so the
# measuring run is short; `build` only builds them.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
runs="${1:-3}"
build_only="${2:-}"
gguf="$(bash scripts/fetch-smollm2.sh)"
bench_setup bench-kv
if [[ -n "${KILN_BENCH_DIR:-}" ]]; then
  rm -rf "$out"; trap - EXIT
  out="$KILN_BENCH_DIR"; mkdir -p "$out"
fi
llama="${LLAMA_BENCH:-$(bash scripts/bench/build-llama.sh || true)}"
export KILN_TASK_GROUPS=2

# The modules: P = 64 everywhere; N 128 and N 4096 (default spans 256,
# 512, 1024, 2048) for bf16 and w8a8 weights; today's form (f32 caches, no
# spans) at N 4096.
ex() { # ex --name NAME FLAGS...: exported once (kept in KILN_BENCH_DIR)
  [[ -f "$out/$2.json" && -f "$out/$2-kv-gen.mlir" ]] || $kiln export "$gguf" --seq 64 --out "$out" --kv-cache --prompt-len 64 -q "$@"
}
ex --name b128 --max-context 128 --kv-dtype bf16
ex --name b4k --max-context 4096 --kv-dtype bf16
ex --name f4k --max-context 4096 --kv-dtype f32 --kv-spans none
ex --name w128 --max-context 128 --kv-dtype bf16 --weights w8a8
ex --name w4k --max-context 4096 --kv-dtype bf16 --weights w8a8
for m in b128 b4k f4k w128 w4k; do
  [[ -f "$out/$m-kv-host.vmfb" ]] && continue
  t0=$(date +%s)
  $kiln compile "$out/$m-kv-gen.mlir" --target host -q >/dev/null
  echo "compiled $m in $(($(date +%s) - t0)) s"
done
[[ "$build_only" == build ]] && { echo "built into $out"; exit 0; }
echo "measuring: $(date -u '+%Y-%m-%d %H:%M UTC'); $(uptime)"

# kv NAME KEY: a field of NAME.json's kv record (python's repr).
kv() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kv"].get(sys.argv[2]))' "$out/$1.json" "$2"; }
# caches NAME: the two --input values of zeroed caches; cache_mb NAME: K+V in MB.
caches() { zero_caches "$out/$1.json"; }
cache_mb() {
  python3 -c 'import json,sys,math; k=json.load(open(sys.argv[1]))["kv"]; b={"f32":4,"bf16":2}[k["cache_dtype"]]; print("%.1f" % (2*k.get("cache_count",1)*math.prod(k["cache_shape"])*b/1e6))' "$out/$1.json"
}
# span NAME POSITION: the decode function kiln's driver runs at POSITION
# (the smallest span above it, else the pair's own); spanp NAME END the
# prefill for a chunk ending at END.
span() {
  python3 - "$out/$1.json" "$2" "$3" <<'PY'
import json, sys
kv = json.load(open(sys.argv[1]))["kv"]
which, pos = sys.argv[2], int(sys.argv[3])
fits = [s for s in kv.get("spans", []) if (pos < s["span"] if which == "decode" else pos <= s["span"])]
print(fits[0][which] if fits else kv[which])
PY
}
# b2 VMFB FUNCTION PARAMS INPUT...: median ms of one call, 2 worker groups.
b2() {
  local vmfb="$1" fn="$2" params="$3"; shift 3
  local args=()
  for i in "$@"; do args+=("--input=$i"); done
  "$bench" --device=local-task --task_topology_group_count=2 --module="$vmfb" --parameters=model="$params" \
    --function="$fn" "${args[@]}" --benchmark_repetitions="$runs" --benchmark_min_time=5x 2>/dev/null |
    awk '/real_time_median/ {for (i=1;i<=NF;i++) if ($(i+1)=="ms") {print $i; exit}}'
}
dec() { # dec NAME POSITION [FUNCTION]: one decode at POSITION
  local fn="${3:-$(span "$1" decode "$2")}"
  # shellcheck disable=SC2046
  b2 "$out/$1-kv-host.vmfb" "$fn" "$out/$1.irpa" "1xi32=1234" "i32=$2" $(caches "$1")
}
pre() { # pre NAME START: one 64-token prefill chunk at START
  # shellcheck disable=SC2046
  b2 "$out/$1-kv-host.vmfb" "$(span "$1" prefill $(($2 + 64)))" "$out/$1.irpa" "1x64xi32=$ids64" "i32=$2" "i32=64" $(caches "$1")
}

# Decode at position 64, N 4096 against N 128, alternately (same weights).
declare -A d64
for _ in 1 2 3; do
  for w in b w; do
    d64[$w.128]+="$(dec ${w}128 64) "
    d64[$w.4k]+="$(dec ${w}4k 64) "
    d64[$w.4kfull]+="$(dec ${w}4k 64 "$(kv ${w}4k decode)") "
  done
done
d64[f.4k]="$(dec f4k 64) $(dec f4k 64) $(dec f4k 64)"
med() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A dd
for d in 0 512 2000; do
  for m in b4k w4k f4k; do dd[$m.$d]="$(dec $m $d)"; done
done
p1000_b="$(pre b4k 1000)"; p1000_f="$(pre f4k 1000)"; p1000_w="$(pre w4k 1000)"
p0_b="$(pre b128 0)"

# End to end: a 1500-token prompt (prefill) and a 2000-token prompt then 32
# tokens (decode), each through kiln generate --kv-cache --json.
ids1500=$(python3 -c 'print(",".join(str(1000 + 37 * i % 9000) for i in range(1500)))')
ids2000=$(python3 -c 'print(",".join(str(1000 + 37 * i % 9000) for i in range(2000)))')
gen() { # gen NAME IDS NEW: prints "prefill_s decode_ms_per_token decode_tokens peak_rss_MiB"
  /usr/bin/time -f %M -o "$out/rss" "$kiln" generate "$out/$1-kv-host.vmfb" --kv-cache --tokens "$2" \
    --max-new-tokens "$3" --json >"$out/gen.json"
  python3 -c 'import json,sys; g=json.load(open(sys.argv[1])); r=int(open(sys.argv[2]).read().split()[-1]); print("%.3f %.2f %d %.0f" % (g["prefill"]["seconds"], g["decode"]["ms_per_token"], g["decode"]["tokens"], r/1024))' "$out/gen.json" "$out/rss"
}
declare -A e2e
for m in b4k w4k f4k; do
  e2e[$m.p1500]="$(gen $m "$ids1500" 1)"
  e2e[$m.d2000]="$(gen $m "$ids2000" 32)"
done

# llama.cpp on the same GGUF, 2 threads.
llama_pp="—"; declare -A llama_tg=([0]="—" [512]="—" [2000]="—")
if [[ -x "$llama" ]]; then
  lj() { LD_LIBRARY_PATH="$(dirname "$llama")" "$llama" -m "$gguf" -t 2 -r "$runs" -o json "$@" 2>/dev/null; }
  llama_pp="$(lj -p 1500 -n 0 | python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)[0]["avg_ns"]/1e9))')"
  while read -r d ms; do llama_tg[$d]="$ms"; done < <(lj -p 0 -n 32 -d 0,512,2000 |
    python3 -c 'import json,sys; [print(r["n_depth"], "%.2f" % (1000/r["avg_ts"])) for r in json.load(sys.stdin)]')
  LD_LIBRARY_PATH="$(dirname "$llama")" /usr/bin/time -f %M -o "$out/lrss" "$llama" -m "$gguf" -t 2 -r 1 -p 1500 -n 0 >/dev/null 2>&1
  llama_rss="$(awk '{printf "%.0f", $1 / 1024}' "$out/lrss")"
else
  echo "llama-bench not found at $llama (set LLAMA_BENCH, or run scripts/bench/build-llama.sh): no llama.cpp column" >&2
fi
echo "end: $(uptime)"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.2f×", a / b; else printf "—" }'; }
echo
echo "SmolLM2-135M-Instruct Q4_1, host, 2 threads; kiln P 64; iree-benchmark-module median of $runs (decode at position 64: median of 3 alternate runs)"
echo
echo "| figure | kiln bf16 weights | kiln w8a8 | kiln today (f32 caches, no spans) | llama.cpp | bf16/llama.cpp | w8a8/llama.cpp |"
echo "|---|---|---|---|---|---|---|"
for d in 0 512 2000; do
  echo "| decode at depth $d, N 4096, ms | ${dd[b4k.$d]} | ${dd[w4k.$d]} | ${dd[f4k.$d]} | ${llama_tg[$d]} | $(ratio "${dd[b4k.$d]}" "${llama_tg[$d]}") | $(ratio "${dd[w4k.$d]}" "${llama_tg[$d]}") |"
done
b128=$(med "${d64[b.128]}"); w128=$(med "${d64[w.128]}"); b4k=$(med "${d64[b.4k]}"); w4k=$(med "${d64[w.4k]}")
echo "| decode at position 64, N 128, ms | $b128 | $w128 | | | | |"
echo "| decode at position 64, N 4096 (span 256), ms | $b4k ($(ratio "$b4k" "$b128") N 128) | $w4k ($(ratio "$w4k" "$w128") N 128) | $(med "${d64[f.4k]}") | | | |"
echo "| decode at position 64, N 4096 (all N), ms | $(med "${d64[b.4kfull]}") | $(med "${d64[w.4kfull]}") | | | | |"
echo "| one 64-token prefill chunk at position 1000, ms | $p1000_b | $p1000_w | $p1000_f | | | |"
echo "| one 64-token prefill chunk at position 0, N 128, ms | $p0_b | | | | | |"
read -r bp _ _ brss <<<"${e2e[b4k.p1500]}"; read -r wp _ _ wrss <<<"${e2e[w4k.p1500]}"; read -r fp _ _ frss <<<"${e2e[f4k.p1500]}"
echo "| 1500-token prompt, prefill s (kiln generate) | $bp | $wp | $fp | $llama_pp | $(ratio "$bp" "$llama_pp") | $(ratio "$wp" "$llama_pp") |"
echo "| peak RSS of that run, MiB | $brss | $wrss | $frss | ${llama_rss:-—} | | |"
read -r _ bd bn _ <<<"${e2e[b4k.d2000]}"; read -r _ wd wn _ <<<"${e2e[w4k.d2000]}"; read -r _ fd fn _ <<<"${e2e[f4k.d2000]}"
echo "| decode after a 2000-token prompt, ms/token (kiln generate; tokens) | $bd ($bn) | $wd ($wn) | $fd ($fn) | ${llama_tg[2000]} | $(ratio "$bd" "${llama_tg[2000]}") | $(ratio "$wd" "${llama_tg[2000]}") |"
echo "| KV caches at N 4096, MB | $(cache_mb b4k) | $(cache_mb w4k) | $(cache_mb f4k) | | | |"
