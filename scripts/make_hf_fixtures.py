#!/usr/bin/env python3
"""Maintainer tool: build tiny random HF checkpoints (Llama, Mistral, Qwen2,
Phi-3, Gemma, Gemma-2) and their transformers reference outputs under
tests/fixtures/hf/<name>/.

Usage: make_hf_fixtures.py [NAME ...]   (default: every fixture; with names,
only those, e.g. to add a fixture without rewriting the others).

Run through scripts/make-fixtures.sh (which provides a venv with torch +
transformers). The outputs are committed; tests never run this script.

For each fixture this writes:
  config.json, model.safetensors   (transformers save_pretrained, safetensors)
  expected.json                    (argmax + margin per position, see README)

Every reference is computed by reloading the checkpoint from disk with
`from_pretrained(dir, dtype=float32, attn_implementation="eager")`, i.e. from
exactly the files a loader sees. bf16 weights are upcast to f32 by
from_pretrained; the rotary inv_freq buffer is computed in f32.
"""

import json
import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_json import write_json  # noqa: E402
from transformers import (
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GemmaConfig,
    GemmaForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "hf"
SEQS = [8, 33]
INIT_RANGE = 0.4

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}


def base_kwargs(**over):
    kw = dict(
        vocab_size=96,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        initializer_range=INIT_RANGE,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    kw.update(over)
    return kw


# The Gemma 2 fixtures' shared knobs.
GEMMA2_KNOBS = dict(
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    pad_token_id=None,
    hidden_activation="gelu_pytorch_tanh",
    attn_logit_softcapping=4.0,
    final_logit_softcapping=15.0,
    sliding_window=16,
)

# name -> (config class, model class, config kwargs, seed, weight dtype)
FIXTURES = {
    "tiny-llama-tied-gqa": (
        LlamaConfig,
        LlamaForCausalLM,
        base_kwargs(tie_word_embeddings=True, num_attention_heads=4, num_key_value_heads=2),
        1001,
        torch.float32,
    ),
    "tiny-llama-untied-mha": (
        LlamaConfig,
        LlamaForCausalLM,
        base_kwargs(
            vocab_size=80,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=4,
            num_key_value_heads=4,
        ),
        1002,
        torch.float32,
    ),
    "tiny-llama-head-dim": (
        LlamaConfig,
        LlamaForCausalLM,
        base_kwargs(
            hidden_size=48,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            rope_parameters={"rope_type": "default", "rope_theta": 500.0},
        ),
        1003,
        torch.float32,
    ),
    "tiny-llama3-mqa": (
        LlamaConfig,
        LlamaForCausalLM,
        base_kwargs(
            vocab_size=112,
            hidden_size=64,
            intermediate_size=96,
            num_attention_heads=4,
            num_key_value_heads=1,
            rope_parameters=dict(LLAMA3_ROPE),
        ),
        1004,
        torch.float32,
    ),
    "tiny-mistral": (
        MistralConfig,
        MistralForCausalLM,
        base_kwargs(
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        1005,
        torch.float32,
    ),
    "tiny-llama-bf16": (
        LlamaConfig,
        LlamaForCausalLM,
        base_kwargs(tie_word_embeddings=False, num_attention_heads=4, num_key_value_heads=2),
        1006,
        torch.bfloat16,
    ),
    "tiny-qwen2": (
        Qwen2Config,
        Qwen2ForCausalLM,
        base_kwargs(
            tie_word_embeddings=True,
            num_attention_heads=4,
            num_key_value_heads=2,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        1007,
        torch.float32,
    ),
    "tiny-qwen3": (
        Qwen3Config,
        Qwen3ForCausalLM,
        base_kwargs(
            tie_word_embeddings=True,
            num_attention_heads=4,
            num_key_value_heads=2,
            # 128, as the released models (and transformers' GGUF loader,
            # which reads no key_length for qwen3, assumes).
            head_dim=128,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        1014,
        torch.float32,
    ),
    "tiny-phi3": (
        Phi3Config,
        Phi3ForCausalLM,
        base_kwargs(
            num_attention_heads=4,
            num_key_value_heads=2,
            pad_token_id=None,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        ),
        1008,
        torch.float32,
    ),
    "tiny-phi3-longrope": (
        Phi3Config,
        Phi3ForCausalLM,
        base_kwargs(
            num_attention_heads=4,
            num_key_value_heads=4,
            pad_token_id=None,
            original_max_position_embeddings=16,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 1.0,
                # 6 = head_dim 12 / 2 each; short for SEQ <= 16, long above
                "short_factor": [1.0, 1.3, 1.9, 2.6, 3.1, 3.7],
                "long_factor": [1.2, 2.5, 4.0, 7.5, 11.0, 16.0],
                "original_max_position_embeddings": 16,
            },
        ),
        1009,
        torch.float32,
    ),
    "tiny-gemma": (
        GemmaConfig,
        GemmaForCausalLM,
        base_kwargs(
            tie_word_embeddings=True,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            pad_token_id=None,
            hidden_act="gelu_pytorch_tanh",
        ),
        1010,
        torch.float32,
    ),
    "tiny-gemma2": (
        Gemma2Config,
        Gemma2ForCausalLM,
        base_kwargs(**GEMMA2_KNOBS, tie_word_embeddings=False, query_pre_attn_scalar=24),
        1011,
        torch.float32,
    ),
    # What a GGUF can express (tests/fixtures/gguf/tiny-gemma2-tied.gguf is
    # written from it): llama.cpp's Gemma 2 ties the head and scales
    # attention by 1/sqrt(head_dim). Embeddings scaled by 0.1 after init
    # (EMBED_SCALE): tied, the sqrt(hidden)-scaled embedding would dominate
    # the sandwich-normed stream and every argmax would echo the input.
    "tiny-gemma2-tied": (
        Gemma2Config,
        Gemma2ForCausalLM,
        base_kwargs(**GEMMA2_KNOBS, tie_word_embeddings=True, query_pre_attn_scalar=16),
        1013,
        torch.float32,
    ),
}

FIXTURES["tiny-gemma3"] = (
    Gemma3TextConfig,
    Gemma3ForCausalLM,
    base_kwargs(
        tie_word_embeddings=True,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        pad_token_id=None,
        hidden_activation="gelu_pytorch_tanh",
        # = head_dim, and layers 0-4 local, 5 global (transformers' default
        # pattern): what a GGUF can express, since llama.cpp assumes both.
        query_pre_attn_scalar=16,
        sliding_window=16,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        },
    ),
    1015,
    torch.float32,
)

# Fixtures whose token embeddings are scaled after init (see tiny-gemma2-tied).
EMBED_SCALE = {"tiny-gemma2-tied": 0.1, "tiny-gemma3": 0.1}

# Families whose RMSNorm scales by (1 + w): norm weights are perturbed
# around 0 there (w = 0.2*N(0,1)), around 1 elsewhere.
NORM_PLUS_ONE = {"tiny-gemma", "tiny-gemma2", "tiny-gemma2-tied", "tiny-gemma3"}

NOTES = {
    "tiny-llama-tied-gqa": "tied embeddings (no lm_head.weight), 4 heads / 2 KV heads",
    "tiny-llama-untied-mha": "untied lm_head, MHA (num_key_value_heads = num_attention_heads)",
    "tiny-llama-head-dim": "head_dim 16 != hidden 48 / 4 heads; GQA 4/2; rope_theta 500",
    "tiny-llama3-mqa": "llama3 RoPE scaling (original_max_position_embeddings 16), MQA (1 KV head)",
    "tiny-mistral": "model_type mistral, sliding_window 4096 (>= every SEQ), GQA 4/2",
    "tiny-llama-bf16": "weights stored as bf16; reference = same bf16 weights upcast to f32, inv_freq in f32",
    "tiny-qwen2": "model_type qwen2: q/k/v biases (0.5*N(0,1)), tied embeddings, GQA 4/2, rope_theta 1e6, "
    "use_sliding_window false",
    "tiny-qwen3": "model_type qwen3: per-head q/k RMSNorm before RoPE (q_norm/k_norm weights "
    "1 + 0.2*N(0,1)), no biases, head_dim 128 != 48 / 4, tied, GQA 4/2, rope_theta 1e6",
    "tiny-phi3": "model_type phi3: fused qkv_proj and gate_up_proj, partial_rotary_factor 0.5 "
    "(6 of 12 head dims rotated), GQA 4/2, untied",
    "tiny-phi3-longrope": "model_type phi3: longrope (original_max_position_embeddings 16, "
    "max_position_embeddings 64: short_factor at SEQ 8, long_factor at SEQ 33, attention_factor "
    "sqrt(1 + ln 4 / ln 16) on cos/sin), MHA 4/4",
    "tiny-gemma2": "model_type gemma2: Gemma plus sandwich norms (post-attention, pre/post-MLP; "
    "w = 0.2*N(0,1)), query_pre_attn_scalar 24 (!= head_dim 16), attn_logit_softcapping 4, "
    "final_logit_softcapping 15, layer 0 local (sliding_window 16: active at SEQ 33) and layer 1 global, "
    "GQA 4/2, untied (tied, the scaled embedding dominates the sandwich-normed stream and the "
    "argmax echoes the input)",
    "tiny-gemma2-tied": "model_type gemma2 as a GGUF can hold it (written to tests/fixtures/gguf/"
    "tiny-gemma2-tied.gguf): tiny-gemma2's knobs with a tied head and query_pre_attn_scalar = head_dim 16 "
    "(llama.cpp's Gemma 2 always ties and scales by 1/sqrt(head_dim)); embeddings scaled by 0.1 after "
    "init so the tied head does not echo the input; GQA 4/2",
    "tiny-gemma3": "model_type gemma3_text: Gemma 2's sandwich norms plus q/k head norms (1 + w), "
    "layers 0-4 local (sliding_window 16, RoPE base 1e4) and 5 global (RoPE base 1e6), "
    "query_pre_attn_scalar = head_dim 16, no soft-capping, tied (embeddings x 0.1 after init, as "
    "tiny-gemma2-tied), GQA 4/2",
    "tiny-gemma": "model_type gemma: embeddings x sqrt(48), RMSNorm (1 + w) with w = 0.2*N(0,1), GeGLU "
    "(gelu_pytorch_tanh), head_dim 16 != 48 / 4, MQA (1 KV head), tied",
}

# Hand-edited config variants: name -> (source fixture, edit function, note).


def edit_no_kv_heads(cfg):
    """Drop num_key_value_heads (absent = MHA) and head_dim (absent = hidden/heads)."""
    assert cfg["num_key_value_heads"] == cfg["num_attention_heads"]
    assert cfg["head_dim"] == cfg["hidden_size"] // cfg["num_attention_heads"]
    del cfg["num_key_value_heads"]
    del cfg["head_dim"]
    return cfg


def edit_old_style(cfg):
    """transformers 4.x spelling: top-level rope_theta + rope_scaling, torch_dtype."""
    rp = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rp["rope_theta"]
    cfg["rope_scaling"] = {
        "factor": rp["factor"],
        "high_freq_factor": rp["high_freq_factor"],
        "low_freq_factor": rp["low_freq_factor"],
        "original_max_position_embeddings": rp["original_max_position_embeddings"],
        "rope_type": "llama3",
    }
    cfg["torch_dtype"] = cfg.pop("dtype")
    return dict(sorted(cfg.items()))


def edit_window(cfg):
    """A sliding window (5) narrower than every SEQ: every layer sees only
    the last 5 keys."""
    assert cfg["sliding_window"] == 4096
    cfg["sliding_window"] = 5
    return cfg


# Variants whose outputs must differ from their source fixture's.
CHANGED_VARIANTS = {"tiny-mistral-window"}

VARIANTS = {
    "tiny-mistral-window": (
        "tiny-mistral",
        edit_window,
        "config.json of tiny-mistral with sliding_window 5 (< every SEQ): each query attends to "
        "itself and the 4 keys before it; same weights, different outputs",
    ),
    "tiny-llama-untied-mha-no-kv-heads": (
        "tiny-llama-untied-mha",
        edit_no_kv_heads,
        "config.json of tiny-llama-untied-mha with the num_key_value_heads and head_dim keys "
        "removed (absent = MHA, head_dim = hidden/heads); same weights, same outputs",
    ),
    "tiny-llama3-mqa-old-config": (
        "tiny-llama3-mqa",
        edit_old_style,
        "config.json of tiny-llama3-mqa rewritten in the transformers 4.x style: top-level "
        "rope_theta and rope_scaling {rope_type: llama3, ...}, torch_dtype instead of dtype, "
        "no rope_parameters; same weights, same outputs",
    ),
}


def perturb(model, gen, norm_center=1.0):
    """Norm weights norm_center + 0.2*N(0,1) and biases 0.5*N(0,1), so a
    loader that drops them fails."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(norm_center + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))


def dropped_changes_argmax(d, what, edit):
    """Assert that editing the state dict (dropping biases, zeroing norm
    weights, ...) changes some argmax: a loader that skipped those tensors
    would fail the tests."""
    model = load_f32(d)
    rng = np.random.default_rng(11)
    ids = [int(t) for t in rng.integers(1, model.config.vocab_size, size=33)]
    a = run(model, ids)
    with torch.no_grad():
        for name, p in model.named_parameters():
            edit(name, p)
    b = run(model, ids)
    n = int((a.argmax(-1) != b.argmax(-1)).sum())
    assert n > 0, f"{d.name}: {what} does not change any argmax"
    print(f"{d.name}: {what} changes {n}/33 argmaxes", file=sys.stderr)


def zero_if(pred, value=0.0):
    def edit(name, p):
        if pred(name):
            p.fill_(value)

    return edit


def cases_for(vocab, seq, rng):
    """Full-length case, a shorter padded case, and a 1-token case."""
    lens = [seq, max(2, (seq * 5) // 8), 1]
    out = []
    for n in lens:
        toks = [int(t) for t in rng.integers(1, vocab, size=n)]
        out.append(toks)
    return out


def run(model, padded):
    """Logits [SEQ, vocab] for a padded sequence, plain causal mask, no attention_mask."""
    with torch.no_grad():
        ids = torch.tensor([padded], dtype=torch.long)
        return model(input_ids=ids).logits[0].float()


def summarize(logits):
    top = torch.topk(logits, 2, dim=-1)
    argmax = [int(i) for i in top.indices[:, 0]]
    margin = [float(v) for v in (top.values[:, 0] - top.values[:, 1])]
    top1 = [float(v) for v in top.values[:, 0]]
    return argmax, margin, top1


def check_quality(name, padded, argmax, margin):
    """Predictions must not echo the input id at the same or the next position.

    Echoing the pad id 0 inside the padding is not counted (a random model
    fed a run of zeros may well predict 0 there); every other echo is.
    """
    seq = len(padded)

    def echoes(p, q):
        return q < seq and padded[q] != 0 and argmax[p] == padded[q]

    echo = sum(1 for p in range(seq) if echoes(p, p) or echoes(p, p + 1))
    assert echo < seq / 2, f"{name}: {echo}/{seq} positions echo the input"
    small = sum(1 for m in margin if m <= 1e-3)
    assert small <= seq // 10, f"{name}: {small}/{seq} margins <= 1e-3"
    return echo, small


def config_summary(cfg_json):
    keys = [
        "model_type",
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rms_norm_eps",
        "tie_word_embeddings",
        "rope_parameters",
        "rope_theta",
        "rope_scaling",
        "sliding_window",
        "dtype",
        "torch_dtype",
        "attention_bias",
        "mlp_bias",
        "bos_token_id",
        "eos_token_id",
        # family keys (absent from the Llama/Mistral configs)
        "original_max_position_embeddings",
        "use_sliding_window",
        "max_window_layers",
        "layer_types",
        "hidden_activation",
        "query_pre_attn_scalar",
        "attn_logit_softcapping",
        "final_logit_softcapping",
    ]
    return {k: cfg_json[k] for k in keys if k in cfg_json}


def load_f32(d):
    return AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager"
    ).eval()


def expected_for(name, d, seed, note, source=None):
    """Reload the checkpoint from disk in f32 and compute the reference outputs."""
    model = load_f32(d)
    cfg_json = json.loads((d / "config.json").read_text())
    vocab = model.config.vocab_size
    rng = np.random.default_rng(seed)
    seqs = []
    stats = []
    for seq in SEQS:
        cases = []
        for toks in cases_for(vocab, seq, rng):
            padded = toks + [0] * (seq - len(toks))
            logits = run(model, padded)
            argmax, margin, top1 = summarize(logits)
            echo, small = check_quality(f"{name} seq={seq} len={len(toks)}", padded, argmax, margin)
            stats.append((seq, len(toks), echo, small))
            cases.append(
                {
                    "tokens": toks,
                    "input": padded,
                    "argmax": argmax,
                    "margin": margin,
                    "top_logit": top1,
                }
            )
        seqs.append({"seq": seq, "cases": cases})
    st = _safetensors_shapes(d / "model.safetensors")
    doc = {
        "name": name,
        "note": note,
        "source_fixture": source,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "reference": "transformers from_pretrained(dir, dtype=float32, attn_implementation='eager'); "
        "input = tokens padded with 0 to seq; no attention_mask (plain causal); "
        "argmax/margin/top_logit over the f32 logits at every position",
        "pad_id": 0,
        "weights_dtype": _safetensors_dtype(d / "model.safetensors"),
        "tensors": st,
        "config": config_summary(cfg_json),
        "seqs": seqs,
    }
    return doc, stats, model


def _safetensors_shapes(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in sorted(f.keys())}


def _safetensors_dtype(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        dts = sorted({str(f.get_slice(k).get_dtype()) for k in f.keys()})
    return dts[0] if len(dts) == 1 else dts


def compare_llama3_scaling(d):
    """Assert the llama3 RoPE scaling changes the outputs vs. the unscaled model."""
    scaled = load_f32(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg["rope_parameters"]["rope_theta"]}
    tmp = OUT / ".tmp-unscaled"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    shutil.copy(d / "model.safetensors", tmp / "model.safetensors")
    write_json(tmp / "config.json", cfg)
    unscaled = load_f32(tmp)
    shutil.rmtree(tmp)
    rng = np.random.default_rng(7)
    ids = [int(t) for t in rng.integers(1, scaled.config.vocab_size, size=33)]
    a = run(scaled, ids)
    b = run(unscaled, ids)
    diff = float((a - b).abs().max())
    am = int((a.argmax(-1) != b.argmax(-1)).sum())
    # position 0 is rotation-free, so it must agree
    assert torch.allclose(a[0], b[0], atol=1e-5)
    assert diff > 1e-2, f"llama3 scaling has no visible effect (max diff {diff})"
    assert am > 0, "llama3 scaling changes logits but no argmax"
    return diff, am


GGUF_OUT = REPO / "tests" / "fixtures" / "gguf"


# HF fixture -> GGUF architecture, for the GGUF files written from it.
GGUF_ARCH = {
    "tiny-llama3-mqa": "llama",
    "tiny-qwen2": "qwen2",
    "tiny-qwen3": "qwen3",
    "tiny-phi3": "phi3",
    "tiny-phi3-longrope": "phi3",
    "tiny-gemma": "gemma",
    "tiny-gemma2-tied": "gemma2",
    "tiny-gemma3": "gemma3",
}


def gguf_metadata(w, arch, cfg):
    """The hyperparameters llama.cpp's convert_hf_to_gguf.py writes for
    `arch` (its set_gguf_parameters / generate_extra_tensors)."""
    import gguf

    rope = cfg.get("rope_parameters") or {}
    n_embd, n_head = cfg["hidden_size"], cfg["num_attention_heads"]
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(cfg.get("num_key_value_heads", n_head))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if arch in ("llama", "qwen2", "qwen3", "phi3"):
        w.add_rope_freq_base(rope["rope_theta"])
    if arch == "qwen3":
        # TextModel.set_gguf_parameters: an explicit head_dim.
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if arch == "llama":
        # LlamaModel.set_gguf_parameters / generate_extra_tensors.
        head_dim = cfg.get("head_dim") or n_embd // n_head
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(head_dim)
        if cfg.get("head_dim"):
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
        if rope.get("rope_type") == "llama3":
            base, factor = rope["rope_theta"], rope.get("factor", 8.0)
            low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
            old = rope.get("original_max_position_embeddings", 8192)
            freqs = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
            low_wavelen, high_wavelen = old / low, old / high
            factors = []
            for freq in freqs:
                wavelen = 2 * math.pi / freq
                if wavelen < high_wavelen:
                    factors.append(1)
                elif wavelen > low_wavelen:
                    factors.append(factor)
                else:
                    smooth = (old / wavelen - low) / (high - low)
                    factors.append(1 / ((1 - smooth) / factor + smooth))
            return {"rope_freqs.weight": torch.tensor(factors, dtype=torch.float32).numpy()}
    if arch in ("gemma", "gemma2", "gemma3"):
        # GemmaModel/Gemma2Model: key/value length = head_dim, no rope base.
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    if arch == "gemma3":
        # Gemma3Model: the global layers' base; window; final soft-capping.
        w.add_rope_freq_base(rope.get("full_attention", rope).get("rope_theta", 1_000_000.0))
        if cfg.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        w.add_sliding_window(cfg["sliding_window"])
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
        w.add_sliding_window(cfg["sliding_window"])
    if arch == "phi3":
        orig = rope.get("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 1.0) * n_embd) // n_head)
        w.add_sliding_window(cfg.get("sliding_window") or 0)
        if rope.get("rope_type") == "longrope":
            scale = cfg["max_position_embeddings"] / orig
            attn = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0
            w.add_rope_scaling_attn_factors(attn)
            return {
                "rope_factors_long.weight": np.array(rope["long_factor"], dtype=np.float32),
                "rope_factors_short.weight": np.array(rope["short_factor"], dtype=np.float32),
            }
    return {}


def write_gguf(name, d):
    """tests/fixtures/gguf/NAME.gguf: the HF fixture's weights as llama.cpp's
    converter lays out its architecture: tensor names from the gguf
    package's own TensorNameMap, every tensor F32, a dummy vocabulary.
    Llama: Q/K rows permuted for llama.cpp's interleaved RoPE, Llama 3
    scaling as the `rope_freqs.weight` factors. Qwen2, Phi-3, Gemma: Q/K not
    permuted (NEOX RoPE); Phi-3's LongRoPE factors as tensors; Gemma's norm
    weights with the 1 added and no lm_head (llama.cpp's Gemma ties the
    head). Checked by reading it back with transformers' GGUF loader (llama,
    qwen2, phi3, gemma2: the same parameters as the HF folder, Llama's Q/K
    un-permuted by it; qwen2 also the same logits) or, for gemma
    (transformers has no GGUF loader for it), with the gguf package's
    reader."""
    import gguf
    from safetensors.torch import load_file

    arch = GGUF_ARCH[name]
    cfg = json.loads((d / "config.json").read_text())
    sd = load_file(str(d / "model.safetensors"))
    GGUF_OUT.mkdir(parents=True, exist_ok=True)
    path = GGUF_OUT / f"{name}.gguf"
    arch_enum = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    tmap = gguf.get_tensor_name_map(arch_enum, cfg["num_hidden_layers"])
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    extra = gguf_metadata(w, arch, cfg)
    vocab = cfg["vocab_size"]
    if arch in ("qwen2", "qwen3", "llama"):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("llama-bpe" if arch == "llama" else "qwen2")
        w.add_token_list([f"<t{i}>" for i in range(vocab)])
        w.add_token_types([gguf.TokenType.NORMAL] * vocab)
        w.add_token_merges([])
    else:
        w.add_tokenizer_model("llama")
        w.add_token_list([f"<t{i}>" for i in range(vocab)])
        w.add_token_scores([0.0] * vocab)
        w.add_token_types([gguf.TokenType.NORMAL] * vocab)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    if arch == "phi3":
        # transformers' Phi3Config defaults pad_token_id to 32000, beyond the
        # tiny vocabulary; the fixtures pad with 0.
        w.add_pad_token_id(0)
    tensors = dict(extra)
    for hf, t in sd.items():
        if arch in ("gemma", "gemma2", "gemma3") and hf == "lm_head.weight":
            continue
        gname = tmap.get_name(hf, try_suffixes=(".weight", ".bias"))
        assert gname, f"{name}: the gguf package maps no GGUF name to {hf}"
        v = t.float().numpy()
        if arch == "llama" and hf.endswith(("q_proj.weight", "k_proj.weight")):
            # LlamaModel.permute: llama.cpp's interleaved RoPE layout.
            heads = cfg["num_attention_heads"]
            if hf.endswith("k_proj.weight"):
                heads = cfg.get("num_key_value_heads", heads)
            v = v.reshape(heads, 2, v.shape[0] // heads // 2, *v.shape[1:]).swapaxes(1, 2).reshape(v.shape)
        if arch in ("gemma", "gemma2", "gemma3") and hf.endswith("norm.weight"):
            v = v + np.float32(1.0)
        tensors[gname] = v
    for gname in sorted(tensors):
        w.add_tensor(gname, tensors[gname])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    hf_model = load_f32(d)
    if arch == "gemma":
        r = gguf.GGUFReader(str(path))
        back = {t.name: np.array(t.data) for t in r.tensors}
        for hf, t in sd.items():
            v = back[tmap.get_name(hf, try_suffixes=(".weight", ".bias"))].reshape(t.shape)
            if hf.endswith("norm.weight"):
                v = v - np.float32(1.0)
            assert np.abs(v - t.float().numpy()).max() <= 1.2e-7, f"{name}.gguf: {hf} reads back differently"
        print(f"{name}.gguf: the gguf reader gives the HF tensors back", file=sys.stderr)
        return
    gg_model = AutoModelForCausalLM.from_pretrained(
        str(GGUF_OUT), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    mine, theirs = hf_model.state_dict(), gg_model.state_dict()
    for k, v in mine.items():
        if k == "lm_head.weight" and hf_model.config.tie_word_embeddings:
            continue
        diff = float((theirs[k].float() - v).abs().max())
        assert diff <= 1.2e-7, f"{name}.gguf: transformers reads {k} differently (max diff {diff})"
    print(f"{name}.gguf: transformers' GGUF loader gives the HF folder's parameters", file=sys.stderr)
    if arch == "qwen2":
        rng = np.random.default_rng(17)
        ids = [int(t) for t in rng.integers(1, cfg["vocab_size"], size=33)]
        a, b = run(hf_model, ids), run(gg_model, ids)
        diff = float((a - b).abs().max())
        assert diff < 1e-4, f"transformers reads {name}.gguf differently (max |dlogit| {diff})"
        print(f"{name}.gguf: transformers' GGUF loader gives the HF logits (max diff {diff:.2e})", file=sys.stderr)


def family_checks(name, d):
    """What each new-family fixture must prove: the tensors a careless loader
    could drop (biases, norm weights) and the RoPE variants change argmaxes."""
    if name in GGUF_ARCH:
        write_gguf(name, d)
    if name == "tiny-qwen3":
        dropped_changes_argmax(
            d, "setting the q/k head norm weights to 1", zero_if(lambda n: n.endswith(("q_norm.weight", "k_norm.weight")), 1.0)
        )
    if name == "tiny-qwen2":
        dropped_changes_argmax(d, "zeroing the q/k/v biases", zero_if(lambda n: n.endswith(".bias")))
    if name in NORM_PLUS_ONE:
        dropped_changes_argmax(d, "zeroing the norm weights (w = 0: scale 1)", zero_if(lambda n: n.endswith("norm.weight")))
    if name.startswith("tiny-phi3"):
        dropped_changes_argmax(d, "setting the norm weights to 1", zero_if(lambda n: n.endswith("norm.weight"), 1.0))
    if name == "tiny-gemma3":
        compare_config_edit(
            d,
            "the global layer at the local RoPE base",
            lambda c: c["rope_parameters"]["full_attention"].update(rope_theta=10000.0),
            seqs=(33,),
        )
        compare_config_edit(d, "no sliding window", lambda c: c.update(sliding_window=4096))
    if name in ("tiny-gemma2", "tiny-gemma2-tied"):
        cfg = json.loads((d / "config.json").read_text())
        assert cfg["layer_types"] == ["sliding_attention", "full_attention"], cfg["layer_types"]
        compare_config_edit(d, "a global layer 0 (sliding_window 4096)", lambda c: c.update(sliding_window=4096))
        compare_config_edit(d, "no attention soft-capping", lambda c: c.update(attn_logit_softcapping=None), seqs=(8, 33))
        compare_config_edit(d, "query_pre_attn_scalar 256", lambda c: c.update(query_pre_attn_scalar=256), seqs=(8, 33))
    if name == "tiny-phi3":
        # partial RoPE: rotating every dim instead of 6 of 12 changes outputs
        cfg = json.loads((d / "config.json").read_text())
        assert cfg["rope_parameters"]["partial_rotary_factor"] == 0.5, cfg
        compare_config_edit(d, "full rotary instead of partial", lambda c: c["rope_parameters"].update(partial_rotary_factor=1.0))
    if name == "tiny-phi3-longrope":
        def unscaled(c):
            rp = c["rope_parameters"]
            c["rope_parameters"] = {"rope_type": "default", "rope_theta": rp["rope_theta"], "partial_rotary_factor": 1.0}
        compare_config_edit(d, "longrope vs default RoPE", unscaled, seqs=(8, 33))


def compare_config_edit(d, what, edit, seqs=(33,)):
    """Assert that editing config.json (same weights) changes some argmax at each length."""
    a_model = load_f32(d)
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    tmp = OUT / ".tmp-edit"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    shutil.copy(d / "model.safetensors", tmp / "model.safetensors")
    write_json(tmp / "config.json", cfg)
    b_model = load_f32(tmp)
    shutil.rmtree(tmp)
    rng = np.random.default_rng(13)
    for seq in seqs:
        ids = [int(t) for t in rng.integers(1, a_model.config.vocab_size, size=seq)]
        n = int((run(a_model, ids).argmax(-1) != run(b_model, ids).argmax(-1)).sum())
        assert n > 0, f"{d.name}: {what} changes no argmax at seq {seq}"
        print(f"{d.name}: {what} changes {n}/{seq} argmaxes", file=sys.stderr)


def main():
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    OUT.mkdir(parents=True, exist_ok=True)
    if sys.argv[1:2] == ["--gguf"]:
        # Only the GGUF files, from the committed HF fixtures.
        for name in sys.argv[2:] or list(GGUF_ARCH):
            write_gguf(name, OUT / name)
        return
    only = set(sys.argv[1:])
    unknown = only - set(FIXTURES) - set(VARIANTS)
    assert not unknown, f"unknown fixtures {sorted(unknown)}"
    report = {}
    for name, (cfg_cls, model_cls, kw, seed, wdtype) in FIXTURES.items():
        if only and name not in only:
            continue
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed + 1)
        config = cfg_cls(**kw)
        model = model_cls(config).eval()
        perturb(model, gen, 0.0 if name in NORM_PLUS_ONE else 1.0)
        if name in EMBED_SCALE:
            with torch.no_grad():
                model.get_input_embeddings().weight.mul_(EMBED_SCALE[name])
        if wdtype != torch.float32:
            model = model.to(wdtype)
        d = OUT / name
        if d.exists():
            shutil.rmtree(d)
        model.save_pretrained(d, safe_serialization=True)
        for extra in ["generation_config.json"]:
            if (d / extra).exists():
                (d / extra).unlink()
        note = NOTES[name]
        doc, stats, ref_model = expected_for(name, d, seed + 2, note)
        if wdtype == torch.bfloat16:
            # sanity: the f32 reference really uses the bf16-rounded weights
            w = ref_model.model.layers[0].self_attn.q_proj.weight
            assert torch.equal(w, w.to(torch.bfloat16).float())
            assert ref_model.model.rotary_emb.inv_freq.dtype == torch.float32
        write_json(d / "expected.json", doc)
        report[name] = stats
        print(name, "ok", stats, file=sys.stderr)

        family_checks(name, d)

    if not only or "tiny-llama3-mqa" in only:
        diff, am = compare_llama3_scaling(OUT / "tiny-llama3-mqa")
        print(f"llama3 scaling: max |dlogit| {diff:.3f}, {am} argmaxes differ", file=sys.stderr)

    for name, (src, edit, note) in VARIANTS.items():
        if only and name not in only:
            continue
        s = OUT / src
        d = OUT / name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
        shutil.copy(s / "model.safetensors", d / "model.safetensors")
        cfg = edit(json.loads((s / "config.json").read_text()))
        write_json(d / "config.json", cfg)
        src_doc = json.loads((s / "expected.json").read_text())
        seed = FIXTURES[src][3] + 2
        doc, stats, _ = expected_for(name, d, seed, note, source=src)
        if name in CHANGED_VARIANTS:
            for a, b in zip(doc["seqs"], src_doc["seqs"]):
                differ = sum(
                    sum(x != y for x, y in zip(ca["argmax"], cb["argmax"]))
                    for ca, cb in zip(a["cases"], b["cases"])
                )
                assert differ > 0, f"{name}: same argmaxes as {src} at seq {a['seq']}"
                print(f"{name}: seq {a['seq']}: {differ} argmaxes differ from {src}", file=sys.stderr)
            write_json(d / "expected.json", doc)
            continue
        # the variant must reproduce the source fixture's outputs exactly
        for a, b in zip(doc["seqs"], src_doc["seqs"]):
            for ca, cb in zip(a["cases"], b["cases"]):
                assert ca["input"] == cb["input"]
                assert ca["argmax"] == cb["argmax"], name
                np.testing.assert_allclose(ca["margin"], cb["margin"], atol=1e-5)
        write_json(d / "expected.json", doc)
        print(name, "ok (matches", src + ")", file=sys.stderr)


if __name__ == "__main__":
    main()
