//! `kiln export --weights keep`: a GGUF's block-quantized matrices stay in
//! blocks (kiln's block form, `spec/quantized-weights.md`) and are widened
//! in the graph. Two tiny Llama GGUFs whose matrices use every block type
//! kiln keeps (scripts/fixtures/make_quant_fixtures.py) give transformers' ids —
//! transformers dequantizes the same GGUF to f32 — in kiln's interpreter,
//! with the tables whole and in row chunks, and on the host through IREE.
//! The real Gemma 3 270M Q4_K_M GGUF gives transformers' ids at every
//! position, and `kiln generate --prompt` prints its greedy continuation
//! with the redecode module and with the KV pair.

use crate::common;
use common::*;
use kiln::export::{export, ExportOptions, ExportReport, Weights};
use kiln::iree::{Device, Emulation, Target, Toolchain};
use kiln::models::Checkpoint;
use kiln::params::{GgmlType, ParamSource};
use std::path::Path;

const FIXTURES: [&str; 2] = ["tiny-llama-quant-mix", "tiny-llama-quant-tied"];

fn expected(name: &str) -> HfExpected {
    let p = fixture(&format!("gguf/quant/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn export_keep(name: &str, seq: usize, dir: &Path, max_tensor_bytes: u64) -> ExportReport {
    let ckpt = Checkpoint::open(fixture(&format!("gguf/quant/{name}.gguf"))).unwrap();
    export(
        &ckpt,
        &ExportOptions::new(seq, dir)
            .weights(Weights::Keep)
            .max_tensor_bytes(max_tensor_bytes),
    )
    .unwrap()
}

/// Every fixture case (of the first `seqs` SEQs) through `predict`, one
/// message per mismatching case.
fn failures(
    seqs: usize,
    max_tensor_bytes: u64,
    mut check: impl FnMut(&ExportReport),
    mut predict: impl FnMut(&ExportReport, &[i32]) -> Vec<i32>,
) -> Vec<String> {
    let mut out = Vec::new();
    for name in FIXTURES {
        let exp = expected(name);
        for rs in exp.seqs.iter().take(seqs) {
            let dir = tmpdir();
            let r = export_keep(name, rs.seq, dir.path(), max_tensor_bytes);
            check(&r);
            out.extend(case_mismatches(name, rs, |input| predict(&r, input)));
        }
    }
    out
}

/// The archive holds block parts, not widened matrices: every quantized
/// tensor as `.qs` (+ `.qh`) i32 words and `.scale` (+ `.min`).
fn check_archive(r: &ExportReport) {
    let src = <dyn ParamSource>::open(&r.irpa).unwrap();
    let names: Vec<String> = src.tensors().iter().map(|t| t.name.clone()).collect();
    let has = |n: &str| names.iter().any(|x| x == n);
    // Q8_0 or Q4_K embedding, Q5_K or Q4_0 query, F16 kept as it is.
    assert!(has("model.embed_tokens.weight.qs") && has("model.embed_tokens.weight.scale"));
    assert!(!has("model.embed_tokens.weight"));
    assert!(has("model.layers.0.self_attn.q_proj.weight.qs"));
    assert!(names.iter().any(|n| n.ends_with(".qh")));
    assert!(names.iter().any(|n| n.ends_with(".min")));
    assert!(has("model.norm.weight"));
    assert_eq!(r.manifest.weights_dtype, "keep");
}

#[test]
fn keep_fixtures_match_transformers_in_the_interpreter() {
    let f = failures(
        2,
        kiln::DecoderConfig::MAX_TENSOR_BYTES,
        |r| {
            check_archive(r);
            let text = std::fs::read_to_string(&r.mlir).unwrap();
            // Each matrix widened in one op IREE can compute at load.
            assert!(text.contains("= \"linalg.generic\"(") && text.contains("arith.shrui"));
            roundtrip(&r.mlir);
        },
        |r, input| kiln::interp::predict_file(&r.mlir, &r.irpa, None, input).unwrap(),
    );
    assert!(f.is_empty(), "{}", f.join("\n"));
}

/// A 32 KiB bound puts every block-quantized matrix in row chunks over
/// parts of its entries: the embedding gathers each chunk's rows of every
/// part, and products are joined by columns.
#[test]
fn keep_fixtures_in_row_chunks_match_transformers_in_the_interpreter() {
    let f = failures(
        2,
        32768,
        |r| {
            let text = std::fs::read_to_string(&r.mlir).unwrap();
            assert!(text.contains("\"model.embed_tokens.weight.qs\", {offset = 0 : i64, length = "));
        },
        |r, input| kiln::interp::predict_file(&r.mlir, &r.safetensors, None, input).unwrap(),
    );
    assert!(f.is_empty(), "{}", f.join("\n"));
}

#[test]
fn keep_fixtures_match_transformers_on_the_host() {
    let Some(tc) = toolchain() else { return };
    let vmfb = std::cell::RefCell::new(None);
    // SEQ 8 only: the interpreter covers SEQ 33.
    let f = failures(
        1,
        kiln::DecoderConfig::MAX_TENSOR_BYTES,
        |r| {
            let v = r.mlir.with_extension("vmfb");
            common::compiled::compile(&tc, &r.mlir, &Target::Host, &v, &[]).unwrap();
            *vmfb.borrow_mut() = Some(v);
        },
        |r, input| {
            let v = vmfb.borrow().clone().unwrap();
            module_ids(&tc, r, &v, Device::LocalTask, None, input)
        },
    );
    assert!(f.is_empty(), "{}", f.join("\n"));
}

/// Both fixtures (every block type) on arm64 under qemu and on Vulkan
/// through lavapipe: transformers' ids; and they compile for arm32. For
/// Vulkan, `kiln compile` re-declares the f16 scales as i32 pairs widened
/// by their bits (`Graph::f16_pairs_to_f32`); the codes are i32 words on
/// every target.
#[test]
fn keep_fixtures_match_transformers_on_arm64_and_vulkan() {
    let Some(tc) = toolchain() else { return };
    let arm64 = common::arm64_emulation(&tc);
    let lavapipe = lavapipe_present();
    let mut failures = Vec::new();
    for name in FIXTURES {
        let exp = expected(name);
        let rs = &exp.seqs[0];
        let dir = tmpdir();
        let r = export_keep(
            name,
            rs.seq,
            dir.path(),
            kiln::DecoderConfig::MAX_TENSOR_BYTES,
        );
        let targets = [
            Target::Arm64,
            Target::parse("vulkan").unwrap(),
            Target::Arm32,
        ];
        let outs = common::compiled::compile_many(&tc, &r.mlir, &targets, dir.path(), name, 2)
            .unwrap_or_else(|e| panic!("{name}: compiling failed: {e}"));
        assert!(outs[2].exists(), "{name}: no arm32 module");
        let run = |vmfb: &Path, device, emulate, input: &[i32]| {
            module_ids(&tc, &r, vmfb, device, emulate, input)
        };
        for (ci, c) in rs.cases.iter().enumerate() {
            let mut got = Vec::new();
            if arm64 {
                got.push((
                    "arm64",
                    run(
                        &outs[0],
                        Device::LocalTask,
                        Some(Emulation::Arm64),
                        &c.input,
                    ),
                ));
            }
            if lavapipe {
                got.push(("vulkan", run(&outs[1], Device::Vulkan, None, &c.input)));
            }
            for (what, ids) in got {
                let bad = mismatches(&ids, &c.argmax, &c.margin, 0..rs.seq);
                if !bad.is_empty() {
                    failures.push(format!("{name} {what} case {ci}: {}", bad.join("; ")));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Exports are deterministic, and the `keep` archive is no larger than
/// the GGUF's tensor data plus the f32 K-quant scales.
#[test]
fn keep_exports_are_deterministic() {
    let (a, b) = (tmpdir(), tmpdir());
    let ra = export_keep(
        FIXTURES[0],
        8,
        a.path(),
        kiln::DecoderConfig::MAX_TENSOR_BYTES,
    );
    let rb = export_keep(
        FIXTURES[0],
        8,
        b.path(),
        kiln::DecoderConfig::MAX_TENSOR_BYTES,
    );
    for (x, y) in [
        (&ra.irpa, &rb.irpa),
        (&ra.safetensors, &rb.safetensors),
        (&ra.mlir, &rb.mlir),
    ] {
        assert!(
            std::fs::read(x).unwrap() == std::fs::read(y).unwrap(),
            "{}",
            x.display()
        );
    }
}

/// `kiln export CHECKPOINT --seq 8 -o OUT` plus `extra` exits 2 with an
/// error that contains every one of `wants`, and writes nothing.
fn export_refused(checkpoint: &Path, extra: &[&str], wants: &[&str]) {
    let dir = tmpdir();
    let out = dir.path().join("out");
    let mut args = vec!["export", checkpoint.to_str().unwrap(), "--seq", "8"];
    args.extend(extra);
    args.extend(["-o", out.to_str().unwrap()]);
    let (code, _, err) = kiln(&args);
    assert_eq!(code, 2, "{err}");
    assert!(wants.iter().all(|w| err.contains(w)), "{err}");
    assert!(!out.exists() || files_in(&out).is_empty(), "partial output");
}

#[test]
fn keep_refuses_what_it_cannot_keep() {
    let dir = tmpdir();
    let out = dir.path().join("out");
    export_refused(
        &fixture("hf/tiny-qwen2"),
        &["--weights", "keep"],
        &["--weights keep", "not a GGUF file"],
    );

    // A matrix in a type kiln cannot keep (I8) is named with its type.
    let (meta, mut ts) = read_gguf(&fixture("gguf/quant/tiny-llama-quant-mix.gguf"));
    let t = ts
        .iter_mut()
        .find(|t| t.0 == "blk.0.attn_q.weight")
        .unwrap();
    let n: u64 = t.2.iter().product();
    *t = (
        t.0.clone(),
        GgmlType::I8,
        t.2.clone(),
        vec![1u8; n as usize],
    );
    let bad = dir.path().join("i8.gguf");
    write_gguf(&bad, &meta, &ts);
    export_refused(
        &bad,
        &["--weights", "keep"],
        &[
            "\"model.layers.0.self_attn.q_proj.weight\" is I8",
            "--weights keep cannot store",
        ],
    );
    // The same file exports as bf16.
    let (code, _, err) = kiln(&[
        "export",
        bad.to_str().unwrap(),
        "--seq",
        "8",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
}

/// The real Gemma 3 270M Q4_K_M GGUF (scripts/fetch-gemma3.sh) exported
/// once with `--weights keep` at the fixture's SEQ 16, with the KV pair
/// (P 4, N 16), and its redecode module compiled for the host; None when
/// the toolchain or the GGUF is missing and not required.
struct Gemma3 {
    _dir: tempfile::TempDir,
    gguf: std::path::PathBuf,
    tc: Toolchain,
    report: ExportReport,
    vmfb: std::path::PathBuf,
}

fn gemma3() -> Option<&'static Gemma3> {
    static G: std::sync::OnceLock<Option<Gemma3>> = std::sync::OnceLock::new();
    G.get_or_init(|| {
        let tc = toolchain()?;
        let gguf = gemma3_gguf()?;
        let dir = tmpdir();
        let ckpt = Checkpoint::open(&gguf).unwrap();
        let report = export(
            &ckpt,
            &ExportOptions::new(16, dir.path())
                .name("gemma3")
                .weights(Weights::Keep)
                .kv(kiln::export::KvCacheOptions::default()
                    .prompt_len(4)
                    .max_context(16)
                    .cache_dtype(kiln::graph::DType::F32)),
        )
        .unwrap();
        let vmfb = dir.path().join("gemma3-host.vmfb");
        common::compiled::compile(&tc, &report.mlir, &Target::Host, &vmfb, &[]).unwrap();
        Some(Gemma3 {
            _dir: dir,
            gguf,
            tc,
            report,
            vmfb,
        })
    })
    .as_ref()
}

/// Gemma 3 270M (Q8_0 embedding over the 2^27-byte bound, Q5_0 / Q4_K /
/// Q6_K blocks) with `--weights keep`: the archive is the size of the
/// GGUF's tensors (at most 1.15 × the file), and every position of the
/// fixture input equals transformers on the host
/// (scripts/fixtures/make_gemma3_fixture.py).
#[test]
fn gemma3_270m_keep_matches_transformers_on_the_host() {
    let Some(g) = gemma3() else { return };
    let exp: HfExpected = serde_json::from_str(
        &std::fs::read_to_string(fixture("gguf/quant/gemma3-270m.json")).unwrap(),
    )
    .unwrap();
    let rs = &exp.seqs[0];
    assert_eq!(rs.seq, g.report.manifest.seq);
    let (a, b) = (
        std::fs::metadata(&g.gguf).unwrap().len(),
        std::fs::metadata(&g.report.irpa).unwrap().len(),
    );
    assert!(b * 100 <= a * 115, "keep archive {b} bytes, GGUF {a}");
    let c = &rs.cases[0];
    let got = module_ids(&g.tc, &g.report, &g.vmfb, Device::LocalTask, None, &c.input);
    let bad = mismatches(&got, &c.argmax, &c.margin, 0..rs.seq);
    assert!(bad.is_empty(), "{}", bad.join("; "));
}

/// transformers' greedy continuation of a plain prompt
/// (gemma3-270m-generate.json, scripts/fixtures/make_gemma3_fixture.py).
#[derive(serde::Deserialize)]
struct Gemma3Generate {
    prompt: String,
    ids: Vec<i32>,
    max_new_tokens: usize,
    generate: Gemma3Continuation,
}

#[derive(serde::Deserialize)]
struct Gemma3Continuation {
    ids: Vec<u32>,
    text: String,
}

/// `kiln generate --prompt TEXT` on the Gemma 3 keep export — the prompt
/// encoded by kiln's tokenizer from the GGUF vocabulary (with `<bos>`),
/// the text decoded by it — prints transformers' greedy continuation, with
/// the redecode module and with the KV pair (the 6-token prompt prefilled
/// in chunks of P = 4).
#[test]
fn gemma3_270m_generate_prints_transformers_continuation() {
    let Some(g) = gemma3() else { return };
    let exp: Gemma3Generate = serde_json::from_str(
        &std::fs::read_to_string(fixture("gguf/quant/gemma3-270m-generate.json")).unwrap(),
    )
    .unwrap();
    let tok = kiln::tokenizer::open(&g.gguf).unwrap();
    let ids: Vec<i32> = tok
        .encode_prompt(&exp.prompt, false)
        .unwrap()
        .into_iter()
        .map(|x| x as i32)
        .collect();
    assert_eq!(ids, exp.ids, "kiln's tokenizer");
    assert_eq!(tok.decode(&exp.generate.ids).unwrap(), exp.generate.text);
    let kv_vmfb = g.vmfb.with_file_name("gemma3-kv-host.vmfb");
    let kv_mlir = g.report.kv_mlir.as_ref().unwrap();
    common::compiled::compile(&g.tc, kv_mlir, &Target::Host, &kv_vmfb, &[]).unwrap();
    let n = exp.max_new_tokens.to_string();
    for (what, vmfb, extra, driver) in [
        ("redecode", &g.vmfb, None, "SEQ 16"),
        ("KV", &kv_vmfb, Some("--kv-cache"), "KV cache P 4 N 16"),
    ] {
        let out = kiln_command()
            .args(["generate", vmfb.to_str().unwrap(), "--prompt", &exp.prompt])
            .args(["--max-new-tokens", &n])
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        assert!(
            stderr.contains(&format!("prompt: {} tokens; {driver}", exp.ids.len())),
            "{what}: {stderr}"
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            text.strip_suffix('\n').unwrap_or(&text),
            exp.generate.text,
            "{what}: {stderr}"
        );
    }
}

/// `kiln params inspect` names each block-quantized matrix of a keep
/// export's safetensors with its GGML type, shape, group and bytes.
#[test]
fn params_inspect_shows_block_quantized_matrices() {
    let dir = tmpdir();
    let r = export_keep(
        FIXTURES[0],
        8,
        dir.path(),
        kiln::DecoderConfig::MAX_TENSOR_BYTES,
    );
    let (code, out, err) = kiln(&[
        "params",
        "inspect",
        r.safetensors.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let blocks = v["blocks"].as_array().unwrap();
    // 16 matrices, F16 and BF16 ones stored plain.
    assert_eq!(blocks.len(), 14, "{blocks:?}");
    let by_name = |n: &str| blocks.iter().find(|b| b["name"] == n).unwrap().clone();
    let down = by_name("model.layers.0.mlp.down_proj.weight");
    assert_eq!(
        (
            down["type"].as_str(),
            down["shape"].clone(),
            down["group"].as_u64()
        ),
        (Some("Q6_K"), serde_json::json!([256, 512]), Some(16))
    );
    assert_eq!(by_name("model.embed_tokens.weight")["type"], "Q8_0");
    let (code, out, _) = kiln(&["params", "inspect", r.safetensors.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        out.contains("block-quantized matrices (kiln export --weights keep"),
        "{out}"
    );
    // The IRPA archive's entries are only bytes: the same matrices, types
    // and sizes, by the parts' byte counts, with element counts for shapes.
    let (code, out, err) = kiln(&["params", "inspect", r.irpa.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let irpa = v["blocks"].as_array().unwrap();
    assert_eq!(irpa.len(), blocks.len(), "{irpa:?}");
    for b in blocks {
        let i = irpa.iter().find(|i| i["name"] == b["name"]).unwrap();
        let [rows, k] = [0, 1].map(|d| b["shape"][d].as_u64().unwrap());
        assert_eq!(
            (&i["type"], &i["bytes"], &i["parts"], i["elements"].as_u64()),
            (&b["type"], &b["bytes"], &b["parts"], Some(rows * k)),
            "{}",
            b["name"]
        );
    }
    // `params diff` names the quantized matrices the parts make: the same
    // ones in both files of an export, and a keep export's against a
    // bf16 one's only in the first.
    let st = r.safetensors.to_str().unwrap();
    let (code, out, err) = kiln(&["params", "diff", st, r.irpa.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("block-quantized matrices: 14 in A, 14 in B") && !out.contains(" in A only"),
        "{out}"
    );
    let plain = tmpdir();
    let ckpt = Checkpoint::open(fixture(&format!("gguf/quant/{}.gguf", FIXTURES[0]))).unwrap();
    let bf16 = export(&ckpt, &ExportOptions::new(8, plain.path())).unwrap();
    let (code, out, _) = kiln(&["params", "diff", st, bf16.safetensors.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("block-quantized matrices: 14 in A, 0 in B")
            && out
                .contains("  model.layers.0.mlp.down_proj.weight: Q6_K [256, 512], groups of 16,")
            && out.contains(" in A only"),
        "{out}"
    );
}

/// kiln's Q8_0 and Q4_0 quantizer (`--weights q8_0|q4_0`) writes the bytes
/// `gguf.quants.quantize` writes for the same f32 rows (rounding ties,
/// a zero block and a negative largest magnitude included).
#[test]
fn quantizer_bytes_equal_the_gguf_packages() {
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("gguf/quant/quantize.json")).unwrap(),
    )
    .unwrap();
    let x: Vec<f32> = v["f32_bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| f32::from_bits(b.as_u64().unwrap() as u32))
        .collect();
    for (ty, key) in [(GgmlType::Q8_0, "Q8_0"), (GgmlType::Q4_0, "Q4_0")] {
        let got = ty.quantize(&x).unwrap();
        let hex: String = got.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, v[key].as_str().unwrap(), "{key}");
    }
}

/// The share of positions (ties excepted) where `got` equals transformers.
fn agreement(got: &[i32], want: &[i32], margin: &[f64]) -> (usize, usize) {
    let counted: Vec<usize> = (0..want.len())
        .filter(|&p| margin[p] >= TIE_MARGIN)
        .collect();
    let same = counted.iter().filter(|&&p| got[p] == want[p]).count();
    (same, counted.len())
}

/// `--weights q8_0` and `q4_0` from an HF checkpoint: every matrix stored
/// in blocks, vectors as bf16; `w8a8`: every matrix as i8 rows, the
/// activations rounded to i8 at each product; `w8a16`: the same rows, the
/// activations as two i8 terms; `w16a16`: two terms on both sides. The ids are not
/// transformers' f32 ones exactly (the weights are rounded), so the test
/// reports the agreement and requires most of it
/// (spec/quantized-weights.md records it).
#[test]
fn quantized_forms_from_an_hf_checkpoint() {
    let name = "tiny-llama-untied-mha";
    let exp = hf_expected(name);
    let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
    // bf16 for scale: it rounds the weights too.
    let forms = [
        (Weights::Dtype(kiln::graph::DType::BF16), 0.9),
        (Weights::Quantize(GgmlType::Q8_0), 0.9),
        (Weights::Quantize(GgmlType::Q4_0), 0.5),
        (Weights::W8A8, 0.9),
        // The weights' rounding to i8 per row is all w8a16 loses: on these
        // random weights as much as q8_0's blocks (116/123).
        (Weights::W8A16, 0.9),
        // Two terms on both sides: about 15 bits, bf16's share or more.
        (Weights::W8A16E, 0.9),
        (Weights::W16A16, 0.95),
    ];
    for (weights, floor) in forms {
        let (mut same, mut all) = (0, 0);
        for rs in &exp.seqs {
            let dir = tmpdir();
            let r = export(
                &ckpt,
                &ExportOptions::new(rs.seq, dir.path()).weights(weights),
            )
            .unwrap();
            let src = <dyn ParamSource>::open(&r.safetensors).unwrap();
            let names: Vec<String> = src.tensors().iter().map(|t| t.name.clone()).collect();
            let has = |n: &str| names.iter().any(|x| x == n);
            let blocks = has("model.layers.0.mlp.down_proj.weight.qs");
            assert_eq!(blocks, matches!(weights, Weights::Quantize(_)));
            assert_eq!(
                has("model.layers.0.mlp.down_proj.weight.q8"),
                matches!(weights, Weights::W8A8 | Weights::W8A16 | Weights::W8A16E)
            );
            // Only the embedding table gets w8a16e's second term.
            assert_eq!(
                has("model.embed_tokens.weight.q8lo"),
                weights == Weights::W8A16E
            );
            assert!(!has("model.layers.0.mlp.down_proj.weight.q8lo"));
            assert_eq!(
                has("model.layers.0.mlp.down_proj.weight.q8x2"),
                weights == Weights::W16A16
            );
            assert!(names.contains(&"model.norm.weight".to_string()));
            assert_eq!(r.manifest.weights_dtype, weights.to_string());
            for c in &rs.cases {
                let got = kiln::interp::predict_file(&r.mlir, &r.irpa, None, &c.input).unwrap();
                let (s, a) = agreement(&got, &c.argmax, &c.margin);
                same += s;
                all += a;
            }
        }
        let share = same as f64 / all as f64;
        eprintln!(
            "{name} --weights {weights}: {same}/{all} non-tie positions equal f32 transformers"
        );
        assert!(
            share >= floor,
            "{weights}: only {same}/{all} positions agree"
        );
    }
    // Rows of 48 are not whole blocks: a clear error naming the tensor.
    export_refused(
        &fixture("hf/tiny-qwen2"),
        &["--weights", "q4_0"],
        &[
            "rows of 48 are not whole 32-element blocks",
            "--weights q4_0",
        ],
    );
}

/// `--constants inline` prints every weight part as an exact constant,
/// i8 codes and bf16 pairs included: the inline module gives the ids of the
/// externalized one, for every stored form.
#[test]
fn inline_constants_equal_parameters_for_every_weight_form() {
    use kiln::stablehlo::ConstantPolicy;
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-untied-mha")).unwrap();
    let tokens = [1, 5, 9, 2, 7, 3, 0, 0];
    for weights in [
        Weights::Dtype(kiln::graph::DType::BF16),
        Weights::Quantize(GgmlType::Q4_0),
        Weights::W8A8,
        Weights::W8A16,
        Weights::W8A16E,
        Weights::W16A16,
    ] {
        let (ext, inl) = (tmpdir(), tmpdir());
        let a = export(&ckpt, &ExportOptions::new(8, ext.path()).weights(weights)).unwrap();
        let b = export(
            &ckpt,
            &ExportOptions::new(8, inl.path())
                .weights(weights)
                .constants(ConstantPolicy::InlineAlways),
        )
        .unwrap_or_else(|e| panic!("--weights {weights} --constants inline: {e}"));
        let text = std::fs::read_to_string(&b.mlir).unwrap();
        assert!(
            !text.contains("flow.parameter.named"),
            "{weights}: a parameter left"
        );
        let by_params = kiln::interp::predict_file(&a.mlir, &a.irpa, None, &tokens).unwrap();
        let inline = kiln::interp::predict_file(&b.mlir, &b.irpa, None, &tokens).unwrap();
        assert_eq!(inline, by_params, "--weights {weights}");
    }
}

/// `--weights-for PATTERN=FORM`: per-tensor exceptions to `--weights`
/// (the last match wins); a pattern that names no tensor and an unknown
/// form are errors naming the flag.
#[test]
fn weights_for_overrides_single_tensors() {
    let dir = tmpdir();
    let out = dir.path().join("out");
    let gguf = fixture("gguf/quant/tiny-llama-quant-mix.gguf");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "export",
            gguf.to_str().unwrap(),
            "--seq",
            "8",
            "--weights",
            "keep",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(["-o".into(), out.to_str().unwrap().into()]);
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |a: Vec<String>| kiln(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let (code, _, err) = run(args(&[
        "--weights-for",
        "embed_tokens=bf16",
        "--weights-for",
        "lm_head=q4_0",
        "--weights-for",
        "lm_head=q8_0",
    ]));
    assert_eq!(code, 0, "{err}");
    let st = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .unwrap();
    let src = <dyn ParamSource>::open(&st).unwrap();
    let ts = src.tensors();
    let get = |n: &str| ts.iter().find(|t| t.name == n).map(|t| t.dtype.to_string());
    assert_eq!(get("model.embed_tokens.weight").as_deref(), Some("BF16"));
    assert_eq!(get("model.embed_tokens.weight.qs"), None);
    // lm_head is Q6_K in the file; q8_0 (the last match) requantizes it.
    let (_, json, _) = kiln(&["params", "inspect", st.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let head = v["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "lm_head.weight")
        .unwrap()
        .clone();
    assert_eq!(head["type"], "Q8_0");
    for (extra, want) in [
        (
            ["--weights-for", "no_such_tensor=bf16"],
            "--weights-for no_such_tensor=…: no tensor",
        ),
        (
            ["--weights-for", "lm_head=int3"],
            "--weights-for lm_head=int3: FORM must be",
        ),
    ] {
        let (code, _, err) = run(args(&extra));
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// `--weights w8a8`, `w8a16` and `w16a16` on the tiny untied HF model: IREE's i8 ×
/// i8 → i32 products, on the host and on arm64 under qemu, give the
/// interpreter's ids at every position (both round the activations alike
/// and the integer sums are exact); arm32 compiles. Vulkan is refused up
/// front, naming the form.
#[test]
fn i8_forms_run_on_host_and_arm64_as_in_the_interpreter() {
    let Some(tc) = toolchain() else { return };
    let arm64 = common::arm64_emulation(&tc);
    for weights in [
        Weights::W8A8,
        Weights::W8A16,
        Weights::W8A16E,
        Weights::W16A16,
    ] {
        i8_rows_run_on_host_and_arm64_as_in_the_interpreter(&tc, weights, arm64);
    }
}

/// One i8 form on the host, and on arm64 under qemu when `arm64`.
fn i8_rows_run_on_host_and_arm64_as_in_the_interpreter(
    tc: &Toolchain,
    weights: Weights,
    arm64: bool,
) {
    let tc = tc.clone();
    let name = "tiny-llama-untied-mha";
    let rs = &hf_expected(name).seqs[0];
    let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
    let dir = tmpdir();
    let r = export(
        &ckpt,
        &ExportOptions::new(rs.seq, dir.path()).weights(weights),
    )
    .unwrap();
    assert_eq!(r.manifest.weights_dtype, weights.to_string());
    assert!(
        r.vulkan_issues
            .iter()
            .any(|i| i.contains(&weights.to_string())),
        "{:?}",
        r.vulkan_issues
    );
    // `params inspect` lists the i8 matrices, from either file (the IRPA
    // by its entries' byte counts): all 16 of the model's, with shapes.
    for file in [&r.safetensors, &r.irpa] {
        let (code, out, err) = kiln(&["params", "inspect", file.to_str().unwrap(), "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let rows = v["int8_rows"].as_array().unwrap();
        assert_eq!(rows.len(), 16, "{}: {rows:?}", file.display());
        let down = rows
            .iter()
            .find(|m| m["name"] == "model.layers.0.mlp.down_proj.weight")
            .unwrap();
        let terms = if weights == Weights::W16A16 { 2 } else { 1 };
        assert_eq!(down["shape"], serde_json::json!([32, 64]));
        assert_eq!(down["terms"], terms);
        assert_eq!(down["bytes"], terms * 32 * 64 + 32 * 4);
        let emb = rows
            .iter()
            .find(|m| m["name"] == "model.embed_tokens.weight")
            .unwrap();
        let parts = match weights {
            Weights::W16A16 => serde_json::json!(["q8x2", "scale"]),
            Weights::W8A16E => serde_json::json!(["q8", "scale", "q8lo"]),
            _ => serde_json::json!(["q8", "scale"]),
        };
        assert_eq!(emb["parts"], parts, "{emb}");
    }
    let targets = [Target::Host, Target::Arm64, Target::Arm32];
    let outs = common::compiled::compile_many(&tc, &r.mlir, &targets, dir.path(), name, 2).unwrap();
    assert!(outs[2].exists());
    let mut failures = Vec::new();
    for (ci, c) in rs.cases.iter().enumerate() {
        let want = kiln::interp::predict_file(&r.mlir, &r.irpa, None, &c.input).unwrap();
        for (what, vmfb, emulate) in [
            ("host", &outs[0], None),
            ("arm64", &outs[1], Some(Emulation::Arm64)),
        ] {
            if emulate.is_some() && !arm64 {
                continue;
            }
            let got = module_ids(&tc, &r, vmfb, Device::LocalTask, emulate, &c.input);
            if got != want {
                failures.push(format!(
                    "{weights} case {ci} {what}: {got:?}, interpreter {want:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let vk = dir.path().join("vk.vmfb");
    let e = common::compiled::compile(&tc, &r.mlir, &Target::parse("vulkan").unwrap(), &vk, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&weights.to_string()) && e.contains("CPU-only"),
        "{e}"
    );
    assert!(!vk.exists());
}

/// `kiln export --weights fast` picks the fastest CPU form at llama.cpp's
/// accuracy for the host (w8a16, spec/quantized-weights.md), says so (and
/// why: no 4-bit kernel there), and the manifest names the form it chose;
/// the same archive bytes as `--weights w8a16`. `--fast-for arm64` picks
/// w4a16 for a GGUF with 4-bit matrices (the same archive as `--weights
/// w4a16`) and w8a16 for a checkpoint without; `--fast-for` refuses
/// Vulkan and any form but fast.
/// On a Gemma 3 checkpoint it adds its exception, the MLP's down
/// projections as w16a16, says that too and records it with the
/// `--weights-for` flags; the user's own flag for the same tensors wins.
#[test]
fn weights_fast_chooses_w8a16_and_says_so() {
    let dir = tmpdir();
    let out = |ckpt: &str, name: &str, form: &str, more: &[&str]| {
        let ckpt = fixture(ckpt);
        let mut args = vec![
            "export",
            ckpt.to_str().unwrap(),
            "--seq",
            "8",
            "--out",
            dir.path().to_str().unwrap(),
            "--name",
            name,
            "--weights",
            form,
        ];
        args.extend_from_slice(more);
        let (code, _, err) = kiln(&args);
        assert_eq!(code, 0, "{err}");
        err
    };
    let manifest = |name: &str| -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(format!("{name}.json"))).unwrap(),
        )
        .unwrap()
    };
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let llama = "hf/tiny-llama-untied-mha";
    let said = out(llama, "fast", "fast", &[]);
    assert!(
        said.contains("--weights fast chose w8a16 for host:"),
        "{said}"
    );
    assert!(said.contains("no 4-bit kernel there"), "{said}");
    let said = out(llama, "fast-arm", "fast", &["--fast-for", "arm64"]);
    assert!(
        said.contains("--weights fast chose w8a16 for arm64:"),
        "{said}"
    );
    assert!(said.contains("no GGUF 4-bit matrices"), "{said}");
    let mix = "gguf/quant/tiny-llama-quant-mix.gguf";
    let said = out(mix, "mix-fast", "fast", &["--fast-for", "arm64"]);
    assert!(
        said.contains("--weights fast chose w4a16 for arm64:"),
        "{said}"
    );
    assert_eq!(manifest("mix-fast")["weights_dtype"], "w4a16");
    out(mix, "mix-w4", "w4a16", &[]);
    assert!(read("mix-fast.irpa") == read("mix-w4.irpa"));
    for (flags, want) in [
        (["fast", "vulkan"], "--fast-for vulkan: fast is a CPU form"),
        (
            ["bf16", "arm64"],
            "--fast-for chooses for --weights fast, not --weights bf16",
        ),
    ] {
        export_refused(
            &fixture(llama),
            &["--weights", flags[0], "--fast-for", flags[1]],
            &[want],
        );
    }
    assert!(!out(llama, "named", "w8a16", &[]).contains("--weights fast"));
    assert_eq!(manifest("fast")["weights_dtype"], "w8a16");
    assert!(read("fast.irpa") == read("named.irpa"));

    let gemma = "hf/tiny-gemma3";
    let said = out(gemma, "g-fast", "fast", &[]);
    assert!(
        said.contains(
            "--weights fast chose w8a16 for host, with --weights-for embed_tokens=w8a16e \
             --weights-for mlp.down_proj=w16a16:"
        ),
        "{said}"
    );
    let m = manifest("g-fast");
    assert_eq!(m["weights_dtype"], "w8a16");
    assert_eq!(
        m["recipe"]["weights_for"],
        serde_json::json!(["embed_tokens=w8a16e", "mlp.down_proj=w16a16"])
    );
    out(
        gemma,
        "g-named",
        "w8a16",
        &[
            "--weights-for",
            "embed_tokens=w8a16e",
            "--weights-for",
            "mlp.down_proj=w16a16",
        ],
    );
    assert!(read("g-fast.irpa") == read("g-named.irpa"));
    let src = <dyn ParamSource>::open(dir.path().join("g-fast.safetensors")).unwrap();
    let names: Vec<String> = src.tensors().iter().map(|t| t.name.clone()).collect();
    let has = |n: &str| names.iter().any(|x| x == n);
    assert!(has("model.layers.0.mlp.down_proj.weight.q8x2"));
    assert!(has("model.layers.0.mlp.up_proj.weight.q8"));
    assert!(has("model.embed_tokens.weight.q8") && has("model.embed_tokens.weight.q8lo"));
    // The user's flags come after fast's, so they win.
    out(
        gemma,
        "g-mine",
        "fast",
        &[
            "--weights-for",
            "mlp.down_proj=w8a16",
            "--weights-for",
            "embed_tokens=w8a16",
        ],
    );
    out(gemma, "g-w8a16", "w8a16", &[]);
    assert!(read("g-mine.irpa") == read("g-w8a16.irpa"));
}

/// Gemma 3 270M with `--weights fast` (w8a16, its embedding w8a16e and
/// its MLP down projections w16a16), in the interpreter: at least 14 of
/// the fixture's 16 positions equal transformers' (w8a8 keeps 11; the two
/// it may miss are near-ties, margins 0.07 and 0.17). The accuracy line
/// is measured on text: [`gemma3_270m_fast_meets_the_accuracy_line_on_text`].
#[test]
fn gemma3_270m_fast_agrees_with_transformers_in_the_interpreter() {
    let Some(gguf) = gemma3_gguf() else { return };
    let exp: HfExpected = serde_json::from_str(
        &std::fs::read_to_string(fixture("gguf/quant/gemma3-270m.json")).unwrap(),
    )
    .unwrap();
    let rs = &exp.seqs[0];
    let dir = tmpdir();
    let r = export(
        &Checkpoint::open(&gguf).unwrap(),
        &ExportOptions::new(rs.seq, dir.path())
            .name("gemma3")
            .weights(Weights::FAST)
            .weights_for(Weights::fast_exceptions(kiln::models::Family::Gemma3)),
    )
    .unwrap();
    let c = &rs.cases[0];
    let got = kiln::interp::predict_file(&r.mlir, &r.irpa, None, &c.input).unwrap();
    let (same, all) = agreement(&got, &c.argmax, &c.margin);
    eprintln!("Gemma 3 270M --weights fast: {same}/{all} non-tie positions equal transformers");
    assert!(same + 2 >= all && all == 16, "{same}/{all}: {got:?}");
}

/// The accuracy line of `--weights fast` on Gemma 3 270M Q4_K_M, for the
/// host (`w8a16`) and for arm64 (`w4a16`: its Q4_K attention outputs keep
/// their codes as i4), both with `fast`'s exceptions: on 768 positions of
/// text (8 windows of 96 tokens), at least 95 % of the non-tie positions
/// equal transformers' on the host (735/768 measured with each; `w8a16`
/// alone 696, llama.cpp's rounding simulated 725).
#[test]
fn gemma3_270m_fast_meets_the_accuracy_line_on_text() {
    let (Some(tc), Some(gguf)) = (toolchain(), gemma3_gguf()) else {
        return;
    };
    for weights in [Weights::FAST, Weights::W4A16] {
        let (same, all) = text_windows_agreement(
            &tc,
            &gguf,
            "gguf/quant/gemma3-270m-text-windows.json",
            |dir| {
                ExportOptions::new(96, dir)
                    .name("text")
                    .weights(weights)
                    .weights_for(Weights::fast_exceptions(kiln::models::Family::Gemma3))
                    .max_tensor_bytes(0)
            },
        );
        eprintln!(
            "Gemma 3 270M --weights {weights}, text: {same}/{all} non-tie positions equal transformers"
        );
        assert!(
            all >= 700 && same * 100 >= 95 * all,
            "{weights}: {same}/{all}"
        );
    }
}

/// `--weights w4a16` on the two tiny GGUFs whose matrices use every 4-bit
/// type (Q4_0, Q4_1, Q4_K) beside others. The 4-bit matrices are stored
/// as i4 codes (`.q4`, half a byte per weight) with their own block scales
/// (Q4_0, Q4_1: f16 `.scale4`, and `.min4` where the type has minimums;
/// Q4_K: 6-bit `.scale4` and `.min4` and f16 `.d4` and `.dmin4`), a Q4_K embedding
/// too (gathered, and the tied head's product); the other matrices as
/// `w8a16`'s i8 rows. IREE's host, arm64
/// (under qemu) and arm32 (under qemu) modules give the interpreter's ids
/// at every position, and those equal transformers' (on the GGUF
/// dequantized to f32) wherever `w8a16` does: only the activations'
/// rounding differs from `keep`. Vulkan is refused, naming the form, and
/// an HF checkpoint (no GGUF codes to keep) is refused, naming the file.
#[test]
fn w4a16_keeps_the_gguf_codes_on_every_cpu_target() {
    let Some(tc) = toolchain() else { return };
    let arm64 = common::arm64_emulation(&tc);
    let arm32 = common::arm32_kiln_runtime(&tc).is_some();
    let mut failures = Vec::new();
    for name in FIXTURES {
        let exp = expected(name);
        let rs = &exp.seqs[0];
        let dir = tmpdir();
        let ckpt = Checkpoint::open(fixture(&format!("gguf/quant/{name}.gguf"))).unwrap();
        let form = |w: Weights, sub: &str| {
            let out = dir.path().join(sub);
            export(&ckpt, &ExportOptions::new(rs.seq, &out).weights(w)).unwrap()
        };
        let r = form(Weights::W4A16, "w4");
        let w8 = form(Weights::W8A16, "w8");
        assert_eq!(r.manifest.weights_dtype, "w4a16");
        let src = <dyn ParamSource>::open(&r.irpa).unwrap();
        let meta = |n: &str| src.meta(n).map(|m| m.nbytes);
        let mut four_bit = 0;
        for (hf, shape) in ckpt.tensors() {
            let q4 = meta(&format!("{hf}.q4"));
            match ckpt.ggml_type(hf) {
                Some(t @ (GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K))
                    if shape.len() == 2 =>
                {
                    four_bit += 1;
                    let (rows, cols) = (shape[0] as u64, shape[1] as u64);
                    assert_eq!(q4, Some(rows * cols / 2), "{hf}");
                    let min = meta(&format!("{hf}.min4"));
                    assert_eq!(min.is_some(), t != GgmlType::Q4_0, "{hf} {t}");
                    // Q4_K keeps its 6-bit block scales and minimums (i8)
                    // and its super-blocks' f16 d and dmin; Q4_0 and Q4_1
                    // their f16 block scales (and minimums).
                    let (block, supers) = match t {
                        GgmlType::Q4_K => (rows * cols / 32, Some(rows * cols / 256 * 2)),
                        _ => (rows * cols / 32 * 2, None),
                    };
                    assert_eq!(meta(&format!("{hf}.scale4")), Some(block), "{hf}");
                    assert!(min.is_none_or(|m| m == block), "{hf}");
                    assert_eq!(meta(&format!("{hf}.d4")), supers, "{hf}");
                    assert_eq!(meta(&format!("{hf}.dmin4")), supers, "{hf}");
                }
                _ => assert_eq!(q4, None, "{hf}"),
            }
        }
        assert!(four_bit >= 5, "{name}: {four_bit} 4-bit matrices");
        assert!(
            r.vulkan_issues.iter().any(|i| i.contains("w4a16")),
            "{:?}",
            r.vulkan_issues
        );
        let targets = [Target::Host, Target::Arm64, Target::Arm32];
        let outs =
            common::compiled::compile_many(&tc, &r.mlir, &targets, dir.path(), name, 2).unwrap();
        for (ci, c) in rs.cases.iter().enumerate() {
            let want = kiln::interp::predict_file(&r.mlir, &r.irpa, None, &c.input).unwrap();
            let w8a16 = kiln::interp::predict_file(&w8.mlir, &w8.irpa, None, &c.input).unwrap();
            let runs = [
                ("host", &outs[0], Device::LocalTask, None, true),
                (
                    "arm64",
                    &outs[1],
                    Device::LocalTask,
                    Some(Emulation::Arm64),
                    arm64,
                ),
                (
                    "arm32",
                    &outs[2],
                    Device::LocalSync,
                    Some(Emulation::Arm32),
                    arm32,
                ),
            ];
            for (what, vmfb, device, emulate, present) in runs {
                if !present {
                    continue;
                }
                let got = module_ids(&tc, &r, vmfb, device, emulate, &c.input);
                if got != want {
                    failures.push(format!(
                        "{name} case {ci} {what}: {got:?}, interpreter {want:?}"
                    ));
                }
            }
            let (same, all) = agreement(&want, &c.argmax, &c.margin);
            let (same8, _) = agreement(&w8a16, &c.argmax, &c.margin);
            eprintln!("{name} case {ci}: w4a16 {same}/{all} non-tie positions equal transformers, w8a16 {same8}");
            if same < same8 {
                failures.push(format!(
                    "{name} case {ci}: w4a16 {same}/{all}, w8a16 {same8}"
                ));
            }
        }
        // Packed at compile time, the i4 codes are left to the load (IREE
        // 3.13 cannot import them), said once, not once per matrix; the ids
        // stay the interpreter's.
        let (code, _, err) = kiln(&["compile", s(&r.mlir), "-t", "host", "--pack", "-q"]);
        assert_eq!(code, 0, "{err}");
        assert!(!err.contains("not importing"), "{err}");
        assert!(err.contains("i4 weight(s) are packed at load"), "{err}");
        let packed = r.mlir.with_file_name(format!("{name}-host.vmfb"));
        for c in &rs.cases {
            let want = kiln::interp::predict_file(&r.mlir, &r.irpa, None, &c.input).unwrap();
            let tokens: Vec<String> = c.input.iter().map(|t| t.to_string()).collect();
            let (code, out, err) = kiln(&["run", s(&packed), "--tokens", &tokens.join(","), "-q"]);
            assert_eq!(code, 0, "{err}");
            let got: Vec<i32> = out.split_whitespace().map(|t| t.parse().unwrap()).collect();
            assert_eq!(got, want, "{name} packed");
        }
        let vk = dir.path().join("vk.vmfb");
        let e =
            common::compiled::compile(&tc, &r.mlir, &Target::parse("vulkan").unwrap(), &vk, &[])
                .unwrap_err()
                .to_string();
        assert!(e.contains("CPU-only") && !vk.exists(), "{e}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let hf = fixture("hf/tiny-llama-untied-mha");
    export_refused(
        &hf,
        &["--weights", "w4a16"],
        &["w4a16", "not a GGUF file", "tiny-llama-untied-mha"],
    );
}
