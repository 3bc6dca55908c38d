"""The fragment and raw figures of scripts/bench/stand.sh, and the page it goes into.

  render ROWS_TSV --md FILE --json FILE [--peer RESULTS_JSON] --FACT VALUE...
      ROWS_TSV holds the llama.cpp comparison, the lines of bench_vs_llama
      (scripts/bench/lib.sh): MODEL RUNTIME ARCHIVE_MB PACKED_MB PREFILL_MS
      DECODE_MS PEAK_RSS_MB. RESULTS_JSON is scripts/bench/peer.sh's
      results.json of the same run. Writes the markdown fragment (run facts,
      one table per model, the decode chart, the peer table) to --md and the
      raw figures to --json, each through a temporary file and a rename, and
      prints the fragment.
  page FRAGMENT PAGE
      Replaces the text between the lines `<!-- stand:begin -->` and
      `<!-- stand:end -->` of PAGE (docs/benchmarks.md) with FRAGMENT, through
      a temporary file and a rename.

Every table cell stays within 80 characters (numbers, not sentences): a
longer one is reported on stderr. Standard library only (the system python3).
"""

import argparse
import json
import os
import sys
import tempfile

BEGIN, END = "<!-- stand:begin -->", "<!-- stand:end -->"
MAX_CELL = 80

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct Q4_1",
    "gemma3": "Gemma 3 270M Q4_K_M",
    "qwen15": "Qwen2.5-Coder 1.5B Instruct Q4_K_M",
}

# The peer figures shown (results.json's ratio names, from report.py), each
# with the short label and the number format of its kiln and peer cells.
PEER_ROWS = [
    ("export: wall (turbine: export + .irpa save)", "export", "wall (peer: turbine export + .irpa save)", "{:.2f}"),
    ("export: peak RSS", "export", "peak RSS", "{:.0f}"),
    ("export: .irpa size", "export", ".irpa size", "{:.0f}"),
    ("params: wall vs iree-convert-parameters", "params", "wall (peer: iree-convert-parameters)", "{:.3f}"),
    ("compile: host: iree-compile wall, each at its preset (kiln: data tiling; turbine: IREE defaults)",
     "compile", "host, wall, each at its own preset", "{:.2f}"),
    ("compile: host: iree-compile wall, same flags: kiln's preset (data tiling) on both",
     "compile", "host, wall, same flags (kiln's preset)", "{:.2f}"),
    ("compile: arm64: iree-compile wall, each at its preset (kiln: data tiling; turbine: IREE defaults)",
     "compile", "arm64, wall, each at its own preset", "{:.2f}"),
    ("compile: host: .vmfb size", "compile", "host, .vmfb size", "{:.0f}"),
    ("run: host forward SEQ 64, 2 threads, vs turbine's module", "run",
     "host forward SEQ 64, 2 threads, vs turbine's module", "{:.1f}"),
    ("run: host forward SEQ 64, 2 threads, vs PyTorch eager f32", "run",
     "host forward SEQ 64, 2 threads, vs PyTorch eager f32", "{:.1f}"),
    ("run: host forward SEQ 256, 2 threads, vs turbine's module", "run",
     "host forward SEQ 256, 2 threads, vs turbine's module", "{:.1f}"),
    ("run: host forward SEQ 256, 2 threads, vs PyTorch eager f32", "run",
     "host forward SEQ 256, 2 threads, vs PyTorch eager f32", "{:.1f}"),
]


def num(s):
    """A figure of the rows file as a number (None for "-" or empty)."""
    return None if s in ("", "-") else float(s)


def table(head, rows, long_cells):
    """Markdown table lines; cells longer than MAX_CELL go to long_cells."""
    line = lambda cells: "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"
    out = [line(head), "|" + "---|" * len(head)]
    for r in rows:
        for c in r:
            if len(c) > MAX_CELL:
                long_cells.append(c)
        out.append(line(r))
    return out


def write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def date_span(start, end):
    """'YYYY-MM-DD HH:MM:SS–HH:MM:SS UTC', the end's date too when it differs."""
    if start[:10] == end[:10]:
        end = end[11:]
    return f"{start}–{end} UTC"


def load_avg(uptime):
    """The three load averages of an `uptime` line."""
    return uptime.split("load average:")[-1].strip() if "load average:" in uptime else uptime.strip()


def render(a):
    models, order = {}, []
    for line in open(a.rows):
        f = line.rstrip("\n").split("\t")
        if len(f) != 7:
            continue
        model, runtime, archive, packed, prefill, decode, rss = f
        if model not in models:
            models[model] = []
            order.append(model)
        models[model].append({
            "runtime": runtime, "archive_mb": num(archive), "packed_mb": num(packed),
            "prefill_64_ms": num(prefill), "decode_ms_per_token": num(decode), "peak_rss_mb": num(rss),
            "text": {"archive": archive, "packed": packed, "prefill": prefill, "decode": decode, "rss": rss},
        })
    peer = json.load(open(a.peer)) if a.peer else None

    long_cells = []
    runs = a.runs
    facts = [
        ("command", f"`{a.command}`"),
        ("date", date_span(a.start, a.end)),
        ("commit", a.commit),
        ("machine", f"{a.cpu}, {a.cores} cores" + (f", {a.virt}" if a.virt else "")),
        ("load before", load_avg(a.load_before)),
        ("load after", load_avg(a.load_after)),
        ("kiln", "KV pair P 64 / N 128, host, 2 threads, under `SCHED_BATCH`"),
        ("llama.cpp", "`llama-bench` on the same GGUF, 2 threads"),
        ("prefill, decode", f"kiln: median of {runs} (`iree-benchmark-module`); llama.cpp: mean of {runs}"),
        ("peak RSS", "`kiln generate --kv-cache`, 64-token prompt, 32 new tokens; `llama-bench`"),
    ]
    if peer:
        v = dict(p.rsplit(" ", 1) for p in peer.get("versions", "").split(", ") if " " in p)
        pv = ", ".join(f"{k} {v[k]}" for k in ["iree-turbine", "torch", "iree-base-compiler"] if k in v)
        facts.append(("peer", pv or "iree-turbine"))
        n = peer.get("runs") or runs
        runs_n = f"{n} run" + ("" if str(n) == "1" else "s")
        facts.append(("peer figures", f"median of {runs_n}; kiln ÷ peer: ratio of the medians"))
    elif a.no_peer_reason:
        facts.append(("peer", a.no_peer_reason))

    md = table(["run", ""], [[k, v] for k, v in facts], long_cells)
    md += ["", "### Against llama.cpp", ""]
    labels, values = [], []
    for m in order:
        rows = models[m]
        ref = next((r["decode_ms_per_token"] for r in rows if r["runtime"] == "llama.cpp"), None)
        cells = []
        for r in rows:
            t = r["text"]
            archive = t["archive"] if r["packed_mb"] is None else f"{t['archive']} + {t['packed']} packed"
            d = r["decode_ms_per_token"]
            if r["runtime"] == "llama.cpp":
                ratio = "1"
            elif ref and d is not None:
                ratio = f"{d / ref:.2f}×"
                r["decode_vs_llama_cpp"] = round(d / ref, 4)
            else:
                ratio = "—"
            runtime = r["runtime"].replace(" --pack", " `--pack`")
            cells.append([runtime, archive, t["prefill"], t["decode"], t["rss"], ratio])
            label = r["runtime"][5:] if r["runtime"].startswith("kiln ") else r["runtime"]
            labels.append(f'"{m} {label}"')
            values.append(t["decode"])
        md += [f"**{MODELS.get(m, m)}**", ""]
        md += table(["runtime / form", "archive MB", "prefill 64 ms", "decode ms/token", "peak RSS MB",
                     "decode ÷ llama.cpp"], cells, long_cells)
        md.append("")
    if labels:
        md += ["```mermaid", "xychart-beta horizontal",
               '    title "decode, ms per token (host, 2 threads; lower is better)"',
               f"    x-axis [{','.join(labels)}]", '    y-axis "ms per token"',
               f"    bar [{','.join(values)}]", "```", ""]

    peer_rows = []
    if peer:
        by_name = {r["name"]: r for r in peer.get("ratios", [])}
        for name, step, label, fmt in PEER_ROWS:
            r = by_name.get(name)
            if r is None or r.get("kiln") is None or r.get("peer") is None:
                continue
            f = lambda x: fmt.format(x) + " " + r["unit"]
            ratio = "—" if r.get("ratio") is None else f"{r['ratio']:.3g}"
            peer_rows.append([step, label, f(r["kiln"]), f(r["peer"]), ratio])
        md += ["### Against the peer path (iree-turbine)", "", "SmolLM2-135M-Instruct, the same GGUF:", ""]
        md += table(["step", "figure", "kiln", "peer", "kiln ÷ peer"], peer_rows, long_cells)
        md.append("")
    while md and md[-1] == "":
        md.pop()
    text = "\n".join(md) + "\n"

    for c in long_cells:
        print(f"stand.py: a table cell longer than {MAX_CELL} characters: {c}", file=sys.stderr)

    raw = {
        "command": a.command,
        "start_utc": a.start,
        "end_utc": a.end,
        "commit": a.commit,
        "machine": {"cpu": a.cpu, "cores": int(a.cores) if a.cores.isdigit() else a.cores, "virtualization": a.virt},
        "uptime_before": a.load_before.strip(),
        "uptime_after": a.load_after.strip(),
        "runs": int(runs) if runs.isdigit() else runs,
        "quick": a.quick == "1",
        "forms": a.forms.split(),
        "pack_forms": a.pack_forms.split(),
        "vs_llama_cpp": {m: [{k: v for k, v in r.items() if k != "text"} for r in models[m]] for m in order},
        "peer": peer,
    }
    write_atomic(a.json, json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    write_atomic(a.md, text)
    sys.stdout.write(text)


def page(fragment, path):
    body = open(fragment).read()
    text = open(path).read()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        sys.exit(f"stand.py: {path} must hold one {BEGIN} line, then one {END} line")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    write_atomic(path, head + BEGIN + "\n\n" + body.strip("\n") + "\n\n" + END + tail)
    print(f"stand.py: {path}: the section between the markers is now {fragment}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("rows")
    r.add_argument("--md", required=True)
    r.add_argument("--json", required=True)
    r.add_argument("--peer", default="")
    r.add_argument("--no-peer-reason", default="")
    for k in ["command", "start", "end", "commit", "cpu", "cores", "virt", "load-before", "load-after", "runs",
              "quick", "forms", "pack-forms"]:
        r.add_argument("--" + k, default="")
    p = sub.add_parser("page")
    p.add_argument("fragment")
    p.add_argument("page")
    a = ap.parse_args()
    if a.cmd == "render":
        render(a)
    else:
        page(a.fragment, a.page)


if __name__ == "__main__":
    main()
