//! `kiln interp MODULE.mlir --tokens …` prints the predicted ids on one line.

use crate::common;

use common::interp::{random_weights, tiny_model, Tiny};
use kiln::graph::DType;
use kiln::interp::Tensor;
use kiln::stablehlo::{ConstantPolicy, PrintOptions};

#[test]
fn interp_prints_the_predicted_ids() {
    let m = tiny_model(&Tiny::new(8, DType::BF16));
    let w = random_weights(&m, 11);
    let text = m
        .print(
            &PrintOptions {
                constants: ConstantPolicy::InlineAlways,
            },
            Some(&w),
        )
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.mlir");
    std::fs::write(&path, &text).unwrap();
    let out = common::kiln_command()
        .arg("interp")
        .arg(&path)
        .args(["--tokens", "5,17,3", "--seq", "8", "--function", "forward"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = kiln::interp::run(
        m.function(None).unwrap(),
        &[Tensor::i32(&[1, 8], vec![5, 17, 3, 0, 0, 0, 0, 0])],
        &{ common::interp::as_tensors(&m, &w) },
    )
    .unwrap();
    let ids: Vec<String> = want[0]
        .as_i32()
        .unwrap()
        .iter()
        .map(|i| i.to_string())
        .collect();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", ids.join(" "))
    );

    // A wrong --seq and too many tokens are usage errors (exit 2).
    for args in [
        vec!["--tokens", "1", "--seq", "9"],
        vec!["--tokens", "1,2,3,4,5,6,7,8,9"],
    ] {
        let out = common::kiln_command()
            .arg("interp")
            .arg(&path)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    // A parse error names the file, line and column.
    let bad = dir.path().join("bad.mlir");
    std::fs::write(
        &bad,
        "module @m {\n  func.func @f(%a: tensor<2xf64>) -> tensor<2xf32> {\n",
    )
    .unwrap();
    let out = common::kiln_command()
        .arg("interp")
        .arg(&bad)
        .args(["--tokens", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.mlir:2:"), "{err}");
}

/// A module that declares one `util.global` twice is refused, as
/// `iree-compile` refuses it ("redefinition of symbol"): exit 2, the
/// second declaration's line named.
#[test]
fn interp_refuses_a_duplicated_global() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.mlir");
    let global =
        "  util.global private @w = #flow.parameter.named<\"model\"::\"w\"> : tensor<2xf32>\n";
    std::fs::write(
        &path,
        format!(
            "module @m {{\n{global}{global}  func.func @f(%a: tensor<1x2xi32>) -> tensor<1x2xi32> {{\n    return %a : tensor<1x2xi32>\n  }}\n}}\n"
        ),
    )
    .unwrap();
    let out = common::kiln_command()
        .arg("interp")
        .arg(&path)
        .args(["--tokens", "1", "--seq", "2", "--function", "f"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("dup.mlir:3:"), "{err}");
    assert!(
        err.contains("expected distinct global names, found a second @w"),
        "{err}"
    );
}
