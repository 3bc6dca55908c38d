//! Op-coverage cases shared by the IREE-backed tests and the interpreter
//! tests: each case is a one-function graph, concrete inputs, and the
//! expected output computed here with plain loops (never through kiln's
//! interpreter or IREE).

#![allow(dead_code)]

use kiln::graph::*;

/// A host tensor for test inputs and expectations.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// f32 elements.
    F32(Vec<f32>),
    /// i32 elements.
    I32(Vec<i32>),
}

/// Shape + data.
#[derive(Debug, Clone, PartialEq)]
pub struct HostT {
    pub shape: Vec<usize>,
    pub data: Data,
}

impl HostT {
    pub fn f(shape: &[usize], v: Vec<f32>) -> Self {
        assert_eq!(shape.iter().product::<usize>(), v.len());
        HostT {
            shape: shape.to_vec(),
            data: Data::F32(v),
        }
    }
    pub fn i(shape: &[usize], v: Vec<i32>) -> Self {
        assert_eq!(shape.iter().product::<usize>(), v.len());
        HostT {
            shape: shape.to_vec(),
            data: Data::I32(v),
        }
    }
    pub fn ty(&self) -> TensorType {
        let d = match self.data {
            Data::F32(_) => DType::F32,
            Data::I32(_) => DType::I32,
        };
        TensorType::new(d, &self.shape)
    }
    pub fn fv(&self) -> &[f32] {
        match &self.data {
            Data::F32(v) => v,
            _ => panic!("not f32"),
        }
    }
    pub fn iv(&self) -> &[i32] {
        match &self.data {
            Data::I32(v) => v,
            _ => panic!("not i32"),
        }
    }
    /// `iree-run-module --input=` spelling.
    pub fn iree_input(&self) -> String {
        let dims: String = self.shape.iter().map(|d| format!("{d}x")).collect();
        match &self.data {
            Data::F32(v) => format!(
                "{dims}f32={}",
                v.iter()
                    .map(|x| format!("{x:?}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Data::I32(v) => format!(
                "{dims}i32={}",
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// One op-coverage case.
#[derive(Clone)]
pub struct OpCase {
    pub name: &'static str,
    pub graph: Graph,
    pub inputs: Vec<HostT>,
    pub expected: HostT,
    /// Allowed |got - want| <= atol + rtol * |want| for floats; ints exact.
    pub atol: f32,
    pub rtol: f32,
}

/// Deterministic values in [lo, hi).
pub fn vals(n: usize, seed: u32, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            lo + (hi - lo) * ((s >> 8) as f32 / (1u32 << 24) as f32)
        })
        .collect()
}

fn case(
    name: &'static str,
    inputs: Vec<HostT>,
    expected: HostT,
    tol: (f32, f32),
    build: impl FnOnce(&mut Graph, &[Value]) -> Value,
) -> OpCase {
    let mut g = Graph::new(name);
    let args: Vec<Value> = inputs.iter().map(|t| g.input(t.ty())).collect();
    let out = build(&mut g, &args);
    g.set_outputs(&[out]);
    assert_eq!(
        g.ty(out),
        &expected.ty(),
        "case {name}: graph type vs expected"
    );
    OpCase {
        name,
        graph: g,
        inputs,
        expected,
        atol: tol.0,
        rtol: tol.1,
    }
}

const EXACT: (f32, f32) = (0.0, 0.0);
const ARITH: (f32, f32) = (1e-6, 1e-6);
const TRANSC: (f32, f32) = (1e-6, 2e-5);
const REDUCE: (f32, f32) = (1e-5, 1e-5);

fn map1(x: &HostT, f: impl Fn(f32) -> f32) -> HostT {
    HostT::f(&x.shape, x.fv().iter().map(|&a| f(a)).collect())
}
fn map2(x: &HostT, y: &HostT, f: impl Fn(f32, f32) -> f32) -> HostT {
    HostT::f(
        &x.shape,
        x.fv().iter().zip(y.fv()).map(|(&a, &b)| f(a, b)).collect(),
    )
}

/// Row-major index helpers.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

type BinCase = (BinaryOp, &'static str, fn(f32, f32) -> f32);
type UnCase<'a> = (UnaryOp, &'static str, &'a HostT, fn(f32) -> f32);
type CmpCase = (CompareDir, &'static str, fn(f32, f32) -> bool);

/// Every op-coverage case.
pub fn all() -> Vec<OpCase> {
    let mut cases = Vec::new();
    let sh = [3, 4];
    let a = HostT::f(&sh, vals(12, 1, -2.0, 2.0));
    let b = HostT::f(&sh, vals(12, 2, -2.0, 2.0));
    let pos = HostT::f(&sh, vals(12, 3, 0.1, 4.0));
    let pos2 = HostT::f(&sh, vals(12, 4, -1.5, 1.5));
    let bin: [BinCase; 6] = [
        (BinaryOp::Add, "add", |x, y| x + y),
        (BinaryOp::Subtract, "subtract", |x, y| x - y),
        (BinaryOp::Multiply, "multiply", |x, y| x * y),
        (BinaryOp::Divide, "divide", |x, y| x / y),
        (BinaryOp::Maximum, "maximum", f32::max),
        (BinaryOp::Minimum, "minimum", f32::min),
    ];
    for (op, name, f) in bin {
        cases.push(case(
            name,
            vec![a.clone(), b.clone()],
            map2(&a, &b, f),
            ARITH,
            move |g, v| g.binary(op, v[0], v[1]).unwrap(),
        ));
    }
    cases.push(case(
        "power",
        vec![pos.clone(), pos2.clone()],
        map2(&pos, &pos2, f32::powf),
        TRANSC,
        |g, v| g.pow(v[0], v[1]).unwrap(),
    ));
    let ia = HostT::i(&sh, (0..12).map(|i| i * 7 - 40).collect());
    let ib = HostT::i(&sh, (0..12).map(|i| 30 - i * 5).collect());
    cases.push(case(
        "add_i32",
        vec![ia.clone(), ib.clone()],
        HostT::i(
            &sh,
            ia.iv().iter().zip(ib.iv()).map(|(x, y)| x + y).collect(),
        ),
        EXACT,
        |g, v| g.add(v[0], v[1]).unwrap(),
    ));
    cases.push(case(
        "negate_i32",
        vec![ia.clone()],
        HostT::i(&sh, ia.iv().iter().map(|x| -x).collect()),
        EXACT,
        |g, v| g.neg(v[0]).unwrap(),
    ));
    let un: [UnCase; 7] = [
        (UnaryOp::Negate, "negate", &a, |x| -x),
        (UnaryOp::Exponential, "exponential", &a, f32::exp),
        (UnaryOp::Log, "log", &pos, f32::ln),
        (UnaryOp::Rsqrt, "rsqrt", &pos, |x| 1.0 / x.sqrt()),
        (UnaryOp::Sqrt, "sqrt", &pos, f32::sqrt),
        (UnaryOp::Tanh, "tanh", &a, f32::tanh),
        (UnaryOp::Logistic, "logistic", &a, |x| {
            1.0 / (1.0 + (-x).exp())
        }),
    ];
    for (op, name, x, f) in un {
        cases.push(case(
            name,
            vec![x.clone()],
            map1(x, f),
            TRANSC,
            move |g, v| g.unary(op, v[0]).unwrap(),
        ));
    }
    // `--weights w8a8`'s ops (Graph::linear_w8a8): abs, rounding with
    // ties to even, f32 → i8, i8 × i8 → i32 products.
    cases.push(case(
        "abs",
        vec![a.clone()],
        map1(&a, f32::abs),
        EXACT,
        |g, v| g.unary(UnaryOp::Abs, v[0]).unwrap(),
    ));
    let ties = HostT::f(
        &sh,
        vec![
            0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 126.5, -127.4, 3.7, -0.0, 1e-8,
        ],
    );
    cases.push(case(
        "round_nearest_even",
        vec![ties.clone()],
        map1(&ties, f32::round_ties_even),
        EXACT,
        |g, v| g.unary(UnaryOp::RoundNearestEven, v[0]).unwrap(),
    ));
    let (rows, k, n) = (3, 40, 5);
    let xw = HostT::f(&[rows, k], vals(rows * k, 31, -2.0, 2.0));
    let codes: Vec<i32> = vals(n * k, 32, -127.4, 127.4)
        .iter()
        .map(|x| x.round() as i32)
        .collect();
    let sw = HostT::f(&[n, 1], vals(n, 33, 0.001, 0.02));
    let mut want = Vec::with_capacity(rows * n);
    for r in xw.fv().chunks_exact(k) {
        let s = (r.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0).max(f32::MIN_POSITIVE);
        let q: Vec<i32> = r.iter().map(|x| (x / s).round_ties_even() as i32).collect();
        for (j, c) in codes.chunks_exact(k).enumerate() {
            let sum: i32 = q.iter().zip(c).map(|(a, b)| a * b).sum();
            want.push(sum as f32 * s * sw.fv()[j]);
        }
    }
    cases.push(case(
        "linear_w8a8",
        vec![xw.clone(), HostT::i(&[n, k], codes.clone()), sw.clone()],
        HostT::f(&[rows, n], want),
        EXACT,
        |g, v| {
            let q = g.convert(v[1], kiln::graph::DType::I8).unwrap();
            g.linear_w8a8(v[0], q, v[2]).unwrap()
        },
    ));
    // `--weights w8a16`'s product (Graph::linear_w8a16): the activations as
    // two i8 terms, both through one i8 × i8 → i32 product; `w16a16`'s
    // (Graph::linear_w16a16): the weights' rows as two i8 terms too, each
    // row r₁ then r₂ (w = s·(r₁ + r₂/254)).
    let lo: Vec<i32> = vals(n * k, 34, -127.4, 127.4)
        .iter()
        .map(|x| x.round() as i32)
        .collect();
    let wide: Vec<i32> = codes
        .chunks_exact(k)
        .zip(lo.chunks_exact(k))
        .flat_map(|(h, l)| h.iter().chain(l).copied())
        .collect();
    let (mut want, mut want16) = (Vec::with_capacity(rows * n), Vec::with_capacity(rows * n));
    for r in xw.fv().chunks_exact(k) {
        let s = (r.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0).max(f32::MIN_POSITIVE);
        let xs: Vec<f32> = r.iter().map(|x| x / s).collect();
        let q1: Vec<i32> = xs.iter().map(|x| x.round_ties_even() as i32).collect();
        let q2: Vec<i32> = xs
            .iter()
            .map(|x| ((x - x.round_ties_even()) * 254.0).round_ties_even() as i32)
            .collect();
        let dot = |q: &[i32], c: &[i32]| q.iter().zip(c).map(|(a, b)| a * b).sum::<i32>() as f32;
        for (j, (h, l)) in codes.chunks_exact(k).zip(lo.chunks_exact(k)).enumerate() {
            want.push((dot(&q1, h) * s + dot(&q2, h) * (s / 254.0)) * sw.fv()[j]);
            let y1 = dot(&q1, h) + dot(&q1, l) / 254.0;
            let y2 = dot(&q2, h) + dot(&q2, l) / 254.0;
            want16.push((y1 * s + y2 * (s / 254.0)) * sw.fv()[j]);
        }
    }
    cases.push(case(
        "linear_w16a16",
        vec![xw.clone(), HostT::i(&[n, 2 * k], wide), sw.clone()],
        HostT::f(&[rows, n], want16),
        ARITH,
        |g, v| {
            let q = g.convert(v[1], kiln::graph::DType::I8).unwrap();
            g.linear_w16a16(v[0], q, v[2]).unwrap()
        },
    ));
    cases.push(case(
        "linear_w8a16",
        vec![xw, HostT::i(&[n, k], codes), sw],
        HostT::f(&[rows, n], want),
        ARITH,
        |g, v| {
            let q = g.convert(v[1], kiln::graph::DType::I8).unwrap();
            g.linear_w8a16(v[0], q, v[2]).unwrap()
        },
    ));
    // `--weights w4a16`'s product (Graph::linear_w4a16): i4 codes per
    // 32-block with a scale and a minimum each (a Q4_1/Q4_K matrix, zero 0:
    // w = (c + 8)·scale + min), times the activations' two i8 terms.
    let (rows4, k4, n4) = (3, 64, 5);
    let x4 = HostT::f(&[rows4, k4], vals(rows4 * k4, 35, -2.0, 2.0));
    let c4: Vec<i32> = vals(n4 * k4, 36, -8.49, 7.49)
        .iter()
        .map(|x| x.round() as i32)
        .collect();
    let sc4 = HostT::f(&[n4, k4 / 32], vals(n4 * k4 / 32, 37, 0.001, 0.02));
    let mn4 = HostT::f(&[n4, k4 / 32], vals(n4 * k4 / 32, 38, -0.1, 0.1));
    let mut want4 = Vec::with_capacity(rows4 * n4);
    for r in x4.fv().chunks_exact(k4) {
        let s = (r.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0).max(f32::MIN_POSITIVE);
        let xs: Vec<f32> = r.iter().map(|x| x / s).collect();
        let q1: Vec<f32> = xs.iter().map(|x| x.round_ties_even()).collect();
        let q2: Vec<f32> = xs
            .iter()
            .map(|x| ((x - x.round_ties_even()) * 254.0).round_ties_even())
            .collect();
        for (j, c) in c4.chunks_exact(k4).enumerate() {
            let mut y = 0f32;
            for b in 0..k4 / 32 {
                let blk = b * 32..(b + 1) * 32;
                let dot = |q: &[f32]| blk.clone().map(|i| q[i] * (c[i] + 8) as f32).sum::<f32>();
                let x_sum: f32 = r[blk.clone()].iter().sum();
                let (sc, mn) = (sc4.fv()[j * k4 / 32 + b], mn4.fv()[j * k4 / 32 + b]);
                y += (dot(&q1) * s + dot(&q2) * (s / 254.0)) * sc + mn * x_sum;
            }
            want4.push(y);
        }
    }
    cases.push(case(
        "linear_w4a16",
        vec![x4, HostT::i(&[n4, k4], c4), sc4, mn4],
        HostT::f(&[rows4, n4], want4),
        (1e-5, 1e-5),
        |g, v| {
            let q = g.convert(v[1], kiln::graph::DType::I4).unwrap();
            g.linear_w4a16(v[0], q, v[2], Some(v[3]), 0).unwrap()
        },
    ));
    // Q4_K's block scales under `--weights w4a16`
    // (Graph::super_block_scales): each 32-block's 6-bit scale times its
    // 256-element super-block's d (an f16 weight, exact in f32), one f32
    // product as GGML forms it.
    let (rs, subs) = (3, 16);
    let sub: Vec<i32> = vals(rs * subs, 39, 0.0, 63.49)
        .iter()
        .map(|x| x.round() as i32)
        .collect();
    let d: Vec<f32> = vals(rs * subs / 8, 40, -0.01, 0.01)
        .iter()
        .map(|&x| half::f16::from_f32(x).to_f32())
        .collect();
    let want_sc: Vec<f32> = (0..rs * subs).map(|i| d[i / 8] * sub[i] as f32).collect();
    cases.push(case(
        "super_block_scales",
        vec![HostT::i(&[rs, subs], sub), HostT::f(&[rs, subs / 8], d)],
        HostT::f(&[rs, subs], want_sc),
        (0.0, 0.0),
        |g, v| {
            // d as f32: the f16 part is a stored weight in kiln's graphs,
            // never narrowed in-graph (see the Vulkan op test's deviation).
            let sub = g.convert(v[0], kiln::graph::DType::I8).unwrap();
            g.super_block_scales(sub, v[1]).unwrap()
        },
    ));
    // The same product for a Q4_K matrix (Graph::linear_w4a16_super): the
    // blocks' 6-bit scales and minimums times their super-block's d and
    // dmin, w = (c + 8)·d·sc − dmin·m.
    let (k5, n5) = (512, 3);
    let x5 = HostT::f(&[rows4, k5], vals(rows4 * k5, 41, -2.0, 2.0));
    let c5: Vec<i32> = vals(n5 * k5, 42, -8.49, 7.49)
        .iter()
        .map(|x| x.round() as i32)
        .collect();
    let six_bits = |seed| -> Vec<i32> {
        vals(n5 * k5 / 32, seed, 0.0, 63.49)
            .iter()
            .map(|x| x.round() as i32)
            .collect()
    };
    let (sc5, m5) = (six_bits(43), six_bits(44));
    let d5 = vals(n5 * k5 / 256, 45, 0.0001, 0.001);
    let dm5 = vals(n5 * k5 / 256, 46, 0.0001, 0.003);
    let mut want5 = Vec::with_capacity(rows4 * n5);
    for r in x5.fv().chunks_exact(k5) {
        for (j, c) in c5.chunks_exact(k5).enumerate() {
            let mut y = 0f64;
            for (i, &ci) in c.iter().enumerate() {
                let g = j * k5 / 32 + i / 32;
                let sup = j * k5 / 256 + i / 256;
                let w = (ci + 8) as f64 * d5[sup] as f64 * sc5[g] as f64
                    - dm5[sup] as f64 * m5[g] as f64;
                y += r[i] as f64 * w;
            }
            want5.push(y as f32);
        }
    }
    cases.push(case(
        "linear_w4a16_super",
        vec![
            x5,
            HostT::i(&[n5, k5], c5),
            HostT::i(&[n5, k5 / 32], sc5),
            HostT::i(&[n5, k5 / 32], m5),
            HostT::f(&[n5, k5 / 256], d5),
            HostT::f(&[n5, k5 / 256], dm5),
        ],
        HostT::f(&[rows4, n5], want5),
        (2e-3, 2e-3),
        |g, v| {
            use kiln::graph::DType;
            let q = g.convert(v[1], DType::I4).unwrap();
            let sc = g.convert(v[2], DType::I8).unwrap();
            let m = g.convert(v[3], DType::I8).unwrap();
            g.linear_w4a16_super(v[0], q, [sc, m, v[4], v[5]]).unwrap()
        },
    ));
    // compare + select: select(compare(a, b), a, b) also covers select.
    let mut cb = b.clone();
    if let Data::F32(v) = &mut cb.data {
        v[0] = a.fv()[0];
        v[5] = a.fv()[5];
    }
    let cmp: [CmpCase; 6] = [
        (CompareDir::Eq, "compare_eq", |x, y| x == y),
        (CompareDir::Ne, "compare_ne", |x, y| x != y),
        (CompareDir::Lt, "compare_lt", |x, y| x < y),
        (CompareDir::Le, "compare_le", |x, y| x <= y),
        (CompareDir::Gt, "compare_gt", |x, y| x > y),
        (CompareDir::Ge, "compare_ge", |x, y| x >= y),
    ];
    for (dir, name, f) in cmp {
        let want = HostT::f(
            &sh,
            a.fv()
                .iter()
                .zip(cb.fv())
                .map(|(&x, &y)| if f(x, y) { 100.0 + x } else { -100.0 - y })
                .collect(),
        );
        cases.push(case(
            name,
            vec![a.clone(), cb.clone()],
            want,
            ARITH,
            move |g, v| {
                let c = g.compare(dir, v[0], v[1]).unwrap();
                let h = g.splat(DType::F32, &[3, 4], 100.0).unwrap();
                let t = g.add(h, v[0]).unwrap();
                let nh = g.splat(DType::F32, &[3, 4], -100.0).unwrap();
                let e = g.sub(nh, v[1]).unwrap();
                g.select(c, t, e).unwrap()
            },
        ));
    }
    cases.push(case(
        "compare_i32_select",
        vec![ia.clone(), ib.clone()],
        HostT::i(
            &sh,
            ia.iv()
                .iter()
                .zip(ib.iv())
                .map(|(&x, &y)| if x < y { x } else { y * 2 })
                .collect(),
        ),
        EXACT,
        |g, v| {
            let c = g.compare(CompareDir::Lt, v[0], v[1]).unwrap();
            let two = g.splat(DType::I32, &[3, 4], 2.0).unwrap();
            let y2 = g.mul(v[1], two).unwrap();
            g.select(c, v[0], y2).unwrap()
        },
    ));
    // convert: f32 -> bf16 -> f32 rounds to nearest even; -> i32 truncates.
    let cv = HostT::f(
        &[6],
        vec![
            1.0,
            1.0 + 1.0 / 256.0,
            1.0 + 3.0 / 256.0,
            -3.3,
            65504.0,
            1e-3,
        ],
    );
    cases.push(case(
        "convert_bf16_roundtrip",
        vec![cv.clone()],
        map1(&cv, |x| half::bf16::from_f32(x).to_f32()),
        EXACT,
        |g, v| {
            let h = g.convert(v[0], DType::BF16).unwrap();
            g.convert(h, DType::F32).unwrap()
        },
    ));
    cases.push(case(
        "convert_f16_roundtrip",
        vec![cv.clone()],
        map1(&cv, |x| half::f16::from_f32(x).to_f32()),
        EXACT,
        |g, v| {
            let h = g.convert(v[0], DType::F16).unwrap();
            g.convert(h, DType::F32).unwrap()
        },
    ));
    cases.push(case(
        "convert_i32_f32",
        vec![ia.clone()],
        HostT::f(&sh, ia.iv().iter().map(|&x| x as f32 * 0.5).collect()),
        EXACT,
        |g, v| {
            let f = g.convert(v[0], DType::F32).unwrap();
            let h = g.splat(DType::F32, &[3, 4], 0.5).unwrap();
            g.mul(f, h).unwrap()
        },
    ));
    // broadcast_in_dim
    let r3 = HostT::f(&[3], vec![1.0, 2.0, 3.0]);
    cases.push(case(
        "broadcast_in_dim",
        vec![r3.clone()],
        HostT::f(&[2, 3, 4], (0..24).map(|i| r3.fv()[(i / 4) % 3]).collect()),
        EXACT,
        |g, v| g.broadcast_in_dim(v[0], &[2, 3, 4], &[1]).unwrap(),
    ));
    cases.push(case(
        "reshape",
        vec![a.clone()],
        HostT::f(&[2, 6], a.fv().to_vec()),
        EXACT,
        |g, v| g.reshape(v[0], &[2, 6]).unwrap(),
    ));
    let t3 = HostT::f(&[2, 3, 4], vals(24, 5, -1.0, 1.0));
    let tr = {
        let out_shape = [4, 2, 3];
        let st = strides(&[2, 3, 4]);
        (0..24)
            .map(|i| {
                let o = unravel(i, &out_shape);
                // result dim k is operand dim perm[k], perm = [2, 0, 1]
                t3.fv()[o[1] * st[0] + o[2] * st[1] + o[0] * st[2]]
            })
            .collect()
    };
    cases.push(case(
        "transpose",
        vec![t3.clone()],
        HostT::f(&[4, 2, 3], tr),
        EXACT,
        |g, v| g.transpose(v[0], &[2, 0, 1]).unwrap(),
    ));
    let s46 = HostT::f(&[4, 6], (0..24).map(|i| i as f32).collect());
    let sl: Vec<f32> = (1..4)
        .flat_map(|r| (0..6).step_by(2).map(move |c| (r * 6 + c) as f32))
        .collect();
    cases.push(case(
        "slice",
        vec![s46.clone()],
        HostT::f(&[3, 3], sl),
        EXACT,
        |g, v| g.slice(v[0], &[1, 0], &[4, 6], &[1, 2]).unwrap(),
    ));
    let c2 = HostT::f(&[3, 2], vals(6, 6, -1.0, 1.0));
    let cat: Vec<f32> = (0..3)
        .flat_map(|r| {
            a.fv()[r * 4..r * 4 + 4]
                .iter()
                .chain(&c2.fv()[r * 2..r * 2 + 2])
                .copied()
                .collect::<Vec<_>>()
        })
        .collect();
    cases.push(case(
        "concatenate",
        vec![a.clone(), c2.clone()],
        HostT::f(&[3, 6], cat),
        EXACT,
        |g, v| g.concatenate(&[v[0], v[1]], 1).unwrap(),
    ));
    // dynamic_update_slice: a [2, 2] update into [3, 4] at runtime starts;
    // starts that would put it outside are clamped (StableHLO semantics).
    let du_op = HostT::f(&[3, 4], vals(12, 31, -1.0, 1.0));
    let du_up = HostT::f(&[2, 2], vals(4, 32, 2.0, 3.0));
    for (name, r, c) in [
        ("dynamic_update_slice", 1i32, 1i32),
        ("dynamic_update_slice_clamped", 5, -3),
        ("dynamic_update_slice_edge", 1, 3),
    ] {
        let (r0, c0) = (r.clamp(0, 1) as usize, c.clamp(0, 2) as usize);
        let mut want = du_op.fv().to_vec();
        for i in 0..2 {
            for j in 0..2 {
                want[(r0 + i) * 4 + c0 + j] = du_up.fv()[i * 2 + j];
            }
        }
        cases.push(case(
            name,
            vec![
                du_op.clone(),
                du_up.clone(),
                HostT::i(&[], vec![r]),
                HostT::i(&[], vec![c]),
            ],
            HostT::f(&[3, 4], want),
            EXACT,
            |g, v| g.dynamic_update_slice(v[0], v[1], &[v[2], v[3]]).unwrap(),
        ));
    }
    // scatter: whole rows of [3, 4] written into [2, 3, 4] at
    // (dim 0, dim 1) indices given at run time, in any order.
    let sc_op = HostT::f(&[2, 3, 4], vals(24, 33, -1.0, 1.0));
    let sc_up = HostT::f(&[3, 4], vals(12, 34, 2.0, 3.0));
    let sc_at = HostT::i(&[3, 2], vec![1, 2, 0, 0, 1, 0]);
    let mut want = sc_op.fv().to_vec();
    for (b, at) in sc_at.iv().chunks(2).enumerate() {
        let base = (at[0] as usize * 3 + at[1] as usize) * 4;
        want[base..base + 4].copy_from_slice(&sc_up.fv()[b * 4..b * 4 + 4]);
    }
    cases.push(case(
        "scatter",
        vec![sc_op, sc_up, sc_at],
        HostT::f(&[2, 3, 4], want),
        EXACT,
        |g, v| g.scatter_rows(v[0], v[2], v[1]).unwrap(),
    ));
    cases.push(case(
        "iota",
        vec![],
        HostT::i(&[3, 4], (0..12).map(|i| i / 4).collect()),
        EXACT,
        |g, _| g.iota(DType::I32, &[3, 4], 0).unwrap(),
    ));
    // dot_general: batched [2,3,4] x [2,5,4] contracting 2x2 -> [2,3,5]
    let da = HostT::f(&[2, 3, 4], vals(24, 7, -1.0, 1.0));
    let db = HostT::f(&[2, 5, 4], vals(40, 8, -1.0, 1.0));
    let mut dot = vec![0f32; 30];
    for bb in 0..2 {
        for i in 0..3 {
            for j in 0..5 {
                dot[bb * 15 + i * 5 + j] = (0..4)
                    .map(|k| da.fv()[bb * 12 + i * 4 + k] * db.fv()[bb * 20 + j * 4 + k])
                    .sum();
            }
        }
    }
    cases.push(case(
        "dot_general",
        vec![da.clone(), db.clone()],
        HostT::f(&[2, 3, 5], dot),
        REDUCE,
        |g, v| {
            g.dot_general(
                v[0],
                v[1],
                DotDims {
                    lhs_batch: vec![0],
                    rhs_batch: vec![0],
                    lhs_contract: vec![2],
                    rhs_contract: vec![2],
                },
            )
            .unwrap()
        },
    ));
    // dot_general with lhs contracting dim 0 and rhs free dims first: [4,3] x [5,4] -> [3,5]
    let ea = HostT::f(&[4, 3], vals(12, 9, -1.0, 1.0));
    let eb = HostT::f(&[5, 4], vals(20, 10, -1.0, 1.0));
    let e: Vec<f32> = (0..15)
        .map(|n| {
            let (i, j) = (n / 5, n % 5);
            (0..4)
                .map(|k| ea.fv()[k * 3 + i] * eb.fv()[j * 4 + k])
                .sum()
        })
        .collect();
    cases.push(case(
        "dot_general_transposed",
        vec![ea, eb],
        HostT::f(&[3, 5], e),
        REDUCE,
        |g, v| {
            g.dot_general(
                v[0],
                v[1],
                DotDims {
                    lhs_contract: vec![0],
                    rhs_contract: vec![1],
                    ..Default::default()
                },
            )
            .unwrap()
        },
    ));
    let rs: Vec<f32> = (0..3)
        .map(|r| a.fv()[r * 4..r * 4 + 4].iter().sum())
        .collect();
    cases.push(case(
        "reduce_sum",
        vec![a.clone()],
        HostT::f(&[3], rs),
        REDUCE,
        |g, v| g.reduce_sum(v[0], &[1]).unwrap(),
    ));
    let rm: Vec<f32> = (0..4)
        .map(|c| {
            (0..3)
                .map(|r| a.fv()[r * 4 + c])
                .fold(f32::NEG_INFINITY, f32::max)
        })
        .collect();
    cases.push(case(
        "reduce_max",
        vec![a.clone()],
        HostT::f(&[4], rm),
        EXACT,
        |g, v| g.reduce_max(v[0], &[0]).unwrap(),
    ));
    let rmin = a.fv().iter().copied().fold(f32::INFINITY, f32::min);
    cases.push(case(
        "reduce_min_all",
        vec![a.clone()],
        HostT::f(&[], vec![rmin]),
        EXACT,
        |g, v| g.reduce_min(v[0], &[0, 1]).unwrap(),
    ));
    let imax: Vec<i32> = (0..3)
        .map(|r| *ia.iv()[r * 4..r * 4 + 4].iter().max().unwrap())
        .collect();
    cases.push(case(
        "reduce_max_i32",
        vec![ia.clone()],
        HostT::i(&[3], imax),
        EXACT,
        |g, v| g.reduce_max(v[0], &[1]).unwrap(),
    ));
    // gather rows
    let table = HostT::f(&[5, 3], (0..15).map(|i| i as f32 * 0.5).collect());
    let ids = HostT::i(&[4], vec![4, 0, 2, 4]);
    let gat: Vec<f32> = ids
        .iv()
        .iter()
        .flat_map(|&r| table.fv()[r as usize * 3..r as usize * 3 + 3].to_vec())
        .collect();
    cases.push(case(
        "gather",
        vec![table.clone(), ids.clone()],
        HostT::f(&[4, 3], gat),
        EXACT,
        |g, v| g.gather_rows(v[0], v[1]).unwrap(),
    ));
    let ids2 = HostT::i(&[2, 2], vec![1, 3, 3, 0]);
    let gat2: Vec<f32> = ids2
        .iv()
        .iter()
        .flat_map(|&r| table.fv()[r as usize * 3..r as usize * 3 + 3].to_vec())
        .collect();
    cases.push(case(
        "gather_2d_ids",
        vec![table.clone(), ids2],
        HostT::f(&[2, 2, 3], gat2),
        EXACT,
        |g, v| g.gather_rows(v[0], v[1]).unwrap(),
    ));
    // argmax with ties: the lowest index wins.
    let am = HostT::f(
        &[3, 5],
        vec![
            1.0, 3.0, 3.0, 2.0, 0.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.5, 0.25, 7.0, 7.5, 7.5,
        ],
    );
    cases.push(case(
        "argmax",
        vec![am.clone()],
        HostT::i(&[3], vec![1, 0, 3]),
        EXACT,
        |g, v| g.argmax(v[0], 1).unwrap(),
    ));
    let am0: Vec<i32> = (0..5)
        .map(|c| {
            let col: Vec<f32> = (0..3).map(|r| am.fv()[r * 5 + c]).collect();
            let m = col.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            col.iter().position(|&x| x == m).unwrap() as i32
        })
        .collect();
    cases.push(case(
        "argmax_dim0",
        vec![am.clone()],
        HostT::i(&[5], am0),
        EXACT,
        |g, v| g.argmax(v[0], 0).unwrap(),
    ));
    // constants: dense and splat, mixed with an input.
    let dv = [0.1f32, -2.5, 1e-20, 3.0e10];
    cases.push(case(
        "constant_dense",
        vec![HostT::f(&[4], vec![1.0, 1.0, 1.0, 1.0])],
        HostT::f(&[4], dv.iter().map(|x| x + 1.0).collect()),
        ARITH,
        move |g, v| {
            let c = g
                .dense(DType::F32, &[4], dv.iter().map(|&x| x as f64).collect())
                .unwrap();
            g.add(v[0], c).unwrap()
        },
    ));
    // composites
    let x = HostT::f(&[3, 4], vals(12, 11, -2.0, 2.0));
    let w = HostT::f(&[5, 4], vals(20, 12, -1.0, 1.0));
    let lin: Vec<f32> = (0..15)
        .map(|n| {
            let (i, j) = (n / 5, n % 5);
            (0..4).map(|k| x.fv()[i * 4 + k] * w.fv()[j * 4 + k]).sum()
        })
        .collect();
    cases.push(case(
        "linear",
        vec![x.clone(), w.clone()],
        HostT::f(&[3, 5], lin),
        REDUCE,
        |g, v| g.linear(v[0], v[1]).unwrap(),
    ));
    let nw = HostT::f(&[4], vec![1.0, 0.5, 2.0, -1.0]);
    let rms: Vec<f32> = (0..12)
        .map(|n| {
            let r = n / 4;
            let ms: f32 = x.fv()[r * 4..r * 4 + 4].iter().map(|v| v * v).sum::<f32>() / 4.0;
            x.fv()[n] / (ms + 1e-5).sqrt() * nw.fv()[n % 4]
        })
        .collect();
    cases.push(case(
        "rms_norm",
        vec![x.clone(), nw.clone()],
        HostT::f(&[3, 4], rms),
        REDUCE,
        |g, v| g.rms_norm(v[0], v[1], 1e-5).unwrap(),
    ));
    cases.push(case(
        "silu",
        vec![x.clone()],
        map1(&x, |v| v / (1.0 + (-v).exp())),
        TRANSC,
        |g, v| g.silu(v[0]).unwrap(),
    ));
    let sm: Vec<f32> = (0..12)
        .map(|n| {
            let r = n / 4;
            let row = &x.fv()[r * 4..r * 4 + 4];
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let s: f32 = row.iter().map(|v| (v - m).exp()).sum();
            (x.fv()[n] - m).exp() / s
        })
        .collect();
    cases.push(case(
        "softmax",
        vec![x.clone()],
        HostT::f(&[3, 4], sm),
        REDUCE,
        |g, v| g.softmax(v[0], 1).unwrap(),
    ));
    // causal mask then softmax (masked entries become exact zeros).
    let sc = HostT::f(&[2, 3, 3], vals(18, 13, -1.0, 1.0));
    let cm: Vec<f32> = (0..18)
        .map(|n| {
            let (bb, q) = (n / 9, (n / 3) % 3);
            let k = n % 3;
            let row = &sc.fv()[bb * 9 + q * 3..bb * 9 + q * 3 + q + 1];
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let s: f32 = row.iter().map(|v| (v - m).exp()).sum();
            if k > q {
                0.0
            } else {
                (sc.fv()[n] - m).exp() / s
            }
        })
        .collect();
    cases.push(case(
        "causal_mask_softmax",
        vec![sc],
        HostT::f(&[2, 3, 3], cm),
        REDUCE,
        |g, v| {
            let m = g.causal_mask(v[0]).unwrap();
            g.softmax(m, 2).unwrap()
        },
    ));
    let rx = HostT::f(&[2, 3, 4], vals(24, 14, -1.0, 1.0));
    let cos = HostT::f(&[3, 4], vals(12, 15, -1.0, 1.0));
    let sin = HostT::f(&[3, 4], vals(12, 16, -1.0, 1.0));
    let rope: Vec<f32> = (0..24)
        .map(|n| {
            let (s, d) = ((n / 4) % 3, n % 4);
            let base = n - d;
            let rot = if d < 2 {
                -rx.fv()[base + d + 2]
            } else {
                rx.fv()[base + d - 2]
            };
            rx.fv()[n] * cos.fv()[s * 4 + d] + rot * sin.fv()[s * 4 + d]
        })
        .collect();
    cases.push(case(
        "rope",
        vec![rx, cos, sin],
        HostT::f(&[2, 3, 4], rope),
        ARITH,
        |g, v| g.rope(v[0], v[1], v[2]).unwrap(),
    ));
    // Bit-level ops behind the bf16 weight widening (Graph::weight).
    let sa: Vec<i32> = vec![1, -1, 0x1234, -40, 7, 0x7fff, -0x8000, 3, 0, 1, 5, -9];
    let sb: Vec<i32> = vec![0, 1, 4, 16, 31, 16, 16, 30, 5, 31, 2, 3];
    cases.push(case(
        "shift_left",
        vec![HostT::i(&sh, sa.clone()), HostT::i(&sh, sb.clone())],
        HostT::i(
            &sh,
            sa.iter()
                .zip(&sb)
                .map(|(&x, &k)| ((x as u32) << k) as i32)
                .collect(),
        ),
        EXACT,
        |g, v| g.shift_left(v[0], v[1]).unwrap(),
    ));
    // Unpacking quantized codes from i32 words (Graph::unpack_codes).
    cases.push(case(
        "shift_right_logical",
        vec![HostT::i(&sh, sa.clone()), HostT::i(&sh, sb.clone())],
        HostT::i(
            &sh,
            sa.iter()
                .zip(&sb)
                .map(|(&x, &k)| ((x as u32) >> k) as i32)
                .collect(),
        ),
        EXACT,
        |g, v| g.shift_right_logical(v[0], v[1]).unwrap(),
    ));
    // Block-quantized codes widened in one op (Graph::dequantize_blocks_op,
    // a linalg.generic on CPU targets, StableHLO ops after the Vulkan
    // lowering): Q4_1-like (4-bit codes, a minimum), Q6_K-like (4 low and 2
    // high bits, zero 32) and Q8_0-like (8-bit codes, zero 128), each
    // element computed here from its word's bits.
    let forms: [(&'static str, BlockCodes); 3] = [
        (
            "dequantize_blocks_4bit_min",
            BlockCodes {
                low_bits: 4,
                high_bits: 0,
                group: 32,
                zero: 0,
                has_min: true,
            },
        ),
        (
            "dequantize_blocks_6bit_zero",
            BlockCodes {
                low_bits: 4,
                high_bits: 2,
                group: 16,
                zero: 32,
                has_min: false,
            },
        ),
        (
            "dequantize_blocks_8bit_zero",
            BlockCodes {
                low_bits: 8,
                high_bits: 0,
                group: 32,
                zero: 128,
                has_min: false,
            },
        ),
    ];
    let (rows, k) = (3usize, 64usize);
    let words = |n: usize, seed: u32| -> Vec<i32> {
        let mut s = seed.wrapping_mul(2654435761) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                s as i32
            })
            .collect()
    };
    for (i, (name, form)) in forms.into_iter().enumerate() {
        let field = |w: &[i32], bits: u32, r: usize, j: usize| -> i32 {
            let n = (32 / bits) as usize;
            ((w[r * (k / n) + j / n] as u32 >> (bits as usize * (j % n))) & ((1 << bits) - 1))
                as i32
        };
        let lo = words(rows * k * form.low_bits as usize / 32, 40 + i as u32);
        let hi = words(rows * k * form.high_bits as usize / 32, 50 + i as u32);
        let groups = rows * k / form.group;
        let scale = vals(groups, 60 + i as u32, -0.05, 0.05);
        let min = vals(groups, 70 + i as u32, -1.0, 1.0);
        let mut want = Vec::with_capacity(rows * k);
        for r in 0..rows {
            for j in 0..k {
                let mut code = field(&lo, form.low_bits, r, j);
                if form.high_bits > 0 {
                    code += field(&hi, form.high_bits, r, j) << form.low_bits;
                }
                let g = r * (k / form.group) + j / form.group;
                let x = (code as f32 - form.zero as f32) * scale[g];
                want.push(if form.has_min { x + min[g] } else { x });
            }
        }
        let mut inputs = vec![HostT::i(&[rows, lo.len() / rows], lo)];
        if form.high_bits > 0 {
            inputs.push(HostT::i(&[rows, hi.len() / rows], hi));
        }
        inputs.push(HostT::f(&[rows, k / form.group], scale));
        if form.has_min {
            inputs.push(HostT::f(&[rows, k / form.group], min));
        }
        cases.push(case(
            name,
            inputs,
            HostT::f(&[rows, k], want),
            ARITH,
            move |g, v| g.dequantize_blocks_op(form, v).unwrap(),
        ));
    }
    // f16 scales of block-quantized weights, widened by their bits for
    // Vulkan (Graph::f16_pairs_to_f32): normals, subnormals, signed zeros,
    // the largest and smallest magnitudes.
    let halves: Vec<u16> = vec![
        0x3c00, 0xbc00, 0x0000, 0x8000, 0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3555, 0x1234,
        0x8abc, 0x03ff, 0x8001, 0x4248, 0xc000, 0x2e66, 0x0200, 0x5640, 0xd640, 0x0bad, 0x8bad,
        0x3801, 0x0010,
    ];
    let pairs: Vec<i32> = halves
        .chunks_exact(2)
        .map(|p| (p[0] as u32 | (p[1] as u32) << 16) as i32)
        .collect();
    cases.push(case(
        "f16_pairs_to_f32",
        vec![HostT::i(&sh, pairs)],
        HostT::f(
            &[2, 3, 4],
            halves
                .iter()
                .map(|&h| half::f16::from_bits(h).to_f32())
                .collect(),
        ),
        EXACT,
        |g, v| g.f16_pairs_to_f32(v[0], &[2, 3, 4]).unwrap(),
    ));
    cases.push(case(
        "bitcast_convert_f32_to_i32",
        vec![a.clone()],
        HostT::i(&sh, a.fv().iter().map(|x| x.to_bits() as i32).collect()),
        EXACT,
        |g, v| g.bitcast_convert(v[0], DType::I32).unwrap(),
    ));
    let bits: Vec<i32> = vals(12, 17, -3.0, 3.0)
        .iter()
        .map(|x| x.to_bits() as i32)
        .collect();
    cases.push(case(
        "bitcast_convert_i32_to_f32",
        vec![HostT::i(&sh, bits.clone())],
        HostT::f(
            &sh,
            bits.iter().map(|&b| f32::from_bits(b as u32)).collect(),
        ),
        EXACT,
        |g, v| g.bitcast_convert(v[0], DType::F32).unwrap(),
    ));
    cases.push(case(
        "optimization_barrier",
        vec![a.clone()],
        a.clone(),
        EXACT,
        |g, v| g.optimization_barrier(v[0]).unwrap(),
    ));
    // bf16 bit patterns (sign bit set in half of them), narrowed to i16 in
    // the graph, then widened: the exact f32 values they encode.
    let bf: Vec<i32> = vals(12, 18, -3.0, 3.0)
        .iter()
        .map(|x| (x.to_bits() >> 16) as u16 as i16 as i32)
        .collect();
    cases.push(case(
        "bf16_bits_to_f32",
        vec![HostT::i(&sh, bf.clone())],
        HostT::f(
            &sh,
            bf.iter()
                .map(|&b| f32::from_bits(((b as u16) as u32) << 16))
                .collect(),
        ),
        EXACT,
        |g, v| {
            let narrow = g.convert(v[0], DType::I16).unwrap();
            g.bf16_bits_to_f32(narrow).unwrap()
        },
    ));
    let ma: Vec<i32> = vec![
        -1,
        0x1234_5678,
        -0x8000,
        7,
        0,
        -65536,
        0x7fff_ffff,
        3,
        12,
        -9,
        5,
        1,
    ];
    let mb: Vec<i32> = vec![-65536, -65536, 0xffff, 5, -1, 0x0f0f, -1, 6, 10, -16, 0, 1];
    cases.push(case(
        "and",
        vec![HostT::i(&sh, ma.clone()), HostT::i(&sh, mb.clone())],
        HostT::i(&sh, ma.iter().zip(&mb).map(|(&x, &y)| x & y).collect()),
        EXACT,
        |g, v| g.bitwise_and(v[0], v[1]).unwrap(),
    ));
    // Two bf16 bit patterns per i32 (element 2i low, 2i+1 high, sign bits
    // set in half of them), widened to the 2x6 f32 values they encode.
    let halves: Vec<u16> = vals(12, 19, -3.0, 3.0)
        .iter()
        .map(|x| (x.to_bits() >> 16) as u16)
        .collect();
    let pairs: Vec<i32> = halves
        .chunks_exact(2)
        .map(|p| (p[0] as u32 | (p[1] as u32) << 16) as i32)
        .collect();
    cases.push(case(
        "bf16_pairs_to_f32",
        vec![HostT::i(&[2, 3], pairs)],
        HostT::f(
            &[2, 6],
            halves
                .iter()
                .map(|&h| f32::from_bits((h as u32) << 16))
                .collect(),
        ),
        EXACT,
        |g, v| g.bf16_pairs_to_f32(v[0], &[2, 6]).unwrap(),
    ));
    cases
}

/// Checks `got` against a case's expectation, with a readable failure.
pub fn check(case: &OpCase, got: &HostT) -> Result<(), String> {
    if got.shape != case.expected.shape {
        return Err(format!(
            "{}: shape {:?}, want {:?}",
            case.name, got.shape, case.expected.shape
        ));
    }
    match (&got.data, &case.expected.data) {
        (Data::I32(g), Data::I32(w)) => {
            if g != w {
                return Err(format!("{}: got {g:?}, want {w:?}", case.name));
            }
        }
        (Data::F32(g), Data::F32(w)) => {
            for (i, (&x, &y)) in g.iter().zip(w).enumerate() {
                let ok = if y.is_nan() {
                    x.is_nan()
                } else {
                    (x - y).abs() <= case.atol + case.rtol * y.abs()
                };
                if !ok {
                    return Err(format!(
                        "{}: element {i}: got {x}, want {y} (atol {}, rtol {})",
                        case.name, case.atol, case.rtol
                    ));
                }
            }
        }
        _ => return Err(format!("{}: dtype mismatch", case.name)),
    }
    Ok(())
}
