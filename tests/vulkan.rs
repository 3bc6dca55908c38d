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

use crate::common;
use common::compiled::compile;
use common::*;
use kiln::export::{export, ExportOptions, ExportReport};
use kiln::generate::{generate, Sampler};
use kiln::graph::{DType, Graph, Module, TensorType};
use kiln::iree::{
    run_module, Device, ForwardSession, HostTensor, KvSession, RunOptions, SessionSpec, Target,
    Toolchain,
};
use kiln::models::Checkpoint;
use kiln::stablehlo::PrintOptions;
use kiln::step::KvSpec;
use std::path::{Path, PathBuf};

const FIXTURE: &str = "tiny-llama-bf16";

fn export_bf16(dir: &Path, seq: usize) -> ExportReport {
    let ckpt = Checkpoint::open(fixture(&format!("hf/{FIXTURE}"))).unwrap();
    export(&ckpt, &ExportOptions::new(seq, dir).weights(DType::BF16)).unwrap()
}

fn build(tc: &Toolchain, r: &ExportReport, dir: &Path, target: &Target, name: &str) -> PathBuf {
    let vmfb = dir.join(format!("{name}.vmfb"));
    compile(tc, &r.mlir, target, &vmfb, &[])
        .unwrap_or_else(|e| panic!("compiling for {target} failed: {e}"));
    vmfb
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
    let parsed = kiln::stablehlo::ParsedModule::parse(&text).unwrap();
    let lowered = parsed.module.lower_for_vulkan().unwrap();
    let text = lowered.print(&parsed.print_options(), None).unwrap();
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
    let want_host = module_ids(&tc, &r, &host, Device::LocalTask, None, &c.input);
    let got = module_ids(&tc, &r, &default, Device::Vulkan, None, &c.input);
    assert_eq!(
        got, want_host,
        "Vulkan on lavapipe differs from the host module"
    );
    let bad = mismatches(&got, &c.argmax, &c.margin, 0..rs.seq);
    assert!(bad.is_empty(), "{FIXTURE}: {}", bad.join("; "));

    // `kiln generate`'s loaded session on Vulkan (results read back through
    // a staging buffer there) continues a prompt as on the host.
    let continue_on = |vmfb: &Path, device: Device| {
        let mut s = ForwardSession::new(
            SessionSpec::new(vmfb, &r.irpa)
                .device(device)
                .open()
                .unwrap(),
            &r.manifest.function,
            rs.seq,
        )
        .unwrap();
        generate(&mut s, &c.input[..3], 4, &[], |_| true).unwrap()
    };
    assert_eq!(
        continue_on(&default, Device::Vulkan),
        continue_on(&host, Device::LocalTask)
    );
}

/// Weight matrices over the tensor bound are used in row chunks (slices of
/// one archive entry, each chunk's product joined): with a 4096-byte bound
/// every matrix of the tiny checkpoint is chunked, and the host and lavapipe
/// still give transformers' ids. (A real model's matrices pass 2^27 as f32
/// only from about 8B parameters on; the bound is the same code.)
#[test]
fn weight_matrices_in_row_chunks_give_transformers_ids_on_lavapipe() {
    let Some(tc) = toolchain() else { return };
    let exp = hf_expected(FIXTURE);
    let rs = &exp.seqs[0];
    let dir = tmpdir();
    let ckpt = Checkpoint::open(fixture(&format!("hf/{FIXTURE}"))).unwrap();
    let r = export(
        &ckpt,
        &ExportOptions::new(rs.seq, dir.path())
            .weights(DType::BF16)
            .max_tensor_bytes(4096),
    )
    .unwrap();
    let text = std::fs::read_to_string(&r.mlir).unwrap();
    for key in ["self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"] {
        assert!(
            text.contains(&format!(
                "model.layers.0.{key}.weight\", {{offset = 0 : i64"
            )),
            "{key} not in row chunks"
        );
    }
    let host = build(&tc, &r, dir.path(), &Target::Host, "host");
    let vk = build(&tc, &r, dir.path(), &Target::parse("vulkan").unwrap(), "vk");
    let c = &rs.cases[0];
    let want = module_ids(&tc, &r, &host, Device::LocalTask, None, &c.input);
    let bad = mismatches(&want, &c.argmax, &c.margin, 0..rs.seq);
    assert!(bad.is_empty(), "host: {}", bad.join("; "));
    if lavapipe_present() {
        assert_eq!(
            module_ids(&tc, &r, &vk, Device::Vulkan, None, &c.input),
            want
        );
    }
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
    std::fs::write(&mlir, m.print(&PrintOptions::default(), None).unwrap()).unwrap();
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
        let opts = RunOptions::default()
            .device(device)
            .function("norm")
            .exact_outputs(1);
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

/// The big-vocabulary checkpoint (a tied 262144 × 320 bf16 embedding, 168
/// MB, over the 2^27-byte storage-buffer range): kiln's graphs use the
/// table in row chunks over the same archive entry, no tensor of the
/// redecode or KV module passes the range, and lavapipe gives the host's
/// ids, which are transformers', at every position and in a greedy
/// continuation (redecode and KV pair); the interpreter agrees.
#[test]
fn big_vocabulary_gives_transformers_ids_on_lavapipe_host_and_interpreter() {
    let exp = bigvocab_expected();
    let work = tmpdir();
    let ckpt_dir = work.path().join("ckpt");
    std::fs::create_dir(&ckpt_dir).unwrap();
    let ckpt = Checkpoint::open(bigvocab_checkpoint(&ckpt_dir)).unwrap();
    let rs = &exp.seqs[0];
    let out = work.path().join("out");
    let r = export(
        &ckpt,
        &ExportOptions::new(rs.seq, out.clone())
            .name("big")
            .weights(DType::BF16)
            .kv(kiln::export::KvCacheOptions::default()
                .prompt_len(8)
                .max_context(16)
                .cache_dtype(DType::F32)),
    )
    .unwrap();
    assert!(r.vulkan_issues.is_empty(), "{:?}", r.vulkan_issues);
    let kv_mlir = r.kv_mlir.clone().unwrap();
    // No tensor of either module is over the storage-buffer range: the
    // empty `vulkan_issues` above says so.
    for m in [&r.mlir, &kv_mlir] {
        let text = std::fs::read_to_string(m).unwrap();
        assert!(
            text.contains("\"model.embed_tokens.weight\", {offset = 0 : i64, length = "),
            "the embedding is not declared in parts"
        );
    }
    // The interpreter reads the parts from the archive.
    let module = kiln::graph::Module::parse(&std::fs::read_to_string(&r.mlir).unwrap()).unwrap();
    let params = <dyn kiln::params::ParamSource>::open(&r.irpa).unwrap();
    let mut failures = Vec::new();
    for (ci, c) in rs.cases.iter().enumerate() {
        let x = kiln::interp::Tensor::i32(&[1, rs.seq], c.input.clone());
        let got = kiln::interp::run(&module.functions[0], &[x], &params).unwrap();
        let got = got[0].as_i32().unwrap().to_vec();
        let bad = mismatches(&got, &c.argmax, &c.margin, 0..rs.seq);
        if !bad.is_empty() {
            failures.push(format!("interpreter case {ci}: {}", bad.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Without chunks (--max-tensor-bytes 0) the export says, up front, that
    // the module is not for Vulkan.
    let plain = work.path().join("plain");
    let (code, _, err) = kiln(&[
        "export",
        ckpt_dir.to_str().unwrap(),
        "--seq",
        "8",
        "--out",
        plain.to_str().unwrap(),
        "--max-tensor-bytes",
        "0",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("not for Vulkan (CPU targets are fine): ckpt-gen.mlir line 2: parameter \"model.embed_tokens.weight\""),
        "{err}"
    );
    std::fs::remove_dir_all(&plain).unwrap();

    let Some(tc) = toolchain() else { return };
    let targets = [Target::Host, Target::parse("vulkan").unwrap()];
    let fwd = common::compiled::compile_many(&tc, &r.mlir, &targets, &out, "big", 2).unwrap();
    let kv = common::compiled::compile_many(&tc, &kv_mlir, &targets, &out, "big-kv", 2).unwrap();
    let lavapipe = lavapipe_present();
    for (ci, c) in rs.cases.iter().enumerate() {
        let host = module_ids(&tc, &r, &fwd[0], Device::LocalTask, None, &c.input);
        let bad = mismatches(&host, &c.argmax, &c.margin, 0..rs.seq);
        assert!(bad.is_empty(), "host case {ci}: {}", bad.join("; "));
        if lavapipe {
            let vk = module_ids(&tc, &r, &fwd[1], Device::Vulkan, None, &c.input);
            assert_eq!(vk, host, "lavapipe differs from the host, case {ci}");
        }
    }
    let pair = r.manifest.kv.clone().unwrap().pair;
    let greedy = |vmfb: &Path, device: Device| {
        let spec = SessionSpec::new(vmfb, &r.irpa).device(device);
        let mut s =
            KvSession::new(spec.open().unwrap(), &KvSpec::try_from(&pair).unwrap()).unwrap();
        let n = exp.greedy.new.len();
        kiln::generate::generate_kv(
            &mut s,
            &exp.greedy.prompt,
            n,
            &[],
            Sampler::greedy(),
            |_| true,
        )
        .unwrap()
        .ids
    };
    assert_eq!(
        greedy(&kv[0], Device::LocalTask),
        exp.greedy.new,
        "host KV greedy ids"
    );
    if lavapipe {
        assert_eq!(
            greedy(&kv[1], Device::Vulkan),
            exp.greedy.new,
            "lavapipe KV greedy ids"
        );
    }
}

/// MLIR kiln did not write, with a global and an activation over the
/// 2^27-byte storage-buffer range: a Vulkan compile refuses it before
/// iree-compile runs, naming the tensors, their sizes and the limit, and
/// leaves no module; `kiln compile` exits 2.
#[test]
fn oversize_tensors_in_handwritten_mlir_are_refused_for_vulkan() {
    let Some(tc) = toolchain() else { return };
    let dir = tmpdir();
    let mlir = dir.path().join("big.mlir");
    std::fs::write(
        &mlir,
        "module @big {\n  util.global private @table = #flow.parameter.named<\"model\"::\"emb\"> : tensor<65536x1024xf32>\n  func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n    %0 = stablehlo.broadcast_in_dim %arg0, dims = [1] : (tensor<4xf32>) -> tensor<9000000x4xf32>\n    %1 = stablehlo.reduce(%0 init: %arg0) applies stablehlo.add across dimensions = [0] : (tensor<9000000x4xf32>, tensor<f32>) -> tensor<4xf32>\n    return %arg0 : tensor<4xf32>\n  }\n}\n",
    )
    .unwrap();
    let vk = dir.path().join("big-vulkan.vmfb");
    let e = compile(&tc, &mlir, &Target::parse("vulkan").unwrap(), &vk, &[])
        .unwrap_err()
        .to_string();
    for want in [
        "big.mlir:2: parameter \"emb\" (global @table) is tensor<65536x1024xf32>, 268435456 bytes",
        "134217728-byte storage-buffer range of Vulkan target vp_android_baseline_2022",
        "also line 4: %0 (stablehlo.broadcast_in_dim) is tensor<9000000x4xf32>, 144000000 bytes",
    ] {
        assert!(e.contains(want), "missing {want:?} in: {e}");
    }
    // The library states the facts; `kiln compile` adds what to do.
    assert!(!e.contains("hint:") && !e.contains("--"), "{e}");
    assert!(!vk.exists());
    assert_eq!(files_in(dir.path()), ["big.mlir"]);
    let (code, out, err) = kiln(&[
        "compile",
        mlir.to_str().unwrap(),
        "--target",
        "vulkan:valhall",
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("Vulkan target valhall"), "{err}");
    assert!(
        err.contains("\nhint: kiln export keeps its tables") && err.contains("--max-tensor-bytes"),
        "{err}"
    );
    assert_eq!(files_in(dir.path()), ["big.mlir"]);

    // A head over 87424 vocabulary rows in one product: every tensor fits,
    // but the columns past 65535 would never be computed.
    let wide = dir.path().join("wide.mlir");
    std::fs::write(
        &wide,
        "module @wide {\n  func.func @f(%arg0: tensor<8x320xf32>, %arg1: tensor<87424x320xf32>) -> tensor<8x87424xf32> {\n    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [1] : (tensor<8x320xf32>, tensor<87424x320xf32>) -> tensor<8x87424xf32>\n    return %0 : tensor<8x87424xf32>\n  }\n}\n",
    )
    .unwrap();
    let e = compile(&tc, &wide, &Target::parse("vulkan").unwrap(), &vk, &[])
        .unwrap_err()
        .to_string();
    for want in [
        "wide.mlir:3: %0 (stablehlo.dot_general) gives tensor<8x87424xf32> with 87424 columns",
        "65535 workgroups per dimension",
    ] {
        assert!(e.contains(want), "missing {want:?} in: {e}");
    }
    assert!(!e.contains("hint:"), "{e}");
    assert!(!vk.exists());
    let (code, out, err) = kiln(&[
        "compile",
        wide.to_str().unwrap(),
        "--target",
        "vulkan",
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("\nhint: kiln export uses an LM head over a larger vocabulary in row chunks of at most 65535 rows"),
        "{err}"
    );
}

/// The real Gemma 3 270M GGUF (a tied 262144 × 640 embedding, 335 MB as
/// bf16): its default-target Vulkan module on lavapipe gives the host's
/// ids at every prompt position (before row chunks, every position whose
/// answer was a high token id came out wrong).
#[test]
fn gemma3_270m_on_lavapipe_equals_the_host() {
    let Some(tc) = toolchain() else { return };
    let Some(gguf) = gemma3_gguf() else { return };
    let dir = tmpdir();
    let ckpt = Checkpoint::open(&gguf).unwrap();
    let seq = 16;
    let r = export(&ckpt, &ExportOptions::new(seq, dir.path()).name("gemma3")).unwrap();
    let targets = [Target::Host, Target::parse("vulkan").unwrap()];
    let outs =
        common::compiled::compile_many(&tc, &r.mlir, &targets, dir.path(), "gemma3", 2).unwrap();
    // <bos> "def fibonacci(n):\n    if n" and a few high ids.
    let input = [
        2, 2063, 46722, 236769, 236749, 1473, 107, 140, 768, 538, 236743, 236779, 236770, 236771,
        54321, 262000,
    ];
    let host = module_ids(&tc, &r, &outs[0], Device::LocalTask, None, &input);
    assert!(
        host.iter().any(|&i| i > 209_715),
        "no answer past the first 2^27 bytes: {host:?}"
    );
    if lavapipe_present() {
        let vk = module_ids(&tc, &r, &outs[1], Device::Vulkan, None, &input);
        assert_eq!(vk, host, "Gemma 3 on lavapipe differs from the host");
    }
}
