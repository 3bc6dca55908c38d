"""Where a decode step's CPU time goes: one `perf record` of kiln's decode
(iree-benchmark-module) or of llama.cpp's (llama-bench tg), split by what the
sampled code was doing, as core-milliseconds per token.

  python3 scripts/dev/profile_split.py kiln PERF_DATA MS_PER_CALL DISPATCH_ELF
  python3 scripts/dev/profile_split.py llama PERF_DATA MS_PER_TOKEN

PERF_DATA must be recorded at 1000 Hz (`perf record -F 1000`) after the
load (`--delay`), so every sample is 1 ms of one core's time during decode.
The sampling window (first to last sample) divided by the per-token wall
time gives the tokens it holds.

kiln's dispatch code is loaded by IREE's embedded ELF loader, which perf
sees as anonymous `[JIT]` memory. DISPATCH_ELF is the same module's
executable, dumped by `kiln compile ... -- --iree-hal-dump-executable-
binaries-to=DIR` (the .vmfb is byte-identical with the flag): its load
address is the page offset at which the sampled addresses fall on
instruction boundaries, and a function whose body holds `vpmaddwd` (AVX2)
or `vpdpwssd`/`vpdpbusd` (AVX-512 VNNI) is an integer product (the i8 and
i16 `mmt4d` of the `fast` forms on x86).

Categories (one line each, `name core-ms/token share`):
  products       kiln: dispatch functions with integer multiply-adds;
                 llama.cpp: ggml_vec_dot_* and the repacked gemv kernels
  other ops      every other sampled line of kernel code (norms, RoPE,
                 attention, softmax, roundings, packs, cache updates)
  runtime        the runtime's own code on the worker threads (IREE's task
                 system, ggml's graph walk and OpenMP barriers), kernel
                 time included
  caller         the calling thread (IREE: the VM and its wait on the
                 call's fence; llama.cpp: its main thread's non-kernel code)
"""

import bisect
import collections
import re
import subprocess
import sys


def samples(data):
    """(comm, tid, seconds, ip, sym, dso) per sample."""
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "comm,tid,time,ip,sym,dso"],
        capture_output=True, text=True, check=True).stdout
    rows = []
    pat = re.compile(r"^\s*(.+?)\s+(\d+)\s+([\d.]+):\s+([0-9a-f]+)\s+(.*)\s+\((.*)\)\s*$")
    for line in out.splitlines():
        m = pat.match(line)
        if m:
            rows.append((m.group(1), int(m.group(2)), float(m.group(3)),
                         int(m.group(4), 16), m.group(5).strip(), m.group(6)))
    return rows


def elf_functions(elf):
    """Instruction addresses, function starts and which functions multiply
    integers, from the dispatch ELF's disassembly."""
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", elf],
                         capture_output=True, text=True, check=True).stdout
    ins = {}
    for line in dis.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
        if m:
            ins[int(m.group(1), 16)] = m.group(2)
    addrs = sorted(ins)
    starts = [a for a in addrs if ins[a].startswith("push   %rbp")]
    # Integer multiply-adds: AVX2's, and AVX-512 VNNI's.
    PRODUCT_OPS = ("vpmaddwd", "vpdpwssd", "vpdpbusd")
    product = set()
    for i, s in enumerate(starts):
        lo = bisect.bisect_left(addrs, s)
        hi = bisect.bisect_left(addrs, starts[i + 1]) if i + 1 < len(starts) else len(addrs)
        if any(op in ins[a] for a in addrs[lo:hi] for op in PRODUCT_OPS):
            product.add(s)
    return ins, starts, product


def is_jit(dso):
    """perf's name for anonymous executable memory: `[JIT] tid N` in a
    report, `/tmp/perf-PID.map` in a script."""
    return dso.startswith("[JIT]") or re.match(r"/tmp/perf-\d+\.map$", dso) is not None


def kiln_kind(rows, elf):
    ins, starts, product = elf_functions(elf)
    jit = [r[3] for r in rows if is_jit(r[5])]
    if not jit:
        sys.exit("profile_split: no dispatch samples (is this a kiln decode recording?)")
    top = collections.Counter(jit).most_common(200)
    lo = (min(jit) & ~0xFFFFF) - 0x100000
    base = max(range(lo, max(jit), 0x1000),
               key=lambda b: sum(n for a, n in top if (a - b) in ins))
    main = min(r[1] for r in rows)

    def kind(r):
        comm, tid, _, ip, _, dso = r
        if is_jit(dso):
            a = ip - base
            i = bisect.bisect_right(starts, a) - 1
            return "products" if i >= 0 and starts[i] in product else "other ops"
        return "caller" if tid == main else "runtime"
    return kind


def llama_kind(rows):
    main = min(r[1] for r in rows)

    def kind(r):
        comm, tid, _, ip, sym, dso = r
        if "libggml" in dso:
            if sym.startswith("ggml_vec_dot") or "gemv" in sym or "gemm" in sym:
                return "products"
            if sym.startswith("ggml_compute_forward") and sym != "ggml_compute_forward_mul_mat" \
                    or sym.startswith(("ggml_vec_", "quantize_row", "ggml_cpu_fp")):
                return "other ops"
        if "libm" in dso:
            return "other ops"
        return "caller" if tid == main and "libgomp" not in dso else "runtime"
    return kind


def main():
    who, data, ms = sys.argv[1], sys.argv[2], float(sys.argv[3])
    rows = samples(data)
    if len(rows) < 100:
        sys.exit(f"profile_split: {data} holds {len(rows)} samples; record longer")
    kind = kiln_kind(rows, sys.argv[4]) if who == "kiln" else llama_kind(rows)
    window = max(r[2] for r in rows) - min(r[2] for r in rows)
    tokens = window * 1000 / ms
    count = collections.Counter(kind(r) for r in rows)
    total = sum(count.values())
    for name in ["products", "other ops", "runtime", "caller"]:
        print(f"{name.replace(' ', '-')} {count[name] / tokens:.2f} {count[name] / total:.3f}")
    print(f"total {total / tokens:.2f} 1.000")


if __name__ == "__main__":
    main()
