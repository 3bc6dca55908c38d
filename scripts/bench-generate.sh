#!/usr/bin/env bash
# Generation overhead benchmark (issue 6): the cost of one SmolLM2 forward
# at SEQ 64 measured by iree-benchmark-module, against the per-token time
# of `kiln generate` (loaded session) on the same module and weights.
# Usage: scripts/bench-generate.sh
set -euo pipefail
cd "$(dirname "$0")/.."
gguf="$(bash scripts/fetch-smollm2.sh)"
cargo build --release --offline -q 2>/dev/null || cargo build --release -q
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
./target/release/kiln export "$gguf" --seq 64 --out "$out" --name smollm2 2>/dev/null
./target/release/kiln compile "$out/smollm2-gen.mlir" --target host 2>/dev/null
bench="$(./target/release/kiln toolchain 2>/dev/null | awk '/^iree-benchmark-module:/ {print $2}')"
ids="$(python3 -c 'print(",".join(["1"]+["0"]*63))')"
"$bench" --device=local-task --module="$out/smollm2-host.vmfb" --parameters=model="$out/smollm2.irpa" \
  --function=smollm2 --input=1x64xi32="$ids" --benchmark_repetitions=5 2>/dev/null | grep -E "median|mean" || true
./target/release/kiln generate "$out/smollm2-host.vmfb" --prompt "Once upon a time, there was a" --max-new-tokens 20 2>&1 >/dev/null | tail -2
