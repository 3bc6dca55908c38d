//! `kiln params inspect | convert | diff` end to end.

use crate::common;
use common::{kiln_output, s};
use kiln::params::safetensors::SafeTensors;
use kiln::params::DType;
use std::path::PathBuf;

fn fx(rel: &str) -> PathBuf {
    crate::common::root()
        .join("tests/fixtures/params")
        .join(rel)
}

/// A path under tests/fixtures.
fn common_fixture(rel: &str) -> PathBuf {
    crate::common::root().join("tests/fixtures").join(rel)
}

#[test]
fn inspect_reports_tensors_metadata_and_entry_kinds() {
    let o = kiln_output(&["params", "inspect", "--json", s(&fx("gguf/metadata.gguf"))]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["format"], "gguf");
    assert_eq!(j["version"], 3);
    assert_eq!(j["metadata"]["test.string"], "héllo wörld");
    assert_eq!(
        j["metadata"]["test.array_nested"],
        serde_json::json!([["x", "y"], ["z"]])
    );
    assert_eq!(j["tensors"][0]["name"], "x");
    assert_eq!(j["tensors"][0]["shape"], serde_json::json!([2, 32]));
    assert_eq!(j["tensors"][0]["nbytes"], 256);

    let o = kiln_output(&["params", "inspect", s(&fx("tiny.irpa"))]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("entries: 2 DATA, 1 SPLAT"), "{text}");
    assert!(text.contains("total: 3 tensors"), "{text}");

    // Format by magic, not extension.
    let dir = tempfile::tempdir().unwrap();
    let odd = dir.path().join("weights.bin");
    std::fs::copy(fx("tiny.safetensors"), &odd).unwrap();
    let o = kiln_output(&["params", "inspect", "--json", s(&odd)]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["format"], "safetensors");
    assert_eq!(j["tensors"][0]["shape"], serde_json::json!([2, 3]));
}

#[test]
fn inspect_names_the_model_family_and_whether_export_supports_it() {
    let dir = tempfile::tempdir().unwrap();
    let supported = "llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3";
    // A GGUF of an unsupported architecture: metadata.gguf (written as
    // "llama") with its general.architecture value patched to "bloom".
    let mut bytes = std::fs::read(fx("gguf/metadata.gguf")).unwrap();
    let key = bytes
        .windows(20)
        .position(|w| w == b"general.architecture")
        .unwrap();
    let at = key + bytes[key..].windows(5).position(|w| w == b"llama").unwrap();
    bytes[at..at + 5].copy_from_slice(b"bloom");
    let bloom = dir.path().join("bloom.gguf");
    std::fs::write(&bloom, &bytes).unwrap();
    let o = kiln_output(&["params", "inspect", s(&bloom)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let want =
        format!("model family: bloom is not supported by kiln export (supported: {supported})");
    assert!(text.contains(&want), "{text}");
    let o = kiln_output(&["params", "inspect", "--json", s(&bloom)]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["model_family"]["name"], "bloom");
    assert_eq!(j["model_family"]["supported"], false);
    assert_eq!(j["model_family"]["supported_families"][2], "qwen2");

    // An HF folder: the model_type of the config.json beside the file.
    let hf = dir.path().join("neox");
    std::fs::create_dir_all(&hf).unwrap();
    let src = common_fixture("hf/tiny-llama-tied-gqa");
    std::fs::copy(src.join("model.safetensors"), hf.join("model.safetensors")).unwrap();
    let cfg = std::fs::read_to_string(src.join("config.json"))
        .unwrap()
        .replace("\"model_type\": \"llama\"", "\"model_type\": \"gpt_neox\"");
    std::fs::write(hf.join("config.json"), cfg).unwrap();
    let o = kiln_output(&["params", "inspect", s(&hf.join("model.safetensors"))]);
    let text = String::from_utf8_lossy(&o.stdout);
    let want =
        format!("model family: gpt_neox is not supported by kiln export (supported: {supported})");
    assert!(text.contains(&want), "{text}");

    // A supported one.
    let o = kiln_output(&[
        "params",
        "inspect",
        s(&common_fixture("gguf/tiny-qwen2.gguf")),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("model family: qwen2 (supported by kiln export)"),
        "{text}"
    );
}

#[test]
fn convert_dequantizes_gguf_merges_renames_and_excludes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.safetensors");
    let o = kiln_output(&[
        "params",
        "convert",
        s(&fx("gguf/q4_k.gguf")),
        s(&fx("tiny.safetensors")),
        "-o",
        s(&out),
        "--rename",
        "a.weight=model.a",
        "--exclude",
        "ones",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = SafeTensors::open(&out).unwrap();
    let names: Vec<&str> = st.tensors().map(|t| t.name).collect();
    assert_eq!(names, ["model.a", "b.weight", "w", "e"]);
    let a = st.get("model.a").unwrap();
    assert_eq!((a.dtype, a.shape), (DType::F32, &[2u64, 256][..]));
    // Same values as the gguf package's dequantization.
    let exp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx("gguf/expected.json")).unwrap()).unwrap();
    let bits: Vec<u32> = exp["q4_k.gguf"]["a.weight"]["bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(
        a.to_f32().iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        bits
    );

    // bf16 output rounds each value.
    let out16 = dir.path().join("m16.safetensors");
    let o = kiln_output(&[
        "params",
        "convert",
        s(&fx("gguf/q4_k.gguf")),
        "--out",
        s(&out16),
        "--dtype",
        "bf16",
    ]);
    assert!(o.status.success());
    let st16 = SafeTensors::open(&out16).unwrap();
    let a16 = st16.get("a.weight").unwrap();
    assert_eq!(a16.dtype, DType::BF16);
    let values: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
    let want: Vec<u16> = DType::BF16
        .encode_weights(&values)
        .unwrap()
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let got: Vec<u16> = a16
        .data
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(got, want);

    // Duplicate names across inputs: exit 2, names the tensor, no output.
    let dup = dir.path().join("dup.irpa");
    let o = kiln_output(&[
        "params",
        "convert",
        s(&fx("tiny.safetensors")),
        s(&fx("tiny.irpa")),
        "-o",
        s(&dup),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("duplicate tensor name `w`") && err.contains("tiny.irpa"),
        "{err}"
    );
    assert!(!dup.exists());
    // Bad flags.
    let tiny = fx("tiny.safetensors");
    for args in [
        vec!["--rename", "nonsense"],
        vec!["--exclude", "ghost"],
        vec!["--rename", "ghost=x"],
    ] {
        let mut a = vec!["params", "convert", s(&tiny), "-o", s(&dup)];
        a.extend(args.iter().copied());
        assert_eq!(kiln_output(&a).status.code(), Some(2), "{args:?}");
    }
    let o = kiln_output(&[
        "params",
        "convert",
        s(&fx("tiny.safetensors")),
        "-o",
        s(&dir.path().join("x.bin")),
    ]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn diff_compares_across_formats() {
    // safetensors vs the IREE-written archive of it (undescribed entries compare as bytes).
    let o = kiln_output(&[
        "params",
        "diff",
        s(&fx("tiny.safetensors")),
        s(&fx("tiny.irpa")),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    let dir = tempfile::tempdir().unwrap();
    let b = dir.path().join("b.irpa");
    assert!(kiln_output(&[
        "params",
        "convert",
        s(&fx("tiny.safetensors")),
        "-o",
        s(&b),
        "--dtype",
        "bf16",
        "--describe",
        "--exclude",
        "e"
    ])
    .status
    .success());
    let o = kiln_output(&["params", "diff", s(&fx("tiny.safetensors")), s(&b)]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("e: only in A"), "{text}");
    assert!(
        text.contains("w: dtype F32 vs BF16, max abs diff"),
        "{text}"
    );
    let o = kiln_output(&[
        "params",
        "diff",
        "--tolerance",
        "0.01",
        s(&fx("tiny.safetensors")),
        s(&fx("tiny.safetensors")),
    ]);
    assert_eq!(o.status.code(), Some(0));
    // GGUF vs its f32 conversion: equal.
    let f = dir.path().join("q.safetensors");
    assert!(
        kiln_output(&["params", "convert", s(&fx("gguf/q6_k.gguf")), "-o", s(&f)])
            .status
            .success()
    );
    let o = kiln_output(&["params", "diff", s(&fx("gguf/q6_k.gguf")), s(&f)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}
