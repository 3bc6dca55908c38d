#!/usr/bin/env bash
# Fetches llama.cpp's byte-level BPE vocabulary test files for Llama 3
# (`ggml-vocab-llama-bpe.gguf`) and Qwen2 (`ggml-vocab-qwen2.gguf`), each with
# its `.inp` texts and `.out` reference ids (what the model's HF tokenizer
# gives), plus llama.cpp's MIT LICENSE, from the llama-cpp-python 0.3.36
# sdist on PyPI (which vendors llama.cpp; sha256 checked), into
# $CACHE/llama.cpp-vocab/ (CACHE as in install-deps.sh) and prints that
# folder. Idempotent: does nothing but print when the files are there; the
# sdist is kept in the folder's parent as a download cache.
# Needs python3 (standard library only).
set -euo pipefail
. "$(dirname "$0")/cache-dir.sh"
cache="$CACHE"
dir="$cache/llama.cpp-vocab"
files=(ggml-vocab-llama-bpe.gguf ggml-vocab-llama-bpe.gguf.inp ggml-vocab-llama-bpe.gguf.out
       ggml-vocab-qwen2.gguf ggml-vocab-qwen2.gguf.inp ggml-vocab-qwen2.gguf.out LICENSE)
done=1
for f in "${files[@]}"; do [[ -s "$dir/$f" ]] || done=0; done
if [[ $done -eq 1 ]]; then
  echo "$dir"
  exit 0
fi
mkdir -p "$dir" "$cache/wheels"
python3 - "$cache/wheels" "$dir" "${files[@]}" <<'PY'
import hashlib, json, os, sys, tarfile, tempfile, urllib.parse, urllib.request

wheels, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
version, sha = "0.3.36", "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
sdist = os.path.join(wheels, f"llama_cpp_python-{version}.tar.gz")

def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

if not (os.path.isfile(sdist) and digest(sdist) == sha):
    base = "https://pypi.org/pypi/llama-cpp-python/json"
    meta = json.load(urllib.request.urlopen(base))
    url = next(u["url"] for u in meta["releases"][version] if u["packagetype"] == "sdist")
    print(f"[fetch-llama-vocab] downloading llama-cpp-python {version} sdist", file=sys.stderr)
    fd, tmp = tempfile.mkstemp(dir=wheels, suffix=".part")
    with os.fdopen(fd, "wb") as f, urllib.request.urlopen(urllib.parse.urljoin(base, url)) as r:
        for block in iter(lambda: r.read(1 << 20), b""):
            f.write(block)
    got = digest(tmp)
    if got != sha:
        os.unlink(tmp)
        sys.exit(f"[fetch-llama-vocab] sdist sha256 {got}, expected {sha}")
    os.replace(tmp, sdist)
root = f"llama_cpp_python-{version}/vendor/llama.cpp"
with tarfile.open(sdist) as t:
    for name in names:
        member = f"{root}/LICENSE" if name == "LICENSE" else f"{root}/models/{name}"
        data = t.extractfile(member).read()
        fd, tmp = tempfile.mkstemp(dir=out, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(out, name))
PY
echo "$dir"
