//! Every exported model verified without IREE: kiln's parser reads the
//! emitted MLIR back (print(parse(text)) == text, byte for byte) and kiln's
//! interpreter, with the weights read from the written .irpa, reproduces
//! the transformers fixtures (tiny checkpoints at SEQ 8 and 33) under the
//! tie rule. The real SmolLM2 is checked the same way in tests/smollm2.rs.

mod common;
use common::*;
use kiln::export::{export, ExportOptions};
use kiln::graph::DType;
use kiln::models::Checkpoint;
use kiln::stablehlo::{parse_module_full, print_module};

fn roundtrip(mlir: &std::path::Path) {
    let text = std::fs::read_to_string(mlir).unwrap();
    let parsed = parse_module_full(&text).unwrap();
    let again = print_module(&parsed.module, &parsed.print_options(), None).unwrap();
    assert!(
        again == text,
        "print(parse(text)) differs for {}",
        mlir.display()
    );
}

#[test]
fn tiny_checkpoints_match_transformers_in_the_interpreter() {
    let mut failures = Vec::new();
    for name in HF_FIXTURES {
        let exp = hf_expected(name);
        let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
        let weights = if exp.weights_dtype == "BF16" {
            DType::BF16
        } else {
            DType::F32
        };
        for rs in &exp.seqs {
            let dir = tmpdir();
            let r = export(
                &ckpt,
                &ExportOptions {
                    seq: rs.seq,
                    out_dir: dir.path().into(),
                    weights,
                    ..Default::default()
                },
            )
            .unwrap();
            roundtrip(&r.mlir);
            for (ci, c) in rs.cases.iter().enumerate() {
                let got = kiln::interp::predict_file(&r.mlir, &r.irpa, None, &c.input).unwrap();
                let bad = mismatches(&got, &c.argmax, &c.margin, 0..rs.seq);
                if !bad.is_empty() {
                    failures.push(format!(
                        "{name} seq {} case {ci}: {}",
                        rs.seq,
                        bad.join("; ")
                    ));
                }
            }
        }
    }
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
        &ExportOptions {
            seq: rs.seq,
            out_dir: dir.path().into(),
            weights: DType::F32,
            ..Default::default()
        },
    )
    .unwrap();
    let a = kiln::interp::predict_file(&r.mlir, &r.irpa, None, &rs.cases[0].input).unwrap();
    let b = kiln::interp::predict_file(&r.mlir, &r.safetensors, None, &rs.cases[0].input).unwrap();
    assert_eq!(a, b);
    assert_eq!(a, rs.cases[0].argmax);
}
