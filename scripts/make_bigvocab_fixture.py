#!/usr/bin/env python3
"""Maintainer tool: the tiny checkpoint whose embedding is larger than one
Vulkan storage buffer (tests/fixtures/hf/tiny-llama-vocab262k/).

A one-layer Llama with a tied 262144 x 320 embedding, every weight bf16:
the table takes 167,772,160 bytes, over the 2^27 = 134,217,728-byte
`maxStorageBufferRange` of the Android baseline profile and lavapipe, so a
graph that binds it whole gives wrong ids on those devices.

The checkpoint is sharded the way HF shards checkpoints:
  model-00001-of-00002.safetensors   the embedding (NOT committed: 168 MB)
  model-00002-of-00002.safetensors   every other weight (committed, ~1 MB)
  model.safetensors.index.json       the weight map (committed)
The embedding is a formula the tests evaluate again in Rust
(tests/common/mod.rs, `bigvocab_checkpoint`), so only the small shard is
committed: element i (row-major) is

    (((splitmix64(i) >> 56) - 128) / 1024)   (exact in bf16)

with splitmix64(x) = mix(x + 0x9E3779B97F4A7C15), mix as in Steele et al.
expected.json records the sha256 of the embedding's bf16 bytes, which the
Rust side checks before using its copy.

The references are transformers' outputs on the checkpoint reloaded from
disk in f32 (the bf16 weights upcast): argmax and margin at every position
of three cases at SEQ 8 (as the other HF fixtures), and a greedy
continuation of a 5-token prompt by 6 tokens (each step one full forward,
no cache) for the KV-cache pair.

Run through scripts/make-fixtures.sh bigvocab (a venv with torch and
transformers). Deterministic: fixed seeds.
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_json import write_json  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NAME = "tiny-llama-vocab262k"
OUT = REPO / "tests" / "fixtures" / "hf" / NAME
VOCAB, HIDDEN = 262144, 320
SEQ = 8
SEED = 4242
EMBED_SHARD = "model-00001-of-00002.safetensors"
REST_SHARD = "model-00002-of-00002.safetensors"


def splitmix64(x):
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def embedding_values():
    out = np.empty(VOCAB * HIDDEN, dtype=np.float32)
    step = 1 << 22
    for a in range(0, VOCAB * HIDDEN, step):
        i = np.arange(a, min(a + step, VOCAB * HIDDEN), dtype=np.uint64)
        k = (splitmix64(i) >> np.uint64(56)).astype(np.int64) - 128
        out[a : a + len(i)] = k.astype(np.float32) / 1024.0
    return torch.from_numpy(out.reshape(VOCAB, HIDDEN))


def run(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids], dtype=torch.long)).logits[0].float()


def top2(logits):
    t = torch.topk(logits, 2, dim=-1)
    return [int(i) for i in t.indices[:, 0]], [float(v) for v in (t.values[:, 0] - t.values[:, 1])]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=320,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        initializer_range=0.4,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        dtype="bfloat16",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
        model.model.embed_tokens.weight.copy_(embedding_values())
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    state.pop("lm_head.weight", None)  # tied
    embed = state.pop("model.embed_tokens.weight")
    save_file({"model.embed_tokens.weight": embed}, str(OUT / EMBED_SHARD), metadata={"format": "pt"})
    save_file(state, str(OUT / REST_SHARD), metadata={"format": "pt"})
    weight_map = {"model.embed_tokens.weight": EMBED_SHARD}
    weight_map.update({k: REST_SHARD for k in sorted(state)})
    total = sum(t.numel() * 2 for t in state.values()) + embed.numel() * 2
    (OUT / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n"
    )
    cfg.save_pretrained(OUT)
    embed_sha = hashlib.sha256(embed.view(torch.int16).numpy().tobytes()).hexdigest()

    ref = AutoModelForCausalLM.from_pretrained(OUT, dtype=torch.float32, attn_implementation="eager").eval()
    rng = np.random.default_rng(SEED)
    cases = []
    for n in [SEQ, 5, 1]:
        toks = [int(t) for t in rng.integers(1, VOCAB, size=n)]
        padded = toks + [0] * (SEQ - n)
        argmax, margin = top2(run(ref, padded))
        high = sum(1 for a in argmax if a > VOCAB // 2)
        print(f"{NAME}: len {n}: argmax {argmax}, {high}/{SEQ} in the upper half", file=sys.stderr)
        assert min(margin[:n]) > 1e-3, f"a tie at a real position: {margin}"
        cases.append({"tokens": toks, "input": padded, "argmax": argmax, "margin": margin})
    # Positions whose answer lies past the first 2^27 bytes (row 104857 of
    # the f32-widened or 209715 of the bf16 table) are what a whole-table
    # binding gets wrong.
    assert any(a > 209715 for c in cases for a in c["argmax"]), "no answer past the buffer range"

    prompt = [int(t) for t in rng.integers(1, VOCAB, size=5)]
    ids, new, margins = list(prompt), [], []
    for _ in range(6):
        argmax, margin = top2(run(ref, ids))
        new.append(argmax[-1])
        margins.append(margin[-1])
        ids.append(argmax[-1])
    assert min(margins) > 1e-3, f"a tie in the greedy continuation: {margins}"

    doc = {
        "name": NAME,
        "note": "one-layer Llama, tied 262144 x 320 bf16 embedding (167,772,160 bytes > 2^27); "
        "the embedding shard is a formula (see scripts/make_bigvocab_fixture.py) the tests rebuild",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "reference": "transformers from_pretrained(dir, dtype=float32, attn_implementation='eager'); "
        "input = tokens padded with 0 to seq; no attention_mask (plain causal)",
        "pad_id": 0,
        "weights_dtype": "BF16",
        "embed_shard": EMBED_SHARD,
        "embed_sha256": embed_sha,
        "seqs": [{"seq": SEQ, "cases": cases}],
        "greedy": {"prompt": prompt, "new": new, "margin": margins},
    }
    write_json(OUT / "expected.json", doc)
    (OUT / EMBED_SHARD).unlink()
    print(f"{NAME}: wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
