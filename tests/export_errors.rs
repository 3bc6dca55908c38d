//! Bad input to `kiln export`: each case is a clear one-line error naming
//! the key, tensor or flag, exit code 2, and no output file left behind.

use crate::common;
use common::*;
use kiln::params::TensorWriter;
use std::path::Path;

/// Copies a tiny fixture into `dir`, applying `edit` to its config.json.
fn variant(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) -> std::path::PathBuf {
    variant_of("tiny-llama-tied-gqa", dir, edit)
}

/// Copies the tiny fixture `name` into `dir`, applying `edit` to its config.json.
fn variant_of(
    name: &str,
    dir: &Path,
    edit: impl FnOnce(&mut serde_json::Value),
) -> std::path::PathBuf {
    let src = fixture(&format!("hf/{name}"));
    let dst = dir.join("ckpt");
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::copy(src.join("model.safetensors"), dst.join("model.safetensors")).unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(
        dst.join("config.json"),
        serde_json::to_string_pretty(&cfg).unwrap(),
    )
    .unwrap();
    dst
}

fn expect_error(ckpt: &Path, extra: &[&str], want: &str) {
    let dir = tmpdir();
    let out = dir.path().join("out");
    let mut args = vec![
        "export",
        ckpt.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    if !extra.contains(&"--seq") {
        args.extend(["--seq", "8"]);
    }
    args.extend(extra);
    let (code, _, err) = kiln(&args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(
        err.contains(want),
        "{args:?}: error `{err}` should contain `{want}`"
    );
    assert_eq!(err.trim().lines().count(), 1, "one-line error: {err}");
    let left = files_in(&out);
    assert!(left.is_empty(), "{args:?} left files behind: {left:?}");
}

type ConfigEdit = Box<dyn Fn(&mut serde_json::Value)>;

#[test]
fn bad_configs_are_clear_errors() {
    let dir = tmpdir();
    let cases: Vec<(ConfigEdit, &str)> = vec![
        (Box::new(|c| { c.as_object_mut().unwrap().remove("hidden_size"); }), "missing required key \"hidden_size\""),
        (Box::new(|c| c["model_type"] = "gpt2".into()), "unsupported model_type \"gpt2\" (supported: llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3)"),
        (Box::new(|c| c["attention_bias"] = true.into()), "unsupported attention_bias = true for llama"),
        (Box::new(|c| c["num_key_value_heads"] = 3.into()), "not a multiple of num_key_value_heads (3)"),
        (Box::new(|c| c["hidden_act"] = "gelu".into()), "unsupported hidden_act \"gelu\" for llama"),
        (Box::new(|c| c["rope_parameters"]["rope_type"] = "yarn".into()), "unsupported rope_type \"yarn\""),
        (Box::new(|c| c["eos_token_id"] = "two".into()), "\"eos_token_id\" must be an id or a list of ids"),
        (Box::new(|c| c["hidden_size"] = 64.into()), "tensor \"model.embed_tokens.weight\": expected shape [96, 64] from the config, found [96, 48]"),
        (Box::new(|c| c["num_hidden_layers"] = 3.into()), "missing tensor \"model.layers.2.input_layernorm.weight\""),
        (Box::new(|c| c["tie_word_embeddings"] = false.into()), "missing tensor \"lm_head.weight\""),
    ];
    for (i, (edit, want)) in cases.into_iter().enumerate() {
        let d = dir.path().join(i.to_string());
        let ck = variant(&d, edit);
        expect_error(&ck, &[], want);
    }
}

#[test]
fn bad_family_configs_are_clear_errors() {
    let dir = tmpdir();
    let cases: Vec<(&str, ConfigEdit, &str)> = vec![
        ("tiny-phi3", Box::new(|c| c["rope_parameters"]["rope_type"] = "dynamic".into()),
         "unsupported rope_type \"dynamic\" in rope_parameters (supported: default, linear, llama3, longrope)"),
        ("tiny-phi3-longrope", Box::new(|c| { c["rope_parameters"]["short_factor"].as_array_mut().unwrap().pop(); }),
         "longrope short_factor must hold 6 positive numbers (rotary dims / 2)"),
        ("tiny-phi3-longrope", Box::new(|c| { c["rope_parameters"].as_object_mut().unwrap().remove("long_factor"); }),
         "config.json: missing required key \"rope_parameters.long_factor\""),
        ("tiny-phi3", Box::new(|c| c["rope_parameters"]["partial_rotary_factor"] = 1.5.into()),
         "partial_rotary_factor must be in (0, 1], found 1.5"),
        ("tiny-gemma", Box::new(|c| c["hidden_act"] = "silu".into()),
         "unsupported hidden_act \"silu\" for gemma (supported: gelu_pytorch_tanh, gelu)"),
        ("tiny-gemma", Box::new(|c| c["attention_bias"] = true.into()),
         "unsupported attention_bias = true for gemma"),
        ("tiny-qwen2", Box::new(|c| c["layer_types"] = serde_json::json!(["full_attention"])),
         "layer_types must list one type per layer (num_hidden_layers is 2), found 1"),
        ("tiny-gemma2", Box::new(|c| c["layer_types"] = serde_json::json!(["chunked_attention", "full_attention"])),
         "\"layer_types\" must be a list of \"sliding_attention\" / \"full_attention\""),
        ("tiny-gemma2", Box::new(|c| c["hidden_activation"] = "gelu".into()),
         "unsupported hidden_activation \"gelu\" for gemma2 (supported: gelu_pytorch_tanh)"),
        ("tiny-qwen2", Box::new(|c| c["model_type"] = "llama".into()),
         "unexpected tensor \"model.layers.0.self_attn.k_proj.bias\" (the llama graph does not use it)"),
        ("tiny-llama-tied-gqa", Box::new(|c| c["model_type"] = "qwen2".into()),
         "missing tensor \"model.layers.0.self_attn.q_proj.bias\" (expected shape [48] from the config)"),
        ("tiny-gemma3", Box::new(|c| { c["rope_parameters"].as_object_mut().unwrap().remove("sliding_attention"); }),
         "config.json: missing required key \"rope_parameters.sliding_attention\""),
        ("tiny-gemma3", Box::new(|c| c["text_config"] = serde_json::json!({})),
         "unsupported multimodal gemma3 checkpoint (text_config in config.json) (supported: its text model alone, model_type gemma3_text)"),
        ("tiny-qwen3", Box::new(|c| c["attention_bias"] = true.into()),
         "unsupported attention_bias = true for qwen3"),
        ("tiny-qwen3", Box::new(|c| c["model_type"] = "llama".into()),
         "unexpected tensor \"model.layers.0.self_attn.k_norm.weight\" (the llama graph does not use it)"),
        ("tiny-llama-tied-gqa", Box::new(|c| c["model_type"] = "phi3".into()),
         "missing tensor \"model.layers.0.self_attn.qkv_proj.weight\" (expected shape [96, 48] from the config)"),
    ];
    for (i, (name, edit, want)) in cases.into_iter().enumerate() {
        let d = dir.path().join(i.to_string());
        let ck = variant_of(name, &d, edit);
        expect_error(&ck, &[], want);
    }
}

#[test]
fn malformed_config_json_and_missing_files() {
    let dir = tmpdir();
    let ck = variant(dir.path(), |_| {});
    std::fs::write(ck.join("config.json"), "{ not json").unwrap();
    expect_error(&ck, &[], "invalid config.json");
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    expect_error(&empty, &[], "no config.json in this folder");
    expect_error(&dir.path().join("nope"), &[], "no such file or directory");
    let notckpt = dir.path().join("x.bin");
    std::fs::write(&notckpt, b"hello world").unwrap();
    expect_error(&notckpt, &[], "not a checkpoint");
}

#[test]
fn unexpected_tensor_is_an_error() {
    let dir = tmpdir();
    // A checkpoint with an extra tensor (a q_proj bias) the graph does not use.
    let src = fixture("hf/tiny-llama-tied-gqa");
    let st = kiln::params::safetensors::SafeTensors::open(src.join("model.safetensors")).unwrap();
    let dst = dir.path().join("ckpt");
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::copy(src.join("config.json"), dst.join("config.json")).unwrap();
    let mut specs: Vec<kiln::params::safetensors::TensorSpec> = st
        .tensors()
        .map(|t| kiln::params::safetensors::TensorSpec::new(t.name, t.dtype, t.shape))
        .collect();
    specs.push(kiln::params::safetensors::TensorSpec::new(
        "model.layers.0.self_attn.q_proj.bias",
        kiln::params::DType::F32,
        &[48],
    ));
    let mut w = kiln::params::safetensors::SafetensorsWriter::new(
        dst.join("model.safetensors"),
        &specs,
        &[],
    )
    .unwrap();
    for t in st.tensors() {
        w.write_tensor(t.name, t.data).unwrap();
    }
    w.write_tensor("model.layers.0.self_attn.q_proj.bias", &[0u8; 48 * 4])
        .unwrap();
    w.finish().unwrap();
    expect_error(
        &dst,
        &[],
        "unexpected tensor \"model.layers.0.self_attn.q_proj.bias\"",
    );
}

#[test]
fn bad_flags_are_clear_errors() {
    let ck = fixture("hf/tiny-llama-tied-gqa");
    expect_error(&ck, &["--seq", "0"], "SEQ must be at least 1");
    expect_error(
        &ck,
        &["--seq", "65"],
        "SEQ must be at most the model's max_position_embeddings (64), not 65",
    );
    expect_error(
        &ck,
        &["--weights", "int8"],
        "invalid value 'int8' for '--weights <WEIGHTS>' [possible values: bf16, f16, f32, keep, q8_0, q4_0, w8a8, w8a16, w8a16e, w16a16, w4a16, fast]",
    );
    expect_error(
        &ck,
        &["--constants", "sometimes"],
        "--constants sometimes: expected external, inline or threshold=BYTES",
    );
    expect_error(
        &ck,
        &["--function", "9lives"],
        "function name \"9lives\" is not a valid MLIR identifier",
    );
    // A tensor bound below one f32 row of the embedding: no chunk fits.
    expect_error(
        &ck,
        &["--max-tensor-bytes", "16"],
        "more than the 16-byte tensor bound: export with a larger --max-tensor-bytes or a smaller --seq",
    );
}

#[test]
fn unwritable_output_directory_is_an_error() {
    let dir = tmpdir();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let target = file.join("sub");
    let (code, _, err) = kiln(&[
        "export",
        fixture("hf/tiny-llama-tied-gqa").to_str().unwrap(),
        "--seq",
        "8",
        "--out",
        target.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot create output directory"), "{err}");
}

#[test]
fn export_writes_the_four_files_and_a_complete_manifest() {
    let dir = tmpdir();
    let (code, _, err) = kiln(&[
        "export",
        fixture("hf/tiny-llama-untied-mha").to_str().unwrap(),
        "--seq",
        "8",
        "--out",
        dir.path().to_str().unwrap(),
        "--name",
        "mha",
        "--function",
        "forward",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        files_in(dir.path()),
        vec!["mha-gen.mlir", "mha.irpa", "mha.json", "mha.safetensors"]
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("mha.json")).unwrap())
            .unwrap();
    assert_eq!(m["seq"], 8);
    assert_eq!(m["function"], "forward");
    assert_eq!(m["scope"], "model");
    assert_eq!(m["architecture"], "llama");
    assert_eq!(m["weights_dtype"], "bf16");
    assert_eq!(m["kiln_version"], kiln::VERSION);
    for k in ["mlir", "safetensors", "irpa"] {
        let f = &m["files"][k];
        let p = dir.path().join(f["path"].as_str().unwrap());
        assert_eq!(
            f["bytes"].as_u64().unwrap(),
            std::fs::metadata(&p).unwrap().len()
        );
        assert_eq!(
            f["sha256"].as_str().unwrap(),
            format!(
                "{:x}",
                <sha2::Sha256 as sha2::Digest>::digest(std::fs::read(&p).unwrap())
            )
        );
    }
    // Determinism: the same export twice gives byte-identical files.
    let dir2 = tmpdir();
    let (code, _, _) = kiln(&[
        "export",
        fixture("hf/tiny-llama-untied-mha").to_str().unwrap(),
        "--seq",
        "8",
        "--out",
        dir2.path().to_str().unwrap(),
        "--name",
        "mha",
        "--function",
        "forward",
    ]);
    assert_eq!(code, 0);
    for f in ["mha-gen.mlir", "mha.irpa", "mha.safetensors"] {
        assert_eq!(
            std::fs::read(dir.path().join(f)).unwrap(),
            std::fs::read(dir2.path().join(f)).unwrap(),
            "{f}"
        );
    }
}

/// Exporting again into the same folder replaces the four files with the
/// new export's and leaves nothing else behind (the previous files are moved
/// aside into the staging folder, which is removed); other files stay.
#[test]
fn export_again_replaces_the_files_in_place() {
    let dir = tmpdir();
    let keep = dir.path().join("notes.txt");
    std::fs::write(&keep, "mine").unwrap();
    // A staging folder left by an export that was killed (its process is
    // gone) is removed by the next export; one of a running process (this
    // test's) is left alone.
    let stale = dir.path().join(".kiln-export-4194399-x1");
    let live = dir
        .path()
        .join(format!(".kiln-export-{}-x2", std::process::id()));
    for d in [&stale, &live] {
        std::fs::create_dir(d).unwrap();
        std::fs::write(d.join("mha.irpa"), "partial").unwrap();
    }
    for seq in ["8", "16"] {
        let (code, _, err) = kiln(&[
            "export",
            fixture("hf/tiny-llama-untied-mha").to_str().unwrap(),
            "--seq",
            seq,
            "--out",
            dir.path().to_str().unwrap(),
            "--name",
            "mha",
        ]);
        assert_eq!(code, 0, "{err}");
    }
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(
        !stale.exists(),
        "the dead export's staging folder is removed"
    );
    std::fs::remove_dir_all(&live).unwrap();
    names.retain(|n| !n.starts_with(".kiln-export-"));
    assert_eq!(
        names,
        [
            "mha-gen.mlir",
            "mha.irpa",
            "mha.json",
            "mha.safetensors",
            "notes.txt"
        ]
    );
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("mha.json")).unwrap()).unwrap();
    assert_eq!(m["seq"], 16);
    let mlir = std::fs::read_to_string(dir.path().join("mha-gen.mlir")).unwrap();
    assert!(
        mlir.contains("tensor<1x16xi32>"),
        "the MLIR is the second export's"
    );
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "mine");
}

/// An export killed mid-way (SIGKILL while it writes SmolLM2's weights)
/// leaves only its staging folder, no output file; the next export into the
/// same folder removes that folder and writes its own files.
#[test]
fn an_export_killed_mid_way_leaves_nothing_after_the_next_export() {
    let Some(gguf) = smollm2_gguf() else { return };
    let dir = tmpdir();
    let mut child = kiln_command()
        .args(["export", gguf.to_str().unwrap(), "--seq", "64", "--out"])
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let listing = || -> Vec<String> {
        std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    // Kill it as soon as its staging folder exists (the weights take
    // about a second to write after it appears).
    let t0 = std::time::Instant::now();
    while !listing().iter().any(|n| n.starts_with(".kiln-export-")) {
        assert!(t0.elapsed().as_secs() < 60, "no staging folder appeared");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the export ended first"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left = listing();
    assert_eq!(left.len(), 1, "only the staging folder: {left:?}");
    assert!(left[0].starts_with(".kiln-export-"), "{left:?}");
    let (code, _, err) = kiln(&[
        "export",
        fixture("hf/tiny-llama-untied-mha").to_str().unwrap(),
        "--seq",
        "8",
        "--out",
        dir.path().to_str().unwrap(),
        "--name",
        "mha",
    ]);
    assert_eq!(code, 0, "{err}");
    let mut names = listing();
    names.sort();
    assert_eq!(
        names,
        ["mha-gen.mlir", "mha.irpa", "mha.json", "mha.safetensors"]
    );
}

/// The manifest reads back as the type that wrote it (`kiln package`,
/// `kiln run` and `kiln generate` all read `manifest::ExportManifest`): every HF
/// fixture (llama and mistral, default and llama3 RoPE), through the file
/// on disk, byte for byte; linear RoPE scaling, which no fixture has, too.
#[test]
fn manifest_round_trips_through_its_reader() {
    use kiln::export::{export, ExportOptions};
    use kiln::manifest::ExportManifest as Manifest;
    use kiln::models::{Checkpoint, RopeScaling};
    let mut last = None;
    for name in HF_FIXTURES {
        let dir = tmpdir();
        let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
        let r = export(&ckpt, &ExportOptions::new(8, dir.path())).unwrap();
        let text = std::fs::read_to_string(&r.manifest_path).unwrap();
        let back: Manifest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r.manifest, "{name}");
        assert_eq!(
            serde_json::to_string_pretty(&back).unwrap() + "\n",
            text,
            "{name}"
        );
        let run = kiln::manifest::RunManifest::read(&r.manifest_path)
            .unwrap()
            .unwrap();
        assert_eq!(run.export.as_ref(), Some(&r.manifest), "{name}");
        assert_eq!(run.defaults.seq, Some(8));
        assert_eq!(run.defaults.function.as_ref(), Some(&r.manifest.function));
        assert_eq!(run.defaults.irpa, Some(format!("{}.irpa", r.manifest.name)));
        last = Some(r.manifest);
    }
    let mut m = last.unwrap();
    m.config.rope_scaling = RopeScaling::Linear { factor: 2.5 };
    let back: Manifest = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
}

/// `kiln run`'s reader: an export manifest must read in full (a damaged
/// one is an error, not a silent loss of its EOS ids and source); a
/// `NAME.json` without `kiln_version` (a module not from `kiln export`) is
/// hand-written run defaults.
#[test]
fn run_reads_export_manifests_strictly_and_hand_written_defaults() {
    use kiln::manifest::RunManifest;
    let dir = tmpdir();
    let (code, _, err) = kiln(&[
        "export",
        fixture("hf/tiny-llama-tied-gqa").to_str().unwrap(),
        "--seq",
        "8",
        "--out",
        dir.path().to_str().unwrap(),
        "--name",
        "gqa",
    ]);
    assert_eq!(code, 0, "{err}");
    let path = dir.path().join("gqa.json");
    let m = RunManifest::read(&path).unwrap().unwrap();
    let e = m.export.as_ref().unwrap();
    assert_eq!(m.eos(), vec![2]);
    assert_eq!(m.source(), Some(e.source.as_str()));
    assert_eq!(m.defaults.scope.as_deref(), Some("model"));

    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("config");
    std::fs::write(&path, v.to_string()).unwrap();
    let err = RunManifest::read(&path).unwrap_err().to_string();
    assert!(
        err.contains("not a kiln export manifest") && err.contains("config"),
        "{err}"
    );

    std::fs::write(&path, r#"{"seq": 8, "function": "f", "irpa": "w.irpa"}"#).unwrap();
    let m = RunManifest::read(&path).unwrap().unwrap();
    assert_eq!(m.export, None);
    assert!(m.eos().is_empty() && m.source().is_none());
    let d = &m.defaults;
    assert_eq!(d.seq, Some(8));
    assert_eq!(d.function.as_deref(), Some("f"));
    assert_eq!(d.scope, None);
    assert_eq!(d.irpa.as_deref(), Some("w.irpa"));
    assert!(RunManifest::read(&dir.path().join("none.json"))
        .unwrap()
        .is_none());
}
