#!/usr/bin/env bash
# Resident bytes of kiln's arm64 modules, run by kiln's own runtime built
# for aarch64 under qemu (issue 50, item 4). For each model of $MODELS
# (default "smollm2 gemma3 qwen15") and each form of $FORMS (default
# "fast"): `kiln export --weights FORM --kv-cache` (P 64, N 128), `kiln
# compile --target arm64`, with and without --pack, then `kiln generate
# --emulate arm64 --kv-cache` of a 64-token prompt and 8 new tokens under
# /usr/bin/time. Its peak RSS is the qemu process's (the largest of kiln
# and its children): the guest's pages plus qemu's own translation cache,
# which the last row measures alone (the runtime loading no module).
# Prints one tab-separated row per run:
#   MODEL FORM PACK ARCHIVE_MB PACKED_MB PEAK_RSS_MB
# Times under qemu say nothing of a phone's speed and are not reported.
#
# Usage: scripts/bench/arm64-rss.sh    (needs scripts/install-deps.sh's
#        qemu-aarch64-static and kiln-runtime for aarch64, step h)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS-smollm2 gemma3 qwen15}" forms="${FORMS-fast}"
bench_setup arm64-rss
runtime="$CACHE/kiln-runtime-aarch64/kiln-runtime"
[[ -x $runtime ]] || { echo "scripts/bench/arm64-rss.sh: $runtime missing (scripts/install-deps.sh step h)" >&2; exit 1; }
printf 'model\tform\tpack\tarchive_mb\tpacked_mb\tpeak_rss_mb\n'
for model in $models; do
  case "$model" in
    smollm2) gguf="$(bash scripts/fetch-smollm2.sh)" ;;
    gemma3) gguf="$(bash scripts/fetch-gemma3.sh)" ;;
    qwen15) gguf="$(bash scripts/bench/fetch-qwen-coder.sh)" ;;
    *) echo "scripts/bench/arm64-rss.sh: unknown model $model (smollm2, gemma3, qwen15)" >&2; exit 2 ;;
  esac
  for form in $forms; do
    n="${model}_$form"
    bench_kv_export "$gguf" "$n" "$form"
    for pack in no yes; do
      flags=()
      [[ $pack == yes ]] && flags=(--pack)
      "$kiln" compile "$out/$n-kv-gen.mlir" --target arm64 -q "${flags[@]}" >/dev/null
      packed=-
      [[ $pack == yes ]] && packed=$(mb "$(stat -c %s "$out/$n-kv-arm64.packed.irpa")")
      /usr/bin/time -f %M -o "$out/rss" "$kiln" generate "$out/$n-kv-arm64.vmfb" --emulate arm64 \
        --kv-cache --tokens "$ids64" --max-new-tokens 8 >/dev/null 2>"$out/generate.log" \
        || { cat "$out/generate.log" >&2; exit 1; }
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$form" "$pack" "$archive_mb" "$packed" \
        "$(( $(tail -1 "$out/rss") / 1024 ))"
      rm -f "$out/$n-kv-arm64"*
    done
    rm -f "$out/$n"*
  done
done
# qemu and the runtime alone: `serve` with a missing module answers its
# load error and exits.
/usr/bin/time -f %M -o "$out/rss" qemu-aarch64-static "$runtime" serve "$out/none.vmfb" --function f \
  </dev/null >/dev/null 2>&1 || true
printf 'none\tqemu + runtime, no module\t-\t-\t-\t%s\n' "$(( $(tail -1 "$out/rss") / 1024 ))"
