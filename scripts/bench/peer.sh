#!/usr/bin/env bash
# kiln vs the peer path (iree-turbine + iree-convert-parameters), measured
# side by side in one run on this machine for SmolLM2-135M-Instruct (the Q4_1
# GGUF that scripts/fetch-smollm2.sh fetches). See docs/benchmarks.md.
#
# Usage: scripts/bench/peer.sh [--quick] [--runs N] [--results DIR] [--work DIR]
#                               [--no-forms]
#   --quick        smoke run: 1 run per figure, SEQ 64 only, host compile only
#   --no-forms     skip the weight forms (scripts/bench/quant.sh) of a full
#                  run (scripts/bench/stand.sh measures the forms itself)
#   --runs N       runs per figure, median reported (default 3)
#   --results DIR  where results.json, results.md, ratios.png and
#                  weight-forms.txt (scripts/bench/quant.sh, full runs) go
#                  (default docs/bench; --quick: WORK/results)
#   --work DIR     scratch directory (default: a fresh temp dir, removed)
#
# Installs on demand into kiln's cache folder (scripts/cache-dir.sh):
#   bench-venv/   CPU PyTorch, transformers, gguf, accelerate, iree-turbine,
#                 matplotlib, and the pinned iree-base-compiler/runtime 3.13.0
#                 (override with KILN_BENCH_VENV=DIR)
#   bench/smollm2-hf/  the peer's input: the same GGUF dequantized by
#                 transformers into a plain f32 LlamaForCausalLM folder
#   iree-3.13.0/  kiln's own pinned IREE tools (`kiln toolchain install`)
# Every command is timed by /usr/bin/time -v (wall clock, maximum RSS).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
root="$PWD"

quick=0 runs=3 results="" work="" forms=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; runs=1 ;;
    --runs) runs="$2"; shift ;;
    --results) results="$2"; shift ;;
    --work) work="$2"; shift ;;
    --no-forms) forms=0 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "scripts/bench/peer.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
cache="$CACHE"
if [[ -z "$work" ]]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
work="$(cd "$work" && pwd)"
if [[ -z "$results" ]]; then
  if [[ $quick == 1 ]]; then results="$work/results"; else results="$root/docs/bench"; fi
fi
mkdir -p "$results"
log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }

# ---------------------------------------------------------------- installs
log "building kiln (release)"
bench_build
"$kiln" toolchain install >/dev/null 2>&1 || "$kiln" toolchain install
gguf="$(bash scripts/fetch-smollm2.sh)"
tools="$("$kiln" toolchain 2>/dev/null)"
tool() { awk -v k="$1:" '$1 == k {print $2}' <<<"$tools"; }
iree_bench="$(tool iree-benchmark-module)"
iree_convert="$(dirname "$iree_bench")/iree-convert-parameters"
[[ -x "$iree_bench" && -x "$iree_convert" ]] || { echo "IREE runtime tools not found: $tools" >&2; exit 1; }

venv="${KILN_BENCH_VENV:-$cache/bench-venv}"
reqs=(torch transformers gguf accelerate iree-turbine matplotlib
      "iree-base-compiler==3.13.0" "iree-base-runtime==3.13.0")
if [[ "$(cat "$venv/.kiln-bench-reqs" 2>/dev/null)" != "${reqs[*]}" ]]; then
  log "creating the peer venv $venv (PyTorch and friends from PyPI; several GB the first time)"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet "${reqs[@]}" >&2
  echo "${reqs[*]}" >"$venv/.kiln-bench-reqs"
fi
py="$venv/bin/python"
peercmd=("$py" "$root/scripts/bench/peer.py")
peer() { "${peercmd[@]}" "$@"; }

hf="$cache/bench/smollm2-hf"
if [[ ! -s "$hf/config.json" ]]; then
  log "building the peer's input (transformers dequantizes the GGUF) in $hf"
  rm -rf "$hf.tmp" && mkdir -p "$(dirname "$hf")"
  peer hf "$gguf" "$hf.tmp" >&2
  mv "$hf.tmp" "$hf"
fi

# ---------------------------------------------------------------- measuring
tsv="$work/measure.tsv"
: >"$tsv"
# measure KEY CMD...: runs CMD $runs times under /usr/bin/time -v; appends
# "KEY wall_s maxrss_kib" per run to $tsv. CMD's stdout goes to $work/KEY.out.
# $clean, when set, names a file removed before each run (an output, so every
# run writes a new file); $warm=1 runs CMD once untimed first.
clean="" warm=0
measure() {
  local key="$1"; shift
  local i
  if [[ $warm == 1 ]]; then
    [[ -n "$clean" ]] && rm -f "$clean"
    "$@" >/dev/null 2>&1 || true
  fi
  for i in $(seq "$runs"); do
    [[ -n "$clean" ]] && rm -f "$clean"
    sync  # the previous run's writeback must not land in this one's time
    /usr/bin/time -v -o "$work/time.txt" "$@" >"$work/$key.out" 2>"$work/$key.err" || {
      echo "FAILED ($key): $*" >&2; tail -20 "$work/$key.err" >&2; exit 1; }
    awk -v k="$key" '
      /Elapsed \(wall clock\)/ { n = split($NF, p, ":"); s = 0; for (j = 1; j <= n; j++) s = s * 60 + p[j] }
      /Maximum resident set size/ { m = $NF }
      /User time \(seconds\)|System time \(seconds\)/ { c += $NF }
      END { printf "%s\t%.3f\t%d\n%s.cpu\t%.3f\t0\n", k, s, m, k, c }' "$work/time.txt" >>"$tsv"
    tail -2 "$tsv" | awk 'NR == 1 {k = $1; w = $2; m = $3} NR == 2 {printf "  %-28s %8.2f s %8.0f MiB  (CPU %.2f s)\n", k, w, m/1024, $2}' >&2
  done
}
# note KEY VALUE: records a figure that is not a process (ms, bytes, tokens/s).
note() { printf '%s\t%s\t0\n' "$1" "$2" >>"$tsv"; echo "  $1 = $2" >&2; }

ids_csv() { python3 -c "import sys; n=int(sys.argv[1]); print(','.join(['1'] + ['0'] * (n - 1)))" "$1"; }
# bench_ms KEY VMFB PARAMS FUNCTION SEQ: iree-benchmark-module, local-task,
# median real time per forward over 3 repetitions (ms).
bench_ms() {
  local key="$1" vmfb="$2" params="$3" fn="$4" seq="$5" device="${6:-local-task}"
  "$iree_bench" --device="$device" --module="$vmfb" --parameters=model="$params" \
    --function="$fn" --input="1x${seq}xi32=$(ids_csv "$seq")" \
    --benchmark_repetitions=3 --benchmark_min_time=1s >"$work/$key.bench" 2>/dev/null
  local ms
  ms="$(awk '/real_time_median/ {for (i = 1; i <= NF; i++) if ($i == "ms") {print $(i-1); exit}}' "$work/$key.bench")"
  [[ -n "$ms" ]] || ms="$(awk '/^BM_/ {for (i = 1; i <= NF; i++) if ($i == "ms") {print $(i-1); exit}}' "$work/$key.bench")"
  note "$key" "$ms"
}

seqs=(64 256); targets=(host arm64)
[[ $quick == 1 ]] && seqs=(64) && targets=(host)

# 1. export --------------------------------------------------------------
log "export, SEQ 64 ($runs runs each)"
measure export.kiln "$kiln" export "$gguf" --seq 64 --out "$work/kiln64" --name smollm2
mkdir -p "$work/turbine64"
measure export.turbine "${peercmd[@]}" export "$hf" 64 "$work/turbine64/smollm2.mlir"
measure params.turbine "${peercmd[@]}" params "$hf" "$work/turbine64/smollm2.irpa"
for s in "${seqs[@]}"; do
  [[ $s == 64 ]] && continue
  runs_saved=$runs; runs=1
  measure "export$s.kiln" "$kiln" export "$gguf" --seq "$s" --out "$work/kiln$s" --name smollm2
  mkdir -p "$work/turbine$s"
  measure "export$s.turbine" "${peercmd[@]}" export "$hf" "$s" "$work/turbine$s/smollm2.mlir"
  ln -sf "$work/turbine64/smollm2.irpa" "$work/turbine$s/smollm2.irpa"
  runs=$runs_saved
done
note size.kiln.irpa "$(stat -c %s "$work/kiln64/smollm2.irpa")"
note size.turbine.irpa "$(stat -c %s "$work/turbine64/smollm2.irpa")"

# 2. parameters ------------------------------------------------------------
log "parameters: bf16 safetensors -> irpa ($runs runs each, after a warm-up)"
st="$work/kiln64/smollm2.safetensors"
warm=1
clean="$work/p-kiln.irpa" measure convert.kiln "$kiln" params convert --quiet "$st" -o "$work/p-kiln.irpa"
clean="$work/p-iree.irpa" measure convert.iree "$iree_convert" --quiet "--parameters=$st" "--output=$work/p-iree.irpa"
clean="$work/p-cp.safetensors" measure convert.cp cp "$st" "$work/p-cp.safetensors"
warm=0
cmp -s "$work/p-kiln.irpa" "$work/p-iree.irpa" && note convert.identical 1 || note convert.identical 0
note size.safetensors "$(stat -c %s "$st")"

# 3. compile ---------------------------------------------------------------
log "compile, SEQ 64: ${targets[*]} ($runs runs each)"
for t in "${targets[@]}"; do
  measure "compile.$t.kiln" "$kiln" compile "$work/kiln64/smollm2-gen.mlir" --target "$t" --jobs 1
  measure "compile.$t.turbine" "$kiln" compile "$work/turbine64/smollm2.mlir" --target "$t" --jobs 1 -- --iree-input-type=torch --iree-opt-data-tiling=false
  # The same iree-compile flags on both MLIRs, so only the MLIR differs:
  # kiln's preset (data tiling) on turbine's, and IREE's defaults on kiln's.
  # (arm64: the pinned iree-compile cannot build turbine's attention with
  # data tiling: "One or more operations with large vector sizes (8192
  # bytes) were found" on torch.aten.scaled_dot_product_attention.)
  if [[ $t == host ]]; then
    measure "compile.$t.turbine_dt" "$kiln" compile "$work/turbine64/smollm2.mlir" --target "$t" --jobs 1 -o "$work/turbine64dt" -- --iree-input-type=torch
  fi
  measure "compile.$t.kiln_nodt" "$kiln" compile "$work/kiln64/smollm2-gen.mlir" --target "$t" --jobs 1 -o "$work/kiln64nodt" -- --iree-opt-data-tiling=false
  note "size.vmfb.$t.kiln" "$(stat -c %s "$work/kiln64/smollm2-$t.vmfb")"
  note "size.vmfb.$t.turbine" "$(stat -c %s "$work/turbine64/smollm2-$t.vmfb")"
done
for s in "${seqs[@]}"; do
  [[ $s == 64 ]] && continue
  "$kiln" compile "$work/kiln$s/smollm2-gen.mlir" --target host --jobs 1 >/dev/null 2>&1
  "$kiln" compile "$work/turbine$s/smollm2.mlir" --target host --jobs 1 -- --iree-input-type=torch --iree-opt-data-tiling=false >/dev/null 2>&1
done

# 4. one forward -----------------------------------------------------------
# $runs interleaved rounds (kiln, turbine, eager, then the same on
# one thread), so a burst of load from elsewhere hits every contender alike;
# each figure is the median over the rounds of a median of 3 repetitions.
tfn="$(grep -o 'func.func @[A-Za-z0-9_]*' "$work/turbine64/smollm2.mlir" | grep -v '\$' | head -1 | cut -d@ -f2)"
for r in $(seq "$runs"); do
  for s in "${seqs[@]}"; do
    log "one forward on the host, SEQ $s, round $r/$runs (iree-benchmark-module local-task and local-sync; PyTorch eager 2 and 1 threads)"
    for dev in local-task local-sync; do
      sfx=""; [[ $dev == local-sync ]] && sfx=".1t"
      bench_ms "run$s.kiln$sfx" "$work/kiln$s/smollm2-host.vmfb" "$work/kiln$s/smollm2.irpa" smollm2 "$s" "$dev"
      bench_ms "run$s.turbine$sfx" "$work/turbine$s/smollm2-host.vmfb" "$work/turbine$s/smollm2.irpa" "$tfn" "$s" "$dev"
    done
    if [[ $s == 64 ]]; then  # turbine's MLIR compiled with kiln's preset
      bench_ms "run64.turbine_dt" "$work/turbine64dt/smollm2-host.vmfb" "$work/turbine64/smollm2.irpa" "$tfn" 64
    fi
    read -r e2 e1 < <(peer eager "$hf" "$s" 5 2>/dev/null)
    note "run$s.eager" "$e2"
    note "run$s.eager.1t" "$e1"
  done
done

# 5. generation ------------------------------------------------------------
newtok=32; [[ $quick == 1 ]] && newtok=8
log "generation: kiln generate, $newtok new tokens"
gen_tps() {
  "$kiln" generate "$@" --prompt "Once upon a time" --max-new-tokens "$newtok" 2>"$work/gen.err" >/dev/null
  grep -o '[0-9.]* tokens/s' "$work/gen.err" | tail -1 | cut -d' ' -f1
}
note gen.redecode "$(gen_tps "$work/kiln64/smollm2-host.vmfb")"
# The KV-cache pair over the same archive (prompt bucket 64, context 128).
"$kiln" export "$gguf" --seq 64 --out "$work/kv64" --name smollm2 --kv-cache --max-context 128 2>/dev/null
"$kiln" compile "$work/kv64/smollm2-kv-gen.mlir" --target host --jobs 1 >/dev/null 2>&1
note gen.kvcache "$(gen_tps "$work/kv64/smollm2-kv-host.vmfb" --kv-cache)" || true

# 6. interpreter -----------------------------------------------------------
if [[ $quick == 0 ]]; then
  log "interpreter: one forward (kiln interp, whole process)"
  measure interp.kiln "$kiln" interp "$work/kiln64/smollm2-gen.mlir" --params "$work/kiln64/smollm2.irpa" --tokens 1
fi

# 7. weight forms ----------------------------------------------------------
# bf16, keep and w8a8 on SmolLM2 Q4_1 and Gemma 3 Q4_K_M: size, decode,
# prefill, forward, resident memory (docs/journal/, the weight forms against llama.cpp).
if [[ $quick == 0 && $forms == 1 ]]; then
  log "weight forms: scripts/bench/quant.sh $runs"
  bash "$root/scripts/bench/quant.sh" "$runs" >"$work/quant.txt"
fi

# ---------------------------------------------------------------- report
versions="$("$py" - <<'PY'
import importlib.metadata as m
print(", ".join(f"{p} {m.version(p)}" for p in ["torch", "transformers", "iree-turbine", "iree-base-compiler", "gguf"]))
PY
)"
cpu="$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
python3 "$root/scripts/bench/report.py" "$tsv" "$results" \
  --runs "$runs" --quick "$quick" --cpu "$cpu" --cores "$(nproc)" \
  --kiln "$(git -C "$root" rev-parse --short HEAD) ($("$kiln" --version 2>/dev/null | head -1))" \
  --versions "$versions" --command "scripts/bench/peer.sh $([[ $quick == 1 ]] && echo --quick) --runs $runs$([[ $forms == 0 ]] && echo " --no-forms")"
if "$py" -c 'import matplotlib' 2>/dev/null; then
  peer chart "$results/results.json" "$results/ratios.png" >&2
fi
if [[ -s "$work/quant.txt" ]]; then
  cp "$work/quant.txt" "$results/weight-forms.txt"
fi
log "results in $results"
cat "$results/results.md"
[[ -s "$work/quant.txt" ]] && cat "$work/quant.txt"
true
