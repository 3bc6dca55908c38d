#!/usr/bin/env bash
# Packed at load against packed at compile time (`kiln compile --pack`), on
# the host: for each model ($MODELS, default smollm2 gemma3) and weight form
# ($FORMS, default fast w8a8 bf16), `kiln export GGUF --seq 64 --kv-cache
# --max-context 128 --weights FORM` once, compiled twice for the host
# (without and with --pack, compile seconds printed), then ROUNDS (default 3)
# interleaved `kiln generate --kv-cache` runs of each (64-token prompt, 32
# new tokens): prefill and decode as kiln generate reports them, peak RSS
# (/usr/bin/time -f %M) and a hash of the generated text (the same in both
# columns when the ids are). Figures in spec/quantized-weights.md ("Packed
# at compile time"). With SLICES=1, a third column: the module compiled
# with no archive beside it, so it reads a chunked table's slices rather
# than the archive's chunk entries (spec/iree.md, "Row chunks read through
# their entries"; the archive is linked in after the compile).
# Usage: scripts/bench/pack.sh [ROUNDS] [OUT_DIR]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
rounds="${1:-3}"
out="${2:-$(mktemp -d)}"
bench_build
k="$kiln"
tokens=$(python3 -c "print(','.join(str(i) for i in range(100, 164)))")
uptime
for model in ${MODELS:-smollm2 gemma3}; do
  gguf=$(bash "scripts/fetch-$model.sh" | tail -1)
  for form in ${FORMS:-fast w8a8 bf16}; do
    d="$out/$model-$form"
    variants="a b"
    mkdir -p "$d/a" "$d/b"
    "$k" export "$gguf" --seq 64 --out "$d/a" --name m --kv-cache --max-context 128 --weights "$form" >/dev/null 2>&1
    cp "$d/a/m-kv-gen.mlir" "$d/a/m.irpa" "$d/a/m.json" "$d/b/"
    if [[ "${SLICES:-0}" == 1 ]]; then
      variants="a b c"
      mkdir -p "$d/c"
      cp "$d/a/m-kv-gen.mlir" "$d/a/m.json" "$d/c/"
      "$k" compile "$d/c/m-kv-gen.mlir" -t host >/dev/null 2>&1
      ln -f "$d/a/m.irpa" "$d/c/m.irpa"
    fi
    s=$(date +%s); "$k" compile "$d/a/m-kv-gen.mlir" -t host >/dev/null 2>&1; ta=$(( $(date +%s) - s ))
    s=$(date +%s); "$k" compile "$d/b/m-kv-gen.mlir" -t host --pack >/dev/null 2>&1; tb=$(( $(date +%s) - s ))
    echo "$model $form compile s: at load $ta, --pack $tb; archive $(stat -c %s "$d/a/m.irpa") B, packed archive $(stat -c %s "$d/b/m-kv-host.packed.irpa" 2>/dev/null || echo -) B"
    for r in $(seq "$rounds"); do
      for v in $variants; do
        /usr/bin/time -o "$d/$v.time" -f "%M" "$k" generate "$d/$v/m-kv-host.vmfb" --kv-cache \
          --tokens "$tokens" --max-new-tokens 32 >"$d/$v.out" 2>"$d/$v.err"
        case $v in a) label=at-load ;; b) label=--pack ;; c) label=at-load-slices ;; esac
        echo "$model $form $label round $r:" \
          "$(grep -o 'prefill 64 tokens in [0-9.]* s' "$d/$v.err")," \
          "$(grep -o 'decode 31 tokens in [0-9.]* s ([0-9.]* ms/token)' "$d/$v.err")," \
          "peak RSS $(( $(cat "$d/$v.time") / 1024 )) MB, text $(md5sum <"$d/$v.out" | cut -c1-8)"
      done
    done
  done
done
uptime
