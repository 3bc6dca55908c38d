//! `kiln interp MODULE.mlir --params FILE.safetensors` reads externalized
//! weights through the params codecs and prints the same ids as the
//! interpreter run on in-memory weights.

use crate::common;

use common::interp::{as_tensors, random_weights, tiny_model, write_safetensors, Tiny};
use kiln::graph::DType;
use kiln::interp::Tensor;
use kiln::stablehlo::PrintOptions;

#[test]
fn interp_reads_a_safetensors_file() {
    let m = tiny_model(&Tiny::new(8, DType::BF16));
    let w = random_weights(&m, 11);
    let dir = tempfile::tempdir().unwrap();
    let mlir = dir.path().join("tiny.mlir");
    let st = dir.path().join("tiny.safetensors");
    std::fs::write(&mlir, m.print(&PrintOptions::default(), None).unwrap()).unwrap();
    write_safetensors(&st, &m, &w);
    let out = common::kiln_command()
        .arg("interp")
        .arg(&mlir)
        .arg("--params")
        .arg(&st)
        .args(["--tokens", "5,17,3"])
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
        &as_tensors(&m, &w),
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
}
