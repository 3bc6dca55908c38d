"""Top-K reference logits for the KV sampling tests (issue 21).

For every committed tiny HF fixture with a SEQ-33 case, transformers'
top-(K+1) logits (K = 40) and their ids at a few positions of that case's
input: the positions kiln's chunked-prefill + decode test predicts at
(chunks of P = 4 end at 3 and 7, a 2-token chunk at 9, then decodes).
One extra entry shows whether rank K-1 is a near tie with rank K.

Writes tests/fixtures/hf/<name>/topk.json. Run through scripts/make-fixtures.sh topk.
"""

import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_json import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hf"
K = 40
SEQ = 33
POSITIONS = [3, 7, 9, 10, 11, 20, 32]


def main():
    torch.set_num_threads(2)
    for d in sorted(ROOT.iterdir()):
        exp = json.loads((d / "expected.json").read_text())
        seqs = [s for s in exp["seqs"] if s["seq"] == SEQ]
        if not seqs:
            continue
        case = seqs[0]["cases"][0]
        model = AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([case["input"]])).logits[0].float()
        # Stable descending sort: equal logits keep the lower id first, as kiln's top_k.
        order = torch.sort(-logits, dim=-1, stable=True).indices[:, : K + 1]
        entries = []
        for p in POSITIONS:
            ids = order[p].tolist()
            entries.append(
                {
                    "position": p,
                    "ids": ids,
                    "logits": [float(logits[p, i]) for i in ids],
                }
            )
        doc = {
            "name": d.name,
            "transformers_version": transformers.__version__,
            "torch_version": torch.__version__,
            "reference": "transformers from_pretrained(dir, dtype=float32, attn_implementation='eager') "
            f"on expected.json's seq-{SEQ} case 0 input; logits after final soft-capping; "
            f"the {K + 1} largest at each position, stable descending sort",
            "k": K,
            "input": case["input"],
            "positions": entries,
        }
        write_json(d / "topk.json", doc)
        print(d.name, "ok", file=sys.stderr)


if __name__ == "__main__":
    main()
