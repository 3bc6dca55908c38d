//! Each op's interpreter result against values computed by hand.

use kiln::graph::{CompareDir, DType, DotDims, Graph, TensorType, Value};
use kiln::interp::{run, Tensor};
use std::collections::HashMap;

fn f32t(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape)
}

/// Builds a one-output graph over the given inputs and runs it.
fn eval(inputs: &[Tensor], build: impl FnOnce(&mut Graph, &[Value]) -> Value) -> Tensor {
    let mut g = Graph::new("f");
    let vs: Vec<Value> = inputs
        .iter()
        .map(|t| {
            let dtype = match t {
                Tensor::F32 { .. } => DType::F32,
                Tensor::I32 { .. } => DType::I32,
                Tensor::I1 { .. } => DType::I1,
            };
            g.input(TensorType::new(dtype, t.shape()))
        })
        .collect();
    let out = build(&mut g, &vs);
    g.set_outputs(&[out]);
    let params: HashMap<String, Tensor> = HashMap::new();
    run(&g, inputs, &params).unwrap().remove(0)
}

fn a23() -> Tensor {
    Tensor::f32(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

#[test]
fn binary_ops() {
    let b = Tensor::f32(&[2, 3], vec![2.0, 2.0, 2.0, -1.0, 0.5, 8.0]);
    let cases: [(kiln::graph::BinaryOp, [f32; 6]); 7] = [
        (kiln::graph::BinaryOp::Add, [3.0, 4.0, 5.0, 3.0, 5.5, 14.0]),
        (
            kiln::graph::BinaryOp::Subtract,
            [-1.0, 0.0, 1.0, 5.0, 4.5, -2.0],
        ),
        (
            kiln::graph::BinaryOp::Multiply,
            [2.0, 4.0, 6.0, -4.0, 2.5, 48.0],
        ),
        (
            kiln::graph::BinaryOp::Divide,
            [0.5, 1.0, 1.5, -4.0, 10.0, 0.75],
        ),
        (
            kiln::graph::BinaryOp::Maximum,
            [2.0, 2.0, 3.0, 4.0, 5.0, 8.0],
        ),
        (
            kiln::graph::BinaryOp::Minimum,
            [1.0, 2.0, 2.0, -1.0, 0.5, 6.0],
        ),
        (
            kiln::graph::BinaryOp::Power,
            [1.0, 4.0, 9.0, 0.25, 5f32.sqrt(), 1679616.0],
        ),
    ];
    for (op, want) in cases {
        let out = eval(&[a23(), b.clone()], |g, v| {
            g.binary(op, v[0], v[1]).unwrap()
        });
        assert_eq!(out, Tensor::f32(&[2, 3], want.to_vec()), "{op:?}");
    }
    let i = Tensor::i32(&[4], vec![7, -7, 5, 2]);
    let j = Tensor::i32(&[4], vec![2, 2, 0, 10]);
    let out = eval(&[i.clone(), j.clone()], |g, v| g.div(v[0], v[1]).unwrap());
    assert_eq!(out, Tensor::i32(&[4], vec![3, -3, -1, 0]));
    let out = eval(&[i, j], |g, v| g.pow(v[0], v[1]).unwrap());
    assert_eq!(out, Tensor::i32(&[4], vec![49, 49, 1, 1024]));
}

#[test]
fn unary_ops() {
    let x = Tensor::f32(&[3], vec![0.0, 1.0, 4.0]);
    let e = std::f32::consts::E;
    let cases: [(kiln::graph::UnaryOp, [f32; 3]); 7] = [
        (kiln::graph::UnaryOp::Negate, [-0.0, -1.0, -4.0]),
        (kiln::graph::UnaryOp::Exponential, [1.0, e, 4f32.exp()]),
        (
            kiln::graph::UnaryOp::Log,
            [f32::NEG_INFINITY, 0.0, 4f32.ln()],
        ),
        (kiln::graph::UnaryOp::Rsqrt, [f32::INFINITY, 1.0, 0.5]),
        (kiln::graph::UnaryOp::Sqrt, [0.0, 1.0, 2.0]),
        (kiln::graph::UnaryOp::Tanh, [0.0, 1f32.tanh(), 4f32.tanh()]),
        (
            kiln::graph::UnaryOp::Logistic,
            [0.5, 1.0 / (1.0 + 1.0 / e), 1.0 / (1.0 + (-4f32).exp())],
        ),
    ];
    for (op, want) in cases {
        let out = eval(std::slice::from_ref(&x), |g, v| g.unary(op, v[0]).unwrap());
        let got = out.as_f32().unwrap();
        for (a, b) in got.iter().zip(want) {
            assert!(
                a == &b || (a - b).abs() <= 1e-6 * b.abs(),
                "{op:?}: {got:?} vs {want:?}"
            );
        }
    }
    let out = eval(&[Tensor::i32(&[2], vec![3, -4])], |g, v| {
        g.neg(v[0]).unwrap()
    });
    assert_eq!(out, Tensor::i32(&[2], vec![-3, 4]));
}

#[test]
fn compare_select_convert() {
    let a = Tensor::f32(&[3], vec![1.0, 2.0, 3.0]);
    let b = Tensor::f32(&[3], vec![2.0, 2.0, 2.0]);
    let want: [(CompareDir, [bool; 3]); 6] = [
        (CompareDir::Eq, [false, true, false]),
        (CompareDir::Ne, [true, false, true]),
        (CompareDir::Lt, [true, false, false]),
        (CompareDir::Le, [true, true, false]),
        (CompareDir::Gt, [false, false, true]),
        (CompareDir::Ge, [false, true, true]),
    ];
    for (d, w) in want {
        let out = eval(&[a.clone(), b.clone()], |g, v| {
            g.compare(d, v[0], v[1]).unwrap()
        });
        assert_eq!(out, Tensor::i1(&[3], w.to_vec()), "{d:?}");
    }
    let out = eval(&[a.clone(), b.clone()], |g, v| {
        let p = g.compare(CompareDir::Lt, v[0], v[1]).unwrap();
        g.select(p, v[0], v[1]).unwrap()
    });
    assert_eq!(out, Tensor::f32(&[3], vec![1.0, 2.0, 2.0]));
    let out = eval(&[Tensor::f32(&[4], vec![1.7, -1.7, 0.0, 3.0])], |g, v| {
        g.convert(v[0], DType::I32).unwrap()
    });
    assert_eq!(out, Tensor::i32(&[4], vec![1, -1, 0, 3]));
    // f32 -> bf16 rounds to nearest even: 1 + 2^-8 is a tie, goes to 1.
    let out = eval(
        &[Tensor::f32(
            &[2],
            vec![1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0],
        )],
        |g, v| {
            let h = g.convert(v[0], DType::BF16).unwrap();
            g.convert(h, DType::F32).unwrap()
        },
    );
    assert_eq!(out, Tensor::f32(&[2], vec![1.0, 1.0 + 4.0 / 256.0]));
}

#[test]
fn data_movement() {
    let out = eval(&[Tensor::f32(&[3], vec![1.0, 2.0, 3.0])], |g, v| {
        g.broadcast_in_dim(v[0], &[2, 3], &[1]).unwrap()
    });
    assert_eq!(
        out,
        Tensor::f32(&[2, 3], vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0])
    );
    let out = eval(&[Tensor::f32(&[2, 1], vec![1.0, 2.0])], |g, v| {
        g.broadcast_in_dim(v[0], &[2, 3], &[0, 1]).unwrap()
    });
    assert_eq!(
        out,
        Tensor::f32(&[2, 3], vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0])
    );
    let out = eval(&[a23()], |g, v| g.transpose(v[0], &[1, 0]).unwrap());
    assert_eq!(
        out,
        Tensor::f32(&[3, 2], vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0])
    );
    let out = eval(&[a23()], |g, v| g.reshape(v[0], &[3, 2]).unwrap());
    assert_eq!(
        out,
        Tensor::f32(&[3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    );
    let x: Vec<f32> = (0..20).map(|i| i as f32).collect();
    let out = eval(&[Tensor::f32(&[4, 5], x)], |g, v| {
        g.slice(v[0], &[1, 0], &[4, 5], &[2, 2]).unwrap()
    });
    assert_eq!(
        out,
        Tensor::f32(&[2, 3], vec![5.0, 7.0, 9.0, 15.0, 17.0, 19.0])
    );
    let out = eval(&[a23(), Tensor::f32(&[2, 1], vec![9.0, 8.0])], |g, v| {
        g.concatenate(&[v[0], v[1]], 1).unwrap()
    });
    assert_eq!(
        out,
        Tensor::f32(&[2, 4], vec![1.0, 2.0, 3.0, 9.0, 4.0, 5.0, 6.0, 8.0])
    );
    let out = eval(&[a23()], |g, v| g.concatenate(&[v[0], v[0]], 0).unwrap());
    assert_eq!(
        out.as_f32().unwrap(),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    let out = eval(&[], |g, _| g.iota(DType::I32, &[2, 3], 1).unwrap());
    assert_eq!(out, Tensor::i32(&[2, 3], vec![0, 1, 2, 0, 1, 2]));
    let out = eval(&[], |g, _| g.iota(DType::F32, &[2, 3], 0).unwrap());
    assert_eq!(
        out,
        Tensor::f32(&[2, 3], vec![0.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    );
}

#[test]
fn gather_clamps_ids() {
    let table = Tensor::f32(&[3, 2], vec![0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
    let ids = Tensor::i32(&[2, 2], vec![2, 0, 7, -1]);
    let out = eval(&[table, ids], |g, v| g.gather_rows(v[0], v[1]).unwrap());
    assert_eq!(
        out,
        Tensor::f32(&[2, 2, 2], vec![20.0, 21.0, 0.0, 1.0, 20.0, 21.0, 0.0, 1.0])
    );
}

/// A row scatter whose indices are out of range or repeated has no
/// defined result in StableHLO: the interpreter refuses it, naming the row.
#[test]
fn scatter_refuses_rows_out_of_range_or_repeated() {
    let run_at = |at: Vec<i32>| {
        let inputs = [
            Tensor::f32(&[2, 3], vec![0.0; 6]),
            Tensor::i32(&[2, 1], at),
            Tensor::f32(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        ];
        let mut g = Graph::new("f");
        let vs: Vec<Value> = [
            f32t(&[2, 3]),
            TensorType::new(DType::I32, &[2, 1]),
            f32t(&[2, 3]),
        ]
        .into_iter()
        .map(|t| g.input(t))
        .collect();
        let out = g.scatter_rows(vs[0], vs[1], vs[2]).unwrap();
        g.set_outputs(&[out]);
        let params: HashMap<String, Tensor> = HashMap::new();
        run(&g, &inputs, &params).map_err(|e| e.to_string())
    };
    let ok = run_at(vec![1, 0]).unwrap().remove(0);
    assert_eq!(ok, Tensor::f32(&[2, 3], vec![4.0, 5.0, 6.0, 1.0, 2.0, 3.0]));
    let e = run_at(vec![0, 2]).unwrap_err();
    assert!(
        e.contains("scatter row 1: index 2 is out of range for dim 0 of size 2"),
        "{e}"
    );
    let e = run_at(vec![-1, 0]).unwrap_err();
    assert!(e.contains("scatter row 0: index -1 is out of range"), "{e}");
    let e = run_at(vec![1, 1]).unwrap_err();
    assert!(
        e.contains("scatter row 1: its index [1] repeats an earlier row's"),
        "{e}"
    );
}

#[test]
fn reductions_and_argmax() {
    let out = eval(&[a23()], |g, v| g.reduce_sum(v[0], &[1]).unwrap());
    assert_eq!(out, Tensor::f32(&[2], vec![6.0, 15.0]));
    let out = eval(&[a23()], |g, v| g.reduce_sum(v[0], &[0]).unwrap());
    assert_eq!(out, Tensor::f32(&[3], vec![5.0, 7.0, 9.0]));
    let out = eval(&[a23()], |g, v| g.reduce_max(v[0], &[0, 1]).unwrap());
    assert_eq!(out, Tensor::f32(&[], vec![6.0]));
    let out = eval(&[a23()], |g, v| g.reduce_min(v[0], &[0]).unwrap());
    assert_eq!(out, Tensor::f32(&[3], vec![1.0, 2.0, 3.0]));
    let out = eval(&[Tensor::i32(&[2, 2], vec![3, -9, 4, 1])], |g, v| {
        g.reduce_min(v[0], &[1]).unwrap()
    });
    assert_eq!(out, Tensor::i32(&[2], vec![-9, 1]));
    // Ties go to the lowest index; an all -inf row gives 0.
    let x = Tensor::f32(
        &[3, 4],
        vec![
            1.0,
            5.0,
            5.0,
            2.0,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            -1.0,
            -3.0,
            0.0,
            0.0,
        ],
    );
    let out = eval(std::slice::from_ref(&x), |g, v| g.argmax(v[0], 1).unwrap());
    assert_eq!(out, Tensor::i32(&[3], vec![1, 0, 2]));
    let out = eval(&[x], |g, v| g.argmax(v[0], 0).unwrap());
    assert_eq!(out, Tensor::i32(&[4], vec![0, 0, 0, 0]));
}

#[test]
fn dot_general_layouts() {
    // [2, 3] x [4, 3]^T (a linear layer).
    let w: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let out = eval(&[a23(), Tensor::f32(&[4, 3], w)], |g, v| {
        g.linear(v[0], v[1]).unwrap()
    });
    assert_eq!(
        out,
        Tensor::f32(
            &[2, 4],
            vec![8.0, 26.0, 44.0, 62.0, 17.0, 62.0, 107.0, 152.0]
        )
    );
    // [2, 3] x [3, 2] contracting lhs 1 with rhs 0.
    let b = Tensor::f32(&[3, 2], vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let out = eval(&[a23(), b], |g, v| {
        g.dot_general(
            v[0],
            v[1],
            DotDims {
                lhs_contract: vec![1],
                rhs_contract: vec![0],
                ..Default::default()
            },
        )
        .unwrap()
    });
    assert_eq!(out, Tensor::f32(&[2, 2], vec![4.0, 5.0, 10.0, 11.0]));
    // Batched, batch dim not leading on the rhs: lhs [2, 1, 3], rhs [3, 2] with batch 1.
    let l = Tensor::f32(&[2, 1, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let r = Tensor::f32(&[3, 2], vec![1.0, 10.0, 1.0, 10.0, 1.0, 10.0]);
    let out = eval(&[l, r], |g, v| {
        g.dot_general(
            v[0],
            v[1],
            DotDims {
                lhs_batch: vec![0],
                rhs_batch: vec![1],
                lhs_contract: vec![2],
                rhs_contract: vec![0],
            },
        )
        .unwrap()
    });
    assert_eq!(out, Tensor::f32(&[2, 1], vec![6.0, 150.0]));
}

#[test]
fn large_dot_matches_naive() {
    let (m, n, k) = (37, 133, 70);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.25)
        .collect();
    let b: Vec<f32> = (0..n * k)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.5)
        .collect();
    let out = eval(
        &[
            Tensor::f32(&[m, k], a.clone()),
            Tensor::f32(&[n, k], b.clone()),
        ],
        |g, v| g.linear(v[0], v[1]).unwrap(),
    );
    let got = out.as_f32().unwrap();
    for i in 0..m {
        for j in 0..n {
            // Products are exact multiples of 1/8 and sums stay small: exact in f32.
            let want: f32 = (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum();
            assert_eq!(got[i * n + j], want, "({i}, {j})");
        }
    }
}

#[test]
fn parameters_upcast_and_checked() {
    let mut g = Graph::new("f");
    let w = g.weight("w", DType::BF16, &[2]).unwrap();
    let y = g.add(w, w).unwrap();
    g.set_outputs(&[y]);
    // A bf16 weight is a bf16 parameter converted to f32 in-graph.
    let mut p = HashMap::new();
    p.insert("w".to_string(), Tensor::f32(&[2], vec![1.5, -2.0]));
    let out = run(&g, &[], &p).unwrap();
    assert_eq!(out[0], Tensor::f32(&[2], vec![3.0, -4.0]));
    p.insert("w".to_string(), Tensor::i32(&[2], vec![0, 0]));
    let e = run(&g, &[], &p).unwrap_err().to_string();
    assert!(e.contains("parameter \"w\""), "{e}");
    let e = run(&g, &[Tensor::f32(&[1], vec![0.0])], &p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("takes 0 argument"), "{e}");
    let _ = f32t(&[1]);
}

/// Library users match the interpreter's refusals by variant and field.
#[test]
fn errors_carry_their_facts() {
    use kiln::interp::InterpError;
    let mut g = Graph::new("f");
    let x = g.input(TensorType::new(DType::F32, &[2]));
    let w = g.parameter("w", TensorType::new(DType::F32, &[2])).unwrap();
    let y = g.add(x, w).unwrap();
    g.set_outputs(&[y]);
    let mut p = HashMap::new();
    let arg = Tensor::f32(&[2], vec![1.0, 2.0]);
    let e = run(&g, std::slice::from_ref(&arg), &p).unwrap_err();
    assert!(
        matches!(&e, InterpError::NoParameter { key, file: None } if key == "w"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "no value for parameter \"w\"");
    p.insert("w".to_string(), Tensor::i32(&[2], vec![0, 0]));
    let e = run(&g, std::slice::from_ref(&arg), &p).unwrap_err();
    assert!(
        matches!(&e, InterpError::ParameterType { key, found, expected, offset: None, .. }
            if key == "w" && found == "i32[2]" && expected.shape.as_slice() == [2]),
        "{e:?}"
    );
    p.insert("w".to_string(), Tensor::f32(&[2], vec![0.0, 0.0]));
    let e = run(&g, &[], &p).unwrap_err();
    assert!(
        matches!(&e, InterpError::ArgumentCount { function, expected: 1, found: 0 } if function == "f"),
        "{e:?}"
    );
    let e = run(&g, &[Tensor::f32(&[3], vec![0.0; 3])], &p).unwrap_err();
    assert!(
        matches!(&e, InterpError::Argument { index: 0, found: Some(f), .. } if f == "float[3]"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "argument 0 of @f must be tensor<2xf32>, got float[3]"
    );
}

#[test]
fn lowered_bf16_parameters_compute_the_same_values() {
    use kiln::graph::Module;
    let vals = [1.5f32, -2.0, 0.0078125, 3.0, -0.5, 96.0];
    let bits = |x: f32| half::bf16::from_f32(x).to_bits();
    for shape in [vec![2, 3], vec![3]] {
        let n: usize = shape.iter().product();
        let mut g = Graph::new("f");
        let x = g.input(f32t(&shape));
        let w = g.weight("w", DType::BF16, &shape).unwrap();
        let y = g.mul(x, w).unwrap();
        g.set_outputs(&[y]);
        let mut m = Module::new("m");
        m.functions.push(g);
        assert!(m.has_bf16_parameters());
        let low = m.lower_for_vulkan().unwrap();
        assert!(!low.has_bf16_parameters());
        let input = Tensor::f32(&shape, vec![2.0; n]);
        let mut native = HashMap::new();
        native.insert("w".to_string(), Tensor::f32(&shape, vals[..n].to_vec()));
        let want = run(&m.functions[0], std::slice::from_ref(&input), &native).unwrap();
        // The lowered graph reads the same bytes as i32 pairs (even count)
        // or i16 bits (odd count).
        let mut packed = HashMap::new();
        if n % 2 == 0 {
            let words = vals[..n]
                .chunks_exact(2)
                .map(|p| (bits(p[0]) as u32 | (bits(p[1]) as u32) << 16) as i32)
                .collect();
            packed.insert(
                "w".to_string(),
                Tensor::i32(
                    &TensorType::new(DType::BF16, &shape)
                        .bf16_pairs_shape()
                        .unwrap(),
                    words,
                ),
            );
        } else {
            let words = vals[..n].iter().map(|&x| bits(x) as i16 as i32).collect();
            packed.insert("w".to_string(), Tensor::i32(&shape, words));
        }
        let got = run(&low.functions[0], &[input], &packed).unwrap();
        assert_eq!(got, want, "{shape:?}");
    }
    // Only a convert to f32 can be lowered.
    let mut g = Graph::new("f");
    let p = g
        .parameter("w", TensorType::new(DType::BF16, &[2]))
        .unwrap();
    let r = g.reshape(p, &[1, 2]).unwrap();
    g.set_outputs(&[r]);
    let mut m = Module::new("m");
    m.functions.push(g);
    let e = m.lower_for_vulkan().unwrap_err().to_string();
    assert!(e.contains("feeds `reshape`"), "{e}");
}

#[test]
fn argmax_two_pass_matches_argmax_with_ties() {
    // Rows with ties (lowest index wins), negatives, -inf and a single max.
    let vals = vec![
        1.0,
        3.0,
        3.0,
        2.0, //
        -5.0,
        -1.0,
        -7.0,
        -1.0, //
        f32::NEG_INFINITY,
        0.0,
        0.0,
        f32::NEG_INFINITY, //
        9.0,
        9.0,
        9.0,
        9.0,
    ];
    for dim in [0, 1] {
        let build = |two: bool| {
            let mut g = Graph::new("f");
            let x = g.input(f32t(&[4, 4]));
            let y = if two {
                g.argmax_two_pass(x, dim).unwrap()
            } else {
                g.argmax(x, dim).unwrap()
            };
            g.set_outputs(&[y]);
            g
        };
        let input = Tensor::f32(&[4, 4], vals.clone());
        let p: HashMap<String, Tensor> = HashMap::new();
        let a = run(&build(false), std::slice::from_ref(&input), &p).unwrap();
        let b = run(&build(true), std::slice::from_ref(&input), &p).unwrap();
        assert_eq!(a, b, "dim {dim}");
    }
    let p: HashMap<String, Tensor> = HashMap::new();
    let mut g = Graph::new("f");
    let x = g.input(f32t(&[4, 4]));
    let y = g.argmax_two_pass(x, 1).unwrap();
    g.set_outputs(&[y]);
    let out = run(&g, &[Tensor::f32(&[4, 4], vals)], &p).unwrap();
    assert_eq!(out[0], Tensor::i32(&[4], vec![1, 1, 1, 0]));
}

#[test]
fn vulkan_lowering_turns_the_two_pass_argmax_into_one_reduce() {
    use kiln::graph::{Module, Op};
    let mut g = Graph::new("f");
    let x = g.input(f32t(&[3, 5]));
    let y = g.argmax_two_pass(x, 1).unwrap();
    g.set_outputs(&[y]);
    let mut m = Module::new("m");
    m.functions.push(g);
    let low = m.lower_for_vulkan().unwrap();
    let f = &low.functions[0];
    assert!(matches!(f.node(f.outputs()[0]).op, Op::Argmax { dim: 1 }));
    let input = Tensor::f32(
        &[3, 5],
        vec![
            0.0, 2.0, 2.0, -1.0, 1.0, //
            -3.0, -3.0, -4.0, -5.0, -3.0, //
            1.0, 2.0, 3.0, 4.0, 5.0,
        ],
    );
    let p: HashMap<String, Tensor> = HashMap::new();
    let want = run(&m.functions[0], std::slice::from_ref(&input), &p).unwrap();
    assert_eq!(want[0], Tensor::i32(&[3], vec![1, 0, 4]));
    assert_eq!(run(f, &[input], &p).unwrap(), want);
}

/// The KV decode's cache write, a row scatter at (layer, head, position),
/// becomes one `dynamic_update_slice` in the Vulkan lowering (IREE's
/// replayed scatter decode is wrong on lavapipe), with the same values.
#[test]
fn vulkan_lowering_writes_the_decodes_cache_rows_by_dynamic_update_slice() {
    use kiln::graph::{Module, Op};
    let mut g = Graph::new("f");
    let cache = g.input(f32t(&[2, 3, 5, 4]));
    let rows = g.input(f32t(&[3, 4]));
    let pos = g.input(TensorType::new(DType::I32, &[]));
    let lh = (0..3).flat_map(|h| [1.0, h as f64, 0.0]).collect();
    let lh = g.dense(DType::I32, &[3, 3], lh).unwrap();
    let at = g.broadcast_in_dim(pos, &[3, 3], &[]).unwrap();
    let third = g
        .dense(DType::I32, &[3, 3], [0.0, 0.0, 1.0].repeat(3))
        .unwrap();
    let at = g.mul(at, third).unwrap();
    let idx = g.add(lh, at).unwrap();
    let y = g.scatter_rows(cache, idx, rows).unwrap();
    g.set_outputs(&[y]);
    let mut m = Module::new("m");
    m.functions.push(g);
    let low = m.lower_for_vulkan().unwrap();
    let f = &low.functions[0];
    assert_eq!(f.node(f.outputs()[0]).op, Op::DynamicUpdateSlice);
    assert!(!f.nodes().iter().any(|n| n.op == Op::ScatterRows));
    let inputs = [
        Tensor::f32(&[2, 3, 5, 4], (0..120).map(|i| i as f32).collect()),
        Tensor::f32(&[3, 4], (0..12).map(|i| -1.0 - i as f32).collect()),
        Tensor::i32(&[], vec![3]),
    ];
    let p: HashMap<String, Tensor> = HashMap::new();
    let want = run(&m.functions[0], &inputs, &p).unwrap();
    assert_eq!(run(f, &inputs, &p).unwrap(), want);
    let got = want[0].as_f32().unwrap();
    // Layer 1, head 2, position 3: the last row written.
    let at = ((3 + 2) * 5 + 3) * 4;
    assert_eq!(got[at..at + 4], [-9.0, -10.0, -11.0, -12.0]);
}

/// Any other row scatter becomes one `dynamic_update_slice` per row in
/// the Vulkan lowering, with the same values.
#[test]
fn vulkan_lowering_writes_other_row_scatters_row_by_row() {
    use kiln::graph::{Module, Op};
    let mut g = Graph::new("f");
    let operand = g.input(f32t(&[2, 3, 4]));
    let idx = g.input(TensorType::new(DType::I32, &[2, 2]));
    let rows = g.input(f32t(&[2, 4]));
    let y = g.scatter_rows(operand, idx, rows).unwrap();
    g.set_outputs(&[y]);
    let mut m = Module::new("m");
    m.functions.push(g);
    let low = m.lower_for_vulkan().unwrap();
    let f = &low.functions[0];
    let count = |op: &Op| f.nodes().iter().filter(|n| &n.op == op).count();
    assert_eq!(count(&Op::ScatterRows), 0);
    assert_eq!(count(&Op::DynamicUpdateSlice), 2);
    let inputs = [
        Tensor::f32(&[2, 3, 4], (0..24).map(|i| i as f32).collect()),
        Tensor::i32(&[2, 2], vec![1, 2, 0, 0]),
        Tensor::f32(&[2, 4], (0..8).map(|i| -1.0 - i as f32).collect()),
    ];
    let p: HashMap<String, Tensor> = HashMap::new();
    let want = run(&m.functions[0], &inputs, &p).unwrap();
    assert_eq!(run(f, &inputs, &p).unwrap(), want);
    assert_eq!(want[0].as_f32().unwrap()[20..24], [-1.0, -2.0, -3.0, -4.0]);
}

/// `top_k` against a stable descending sort (value, then lower index), on
/// vectors with many ties, −∞ and sizes around the group boundaries.
#[test]
fn top_k_equals_a_stable_sort() {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    for &(n, k) in &[
        (1, 1),
        (5, 5),
        (40, 40),
        (100, 7),
        (257, 40),
        (1000, 40),
        (4099, 16),
        (3000, 1),
    ] {
        for round in 0..3 {
            let x: Vec<f32> = (0..n)
                .map(|_| match round {
                    // Few distinct values: ties everywhere.
                    0 => (next() % 7) as f32 - 3.0,
                    1 => (next() % 100_000) as f32 / 1000.0 - 50.0,
                    _ => {
                        if next() % 5 == 0 {
                            f32::NEG_INFINITY
                        } else {
                            (next() % 13) as f32
                        }
                    }
                })
                .collect();
            let mut g = Graph::new("f");
            let xin = g.input(f32t(&[n]));
            let (v, i) = g.top_k(xin, k).unwrap();
            g.set_outputs(&[v, i]);
            let params: HashMap<String, Tensor> = HashMap::new();
            let out = run(&g, &[Tensor::f32(&[n], x.clone())], &params).unwrap();
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| x[b].partial_cmp(&x[a]).unwrap().then(a.cmp(&b)));
            let want_i: Vec<i32> = order[..k].iter().map(|&j| j as i32).collect();
            let want_v: Vec<f32> = order[..k].iter().map(|&j| x[j]).collect();
            assert_eq!(
                out[1].as_i32().unwrap(),
                want_i,
                "n {n} k {k} round {round}"
            );
            assert_eq!(
                out[0].as_f32().unwrap(),
                want_v,
                "n {n} k {k} round {round}"
            );
        }
    }
}

/// A graph with an f32 input `[s, k]` and an i8 product's parameters
/// `w.q8` `[n, k]` and `w.scale` `[n, 1]`.
fn i8_product_graph(s: usize, k: usize, n: usize) -> (Graph, Value, Value, Value) {
    let mut g = Graph::new("f");
    let xv = g.input(f32t(&[s, k]));
    let q = g
        .parameter("w.q8", TensorType::new(DType::I8, &[n, k]))
        .unwrap();
    let sc = g.parameter("w.scale", f32t(&[n, 1])).unwrap();
    (g, xv, q, sc)
}

/// The values of [`i8_product_graph`]'s parameters.
fn i8_product_params(
    n: usize,
    k: usize,
    codes: Vec<i32>,
    scale: Vec<f32>,
) -> HashMap<String, Tensor> {
    [
        ("w.q8".to_string(), Tensor::i32(&[n, k], codes)),
        ("w.scale".to_string(), Tensor::f32(&[n, 1], scale)),
    ]
    .into()
}

/// `linear_w8a16` rounds one row's two activation terms by one op (the
/// decode step's form, fewer dispatches on IREE) and several rows' by two
/// roundings joined: each row of a three-row product equals, bit for bit,
/// the product of that row alone.
#[test]
fn w8a16_one_row_equals_its_row_of_several() {
    let (n, k, s) = (5, 64, 3);
    let codes: Vec<i32> = (0..n * k).map(|i| (i * 37 % 255) as i32 - 127).collect();
    let scale: Vec<f32> = (0..n).map(|r| 0.01 + r as f32 * 0.003).collect();
    let x: Vec<f32> = (0..s * k)
        .map(|i| (i as f32 * 0.7311).sin() * (1.0 + (i % 7) as f32))
        .collect();
    let (mut g, xv, q, sc) = i8_product_graph(s, k, n);
    let mut outs = vec![g.linear_w8a16(xv, q, sc).unwrap()];
    for r in 0..s {
        let row = g.slice_dim(xv, 0, r, r + 1).unwrap();
        outs.push(g.linear_w8a16(row, q, sc).unwrap());
    }
    g.set_outputs(&outs);
    let params = i8_product_params(n, k, codes, scale);
    let got = run(&g, &[Tensor::f32(&[s, k], x)], &params).unwrap();
    let bits =
        |t: &Tensor| -> Vec<u32> { t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect() };
    let all = bits(&got[0]);
    assert!(all.iter().any(|&b| b != 0));
    for r in 0..s {
        assert_eq!(bits(&got[1 + r]), all[r * n..(r + 1) * n], "row {r}");
    }
}

/// `linear_w8a8`'s row scale is `max(max|x|/127, f32::MIN_POSITIVE)`, bit
/// for bit, though the graph divides each element before the reduction
/// (one dispatch fewer on IREE): each output equals `(f32(Σ q·c) · s) ·
/// scale` computed here from that formula, on rows whose maxima round
/// differently under the two orders if the division were not monotone
/// (subnormal, zero, odd mantissas).
#[test]
fn w8a8_row_scale_is_the_row_max_over_127() {
    let (n, k) = (3, 16);
    let codes: Vec<i32> = (0..n * k).map(|i| (i * 53 % 255) as i32 - 127).collect();
    let scale = [0.013f32, 0.021, 0.0007];
    let rows: Vec<Vec<f32>> = vec![
        (0..k).map(|i| (i as f32 * 0.913).sin() * 3.7).collect(),
        vec![0.0; k],
        (0..k).map(|i| f32::from_bits(1 + i as u32 * 977)).collect(),
        (0..k)
            .map(|i| {
                f32::from_bits(0x3f80_0001 + i as u32 * 0x1_2345)
                    * if i % 2 == 0 { 1.0 } else { -1.0 }
            })
            .collect(),
        (0..k).map(|i| 1e-36 * (i as f32 + 0.3)).collect(),
    ];
    let s = rows.len();
    let (mut g, xv, q, sc) = i8_product_graph(s, k, n);
    let y = g.linear_w8a8(xv, q, sc).unwrap();
    g.set_outputs(&[y]);
    let params = i8_product_params(n, k, codes.clone(), scale.to_vec());
    let x: Vec<f32> = rows.concat();
    let got = run(&g, &[Tensor::f32(&[s, k], x)], &params).unwrap();
    let got = got[0].as_f32().unwrap();
    for (r, row) in rows.iter().enumerate() {
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let sx = (amax / 127.0).max(f32::MIN_POSITIVE);
        for o in 0..n {
            let sum: i32 = row
                .iter()
                .zip(&codes[o * k..(o + 1) * k])
                .map(|(v, c)| (v / sx).round_ties_even() as i32 * c)
                .sum();
            let want = (sum as f32 * sx) * scale[o];
            assert_eq!(
                got[r * n + o].to_bits(),
                want.to_bits(),
                "row {r}, output {o}: {} against {want}",
                got[r * n + o]
            );
        }
    }
}
