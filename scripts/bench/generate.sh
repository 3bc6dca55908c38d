#!/usr/bin/env bash
# Generation overhead benchmark (issue 6): the cost of one SmolLM2 forward
# at SEQ 64 measured by iree-benchmark-module, against the per-forward time
# of `kiln generate` (loaded session) on the same module and weights. The
# difference is the loop's overhead per token (tokenizer, padding, the
# session round trip, reading the ids back).
# Usage: scripts/bench/generate.sh [NEW_TOKENS]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
new="${1:-40}"
gguf="$(bash scripts/fetch-smollm2.sh)"
bench_build
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$kiln" export "$gguf" --seq 64 --out "$out" --name smollm2 2>/dev/null
"$kiln" compile "$out/smollm2-gen.mlir" --target host 2>/dev/null
bench="$("$kiln" toolchain 2>/dev/null | awk '/^iree-benchmark-module:/ {print $2}')"
ids="$(python3 -c 'print(",".join(["1"]+["0"]*63))')"
"$bench" --device=local-task --module="$out/smollm2-host.vmfb" --parameters=model="$out/smollm2.irpa" \
  --function=smollm2 --input=1x64xi32="$ids" --benchmark_repetitions=5 \
  --benchmark_min_time=2 2>/dev/null >"$out/bench.txt"
# real_time median in ms
fwd_ms="$(awk '/real_time_median/ {for (i=1;i<=NF;i++) if ($i=="ms") print $(i-1)}' "$out/bench.txt" | head -1)"
"$kiln" generate "$out/smollm2-host.vmfb" --prompt "Once upon a time" \
  --max-new-tokens "$new" 2>"$out/gen.txt" >/dev/null
line="$(grep -E 'tokens/s' "$out/gen.txt" | tail -1)"
echo "iree-benchmark-module forward (median of 5): ${fwd_ms} ms"
echo "kiln generate: $line"
python3 - "$fwd_ms" "$line" <<'PY'
import re, sys
fwd = float(sys.argv[1])
m = re.search(r"in ([0-9.]+)s: .*\((\d+) forward passes\)", sys.argv[2])
secs, n = float(m.group(1)), int(m.group(2))
per = secs * 1000 / n
print(f"per forward in kiln generate: {per:.1f} ms; overhead {per - fwd:.1f} ms = {100 * (per - fwd) / fwd:.1f}% of a forward")
PY
