#!/usr/bin/env bash
# Where one function of a KV pair spends its CPU time, dispatch by dispatch:
# the pair's MLIR is compiled again for the host with kiln's CPU preset, but
# as a system ELF with debug symbols (`--iree-llvmcpu-link-embedded=false
# --iree-llvmcpu-debug-symbols=true`, so perf sees each dispatch function's
# name), then CALLS calls (default 80) of the decode at the pair's last
# position or of the 64-token prefill run under `perf record -e cpu-clock
# -F 1000` (from 2 s in, after the load), on local-task under SCHED_BATCH
# (`chrt -b 0`, as kiln's session runs). Prints each
# dispatch's share of the sampled core time (top TOP, default 25), then the
# shares by kind: i8 products (`mmt4d` on i8), other products, other
# kernels, and the runtime and calling thread. DIR holds a KV export (`kiln
# export … --kv-cache --prompt-len 64 --name NAME`: NAME-kv-gen.mlir,
# NAME.irpa, NAME.json); nothing in it is changed. Needs perf and nm.
# Usage: [CALLS=80] [TOP=25] scripts/dev/profile-dispatches.sh DIR decode|prefill
set -euo pipefail
. "$(dirname "$0")/../bench/lib.sh"
[[ $# -eq 2 && ( $2 == decode || $2 == prefill ) ]] || { sed -n 2,15p "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
dir="$1"; which="$2"
command -v perf >/dev/null || { echo "profile-dispatches: perf not found (install linux-perf)" >&2; exit 1; }
command -v nm >/dev/null || { echo "profile-dispatches: nm not found (install binutils)" >&2; exit 1; }
runs=1
bench_setup profile-dispatches
json="$(ls "$dir"/*.json)"
n="$(basename "$json" .json)"
cp "$dir/$n-kv-gen.mlir" "$json" "$out/"
ln -s "$(realpath "$dir/$n.irpa")" "$out/$n.irpa"
"$kiln" compile "$out/$n-kv-gen.mlir" --target host -q -- --iree-llvmcpu-link-embedded=false \
  --iree-llvmcpu-debug-symbols=true --iree-hal-dump-executable-binaries-to="$out/bin" >/dev/null
read -ra caches < <(zero_caches "$json")
if [[ $which == decode ]]; then
  last=$(last_position "$json")
  inputs=("1xi32=1234" "i32=$last")
else
  inputs=("1x64xi32=$ids64" "i32=0" "i32=64")
fi
perf record -q -e cpu-clock -F 1000 -D 2000 -o "$out/p.data" -- chrt -b 0 "$bench" --device=local-task \
  --module="$out/$n-kv-host.vmfb" --parameters=model="$out/$n.irpa" --function="${n}_$which" \
  "${inputs[@]/#/--input=}" "${caches[@]/#/--input=}" --benchmark_repetitions=1 \
  --benchmark_min_time="${CALLS:-80}x" 2>/dev/null | grep '^BM_' >&2
# perf cannot read the runtime's copy of the ELF (a deleted temporary
# file), so it reports the dispatches' samples as offsets into it; nm on
# the dumped copy names them.
perf report -i "$out/p.data" --sort sym --stdio 2>/dev/null | awk '/%/ && !/^#/ {sub("%", "", $1); print $1, $3}' |
  python3 -c '
import bisect, collections, os, subprocess, sys
elf, top = sys.argv[1], int(sys.argv[2])
syms = sorted((int(a, 16), s) for a, t, s in
              (l.split() for l in subprocess.run(["nm", "-n", elf], capture_output=True, text=True,
                                                  check=True).stdout.splitlines() if len(l.split()) == 3)
              if t in "tT")
starts = [a for a, _ in syms]
by_fn, by_kind = collections.Counter(), collections.Counter()
for line in sys.stdin:
    share, where = line.split(None, 1)
    share, where = float(share), where.strip()
    if where.startswith("0x"):
        i = bisect.bisect_right(starts, int(where, 16)) - 1
        fn = syms[i][1] if i >= 0 else "?"
        by_fn[fn] += share
        kind = ("i8 products" if "mmt4d" in fn and "i8xi8" in fn else
                "other products" if "mmt4d" in fn else "other kernels")
    else:
        kind = "runtime and caller"
    by_kind[kind] += share
for fn, share in by_fn.most_common(top):
    print(f"{share:6.2f}%  {fn}")
print()
for kind, share in by_kind.most_common():
    print(f"{share:6.1f}%  {kind}")
' "$(ls "$out"/bin/*.so | head -1)" "${TOP:-25}"
