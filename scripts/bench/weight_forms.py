"""What one decode step's weight reads cost on the pinned IREE, by weight form.

A one-token decode multiplies every weight matrix by one vector, so its
floor is reading the weights once. This builds, for SmolLM2-135M's decode
weight set (30 layers x q/k/v/o/gate/up/down + the tied 49152x576 LM head,
random values), one module per storage form that does nothing but those
matrix-vector products with runtime vectors, compiles it for the host with
kiln's CPU preset flags (plus the flags named per row) and times it with
iree-benchmark-module (median of RUNS, local-task, or DEVICE=local-sync for
the calling thread alone). Also the machine's plain read bandwidth (a C loop
over 256 MiB on one core and on every core, when gcc is present).

  python scripts/bench/weight_forms.py IREE_VENV [RUNS]

Run it with the IREE venv's python, which has numpy (`kiln toolchain`
prints the venv: ~/.cache/kiln/iree-3.13.0), e.g.
  ~/.cache/kiln/iree-3.13.0/bin/python scripts/bench/weight_forms.py ~/.cache/kiln/iree-3.13.0
Forms:

  bf16         kiln's form: bf16 globals, convert to f32, dot_general
  bf16-3       the same bytes in three matrices (dispatch count, not bytes)
  q41-i8       GGUF Q4_1 kept exactly: i8 codes [N, K/32, 32] + f32 scale
               and min per block, dequantized in-graph, then contracted
  q41-i4       the same with the codes packed as i4 (2 per byte)
  q41-grouped  the codes contracted per block first, scale/min applied to
               the [N, K/32] partial sums (the form that needs no dequantized
               weight)
  w8-row       i8 weights with one f32 scale per row (lossy: not GGUF's
               numerics), convert fused into the matvec
  w8a8         i8 weights and the vector quantized to i8 per call, i8 x i8
               -> i32 with IREE's ukernels (lossy: weights and activations)
  w8a16        kiln's `--weights fast`: the vector as two i8 terms (round(x/s)
               and the rounded rest at s/254), one i8 x i8 product of two rows,
               the rows combined after it

  w8a16-s16    the same i8 weights, the vector rounded once to a 14-bit
               integer (|x| <= 8191: the i32 sums cannot overflow for K up
               to 2064) and both sides converted to i16: one s16 x s16
               product, IREE's avx512vnni kernel on x86 (the weights are
               packed at load as i16, twice the bytes)
  w8a16-s16s8  the 14-bit vector as i16 against the i8 weights as they are
               (IREE 3.13 has no s16 x s8 kernel)

4-bit candidates (issue 50; codes in [-8, 7], two per byte, i4 globals):

  w4-row       i4 codes with one f32 scale per row, the vector as `w8a16`'s
               two i8 terms: one i8 x i4 product (arm64's s8 x s4 kernel;
               x86 has no data tiling for it)
  w4-row-s16   the same codes against the vector as one 14-bit i16 term
               (IREE 3.13's x86 s16 x u4 kernel wants ui4, which no
               StableHLO input reaches)
  w4g32        GGUF's numerics kept: i4 codes per 32-block with an f16
               scale and minimum per block ([K/32, N] each), the vector as
               two i8 terms; products batched over the blocks, the i32 sums
               scaled and reduced, the minimums times each block's vector sum
  w4g32-s16    the same blocks against the vector as one 14-bit i16 term
  w4-f32       the codes widened to f32 and scaled per 32-block inside the
               contraction (dequantization fused, nothing hoisted)

Set FORMS="w8a8 w8a16" (names, space-separated) to run only those rows, and
MODEL=gemma3 for Gemma 3 270M's weight set (18 layers, the 262144-row head;
its w8a16 row has `fast`'s down projections in two terms) instead of SmolLM2's,
or MODEL=qwen15 for Qwen2.5 1.5B's (28 layers, untied 151936-row head: 1.54
G weights, out of any host's cache). The table gives each row's peak RSS
(iree-benchmark-module under /usr/bin/time) beside its time.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

LAYER = [("q", 576, 576), ("k", 192, 576), ("v", 192, 576), ("o", 576, 576),
         ("gate", 1536, 576), ("up", 1536, 576), ("down", 576, 1536)]
# kiln's host preset (src/iree/flags.rs, `Target::compile_flags`): data
# tiling on the global-optimization path, the packed weights hoisted to load.
PRESET = ["--iree-input-type=stablehlo", "--iree-hal-target-device=local",
          "--iree-hal-local-target-device-backends=llvm-cpu",
          "--iree-opt-data-tiling=false", "--iree-global-opt-data-tiling",
          "--iree-opt-const-expr-max-size-increase-threshold=1099511627776",
          "--iree-llvmcpu-target-cpu=host"]
# `kiln compile --low-memory`: no data tiling on either path.
NO_DATA_TILING = ["--iree-opt-data-tiling=false", "--iree-global-opt-data-tiling=false"]
# What `kiln compile` adds for a module with i4 weights
# (`iree::compile::module_flags`): nothing computed from the weights alone is
# kept at load if it is bigger than its inputs (a dequantized copy included).
NO_HOISTED_GROWTH = ["--iree-opt-const-expr-max-size-increase-threshold=0"]


def with_flags(flags):
    """kiln's preset with FLAGS added; a flag FLAGS sets replaces the preset's."""
    names = {f.split("=")[0] for f in flags}
    return [f for f in PRESET if f.split("=")[0] not in names] + flags


# MODEL=gemma3: Gemma 3 270M's decode weight set instead (18 layers of
# q/k/v/o/gate/up/down, the tied 262144x640 head); its `--weights fast`
# carries the down projections in two i8 terms (w16a16), which the w8a16
# row models as twice the down rows.
MODELS = {
    "smollm2": (30, LAYER, ("head", 49152, 576)),
    "gemma3": (18, [("q", 1024, 640), ("k", 256, 640), ("v", 256, 640), ("o", 640, 1024),
                    ("gate", 2048, 640), ("up", 2048, 640), ("down", 640, 2048)],
               ("head", 262144, 640)),
    "qwen15": (28, [("q", 1536, 1536), ("k", 256, 1536), ("v", 256, 1536), ("o", 1536, 1536),
                    ("gate", 8960, 1536), ("up", 8960, 1536), ("down", 1536, 8960)],
               ("head", 151936, 1536)),
}
MODEL = os.environ.get("MODEL", "smollm2")
# The IREE device the rows run on: local-task (IREE's worker threads, one
# per core) or local-sync (the calling thread alone).
DEVICE = os.environ.get("DEVICE", "local-task")


def mats(form):
    layers, layer, head = MODELS[MODEL]
    if form == "bf16-3":
        k0 = layer[0][2]
        fused = sum(r for n, r, c in layer if c == k0)
        rest = [(n, layers * r, c) for n, r, c in layer if c != k0]
        return [("all", layers * fused, k0), *rest, head]
    out = [(f"l{l}.{n}", r, c) for l in range(layers) for n, r, c in layer]
    if MODEL == "gemma3" and form.startswith("w8a16"):
        out = [(key, 2 * r if key.endswith(".down") else r, c) for key, r, c in out]
    return out + [head]


def widths():
    """The distinct vector lengths the products read (one input each)."""
    return sorted({k for _, _, k in mats("bf16")})


class Module:
    def __init__(self):
        self.globals, self.body, self.tensors, self.n = [], [], {}, 0

    def param(self, key, mlir_ty, st_dtype, arr):
        sym = f"w{len(self.globals)}"
        self.globals.append(f'  util.global private @{sym} = #flow.parameter.named<"model"::"{key}"> : {mlir_ty}')
        self.tensors[key] = (st_dtype, list(arr.shape), arr.tobytes())
        return self.emit(f"util.global.load @{sym} : {mlir_ty}")

    def emit(self, text):
        v = f"%v{self.n}"
        self.n += 1
        self.body.append(f"    {v} = {text}")
        return v

    def write(self, base, acc):
        text = "module @forms {\n" + "\n".join(self.globals) + "\n"
        args = ", ".join(f"%x{k}: tensor<1x{k}xf32>" for k in widths())
        text += f"  func.func @forms({args}) -> tensor<f32> {{\n"
        text += "    %zero = stablehlo.constant dense<0.0> : tensor<f32>\n"
        text += "\n".join(self.body) + f"\n    return {acc} : tensor<f32>\n  }}\n}}\n"
        open(base + ".mlir", "w").write(text)
        header, blobs, off = {}, [], 0
        for key, (dt, shape, data) in self.tensors.items():
            header[key] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
            off += len(data)
            blobs.append(data)
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(base + ".safetensors", "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for b in blobs:
                f.write(b)
        return off


def reduce(m, x, op, dims, in_ty, out_ty):
    """`op` (add, maximum) of f32 `x` over `dims`, from %zero."""
    k = m.n
    return m.emit(f'"stablehlo.reduce"({x}, %zero) ({{\n    ^bb0(%a{k}: tensor<f32>, %b{k}: tensor<f32>):\n'
                  f'      %c{k} = stablehlo.{op} %a{k}, %b{k} : tensor<f32>\n      stablehlo.return %c{k} : tensor<f32>\n'
                  f'    }}) {{dimensions = array<i64: {dims}>}} : ({in_ty}, tensor<f32>) -> {out_ty}')


def vector_scale(m, x, k):
    """max(|x|) / 127 of the vector `x` (1 x k), broadcast over it."""
    a = m.emit(f"stablehlo.abs {x} : tensor<1x{k}xf32>")
    mx = reduce(m, a, "maximum", "0, 1", f"tensor<1x{k}xf32>", "tensor<f32>")
    c = m.emit("stablehlo.constant dense<127.0> : tensor<f32>")
    sx = m.emit(f"stablehlo.divide {mx}, {c} : tensor<f32>")
    return m.emit(f"stablehlo.broadcast_in_dim {sx}, dims = [] : (tensor<f32>) -> tensor<1x{k}xf32>")


def row_sum(m, r, n):
    return reduce(m, r, "add", "0, 1", f"tensor<1x{n}xf32>", "tensor<f32>")


def two_terms(m, x, k):
    """`w8a16`'s vector: two i8 terms `[2, k]` and the broadcast scale."""
    sxb = vector_scale(m, x, k)
    t0 = m.emit(f"stablehlo.round_nearest_even {m.emit(f'stablehlo.divide {x}, {sxb} : tensor<1x{k}xf32>')} : tensor<1x{k}xf32>")
    rest = m.emit(f"stablehlo.subtract {x}, {m.emit(f'stablehlo.multiply {t0}, {sxb} : tensor<1x{k}xf32>')} : tensor<1x{k}xf32>")
    c2 = m.emit(f"stablehlo.constant dense<254.0> : tensor<1x{k}xf32>")
    s2 = m.emit(f"stablehlo.divide {sxb}, {c2} : tensor<1x{k}xf32>")
    t1 = m.emit(f"stablehlo.round_nearest_even {m.emit(f'stablehlo.divide {rest}, {s2} : tensor<1x{k}xf32>')} : tensor<1x{k}xf32>")
    both = m.emit(f"stablehlo.concatenate {t0}, {t1}, dim = 0 : (tensor<1x{k}xf32>, tensor<1x{k}xf32>) -> tensor<2x{k}xf32>")
    return m.emit(f"stablehlo.convert {both} : (tensor<2x{k}xf32>) -> tensor<2x{k}xi8>"), sxb


def combine_terms(m, yi, n, f32=False):
    """Row 0 plus row 1 / 254 of a two-term product `[2, n]`."""
    yf = yi if f32 else m.emit(f"stablehlo.convert {yi} : (tensor<2x{n}xi32>) -> tensor<2x{n}xf32>")
    y0 = m.emit(f'"stablehlo.slice"({yf}) {{start_indices = array<i64: 0, 0>, limit_indices = array<i64: 1, {n}>, strides = array<i64: 1, 1>}} : (tensor<2x{n}xf32>) -> tensor<1x{n}xf32>')
    y1 = m.emit(f'"stablehlo.slice"({yf}) {{start_indices = array<i64: 1, 0>, limit_indices = array<i64: 2, {n}>, strides = array<i64: 1, 1>}} : (tensor<2x{n}xf32>) -> tensor<1x{n}xf32>')
    c3 = m.emit(f"stablehlo.constant dense<254.0> : tensor<1x{n}xf32>")
    return m.emit(f"stablehlo.add {y0}, {m.emit(f'stablehlo.divide {y1}, {c3} : tensor<1x{n}xf32>')} : tensor<1x{n}xf32>")


def fourteen_bits(m, x, k):
    """The vector rounded once to a 14-bit integer, as i16."""
    a = m.emit(f"stablehlo.abs {x} : tensor<1x{k}xf32>")
    mx = reduce(m, a, "maximum", "0, 1", f"tensor<1x{k}xf32>", "tensor<f32>")
    c = m.emit("stablehlo.constant dense<8191.0> : tensor<f32>")
    sx = m.emit(f"stablehlo.divide {mx}, {c} : tensor<f32>")
    sxb = m.emit(f"stablehlo.broadcast_in_dim {sx}, dims = [] : (tensor<f32>) -> tensor<1x{k}xf32>")
    xr = m.emit(f"stablehlo.round_nearest_even {m.emit(f'stablehlo.divide {x}, {sxb} : tensor<1x{k}xf32>')} : tensor<1x{k}xf32>")
    return m.emit(f"stablehlo.convert {xr} : (tensor<1x{k}xf32>) -> tensor<1x{k}xi16>")


def build(form, base):
    rng = np.random.default_rng(0)
    m = Module()
    acc = "%zero"
    qx = {}
    for key, n, k in mats(form):
        x = f"%x{k}"
        b = k // 32
        if form in ("bf16", "bf16-3"):
            w = m.param(key, f"tensor<{n}x{k}xbf16>", "BF16", rng.integers(0, 1 << 16, (n, k), dtype=np.uint16) & 0xBFFF)
            wf = m.emit(f"stablehlo.convert {w} : (tensor<{n}x{k}xbf16>) -> tensor<{n}x{k}xf32>")
            r = m.emit(f"stablehlo.dot_general {x}, {wf}, contracting_dims = [1] x [1] : (tensor<1x{k}xf32>, tensor<{n}x{k}xf32>) -> tensor<1x{n}xf32>")
        elif form in ("q41-i8", "q41-i4", "q41-grouped"):
            qt = "i4" if form == "q41-i4" else "i8"
            codes = (rng.integers(0, 256, (n, b, 16), dtype=np.uint8) if qt == "i4"
                     else rng.integers(-8, 8, (n, b, 32), dtype=np.int8))
            q = m.param(key + ".q", f"tensor<{n}x{b}x32x{qt}>", "U8" if qt == "i4" else "I8", codes)
            d = m.param(key + ".d", f"tensor<{n}x{b}xf32>", "F32", (rng.random((n, b)) * 0.01).astype(np.float32))
            mn = m.param(key + ".m", f"tensor<{n}x{b}xf32>", "F32", (rng.random((n, b)) * -0.08).astype(np.float32))
            qf = m.emit(f"stablehlo.convert {q} : (tensor<{n}x{b}x32x{qt}>) -> tensor<{n}x{b}x32xf32>")
            xv = m.emit(f"stablehlo.reshape {x} : (tensor<1x{k}xf32>) -> tensor<{b}x32xf32>")
            if form == "q41-grouped":
                xb = m.emit(f"stablehlo.broadcast_in_dim {xv}, dims = [1, 2] : (tensor<{b}x32xf32>) -> tensor<{n}x{b}x32xf32>")
                p = m.emit(f"stablehlo.multiply {qf}, {xb} : tensor<{n}x{b}x32xf32>")
                t = reduce(m, p, "add", "2", f"tensor<{n}x{b}x32xf32>", f"tensor<{n}x{b}xf32>")
                td = m.emit(f"stablehlo.multiply {t}, {d} : tensor<{n}x{b}xf32>")
                xs = reduce(m, xv, "add", "1", f"tensor<{b}x32xf32>", f"tensor<{b}xf32>")
                xsb = m.emit(f"stablehlo.broadcast_in_dim {xs}, dims = [1] : (tensor<{b}xf32>) -> tensor<{n}x{b}xf32>")
                tm = m.emit(f"stablehlo.multiply {xsb}, {mn} : tensor<{n}x{b}xf32>")
                ts = m.emit(f"stablehlo.add {td}, {tm} : tensor<{n}x{b}xf32>")
                y = reduce(m, ts, "add", "1", f"tensor<{n}x{b}xf32>", f"tensor<{n}xf32>")
            else:
                db = m.emit(f"stablehlo.broadcast_in_dim {d}, dims = [0, 1] : (tensor<{n}x{b}xf32>) -> tensor<{n}x{b}x32xf32>")
                mb = m.emit(f"stablehlo.broadcast_in_dim {mn}, dims = [0, 1] : (tensor<{n}x{b}xf32>) -> tensor<{n}x{b}x32xf32>")
                w = m.emit(f"stablehlo.multiply {qf}, {db} : tensor<{n}x{b}x32xf32>")
                w = m.emit(f"stablehlo.add {w}, {mb} : tensor<{n}x{b}x32xf32>")
                y = m.emit(f"stablehlo.dot_general {w}, {xv}, contracting_dims = [1, 2] x [0, 1] : (tensor<{n}x{b}x32xf32>, tensor<{b}x32xf32>) -> tensor<{n}xf32>")
            r = m.emit(f"stablehlo.reshape {y} : (tensor<{n}xf32>) -> tensor<1x{n}xf32>")
        elif form in ("w8-row", "w8a8", "w8a16", "w8a16-s16", "w8a16-s16s8"):
            q = m.param(key, f"tensor<{n}x{k}xi8>", "I8", rng.integers(-127, 128, (n, k), dtype=np.int8))
            s = m.param(key + ".s", f"tensor<{n}xf32>", "F32", (rng.random(n) * 0.01).astype(np.float32))
            if form == "w8-row":
                qf = m.emit(f"stablehlo.convert {q} : (tensor<{n}x{k}xi8>) -> tensor<{n}x{k}xf32>")
                y = m.emit(f"stablehlo.dot_general {x}, {qf}, contracting_dims = [1] x [1] : (tensor<1x{k}xf32>, tensor<{n}x{k}xf32>) -> tensor<1x{n}xf32>")
            elif form in ("w8a16-s16", "w8a16-s16s8"):
                if k not in qx:  # the vector as one 14-bit integer once per call
                    qx[k] = fourteen_bits(m, x, k)
                if form == "w8a16-s16":
                    qw, wt = m.emit(f"stablehlo.convert {q} : (tensor<{n}x{k}xi8>) -> tensor<{n}x{k}xi16>"), "i16"
                else:
                    qw, wt = q, "i8"
                yi = m.emit(f"stablehlo.dot_general {qx[k]}, {qw}, contracting_dims = [1] x [1] : (tensor<1x{k}xi16>, tensor<{n}x{k}x{wt}>) -> tensor<1x{n}xi32>")
                y = m.emit(f"stablehlo.convert {yi} : (tensor<1x{n}xi32>) -> tensor<1x{n}xf32>")
            elif form == "w8a16":
                if k not in qx:  # the vector as two i8 terms once per call
                    qx[k] = two_terms(m, x, k)[0]
                yi = m.emit(f"stablehlo.dot_general {qx[k]}, {q}, contracting_dims = [1] x [1] : (tensor<2x{k}xi8>, tensor<{n}x{k}xi8>) -> tensor<2x{n}xi32>")
                y = combine_terms(m, yi, n)
            else:
                if k not in qx:  # the vector, quantized to i8 once per call
                    sxb = vector_scale(m, x, k)
                    xd = m.emit(f"stablehlo.divide {x}, {sxb} : tensor<1x{k}xf32>")
                    xr = m.emit(f"stablehlo.round_nearest_even {xd} : tensor<1x{k}xf32>")
                    qx[k] = m.emit(f"stablehlo.convert {xr} : (tensor<1x{k}xf32>) -> tensor<1x{k}xi8>")
                yi = m.emit(f"stablehlo.dot_general {qx[k]}, {q}, contracting_dims = [1] x [1] : (tensor<1x{k}xi8>, tensor<{n}x{k}xi8>) -> tensor<1x{n}xi32>")
                y = m.emit(f"stablehlo.convert {yi} : (tensor<1x{n}xi32>) -> tensor<1x{n}xf32>")
            sb = m.emit(f"stablehlo.reshape {s} : (tensor<{n}xf32>) -> tensor<1x{n}xf32>")
            r = m.emit(f"stablehlo.multiply {y}, {sb} : tensor<1x{n}xf32>")
        elif form in ("w4-row", "w4-row-s16"):
            q = m.param(key, f"tensor<{n}x{k}xi4>", "U8", rng.integers(0, 256, (n, k // 2), dtype=np.uint8))
            s = m.param(key + ".s", f"tensor<1x{n}xf32>", "F32", (rng.random((1, n)) * 0.01).astype(np.float32))
            if form == "w4-row":
                if k not in qx:
                    qx[k] = two_terms(m, x, k)[0]
                yi = m.emit(f"stablehlo.dot_general {qx[k]}, {q}, contracting_dims = [1] x [1] : (tensor<2x{k}xi8>, tensor<{n}x{k}xi4>) -> tensor<2x{n}xi32>")
                y = combine_terms(m, yi, n)
            else:
                if k not in qx:
                    qx[k] = fourteen_bits(m, x, k)
                yi = m.emit(f"stablehlo.dot_general {qx[k]}, {q}, contracting_dims = [1] x [1] : (tensor<1x{k}xi16>, tensor<{n}x{k}xi4>) -> tensor<1x{n}xi32>")
                y = m.emit(f"stablehlo.convert {yi} : (tensor<1x{n}xi32>) -> tensor<1x{n}xf32>")
            r = m.emit(f"stablehlo.multiply {y}, {s} : tensor<1x{n}xf32>")
        elif form in ("w4g32", "w4g32-s16", "w4-f32"):
            q = m.param(key, f"tensor<{b}x{n}x32xi4>", "U8", rng.integers(0, 256, (b, n, 16), dtype=np.uint8))
            d = m.param(key + ".d", f"tensor<{b}x{n}xf16>", "F16", (rng.random((b, n)) * 0.01).astype(np.float16))
            mn = m.param(key + ".m", f"tensor<{b}x{n}xf16>", "F16", (rng.random((b, n)) * -0.08).astype(np.float16))
            df = m.emit(f"stablehlo.convert {d} : (tensor<{b}x{n}xf16>) -> tensor<{b}x{n}xf32>")
            mf = m.emit(f"stablehlo.convert {mn} : (tensor<{b}x{n}xf16>) -> tensor<{b}x{n}xf32>")
            xv = m.emit(f"stablehlo.reshape {x} : (tensor<1x{k}xf32>) -> tensor<{b}x32xf32>")
            xs = reduce(m, xv, "add", "1", f"tensor<{b}x32xf32>", f"tensor<{b}xf32>")
            xs = m.emit(f"stablehlo.reshape {xs} : (tensor<{b}xf32>) -> tensor<1x{b}xf32>")
            tm = m.emit(f"stablehlo.dot_general {xs}, {mf}, contracting_dims = [1] x [0] : (tensor<1x{b}xf32>, tensor<{b}x{n}xf32>) -> tensor<1x{n}xf32>")
            if form == "w4g32":
                if k not in qx:
                    t = two_terms(m, x, k)
                    qx[k] = (t, m.emit(f"stablehlo.reshape {t[0]} : (tensor<2x{k}xi8>) -> tensor<2x{b}x32xi8>"))
                (_, sxb), xb = qx[k]
                xt = m.emit(f"stablehlo.transpose {xb}, dims = [1, 0, 2] : (tensor<2x{b}x32xi8>) -> tensor<{b}x2x32xi8>")
                p = m.emit(f"stablehlo.dot_general {xt}, {q}, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<{b}x2x32xi8>, tensor<{b}x{n}x32xi4>) -> tensor<{b}x2x{n}xi32>")
                pf = m.emit(f"stablehlo.convert {p} : (tensor<{b}x2x{n}xi32>) -> tensor<{b}x2x{n}xf32>")
                db = m.emit(f"stablehlo.broadcast_in_dim {df}, dims = [0, 2] : (tensor<{b}x{n}xf32>) -> tensor<{b}x2x{n}xf32>")
                ps = m.emit(f"stablehlo.multiply {pf}, {db} : tensor<{b}x2x{n}xf32>")
                yi = reduce(m, ps, "add", "0", f"tensor<{b}x2x{n}xf32>", f"tensor<2x{n}xf32>")
                y = combine_terms(m, yi, n, f32=True)
                sx = m.emit(f'"stablehlo.slice"({sxb}) {{start_indices = array<i64: 0, 0>, limit_indices = array<i64: 1, 1>, strides = array<i64: 1, 1>}} : (tensor<1x{k}xf32>) -> tensor<1x1xf32>')
                sxn = m.emit(f"stablehlo.broadcast_in_dim {sx}, dims = [0, 1] : (tensor<1x1xf32>) -> tensor<1x{n}xf32>")
                y = m.emit(f"stablehlo.multiply {y}, {sxn} : tensor<1x{n}xf32>")
            elif form == "w4g32-s16":
                if k not in qx:
                    t = fourteen_bits(m, x, k)
                    qx[k] = m.emit(f"stablehlo.reshape {t} : (tensor<1x{k}xi16>) -> tensor<{b}x1x32xi16>")
                p = m.emit(f"stablehlo.dot_general {qx[k]}, {q}, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<{b}x1x32xi16>, tensor<{b}x{n}x32xi4>) -> tensor<{b}x1x{n}xi32>")
                pf = m.emit(f"stablehlo.convert {p} : (tensor<{b}x1x{n}xi32>) -> tensor<{b}x1x{n}xf32>")
                db = m.emit(f"stablehlo.reshape {df} : (tensor<{b}x{n}xf32>) -> tensor<{b}x1x{n}xf32>")
                ps = m.emit(f"stablehlo.multiply {pf}, {db} : tensor<{b}x1x{n}xf32>")
                y = reduce(m, ps, "add", "0", f"tensor<{b}x1x{n}xf32>", f"tensor<1x{n}xf32>")
            else:
                qf = m.emit(f"stablehlo.convert {q} : (tensor<{b}x{n}x32xi4>) -> tensor<{b}x{n}x32xf32>")
                db = m.emit(f"stablehlo.broadcast_in_dim {df}, dims = [0, 1] : (tensor<{b}x{n}xf32>) -> tensor<{b}x{n}x32xf32>")
                w = m.emit(f"stablehlo.multiply {qf}, {db} : tensor<{b}x{n}x32xf32>")
                y = m.emit(f"stablehlo.dot_general {xv}, {w}, contracting_dims = [0, 1] x [0, 2] : (tensor<{b}x32xf32>, tensor<{b}x{n}x32xf32>) -> tensor<{n}xf32>")
                y = m.emit(f"stablehlo.reshape {y} : (tensor<{n}xf32>) -> tensor<1x{n}xf32>")
            r = m.emit(f"stablehlo.add {y}, {tm} : tensor<1x{n}xf32>")
        else:
            sys.exit(f"unknown form {form}")
        rs = row_sum(m, r, n)
        acc = m.emit(f"stablehlo.add {acc}, {rs} : tensor<f32>")
    return m.write(base, acc)


FORMS = [
    ("bf16", []),
    ("bf16-3", []),
    ("q41-i8", []),
    ("q41-i8", ["--iree-dispatch-creation-enable-aggressive-fusion"]),
    ("q41-i4", []),
    ("q41-grouped", []),
    ("q41-grouped", NO_DATA_TILING),
    ("w8-row", []),
    ("w8a8", []),
    ("w8a8", ["--iree-llvmcpu-enable-ukernels=all"]),
    ("w8a16", []),
    ("w8a16", ["--iree-llvmcpu-enable-ukernels=all"]),
    ("w8a16-s16", []),
    ("w8a16-s16s8", []),
    ("w4-row", []),
    ("w4-row-s16", []),
    ("w4g32", []),
    ("w4g32-s16", []),
    ("w4-f32", NO_DATA_TILING),
    ("q41-i4", NO_DATA_TILING + NO_HOISTED_GROWTH),
    ("w4-f32", NO_DATA_TILING + NO_HOISTED_GROWTH),
]


def read_bandwidth(tmp, threads=None):
    gcc = shutil.which("gcc")
    if not gcc:
        return None
    src = os.path.join(tmp, "bw.c")
    open(src, "w").write(r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static size_t n; static const double *buf; static int threads;
static void *run(void *p) {
  size_t id = (size_t)p, per = n / threads; const double *b = buf + per * id;
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < per; i += 4) { s0 += b[i]; s1 += b[i + 1]; s2 += b[i + 2]; s3 += b[i + 3]; }
  volatile double sink = s0 + s1 + s2 + s3; (void)sink; return 0;
}
int main(void) {
  threads = getenv("BW_THREADS") ? atoi(getenv("BW_THREADS")) : (int)sysconf(_SC_NPROCESSORS_ONLN); n = (256u << 20) / 8;
  double *b = aligned_alloc(64, n * 8); for (size_t i = 0; i < n; i++) b[i] = 1; buf = b;
  double best = 1e9;
  for (int r = 0; r < 10; r++) {
    struct timespec t0, t1; pthread_t th[64];
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < threads; i++) pthread_create(&th[i], 0, run, (void *)(size_t)i);
    for (int i = 0; i < threads; i++) pthread_join(th[i], 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double t = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9; if (t < best) best = t;
  }
  printf("%.1f %d\n", n * 8 / best / 1e9, threads); return 0;
}
""")
    exe = os.path.join(tmp, "bw")
    subprocess.run([gcc, "-O3", "-march=native", "-pthread", src, "-o", exe], check=True)
    env = dict(os.environ, **({"BW_THREADS": str(threads)} if threads else {}))
    gbs, threads = subprocess.run([exe], check=True, capture_output=True, text=True, env=env).stdout.split()
    return float(gbs), int(threads)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    venv, runs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
    pkgs = os.path.join(venv, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
    compiler = os.path.join(pkgs, "iree", "compiler", "_mlir_libs", "iree-compile")
    bench = os.path.join(pkgs, "iree", "_runtime_libs", "iree-benchmark-module")
    for tool in (compiler, bench):
        if not os.path.exists(tool):
            sys.exit(f"bench_weight_forms: {tool} not found (is {venv} kiln's IREE venv?)")
    tmp = tempfile.mkdtemp(prefix="kiln-forms-")
    try:
        for threads in (1, None):
            bw = read_bandwidth(tmp, threads)
            if bw:
                print(f"plain read bandwidth: {bw[0]:.1f} GB/s ({bw[1]} threads, 256 MiB, best of 10)")
        print(f"{'form':12} {'flags':50} {'MB':>6} {'ms':>7} {'GB/s':>6} {'RSS MB':>7}", flush=True)
        built = {}
        only = os.environ.get("FORMS", "").split()
        for form, flags in FORMS:
            if only and form not in only:
                continue
            base = os.path.join(tmp, form)
            if form not in built:
                built[form] = build(form, base)
            vmfb = base + "-" + str(abs(hash(tuple(flags)))) + ".vmfb"
            c = subprocess.run([compiler, *with_flags(flags), base + ".mlir", "-o", vmfb], capture_output=True, text=True)
            label = " ".join(f.replace("--iree-", "") for f in flags) or "(kiln's preset)"
            if c.returncode != 0:
                err = next((l for l in c.stderr.splitlines() if "error" in l), c.stderr[:200])
                print(f"{form:12} {label:50} compile failed: {err}")
                continue
            rss = os.path.join(tmp, "rss")
            out = subprocess.run(["/usr/bin/time", "-o", rss, "-f", "%M", bench, f"--device={DEVICE}", f"--module={vmfb}",
                                  f"--parameters=model={base}.safetensors", "--function=forms",
                                  *[f"--input=1x{k}xf32=0.5" for k in widths()],
                                  f"--benchmark_repetitions={runs}", "--benchmark_min_time=1x"],
                                 capture_output=True, text=True, check=True).stdout
            line = next(l for l in out.splitlines() if "_median" in l).split()
            ms = float(line[1]) * {"ms": 1.0, "us": 1e-3, "s": 1e3}[line[2]]
            mb = built[form] / 1e6
            peak = int(open(rss).read().split()[-1]) / 1024
            print(f"{form:12} {label:50} {mb:6.0f} {ms:7.2f} {mb / ms:6.1f} {peak:7.0f}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
