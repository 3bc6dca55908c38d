#!/usr/bin/env python3
"""Writes the block-quantized GGUF fixtures of `kiln export --weights keep`
and transformers' outputs on them (tests/quantized.rs).

Two tiny Llama GGUFs (hidden 256 so that K-quant super-blocks fit a row),
whose matrices together use every block type kiln keeps, each at least once
as a matmul weight, and Q8_0 / Q4_K as the embedding:

  tiny-llama-quant-mix.gguf   untied; token_embd Q8_0, output Q6_K
  tiny-llama-quant-tied.gguf  tied; token_embd Q4_K (gathered and the head)

Legacy types (Q8_0, Q4_*, Q5_*) and F16/BF16 are quantized from random
normals with the gguf package's own quantizer; the K-quants (which it cannot
quantize) are random blocks with sane f16 super-block scales. The reference
is transformers loading the GGUF (it dequantizes every tensor to f32 with
gguf.quants.dequantize), run as the hf fixtures are: expected.json-style
argmax and margin per position at SEQ 8 and 33.

Outputs (committed): tests/fixtures/gguf/quant/<name>.gguf and <name>.json.
Run with the kiln torch venv: scripts/make-fixtures.sh quant.
"""
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
import gguf
from gguf import GGMLQuantizationType as Q
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_json import write_json  # noqa: E402
from make_hf_fixtures import SEQS, cases_for, check_quality, run, summarize  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "gguf" / "quant"

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, VOCAB = 256, 4, 2, 512, 2, 128
HEAD_DIM = HIDDEN // HEADS

BLOCK = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]

FIXTURES = {
    "tiny-llama-quant-mix": {
        "seed": 71,
        "tied": False,
        "token_embd": Q.Q8_0,
        "output": Q.Q6_K,
        "blocks": [
            [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K],
            [Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q4_0, Q.Q4_1, Q.Q5_0],
        ],
    },
    "tiny-llama-quant-tied": {
        "seed": 72,
        "tied": True,
        "token_embd": Q.Q4_K,
        "blocks": [
            [Q.Q5_K, Q.Q6_K, Q.Q4_1, Q.Q8_0, Q.Q5_1, Q.Q4_0, Q.Q4_K],
            [Q.Q5_0, Q.Q4_K, Q.Q6_K, Q.F16, Q.Q8_0, Q.Q5_K, Q.Q5_1],
        ],
    },
}


def shape_of(part):
    """(rows, cols) of a block tensor in HF layout."""
    return {
        "attn_q": (HIDDEN, HIDDEN),
        "attn_k": (KV_HEADS * HEAD_DIM, HIDDEN),
        "attn_v": (KV_HEADS * HEAD_DIM, HIDDEN),
        "attn_output": (HIDDEN, HIDDEN),
        "ffn_gate": (FFN, HIDDEN),
        "ffn_up": (FFN, HIDDEN),
        "ffn_down": (HIDDEN, FFN),
    }[part]


def k_quant_blocks(qtype, rows, cols, rng, scale):
    """Random K-quant blocks whose values are about N(0, scale²)-sized."""
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    n = rows * cols // bs
    b = rng.integers(0, 256, size=(n, ts), dtype=np.uint8)
    if qtype in (Q.Q4_K, Q.Q5_K):
        bits = 4 if qtype == Q.Q4_K else 5
        # x = d·sc·q − dmin·m, sc and m in 0..63, q in 0..2^bits−1: centre
        # it with dmin·E[m] = d·E[sc]·E[q].
        d = scale * 3.0 / (31.5 * (2**bits - 1))
        dmin = d * (2**bits - 1) / 2
        b[:, 0:2] = np.full(n, d, dtype=np.float16).view(np.uint8).reshape(n, 2)
        b[:, 2:4] = np.full(n, dmin, dtype=np.float16).view(np.uint8).reshape(n, 2)
    else:  # Q6_K: x = d·sc·(q − 32), sc in −128..127
        d = scale * 3.0 / (64 * 32)
        b[:, 208:210] = np.full(n, d, dtype=np.float16).view(np.uint8).reshape(n, 2)
    return b.reshape(rows, cols // bs * ts)


def tensor(qtype, rows, cols, rng, scale):
    """(data for GGUFWriter.add_tensor, raw_dtype)."""
    if qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        return k_quant_blocks(qtype, rows, cols, rng, scale), qtype
    v = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    if qtype == Q.F16:
        return v.astype(np.float16), None
    return gguf.quants.quantize(v, qtype), qtype


def write(name, spec):
    rng = np.random.default_rng(spec["seed"])
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(LAYERS)
    w.add_context_length(64)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(VOCAB)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list([f"<t{i}>" for i in range(VOCAB)])
    w.add_token_types([gguf.TokenType.NORMAL] * VOCAB)
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    tensors = {}
    # Initializer range 0.4 as the hf fixtures; norms 1 + 0.2·N(0, 1).
    tensors["token_embd.weight"] = tensor(spec["token_embd"], VOCAB, HIDDEN, rng, 0.4)
    if not spec["tied"]:
        tensors["output.weight"] = tensor(spec["output"], VOCAB, HIDDEN, rng, 0.4)
    tensors["output_norm.weight"] = ((1 + 0.2 * rng.standard_normal(HIDDEN)).astype(np.float32), None)
    for layer, types in enumerate(spec["blocks"]):
        for part, qtype in zip(BLOCK, types):
            rows, cols = shape_of(part)
            scale = 0.4 / np.sqrt(cols / 48)
            tensors[f"blk.{layer}.{part}.weight"] = tensor(qtype, rows, cols, rng, scale)
        for norm in ("attn_norm", "ffn_norm"):
            tensors[f"blk.{layer}.{norm}.weight"] = (
                (1 + 0.2 * rng.standard_normal(HIDDEN)).astype(np.float32),
                None,
            )
    types = {}
    for tname in sorted(tensors):
        data, raw = tensors[tname]
        if raw is None:
            w.add_tensor(tname, data)
            types[tname] = {np.float32: "F32", np.float16: "F16"}[data.dtype.type]
        else:
            w.add_tensor(tname, data, raw_dtype=raw)
            types[tname] = raw.name
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    model = AutoModelForCausalLM.from_pretrained(
        str(OUT), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    assert model.config.tie_word_embeddings == spec["tied"], name
    seqs = []
    for seq in SEQS:
        cases = []
        for toks in cases_for(VOCAB, seq, rng):
            padded = toks + [0] * (seq - len(toks))
            argmax, margin, top1 = summarize(run(model, padded))
            check_quality(f"{name} seq={seq} len={len(toks)}", padded, argmax, margin)
            cases.append({"tokens": toks, "input": padded, "argmax": argmax, "margin": margin, "top_logit": top1})
        seqs.append({"seq": seq, "cases": cases})
    write_json(
        OUT / f"{name}.json",
        {
            "name": name,
            "note": "block-quantized tiny Llama GGUF (scripts/make_quant_fixtures.py)",
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "gguf_version": __import__("importlib.metadata").metadata.version("gguf"),
            "reference": "transformers from_pretrained(dir, gguf_file=..., dtype=float32, "
            "attn_implementation='eager') (GGUF tensors dequantized to f32); input = tokens "
            "padded with 0 to seq; no attention_mask",
            "pad_id": 0,
            "weights_dtype": "GGUF",
            "tensor_types": types,
            "seqs": seqs,
        },
    )
    print(f"{name}: {path.stat().st_size} bytes", file=sys.stderr)


def quantize_reference():
    """quantize.json: f32 rows and gguf.quants.quantize's Q8_0 and Q4_0
    bytes for them (`kiln export --weights q8_0|q4_0` must write the same)."""
    rng = np.random.default_rng(73)
    rows = [rng.standard_normal(64).astype(np.float32) * s for s in (1.0, 0.01, 300.0)]
    rows.append(np.zeros(64, dtype=np.float32))  # d = 0
    # Rounding ties of both quantizers: values on exact halves of d.
    ties = np.array([127.0, -127.0, 0.5, -0.5, 1.5, -1.5, 2.5, 63.5] * 8, dtype=np.float32)
    rows.append(ties)
    neg = rng.standard_normal(64).astype(np.float32)
    neg[5] = -4.0  # a negative largest magnitude (Q4_0's signed max)
    neg[40] = 4.0
    rows.append(neg)
    x = np.stack(rows)
    write_json(
        OUT / "quantize.json",
        {
            "note": "gguf.quants.quantize of these f32 rows (scripts/make_quant_fixtures.py)",
            "gguf_version": __import__("importlib.metadata").metadata.version("gguf"),
            "shape": list(x.shape),
            "f32_bits": [int(v) for v in x.view(np.uint32).ravel()],
            "Q8_0": gguf.quants.quantize(x, Q.Q8_0).tobytes().hex(),
            "Q4_0": gguf.quants.quantize(x, Q.Q4_0).tobytes().hex(),
        },
    )


def main():
    torch.set_num_threads(2)
    quantize_reference()
    if sys.argv[1:] == ["--quantize-only"]:
        return
    for name, spec in FIXTURES.items():
        write(name, spec)


if __name__ == "__main__":
    main()
