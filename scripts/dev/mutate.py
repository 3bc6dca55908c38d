#!/usr/bin/env python3
"""A seeded mutation run over kiln's readers (issue 49): checkpoints
(`kiln export`), MLIR (`kiln interp`) and packages (`kiln verify`).

From one tiny checkpoint (tests/fixtures/hf/tiny-llama-tied-gqa) it makes
the seeds once: the checkpoint, its exported MLIR and a package (host +
arm64 modules, no tokenizer). Each case mutates one seed (bytes flipped,
inserted, deleted or truncated; a JSON value replaced by an extreme one) and
runs the verb on it with a 10 s limit. It counts:

- panics: exit 101, or `panicked` on stderr;
- hangs: still running after 10 s;
- crashes: killed by a signal;
- partial outputs: a failed export that left a file in its output folder
  (or any `.kiln-tmp-` file anywhere under the case's folder).

Usage: scripts/dev/mutate.py [--cases 500] [--seed 49] [--kiln PATH]
Prints one line per finding and a summary; exits 1 when anything was found.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CKPT = os.path.join(ROOT, "tests/fixtures/hf/tiny-llama-tied-gqa")
LIMIT = 10.0
EXTREMES = [0, -1, 1, 2**31, 2**63 - 1, 2**64, 1e308, -1e308, 0.5, "", "../../x",
            "/etc/passwd", None, [], {}, True, "t.irpa", 9223372036854775807]


def run(kiln, args, limit=LIMIT):
    """(returncode or None on timeout, stderr)."""
    try:
        p = subprocess.run([kiln] + args, capture_output=True,
                           timeout=limit, text=True, errors="replace")
        return p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        return None, ""


def mutate_bytes(rng, data):
    data = bytearray(data)
    kind = rng.randrange(4)
    if not data:
        return bytes([rng.randrange(256)])
    i = rng.randrange(len(data))
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            j = rng.randrange(len(data))
            data[j] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del data[i:i + rng.randint(1, 64)]
    elif kind == 2:
        data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    else:
        del data[i:]
    return bytes(data)


def json_paths(v, path=()):
    yield path
    if isinstance(v, dict):
        for k, x in v.items():
            yield from json_paths(x, path + (k,))
    elif isinstance(v, list):
        for k, x in enumerate(v):
            yield from json_paths(x, path + (k,))


def mutate_json(rng, text):
    v = json.loads(text)
    paths = [p for p in json_paths(v) if p]
    p = rng.choice(paths)
    parent = v
    for k in p[:-1]:
        parent = parent[k]
    parent[p[-1]] = rng.choice(EXTREMES)
    return json.dumps(v, indent=1)


def seeds(kiln, work):
    """The checkpoint, MLIR and package every case starts from."""
    export = os.path.join(work, "export")
    assets = os.path.join(work, "assets")
    for args in (
        ["export", CKPT, "--seq", "8", "--name", "t", "--kv-cache", "-o", export, "-q"],
        ["compile", os.path.join(export, "t-gen.mlir"), "-t", "host,arm64", "-q"],
        ["compile", os.path.join(export, "t-kv-gen.mlir"), "-t", "host,arm64", "-q"],
        ["package", os.path.join(export, "t.json"), "-o", assets, "--no-tokenizer",
         "--include-host", "-q"],
    ):
        code, err = run(kiln, args, limit=None)
        if code != 0:
            sys.exit(f"seed: kiln {' '.join(args)}: {err}")
    return export, assets


def leftovers(folder):
    return [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs
            if f.startswith(".kiln-tmp-")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=500)
    ap.add_argument("--seed", type=int, default=49)
    ap.add_argument("--kiln", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release/kiln"))
    a = ap.parse_args()
    rng = random.Random(a.seed)
    found = {"panics": 0, "hangs": 0, "crashes": 0, "partial outputs": 0}
    kinds = {"checkpoint": 0, "mlir": 0, "package": 0}
    codes = {}
    with tempfile.TemporaryDirectory(prefix="kiln-mutate-") as work:
        export, assets = seeds(a.kiln, work)
        for n in range(a.cases):
            case = os.path.join(work, f"case{n}")
            os.mkdir(case)
            kind = ("checkpoint", "mlir", "package")[n % 3]
            kinds[kind] += 1
            out = None
            if kind == "checkpoint":
                ck = os.path.join(case, "ckpt")
                shutil.copytree(CKPT, ck)
                if rng.random() < 0.6:
                    f = os.path.join(ck, "config.json")
                    text = open(f).read()
                    new = mutate_json(rng, text) if rng.random() < 0.7 else mutate_bytes(rng, text.encode()).decode("latin-1")
                    open(f, "w", encoding="latin-1").write(new)
                else:
                    f = os.path.join(ck, "model.safetensors")
                    open(f, "wb").write(mutate_bytes(rng, open(f, "rb").read()))
                out = os.path.join(case, "out")
                args = ["export", ck, "--seq", "8", "--name", "m", "-o", out, "-q"]
                if rng.random() < 0.5:
                    args.append("--kv-cache")
            elif kind == "mlir":
                src = os.path.join(export, rng.choice(["t-gen.mlir", "t-kv-gen.mlir"]))
                f = os.path.join(case, "m-gen.mlir")
                open(f, "wb").write(mutate_bytes(rng, open(src, "rb").read()))
                args = ["interp", f, "--params", os.path.join(export, "t.irpa"),
                        "--tokens", "1,2,3"]
                if "kv" in src:
                    args = ["generate", f, "--kv-cache", "--params",
                            os.path.join(export, "t.irpa"), "--tokens", "1,2,3",
                            "--max-new-tokens", "2"]
                    # A KV module reads its pair from the manifest beside it.
                    shutil.copy(os.path.join(export, "t.json"), os.path.join(case, "m.json"))
            else:
                pkg = os.path.join(case, "pkg")
                shutil.copytree(assets, pkg)
                names = sorted(os.listdir(pkg))
                target = "t.manifest.json" if rng.random() < 0.6 else rng.choice(names)
                f = os.path.join(pkg, target)
                if target.endswith(".json") and rng.random() < 0.6:
                    new = mutate_json(rng, open(f).read()).encode()
                else:
                    new = mutate_bytes(rng, open(f, "rb").read())
                open(f, "wb").write(new)
                args = ["verify", pkg]
            code, err = run(a.kiln, args)
            codes[(kind, code)] = codes.get((kind, code), 0) + 1
            what = None
            if code is None:
                found["hangs"] += 1
                what = "hang"
            elif code == 101 or "panicked" in err:
                found["panics"] += 1
                what = "panic"
            elif code < 0:
                found["crashes"] += 1
                what = f"signal {-code}"
            elif (code != 0 and out and os.path.isdir(out) and os.listdir(out)) or leftovers(case):
                found["partial outputs"] += 1
                what = "partial output"
            if what:
                print(f"case {n} ({kind}): {what}: kiln {' '.join(args)}\n  {err.strip()[:300]}")
                keep = os.path.join(ROOT, "target", "mutate-findings", f"case{n}")
                shutil.copytree(case, keep, dirs_exist_ok=True)
            shutil.rmtree(case, ignore_errors=True)
    total = sum(found.values())
    print("exit codes: " + ", ".join(f"{k} {c}: {v}" for (k, c), v in sorted(codes.items(), key=str)))
    print(f"mutate: {a.cases} cases (seed {a.seed}; " +
          ", ".join(f"{v} {k}" for k, v in kinds.items()) + "): " +
          ", ".join(f"{v} {k}" for k, v in found.items()))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
