# Shared by the bench-*.sh scripts (sourced from the repository root).

# bench_setup NAME: builds kiln and sets $kiln, $bench (iree-benchmark-module)
# and $out (a temporary directory removed on exit).
bench_setup() {
  cargo build --release -q
  kiln=./target/release/kiln
  bench="$($kiln toolchain 2>/dev/null | awk '$1 == "iree-benchmark-module:" {print $2}')"
  [[ -x "$bench" ]] || { echo "$1: iree-benchmark-module not found (run kiln toolchain install)" >&2; exit 1; }
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
}

# bm VMFB FUNCTION PARAMS INPUT...: the median real time (ms) of one call
# over $runs repetitions (the one time when $runs is 1: iree-benchmark-module
# prints no median row then).
bm() {
  local vmfb="$1" fn="$2" params="$3"; shift 3
  local args=()
  for i in "$@"; do args+=("--input=$i"); done
  "$bench" --device=local-task --module="$vmfb" --parameters=model="$params" --function="$fn" \
    "${args[@]}" --benchmark_repetitions="$runs" --benchmark_min_time=1x 2>/dev/null |
    awk -v runs="$runs" '(runs == 1 && /^BM_/) || /_median/ {for (i=1;i<=NF;i++) if ($(i+1)=="ms") {print $i; exit}}'
}
