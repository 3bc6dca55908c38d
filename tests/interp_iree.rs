//! The interpreter agrees with IREE's host build of the same module: a tiny
//! random transformer (weights inlined) and the every-op graph are compiled
//! with `iree-compile`, run with `iree-run-module`, and compared with
//! `kiln::interp` run on the parsed text.
//!
//! Needs the IREE tools, found (or skipped) by `common::toolchain`.

use crate::common;

use common::interp::{as_tensors, random_weights, tiny_model, Rng, Tiny};
use kiln::graph::{DType, Module};
use kiln::interp::{self, Tensor};
use kiln::stablehlo::{ConstantPolicy, PrintOptions};
use std::path::PathBuf;
use std::process::Command;

/// `iree-compile` and `iree-run-module` of the toolchain `tests/common`
/// finds, or `None` (a skip, or a failure when required).
fn tools() -> Option<(PathBuf, PathBuf)> {
    common::toolchain().map(|tc| (tc.compile, tc.run_module))
}

/// Compiles `text` for the host and runs `function` on `inputs` (IREE
/// `--input` spellings); returns stdout.
fn iree_run(text: &str, function: &str, inputs: &[String]) -> Option<String> {
    iree_run_with(text, function, inputs, None)
}

fn iree_run_with(
    text: &str,
    function: &str,
    inputs: &[String],
    params: Option<&std::path::Path>,
) -> Option<String> {
    let (compile, run) = tools()?;
    let dir = tempfile::tempdir().unwrap();
    let mlir = dir.path().join("m.mlir");
    let vmfb = dir.path().join("m.vmfb");
    std::fs::write(&mlir, text).unwrap();
    let out = Command::new(compile)
        .args([
            "--iree-input-type=stablehlo",
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            "--iree-llvmcpu-target-cpu=host",
            "-o",
        ])
        .arg(&vmfb)
        .arg(&mlir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "iree-compile failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cmd = Command::new(run);
    cmd.arg("--device=local-task")
        .arg(format!("--module={}", vmfb.display()))
        .arg(format!("--function={function}"));
    for i in inputs {
        cmd.arg(format!("--input={i}"));
    }
    if let Some(p) = params {
        cmd.arg(format!("--parameters=model={}", p.display()));
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "iree-run-module failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The values of result lines such as `8xi32=1 2 3` or `2x3xf32=[1 2 3][4 5 6]`.
fn result_values(stdout: &str) -> Vec<Vec<f64>> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(t, _)| {
            t.contains("xi") || t.contains("xf") || t.starts_with('i') || t.starts_with('f')
        })
        .map(|(_, v)| {
            v.replace(['[', ']'], " ")
                .split_whitespace()
                .map(|x| match x {
                    "NAN" | "NaN" | "nan" | "-nan" | "-NAN" => f64::NAN,
                    "INF" | "inf" => f64::INFINITY,
                    "-INF" | "-inf" => f64::NEG_INFINITY,
                    _ => x.parse::<f64>().unwrap_or(f64::NAN),
                })
                .collect()
        })
        .collect()
}

#[test]
fn tiny_model_matches_iree_host() {
    for (seq, stored) in [(8, DType::BF16), (33, DType::F32)] {
        let m = tiny_model(&Tiny::new(seq, stored));
        let w = random_weights(&m, 11);
        let opts = PrintOptions {
            constants: ConstantPolicy::InlineAlways,
        };
        let text = m.print(&opts, Some(&w)).unwrap();
        let mut rng = Rng::new(5);
        let ids: Vec<i32> = (0..seq)
            .map(|_| ((rng.next() + 1.0) * 31.9) as i32)
            .collect();
        let ids_text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
        let input = format!("1x{seq}xi32={}", ids_text.join(","));
        let Some(stdout) = iree_run(&text, "forward", &[input]) else {
            return;
        };
        let iree: Vec<i32> = result_values(&stdout)[0]
            .iter()
            .map(|&x| x as i32)
            .collect();
        // The interpreter runs the parsed text, with nothing else to go on.
        let parsed = Module::parse(&text).unwrap();
        let params: std::collections::HashMap<String, Tensor> = Default::default();
        let out = kiln::interp::run(
            parsed.function(None).unwrap(),
            &[Tensor::i32(&[1, seq], ids.clone())],
            &params,
        )
        .unwrap();
        eprintln!("SEQ {seq} {stored}: {iree:?}");
        assert_eq!(
            out[0].as_i32().unwrap(),
            iree.as_slice(),
            "SEQ {seq}, {stored}"
        );
        // And the original graph with external weights gives the same ids.
        let direct = interp::run(
            &m.functions[0],
            &[Tensor::i32(&[1, seq], ids)],
            &as_tensors(&m, &w),
        )
        .unwrap();
        assert_eq!(direct[0], out[0]);
    }
}

#[test]
fn every_op_graph_matches_iree_host() {
    let m = common::interp::all_ops_module();
    let w = random_weights(&m, 2);
    let opts = PrintOptions {
        constants: ConstantPolicy::InlineAlways,
    };
    let text = m.print(&opts, Some(&w)).unwrap();
    let x = [0.5f32, -1.25, 2.0, 0.0, 3.5, -0.75];
    let ids = [4i32, 0, 2, 1];
    let xs: Vec<String> = x.iter().map(|v| v.to_string()).collect();
    let is: Vec<String> = ids.iter().map(|v| v.to_string()).collect();
    let inputs = [
        format!("2x3xf32={}", xs.join(",")),
        format!("4xi32={}", is.join(",")),
    ];
    let Some(stdout) = iree_run(&text, "main", &inputs) else {
        return;
    };
    let iree = result_values(&stdout);
    let parsed = Module::parse(&text).unwrap();
    let params: std::collections::HashMap<String, Tensor> = Default::default();
    let out = kiln::interp::run(
        parsed.function(Some("main")).unwrap(),
        &[
            Tensor::f32(&[2, 3], x.to_vec()),
            Tensor::i32(&[4], ids.to_vec()),
        ],
        &params,
    )
    .unwrap();
    assert_eq!(out.len(), iree.len(), "{stdout}");
    for (k, (mine, theirs)) in out.iter().zip(&iree).enumerate() {
        let mine: Vec<f64> = match mine {
            Tensor::F32 { data, .. } => data.iter().map(|&v| v as f64).collect(),
            Tensor::I32 { data, .. } => data.iter().map(|&v| v as f64).collect(),
            Tensor::I1 { data, .. } => data.iter().map(|&v| v as u8 as f64).collect(),
        };
        assert_eq!(mine.len(), theirs.len(), "result {k}: {stdout}");
        for (a, b) in mine.iter().zip(theirs) {
            let ok = (a.is_nan() && b.is_nan())
                || a == b
                || (a - b).abs() <= 1e-4 * a.abs().max(b.abs()).max(1e-3);
            assert!(ok, "result {k}: interpreter {mine:?}, IREE {theirs:?}");
        }
    }
}

#[test]
fn external_parameters_match_iree_host() {
    let m = tiny_model(&Tiny::new(16, DType::BF16));
    let w = random_weights(&m, 23);
    let text = m.print(&PrintOptions::default(), None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("w.safetensors");
    common::interp::write_safetensors(&st, &m, &w);
    let ids: Vec<i32> = (0..16).map(|i| (i * 13 + 7) % 64).collect();
    let ids_text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let input = format!("1x16xi32={}", ids_text.join(","));
    let Some(stdout) = iree_run_with(&text, "forward", &[input], Some(&st)) else {
        return;
    };
    let iree: Vec<i32> = result_values(&stdout)[0]
        .iter()
        .map(|&x| x as i32)
        .collect();
    let parsed = Module::parse(&text).unwrap();
    let out = kiln::interp::run(
        parsed.function(None).unwrap(),
        &[Tensor::i32(&[1, 16], ids)],
        &as_tensors(&m, &w),
    )
    .unwrap();
    assert_eq!(out[0].as_i32().unwrap(), iree.as_slice());
}
