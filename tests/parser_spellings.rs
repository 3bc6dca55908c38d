//! The parser accepts the equivalent spellings StableHLO's and IREE's own
//! tests use (generic forms, pretty reduce/slice, `func.return`,
//! `#stream.parameter.named`, hex and splat `dense<…>`), and what it builds
//! computes what the text says.

use kiln::graph::Module;
use kiln::interp::Tensor;
use kiln::stablehlo::{ParsedModule, PrintOptions};
use std::collections::HashMap;

const GENERIC: &str = r#"
// A comment line.
module @spellings attributes {mhlo.num_partitions = 1 : i32, kiln.note = "a, b {c}"} {
  util.global private @w = #stream.parameter.named<"model"::"w"> : tensor<4x3xf32>
  func.func public @main(%arg0: tensor<2x3xf32> {some.attr}, %ids: tensor<4xi32>) -> (tensor<2x4xf32>, tensor<2xf32>, tensor<2x2xf32>, tensor<2xi32>, tensor<4x3xf32>) {
    %c = stablehlo.constant dense<[1, 2]> : tensor<2xi32>
    %h = stablehlo.constant dense<"0x0000803F00000040"> : tensor<2xf32>
    %s = stablehlo.constant dense<"0x0000803F"> : tensor<3xf32>
    %z = "stablehlo.constant"() {value = dense<0.000000e+00> : tensor<f32>} : () -> tensor<f32>
    %a = "stablehlo.add"(%arg0, %arg0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %w = util.global.load @w : tensor<4x3xf32>
    %d = "stablehlo.dot_general"(%a, %w) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]>, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x4xf32>
    %r = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [1] : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %sl = stablehlo.slice %a [0:2, 0:3:2] : (tensor<2x3xf32>) -> tensor<2x2xf32>
    %t = "stablehlo.transpose"(%a) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %b = "stablehlo.broadcast_in_dim"(%r) {broadcast_dimensions = dense<0> : tensor<1xi64>} : (tensor<2xf32>) -> tensor<2x3xf32>
    %cmp = "stablehlo.compare"(%a, %b) {comparison_direction = #stablehlo<comparison_direction GT>, compare_type = #stablehlo<comparison_type FLOAT>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
    %sel = "stablehlo.select"(%cmp, %a, %b) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %red = "stablehlo.reduce"(%sel, %z) ({
    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
      %m = "stablehlo.maximum"(%y, %x) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%m) : (tensor<f32>) -> ()
    }) {dimensions = dense<1> : tensor<1xi64>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>
    %io = "stablehlo.iota"() {iota_dimension = 1 : i64} : () -> tensor<2x3xi32>
    %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %am:2 = stablehlo.reduce(%a init: %ninf), (%io init: %zero) across dimensions = [1] : (tensor<2x3xf32>, tensor<2x3xi32>, tensor<f32>, tensor<i32>) -> (tensor<2xf32>, tensor<2xi32>)
      reducer(%p: tensor<f32>, %q: tensor<f32>) (%pi: tensor<i32>, %qi: tensor<i32>) {
        %gt = stablehlo.compare GT, %p, %q, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %eq = stablehlo.compare EQ, %p, %q : (tensor<f32>, tensor<f32>) -> tensor<i1>
        %lt = stablehlo.compare LT, %pi, %qi, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        %tie = stablehlo.and %eq, %lt : tensor<i1>
        %pick = stablehlo.or %gt, %tie : tensor<i1>
        %v = stablehlo.select %pick, %p, %q : tensor<i1>, tensor<f32>
        %i = stablehlo.select %pick, %pi, %qi : tensor<i1>, tensor<i32>
        stablehlo.return %v, %i : tensor<f32>, tensor<i32>
      }
    %cat = "stablehlo.concatenate"(%a, %a) {dimension = 0 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %g = "stablehlo.gather"(%cat, %ids) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 3>}> : (tensor<4x3xf32>, tensor<4xi32>) -> tensor<4x3xf32>
    func.return %d, %red, %sl, %am#1, %g : tensor<2x4xf32>, tensor<2xf32>, tensor<2x2xf32>, tensor<2xi32>, tensor<4x3xf32>
  }
}
"#;

#[test]
fn generic_and_pretty_spellings_parse_and_compute() {
    let parsed = ParsedModule::parse(GENERIC).unwrap_or_else(|e| panic!("{e}"));
    let m = &parsed.module;
    assert_eq!(m.name, "spellings");
    assert_eq!(
        m.attributes,
        vec![
            ("mhlo.num_partitions".to_string(), "1 : i32".to_string()),
            ("kiln.note".to_string(), "\"a, b {c}\"".to_string())
        ]
    );
    // Canonical text parses back to itself.
    let text = m.print(&parsed.print_options(), None).unwrap();
    let again = Module::parse(&text)
        .unwrap()
        .print(&PrintOptions::default(), None)
        .unwrap();
    assert_eq!(text, again);
    assert!(text.contains("#flow.parameter.named<\"model\"::\"w\">"));

    let x = Tensor::f32(&[2, 3], vec![1.0, -2.0, 3.0, 0.5, 0.5, -1.0]);
    let ids = Tensor::i32(&[4], vec![3, 0, 9, 1]);
    let mut p = HashMap::new();
    p.insert(
        "w".to_string(),
        Tensor::f32(
            &[4, 3],
            vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0],
        ),
    );
    let out = kiln::interp::run(m.function(Some("main")).unwrap(), &[x, ids], &p).unwrap();
    // a = 2x: [[2, -4, 6], [1, 1, -2]]
    assert_eq!(
        out[0],
        Tensor::f32(&[2, 4], vec![2.0, -4.0, 6.0, 4.0, 1.0, 1.0, -2.0, 0.0])
    );
    // r = row sums [4, 0]; sel = a where a > r else r: [[4, 4, 6], [1, 1, 0]]; max.
    assert_eq!(out[1], Tensor::f32(&[2], vec![6.0, 1.0]));
    assert_eq!(out[2], Tensor::f32(&[2, 2], vec![2.0, 6.0, 1.0, -2.0]));
    // argmax of a: row 0 -> 2; row 1 tie of 1 and 1 -> 0.
    assert_eq!(out[3], Tensor::i32(&[2], vec![2, 0]));
    // rows 3, 0, clamp(9) = 3, 1 of cat = [a; a].
    assert_eq!(
        out[4].as_f32().unwrap()[..6],
        [1.0, 1.0, -2.0, 2.0, -4.0, 6.0]
    );
}

#[test]
fn bare_functions_and_constant_globals() {
    let text = r#"
  util.global private @k = dense<[1.5, 2.5]> : tensor<2xf32>
  func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
    %k = util.global.load @k : tensor<2xf32>
    %y = stablehlo.multiply %x, %k : tensor<2xf32>
    %n = stablehlo.negate %y : (tensor<2xf32>) -> tensor<2xf32>
    return %n : tensor<2xf32>
  }
"#;
    let m = Module::parse(text).unwrap();
    let p: HashMap<String, Tensor> = HashMap::new();
    let out = kiln::interp::run(
        m.function(None).unwrap(),
        &[Tensor::f32(&[2], vec![2.0, -2.0])],
        &p,
    )
    .unwrap();
    assert_eq!(out[0], Tensor::f32(&[2], vec![-3.0, 5.0]));
}
