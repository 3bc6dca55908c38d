"""Hand-made variants of kiln's exported StableHLO, for measuring graph
shapes before the exporter emits them (docs/benchmarks.md, "Graph
experiments"). Text rewrites of `NAME-gen.mlir`; standard library only.

  python3 scripts/graph_variants.py IN.mlir OUT.mlir VARIANT[,VARIANT...]

Variants:
  bf16-native     every weight declared as an i32 global of bf16 pairs
                  (`tensor<…x(K/2)xi32>` + broadcast/shift/and/bitcast/reshape)
                  becomes a bf16 global over the same bytes (`tensor<…xKxbf16>`)
                  and one `stablehlo.convert` to f32. The parameter archive is
                  unchanged (same bytes, same names). CPU targets only: IREE
                  3.13's Vulkan backend cannot take bf16 buffers.
  argmax-2reduce  the final variadic (value, index) argmax reduce becomes a
                  max reduce, an equality mask and a min reduce over the
                  indices (same result: the lowest index among the maxima).
"""

import re
import sys


def bf16_native(lines):
    glob = re.compile(r"(\s*util\.global private @(\w+) = #flow\.parameter\.named<[^>]*> : )tensor<([0-9x]+)xi32>$")
    load = re.compile(r"(\s*)(%\w+) = util\.global\.load @(\w+) : tensor<([0-9x]+)xi32>$")
    pairs, out, i = set(), [], 0

    def wide(dims):
        d = [int(x) for x in dims.split("x")]
        d[-1] *= 2
        return "x".join(map(str, d))

    while i < len(lines):
        line = lines[i]
        m = glob.match(line)
        if m:
            pairs.add(m.group(2))
            out.append(f"{m.group(1)}tensor<{wide(m.group(3))}xbf16>")
            i += 1
            continue
        m = load.match(line)
        if m and m.group(3) in pairs:
            ind, v, name, dims = m.groups()
            chain = lines[i + 1 : i + 9]
            ok = (
                len(chain) == 8
                and "stablehlo.broadcast_in_dim" in chain[0]
                and "shift_left" in chain[3]
                and "stablehlo.and" in chain[5]
                and "bitcast_convert" in chain[6]
                and "stablehlo.reshape" in chain[7]
            )
            if not ok:
                sys.exit(f"bf16-native: unexpected widening chain after {line.strip()}")
            res = chain[7].split("=")[0].strip()
            bt, ft = f"tensor<{wide(dims)}xbf16>", f"tensor<{wide(dims)}xf32>"
            out.append(f"{ind}{v} = util.global.load @{name} : {bt}")
            out.append(f"{ind}{res} = stablehlo.convert {v} : ({bt}) -> {ft}")
            i += 9
            continue
        out.append(line)
        i += 1
    return out


def argmax_2reduce(lines):
    text = "\n".join(lines)
    pat = re.compile(
        r"(?P<ind>\s*)(?P<res>%\w+):2 = \"stablehlo\.reduce\"\((?P<x>%\w+), (?P<iota>%\w+), %\w+, %\w+\) \(\{.*?\}\) "
        r"\{dimensions = array<i64: (?P<dim>\d+)>\} : \(tensor<(?P<rows>\d+)x(?P<cols>\d+)xf32>, [^)]*\) -> \([^)]*\)",
        re.S,
    )
    m = pat.search(text)
    if not m or m.group("dim") != "1":
        sys.exit("argmax-2reduce: no [rows, cols] argmax reduce over dim 1 found")
    ind, res, x, iota = m.group("ind"), m.group("res"), m.group("x"), m.group("iota")
    r, c = m.group("rows"), m.group("cols")
    t2, ti = f"tensor<{r}x{c}xf32>", f"tensor<{r}x{c}xi32>"
    new = f"""{ind}%am_init = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %am_max = "stablehlo.reduce"({x}, %am_init) ({{
    ^bb0(%am_a: tensor<f32>, %am_b: tensor<f32>):
      %am_c = stablehlo.maximum %am_a, %am_b : tensor<f32>
      stablehlo.return %am_c : tensor<f32>
    }}) {{dimensions = array<i64: 1>}} : ({t2}, tensor<f32>) -> tensor<{r}xf32>
    %am_maxb = stablehlo.broadcast_in_dim %am_max, dims = [0] : (tensor<{r}xf32>) -> {t2}
    %am_eq = stablehlo.compare EQ, {x}, %am_maxb, FLOAT : ({t2}, {t2}) -> tensor<{r}x{c}xi1>
    %am_big = stablehlo.constant dense<2147483647> : {ti}
    %am_sel = stablehlo.select %am_eq, {iota}, %am_big : tensor<{r}x{c}xi1>, {ti}
    %am_iinit = stablehlo.constant dense<2147483647> : tensor<i32>
    %am_idx = "stablehlo.reduce"(%am_sel, %am_iinit) ({{
    ^bb0(%am_x: tensor<i32>, %am_y: tensor<i32>):
      %am_z = stablehlo.minimum %am_x, %am_y : tensor<i32>
      stablehlo.return %am_z : tensor<i32>
    }}) {{dimensions = array<i64: 1>}} : ({ti}, tensor<i32>) -> tensor<{r}xi32>"""
    text = text[: m.start()] + new + text[m.end() :]
    text = text.replace(f"{res}#1", "%am_idx")
    if f"{res}#" in text:
        sys.exit(f"argmax-2reduce: {res}#0 is used; not an argmax-only reduce")
    return text.split("\n")


VARIANTS = {"bf16-native": bf16_native, "argmax-2reduce": argmax_2reduce}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    lines = open(sys.argv[1]).read().split("\n")
    for v in sys.argv[3].split(","):
        if v not in VARIANTS:
            sys.exit(f"unknown variant {v}; known: {', '.join(VARIANTS)}")
        lines = VARIANTS[v](lines)
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
