"""Turns scripts/bench/peer.sh's measurements (KEY, value, max RSS KiB per line) into
results.json and results.md: medians, and every kiln/peer ratio from the same
run. Standard library only (runs under the system python3)."""

import argparse
import datetime
import json
import os
import statistics
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsv")
    ap.add_argument("out")
    for k in ["runs", "quick", "cpu", "cores", "kiln", "versions", "command"]:
        ap.add_argument("--" + k, default="")
    a = ap.parse_args()

    vals, rss = defaultdict(list), defaultdict(list)
    for line in open(a.tsv):
        k, v, m = line.rstrip("\n").split("\t")
        if v == "":
            continue
        vals[k].append(float(v))
        rss[k].append(int(m))
    med = {k: statistics.median(v) for k, v in vals.items()}
    mrss = {k: statistics.median(v) / 1024 for k, v in rss.items() if max(v) > 0}

    mins = {k: min(v) for k, v in vals.items()}
    minrss = {k: min(v) / 1024 for k, v in rss.items() if max(v) > 0}

    def build(med, mrss):
        """The table rows and ratios from one statistic (median or min per figure)."""
        def g(k):
            return med.get(k)

        rows, ratios = [], []

        def row(step, what, kiln, peer, unit, goal=None, fmt="{:.2f}"):
            """One table line; ratio = kiln / peer (every figure is a cost)."""
            if kiln is None and peer is None:
                return
            r = kiln / peer if kiln is not None and peer not in (None, 0) else None
            ok = None
            if goal is not None and r is not None:
                ok = r <= goal
            f = lambda x: "—" if x is None else fmt.format(x) + " " + unit
            rows.append((step, what, f(kiln), f(peer), r, goal, ok))
            ratios.append({"name": f"{step}: {what}", "kiln": kiln, "peer": peer, "unit": unit,
                           "ratio": r, "goal": goal, "met": ok})

        export_turbine = None
        if g("export.turbine") is not None and g("params.turbine") is not None:
            export_turbine = g("export.turbine") + g("params.turbine")
        row("export", "wall (turbine: export + .irpa save)", g("export.kiln"), export_turbine, "s", 1 / 30)
        peak_t = None
        if "export.turbine" in mrss:
            peak_t = max(mrss["export.turbine"], mrss.get("params.turbine", 0))
        row("export", "peak RSS", mrss.get("export.kiln"), peak_t, "MiB", 1 / 8, fmt="{:.0f}")
        row("export", ".irpa size", g("size.kiln.irpa") and g("size.kiln.irpa") / 2**20,
            g("size.turbine.irpa") and g("size.turbine.irpa") / 2**20, "MiB", fmt="{:.0f}")
        for s in [256]:
            row("export", f"wall, SEQ {s} (turbine: export only)", g(f"export{s}.kiln"), g(f"export{s}.turbine"), "s")
        row("params", "wall vs iree-convert-parameters", g("convert.kiln"), g("convert.iree"), "s", 1.0, fmt="{:.3f}")
        row("params", "peak RSS vs iree-convert-parameters", mrss.get("convert.kiln"), mrss.get("convert.iree"), "MiB",
            fmt="{:.1f}")
        row("params", "wall vs cp", g("convert.kiln"), g("convert.cp"), "s", fmt="{:.3f}")
        for t in ["host", "arm64"]:
            # The goal is judged with the same iree-compile flags on both
            # MLIRs (only the MLIR differs); the first row compares each at
            # its own preset (kiln's turns on data tiling, which costs
            # compile time and buys a faster forward).
            row("compile", f"{t}: iree-compile wall, each at its preset (kiln: data tiling; turbine: IREE defaults)",
                g(f"compile.{t}.kiln"), g(f"compile.{t}.turbine"), "s")
            row("compile", f"{t}: iree-compile wall, same flags: kiln's preset (data tiling) on both",
                g(f"compile.{t}.kiln"), g(f"compile.{t}.turbine_dt"), "s", 1.0)
            row("compile", f"{t}: iree-compile wall, same flags: IREE defaults (no data tiling) on both",
                g(f"compile.{t}.kiln_nodt"), g(f"compile.{t}.turbine"), "s", 1.0)
            row("compile", f"{t}: iree-compile peak RSS", mrss.get(f"compile.{t}.kiln"), mrss.get(f"compile.{t}.turbine"),
                "MiB", fmt="{:.0f}")
            row("compile", f"{t}: iree-compile CPU (user + sys)", g(f"compile.{t}.kiln.cpu"),
                g(f"compile.{t}.turbine.cpu"), "s")
            kb, tb = g(f"size.vmfb.{t}.kiln"), g(f"size.vmfb.{t}.turbine")
            row("compile", f"{t}: .vmfb size", kb and kb / 1024, tb and tb / 1024, "KiB", fmt="{:.0f}")
        row("run", "host forward SEQ 64, 2 threads, vs turbine's MLIR compiled with kiln's preset",
            g("run64.kiln"), g("run64.turbine_dt"), "ms", fmt="{:.1f}")
        for s in [64, 256]:
            for sfx, how in [("", "2 threads"), (".1t", "1 thread")]:
                k, t, e = (g(f"run{s}.{w}{sfx}") for w in ["kiln", "turbine", "eager"])
                main = sfx == ""
                row("run", f"host forward SEQ {s}, {how}, vs turbine's module", k, t, "ms", 0.9 if main else None,
                    fmt="{:.1f}")
                row("run", f"host forward SEQ {s}, {how}, vs PyTorch eager f32", k, e, "ms", 1.0 if main else None,
                    fmt="{:.1f}")
        return rows, ratios

    rows, ratios = build(med, mrss)
    best_rows, best_ratios = build(mins, minrss)
    for r, b in zip(ratios, best_ratios):
        r["ratio_best"] = b["ratio"]

    def g(k):
        return med.get(k)

    gen = []
    if g("gen.redecode") is not None:
        gen.append(("kiln generate (redecode, SEQ 64 window)", g("gen.redecode")))
    if g("gen.kvcache") is not None:
        gen.append(("kiln generate --kv-cache", g("gen.kvcache")))
    interp = g("interp.kiln")

    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {"cpu": a.cpu, "cores": a.cores},
        "kiln": a.kiln,
        "versions": a.versions,
        "command": a.command,
        "runs": a.runs,
        "medians": med,
        "peak_rss_mib": mrss,
        "ratios": ratios,
        "generation_tokens_per_s": dict(gen),
        "interp_forward_s": interp,
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")

    md = [f"Run {out['date']} on {a.cpu} ({a.cores} cores); kiln {a.kiln}; {a.versions}.",
          f"Command: `{a.command}`. kiln/peer: ratio of the medians of {a.runs} runs (goal judged on it); "
          "best of N: ratio of the minima (least disturbed by other load on the machine).", "",
          "| step | figure | kiln | peer | kiln/peer | best of N | goal | met |", "|---|---|---|---|---|---|---|---|"]
    for (step, what, k, p, r, goal, ok), best in zip(rows, best_rows):
        rs = "—" if r is None else f"{r:.3g}"
        gs = "" if goal is None else ("≤ 1/%d" % round(1 / goal) if goal < 0.5 else f"≤ {goal:g}")
        ms = "" if ok is None else ("yes" if ok else "**no**")
        bs = "—" if best[4] is None else f"{best[4]:.3g}"
        md.append(f"| {step} | {what} | {k} | {p} | {rs} | {bs} | {gs} | {ms} |")
    md.append("")
    for name, tps in gen:
        md.append(f"- {name}: {tps:.2f} tokens/s")
    if interp is not None:
        md.append(f"- kiln interp, one SEQ-64 forward, whole process (parse + load + run): {interp:.2f} s, "
                  f"{mrss.get('interp.kiln', 0):.0f} MiB peak RSS")
    if g("convert.identical") is not None:
        md.append("- kiln's and iree-convert-parameters' .irpa files are "
                  + ("byte-identical" if g("convert.identical") == 1 else "**different**"))
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
