#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 60), from
# an empty corpus kept in the cache (so runs accumulate), and prints one line
# per target: runs, corpus size, and whether it found a crash. Needs a
# nightly toolchain (`cargo +nightly`); installs cargo-fuzz into the cache
# the first time (`cargo install --locked cargo-fuzz`). A crash leaves its
# input under fuzz/artifacts/TARGET/ and makes the script exit 1.
# The suite does not run this: the sanitizer build of kiln takes minutes on
# 2 cores, and a fresh machine's rustup may have no nightly; the same
# readers meet seeded mutation runs in the suite instead
# (tests/params_attacks.rs, tests/parser_errors.rs, tests/verify.rs).
# Usage: scripts/dev/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
. "$(dirname "$0")/../bench/lib.sh"
secs="${1:-60}"
shift || true
cargo +nightly --version >/dev/null 2>&1 || {
  echo "scripts/dev/fuzz.sh: no nightly toolchain (rustup toolchain install nightly)" >&2
  exit 2
}
tools="$CACHE/cargo-fuzz"
if [[ ! -x "$tools/bin/cargo-fuzz" ]]; then
  cargo +nightly install --locked cargo-fuzz --root "$tools" >&2
fi
export PATH="$tools/bin:$PATH"
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets < <(cd fuzz && cargo +nightly fuzz list)
fi
status=0
for t in "${targets[@]}"; do
  corpus="$CACHE/fuzz-corpus/$t"
  mkdir -p "$corpus"
  log="$(mktemp)"
  if (cd fuzz && cargo +nightly fuzz run "$t" "$corpus" -- -max_total_time="$secs" -seed=1 \
        -rss_limit_mb=4096 >"$log" 2>&1); then
    verdict="no crash"
  else
    verdict="CRASH (fuzz/artifacts/$t/)"
    status=1
    tail -20 "$log" >&2
  fi
  runs=$(grep -oE '#[0-9]+' "$log" | tail -1 | tr -d '#')
  echo "$t: ${runs:-0} runs in ${secs} s, corpus $(find "$corpus" -type f | wc -l) inputs: $verdict"
  rm -f "$log"
done
exit $status
