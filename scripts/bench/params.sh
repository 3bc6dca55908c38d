#!/usr/bin/env bash
# Benchmarks `kiln params convert` (safetensors -> irpa) against IREE's
# iree-convert-parameters and plain cp on a ~270 MB bf16 safetensors file
# with SmolLM2-135M's tensor shapes. Each tool runs 5 times (after one
# warm-up that fills the page cache); the table shows median wall time,
# peak RSS, and peak anonymous RSS (memory not backed by a mapped file).
#
# Usage: scripts/bench/params.sh [WORKDIR]   (default: a fresh temp dir)
# Env:   KILN_IREE_DIR (the IREE tools, as kiln finds them), RUNS (default 5)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
work="${1:-$(mktemp -d)}"
runs="${RUNS:-5}"
bench_build
iree="$(bench_tool iree-convert-parameters)"
[[ -x "$iree" ]] || { echo "iree-convert-parameters not found (kiln toolchain install; KILN_IREE_DIR)" >&2; exit 1; }
mkdir -p "$work"


input="$work/smollm2-135m-bf16.safetensors"
if [[ ! -s "$input" ]]; then
python3 - "$input" <<'PY'
import json, os, struct, sys
# SmolLM2-135M: hidden 576, ffn 1536, 30 layers, 9 heads / 3 KV heads (head dim 64), vocab 49152.
H, F, L, KV = 576, 1536, 30, 192
shapes = [("model.embed_tokens.weight", [49152, H])]
for i in range(L):
    p = f"model.layers.{i}."
    shapes += [(p + "input_layernorm.weight", [H]),
               (p + "self_attn.q_proj.weight", [H, H]), (p + "self_attn.k_proj.weight", [KV, H]),
               (p + "self_attn.v_proj.weight", [KV, H]), (p + "self_attn.o_proj.weight", [H, H]),
               (p + "post_attention_layernorm.weight", [H]),
               (p + "mlp.gate_proj.weight", [F, H]), (p + "mlp.up_proj.weight", [F, H]),
               (p + "mlp.down_proj.weight", [H, F])]
shapes.append(("model.norm.weight", [H]))
hdr, off = {}, 0
for name, shape in shapes:
    n = 2
    for d in shape:
        n *= d
    hdr[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + n]}
    off += n
h = json.dumps(hdr, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(sys.argv[1] + ".tmp", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    left = off
    while left:
        k = min(left, 1 << 24)
        f.write(os.urandom(k))
        left -= k
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
PY
fi

# measure LABEL OUT CMD...: runs CMD once to warm up, then $runs times;
# prints "LABEL median_s max_rss_MiB max_anon_MiB".
measure() {
python3 - "$runs" "$@" <<'PY'
import os, statistics, subprocess, sys, time
runs, label, out, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
def once():
    if os.path.exists(out):
        os.remove(out)
    t = time.perf_counter()
    p = subprocess.Popen(cmd)
    hwm = anon = 0
    while p.poll() is None:
        try:
            for line in open(f"/proc/{p.pid}/status"):
                if line.startswith("VmHWM:"):
                    hwm = max(hwm, int(line.split()[1]))
                elif line.startswith("RssAnon:"):
                    anon = max(anon, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.002)
    dt = time.perf_counter() - t
    status = p.returncode
    if status != 0:
        sys.exit(f"{label}: exit {status}")
    return dt, hwm, anon
once()
res = [once() for _ in range(runs)]
med = statistics.median(r[0] for r in res)
print(f"{label}\t{med:.3f}\t{max(r[1] for r in res)/1024:.1f}\t{max(r[2] for r in res)/1024:.1f}")
PY
}

echo "input: $input ($(stat -c %s "$input") bytes), $runs runs each, median"
printf 'tool\twall_s\tpeak_rss_MiB\tpeak_anon_MiB\n'
measure kiln "$work/kiln.irpa" "$kiln" params convert --quiet "$input" -o "$work/kiln.irpa"
measure iree-convert-parameters "$work/iree.irpa" "$iree" --quiet "--parameters=$input" "--output=$work/iree.irpa"
measure cp "$work/cp.safetensors" cp "$input" "$work/cp.safetensors"
if cmp -s "$work/kiln.irpa" "$work/iree.irpa"; then
  echo "kiln.irpa and iree.irpa are byte-identical"
else
  echo "kiln.irpa and iree.irpa DIFFER" >&2
  exit 1
fi
