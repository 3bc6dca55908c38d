//! Vulkan end to end: a tiny checkpoint exported with bf16 weights (one
//! archive for every target) compiles for kiln's default Vulkan target
//! (the Android baseline profile) and for the Mali `valhall` and Qualcomm
//! `adreno` targets; the default module run on lavapipe
//! (`iree-run-module --device=vulkan`, Mesa's CPU Vulkan driver) gives the
//! transformers fixture's ids and exactly the host module's ids, and an
//! RMSNorm over SmolLM2's width gives the host's values.
//!
//! valhall and adreno modules are compiled, not run: IREE bakes their
//! subgroup sizes (16, 64) into workgroup reductions, and lavapipe here
//! runs 8-wide subgroups, so a sum over 576 comes out wrong on lavapipe
//! (it would not on those GPUs). The real SmolLM2 on Vulkan is in
//! `tests/smollm2.rs`.

mod common;
use common::*;
use kiln::export::{export, ExportOptions, ExportReport};
use kiln::generate::generate;
use kiln::graph::{DType, Graph, Module, TensorType};
use kiln::iree::compile::compile;
use kiln::iree::flags::{Device, Target};
use kiln::iree::run::{run_module, HostTensor, RunOptions};
use kiln::iree::session::Session;
use kiln::iree::Toolchain;
use kiln::models::Checkpoint;
use kiln::stablehlo::{print_module, PrintOptions};
use std::path::{Path, PathBuf};

const FIXTURE: &str = "tiny-llama-bf16";

fn export_bf16(dir: &Path, seq: usize) -> ExportReport {
    let ckpt = Checkpoint::open(fixture(&format!("hf/{FIXTURE}"))).unwrap();
    export(
        &ckpt,
        &ExportOptions {
            seq,
            out_dir: dir.into(),
            weights: DType::BF16,
            ..Default::default()
        },
    )
    .unwrap()
}

fn build(tc: &Toolchain, r: &ExportReport, dir: &Path, target: &Target, name: &str) -> PathBuf {
    let vmfb = dir.join(format!("{name}.vmfb"));
    compile(tc, &r.mlir, target, &vmfb, &[])
        .unwrap_or_else(|e| panic!("compiling for {target} failed: {e}"));
    vmfb
}

fn ids(tc: &Toolchain, r: &ExportReport, vmfb: &Path, device: Device, input: &[i32]) -> Vec<i32> {
    let opts = RunOptions {
        device,
        function: r.manifest.function.clone(),
        params: vec![("model".into(), r.irpa.clone())],
        ..Default::default()
    };
    let x = HostTensor::i32(vec![1, input.len()], input.to_vec()).unwrap();
    let out = run_module(tc, vmfb, &opts, &[x]).unwrap();
    out[0].as_i32().unwrap().to_vec()
}

#[test]
fn bf16_export_compiles_for_three_vulkan_targets_and_runs_on_lavapipe() {
    let Some(tc) = toolchain() else { return };
    let exp = hf_expected(FIXTURE);
    assert_eq!(exp.weights_dtype, "BF16");
    let rs = &exp.seqs[0];
    let dir = tmpdir();
    let r = export_bf16(dir.path(), rs.seq);
    // The exported graph declares bf16 weights (the CPU backends' fastest
    // form); before a Vulkan compile kiln re-declares them over the same
    // archive bytes as i32 pairs of bf16 bits: no 16-bit type reaches IREE.
    let text = std::fs::read_to_string(&r.mlir).unwrap();
    assert!(text.contains("model.embed_tokens.weight\"> : tensor<96x48xbf16>"));
    let parsed = kiln::stablehlo::parse_module_full(&text).unwrap();
    let lowered = kiln::graph::lower::lower_for_vulkan(&parsed.module).unwrap();
    let text = kiln::stablehlo::print_module(&lowered, &parsed.print_options(), None).unwrap();
    assert!(
        text.contains("model.embed_tokens.weight\"> : tensor<96x24xi32>")
            && !text.contains("xi16>")
            && !text.contains("xbf16>"),
        "bf16 weights not lowered to i32 pairs"
    );

    let host = build(&tc, &r, dir.path(), &Target::Host, "host");
    let default = build(
        &tc,
        &r,
        dir.path(),
        &Target::parse("vulkan").unwrap(),
        "vulkan",
    );
    for name in ["valhall", "adreno"] {
        build(&tc, &r, dir.path(), &Target::vulkan(name).unwrap(), name);
    }
    if !lavapipe_present() {
        return;
    }
    let c = &rs.cases[0];
    let want_host = ids(&tc, &r, &host, Device::LocalTask, &c.input);
    let got = ids(&tc, &r, &default, Device::Vulkan, &c.input);
    assert_eq!(
        got, want_host,
        "Vulkan on lavapipe differs from the host module"
    );
    let bad = mismatches(&got, &c.argmax, &c.margin, 0..rs.seq);
    assert!(bad.is_empty(), "{FIXTURE}: {}", bad.join("; "));

    // `kiln generate`'s loaded session on Vulkan (results read back through
    // a staging buffer there) continues a prompt as on the host.
    let continue_on = |vmfb: &Path, device: Device| {
        let mut s = Session::start(
            &tc,
            vmfb,
            &r.irpa,
            "model",
            &r.manifest.function,
            device,
            rs.seq,
            None,
        )
        .unwrap();
        generate(&mut s, &c.input[..3], 4, &[], |_| {}).unwrap()
    };
    assert_eq!(
        continue_on(&default, Device::Vulkan),
        continue_on(&host, Device::LocalTask)
    );
}

/// RMSNorm of `[64, 576]` (a workgroup reduction per row, SmolLM2's
/// width): the default Vulkan module on lavapipe gives the host's values.
#[test]
fn rms_norm_at_smollm2_width_matches_the_host_on_lavapipe() {
    let Some(tc) = toolchain() else { return };
    let (rows, width) = (64, 576);
    let mut g = Graph::new("norm");
    let x = g.input(TensorType::new(DType::F32, &[rows, width]));
    let w = g.input(TensorType::new(DType::F32, &[width]));
    let y = g.rms_norm(x, w, 1e-5).unwrap();
    g.set_outputs(&[y]);
    let mut m = Module::new("norm");
    m.functions.push(g);
    let dir = tmpdir();
    let mlir = dir.path().join("norm.mlir");
    std::fs::write(
        &mlir,
        print_module(&m, &PrintOptions::default(), None).unwrap(),
    )
    .unwrap();
    let host = dir.path().join("norm-host.vmfb");
    let vk = dir.path().join("norm-vulkan.vmfb");
    compile(&tc, &mlir, &Target::Host, &host, &[]).unwrap();
    compile(&tc, &mlir, &Target::parse("vulkan").unwrap(), &vk, &[]).unwrap();
    if !lavapipe_present() {
        return;
    }
    let xs: Vec<f32> = (0..rows * width)
        .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 97.0)
        .collect();
    let ws: Vec<f32> = (0..width).map(|i| 0.5 + (i % 13) as f32 / 10.0).collect();
    let run = |vmfb: &Path, device: Device| {
        let opts = RunOptions {
            device,
            function: "norm".into(),
            exact_outputs: Some(1),
            ..Default::default()
        };
        let inputs = [
            HostTensor::f32(vec![rows, width], xs.clone()).unwrap(),
            HostTensor::f32(vec![width], ws.clone()).unwrap(),
        ];
        run_module(&tc, vmfb, &opts, &inputs).unwrap()[0]
            .as_f32()
            .unwrap()
            .to_vec()
    };
    let want = run(&host, Device::LocalTask);
    let got = run(&vk, Device::Vulkan);
    let worst = want
        .iter()
        .zip(&got)
        .map(|(a, b)| (a - b).abs() / a.abs().max(1.0))
        .fold(0f32, f32::max);
    assert!(
        worst < 1e-4,
        "Vulkan RMSNorm differs from the host by {worst}"
    );
}
