#!/usr/bin/env bash
# The KV-cache pair at short contexts (issues 10 and 21; scripts/bench/kv.sh
# is the long-context one against llama.cpp): SmolLM2-135M-Instruct on the
# host, a 64-token prompt + 64 new tokens, median of RUNS (default 3), in one
# run; every pair with f32 caches and no attention spans, as first measured:
#   - iree-benchmark-module: one redecode forward at SEQ 128 and at SEQ 64,
#     the prefill (P 64) and one decode step (N 128), and one decode step
#     at N 2048 (a long context: the caches are updated in place, so a step
#     writes one row per layer instead of copying 2 x 47 MB of caches);
#   - chunked prefill (issue 21's goal): a 256-token prompt as 4 chunks of
#     P 64 against one P-256 prefill, both with N 512 (a chunk attends over
#     the N cache positions whatever its start, so 4 x one P-64 call);
#   - sampling (issue 21's goal): the decode step of a `--sampling topk=40`
#     export (the 40 best logits and ids returned too) against the greedy
#     one, measured alternately;
#   - end to end: `kiln generate` (redecode, SEQ 128) vs
#     `kiln generate --kv-cache` (P 64, N 128), tokens/s;
#   - the weight-streaming floor: a module over the same archive that only
#     reads every weight once (row sums of each parameter), which no
#     one-token decode can beat: it bounds decode latency by this
#     machine's memory bandwidth.
# Usage: scripts/bench/kv-pair.sh [RUNS]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
runs="${1:-3}"
gguf="$(bash scripts/fetch-smollm2.sh)"
bench_setup bench-kv-pair

$kiln export "$gguf" --seq 128 --out "$out" --name s128 --kv-cache --prompt-len 64 --max-context 128 --kv-dtype f32 --kv-spans none 2>/dev/null
$kiln export "$gguf" --seq 64 --out "$out" --name s64 2>/dev/null
$kiln export "$gguf" --seq 128 --out "$out" --name t128 --kv-cache --prompt-len 64 --max-context 128 --sampling topk=40 --kv-dtype f32 --kv-spans none 2>/dev/null
$kiln export "$gguf" --seq 64 --out "$out" --name s2048 --kv-cache --prompt-len 64 --max-context 2048 --kv-dtype f32 --kv-spans none 2>/dev/null
$kiln export "$gguf" --seq 64 --out "$out" --name c64 --kv-cache --prompt-len 64 --max-context 512 --kv-dtype f32 --kv-spans none 2>/dev/null
$kiln export "$gguf" --seq 256 --out "$out" --name c256 --kv-cache --prompt-len 256 --max-context 512 --kv-dtype f32 --kv-spans none 2>/dev/null
for m in s128-gen s128-kv-gen t128-kv-gen s64-gen s2048-kv-gen c64-kv-gen c256-kv-gen; do $kiln compile "$out/$m.mlir" --target host >/dev/null 2>&1; done

# The floor module: every parameter global of the KV module, each read once
# by a matrix-vector product with the runtime argument (so nothing can be
# hoisted to load time), nothing else.
python3 - "$out/s128-kv-gen.mlir" "$out/floor.mlir" <<'PY'
import re, sys
src, dst = sys.argv[1], sys.argv[2]
pat = re.compile(r'^\s*util\.global private @(\w+) = (#flow\.parameter\.named<[^>]*>) : tensor<([0-9x]+)x(\w+)>')
globs = [m.groups() for m in map(pat.match, open(src)) if m]
out = ["module @floor {"]
out += [f"  util.global private @{n} = {p} : tensor<{d}x{t}>" for n, p, d, t in globs]
out.append("  func.func @floor(%x: tensor<f32>) -> tensor<f32> {")
out.append("    %z = stablehlo.constant dense<0.0> : tensor<f32>")
acc = "%z"
for i, (n, _, d, t) in enumerate(globs):
    dims = d.split("x")
    full, last = "x".join(dims), dims[-1]
    out.append(f"    %w{i} = util.global.load @{n} : tensor<{full}x{t}>")
    out.append(f"    %c{i} = stablehlo.convert %w{i} : (tensor<{full}x{t}>) -> tensor<{full}xf32>")
    # a matrix-vector product with the runtime argument broadcast (what a
    # decode step does with each weight), so nothing can be hoisted to load
    out.append(f"    %x{i} = stablehlo.broadcast_in_dim %x, dims = [] : (tensor<f32>) -> tensor<{last}xf32>")
    if len(dims) == 1:
        out.append(f"    %s{i} = stablehlo.dot_general %c{i}, %x{i}, contracting_dims = [0] x [0] : (tensor<{full}xf32>, tensor<{last}xf32>) -> tensor<f32>")
    else:
        rows = "x".join(dims[:-1])
        out.append(f"    %r{i} = stablehlo.dot_general %c{i}, %x{i}, contracting_dims = [{len(dims) - 1}] x [0] : (tensor<{full}xf32>, tensor<{last}xf32>) -> tensor<{rows}xf32>")
        alld = ", ".join(str(k) for k in range(len(dims) - 1))
        out.append(f"    %s{i} = stablehlo.reduce(%r{i} init: %z) applies stablehlo.add across dimensions = [{alld}] : (tensor<{rows}xf32>, tensor<f32>) -> tensor<f32>")
    out.append(f"    %a{i} = stablehlo.add {acc}, %s{i} : tensor<f32>")
    acc = f"%a{i}"
out.append(f"    return {acc} : tensor<f32>\n  }}\n}}")
open(dst, "w").write("\n".join(out) + "\n")
PY
$kiln compile "$out/floor.mlir" --target host >/dev/null 2>&1
weight_bytes=$(stat -c %s "$out/s128.irpa")

ids128=$(python3 -c 'print(",".join(str(1000 + 37 * i % 9000) for i in range(128)))')
fwd128=$(bm "$out/s128-host.vmfb" s128 "$out/s128.irpa" "1x128xi32=$ids128")
fwd64=$(bm "$out/s64-host.vmfb" s64 "$out/s64.irpa" "1x64xi32=$ids64")
ids256=$(python3 -c 'print(",".join(str(1000 + 37 * i % 9000) for i in range(256)))')
prefill=$(bm "$out/s128-kv-host.vmfb" s128_prefill "$out/s128.irpa" "1x64xi32=$ids64" "i32=0" "i32=64" \
  "30x3x128x64xf32=0" "30x3x128x64xf32=0")
chunk64=$(bm "$out/c64-kv-host.vmfb" c64_prefill "$out/c64.irpa" "1x64xi32=$ids64" "i32=192" "i32=64" \
  "30x3x512x64xf32=0" "30x3x512x64xf32=0")
one256=$(bm "$out/c256-kv-host.vmfb" c256_prefill "$out/c256.irpa" "1x256xi32=$ids256" "i32=0" "i32=256" \
  "30x3x512x64xf32=0" "30x3x512x64xf32=0")
decode=$(bm "$out/s128-kv-host.vmfb" s128_decode "$out/s128.irpa" "1xi32=1234" "i32=127" \
  "30x3x128x64xf32=0" "30x3x128x64xf32=0")
# Greedy and top-40 decode, alternately, so both see the same machine.
greedy_d=(); topk_d=()
for _ in 1 2 3; do
  greedy_d+=("$(bm "$out/s128-kv-host.vmfb" s128_decode "$out/s128.irpa" "1xi32=1234" "i32=127" \
    "30x3x128x64xf32=0" "30x3x128x64xf32=0")")
  topk_d+=("$(bm "$out/t128-kv-host.vmfb" t128_decode "$out/t128.irpa" "1xi32=1234" "i32=127" \
    "30x3x128x64xf32=0" "30x3x128x64xf32=0")")
done
med3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
greedy_med=$(med3 "${greedy_d[@]}"); topk_med=$(med3 "${topk_d[@]}")
decode2048=$(bm "$out/s2048-kv-host.vmfb" s2048_decode "$out/s2048.irpa" "1xi32=1234" "i32=2047" \
  "30x3x2048x64xf32=0" "30x3x2048x64xf32=0")
floor=$(bm "$out/floor-host.vmfb" floor "$out/s128.irpa" "f32=1")

# End to end: 64-token prompt + 64 new tokens (eos ignored by the ids chosen
# only if the model does not emit it; the line reports what ran).
gen() { "$kiln" generate "$@" --tokens "$ids64" --max-new-tokens 64 2>&1 >/dev/null | awk '/tokens\/s/'; }
e2e_re=$(gen "$out/s128-host.vmfb")
e2e_kv=$(gen "$out/s128-kv-host.vmfb" --kv-cache)

awk -v f128="$fwd128" -v f64="$fwd64" -v p="$prefill" -v d="$decode" -v d2k="$decode2048" -v n="$runs" \
  -v c64="$chunk64" -v c256="$one256" -v gd="$greedy_med" -v td="$topk_med" \
  -v fl="$floor" -v wb="$weight_bytes" 'BEGIN {
  printf "SmolLM2-135M host (iree-benchmark-module, median of %d)\n", n
  printf "  redecode forward, SEQ 128: %8.1f ms\n", f128
  printf "  redecode forward, SEQ 64:  %8.1f ms\n", f64
  printf "  prefill, P 64:             %8.1f ms  (%.2fx the SEQ-64 forward)\n", p, p / f64
  printf "  decode, N 128:             %8.1f ms  (%.1fx faster than the SEQ-128 forward)\n", d, f128 / d
  printf "  256-token prompt, N 512:   %8.1f ms as 4 chunks of P 64 (4 x %.1f), %.1f ms as one P-256 prefill: %.2fx\n", 4 * c64, c64, c256, 4 * c64 / c256
  printf "  decode, greedy vs top-40:  %8.1f ms vs %.1f ms with --sampling topk=40: %+.1f%% (median of 3 alternate runs)\n", gd, td, (td / gd - 1) * 100
  printf "  decode, N 2048:            %8.1f ms  (caches updated in place)\n", d2k
  printf "  floor, read every weight:  %8.1f ms  (%.0f MB at %.1f GB/s; decode = %.2fx the floor)\n", fl, wb / 1e6, wb / fl / 1e6, d / fl
  printf "  20x would need decode <= %.1f ms: the weights read at %.1f GB/s\n", f128 / 20, wb / (f128 / 20) / 1e6
}'
echo "  kiln generate (redecode, SEQ 128): $e2e_re"
echo "  kiln generate --kv-cache (P 64, N 128): $e2e_kv"
