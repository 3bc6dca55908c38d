//! Every exported model verified without IREE: kiln's parser reads the
//! emitted MLIR back (print(parse(text)) == text, byte for byte) and kiln's
//! interpreter, with the weights read from the written .irpa, reproduces
//! the transformers fixtures (tiny checkpoints at SEQ 8 and 33) under the
//! tie rule. The real SmolLM2 is checked the same way in tests/smollm2.rs.

use crate::common;
use common::*;
use kiln::export::{export, ExportOptions};
use kiln::graph::DType;
use kiln::models::Checkpoint;

#[test]
fn tiny_checkpoints_match_transformers_in_the_interpreter() {
    let failures = fixture_export_mismatches(
        |r| {
            roundtrip(&r.mlir);
            (r.mlir.clone(), r.irpa.clone())
        },
        |(mlir, irpa), input| kiln::interp::predict_file(mlir, irpa, None, input).unwrap(),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every fixture with a 4096-byte tensor bound: its embedding, LM head and
/// every weight matrix are used in row chunks over slices of one archive
/// entry (a few rows each), and the interpreter still gives transformers'
/// ids (the merged argmax keeps the lowest index among equal maxima,
/// soft-capping included; a chunked product's columns are joined).
#[test]
fn tiny_checkpoints_in_row_chunks_match_transformers_in_the_interpreter() {
    let failures = fixture_export_mismatches_bounded(
        4096,
        |r| {
            roundtrip(&r.mlir);
            let text = std::fs::read_to_string(&r.mlir).unwrap();
            assert!(
                text.contains("{offset = 0 : i64, length = "),
                "{}: no table in parts",
                r.mlir.display()
            );
            (r.mlir.clone(), r.irpa.clone())
        },
        |(mlir, irpa), input| kiln::interp::predict_file(mlir, irpa, None, input).unwrap(),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn safetensors_and_irpa_agree_in_the_interpreter() {
    let exp = hf_expected("tiny-llama-untied-mha");
    let rs = &exp.seqs[1];
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-untied-mha")).unwrap();
    let dir = tmpdir();
    let r = export(
        &ckpt,
        &ExportOptions::new(rs.seq, dir.path()).weights(DType::F32),
    )
    .unwrap();
    let a = kiln::interp::predict_file(&r.mlir, &r.irpa, None, &rs.cases[0].input).unwrap();
    let b = kiln::interp::predict_file(&r.mlir, &r.safetensors, None, &rs.cases[0].input).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, rs.cases[0].argmax);
}
