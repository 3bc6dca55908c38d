//! Vulkan end to end: a tiny checkpoint exported with bf16 weights (one
//! archive for every target) compiles for the Mali `valhall` and the
//! `adreno` Vulkan targets, and the adreno module run on lavapipe
//! (`iree-run-module --device=vulkan`, Mesa's CPU Vulkan driver) gives the
//! transformers fixture's ids and exactly the host module's ids.
//!
//! The valhall module is compiled but its ids are checked only by the
//! ignored test below: IREE bakes valhall's subgroup size (16) into its
//! subgroup reductions, and lavapipe on this x86 host runs subgroups of 8,
//! so a valhall build computes wrong sums there (not on a Mali GPU).

mod common;
use common::*;
use kiln::export::{export, ExportOptions, ExportReport};
use kiln::graph::DType;
use kiln::iree::compile::compile;
use kiln::iree::flags::{Device, Target};
use kiln::iree::run::{run_module, HostTensor, RunOptions};
use kiln::iree::Toolchain;
use kiln::models::Checkpoint;
use std::path::{Path, PathBuf};

const FIXTURE: &str = "tiny-llama-bf16";

/// True when a lavapipe ICD is installed (apt package mesa-vulkan-drivers).
fn lavapipe_present() -> bool {
    let dirs = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"];
    let found = dirs.iter().any(|d| {
        std::fs::read_dir(d).is_ok_and(|r| {
            r.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd"))
        })
    });
    if !found {
        if iree_required() {
            panic!("lavapipe required (CI=true): apt-get install mesa-vulkan-drivers");
        }
        eprintln!("SKIP: no lavapipe Vulkan driver (apt-get install mesa-vulkan-drivers)");
    }
    found
}

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
fn bf16_export_compiles_for_valhall_and_adreno_and_runs_on_lavapipe() {
    let Some(tc) = toolchain() else { return };
    let exp = hf_expected(FIXTURE);
    assert_eq!(exp.weights_dtype, "BF16");
    let rs = &exp.seqs[0];
    let dir = tmpdir();
    let r = export_bf16(dir.path(), rs.seq);
    // The archive keeps bf16 bytes; the graph loads them as i16 bits.
    let text = std::fs::read_to_string(&r.mlir).unwrap();
    assert!(
        text.contains("xi16>") && !text.contains("xbf16>"),
        "bf16 tensors left in the graph"
    );

    let host = build(&tc, &r, dir.path(), &Target::Host, "host");
    let _valhall = build(
        &tc,
        &r,
        dir.path(),
        &Target::vulkan("valhall").unwrap(),
        "valhall",
    );
    let adreno = build(
        &tc,
        &r,
        dir.path(),
        &Target::vulkan("adreno").unwrap(),
        "adreno",
    );
    if !lavapipe_present() {
        return;
    }
    let c = &rs.cases[0];
    let want_host = ids(&tc, &r, &host, Device::LocalTask, &c.input);
    let got = ids(&tc, &r, &adreno, Device::Vulkan, &c.input);
    assert_eq!(
        got, want_host,
        "adreno on lavapipe differs from the host module"
    );
    let bad = mismatches(&got, &c.argmax, &c.margin, 0..rs.seq);
    assert!(bad.is_empty(), "{FIXTURE}: {}", bad.join("; "));
}

#[test]
#[ignore = "lavapipe runs 8-wide subgroups here; IREE's valhall kernels assume 16"]
fn valhall_module_on_lavapipe_matches_the_host() {
    let Some(tc) = toolchain() else { return };
    if !lavapipe_present() {
        return;
    }
    let exp = hf_expected(FIXTURE);
    let rs = &exp.seqs[0];
    let dir = tmpdir();
    let r = export_bf16(dir.path(), rs.seq);
    let host = build(&tc, &r, dir.path(), &Target::Host, "host");
    let valhall = build(
        &tc,
        &r,
        dir.path(),
        &Target::vulkan("valhall").unwrap(),
        "valhall",
    );
    let c = &rs.cases[0];
    let want = ids(&tc, &r, &host, Device::LocalTask, &c.input);
    let got = ids(&tc, &r, &valhall, Device::Vulkan, &c.input);
    assert_eq!(
        got, want,
        "valhall on lavapipe differs from the host module"
    );
}
