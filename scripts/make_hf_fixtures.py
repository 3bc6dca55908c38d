#!/usr/bin/env python3
"""Maintainer tool: build tiny random HF Llama-family checkpoints and their
transformers reference outputs under tests/fixtures/hf/<name>/.

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
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
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


VARIANTS = {
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


def perturb(model, gen):
    """Norm weights 1 + 0.2*N(0,1) so a loader that drops them fails."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))


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


def main():
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    OUT.mkdir(parents=True, exist_ok=True)
    report = {}
    for name, (cfg_cls, model_cls, kw, seed, wdtype) in FIXTURES.items():
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed + 1)
        config = cfg_cls(**kw)
        model = model_cls(config).eval()
        perturb(model, gen)
        if wdtype != torch.float32:
            model = model.to(wdtype)
        d = OUT / name
        if d.exists():
            shutil.rmtree(d)
        model.save_pretrained(d, safe_serialization=True)
        for extra in ["generation_config.json"]:
            if (d / extra).exists():
                (d / extra).unlink()
        note = {
            "tiny-llama-tied-gqa": "tied embeddings (no lm_head.weight), 4 heads / 2 KV heads",
            "tiny-llama-untied-mha": "untied lm_head, MHA (num_key_value_heads = num_attention_heads)",
            "tiny-llama-head-dim": "head_dim 16 != hidden 48 / 4 heads; GQA 4/2; rope_theta 500",
            "tiny-llama3-mqa": "llama3 RoPE scaling (original_max_position_embeddings 16), MQA (1 KV head)",
            "tiny-mistral": "model_type mistral, sliding_window 4096 (>= every SEQ), GQA 4/2",
            "tiny-llama-bf16": "weights stored as bf16; reference = same bf16 weights upcast to f32, inv_freq in f32",
        }[name]
        doc, stats, ref_model = expected_for(name, d, seed + 2, note)
        if wdtype == torch.bfloat16:
            # sanity: the f32 reference really uses the bf16-rounded weights
            w = ref_model.model.layers[0].self_attn.q_proj.weight
            assert torch.equal(w, w.to(torch.bfloat16).float())
            assert ref_model.model.rotary_emb.inv_freq.dtype == torch.float32
        write_json(d / "expected.json", doc)
        report[name] = stats
        print(name, "ok", stats, file=sys.stderr)

    diff, am = compare_llama3_scaling(OUT / "tiny-llama3-mqa")
    print(f"llama3 scaling: max |dlogit| {diff:.3f}, {am} argmaxes differ", file=sys.stderr)

    for name, (src, edit, note) in VARIANTS.items():
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
