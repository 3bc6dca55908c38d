//! The manifests' JSON Schemas in docs/schema/ are the ones the types
//! generate, and a real export and package write manifests that have
//! exactly the schema's keys.

use kiln::export::{export, ExportOptions};
use kiln::manifest::{AssetsManifest, ExportManifest, RunManifest};
use kiln::models::Checkpoint;

/// `docs/schema/NAME`; with `KILN_BLESS=1` the file is rewritten first.
fn check_schema(name: &str, generated: &str) {
    let path = crate::common::root().join("docs/schema").join(name);
    if std::env::var_os("KILN_BLESS").is_some() {
        std::fs::write(&path, generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: a manifest type changed; run `KILN_BLESS=1 cargo test --release --test suite manifest::` \
         and bump the format's /N if the layout changed",
        path.display()
    );
}

#[test]
fn committed_schemas_are_current() {
    check_schema("kiln_export.schema.json", &ExportManifest::schema());
    check_schema("kiln_assets.schema.json", &AssetsManifest::schema());
}

/// The schema's top-level properties and required keys.
fn keys(schema: &str) -> (Vec<String>, Vec<String>) {
    let v: serde_json::Value = serde_json::from_str(schema).unwrap();
    let props = v["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let required = v["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    (props, required)
}

#[test]
fn an_export_manifest_has_the_schemas_keys() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = Checkpoint::synthetic("schema_model", tiny_config(), 7).unwrap();
    let opts = ExportOptions::new(8, dir.path());
    let r = export(&ckpt, &opts).unwrap();
    let text = std::fs::read_to_string(&r.manifest_path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["format"], ExportManifest::FORMAT);
    let (props, required) = keys(&ExportManifest::schema());
    for k in v.as_object().unwrap().keys() {
        assert!(props.contains(k), "key \"{k}\" is not in the schema");
    }
    for k in &required {
        assert!(v.get(k).is_some(), "required key \"{k}\" is missing");
    }
    // kiln run reads it back as the same type.
    let m = RunManifest::read(&r.manifest_path).unwrap().unwrap();
    assert_eq!(m.export.as_ref(), Some(&r.manifest));
    // A manifest from before `format` existed reads as the first format.
    let mut old = v.clone();
    old.as_object_mut().unwrap().remove("format");
    std::fs::write(&r.manifest_path, old.to_string()).unwrap();
    let m = RunManifest::read(&r.manifest_path).unwrap().unwrap();
    assert_eq!(m.export.unwrap().format, ExportManifest::FORMAT);
}

fn tiny_config() -> kiln::models::DecoderConfig {
    let mut c = kiln::models::DecoderConfig::from_hf_json(
        r#"{"model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "vocab_size": 32, "max_position_embeddings": 64}"#,
    )
    .unwrap();
    c.eos_token_ids = vec![2];
    c
}
