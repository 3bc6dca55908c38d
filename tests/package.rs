//! `kiln package`: the Android asset layout.
//!
//! - end to end (needs IREE): export a tiny checkpoint, compile it for
//!   host/arm64/arm32, package it, recompute the size and sha256 of every
//!   file the manifest lists, and run the packaged host module;
//! - bad input (no IREE needed: fabricated exports): missing manifest, no
//!   modules, changed irpa, no tokenizer → exit 2, one line, no output;
//! - the GGUF tokenizer.json writer against `kiln::tokenizer::from_gguf` and
//!   llama.cpp's ids on the real SmolLM2 GGUF.

use crate::common;

use common::{files_in, fixture, kiln_output, s, tmpdir};
use kiln::manifest::{AssetsManifest, FileRecord};
use kiln::models::{DecoderConfig, Family, RopeScaling};
use kiln::tokenizer::{Tokenizer, TokenizerFiles};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

fn sha256(p: &Path) -> String {
    let bytes = std::fs::read(p).unwrap();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Asserts a failed run: exit 2 and one `kiln: error:` line naming `needle`.
fn assert_one_line_error(o: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    assert!(lines[0].starts_with("kiln: error: "), "{err}");
    assert!(lines[0].contains(needle), "{needle:?} not in {err}");
    assert!(o.stdout.is_empty());
}

/// Reads `NAME.manifest.json` and checks every listed file against the
/// bytes on disk (size and a freshly computed sha256), that every module,
/// the parameters and the tokenizer are among them, and that the directory
/// holds exactly these files.
fn check_assets(dir: &Path, name: &str) -> AssetsManifest {
    let mp = dir.join(format!("{name}.manifest.json"));
    let m: AssetsManifest = serde_json::from_str(&std::fs::read_to_string(&mp).unwrap()).unwrap();
    assert_eq!(m.format, kiln::manifest::AssetsManifest::FORMAT);
    assert_eq!(m.kiln_version, kiln::VERSION);
    assert_eq!(m.iree_version, kiln::iree::Toolchain::IREE_VERSION);
    assert_eq!(m.name, name);
    for f in &m.files {
        let p = dir.join(&f.path);
        let meta = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(meta.len(), f.bytes, "{}", f.path);
        assert_eq!(sha256(&p), f.sha256, "{}", f.path);
    }
    let listed: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "files sorted by path");
    assert!(listed.contains(&m.parameters.as_str()));
    for e in m
        .modules
        .values()
        .chain(m.kv.iter().flat_map(|kv| kv.modules.values()))
    {
        assert!(listed.contains(&e.path.as_str()), "{}", e.path);
    }
    for t in m.tokenizer.iter().chain(m.tokenizer_config.iter()) {
        assert!(listed.contains(&t.as_str()), "{t}");
    }
    let mut want: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
    want.push(format!("{name}.manifest.json"));
    want.sort();
    assert_eq!(
        files_in(dir),
        want,
        "the assets directory holds exactly the manifest's files"
    );
    m
}

/// A tiny HF tokenizer folder: tokenizer.json, tokenizer_config.json and
/// chat_template.jinja (the template wins, as in transformers 5).
fn tiny_tokenizer_dir(dir: &Path) -> PathBuf {
    let t = dir.join("tok");
    std::fs::create_dir_all(&t).unwrap();
    let tokenizer = json!({
        "version": "1.0",
        "added_tokens": [{"id": 3, "content": "<|end|>", "special": true, "normalized": false,
                          "single_word": false, "lstrip": false, "rstrip": false}],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<|end|>": 3}, "merges": [["a", "b"]]}
    });
    std::fs::write(t.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    std::fs::write(
        t.join("tokenizer_config.json"),
        json!({"bos_token": "a", "eos_token": "<|end|>", "chat_template": "old"}).to_string(),
    )
    .unwrap();
    std::fs::write(
        t.join("chat_template.jinja"),
        "{% for m in messages %}{{ m['content'] }}<|end|>{% endfor %}",
    )
    .unwrap();
    t
}

// --- end to end, with IREE ------------------------------------------------

#[test]
fn kv_pair_is_packaged_beside_the_redecode_modules() {
    let Some(tc) = common::toolchain() else {
        return;
    };
    use kiln::iree::Target;
    let dir = tmpdir();
    let exp = dir.path().join("exp");
    let ckpt = kiln::models::Checkpoint::open(fixture("hf/tiny-llama-tied-gqa")).unwrap();
    let rep = kiln::export::export(
        &ckpt,
        &kiln::export::ExportOptions::new(8, exp.clone())
            .name("tiny")
            .kv(kiln::export::KvCacheOptions::default()
                .max_context(16)
                .cache_dtype(kiln::graph::DType::F32)),
    )
    .unwrap();
    let arm64 = [Target::Arm64];
    common::compiled::compile_many(&tc, &rep.mlir, &arm64, &exp, "tiny", 1).unwrap();
    let kv_mlir = rep.kv_mlir.clone().unwrap();
    let outs = common::compiled::compile_many(&tc, &kv_mlir, &arm64, &exp, "tiny-kv", 1).unwrap();
    let assets = dir.path().join("assets");
    let o = kiln_output(&[
        "package",
        s(&rep.manifest_path),
        "--out",
        s(&assets),
        "--no-tokenizer",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stderr: {err}");
    let m = check_assets(&assets, "tiny");
    let kv = m.kv.expect("the KV pair is packaged");
    let modules = &kv.modules;
    let kv = &kv.pair;
    assert_eq!((kv.prompt_len, kv.max_context), (8, 16));
    assert_eq!(kv.prefill, "tiny_prefill");
    assert_eq!(kv.decode, "tiny_decode");
    assert_eq!(kv.cache_shape, [2, 2, 16, 12]);
    let keys: Vec<&str> = modules.keys().map(String::as_str).collect();
    assert_eq!(keys, ["arm64-v8a"]);
    let f = m
        .files
        .iter()
        .find(|f| f.path == "tiny-kv-arm64-v8a.vmfb")
        .unwrap();
    assert_eq!(f.sha256, sha256(&outs[0]));
}

#[test]
fn export_compile_package_run() {
    let Some(tc) = common::toolchain() else {
        return;
    };
    use kiln::iree::Target;
    let dir = tmpdir();
    let exp = dir.path().join("exp");
    let ckpt = kiln::models::Checkpoint::open(fixture("hf/tiny-llama-tied-gqa")).unwrap();
    let rep = kiln::export::export(
        &ckpt,
        &kiln::export::ExportOptions::new(8, exp.clone()).name("tiny"),
    )
    .unwrap();
    // Vulkan is left out: the pinned IREE cannot compile bf16 graphs for
    // it yet; packaging treats it as optional.
    let targets = [Target::Host, Target::Arm64, Target::Arm32];
    let outs = common::compiled::compile_many(&tc, &rep.mlir, &targets, &exp, "tiny", 2).unwrap();
    let tok = tiny_tokenizer_dir(dir.path());
    let assets = dir.path().join("assets");
    let manifest_path = rep.manifest_path.clone();
    let o = kiln_output(&[
        "package",
        s(&manifest_path),
        "--out",
        s(&assets),
        "--tokenizer",
        s(&tok),
        "--include-host",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stderr: {err}");
    assert!(err.contains("tiny-vulkan.vmfb not found"), "{err}");

    let m = check_assets(&assets, "tiny");
    let e = &rep.manifest;
    assert_eq!((m.seq, &m.function, &m.scope), (8, &e.function, &e.scope));
    assert_eq!(m.input, "tensor<1x8xi32>");
    assert_eq!(m.output, "tensor<8xi32>");
    assert_eq!(m.vocab_size, e.vocab_size);
    assert_eq!(m.bos_token_id, e.bos_token_id);
    assert_eq!(m.eos_token_ids, e.eos_token_ids);
    let keys: Vec<&str> = m.modules.keys().map(String::as_str).collect();
    assert_eq!(keys, ["arm64-v8a", "armeabi-v7a", "host"]);
    assert_eq!(m.modules["arm64-v8a"].path, "tiny-arm64-v8a.vmfb");
    assert_eq!(m.modules["armeabi-v7a"].path, "tiny-armeabi-v7a.vmfb");
    assert_eq!(m.modules["armeabi-v7a"].device.name(), "local-sync");
    assert_eq!(m.parameters, "tiny.irpa");
    // The copies are the exported and compiled files, byte for byte.
    let irpa = m.files.iter().find(|f| f.path == "tiny.irpa").unwrap();
    assert_eq!(irpa.sha256, e.files["irpa"].sha256);
    for (out, key) in outs.iter().zip(["host", "arm64-v8a", "armeabi-v7a"]) {
        let f = m
            .files
            .iter()
            .find(|f| f.path == m.modules[key].path)
            .unwrap();
        assert_eq!(sha256(out), f.sha256, "{key}");
    }
    // The tokenizer loads from the assets, template and eos included.
    let t = Tokenizer::from_tokenizer_json(assets.join("tiny.tokenizer.json")).unwrap();
    assert_eq!(t.encode("ab<|end|>a").unwrap(), [2, 3, 0]);
    assert_eq!(t.eos(), Some(3));
    assert_eq!(t.bos(), Some(0));
    assert_eq!(
        t.chat_template(),
        Some("{% for m in messages %}{{ m['content'] }}<|end|>{% endfor %}")
    );

    // The packaged host module runs on the packaged archive and gives the
    // reference's predictions.
    let want = common::hf_expected("tiny-llama-tied-gqa");
    let case = &want.seqs.iter().find(|s| s.seq == 8).unwrap().cases[0];
    let ids: Vec<String> = case.input.iter().map(|i| i.to_string()).collect();
    let o = kiln_output(&[
        "run",
        s(&assets.join("tiny-host.vmfb")),
        "--params",
        s(&assets.join("tiny.irpa")),
        "--seq",
        "8",
        "--function",
        &m.function,
        "--scope",
        &m.scope,
        "--tokens",
        &ids.join(","),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got: Vec<i32> = String::from_utf8_lossy(&o.stdout)
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(got.len(), 8);
    let bad = common::mismatches(&got, &case.argmax, &case.margin, 0..8);
    assert!(bad.is_empty(), "{bad:?}");

    // Packaging again gives the same manifest; without the host module
    // the earlier host copy is removed.
    let before = std::fs::read(assets.join("tiny.manifest.json")).unwrap();
    let o = kiln_output(&[
        "package",
        s(&manifest_path),
        "--out",
        s(&assets),
        "--tokenizer",
        s(&tok),
        "--include-host",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        std::fs::read(assets.join("tiny.manifest.json")).unwrap(),
        before
    );
    let o = kiln_output(&[
        "package",
        s(&manifest_path),
        "--out",
        s(&assets),
        "--tokenizer",
        s(&tok),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let m = check_assets(&assets, "tiny");
    assert!(!m.modules.contains_key("host"));
    assert!(!assets.join("tiny-host.vmfb").exists());
}

// --- bad input, on fabricated exports -----------------------------------

/// A complete export manifest (the type `kiln export` writes) for a
/// fabricated 4-token model: SEQ 16, bf16 weights, BOS 0, EOS 3.
fn export_manifest(
    name: &str,
    source: &str,
    files: BTreeMap<String, FileRecord>,
) -> kiln::manifest::ExportManifest {
    let config = DecoderConfig {
        family: Family::Llama,
        hidden_size: 8,
        intermediate_size: 16,
        num_layers: 1,
        num_heads: 2,
        num_kv_heads: 2,
        head_dim: 4,
        vocab_size: 4,
        rms_norm_eps: 1e-5,
        rope_theta: 10000.0,
        rope_scaling: RopeScaling::Default,
        tie_word_embeddings: true,
        max_position_embeddings: 64,
        sliding_window: None,
        bos_token_id: Some(0),
        eos_token_ids: vec![3],
        arch: Default::default(),
    };
    // The manifest types are #[non_exhaustive]: built from their JSON, as
    // any reader outside kiln sees them.
    serde_json::from_value(serde_json::json!({
        "format": kiln::manifest::ExportManifest::FORMAT,
        "kiln_version": kiln::VERSION,
        "name": name,
        "function": name,
        "seq": 16,
        "scope": "model",
        "input": "tensor<1x16xi32>",
        "output": "tensor<16xi32>",
        "architecture": "llama",
        "vocab_size": config.vocab_size,
        "bos_token_id": config.bos_token_id,
        "eos_token_ids": config.eos_token_ids,
        "config": config,
        "weights_dtype": "bf16",
        "constants": "external",
        "parameter_tensors": 1,
        "parameter_count": 2048,
        "parameter_bytes": 4096,
        "source": source,
        "files": files,
        "kv": null,
    }))
    .unwrap()
}

/// A fake export `dir/NAME.json` with an irpa of one 4 KiB tensor and the given modules
/// (`arm64`, `arm32`, `vulkan`, `host`); its source is a folder with the
/// tiny tokenizer.
fn fake_export(dir: &Path, name: &str, modules: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let irpa = dir.join(format!("{name}.irpa"));
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let spec = kiln::params::irpa::EntrySpec::data("w", data.len() as u64);
    use kiln::params::TensorWriter;
    let mut w = kiln::params::irpa::IrpaWriter::new(&irpa, vec![spec]).unwrap();
    w.write_tensor("w", &data).unwrap();
    w.finish().unwrap();
    let bytes = std::fs::read(&irpa).unwrap();
    std::fs::write(dir.join(format!("{name}-gen.mlir")), "module {}\n").unwrap();
    for t in modules {
        std::fs::write(
            dir.join(format!("{name}-{t}.vmfb")),
            format!("vmfb for {t}"),
        )
        .unwrap();
    }
    let src = tiny_tokenizer_dir(dir);
    let record = |path: String, bytes: u64, sha256: String| -> FileRecord {
        serde_json::from_value(serde_json::json!({"path": path, "bytes": bytes, "sha256": sha256}))
            .unwrap()
    };
    let files = [
        (
            "irpa",
            record(format!("{name}.irpa"), bytes.len() as u64, sha256(&irpa)),
        ),
        ("mlir", record(format!("{name}-gen.mlir"), 10, "-".into())),
    ];
    let manifest = export_manifest(name, s(&src), files.map(|(k, f)| (k.to_string(), f)).into());
    let p = dir.join(format!("{name}.json"));
    std::fs::write(&p, serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
    p
}

#[test]
fn fabricated_export_packages_what_exists() {
    let dir = tmpdir();
    let m = fake_export(&dir.path().join("exp"), "fake", &["arm32", "vulkan"]);
    let assets = dir.path().join("a/b/assets");
    let o = kiln_output(&["package", s(&m), "--out", s(&assets)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("fake-arm64.vmfb not found"), "{err}");
    let am = check_assets(&assets, "fake");
    let keys: Vec<&str> = am.modules.keys().map(String::as_str).collect();
    assert_eq!(keys, ["armeabi-v7a", "vulkan"]);
    assert_eq!(am.modules["vulkan"].device.name(), "vulkan");
    assert_eq!(am.modules["vulkan"].path, "fake-vulkan.vmfb");
    assert_eq!(am.tokenizer.as_deref(), Some("fake.tokenizer.json"));
    // The .jinja template is folded into the packaged config.
    let cfg: Value = serde_json::from_str(
        &std::fs::read_to_string(assets.join("fake.tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        cfg["chat_template"],
        "{% for m in messages %}{{ m['content'] }}<|end|>{% endfor %}"
    );
    // The manifest records the template, and what it writes around each
    // message for apps without Jinja.
    let chat = am.chat.as_ref().unwrap();
    assert_eq!(chat.template, cfg["chat_template"].as_str().unwrap());
    let pair = |p: &str, s: &str| Some((p.to_string(), s.to_string()));
    assert_eq!(chat.affixes.user, pair("", "<|end|>"));
    assert_eq!(chat.affixes.assistant, pair("", "<|end|>"));
    assert_eq!(chat.affixes.generation_prompt.as_deref(), Some(""));
    // stdout lists the written files, the manifest last.
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().count(), am.files.len() + 1);
    assert!(out.lines().last().unwrap().ends_with("fake.manifest.json"));

    // A module older than the MLIR (re-exported since compiling) is flagged.
    std::thread::sleep(std::time::Duration::from_millis(50));
    std::fs::write(dir.path().join("exp/fake-gen.mlir"), "module {}\n").unwrap();
    let o = kiln_output(&["package", s(&m), "--out", s(&assets)]);
    assert_eq!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("fake-vulkan.vmfb is older than"), "{err}");

    // --no-tokenizer: no tokenizer files (an earlier package's are removed).
    let o = kiln_output(&["package", s(&m), "--out", s(&assets), "--no-tokenizer"]);
    assert_eq!(o.status.code(), Some(0));
    let am = check_assets(&assets, "fake");
    assert_eq!(am.tokenizer, None);
    assert_eq!(am.tokenizer_config, None);
}

#[test]
fn missing_manifest_is_an_error() {
    let dir = tmpdir();
    let assets = dir.path().join("assets");
    let o = kiln_output(&[
        "package",
        s(&dir.path().join("nope.json")),
        "--out",
        s(&assets),
    ]);
    assert_one_line_error(&o, "nope.json");
    assert!(!assets.exists());

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"name\": 1}").unwrap();
    let o = kiln_output(&["package", s(&bad), "--out", s(&assets)]);
    assert_one_line_error(&o, "not a kiln export manifest");
    assert!(!assets.exists());
}

#[test]
fn no_modules_is_an_error() {
    let dir = tmpdir();
    // A host module alone is not enough for an app.
    let m = fake_export(&dir.path().join("exp"), "fake", &["host"]);
    let assets = dir.path().join("assets");
    for extra in [&[][..], &["--include-host"][..]] {
        let mut args = vec!["package", s(&m), "--out", s(&assets)];
        args.extend_from_slice(extra);
        let o = kiln_output(&args);
        assert_one_line_error(&o, "kiln compile");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--target arm64,arm32,vulkan"), "{err}");
        assert!(err.contains("fake-gen.mlir"), "{err}");
        assert!(!assets.exists());
    }
}

#[test]
fn changed_irpa_is_an_error_and_leaves_assets_alone() {
    let dir = tmpdir();
    let m = fake_export(&dir.path().join("exp"), "fake", &["arm64"]);
    let assets = dir.path().join("assets");
    // A good package first, then change one byte of the irpa (same size).
    let o = kiln_output(&["package", s(&m), "--out", s(&assets)]);
    assert_eq!(o.status.code(), Some(0));
    let before: Vec<(String, Vec<u8>)> = files_in(&assets)
        .into_iter()
        .map(|f| {
            let b = std::fs::read(assets.join(&f)).unwrap();
            (f, b)
        })
        .collect();
    let irpa = dir.path().join("exp/fake.irpa");
    let good = std::fs::read(&irpa).unwrap();
    // A damaged index (same size): kiln's reader names the file and the
    // fault before anything is copied.
    let mut bytes = good.clone();
    bytes[0] ^= 1;
    std::fs::write(&irpa, &bytes).unwrap();
    let o = kiln_output(&["package", s(&m), "--out", s(&assets)]);
    assert_one_line_error(&o, "fake.irpa: not a parameter file");
    // Changed tensor bytes (same size): the manifest's sha256 differs.
    let mut bytes = good;
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&irpa, &bytes).unwrap();
    // A new module too, so a partial run would show.
    std::fs::write(dir.path().join("exp/fake-arm32.vmfb"), "new").unwrap();
    let o = kiln_output(&["package", s(&m), "--out", s(&assets)]);
    assert_one_line_error(&o, "does not match the export manifest");
    let after: Vec<(String, Vec<u8>)> = files_in(&assets)
        .into_iter()
        .map(|f| {
            let b = std::fs::read(assets.join(&f)).unwrap();
            (f, b)
        })
        .collect();
    assert_eq!(before, after, "the earlier package is untouched");

    // A fresh assets directory is not even created.
    let fresh = dir.path().join("fresh");
    let o = kiln_output(&["package", s(&m), "--out", s(&fresh)]);
    assert_one_line_error(&o, "sha256");
    assert!(!fresh.exists());

    // A truncated irpa is caught by its size.
    std::fs::write(&irpa, &bytes[..100]).unwrap();
    let o = kiln_output(&["package", s(&m), "--out", s(&fresh)]);
    assert_one_line_error(&o, "re-export");
    assert!(!fresh.exists());
    // A missing one names the file.
    std::fs::remove_file(&irpa).unwrap();
    let o = kiln_output(&["package", s(&m), "--out", s(&fresh)]);
    assert_one_line_error(&o, "fake.irpa");
    assert!(!fresh.exists());
}

#[test]
fn source_without_tokenizer_is_an_error() {
    let dir = tmpdir();
    let m = fake_export(&dir.path().join("exp"), "fake", &["arm64"]);
    let assets = dir.path().join("assets");
    std::fs::remove_file(dir.path().join("exp/tok/tokenizer.json")).unwrap();
    let o = kiln_output(&["package", s(&m), "--out", s(&assets)]);
    assert_one_line_error(&o, "--no-tokenizer");
    assert!(!assets.exists());
    let o = kiln_output(&[
        "package",
        s(&m),
        "--out",
        s(&assets),
        "--tokenizer",
        s(&dir.path().join("missing.gguf")),
    ]);
    assert_one_line_error(&o, "missing.gguf");
    assert!(!assets.exists());
}

// --- tokenizer.json from GGUF metadata -----------------------------------

#[derive(serde::Deserialize)]
struct Cases {
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    ids_llama_cpp: Vec<u32>,
}

#[test]
fn gguf_tokenizer_json_encodes_like_from_gguf() {
    let Some(gguf) = common::smollm2_gguf() else {
        return;
    };
    // The files `kiln package` writes for a GGUF model, loaded back.
    let dir = tmpdir();
    let files =
        TokenizerFiles::from_gguf(&kiln::params::gguf::GgufFile::open(&gguf).unwrap()).unwrap();
    let path = dir.path().join("smollm2.tokenizer.json");
    std::fs::write(&path, &files.tokenizer_json).unwrap();
    std::fs::write(
        dir.path().join("smollm2.tokenizer_config.json"),
        &files.tokenizer_config_json,
    )
    .unwrap();
    let written = Tokenizer::from_tokenizer_json(&path).unwrap();
    let reference = kiln::tokenizer::from_gguf(&gguf).unwrap();
    assert_eq!(written.vocab_size(), reference.vocab_size());
    assert_eq!(written.bos(), reference.bos());
    assert_eq!(written.eos(), reference.eos());
    assert_eq!(written.chat_template(), reference.chat_template());
    assert!(written.chat_template().is_some());
    let cases: Cases = serde_json::from_str(
        &std::fs::read_to_string(fixture("smollm2/tokenizer_cases.json")).unwrap(),
    )
    .unwrap();
    assert!(cases.cases.len() > 50);
    for c in &cases.cases {
        let ids = written.encode(&c.text).unwrap();
        assert_eq!(ids, reference.encode(&c.text).unwrap(), "{:?}", c.text);
        assert_eq!(ids, c.ids_llama_cpp, "{:?}", c.text);
        assert_eq!(
            written.decode(&ids).unwrap(),
            reference.decode(&ids).unwrap()
        );
    }
    for id in 0..reference.vocab_size() as u32 {
        assert_eq!(
            written.id_to_token(id),
            reference.id_to_token(id),
            "id {id}"
        );
        assert_eq!(written.is_special(id), reference.is_special(id), "id {id}");
    }
    let chat = [("user", "What is 2+2?")];
    assert_eq!(
        written.apply_chat(&chat, true).unwrap(),
        reference.apply_chat(&chat, true).unwrap()
    );

    // The CLI writes the same bytes when the export's source is the GGUF,
    // and the output is deterministic.
    let exp = dir.path().join("exp");
    let m = fake_export(&exp, "smol", &["arm64"]);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&m).unwrap()).unwrap();
    v["source"] = json!(s(&gguf));
    std::fs::write(&m, v.to_string()).unwrap();
    let assets = dir.path().join("assets");
    let o = kiln_output(&["package", s(&m), "--out", s(&assets)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    check_assets(&assets, "smol");
    let files =
        TokenizerFiles::from_gguf(&kiln::params::gguf::GgufFile::open(&gguf).unwrap()).unwrap();
    assert_eq!(
        std::fs::read_to_string(assets.join("smol.tokenizer.json")).unwrap(),
        files.tokenizer_json
    );
    assert_eq!(
        std::fs::read_to_string(assets.join("smol.tokenizer_config.json")).unwrap(),
        files.tokenizer_config_json
    );
    assert_eq!(
        std::fs::read(assets.join("smol.tokenizer.json")).unwrap(),
        std::fs::read(&path).unwrap()
    );
}

#[test]
fn out_dir_rules() {
    let dir = tmpdir();
    let exp = dir.path().join("exp");
    let m = fake_export(&exp, "fake", &["arm64", "host"]);
    // Not into the export's own directory (NAME-host.vmfb would clash).
    let before = files_in(&exp);
    let o = kiln_output(&["package", s(&m), "--out", s(&exp)]);
    assert_one_line_error(&o, "export's own directory");
    assert_eq!(files_in(&exp), before);

    // Re-packaging removes only files the earlier manifest listed.
    let assets = dir.path().join("assets");
    std::fs::create_dir_all(&assets).unwrap();
    std::fs::write(assets.join("fake-notes.txt"), "mine").unwrap();
    std::fs::write(assets.join("other.irpa"), "another model").unwrap();
    let o = kiln_output(&["package", s(&m), "--out", s(&assets), "--include-host"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(assets.join("fake-host.vmfb").is_file());
    let o = kiln_output(&["package", s(&m), "--out", s(&assets), "--no-tokenizer"]);
    assert_eq!(o.status.code(), Some(0));
    let mut want = vec![
        "fake-arm64-v8a.vmfb",
        "fake-notes.txt",
        "fake.irpa",
        "fake.manifest.json",
        "other.irpa",
    ];
    want.sort();
    assert_eq!(files_in(&assets), want);
}
