"""Maintainer tool: the SentencePiece tokenizer fixtures under
tests/fixtures/tokenizer/llama.cpp/ (run by scripts/make-fixtures.sh spm;
tests never run it).

1. Copies llama.cpp's vocabulary-only GGUF files for Llama (SentencePiece)
   and Phi-3 with their reference cases (`.inp` texts, `.out` ids that HF's
   tokenizer for each model gives) and llama.cpp's MIT LICENSE, from the
   llama-cpp-python sdist on PyPI (which vendors llama.cpp), checked by
   sha256.
2. Writes phi-3-transformers.json: what transformers' GGUF tokenizer for the
   Phi-3 file gives on texts with special tokens (ids, decode, decode
   skipping special tokens, encode with the bos added), and for both files
   the count and sha256 of the merges transformers derives from the scores
   (`"a b"` lines joined by newlines), which kiln's must equal, and
   transformers' ids for the Llama file (a Metaspace pre-tokenizer there),
   and the Phi-3 tokenizer's ids for 300 pseudo-random mixed-script texts.
"""

import hashlib
import io
import json
import sys
import tarfile
import urllib.parse
import urllib.request
from pathlib import Path

from fixture_json import write_json

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "tokenizer" / "llama.cpp"
SDIST = "llama-cpp-python"
VERSION = "0.3.36"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
FILES = [
    "ggml-vocab-llama-spm.gguf",
    "ggml-vocab-llama-spm.gguf.inp",
    "ggml-vocab-llama-spm.gguf.out",
    "ggml-vocab-phi-3.gguf",
    "ggml-vocab-phi-3.gguf.inp",
    "ggml-vocab-phi-3.gguf.out",
]
TEXTS = [
    "<|user|>\nHi<|end|>\n<|assistant|>",
    "<|system|>You are kind.<|end|><|user|>What is 2+2?<|end|>",
    "Hello world",
    " leading space",
    "tabs\tand\nnewlines",
    "naïve café 🦙",
]


def fetch_sdist():
    base = f"https://pypi.org/pypi/{SDIST}/json"
    meta = json.load(urllib.request.urlopen(base))
    url = next(u["url"] for u in meta["releases"][VERSION] if u["packagetype"] == "sdist")
    data = urllib.request.urlopen(urllib.parse.urljoin(base, url)).read()
    digest = hashlib.sha256(data).hexdigest()
    assert digest == SHA256, f"{SDIST} {VERSION}: sha256 {digest}, expected {SHA256}"
    return tarfile.open(fileobj=io.BytesIO(data))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tar = fetch_sdist()
    root = f"llama_cpp_python-{VERSION}/vendor/llama.cpp"
    for name in FILES:
        (OUT / name).write_bytes(tar.extractfile(f"{root}/models/{name}").read())
    (OUT / "LICENSE").write_bytes(tar.extractfile(f"{root}/LICENSE").read())

    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(OUT), gguf_file="ggml-vocab-phi-3.gguf")
    cases = []
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        cases.append(
            {
                "text": text,
                "ids": ids,
                "decode": tok.decode(ids),
                "decode_skip_special": tok.decode(ids, skip_special_tokens=True),
                "ids_with_bos": tok.encode(text, add_special_tokens=True),
            }
        )
    # transformers builds the Llama file's tokenizer with a Metaspace
    # pre-tokenizer (prepend_scheme first), not llama.cpp's normalizer: its
    # ids on the reference texts and a few with special tokens.
    llama = AutoTokenizer.from_pretrained(str(OUT), gguf_file="ggml-vocab-llama-spm.gguf")
    sep = "\n__ggml_vocab_test__\n"
    texts = (OUT / "ggml-vocab-llama-spm.gguf.inp").read_text(encoding="utf-8").removesuffix(sep).split(sep)
    texts += ["</s>Hi", "<s> Hello</s> world", " Hello"]
    metaspace = []
    for text in texts:
        ids = llama.encode(text, add_special_tokens=False)
        metaspace.append({"text": text, "ids": ids, "decode": llama.decode(ids)})
    # Pseudo-random mixed-script texts (no special tokens) through the
    # Phi-3 tokenizer, whose shape is the model's own (its 47 reference
    # cases agree): a differential check beyond the reference cases.
    import random
    rnd = random.Random(20261201)
    pieces = ["a", "Z", "é", "ß", "ж", "ع", "中", "日本", "한", "ह", "ि", "1", "23", "٣", "½", " ", "  ",
              "\t", "\n", "\r\n", "\u3000", "\u00a0", "'s", "'LL", "!", "?!", "...", "-", "🦙", "👍🏽",
              "🇫🇷", "\u200d", "x", "hello", "World", " the", "ſ", "Ω", "ﬁ", "İ"]
    random_cases = []
    for _ in range(300):
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randrange(1, 14)))
        random_cases.append({"text": text, "ids": tok.encode(text, add_special_tokens=False)})
    # The same texts through transformers' GGUF tokenizers of llama.cpp's
    # Llama 3 and Qwen2 vocabularies (fetched by scripts/fetch-llama-vocab.sh).
    import os
    cache = os.environ.get("KILN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kiln")
    vocab_dir = os.path.join(cache, "llama.cpp-vocab")
    byte_level_random = {}
    for name in ("ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen2.gguf"):
        t = AutoTokenizer.from_pretrained(vocab_dir, gguf_file=name)
        byte_level_random[name] = [t.encode(c["text"], add_special_tokens=False) for c in random_cases]
    merges = {}
    for name in ("ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"):
        t = AutoTokenizer.from_pretrained(str(OUT), gguf_file=name)
        pairs = json.loads(t.backend_tokenizer.to_str())["model"]["merges"]
        text = "\n".join(" ".join(p) if isinstance(p, list) else p for p in pairs)
        merges[name] = {"count": len(pairs), "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    write_json(
        OUT / "phi-3-transformers.json",
        {
            "merges": merges,
            "llama_spm_metaspace": metaspace,
            "phi3_random": random_cases,
            "byte_level_random": byte_level_random,
            "source": "ggml-vocab-phi-3.gguf",
            "reference": "transformers AutoTokenizer.from_pretrained(dir, gguf_file=...): encode(text, "
            "add_special_tokens=False), decode(ids), decode(ids, skip_special_tokens=True), "
            "encode(text) (bos added)",
            "transformers_version": transformers.__version__,
            "cases": cases,
        },
    )
    print(f"wrote {len(FILES) + 2} files to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
