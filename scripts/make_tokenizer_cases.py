"""SmolLM2 tokenizer fixtures (called from make_smollm2_fixtures.py).

Writes tests/fixtures/smollm2/tokenizer_cases.json and saves the HF
tokenizer.json that transformers builds from the GGUF into the cache.

Besides the ids transformers gives (`ids`), every case also carries
`ids_llama_cpp`: the ids under llama.cpp's pre-tokenizer for
`tokenizer.ggml.pre = smollm` (split every \\p{N} character out first, then the
GPT-2 regex), which is also what the original HF SmolLM2 tokenizer does
(Digits(individual_digits) + ByteLevel). transformers' GGUF converter ignores
`tokenizer.ggml.pre` and uses plain ByteLevel, so the two differ on a few
inputs (whitespace runs before digits).
"""

import json
import sys
from pathlib import Path

import transformers
from tokenizers import Regex, Tokenizer, pre_tokenizers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_json import write_json  # noqa: E402

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"

STRINGS = [
    # plain English
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time, there was a little girl named Lily.",
    "hello",
    "HELLO WORLD",
    "a",
    " ",
    # empty / leading / trailing spaces
    "",
    " Hello",
    "Hello ",
    "  Hello  ",
    "   leading three",
    "trailing three   ",
    # whitespace runs, newlines, tabs
    "a  b",
    "a   b    c",
    "line1\nline2",
    "para1\n\npara2",
    "\n",
    "\n\n\n",
    "  \n  ",
    "tab\tseparated\tvalues",
    "\t\tindented",
    "mixed \t\n whitespace",
    "ends with newline\n",
    "\r\nwindows\r\n",
    # code
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)",
    "fn main() {\n    println!(\"Hello, {}!\", name);\n}",
    "for (int i = 0; i < 10; ++i) { sum += a[i]; }",
    "x = [1, 2, 3]  # comment",
    "import numpy as np\nnp.array([[1.0, 2.0], [3.0, 4.0]])",
    "<div class=\"main\">&nbsp;</div>",
    "SELECT * FROM users WHERE id = 42;",
    "if (a && b || !c) return -1;",
    "    return x",
    "        deeply_nested_call(arg_one, arg_two)",
    # digits and numbers
    "12345",
    "3.14159265358979",
    "1,000,000",
    "The year 2024 had 366 days.",
    "Call 555-0123 now",
    "x=100000",
    "a  2",
    "value:   42",
    "    1",
    "v1.2.3",
    "0x7fffffff",
    "1e-5",
    "١٢٣ Arabic-Indic digits",
    "²³ superscripts and ½ fractions",
    # punctuation
    "Wait... what?!",
    "(parentheses) [brackets] {braces}",
    "\"quoted\" and 'single'",
    "email@example.com https://example.com/path?q=1&r=2",
    "---===***",
    "#hashtag @mention $money %percent ^caret",
    "semi;colon:comma,period.",
    # contractions
    "It's a dog's life.",
    "I don't know what they're doing.",
    "We've been there, you'll see, I'd say I'm fine.",
    "IT'S LOUD, DON'T SHOUT",
    "rock 'n' roll",
    # emoji
    "I love pizza 🍕!",
    "👍🏽👨‍👩‍👧‍👦",
    "🙂🙃😀",
    # CJK and other scripts
    "你好，世界",
    "日本語のテキストです。",
    "한국어 문장입니다",
    "Привет, мир!",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    # accented letters
    "café naïve résumé",
    "Ångström Øresund Straße",
    "e\u0301 (e + combining acute) vs é",
    "Crème brûlée à la carte",
    # mixed scripts
    "English 中文 русский 日本 123",
    "The word 'naïve' in 日本語 is ナイーブ.",
    # special-token text
    "<|im_start|>user\nHi<|im_end|>",
    "<|endoftext|>",
    "a<|im_end|>b",
]


def digits_first(tok_json):
    """The same tokenizer with llama.cpp's smollm pre-tokenizer."""
    t = Tokenizer.from_str(tok_json)
    t.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    return t


def make(tok, gguf_path, cache_dir, out_dir):
    """Write tokenizer_cases.json; save tokenizer.json into cache_dir."""
    tok_json = tok.backend_tokenizer.to_str()
    cache_dir.mkdir(parents=True, exist_ok=True)
    (cache_dir / "tokenizer.json").write_text(tok_json)
    j = json.loads(tok_json)
    alt = digits_first(tok_json)

    # chat template output joins the case list
    chat_text = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    chat_text2 = tok.apply_chat_template(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "2+2?"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    strings = STRINGS + [chat_text, chat_text2]

    cases = []
    ndiff = 0
    for s in strings:
        enc = tok(s, add_special_tokens=False)
        ids = list(enc["input_ids"])
        ids_with_special = list(tok(s)["input_ids"])
        assert ids_with_special == ids, f"special tokens added for {s!r}"
        ids_alt = alt.encode(s, add_special_tokens=False).ids
        same = ids_alt == ids
        ndiff += not same
        cases.append(
            {
                "text": s,
                "ids": ids,
                "tokens": tok.convert_ids_to_tokens(ids),
                "decoded": tok.decode(ids),
                "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
                "ids_llama_cpp": ids_alt,
                "llama_cpp_differs": not same,
            }
        )
    added = [
        {"id": a["id"], "content": a["content"], "special": a["special"]} for a in j["added_tokens"]
    ]
    doc = {
        "tokenizer": "HF transformers AutoTokenizer.from_pretrained(dir, gguf_file="
        "'SmolLM2-135M-Instruct.Q4_1.gguf'), encode with add_special_tokens=False",
        "transformers_version": transformers.__version__,
        "tokenizers_version": __import__("tokenizers").__version__,
        "tokenizer_json_in_cache": "${KILN_CACHE_DIR:-$HOME/.cache/kiln}/smollm2/tokenizer.json",
        "model_type": j["model"]["type"],
        "vocab_size": len(j["model"]["vocab"]) ,
        "num_merges": len(j["model"]["merges"]),
        "bpe_options": {
            k: j["model"][k]
            for k in [
                "dropout",
                "unk_token",
                "continuing_subword_prefix",
                "end_of_word_suffix",
                "fuse_unk",
                "byte_fallback",
                "ignore_merges",
            ]
        },
        "normalizer": j["normalizer"],
        "pre_tokenizer": j["pre_tokenizer"],
        "pre_tokenizer_regex": GPT2_REGEX,
        "pre_tokenizer_note": "ByteLevel with use_regex=true applies the GPT-2 regex above, then maps "
        "bytes to the GPT-2 byte-to-unicode alphabet. ids_llama_cpp use llama.cpp's smollm "
        "pre-tokenizer instead: first isolate every \\p{N} char, then the same GPT-2 regex.",
        "llama_cpp_pre_regexes": [r"\p{N}", GPT2_REGEX],
        "post_processor": j["post_processor"],
        "decoder": j["decoder"],
        "added_tokens": added,
        "bos_id": tok.bos_token_id,
        "bos_token": tok.bos_token,
        "eos_id": tok.eos_token_id,
        "eos_token": tok.eos_token,
        "unk_token": tok.unk_token,
        "pad_token": tok.pad_token,
        "add_bos_token": bool(getattr(tok, "add_bos_token", False)),
        "bos_prepended_by_default": tok("x")["input_ids"] != tok("x", add_special_tokens=False)["input_ids"],
        "chat_template": tok.chat_template,
        "chat_example": {
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "add_generation_prompt": True,
            "text": chat_text,
        },
        "num_llama_cpp_differences": ndiff,
        "cases": cases,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "tokenizer_cases.json", doc)
    print(f"tokenizer: {len(cases)} cases, {ndiff} differ under llama.cpp pre-tokenization",
          file=sys.stderr)
    for c in cases:
        if c["llama_cpp_differs"]:
            print(f"  {c['text']!r}: {c['ids']} vs {c['ids_llama_cpp']}", file=sys.stderr)
