//! One SmolLM2-135M-shaped forward at SEQ 64 through kiln's interpreter,
//! versus the same module compiled for the host by IREE
//! (`iree-benchmark-module`), on the same machine. Weights are random bf16
//! values of SmolLM2's shapes (timing does not depend on their values).
//!
//! `cargo bench --bench interp` (set `KILN_IREE_VENV` to use another IREE).

#[path = "common/smollm2.rs"]
mod smollm2;

use kiln::interp::{run, Tensor};
use kiln::stablehlo::PrintOptions;
use smollm2::{smollm2_shaped, weights, write_safetensors, SEQ, VOCAB};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

fn iree_tool(rel: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("KILN_IREE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| kiln::cache_dir().join("iree-3.13.0"));
    let p = venv.join("lib/python3.11/site-packages/iree").join(rel);
    p.exists().then_some(p)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let m = smollm2_shaped();
    let ws = weights(&m);
    let params: HashMap<String, Tensor> = ws
        .iter()
        .map(|(k, s, v)| {
            let data = v
                .iter()
                .map(|&b| half::bf16::from_bits(b).to_f32())
                .collect();
            (k.clone(), Tensor::f32(s, data))
        })
        .collect();
    let ids: Vec<i32> = (0..SEQ as i32).map(|i| (i * 7919) % VOCAB as i32).collect();
    let input = Tensor::i32(&[1, SEQ], ids.clone());
    let t0 = Instant::now();
    let out = run(&m.functions[0], &[input], &params).unwrap();
    let interp_s = t0.elapsed().as_secs_f64();
    println!("kiln interp: SmolLM2-shaped forward, SEQ {SEQ}: {interp_s:.3} s");
    drop(params);
    if std::env::var_os("KILN_BENCH_NO_IREE").is_some() {
        return;
    }

    let (Some(compile), Some(bench)) = (
        iree_tool("compiler/_mlir_libs/iree-compile"),
        iree_tool("_runtime_libs/iree-benchmark-module"),
    ) else {
        println!("IREE tools not found; skipping the IREE comparison");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mlir = dir.path().join("smollm2.mlir");
    let vmfb = dir.path().join("smollm2.vmfb");
    let st = dir.path().join("smollm2.safetensors");
    std::fs::write(&mlir, m.print(&PrintOptions::default(), None).unwrap()).unwrap();
    write_safetensors(&st, &ws);
    let c = Command::new(compile)
        .args([
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            "--iree-llvmcpu-target-cpu=host",
            "-o",
        ])
        .arg(&vmfb)
        .arg(&mlir)
        .status()
        .unwrap();
    assert!(c.success(), "iree-compile failed");
    let ids_text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let out_b = Command::new(bench)
        .arg("--device=local-task")
        .arg(format!("--module={}", vmfb.display()))
        .arg(format!("--parameters=model={}", st.display()))
        .arg("--function=forward")
        .arg(format!("--input=1x{SEQ}xi32={}", ids_text.join(",")))
        .arg("--benchmark_repetitions=1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out_b.stdout);
    println!("{text}");
    // Google-benchmark lines: name, wall time, unit, CPU time, unit, iterations.
    let iree_s = text.lines().find(|l| l.starts_with("BM_")).and_then(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let v: f64 = f.get(1)?.parse().ok()?;
        let scale = match *f.get(2)? {
            "ns" => 1e-9,
            "us" => 1e-6,
            "ms" => 1e-3,
            _ => 1.0,
        };
        Some(v * scale)
    });
    if let Some(s) = iree_s {
        println!(
            "IREE host: {s:.3} s; interpreter / IREE = {:.2}x",
            interp_s / s
        );
    }
    let _ = out;
}
