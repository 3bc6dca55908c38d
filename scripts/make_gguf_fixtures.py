#!/usr/bin/env python3
"""Writes the GGUF test fixtures of kiln's params tests with the `gguf`
Python package and records that package's dequantized values.

Usage:
  python scripts/make_gguf_fixtures.py            # small fixtures -> tests/fixtures/params/gguf/
  python scripts/make_gguf_fixtures.py --smollm2 PATH.gguf
                                                  # reference values of the real SmolLM2 file

Outputs (all committed; total well under 2 MB):
  <type>.gguf           one small GGUF v3 file per ggml type, two tensors each
  expected.json         per file and tensor: type, dims, sha256 and the f32 bit
                        patterns of gguf.quants.dequantize's output
  metadata.gguf         every metadata value type, arrays, nested arrays of
                        strings and general.alignment = 64
  metadata_v2.gguf      the same file with the version field set to 2
  metadata.json         keys, value types and values as gguf.GGUFReader reads them
  smollm2_reference.json (with --smollm2) sha256 + 256 sampled values of
                        token_embd.weight (Q8_0) and blk.0.attn_q.weight (Q4_1)

Run with the kiln torch venv: ~/.cache/kiln/torch-venv/bin/python.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "params", "gguf")

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]
# Types gguf can quantize from f32; the K-quants it can only dequantize, so
# their blocks are random bytes with sane f16 scales.
QUANTIZABLE = {"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}
# Offsets of the f16 scale fields inside a block, per K-quant type.
K_SCALES = {"Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def f32_bits(a):
    return [int(x) for x in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).ravel()]


def sha(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()


def edge_values(n, rng):
    """Random normals plus values that stress rounding: ties, subnormals,
    large magnitudes, signed zeros."""
    v = rng.standard_normal(n).astype(np.float32) * 2.0
    special = np.array([0.0, -0.0, 1.0, -1.0, 1.00390625, 1.01171875, 65504.0, -65504.0,
                        6.1e-5, 5.96e-8, 1e-40, -1e-40, 3.0e38, 0.5, 0.25, 1e-3], dtype=np.float32)
    v[: len(special)] = special
    return v


def quant_tensor(tname, rows, cols, rng):
    """Returns (raw array to store, dequantized f32 array) for one tensor."""
    qt = Q[tname]
    if tname == "F32":
        data = edge_values(rows * cols, rng).reshape(rows, cols)
        return data, data
    if tname in QUANTIZABLE:
        data = edge_values(rows * cols, rng).reshape(rows, cols)
        if tname in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
            data = rng.standard_normal((rows, cols)).astype(np.float32)
        raw = gguf.quants.quantize(data, qt)
    else:
        block, tsize = GGML_QUANT_SIZES[qt]
        nblocks = rows * cols // block
        raw = rng.integers(0, 256, size=(nblocks, tsize), dtype=np.uint8)
        for off in K_SCALES[tname]:
            scale = (rng.standard_normal(nblocks) * 0.05).astype(np.float16)
            raw[:, off:off + 2] = scale.view(np.uint8).reshape(nblocks, 2)
        raw = raw.reshape(rows, cols // block * tsize)
    deq = gguf.quants.dequantize(raw, qt)
    return raw, deq


def write_type_files(rng):
    expected = {}
    for tname in TYPES:
        path = os.path.join(OUT, f"{tname.lower()}.gguf")
        w = gguf.GGUFWriter(path, "llama")
        shapes = [("a.weight", 2, 256), ("b.weight", 3, 512)]
        entries = {}
        for name, rows, cols in shapes:
            raw, deq = quant_tensor(tname, rows, cols, rng)
            if tname == "F32":
                w.add_tensor(name, raw)
            else:
                w.add_tensor(name, raw, raw_dtype=Q[tname])
            entries[name] = {
                "type": tname,
                "dims": [cols, rows],
                "sha256": sha(deq),
                "bits": f32_bits(deq),
            }
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        # Cross-check with gguf's own reader.
        r = gguf.GGUFReader(path)
        for t in r.tensors:
            again = gguf.quants.dequantize(t.data, t.tensor_type)
            assert sha(again) == entries[t.name]["sha256"], (path, t.name)
        expected[os.path.basename(path)] = entries
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
        f.write("\n")


def write_metadata_file():
    path = os.path.join(OUT, "metadata.gguf")
    w = gguf.GGUFWriter(path, "llama")
    T = gguf.GGUFValueType
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 1.5)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo wörld")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", -2.25)
    w.add_array("test.array_i32", [1, -2, 3])
    w.add_array("test.array_str", ["a", "bc", "", "Ġthe"])
    w.add_key_value("test.array_nested", [["x", "y"], ["z"]], T.ARRAY, sub_type=T.ARRAY)
    w.add_key_value("test.array_f32", [0.5, -1.0], T.ARRAY, sub_type=T.FLOAT32)
    w.add_key_value("test.array_bool", [True, False], T.ARRAY, sub_type=T.BOOL)
    w.add_uint32("llama.embedding_length", 64)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b"])
    w.add_array("tokenizer.ggml.merges", ["a b"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)
    w.add_uint32("tokenizer.ggml.eos_token_id", 1)
    w.add_tensor("x", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.add_tensor("y", np.arange(3, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = open(path, "rb").read()
    v2 = data[:4] + (2).to_bytes(4, "little") + data[8:]
    open(os.path.join(OUT, "metadata_v2.gguf"), "wb").write(v2)

    r = gguf.GGUFReader(path)
    fields = []
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        fields.append({"key": f.name, "types": [int(t) for t in f.types]})
    tensors = [{"name": t.name, "dims": [int(d) for d in t.shape], "offset": int(t.data_offset)}
               for t in r.tensors]
    with open(os.path.join(OUT, "metadata.json"), "w") as f:
        json.dump({"fields": fields, "tensors": tensors}, f, indent=1)
        f.write("\n")


def smollm2_reference(path):
    r = gguf.GGUFReader(path)
    out = {"file": os.path.basename(path), "tensors": {}}
    for t in r.tensors:
        if t.name not in ("token_embd.weight", "blk.0.attn_q.weight"):
            continue
        deq = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).ravel()
        n = deq.size
        idx = [int(i) for i in np.linspace(0, n - 1, 256).astype(np.int64)]
        out["tensors"][t.name] = {
            "type": t.tensor_type.name,
            "dims": [int(d) for d in t.shape],
            "numel": n,
            "sha256": sha(deq),
            "sample_index": idx,
            "sample_bits": f32_bits(deq[idx]),
        }
    dest = os.path.join(OUT, "smollm2_reference.json")
    with open(dest, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(dest)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", help="path of SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if args.smollm2:
        smollm2_reference(args.smollm2)
        return
    rng = np.random.default_rng(20261130)
    write_type_files(rng)
    write_metadata_file()
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    sys.exit(main())
