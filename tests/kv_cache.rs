//! The KV-cache pair (`kiln export --kv-cache`): prefill + one-token decode
//! over the same archive as the redecode forward.
//!
//! - every tiny transformers fixture, in kiln's interpreter: teacher-forced
//!   prefill + decode predicts transformers' argmax at every position, and
//!   greedy KV generation gives exactly the redecode loop's ids;
//! - the same teacher-forced check through IREE on the host;
//! - one fixture compiled for host, arm64, arm32 and Vulkan: the arm64
//!   module under qemu and the Vulkan module on lavapipe generate the
//!   host's ids; bf16 caches give the f32 caches' ids on the CPU and are a
//!   clear compile error for Vulkan;
//! - bad input: a prompt longer than P, a decode past N, caches of the
//!   wrong shape, a module exported without `--kv-cache`.

mod common;
use common::*;
use kiln::export::{export, ExportOptions, ExportReport, KvCacheOptions};
use kiln::generate::{generate, generate_kv, Interpreted, KvInterpreted, KvRunModule, KvStep};
use kiln::graph::DType;
use kiln::iree::flags::{Device, Target};
use kiln::iree::run::{Emulation, RunOptions};
use kiln::iree::session::KvSession;
use kiln::iree::Toolchain;
use kiln::models::Checkpoint;
use std::path::Path;

/// Prompt bucket used for the fixtures: positions 0..P go through prefill.
const P: usize = 4;

fn export_kv(name: &str, seq: usize, dir: &Path, cache: DType) -> ExportReport {
    let exp = hf_expected(name);
    let weights = if exp.weights_dtype == "BF16" {
        DType::BF16
    } else {
        DType::F32
    };
    let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
    export(
        &ckpt,
        &ExportOptions {
            seq,
            out_dir: dir.into(),
            name: Some("tiny".into()),
            weights,
            kv: Some(KvCacheOptions {
                prompt_len: Some(P),
                max_context: Some(seq),
                cache_dtype: cache,
            }),
            ..Default::default()
        },
    )
    .unwrap()
}

/// A KV session over `vmfb` (compiled from `r`'s KV module) on `device`.
fn kv_session(tc: &Toolchain, r: &ExportReport, vmfb: &Path, device: Device) -> KvSession {
    let kv = &r.manifest.kv.as_ref().unwrap().pair;
    KvSession::start(
        tc,
        vmfb,
        &r.irpa,
        "model",
        (&kv.prefill, &kv.decode),
        device,
        (kv.prompt_len, kv.max_context),
        None,
    )
    .unwrap()
}

fn interp_kv(r: &ExportReport) -> KvInterpreted {
    let kv = &r.manifest.kv.as_ref().unwrap().pair;
    KvInterpreted::open(
        r.kv_mlir.as_ref().unwrap(),
        &r.irpa,
        &kv.prefill,
        &kv.decode,
    )
    .unwrap()
}

/// Teacher forcing: prefill on the first `k` input ids, then decode each
/// following input id at its position; the prediction at every position
/// from `k - 1` on must be transformers' argmax (ties excepted).
fn teacher_forced(
    model: &mut dyn KvStep,
    input: &[i32],
    argmax: &[i32],
    margin: &[f64],
) -> Vec<String> {
    let k = 3;
    let mut got = vec![-1; input.len()];
    got[k - 1] = model.prefill(&pad(&input[..k], P), k).unwrap();
    for pos in k..input.len() {
        got[pos] = model.decode(input[pos], pos).unwrap();
    }
    mismatches(&got, argmax, margin, k - 1..input.len())
}

#[test]
fn interpreter_kv_matches_transformers_and_redecode_on_every_fixture() {
    let mut failures = Vec::new();
    for name in HF_FIXTURES {
        let exp = hf_expected(name);
        for rs in &exp.seqs {
            let dir = tmpdir();
            let r = export_kv(name, rs.seq, dir.path(), DType::F32);
            let mut kv = interp_kv(&r);
            for (ci, c) in rs.cases.iter().enumerate() {
                let bad = teacher_forced(&mut kv, &c.input, &c.argmax, &c.margin);
                if !bad.is_empty() {
                    failures.push(format!(
                        "{name} seq {} case {ci}: {}",
                        rs.seq,
                        bad.join("; ")
                    ));
                }
            }
            // Greedy generation: the KV loop and the redecode loop at SEQ = N.
            let prompt = &rs.cases[0].input[..3];
            let g_kv = generate_kv(&mut kv, prompt, rs.seq, &[], |_| {}).unwrap();
            let mut re = Interpreted::open(&r.mlir, &r.irpa, &r.manifest.function).unwrap();
            let g_re = generate(&mut re, prompt, rs.seq, &[], |_| {}).unwrap();
            assert_eq!(g_kv.ids.len(), rs.seq - 3, "{name}: fills N");
            if g_kv != g_re {
                failures.push(format!(
                    "{name} seq {}: KV generated {:?}, redecode {:?}",
                    rs.seq, g_kv.ids, g_re.ids
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn iree_host_kv_matches_transformers_on_every_fixture() {
    let Some(tc) = toolchain() else { return };
    let mut failures = Vec::new();
    for name in HF_FIXTURES {
        let exp = hf_expected(name);
        let rs = exp.seqs.last().unwrap();
        let dir = tmpdir();
        let r = export_kv(name, rs.seq, dir.path(), DType::F32);
        let vmfb = dir.path().join("tiny-kv-host.vmfb");
        kiln::iree::compile::compile(&tc, r.kv_mlir.as_ref().unwrap(), &Target::Host, &vmfb, &[])
            .unwrap();
        let mut s = kv_session(&tc, &r, &vmfb, Device::LocalTask);
        for (ci, c) in rs.cases.iter().enumerate() {
            let bad = teacher_forced(&mut s, &c.input, &c.argmax, &c.margin);
            if !bad.is_empty() {
                failures.push(format!(
                    "{name} seq {} case {ci}: {}",
                    rs.seq,
                    bad.join("; ")
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn kv_module_compiles_for_four_targets_and_emulated_runs_match_the_host() {
    let Some(tc) = toolchain() else { return };
    let dir = tmpdir();
    let r = export_kv("tiny-llama-bf16", 16, dir.path(), DType::F32);
    let kv = r.manifest.kv.clone().unwrap().pair;
    let targets = [
        Target::Host,
        Target::Arm64,
        Target::Arm32,
        Target::parse("vulkan").unwrap(),
    ];
    let outs = kiln::iree::compile::compile_many(
        &tc,
        r.kv_mlir.as_ref().unwrap(),
        &targets,
        dir.path(),
        "tiny-kv",
        2,
        &[],
    )
    .unwrap();
    let prompt = [5, 17, 3];
    let session = |vmfb: &Path, device| kv_session(&tc, &r, vmfb, device);
    let host = generate_kv(
        &mut session(&outs[0], Device::LocalTask),
        &prompt,
        16,
        &[],
        |_| {},
    )
    .unwrap();
    assert_eq!(host.ids.len(), 13);
    let mut interp = interp_kv(&r);
    assert_eq!(
        generate_kv(&mut interp, &prompt, 16, &[], |_| {}).unwrap(),
        host
    );
    // arm64 under qemu: one iree-run-module per call, caches through files.
    let mut arm = KvRunModule {
        toolchain: tc.clone(),
        vmfb: outs[1].clone(),
        options: RunOptions {
            params: vec![("model".into(), r.irpa.clone())],
            emulate: Some(Emulation::Arm64),
            ..Default::default()
        },
        functions: (kv.prefill.clone(), kv.decode.clone()),
        prompt_len: kv.prompt_len,
        cache_shape: kv.cache_shape.clone(),
        caches: None,
    };
    assert_eq!(
        generate_kv(&mut arm, &prompt, 6, &[], |_| {}).unwrap().ids,
        host.ids[..6]
    );
    if lavapipe_present() {
        let mut vk = session(&outs[3], Device::Vulkan);
        assert_eq!(
            generate_kv(&mut vk, &prompt, 16, &[], |_| {}).unwrap(),
            host
        );
    }
}

#[test]
fn bf16_caches_match_f32_on_the_cpu_and_are_refused_for_vulkan() {
    let dir = tmpdir();
    let r = export_kv("tiny-llama-tied-gqa", 16, dir.path(), DType::BF16);
    let kv = r.manifest.kv.clone().unwrap().pair;
    assert_eq!(kv.cache_dtype, "bf16");
    let text = std::fs::read_to_string(r.kv_mlir.as_ref().unwrap()).unwrap();
    assert!(text.contains("tensor<2x2x16x12xbf16>"), "bf16 cache type");
    let f32_dir = tmpdir();
    let r32 = export_kv("tiny-llama-tied-gqa", 16, f32_dir.path(), DType::F32);
    let prompt = [5, 17, 3];
    let g16 = generate_kv(&mut interp_kv(&r), &prompt, 16, &[], |_| {}).unwrap();
    let g32 = generate_kv(&mut interp_kv(&r32), &prompt, 16, &[], |_| {}).unwrap();
    assert_eq!(g16, g32);
    let Some(tc) = toolchain() else { return };
    let vmfb = dir.path().join("tiny-kv-host.vmfb");
    kiln::iree::compile::compile(&tc, r.kv_mlir.as_ref().unwrap(), &Target::Host, &vmfb, &[])
        .unwrap();
    let mut s = kv_session(&tc, &r, &vmfb, Device::LocalTask);
    assert_eq!(generate_kv(&mut s, &prompt, 16, &[], |_| {}).unwrap(), g32);
    let vk = dir.path().join("tiny-kv-vulkan.vmfb");
    let e = kiln::iree::compile::compile(
        &tc,
        r.kv_mlir.as_ref().unwrap(),
        &Target::parse("vulkan").unwrap(),
        &vk,
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("--kv-dtype f32"), "{e}");
    assert!(!vk.exists());
}

fn kiln(args: &[&str]) -> (i32, String, String) {
    kiln_cli(env!("CARGO_BIN_EXE_kiln"), args)
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tmpdir();
    let r = export_kv("tiny-llama-tied-gqa", 8, dir.path(), DType::F32);
    let mut kv = interp_kv(&r);
    // A prompt longer than P.
    let e = generate_kv(&mut kv, &[1, 2, 3, 4, 5], 2, &[], |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("prompt bucket P is 4"), "{e}");
    // A decode past N.
    kv.prefill(&pad(&[1, 2], P), 2).unwrap();
    let e = kv.decode(7, 8).unwrap_err().to_string();
    assert!(e.contains("past the max context N = 8"), "{e}");
    // Caches of the wrong shape, fed to the decode function.
    let text = std::fs::read_to_string(r.kv_mlir.as_ref().unwrap()).unwrap();
    let m = kiln::stablehlo::parse_module(&text).unwrap();
    let kvm = &r.manifest.kv.as_ref().unwrap().pair;
    let params = kiln::interp::files::FileParams::open(&r.irpa).unwrap();
    let bad = kiln::interp::Tensor::f32(&[2, 2, 4, 12], vec![0.0; 2 * 2 * 4 * 12]);
    let e = kiln::interp::run_module(
        &m,
        Some(&kvm.decode),
        &[
            kiln::interp::Tensor::i32(&[1], vec![3]),
            kiln::interp::Tensor::i32(&[], vec![2]),
            bad.clone(),
            bad,
        ],
        &params,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("argument 2 of @tiny_decode must be tensor<2x2x8x12xf32>"),
        "{e}"
    );
    // CLI: too long a prompt, and a module exported without --kv-cache.
    let kv_mlir = r.kv_mlir.as_ref().unwrap().to_str().unwrap().to_string();
    let (code, _, err) = kiln(&["generate", &kv_mlir, "--kv-cache", "--tokens", "1,2,3,4,5"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("prompt bucket P is 4"), "{err}");
    // `kiln interp` (and `kiln run`) call the SEQ forward, which a KV
    // module does not have: they say so and point to generate.
    let (code, _, err) = kiln(&["interp", &kv_mlir, "--tokens", "1,2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is a KV-cache module") && err.contains("--kv-cache"),
        "{err}"
    );
    // (`kiln run` decides by the name, before loading the module.)
    let vmfb = dir.path().join("tiny-kv-host.vmfb");
    std::fs::write(&vmfb, b"not loaded").unwrap();
    let (code, _, err) = kiln(&["run", vmfb.to_str().unwrap(), "--tokens", "1,2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is a KV-cache module") && err.contains("kiln generate"),
        "{err}"
    );
    let plain = tmpdir();
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-tied-gqa")).unwrap();
    let p = export(
        &ckpt,
        &ExportOptions {
            seq: 8,
            out_dir: plain.path().into(),
            name: Some("tiny".into()),
            ..Default::default()
        },
    )
    .unwrap();
    let (code, _, err) = kiln(&[
        "generate",
        p.mlir.to_str().unwrap(),
        "--kv-cache",
        "--tokens",
        "1,2",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("records no KV-cache export"), "{err}");
    // Export: N must exceed P; KV flags need --kv-cache.
    let fx = fixture("hf/tiny-llama-tied-gqa");
    let out = tmpdir();
    let (code, _, err) = kiln(&[
        "export",
        fx.to_str().unwrap(),
        "--seq",
        "8",
        "--out",
        out.path().to_str().unwrap(),
        "--kv-cache",
        "--max-context",
        "8",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("must exceed the prompt length P (8)"), "{err}");
    assert!(files_in(out.path()).is_empty(), "no partial output");
    let (code, _, err) = kiln(&[
        "export",
        fx.to_str().unwrap(),
        "--seq",
        "8",
        "--prompt-len",
        "4",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--kv-cache"), "{err}");
}
