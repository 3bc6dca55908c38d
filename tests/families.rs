//! The model families beside Llama off the host: one tiny checkpoint per
//! family (Qwen2, Phi-3, Gemma, Gemma 2) exported with the default bf16
//! weights (what ships to a phone), compiled for the host, arm64 and kiln's
//! default Vulkan target; the arm64 module run under qemu and the Vulkan
//! module on lavapipe give exactly the host module's ids. (The f32 exports
//! equal transformers' ids at every position: `tests/export_hf.rs`.) And
//! GGUF files written from HF fixtures as llama.cpp lays out each
//! architecture (Llama 3 with `rope_freqs`, Qwen2, Phi-3, Phi-3 LongRoPE,
//! Gemma, Gemma 2) export the same graph and weights as the HF folder they
//! were written from and give transformers' ids on the host (at the
//! largest SEQ; both SEQs' MLIR equal the HF folder's); files
//! llama.cpp would read otherwise are errors.
//! Every fixture on the host (largest SEQ) and in the interpreter (both
//! SEQs) is in `tests/export_hf.rs` / `tests/interp_models.rs`.

use crate::common;
use common::*;
use kiln::export::{export, ExportOptions, ExportReport};
use kiln::graph::DType;
use kiln::iree::{Device, Emulation, Target};
use kiln::models::Checkpoint;
use std::path::Path;

/// One fixture per family added beside Llama/Mistral, with the index of the
/// SEQ to build (Gemma 2 at SEQ 33, where its local layer's window of 16
/// is narrower than SEQ and masked).
const ONE_PER_FAMILY: [(&str, usize); 6] = [
    ("tiny-qwen2", 0),
    ("tiny-qwen3", 0),
    ("tiny-phi3", 0),
    ("tiny-gemma", 0),
    ("tiny-gemma2", 1),
    ("tiny-gemma3", 1),
];

fn export_f32(ckpt: &Checkpoint, dir: &Path, seq: usize) -> ExportReport {
    export(ckpt, &ExportOptions::new(seq, dir).weights(DType::F32)).unwrap()
}

#[test]
fn one_checkpoint_per_family_runs_on_arm64_and_vulkan_with_the_hosts_ids() {
    let Some(tc) = toolchain() else { return };
    let arm64 = common::arm64_emulation(&tc);
    let lavapipe = lavapipe_present();
    for (name, si) in ONE_PER_FAMILY {
        let exp = hf_expected(name);
        let rs = &exp.seqs[si];
        let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
        let dir = tmpdir();
        let r = export(&ckpt, &ExportOptions::new(rs.seq, dir.path())).unwrap();
        assert_eq!(r.manifest.weights_dtype, "bf16");
        let targets = [
            Target::Host,
            Target::Arm64,
            Target::parse("vulkan").unwrap(),
        ];
        let outs = common::compiled::compile_many(&tc, &r.mlir, &targets, dir.path(), name, 2)
            .unwrap_or_else(|e| panic!("{name}: compiling failed: {e}"));
        for (ci, c) in rs.cases.iter().enumerate() {
            let host = module_ids(&tc, &r, &outs[0], Device::LocalTask, None, &c.input);
            if arm64 {
                let arm = module_ids(
                    &tc,
                    &r,
                    &outs[1],
                    Device::LocalTask,
                    Some(Emulation::Arm64),
                    &c.input,
                );
                assert_eq!(arm, host, "{name} case {ci}: arm64 under qemu vs host");
            }
            if lavapipe {
                let vk = module_ids(&tc, &r, &outs[2], Device::Vulkan, None, &c.input);
                assert_eq!(vk, host, "{name} case {ci}: Vulkan on lavapipe vs host");
            }
        }
    }
}

/// GGUF files written from HF fixtures as llama.cpp's converter lays out
/// each architecture (`scripts/fixtures/make_hf_fixtures.py --gguf`), with the family
/// kiln must read: the file named after its HF folder.
const GGUF_FIXTURES: [(&str, kiln::models::Family); 8] = [
    ("tiny-llama3-mqa", kiln::models::Family::Llama),
    ("tiny-qwen2", kiln::models::Family::Qwen2),
    ("tiny-qwen3", kiln::models::Family::Qwen3),
    ("tiny-phi3", kiln::models::Family::Phi3),
    ("tiny-phi3-longrope", kiln::models::Family::Phi3),
    ("tiny-gemma", kiln::models::Family::Gemma),
    ("tiny-gemma2-tied", kiln::models::Family::Gemma2),
    ("tiny-gemma3", kiln::models::Family::Gemma3),
];

#[test]
fn gguf_files_export_the_hf_graph_and_give_transformers_ids() {
    let tc = toolchain();
    for (name, family) in GGUF_FIXTURES {
        let gguf = Checkpoint::open(fixture(&format!("gguf/{name}.gguf"))).unwrap();
        let hf = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
        assert_eq!(gguf.config.family, family, "{name}");
        let windows = |c: &kiln::models::DecoderConfig| -> Vec<Option<usize>> {
            (0..c.num_layers).map(|l| c.layer_window(l)).collect()
        };
        assert_eq!(
            windows(&gguf.config),
            windows(&hf.config),
            "{name}: attention windows"
        );
        let arch = |c: &kiln::models::DecoderConfig| kiln::models::Arch {
            sliding_layers: None,
            ..c.arch.clone()
        };
        assert_eq!(
            arch(&gguf.config),
            arch(&hf.config),
            "{name}: what the family changes"
        );
        // RoPE (LongRoPE factors are f32 in a GGUF, as transformers computes
        // with them) is checked by the exports below: their cos/sin tables
        // are constants of the MLIR, which must be the same text.
        assert_eq!(gguf.tensors(), hf.tensors(), "{name}");
        for (t, _) in hf.tensors() {
            let (a, b) = (gguf.read_f32(t).unwrap(), hf.read_f32(t).unwrap());
            // Gemma's norms are stored as 1 + w: (1 + w) - 1 is w to within
            // half an ulp of 1 + w; everything else is bit-exact.
            let tol = if t.ends_with("norm.weight") && hf.config.arch.norm_plus_one {
                1.2e-7
            } else {
                0.0
            };
            let worst = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= tol,
                "{name}: {t} differs between the GGUF and the HF folder by {worst}"
            );
        }
        let exp = hf_expected(name);
        for rs in &exp.seqs {
            let (dg, dh) = (tmpdir(), tmpdir());
            let rg = export_f32(&gguf, dg.path(), rs.seq);
            let rh = export_f32(&hf, dh.path(), rs.seq);
            let (tg, th) = (
                std::fs::read_to_string(&rg.mlir).unwrap(),
                std::fs::read_to_string(&rh.mlir).unwrap(),
            );
            if let kiln::models::RopeScaling::Factors { .. } = gguf.config.rope_scaling {
                // llama.cpp's factors divide the frequencies, transformers'
                // llama3 rule computes them: the same tables to within
                // f32 rounding, so only the RoPE constants may differ.
                let (cg, sg) = gguf.config.rope_tables(rs.seq);
                let (ch, sh) = hf.config.rope_tables(rs.seq);
                let worst = cg
                    .iter()
                    .chain(&sg)
                    .zip(ch.iter().chain(&sh))
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
                assert!(worst < 1e-5, "{name}: RoPE tables differ by {worst}");
                let plain = |t: &str| -> Vec<String> {
                    t.lines()
                        .filter(|l| !l.contains("stablehlo.constant dense<["))
                        .map(String::from)
                        .collect()
                };
                assert_eq!(
                    plain(&tg),
                    plain(&th),
                    "{name} seq {}: the GGUF and HF exports differ",
                    rs.seq
                );
            } else {
                assert_eq!(
                    tg, th,
                    "{name} seq {}: the GGUF and HF exports differ",
                    rs.seq
                );
            }
            // On IREE at the largest SEQ, as tests/export_hf.rs runs the HF
            // folder (the same MLIR: one compile serves both).
            let largest = exp.seqs.iter().map(|s| s.seq).max();
            let Some(tc) = tc.as_ref().filter(|_| Some(rs.seq) == largest) else {
                continue;
            };
            let vmfb = dg.path().join("m.vmfb");
            common::compiled::compile(tc, &rg.mlir, &Target::Host, &vmfb, &[]).unwrap();
            for (ci, c) in rs.cases.iter().enumerate() {
                let got = module_ids(tc, &rg, &vmfb, Device::LocalTask, None, &c.input);
                let bad = mismatches(&got, &c.argmax, &c.margin, 0..rs.seq);
                assert!(
                    bad.is_empty(),
                    "{name}.gguf seq {} case {ci}: {}",
                    rs.seq,
                    bad.join("; ")
                );
            }
        }
    }
}

/// Keys a config may leave out take transformers' per-family defaults.
#[test]
fn absent_keys_take_each_familys_transformers_defaults() {
    use kiln::models::{DecoderConfig, RopeScaling};
    let base = r#""vocab_size": 96, "hidden_size": 48, "intermediate_size": 80,
        "num_hidden_layers": 2, "num_attention_heads": 4"#;
    let parse = |extra: &str| DecoderConfig::from_hf_json(&format!("{{{base}, {extra}}}")).unwrap();
    // Gemma: head_dim 256 (not 48/4), tied head, tanh GELU.
    let g = parse(r#""model_type": "gemma""#);
    assert_eq!((g.head_dim, g.tie_word_embeddings), (256, true));
    // Gemma 2: query_pre_attn_scalar 256, soft-capping 50 / 30, even layers local.
    let g2 = parse(r#""model_type": "gemma2", "sliding_window": 4096"#);
    assert_eq!(g2.arch.query_pre_attn_scalar, Some(256.0));
    assert_eq!(g2.arch.attn_logit_softcapping, Some(50.0));
    assert_eq!(g2.arch.final_logit_softcapping, Some(30.0));
    assert_eq!(g2.arch.sliding_layers, Some(vec![true, false]));
    assert_eq!((g2.layer_window(0), g2.layer_window(1)), (Some(4096), None));
    // null turns soft-capping off.
    let g2 = parse(r#""model_type": "gemma2", "attn_logit_softcapping": null"#);
    assert_eq!(g2.arch.attn_logit_softcapping, None);
    // Qwen2: no window unless use_sliding_window; then layers >= max_window_layers.
    let q = parse(r#""model_type": "qwen2", "sliding_window": 4"#);
    assert_eq!((q.layer_window(0), q.layer_window(1)), (None, None));
    let q = parse(
        r#""model_type": "qwen2", "sliding_window": 4, "use_sliding_window": true, "max_window_layers": 1"#,
    );
    assert_eq!((q.layer_window(0), q.layer_window(1)), (None, Some(4)));
    // Phi-3, transformers 4.x spelling: top-level partial_rotary_factor and
    // original_max_position_embeddings, rope_scaling of type "su".
    let p = parse(
        r#""model_type": "phi3", "partial_rotary_factor": 0.5, "max_position_embeddings": 64,
        "original_max_position_embeddings": 16,
        "rope_scaling": {"type": "su", "short_factor": [1, 2, 3], "long_factor": [4, 5, 6]}"#,
    );
    assert_eq!(p.rotary_dim(), 6);
    assert_eq!(
        p.rope_scaling,
        RopeScaling::LongRope {
            short_factor: vec![1.0, 2.0, 3.0],
            long_factor: vec![4.0, 5.0, 6.0],
            original_max_position_embeddings: 16.0,
            factor: None,
            attention_factor: None,
        }
    );
    assert!((p.attention_factor() - 1.5f64.sqrt()).abs() < 1e-12);
}

/// A GGUF that llama.cpp would read differently from what kiln would
/// guess is a clear error naming the file and what is wrong.
#[test]
fn gguf_files_llama_cpp_would_read_otherwise_are_errors() {
    let dir = tmpdir();
    let open_err =
        |name: &str, meta: &[(String, kiln::params::gguf::GgufValue)], ts: &[GgufTensorBytes]| {
            let p = dir.path().join(name);
            write_gguf(&p, meta, ts);
            let e = Checkpoint::open(&p)
                .err()
                .expect("should not open")
                .to_string();
            assert!(e.contains(name), "{e}");
            e
        };
    // The writer itself: an unchanged copy reads back the same.
    let (meta, ts) = read_gguf(&fixture("gguf/tiny-gemma2-tied.gguf"));
    let same = dir.path().join("same.gguf");
    write_gguf(&same, &meta, &ts);
    let (a, b) = (
        Checkpoint::open(&same).unwrap(),
        Checkpoint::open(fixture("gguf/tiny-gemma2-tied.gguf")).unwrap(),
    );
    assert_eq!(a.config, b.config);
    assert_eq!(
        a.read_f32("model.norm.weight").unwrap(),
        b.read_f32("model.norm.weight").unwrap()
    );
    // Gemma 2 with an output.weight: llama.cpp ignores it, so which head?
    let mut with_head = ts.clone();
    let emb = ts
        .iter()
        .find(|t| t.0 == "token_embd.weight")
        .unwrap()
        .clone();
    with_head.push(("output.weight".into(), emb.1, emb.2, emb.3));
    let e = open_err("head.gguf", &meta, &with_head);
    assert!(
        e.contains("output.weight") && e.contains("ties the head"),
        "{e}"
    );
    // Phi-3 LongRoPE with one factor tensor, or without the original context.
    let (meta, ts) = read_gguf(&fixture("gguf/tiny-phi3-longrope.gguf"));
    let one: Vec<_> = ts
        .iter()
        .filter(|t| t.0 != "rope_factors_long.weight")
        .cloned()
        .collect();
    let e = open_err("one-factor.gguf", &meta, &one);
    assert!(
        e.contains("missing tensor \"rope_factors_long.weight\""),
        "{e}"
    );
    let no_ctx: Vec<_> = meta
        .iter()
        .filter(|(k, _)| k != "phi3.rope.scaling.original_context_length")
        .cloned()
        .collect();
    let e = open_err("no-ctx.gguf", &no_ctx, &ts);
    assert!(
        e.contains("phi3.rope.scaling.original_context_length"),
        "{e}"
    );
}
