#!/usr/bin/env python3
"""Writes the crafted bad parameter files under tests/attacks/ and
expected.json (for each file: a substring of kiln's error and the tensor the
error must name, or null). Pure standard library; run from anywhere:

    python3 tests/attacks/make_attacks.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = {}


def emit(name, data, contains, tensor=None):
    path = os.path.join(HERE, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    EXPECTED[name] = {"contains": contains, "tensor": tensor}


# ---------------------------------------------------------------- safetensors
def st(header, data, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def st_hdr(a=None, b=None, extra=None):
    h = {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
         "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}
    if a:
        h["a"].update(a)
    if b:
        h["b"].update(b)
    if extra:
        h.update(extra)
    return h


DATA = bytes(range(22))
emit("safetensors/empty.safetensors", b"", "truncated")
emit("safetensors/short_length.safetensors", b"\x10\x00\x00", "truncated")
emit("safetensors/header_too_large.safetensors", struct.pack("<Q", 1 << 40) + b"{}", "exceeds the limit")
emit("safetensors/header_len_u64_max.safetensors", struct.pack("<Q", 2**64 - 1) + b"{}", "exceeds the limit")
emit("safetensors/truncated_header.safetensors", struct.pack("<Q", 100) + b'{"a":{"dtype"', "truncated")
emit("safetensors/truncated_data.safetensors", st(st_hdr(), DATA[:19]), "past the end", "b")
emit("safetensors/trailing_data.safetensors", st(st_hdr(), DATA + b"xxxx"), "ends at byte")
bad_utf8 = json.dumps(st_hdr(), separators=(",", ":")).encode().replace(b'"a"', b'"\xff"')
emit("safetensors/bad_utf8.safetensors", st(None, DATA, bad_utf8), "not valid UTF-8")
emit("safetensors/bad_json.safetensors", st(None, DATA, b'{"a":{"dtype":"F32",'), "invalid JSON")
emit("safetensors/not_an_object.safetensors", st(None, b"", b"[1,2]"), "does not start with")
dup = b'{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"a":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}}'
emit("safetensors/duplicate_name.safetensors", st(None, DATA, dup), "duplicate tensor name", "a")
emit("safetensors/unknown_dtype.safetensors", st(st_hdr(a={"dtype": "F8_E9"}), DATA), "unknown or unsupported dtype", "a")
emit("safetensors/shape_mismatch.safetensors", st(st_hdr(a={"shape": [2, 3]}), DATA), "shape and dtype need 24 bytes", "a")
emit("safetensors/dims_overflow.safetensors", st(st_hdr(a={"shape": [2**32, 2**32, 16]}), DATA), "overflows", "a")
emit("safetensors/offsets_gap.safetensors", st(st_hdr(b={"data_offsets": [18, 24]}), DATA + b"\0\0"), "gap", "b")
emit("safetensors/offsets_overlap.safetensors", st(st_hdr(b={"data_offsets": [10, 16]}), DATA), "overlaps", "b")
emit("safetensors/offsets_reversed.safetensors", st(st_hdr(b={"data_offsets": [22, 16]}), DATA), "before begin", "b")
emit("safetensors/offsets_out_of_range.safetensors", st(st_hdr(b={"data_offsets": [16, 2**63]}), DATA), "past the end", "b")
emit("safetensors/offsets_above_u64.safetensors", st(st_hdr(b={"data_offsets": [16, 2**64 + 6]}), DATA), "below 2^64", "b")
emit("safetensors/negative_dim.safetensors", st(st_hdr(b={"shape": [-3]}), DATA), "non-negative", "b")
emit("safetensors/metadata_not_string.safetensors", st(st_hdr(extra={"__metadata__": {"k": 1}}), DATA), "metadata `k`")
emit("safetensors/missing_offsets.safetensors",
     st({"a": {"dtype": "F32", "shape": [2, 2]}}, DATA[:16]), "missing `data_offsets`", "a")
emit("safetensors/unknown_field.safetensors", st(st_hdr(a={"extra": 1}), DATA), "unknown field", "a")


# ---------------------------------------------------------------------- irpa
def irpa(entries, storage, count=None, hdr_patch=None):
    """entries: list of dicts(type, name, size(optional), extra bytes after the 60-byte header,
    align). Lays out like IREE's builder; returns bytes."""
    table = b""
    meta = b""
    offs = []
    for e in entries:
        table += b"\0" * ((16 - len(table) % 16) % 16)
        offs.append(len(table))
        name = e["name"]
        name_off = e.get("name_off", len(meta))
        meta += name
        body = e["body"]
        size = e.get("size", 60 + len(body))
        table += struct.pack("<QIQQQQQQ", size, e["type"], 0, name_off, e.get("name_len", len(name)),
                             0, 0, e.get("align", 64 if e["type"] == 2 else 0)) + body
    table_start = 96
    meta_start = table_start + len(table)
    storage_start = (meta_start + len(meta) + 63) // 64 * 64
    n = len(entries) if count is None else count
    header = struct.pack("<IHHQQQQQQQQQQ", 0x41505249, 0, 0, 88, 0, 0, n,
                         table_start, len(table), meta_start, len(meta), storage_start, len(storage))
    if hdr_patch:
        header = hdr_patch(bytearray(header))
    out = bytearray(header) + b"\0" * (table_start - len(header)) + table + meta
    out += b"\0" * (storage_start - len(out)) + storage
    out += b"\0" * ((4096 - len(out) % 4096) % 4096)
    return bytes(out)


def data_entry(name, off, length, **kw):
    return dict(type=2, name=name, body=struct.pack("<QQ", off, length), **kw)


def splat_entry(name, length, pattern, plen=None):
    p = pattern + b"\0" * (16 - len(pattern))
    return dict(type=1, name=name, body=struct.pack("<Q", length) + p + bytes([plen or len(pattern)]))


STORAGE = bytes(range(64)) + bytes(range(24))
GOOD = [data_entry(b"w", 0, 64), data_entry(b"b", 64, 24), splat_entry(b"s", 16, b"\x00\x00\xc0\x3f")]
good = irpa(GOOD, STORAGE)


def patch(buf, off, fmt, *vals):
    b = bytearray(buf)
    struct.pack_into(fmt, b, off, *vals)
    return bytes(b)


emit("irpa/empty.irpa", b"", "truncated")
emit("irpa/short.irpa", good[:20], "truncated")
emit("irpa/bad_magic.irpa", b"IRPB" + good[4:], "bad IRPA magic")
emit("irpa/bad_version.irpa", patch(good, 4, "<H", 1), "unsupported IRPA version 1.0")
emit("irpa/header_size_96.irpa", patch(good, 8, "<Q", 96), "header_size is 96")
emit("irpa/header_size_past_eof.irpa", patch(good, 8, "<Q", 10**9), "truncated")
emit("irpa/chained_header.irpa", patch(good, 16, "<Q", 4096), "chained headers")
emit("irpa/segment_overflow.irpa", patch(good, 72, "<QQ", 2**64 - 8, 64), "overflows")
emit("irpa/segment_past_eof.irpa", patch(good, 80, "<Q", 10**6), "truncated")
emit("irpa/absurd_entry_count.irpa", patch(good, 32, "<Q", 2**60), "absurd entry count")
emit("irpa/entry_size_too_small.irpa", patch(good, 96, "<Q", 12), "entry_size 12")
emit("irpa/entry_size_past_table.irpa", patch(good, 96, "<Q", 10**5), "entry_size 100000")
emit("irpa/name_out_of_range.irpa", patch(good, 96 + 20, "<Q", 10**6), "name range")
emit("irpa/bad_utf8_name.irpa", irpa([data_entry(b"\xff\xfe", 0, 64)], STORAGE[:64]), "not valid UTF-8")
emit("irpa/duplicate_names.irpa", irpa([data_entry(b"w", 0, 64), data_entry(b"w", 64, 24)], STORAGE),
     "duplicate tensor name", "w")
emit("irpa/unknown_entry_type.irpa", irpa([dict(type=9, name=b"q", body=b"\0" * 16)], b""), "unknown entry type 9")
emit("irpa/external_entry.irpa",
     irpa([dict(type=3, name=b"ext", body=struct.pack("<QQQQ", 0, 3, 0, 100))], b""), "EXTERNAL", "ext")
emit("irpa/splat_pattern_3.irpa", irpa([splat_entry(b"s", 12, b"\x01\x02\x03")], b""), "pattern length 3", "s")
emit("irpa/splat_pattern_17.irpa", irpa([splat_entry(b"s", 17, b"\x01", plen=17)], b""), "pattern length 17", "s")
emit("irpa/splat_length_not_multiple.irpa", irpa([splat_entry(b"s", 10, b"\0\0\0\0")], b""), "not a multiple", "s")
emit("irpa/splat_entry_too_small.irpa", irpa([dict(type=1, name=b"s", body=b"\0" * 8)], b""), "SPLAT entry_size 68", "s")
emit("irpa/data_outside_storage.irpa", irpa([data_entry(b"w", 32, 64)], STORAGE[:64]), "outside the storage segment", "w")
emit("irpa/data_offset_overflow.irpa", irpa([data_entry(b"w", 2**64 - 1, 2)], STORAGE[:64]), "outside the storage segment", "w")
emit("irpa/misaligned_data.irpa", irpa([data_entry(b"w", 1, 16)], STORAGE[:64]), "not aligned to 64", "w")
emit("irpa/alignment_not_pow2.irpa", irpa([data_entry(b"w", 0, 16, align=48)], STORAGE[:64]), "not a power of two", "w")
# Found by cargo-fuzz: an empty storage segment whose offset lies past the
# end of the file, with a zero-length DATA entry in it.
emit("irpa/empty_storage_past_eof.irpa",
     patch(irpa([data_entry(b"z", 0, 0)], b""), 72, "<Q", 2**54), "truncated")
KEEP = {"irpa/fuzz_crash_empty_storage_past_eof.irpa": ("truncated", None)}  # the fuzzer's own input
for k, (c, t) in KEEP.items():
    EXPECTED[k] = {"contains": c, "tensor": t}
emit("irpa/truncated_storage.irpa", good[:400], "truncated")
emit("irpa/truncated_entry_table.irpa", good[:150], "truncated")


# ---------------------------------------------------------------------- gguf
def gstr(s):
    return struct.pack("<Q", len(s)) + s


def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def tinfo(name, dims, ty, off, n_dims=None):
    return gstr(name) + struct.pack("<I", len(dims) if n_dims is None else n_dims) + \
        b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ty, off)


def gguf(kvs, infos, data, version=3, n_t=None, n_kv=None, align=32):
    head = b"GGUF" + struct.pack("<IQQ", version, len(infos) if n_t is None else n_t,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(infos)
    body += b"\0" * ((align - len(body) % align) % align)
    return body + data


KV_OK = [kv(b"general.alignment", 4, struct.pack("<I", 32)),
         kv(b"tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + gstr(b"a") + gstr(b"b"))]
T_OK = [tinfo(b"t", [4], 0, 0), tinfo(b"q", [32], 8, 32)]
GDATA = struct.pack("<4f", 1, 2, 3, 4) + b"\0" * 16 + b"\x00\x3c" + bytes(range(32))
gg = gguf(KV_OK, T_OK, GDATA)

emit("gguf/empty.gguf", b"", "truncated")
emit("gguf/bad_magic.gguf", b"GGUG" + gg[4:], "bad GGUF magic")
emit("gguf/version_1.gguf", gguf(KV_OK, T_OK, GDATA, version=1), "unsupported GGUF version 1")
emit("gguf/big_endian.gguf", b"GGUF" + struct.pack(">I", 3) + gg[8:], "big-endian")
emit("gguf/absurd_tensor_count.gguf", gguf(KV_OK, T_OK, GDATA, n_t=2**62), "absurd tensor count")
emit("gguf/absurd_kv_count.gguf", gguf(KV_OK, T_OK, GDATA, n_kv=2**62), "absurd metadata key/value count")
emit("gguf/key_len_overflow.gguf", gguf([struct.pack("<Q", 2**64 - 1) + b"x"], [], b"", n_kv=1), "truncated")
emit("gguf/truncated_in_kv.gguf", gg[:24 + 20], "truncated")
emit("gguf/truncated_in_tensor_info.gguf", gg[:len(gg) - len(GDATA) - 20], "truncated")
emit("gguf/truncated_data.gguf", gg[:-10], "past the end", "q")
emit("gguf/bad_utf8_key.gguf", gguf([kv(b"gen\xffkey", 4, b"\0\0\0\0")], T_OK, GDATA), "not valid UTF-8")
emit("gguf/bad_utf8_string.gguf", gguf([kv(b"k", 8, gstr(b"\xc3\x28"))], T_OK, GDATA), "not valid UTF-8")
emit("gguf/unknown_value_type.gguf", gguf([kv(b"k", 13, b"\0" * 8)], T_OK, GDATA), "unknown value type 13")
emit("gguf/absurd_array_len.gguf", gguf([kv(b"k", 9, struct.pack("<IQ", 8, 2**61))], T_OK, GDATA), "absurd array element")
emit("gguf/unknown_array_type.gguf", gguf([kv(b"k", 9, struct.pack("<IQ", 77, 1))], T_OK, GDATA), "unknown array element type")
emit("gguf/bad_bool.gguf", gguf([kv(b"k", 7, b"\x02")], T_OK, GDATA), "bool byte is 2")
nested = struct.pack("<IQ", 9, 1) * 12 + struct.pack("<IQ", 4, 0)
emit("gguf/deeply_nested_array.gguf", gguf([kv(b"k", 9, nested)], T_OK, GDATA), "nested deeper")
emit("gguf/unknown_ggml_type.gguf", gguf(KV_OK, [tinfo(b"t", [4], 99, 0), T_OK[1]], GDATA), "ggml type 99", "t")
emit("gguf/too_many_dims.gguf", gguf(KV_OK, [tinfo(b"t", [1, 1, 1, 1, 4], 0, 0), T_OK[1]], GDATA), "5 dimensions", "t")
emit("gguf/dims_overflow.gguf", gguf(KV_OK, [tinfo(b"t", [2**32, 2**32, 2**32], 0, 0), T_OK[1]], GDATA), "element count overflows", "t")
emit("gguf/misaligned_offset.gguf", gguf(KV_OK, [T_OK[0], tinfo(b"q", [32], 8, 20)], GDATA), "not aligned to 32", "q")
emit("gguf/overlapping_tensors.gguf", gguf(KV_OK, [T_OK[0], tinfo(b"q", [32], 8, 0)], GDATA), "overlaps", "q")
emit("gguf/duplicate_tensor_names.gguf", gguf(KV_OK, [T_OK[0], tinfo(b"t", [32], 8, 32)], GDATA), "duplicate tensor name", "t")
emit("gguf/bad_alignment.gguf", gguf([kv(b"general.alignment", 4, struct.pack("<I", 3))], T_OK, GDATA),
     "general.alignment")
emit("gguf/block_size_mismatch.gguf", gguf(KV_OK, [T_OK[0], tinfo(b"q", [31], 8, 32)], GDATA), "block size", "q")
emit("gguf/duplicate_keys.gguf", gguf([KV_OK[0], KV_OK[0]], T_OK, GDATA), "duplicate key")

with open(os.path.join(HERE, "expected.json"), "w") as f:
    json.dump(EXPECTED, f, indent=1, sort_keys=True)
    f.write("\n")
print(f"{len(EXPECTED)} attack files")
