//! Malformed modules give a `line:column` error naming what was expected
//! and what was found, with the offending line quoted.

fn module(body: &str) -> String {
    format!(
        "module @m {{\n  func.func @f(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {{\n{body}\n    return %0 : tensor<2x3xf32>\n  }}\n}}\n"
    )
}

fn cases() -> Vec<(&'static str, String)> {
    vec![
        ("missing `=`", module("    %0 stablehlo.add %arg0, %arg0 : tensor<2x3xf32>")),
        ("undefined value", module("    %0 = stablehlo.add %arg0, %7 : tensor<2x3xf32>")),
        ("stated type disagrees", module("    %0 = stablehlo.add %arg0, %arg0 : tensor<2x4xf32>")),
        ("operand type disagrees", module("    %0 = stablehlo.convert %arg0 : (tensor<3x2xf32>) -> tensor<2x3xf32>")),
        ("unknown op", module("    %0 = stablehlo.cosine %arg0 : tensor<2x3xf32>")),
        ("unsupported dtype", module("    %c = stablehlo.constant dense<1.0> : tensor<2xf64>\n    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>")),
        ("dense shape", module("    %c = stablehlo.constant dense<[[1.0, 2.0], [3.0]]> : tensor<2x2xf32>\n    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>")),
        ("int out of range", module("    %c = stablehlo.constant dense<4294967296> : tensor<i32>\n    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>")),
        ("bad transpose", module("    %0 = stablehlo.transpose %arg0, dims = [0, 0] : (tensor<2x3xf32>) -> tensor<2x3xf32>")),
        ("wrong comparator", module("    %i = stablehlo.iota dim = 1 : tensor<2x3xi32>\n    %n = stablehlo.constant dense<0xFF800000> : tensor<f32>\n    %z = stablehlo.constant dense<0> : tensor<i32>\n    %r:2 = stablehlo.reduce(%arg0 init: %n), (%i init: %z) across dimensions = [1] : (tensor<2x3xf32>, tensor<2x3xi32>, tensor<f32>, tensor<i32>) -> (tensor<2xf32>, tensor<2xi32>)\n      reducer(%a: tensor<f32>, %b: tensor<f32>) (%c: tensor<i32>, %d: tensor<i32>) {\n        %ge = stablehlo.compare GE, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>\n        %v = stablehlo.select %ge, %a, %b : tensor<i1>, tensor<f32>\n        %x = stablehlo.select %ge, %c, %d : tensor<i1>, tensor<i32>\n        stablehlo.return %v, %x : tensor<f32>, tensor<i32>\n      }\n    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>")),
        ("unterminated string", "module @m {\n  util.global private @w = #flow.parameter.named<\"model\"::\"w> : tensor<2xf32>\n}\n".to_string()),
        ("truncated", "module @m {\n  func.func @f(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n    %0 = stablehlo.add %arg0, %arg0 : tensor<2x".to_string()),
        ("missing return", "module @m {\n  func.func @f(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n  }\n}\n".to_string()),
        ("output storage of another type", "module @m {\n  func.func @f(%arg0: tensor<2xf32> {iree.abi.output = 0 : index}) -> tensor<3xf32> {\n    %0 = stablehlo.constant dense<0.0> : tensor<3xf32>\n    return %0 : tensor<3xf32>\n  }\n}\n".to_string()),
        ("output storage not a number", "module @m {\n  func.func @f(%arg0: tensor<2xf32> {iree.abi.output = \"x\"}) -> tensor<2xf32> {\n    return %arg0 : tensor<2xf32>\n  }\n}\n".to_string()),
        ("parameter slice length disagrees", "module @m {\n  util.global private @w = #flow.parameter.named<\"model\"::\"w\", {offset = 8 : i64, length = 12 : i64}> : tensor<2xf32>\n  func.func @f(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n    return %arg0 : tensor<2xf32>\n  }\n}\n".to_string()),
        ("parameter slice key unknown", "module @m {\n  util.global private @w = #flow.parameter.named<\"model\"::\"w\", {offset = 8 : i64, stride = 4 : i64}> : tensor<2xf32>\n  func.func @f(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n    return %arg0 : tensor<2xf32>\n  }\n}\n".to_string()),
        ("parameter slice offset negative", "module @m {\n  util.global private @w = #flow.parameter.named<\"model\"::\"w\", {offset = -8 : i64}> : tensor<2xf32>\n  func.func @f(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n    return %arg0 : tensor<2xf32>\n  }\n}\n".to_string()),
        ("linalg.generic other than kiln's dequantization", module("    %e = \"tensor.empty\"() : () -> tensor<2x3xf32>\n    %0 = \"linalg.generic\"(%arg0, %e) <{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = [#linalg.iterator_type<parallel>, #linalg.iterator_type<parallel>], operandSegmentSizes = array<i32: 1, 1>}> ({\n    ^bb0(%a: f32, %o: f32):\n      linalg.yield %a : f32\n    }) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>")),
        ("scatter that adds", module("    %i = stablehlo.constant dense<[[1], [0]]> : tensor<2x1xi32>\n    %0 = \"stablehlo.scatter\"(%arg0, %i, %arg0) ({\n    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n      %s = stablehlo.add %a, %b : tensor<f32>\n      stablehlo.return %s : tensor<f32>\n    }) {indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true} : (tensor<2x3xf32>, tensor<2x1xi32>, tensor<2x3xf32>) -> tensor<2x3xf32>")),
        ("scatter of columns", module("    %i = stablehlo.constant dense<[[1], [0]]> : tensor<2x1xi32>\n    %0 = \"stablehlo.scatter\"(%arg0, %i, %arg0) ({\n    ^bb0(%a: tensor<f32>, %b: tensor<f32>):\n      stablehlo.return %b : tensor<f32>\n    }) {indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0], inserted_window_dims = [1], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = true} : (tensor<2x3xf32>, tensor<2x1xi32>, tensor<2x3xf32>) -> tensor<2x3xf32>")),
        ("dynamic shape", "module @m {\n  func.func @f(%arg0: tensor<?xf32>) -> tensor<2xf32> {\n  }\n}\n".to_string()),
    ]
}

#[test]
fn malformed_modules_report_line_and_column() {
    let mut report = String::new();
    for (name, text) in cases() {
        let e = kiln::graph::Module::parse(&text).expect_err(name);
        assert!(e.line >= 1 && e.column >= 1);
        report.push_str(&format!("== {name}\n{e}\n\n"));
    }
    insta::with_settings!({snapshot_path => "../snapshots"}, {
        insta::assert_snapshot!("parser_errors", report);
    });
}

#[test]
fn garbage_never_panics() {
    let inputs = [
        "", "}", "module", "module @", "module @m {", "module @m { func.func", "\"", "%0 = ",
        "module @m { func.func @f() -> tensor<f32> { %0 = stablehlo.constant dense<[[[[[[[[[[ ",
        "module @m { util.global private @w = #flow.parameter.named<\"\\ZZ\"> : tensor<2xf32> }",
        "module @m { func.func @f(%a: tensor<99999999999999999999x2xf32>) -> tensor<f32> { } }",
        "module @m { func.func @f(%a: tensor<4294967296x4294967296x4294967296xf32>) -> tensor<f32> { } }",
        "module @m {\n func.func @f() -> tensor<3xf32> {\n %0 = stablehlo.constant dense<\"0x00\"> : tensor<3xf32>\n return %0 : tensor<3xf32>\n }\n}",
        "\u{1F600} module é",
        // A quoted token quoted in the error message is cut at 42 bytes:
        // here in the middle of a two-byte character (found by
        // scripts/dev/fuzz.sh, fuzz target parse_stablehlo).
        "\"ααααααααααααααααααααααααααααααααααααααα\"",
        "module @m { \"ααααααααααααααααααααααααααααααααααααααα",
    ];
    for i in inputs {
        let _ = kiln::graph::Module::parse(i);
    }
}

/// Random byte edits of a real printed module never panic the parser.
#[test]
fn mutations_never_panic() {
    use kiln::graph::{BlockCodes, DType, Graph, Module, TensorType};
    use kiln::stablehlo::PrintOptions;
    let mut g = Graph::new("f");
    let x = g.input(TensorType::new(DType::F32, &[2, 4]));
    let w = g.weight("w", DType::BF16, &[3, 4]).unwrap();
    let y = g.linear(x, w).unwrap();
    // A block-quantized matrix widened in one op (a linalg.generic).
    let qs = g
        .parameter("q.qs", TensorType::new(DType::I32, &[3, 1]))
        .unwrap();
    let qscale = g
        .parameter("q.scale", TensorType::new(DType::F32, &[3, 1]))
        .unwrap();
    let form = BlockCodes {
        low_bits: 8,
        high_bits: 0,
        group: 4,
        zero: 128,
        has_min: false,
    };
    let q = g.dequantize_blocks_op(form, &[qs, qscale]).unwrap();
    let yq = g.linear(x, q).unwrap();
    let y = g.add(y, yq).unwrap();
    let s = g.softmax(y, 1).unwrap();
    let r = g.reduce_sum(s, &[0]).unwrap();
    let a = g.argmax(s, 1).unwrap();
    let c = g.dense(DType::I32, &[2], vec![1.0, -2.0]).unwrap();
    let ids = g.add(a, c).unwrap();
    g.set_outputs(&[ids, r]);
    let mut m = Module::new("m");
    m.functions.push(g);
    let text = m.print(&PrintOptions::default(), None).unwrap();
    let bytes = text.as_bytes();
    let alphabet = b"%@#:=,()[]{}<>\"x0123456789-. \nabcfit";
    let mut state = 0x9E3779B97F4A7C15u64;
    let mut rnd = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    for _ in 0..3000 {
        let mut b = bytes.to_vec();
        for _ in 0..1 + rnd(3) {
            let i = rnd(b.len());
            match rnd(3) {
                0 => b[i] = alphabet[rnd(alphabet.len())],
                1 => {
                    b.remove(i);
                }
                _ => b.insert(i, alphabet[rnd(alphabet.len())]),
            }
        }
        if let Ok(t) = std::str::from_utf8(&b) {
            if let Ok(p) = kiln::stablehlo::ParsedModule::parse(t) {
                // Whatever parses must print and parse back.
                if let Ok(printed) = p.module.print(&p.print_options(), None) {
                    assert!(kiln::graph::Module::parse(&printed).is_ok(), "{printed}");
                }
            }
        }
    }
}

/// kiln reads back only the dequantization text it prints: the same
/// `linalg.generic` with one body op changed is an error, not another op
/// (the zero's constant is part of the form: another zero reads back as
/// that form).
#[test]
fn an_edited_dequantization_body_is_refused() {
    let m = crate::common::interp::all_ops_module();
    let text = m.print(&Default::default(), None).unwrap();
    assert!(kiln::graph::Module::parse(&text).is_ok());
    for (from, to) in [("arith.mulf", "arith.divf"), ("arith.remui", "arith.divui")] {
        assert!(text.contains(from), "{from}");
        let edited = text.replacen(from, to, 1);
        let e = kiln::graph::Module::parse(&edited).expect_err(to);
        assert!(
            e.to_string().contains("block dequantization")
                && e.to_string().contains("another body"),
            "{e}"
        );
    }
}
