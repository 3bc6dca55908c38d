#!/usr/bin/env bash
# Where kiln stands, in one run on this machine: the section of
# docs/benchmarks.md that opens the page, every table and the chart from the
# same command.
#   1. the run's facts: UTC start and end, commit, CPU, cores, `uptime`
#      before and after, the command line (printed on stderr first);
#   2. kiln against llama.cpp, SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M
#      (bench_vs_llama in lib.sh, the rows of scripts/bench/llama.sh):
#      llama-bench, then kiln's forms $FORMS (default "bf16 keep fast") and,
#      compiled with `kiln compile --pack`, $PACK_FORMS (default "fast keep";
#      PACK_FORMS="" for none); FORMS_<model> and PACK_FORMS_<model> set
#      one model's own lists; $MODELS (default "smollm2 gemma3 qwen15")
#      narrows it. qwen15 is Qwen2.5-Coder 1.5B Instruct Q4_K_M
#      (scripts/bench/fetch-qwen-coder.sh): about 25 of the run's minutes
#      on 2 cores; `keep` holds about 7 GB there, and `kiln compile --pack`
#      of its forms peaks at 6-14 GB;
#   3. kiln against the peer path, iree-turbine (scripts/bench/peer.sh
#      --no-forms, whose results.{md,json} and ratios.png go beside FILE);
#   4. a mermaid chart of decode ms/token, every model and form.
# Writes it all as one markdown fragment to FILE and the raw figures to
# FILE's stem + .json, each through a temporary file and a rename, and
# prints the fragment. Rendering: scripts/bench/stand.py.
#
# Usage: scripts/bench/stand.sh [--runs N] [--quick] [--no-peer] [--out FILE]
#                               [--write-page | --page-only]
#   --runs N       repetitions per figure, median reported (default 3)
#   --quick        smoke run: 1 run, SmolLM2 only, the fast form only, the
#                  peer part in peer.sh's --quick mode (its files go to a
#                  temporary folder, not beside FILE)
#   --no-peer      skip the peer part (it needs a venv of several GB)
#   --out FILE     the fragment (default docs/bench/stand.md; the JSON is
#                  docs/bench/stand.json)
#   --write-page   then put the fragment into docs/benchmarks.md, between
#                  its lines <!-- stand:begin --> and <!-- stand:end -->
#   --page-only    measure nothing: put FILE, as it is, into the page
#
# The machine must be idle: llama.cpp's threads spin-wait and collapse under
# CPU contention (20-100x), where IREE slows 4-5x; the load before and after
# is in the fragment. A full run takes about 45 minutes on 2 idle cores (the
# first also builds llama-bench and the peer's venv, and fetches the GGUFs).
set -euo pipefail
cmdline="scripts/bench/stand.sh"
for a in "$@"; do cmdline+=" $(printf %q "$a")"; done
for v in PACK_FORMS FORMS MODELS $(compgen -v | grep -E '^(PACK_)?FORMS_[a-z0-9]+$' || true); do
  [[ -v $v ]] && cmdline="$v=\"${!v}\" $cmdline"
done

runs=3 quick=0 peer=1 out_md="" write_page=0 page_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift ;;
    --quick) quick=1 ;;
    --no-peer) peer=0 ;;
    --out) out_md="$(realpath -m "$2")"; shift ;;
    --write-page) write_page=1 ;;
    --page-only) page_only=1 ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "scripts/bench/stand.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "scripts/bench/stand.sh: --runs takes a positive count" >&2; exit 2; }
. "$(dirname "$0")/lib.sh"
out_md="${out_md:-$PWD/docs/bench/stand.md}"
out_json="${out_md%.md}.json"
page=docs/benchmarks.md

if [[ $page_only == 1 ]]; then
  exec python3 scripts/bench/stand.py page "$out_md" "$page"
fi

if [[ $quick == 1 ]]; then
  runs=1
  models="${MODELS-smollm2}" forms="${FORMS-fast}" pack_forms="${PACK_FORMS-}"
else
  models="${MODELS-smollm2 gemma3 qwen15}" forms="${FORMS-bf16 keep fast}" pack_forms="${PACK_FORMS-fast keep}"
fi

# setup: every build and download before the first figure
log() { echo "[stand $(date -u +%H:%M:%S)] $*" >&2; }
log "$cmdline"
log "setup: llama-bench, the GGUFs, kiln (release), the IREE tools"
llama_bench="$(bash scripts/bench/build-llama.sh)"
smol="$(bash scripts/fetch-smollm2.sh)"
gemma=""
[[ " $models " == *" gemma3 "* ]] && gemma="$(bash scripts/fetch-gemma3.sh)"
qwen15=""
[[ " $models " == *" qwen15 "* ]] && qwen15="$(bash scripts/bench/fetch-qwen-coder.sh)"
bench_build
"$kiln" toolchain install >/dev/null 2>&1 || "$kiln" toolchain install >&2
bench_setup stand

# 1. the run's facts -----------------------------------------------------------
t0=$SECONDS
start="$(date -u '+%Y-%m-%d %H:%M:%S')"
commit="$(git rev-parse --short HEAD)"
git diff --quiet HEAD -- 2>/dev/null || commit+=" + local changes"
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
virt="$(lscpu | sed -n 's/^Hypervisor vendor: *//p' | head -1)"
[[ -n $virt ]] && virt="VM ($virt)"
cores="$(nproc)"
load_before="$(uptime)"
{
  echo "stand: command  $cmdline"
  echo "stand: start    $start UTC"
  echo "stand: commit   $commit"
  echo "stand: machine  $cpu, $cores cores${virt:+, $virt}"
  echo "stand: uptime   $load_before"
  echo "stand: runs $runs; models $models; forms $forms; --pack forms ${pack_forms:-none}; peer $([[ $peer == 1 ]] && echo yes || echo no)"
} >&2

# 2. against llama.cpp ---------------------------------------------------------
: >"$out/rows.tsv"
for model in $models; do
  case "$model" in
    smollm2) gguf=$smol ;;
    gemma3) gguf=$gemma ;;
    qwen15) gguf=$qwen15 ;;
    *) echo "scripts/bench/stand.sh: unknown model $model (smollm2, gemma3, qwen15)" >&2; exit 2 ;;
  esac
  own_forms="FORMS_$model" own_pack="PACK_FORMS_$model"
  (
    forms="${!own_forms-$forms}" pack_forms="${!own_pack-$pack_forms}"
    log "$model against llama.cpp: llama-bench; kiln ${forms:-(no form)}${pack_forms:+; --pack: $pack_forms}; runs: $runs"
    bench_vs_llama "$model" "$gguf" >>"$out/rows.tsv"
  )
done

# 3. against the peer path -----------------------------------------------------
peer_json="" no_peer=""
if [[ $peer == 1 ]]; then
  if [[ $quick == 1 ]]; then
    peer_dir="$out/peer"
    peer_args=(--quick)
  else
    peer_dir="$(dirname "$out_md")"
    peer_args=(--runs "$runs" --no-forms)
  fi
  log "against iree-turbine: scripts/bench/peer.sh ${peer_args[*]} --results $peer_dir"
  bash scripts/bench/peer.sh "${peer_args[@]}" --results "$peer_dir" >&2
  peer_json="$peer_dir/results.json"
else
  no_peer="not measured (--no-peer)"
fi

# 4. the fragment, the raw figures ---------------------------------------------
end="$(date -u '+%Y-%m-%d %H:%M:%S')"
load_after="$(uptime)"
{
  echo "stand: end      $end UTC ($(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s)"
  echo "stand: uptime   $load_after"
} >&2
python3 scripts/bench/stand.py render "$out/rows.tsv" --md "$out_md" --json "$out_json" \
  --peer "$peer_json" --no-peer-reason "$no_peer" --command "$cmdline" --start "$start" --end "$end" \
  --commit "$commit" --cpu "$cpu" --cores "$cores" --virt "$virt" --load-before "$load_before" \
  --load-after "$load_after" --runs "$runs" --quick "$quick" --forms "$forms" --pack-forms "$pack_forms"
log "wrote $out_md and $out_json"
if [[ $write_page == 1 ]]; then
  python3 scripts/bench/stand.py page "$out_md" "$page"
fi
