//! Graph DSL: every op and composite prints to a snapshot; malformed
//! builds give their documented errors; printing is deterministic.

#![allow(clippy::cloned_ref_to_slice_refs)] // one-element input lists read better as `&[x.clone()]`

use kiln::graph::*;
use kiln::stablehlo::{ConstantPolicy, PrintOptions};
use std::collections::HashMap;

fn f32t(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape)
}

fn print(g: Graph) -> String {
    let mut m = Module::new("m");
    m.functions.push(g);
    m.print(&PrintOptions::default(), None).expect("print")
}

macro_rules! snap {
    ($name:expr, $text:expr) => {
        insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
            insta::assert_snapshot!($name, $text);
        })
    };
}

/// A one-op function: `build` gets the graph and returns the output.
fn one(
    name: &str,
    inputs: &[TensorType],
    build: impl FnOnce(&mut Graph, &[Value]) -> Value,
) -> String {
    let mut g = Graph::new(name);
    let args: Vec<Value> = inputs.iter().map(|t| g.input(t.clone())).collect();
    let out = build(&mut g, &args);
    g.set_outputs(&[out]);
    print(g)
}

#[test]
fn snapshot_every_op() {
    let x = f32t(&[2, 3]);
    for op in BinaryOp::ALL {
        snap!(
            format!("op_{}", op.name()),
            one(op.name(), &[x.clone(), x.clone()], |g, a| g
                .binary(op, a[0], a[1])
                .unwrap())
        );
    }
    for op in UnaryOp::ALL {
        snap!(
            format!("op_{}", op.name()),
            one(op.name(), &[x.clone()], |g, a| g.unary(op, a[0]).unwrap())
        );
    }
    for dir in CompareDir::ALL {
        let name = format!("compare_{}", dir.name().to_lowercase());
        snap!(
            format!("op_{name}"),
            one(&name, &[x.clone(), x.clone()], |g, a| g
                .compare(dir, a[0], a[1])
                .unwrap())
        );
    }
    let i = TensorType::new(DType::I32, &[2, 3]);
    snap!(
        "op_compare_i32",
        one("compare_i32", &[i.clone(), i.clone()], |g, a| g
            .compare(CompareDir::Lt, a[0], a[1])
            .unwrap())
    );
    snap!(
        "op_convert",
        one(
            "convert",
            &[TensorType::new(DType::BF16, &[2, 3])],
            |g, a| g.convert(a[0], DType::F32).unwrap()
        )
    );
    snap!(
        "op_select",
        one(
            "select",
            &[TensorType::new(DType::I1, &[2, 3]), x.clone(), x.clone()],
            |g, a| g.select(a[0], a[1], a[2]).unwrap()
        )
    );
    snap!(
        "op_broadcast_in_dim",
        one("broadcast_in_dim", &[f32t(&[3])], |g, a| g
            .broadcast_in_dim(a[0], &[2, 3], &[1])
            .unwrap())
    );
    snap!(
        "op_reshape",
        one("reshape", &[x.clone()], |g, a| g
            .reshape(a[0], &[3, 2])
            .unwrap())
    );
    snap!(
        "op_transpose",
        one("transpose", &[f32t(&[2, 3, 4])], |g, a| g
            .transpose(a[0], &[2, 0, 1])
            .unwrap())
    );
    snap!(
        "op_slice",
        one("slice", &[f32t(&[4, 6])], |g, a| g
            .slice(a[0], &[1, 0], &[4, 6], &[1, 2])
            .unwrap())
    );
    snap!(
        "op_concatenate",
        one("concatenate", &[x.clone(), f32t(&[2, 1])], |g, a| g
            .concatenate(&[a[0], a[1]], 1)
            .unwrap())
    );
    snap!(
        "op_dynamic_update_slice",
        one(
            "dynamic_update_slice",
            &[
                f32t(&[2, 4, 3]),
                f32t(&[1, 2, 3]),
                TensorType::new(DType::I32, &[])
            ],
            |g, a| {
                let zero = g.scalar(DType::I32, 0.0).unwrap();
                g.dynamic_update_slice(a[0], a[1], &[zero, a[2], zero])
                    .unwrap()
            }
        )
    );
    snap!(
        "op_scatter",
        one(
            "scatter",
            &[
                f32t(&[2, 3, 4, 5]),
                TensorType::new(DType::I32, &[3, 3]),
                f32t(&[3, 5])
            ],
            |g, a| g.scatter_rows(a[0], a[1], a[2]).unwrap()
        )
    );
    snap!("op_output_storage", {
        let mut g = Graph::new("output_storage");
        let cache = g.input(f32t(&[4, 3]));
        let row = g.input(f32t(&[1, 3]));
        let pos = g.input(TensorType::new(DType::I32, &[]));
        let zero = g.scalar(DType::I32, 0.0).unwrap();
        let c = g.dynamic_update_slice(cache, row, &[pos, zero]).unwrap();
        let s = g.reduce_sum(c, &[0, 1]).unwrap();
        g.set_outputs(&[s, c]);
        g.store_output_in_input(1, cache).unwrap();
        print(g)
    });
    snap!(
        "op_iota",
        one("iota", &[], |g, _| g.iota(DType::I32, &[2, 3], 1).unwrap())
    );
    snap!(
        "op_dot_general",
        one(
            "dot_general",
            &[f32t(&[2, 4, 3]), f32t(&[2, 5, 3])],
            |g, a| {
                g.dot_general(
                    a[0],
                    a[1],
                    DotDims {
                        lhs_batch: vec![0],
                        rhs_batch: vec![0],
                        lhs_contract: vec![2],
                        rhs_contract: vec![2],
                    },
                )
                .unwrap()
            }
        )
    );
    snap!(
        "op_reduce_sum",
        one("reduce_sum", &[x.clone()], |g, a| g
            .reduce_sum(a[0], &[1])
            .unwrap())
    );
    snap!(
        "op_reduce_max",
        one("reduce_max", &[x.clone()], |g, a| g
            .reduce_max(a[0], &[0, 1])
            .unwrap())
    );
    snap!(
        "op_reduce_min_i32",
        one("reduce_min_i32", &[i.clone()], |g, a| g
            .reduce_min(a[0], &[0])
            .unwrap())
    );
    snap!(
        "op_gather",
        one(
            "gather",
            &[f32t(&[5, 3]), TensorType::new(DType::I32, &[4])],
            |g, a| g.gather_rows(a[0], a[1]).unwrap()
        )
    );
    snap!(
        "op_argmax",
        one("argmax", &[x.clone()], |g, a| g.argmax(a[0], 1).unwrap())
    );
    snap!(
        "op_constants",
        one("constants", &[], |g, _| {
            let a = g.scalar(DType::F32, f64::NEG_INFINITY).unwrap();
            let _ = g.scalar(DType::BF16, 1.5).unwrap();
            let _ = g.scalar(DType::F16, f64::NAN).unwrap();
            let _ = g.scalar(DType::I1, 1.0).unwrap();
            let _ = g
                .dense(DType::I32, &[2, 2], vec![1.0, -2.0, 3.0, 2147483647.0])
                .unwrap();
            let _ = g
                .dense(DType::F32, &[3], vec![0.1f32 as f64, 1e-30f32 as f64, -0.0])
                .unwrap();
            a
        })
    );
    snap!(
        "op_parameter_bf16",
        one("parameter_bf16", &[], |g, _| g
            .weight("layers.0.w", DType::BF16, &[2, 3])
            .unwrap())
    );
    let i = TensorType::new(DType::I32, &[2, 3]);
    snap!(
        "op_shift_left",
        one("shift_left", &[i.clone(), i.clone()], |g, a| g
            .shift_left(a[0], a[1])
            .unwrap())
    );
    snap!(
        "op_shift_right_logical",
        one("shift_right_logical", &[i.clone(), i.clone()], |g, a| g
            .shift_right_logical(a[0], a[1])
            .unwrap())
    );
    snap!(
        "op_and",
        one("and", &[i.clone(), i.clone()], |g, a| g
            .bitwise_and(a[0], a[1])
            .unwrap())
    );
    snap!(
        "op_parameter_bf16_odd",
        one("parameter_bf16_odd", &[], |g, _| g
            .weight("layers.0.w", DType::BF16, &[3])
            .unwrap())
    );
    snap!(
        "op_bitcast_convert",
        one("bitcast_convert", &[x.clone()], |g, a| g
            .bitcast_convert(a[0], DType::I32)
            .unwrap())
    );
    snap!(
        "op_optimization_barrier",
        one("optimization_barrier", &[x.clone()], |g, a| g
            .optimization_barrier(a[0])
            .unwrap())
    );
    snap!(
        "op_bf16_bits_to_f32",
        one(
            "bf16_bits_to_f32",
            &[TensorType::new(DType::I16, &[2, 3])],
            |g, a| g.bf16_bits_to_f32(a[0]).unwrap()
        )
    );
}

#[test]
fn snapshot_every_composite() {
    snap!(
        "composite_linear",
        one("linear", &[f32t(&[2, 4]), f32t(&[3, 4])], |g, a| g
            .linear(a[0], a[1])
            .unwrap())
    );
    snap!(
        "composite_rms_norm",
        one("rms_norm", &[f32t(&[2, 4]), f32t(&[4])], |g, a| g
            .rms_norm(a[0], a[1], 1e-5)
            .unwrap())
    );
    snap!(
        "composite_silu",
        one("silu", &[f32t(&[2, 4])], |g, a| g.silu(a[0]).unwrap())
    );
    snap!(
        "composite_softmax",
        one("softmax", &[f32t(&[2, 4])], |g, a| g
            .softmax(a[0], 1)
            .unwrap())
    );
    snap!(
        "composite_causal_mask",
        one("causal_mask", &[f32t(&[2, 3, 3])], |g, a| g
            .causal_mask(a[0])
            .unwrap())
    );
    snap!(
        "composite_rope",
        one(
            "rope",
            &[f32t(&[2, 3, 4]), f32t(&[3, 4]), f32t(&[3, 4])],
            |g, a| g.rope(a[0], a[1], a[2]).unwrap()
        )
    );
}

fn policy_module() -> (Module, HashMap<String, Vec<f64>>) {
    let mut g = Graph::new("policy");
    let x = g.input(f32t(&[1, 2]));
    let small = g.weight("small.w", DType::F32, &[2, 2]).unwrap();
    let big = g.weight("big.w", DType::BF16, &[3, 2]).unwrap();
    let y = g.linear(x, small).unwrap();
    let y = g.linear(y, big).unwrap();
    g.set_outputs(&[y]);
    let mut m = Module::new("policy");
    m.set_schedule(&[("batch", 0)]);
    m.functions.push(g);
    let mut w = HashMap::new();
    w.insert("small.w".to_string(), vec![1.0, 0.5, -0.25, f64::INFINITY]);
    // bf16 weights are bf16 parameters, values exact in bf16.
    w.insert(
        "big.w".to_string(),
        vec![1.0, 2.0, 3.0, -1.0, 0.0078125, 1.5],
    );
    (m, w)
}

#[test]
fn snapshot_constant_policies() {
    let (m, w) = policy_module();
    let pol = |constants| PrintOptions { constants };
    snap!(
        "policy_external",
        m.print(&pol(ConstantPolicy::default()), None).unwrap()
    );
    snap!(
        "policy_external_scope",
        m.print(
            &pol(ConstantPolicy::ExternalAlways {
                scope: "weights".into()
            }),
            None
        )
        .unwrap()
    );
    snap!(
        "policy_inline",
        m.print(&pol(ConstantPolicy::InlineAlways), Some(&w))
            .unwrap()
    );
    snap!(
        "policy_threshold",
        m.print(
            &pol(ConstantPolicy::SizeThreshold {
                bytes: 16,
                scope: "model".into()
            }),
            Some(&w)
        )
        .unwrap()
    );
    // Inlining without values is an error, not a panic.
    let e = m
        .print(&pol(ConstantPolicy::InlineAlways), None)
        .unwrap_err();
    assert!(e.to_string().contains("no weights were given"), "{e}");
}

#[test]
fn symbols_are_injective_and_keys_escaped() {
    let mut g = Graph::new("f");
    let keys = ["a.b", "a_b", "a-b", "9lives", "q\"uote\\", "ünï"];
    let mut acc = None;
    for k in keys {
        let w = g.weight(k, DType::F32, &[2]).unwrap();
        acc = Some(match acc {
            None => w,
            Some(a) => g.add(a, w).unwrap(),
        });
    }
    g.set_outputs(&[acc.unwrap()]);
    let text = print(g);
    let syms: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("util.global private"))
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    let unique: std::collections::BTreeSet<_> = syms.iter().collect();
    assert_eq!(unique.len(), keys.len(), "{syms:?}");
    snap!("symbols_and_escapes", text);
}

#[test]
fn multiple_functions_share_parameters() {
    let mut m = Module::new("two");
    for name in ["prefill", "decode"] {
        let mut g = Graph::new(name);
        let x = g.input(f32t(&[4]));
        let w = g.weight("shared.w", DType::BF16, &[4]).unwrap();
        let y = g.mul(x, w).unwrap();
        let s = g.reduce_sum(y, &[0]).unwrap();
        g.set_outputs(&[y, s]);
        m.functions.push(g);
    }
    let text = m.print(&PrintOptions::default(), None).unwrap();
    assert_eq!(text.matches("util.global private").count(), 1);
    snap!("two_functions", text);
}

#[test]
fn printing_is_deterministic() {
    let build = || {
        let (m, w) = policy_module();
        (
            m.print(&PrintOptions::default(), None).unwrap(),
            m.print(
                &PrintOptions {
                    constants: ConstantPolicy::InlineAlways,
                },
                Some(&w),
            )
            .unwrap(),
        )
    };
    let a = build();
    for _ in 0..5 {
        assert_eq!(build(), a);
    }
}

fn build_err(f: impl FnOnce(&mut Graph) -> Result<Value, GraphError>) -> GraphError {
    let mut g = Graph::new("e");
    f(&mut g).expect_err("build should fail")
}

#[test]
fn malformed_builds_give_documented_errors() {
    let cases: Vec<(GraphError, &str, &str)> = vec![
        (
            build_err(|g| {
                let a = g.input(f32t(&[2]));
                g.shift_left(a, a)
            }),
            "shift_left",
            "needs two i32 tensors of one type, got tensor<2xf32> and tensor<2xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2]));
                g.bitwise_and(a, a)
            }),
            "and",
            "needs two i32 tensors of one type, got tensor<2xf32> and tensor<2xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(TensorType::new(DType::I32, &[3]));
                g.bf16_pairs_to_f32(a, &[5])
            }),
            "bf16_pairs_to_f32",
            "needs an i32 tensor of half the elements of [5], got tensor<3xi32>",
        ),
        (
            build_err(|g| {
                let a = g.input(TensorType::new(DType::I16, &[2]));
                g.bitcast_convert(a, DType::F32)
            }),
            "bitcast_convert",
            "cannot reinterpret tensor<2xi16> as f32: element widths differ",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2]));
                g.bf16_bits_to_f32(a)
            }),
            "bf16_bits_to_f32",
            "needs an i16 tensor, got tensor<2xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(TensorType::new(DType::I16, &[2]));
                g.add(a, a)
            }),
            "add",
            "unsupported element type in tensor<2xi16>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2]));
                let b = g.input(f32t(&[3]));
                g.add(a, b)
            }),
            "add",
            "operand types differ: tensor<2xf32> and tensor<3xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(TensorType::new(DType::I1, &[2]));
                g.add(a, a)
            }),
            "add",
            "unsupported element type in tensor<2xi1>",
        ),
        (
            build_err(|g| {
                let a = g.input(TensorType::new(DType::I32, &[2]));
                g.exp(a)
            }),
            "exponential",
            "needs a float tensor, got tensor<2xi32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2]));
                let b = g.input(TensorType::new(DType::I32, &[2]));
                g.compare(CompareDir::Lt, a, b)
            }),
            "compare",
            "operand types differ",
        ),
        (
            build_err(|g| {
                let p = g.input(f32t(&[2]));
                let a = g.input(f32t(&[2]));
                g.select(p, a, a)
            }),
            "select",
            "predicate must be i1 shaped like tensor<2xf32>, got tensor<2xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[3]));
                g.broadcast_in_dim(a, &[2, 4], &[1])
            }),
            "broadcast_in_dim",
            "cannot broadcast tensor<3xf32> to shape [2, 4] with dims [1]",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                g.reshape(a, &[4, 2])
            }),
            "reshape",
            "cannot reshape tensor<2x3xf32> to tensor<4x2xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                g.transpose(a, &[0, 0])
            }),
            "transpose",
            "[0, 0] is not a permutation of the dims of tensor<2x3xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[4]));
                g.slice(a, &[2], &[5], &[1])
            }),
            "slice",
            "bad slice of tensor<4xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let b = g.input(f32t(&[3, 3]));
                g.concatenate(&[a, b], 1)
            }),
            "concatenate",
            "do not agree outside dim 1",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let u = g.input(f32t(&[3, 1]));
                let z = g.scalar(DType::I32, 0.0)?;
                g.dynamic_update_slice(a, u, &[z, z])
            }),
            "dynamic_update_slice",
            "cannot write tensor<3x1xf32> into tensor<2x3xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let u = g.input(f32t(&[1, 1]));
                let z = g.scalar(DType::I32, 0.0)?;
                g.dynamic_update_slice(a, u, &[z])
            }),
            "dynamic_update_slice",
            "1 start indices for tensor<2x3xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let u = g.input(f32t(&[1, 1]));
                let z = g.input(TensorType::new(DType::I32, &[1]));
                g.dynamic_update_slice(a, u, &[z, z])
            }),
            "dynamic_update_slice",
            "start indices must be tensor<i32>, got tensor<1xi32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let i = g.input(TensorType::new(DType::I32, &[2, 2]));
                let u = g.input(f32t(&[2, 3]));
                g.scatter_rows(a, i, u)
            }),
            "scatter",
            "cannot write rows tensor<2x3xf32> at indices tensor<2x2xi32> into tensor<2x3xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let i = g.input(TensorType::new(DType::I32, &[1, 1]));
                let u = g.input(TensorType::new(DType::BF16, &[1, 3]));
                g.scatter_rows(a, i, u)
            }),
            "scatter",
            "updates [B, last dim] of the operand's dtype",
        ),
        (
            build_err(|g| g.concatenate(&[], 0)),
            "concatenate",
            "needs at least one operand",
        ),
        (
            build_err(|g| g.iota(DType::I32, &[2], 1)),
            "iota",
            "bad iota tensor<2xi32> along dim 1",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let b = g.input(f32t(&[4, 3]));
                g.dot_general(
                    a,
                    b,
                    DotDims {
                        lhs_contract: vec![0],
                        rhs_contract: vec![1],
                        ..Default::default()
                    },
                )
            }),
            "dot_general",
            "paired dims differ in size: lhs tensor<2x3xf32>, rhs tensor<4x3xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let b = g.input(TensorType::new(DType::BF16, &[4, 3]));
                g.dot_general(a, b, DotDims::default())
            }),
            "dot_general",
            "operands must share one float element type",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                g.dot_general(
                    a,
                    a,
                    DotDims {
                        lhs_contract: vec![5],
                        rhs_contract: vec![1],
                        ..Default::default()
                    },
                )
            }),
            "dot_general",
            "dims out of range or repeated",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                g.reduce_sum(a, &[2])
            }),
            "reduce",
            "cannot reduce tensor<2x3xf32> over dims [2]",
        ),
        (
            build_err(|g| {
                let t = g.input(f32t(&[5, 3]));
                let i = g.input(f32t(&[4]));
                g.gather_rows(t, i)
            }),
            "gather",
            "needs a [V, D] table and i32 ids",
        ),
        (
            build_err(|g| {
                let a = g.input(TensorType::new(DType::I32, &[2, 3]));
                g.argmax(a, 1)
            }),
            "argmax",
            "needs a float tensor with dim 1, got tensor<2x3xi32>",
        ),
        (
            build_err(|g| g.scalar(DType::I32, 0.5)),
            "constant",
            "0.5 is not exactly representable as i32",
        ),
        (
            build_err(|g| g.scalar(DType::BF16, 0.1)),
            "constant",
            "not exactly representable as bf16",
        ),
        (
            build_err(|g| g.dense(DType::F32, &[2], vec![1.0])),
            "constant",
            "1 values given for tensor<2xf32>",
        ),
        (
            build_err(|g| {
                g.parameter("w", f32t(&[2]))?;
                g.parameter("w", f32t(&[3]))
            }),
            "parameter",
            "\"w\" already declared as tensor<2xf32>, now as tensor<3xf32>",
        ),
        (
            build_err(|g| g.parameter("huge", f32t(&[usize::MAX, 2]))),
            "parameter",
            "overflows",
        ),
        (
            build_err(|g| g.add(Value(7), Value(8))),
            "add",
            "operand #7 is not defined in function @e",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let w = g.input(f32t(&[3, 2]));
                g.linear(a, w)
            }),
            "linear",
            "needs x [..., in] and w [out, in], got tensor<2x3xf32> and tensor<3x2xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                let w = g.input(f32t(&[2]));
                g.rms_norm(a, w, 1e-5)
            }),
            "rms_norm",
            "needs x [..., D] and w [D]",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3]));
                g.softmax(a, 2)
            }),
            "softmax",
            "needs a float tensor with dim 2",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[3]));
                g.causal_mask(a)
            }),
            "causal_mask",
            "needs float scores [..., Q, K], got tensor<3xf32>",
        ),
        (
            build_err(|g| {
                let a = g.input(f32t(&[2, 3, 3]));
                let c = g.input(f32t(&[3, 3]));
                g.rope(a, c, c)
            }),
            "rope",
            "(D even)",
        ),
    ];
    for (e, op, msg) in cases {
        assert_eq!(e.op, op, "{e}");
        assert!(
            e.to_string().starts_with(&format!("graph op `{op}`: ")),
            "{e}"
        );
        assert!(e.msg.contains(msg), "error `{e}` should contain `{msg}`");
    }
}

#[test]
fn parameters_with_conflicting_types_across_functions_are_rejected() {
    let mut m = Module::new("m");
    for (name, n) in [("a", 2), ("b", 3)] {
        let mut g = Graph::new(name);
        let w = g.parameter("w", f32t(&[n])).unwrap();
        g.set_outputs(&[w]);
        m.functions.push(g);
    }
    let e = m.print(&PrintOptions::default(), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("\"w\" is used as tensor<2xf32> and as tensor<3xf32>"),
        "{e}"
    );
}

#[test]
fn invalid_names_are_rejected_by_the_printer() {
    let mut g = Graph::new("1bad");
    let x = g.input(f32t(&[1]));
    g.set_outputs(&[x]);
    let mut m = Module::new("m");
    m.functions.push(g);
    let e = m.print(&PrintOptions::default(), None).unwrap_err();
    assert!(
        e.to_string()
            .contains("function name \"1bad\" is not a valid MLIR identifier"),
        "{e}"
    );
}

#[test]
fn snapshot_vulkan_lowering_of_bf16_parameters() {
    let (m, _) = policy_module();
    let low = m.lower_for_vulkan().unwrap();
    snap!(
        "lowered_bf16_parameters",
        low.print(&PrintOptions::default(), None).unwrap()
    );
}

#[test]
fn output_storage_is_checked() {
    let mut g = Graph::new("f");
    let a = g.input(f32t(&[2, 3]));
    let b = g.input(f32t(&[3]));
    let s = g.reduce_sum(a, &[1]).unwrap();
    g.set_outputs(&[a, s]);
    let e = g.store_output_in_input(1, a).unwrap_err();
    assert!(
        e.msg
            .contains("result 1 is tensor<2xf32> but argument 0 is tensor<2x3xf32>"),
        "{e}"
    );
    let e = g.store_output_in_input(2, a).unwrap_err();
    assert!(e.msg.contains("which has 2 results"), "{e}");
    let e = g.store_output_in_input(0, s).unwrap_err();
    assert!(e.msg.contains("is not an argument"), "{e}");
    let e = g.store_output_in_input(0, b).unwrap_err();
    assert!(
        e.msg
            .contains("result 0 is tensor<2x3xf32> but argument 1 is tensor<3xf32>"),
        "{e}"
    );
    g.store_output_in_input(0, a).unwrap();
    let e = g.store_output_in_input(0, a).unwrap_err();
    assert!(e.msg.contains("already has an output storage"), "{e}");
    assert_eq!(g.output_stored_in(0), Some(0));
    assert_eq!(g.output_stored_in(1), None);
    // Only the checked builder sets storages (the field is private), so
    // the printer prints what it is given.
    assert_eq!(g.output_storage(), &[(0, 0)]);
}

/// Row chunks of one archive entry: each part is a global bound to a slice
/// of the same key (`{offset, length}` in bytes), the same (key, offset)
/// twice is one global, the Vulkan lowering keeps the slice while it
/// re-declares bf16 as i32 pairs, and print(parse(text)) is the text.
#[test]
fn parameter_parts_print_as_slices_of_one_entry() {
    let mut g = Graph::new("f");
    let ids = g.input(TensorType::new(DType::I32, &[2]));
    let a = g.weight_rows("emb", DType::BF16, &[4], 0..3).unwrap();
    let b = g.weight_rows("emb", DType::BF16, &[4], 3..5).unwrap();
    // The same part again is the same global (a second convert of it).
    g.weight_rows("emb", DType::BF16, &[4], 3..5).unwrap();
    let ra = g.gather_rows(a, ids).unwrap();
    let rb = g.gather_rows(b, ids).unwrap();
    let y = g.add(ra, rb).unwrap();
    g.set_outputs(&[y]);
    let mut m = Module::new("parts");
    m.functions.push(g);
    let decls = m.parameters().unwrap();
    assert_eq!(decls.len(), 2);
    assert_eq!(
        (decls[1].offset, decls[1].describe()),
        (Some(24), "\"emb\" bytes 24..40".to_string())
    );
    let text = m.print(&PrintOptions::default(), None).unwrap();
    assert!(text.contains("  util.global private @emb_at0 = #flow.parameter.named<\"model\"::\"emb\", {offset = 0 : i64, length = 24 : i64}> : tensor<3x4xbf16>\n"), "{text}");
    assert!(text.contains("  util.global private @emb_at24 = #flow.parameter.named<\"model\"::\"emb\", {offset = 24 : i64, length = 16 : i64}> : tensor<2x4xbf16>\n"), "{text}");
    let parsed = kiln::stablehlo::ParsedModule::parse(&text).unwrap();
    assert_eq!(parsed.module, m);
    assert_eq!(
        parsed.module.print(&parsed.print_options(), None).unwrap(),
        text
    );
    let lowered = m.lower_for_vulkan().unwrap();
    let low = lowered.print(&PrintOptions::default(), None).unwrap();
    assert!(
        low.contains("\"emb\", {offset = 24 : i64, length = 16 : i64}> : tensor<2x2xi32>"),
        "{low}"
    );
    // A part is never inlined, whatever the policy.
    let inl = m
        .print(
            &PrintOptions {
                constants: ConstantPolicy::InlineAlways,
            },
            None,
        )
        .unwrap();
    assert_eq!(inl.matches("util.global private").count(), 2);
}
