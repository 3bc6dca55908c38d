"""Maintainer tool: tests/fixtures/tokenizer/gemma3-transformers.json, what
transformers' GGUF tokenizer of the real Gemma 3 270M GGUF gives (run by
scripts/make-fixtures.sh gemma; tests never run it).

The GGUF (241 MB) is not committed: scripts/fetch-gemma3.sh caches it, and
tests/tokenizer_vocabs.rs reads it from the cache. Recorded here:

- the vocabulary size, bos/eos ids and whether `tokenizer(text)` adds the bos;
- `random`: the ids of the 300 pseudo-random mixed-script texts of
  `phi-3-transformers.json` (`phi3_random`), `encode(text,
  add_special_tokens=False)`;
- `cases`: texts with Gemma's special tokens and whitespace runs: ids, ids
  with the bos (`tokenizer(text).input_ids`), decode, and decode skipping
  special tokens;
- `tokenizer_json`: of the `tokenizer.json` transformers builds, the merges'
  count and sha256 (`"a b"` lines joined by newlines), the added tokens'
  count and sha256 (`id content special` lines), and the normalizer,
  pre-tokenizer and decoder, which `kiln package`'s must equal.
"""

import hashlib
import json
import subprocess
from pathlib import Path

from fixture_json import write_json
from transformers import AutoTokenizer

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "tokenizer" / "gemma3-transformers.json"
TEXTS = [
    "<start_of_turn>user\nWhy is the sky blue?<end_of_turn>\n<start_of_turn>model\n",
    "<bos>Hello world<eos>",
    "Hello world",
    " leading space",
    "two  spaces,   three,\t\ttabs\n\n\nand newlines",
    "naïve café 🦙 日本語",
    "    def f(x):\n        return x * 2\n",
    "<unused0> and <mask>",
]


def main():
    gguf = Path(subprocess.check_output(["bash", str(REPO / "scripts" / "fetch-gemma3.sh")], text=True).strip())
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    spm = json.loads((REPO / "tests/fixtures/tokenizer/llama.cpp/phi-3-transformers.json").read_text())
    texts = [c["text"] for c in spm["phi3_random"]]
    doc = {
        "source": f"transformers {__import__('transformers').__version__}, "
        f"tokenizers {__import__('tokenizers').__version__}, {gguf.name}",
        "vocab_size": len(tok),
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "adds_bos": tok("x").input_ids[0] == tok.bos_token_id,
        "cases": [],
        "random": [tok.encode(t, add_special_tokens=False) for t in texts],
    }
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        doc["cases"].append(
            {
                "text": text,
                "ids": ids,
                "ids_with_bos": tok(text).input_ids,
                "decode": tok.decode(ids),
                "decode_skip_special": tok.decode(ids, skip_special_tokens=True),
            }
        )
    built = json.loads(tok.backend_tokenizer.to_str())
    merges = "\n".join(" ".join(m) for m in built["model"]["merges"])
    added = "\n".join(f"{t['id']} {t['content']} {str(t['special']).lower()}" for t in built["added_tokens"])
    doc["tokenizer_json"] = {
        "merges": {"count": len(built["model"]["merges"]), "sha256": hashlib.sha256(merges.encode()).hexdigest()},
        "added_tokens": {"count": len(built["added_tokens"]), "sha256": hashlib.sha256(added.encode()).hexdigest()},
        "normalizer": built["normalizer"],
        "pre_tokenizer": built["pre_tokenizer"],
        "decoder": built["decoder"],
    }
    write_json(OUT, doc)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
