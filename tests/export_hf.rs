//! Export against HF transformers: every tiny checkpoint is exported,
//! compiled for the host by the pinned iree-compile, run by iree-run-module
//! at its largest SEQ (33: sliding windows of 16 masked; tests/interp_models.rs
//! runs the same emitted MLIR at SEQ 8 and 33 in kiln's interpreter), and
//! every position must match the transformers fixture (a mismatch where the
//! reference margin is below 1e-3 counts as a tie).

use crate::common;
use common::*;
use kiln::export::{export, ExportOptions};
use kiln::graph::DType;
use kiln::iree::{run_module, HostTensor, RunOptions, Target};
use kiln::models::Checkpoint;

#[test]
fn tiny_checkpoints_match_transformers_on_iree_host() {
    let Some(tc) = toolchain() else { return };
    let failures = fixture_export_mismatches_at(
        Seqs::Largest,
        kiln::DecoderConfig::MAX_TENSOR_BYTES,
        |r| {
            let vmfb = r.mlir.with_file_name("m.vmfb");
            common::compiled::compile(&tc, &r.mlir, &Target::Host, &vmfb, &[]).unwrap();
            let opts = RunOptions::default()
                .function(r.manifest.function.clone())
                .params(vec![("model".into(), r.irpa.clone())]);
            (vmfb, opts)
        },
        |(vmfb, opts), input| run_ids(&tc, vmfb, opts, input),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn safetensors_and_irpa_give_the_same_result() {
    let Some(tc) = toolchain() else { return };
    let name = "tiny-llama-tied-gqa";
    let exp = hf_expected(name);
    let rs = &exp.seqs[0];
    let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
    let dir = tmpdir();
    let r = export(
        &ckpt,
        &ExportOptions::new(rs.seq, dir.path()).weights(DType::F32),
    )
    .unwrap();
    let vmfb = dir.path().join("m.vmfb");
    common::compiled::compile(&tc, &r.mlir, &Target::Host, &vmfb, &[]).unwrap();
    for params in [&r.irpa, &r.safetensors] {
        let opts = RunOptions::default()
            .function(r.manifest.function.clone())
            .params(vec![("model".into(), params.clone())]);
        let out = run_module(
            &tc,
            &vmfb,
            &opts,
            &[HostTensor::i32(vec![1, rs.seq], rs.cases[0].input.clone()).unwrap()],
        )
        .unwrap();
        assert_eq!(
            out[0].as_i32().unwrap(),
            &rs.cases[0].argmax[..],
            "params {}",
            params.display()
        );
    }
}
