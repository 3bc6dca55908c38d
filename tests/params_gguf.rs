//! GGUF reader and dequantization, checked against the `gguf` Python
//! package (fixtures written by scripts/fixtures/make_gguf_fixtures.py).

use kiln::params::gguf::{GgufFile, GgufValue};
use kiln::params::GgmlType;
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    crate::common::root().join("tests/fixtures/params/gguf")
}

fn sha_f32(v: &[f32]) -> String {
    let mut h = Sha256::new();
    for x in v {
        h.update(x.to_le_bytes());
    }
    format!("{:x}", h.finalize())
}

#[test]
fn dequantization_matches_gguf_package_bit_for_bit() {
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("expected.json")).unwrap()).unwrap();
    let files = expected.as_object().unwrap();
    assert_eq!(files.len(), 11, "one fixture per type");
    for (file, tensors) in files {
        let g = GgufFile::open(fixtures().join(file)).unwrap();
        assert_eq!(g.version(), 3);
        for (name, exp) in tensors.as_object().unwrap() {
            let t = g.tensor(name).unwrap_or_else(|| panic!("{file}: {name}"));
            assert_eq!(t.ggml_type.to_string(), exp["type"].as_str().unwrap());
            let dims: Vec<u64> = exp["dims"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(t.dims, dims, "{file}: {name}");
            let got = g.dequantize(t).unwrap();
            let bits: Vec<u32> = exp["bits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(got.len(), bits.len());
            for (i, (g, &e)) in got.iter().zip(&bits).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    e,
                    "{file}: {name}[{i}]: {g} vs {}",
                    f32::from_bits(e)
                );
            }
            assert_eq!(sha_f32(&got), exp["sha256"].as_str().unwrap());
        }
    }
}

#[test]
fn metadata_of_every_type_v3_and_v2() {
    for (f, version) in [("metadata.gguf", 3), ("metadata_v2.gguf", 2)] {
        let g = GgufFile::open(fixtures().join(f)).unwrap();
        assert_eq!(g.version(), version);
        assert_eq!(g.alignment(), 64);
        assert_eq!(g.data_start() % 64, 0);
        let m = |k: &str| g.get_metadata(k).unwrap_or_else(|| panic!("{k}")).clone();
        assert_eq!(m("general.architecture").as_str(), Some("llama"));
        assert_eq!(m("test.u8"), GgufValue::U8(200));
        assert_eq!(m("test.i8"), GgufValue::I8(-100));
        assert_eq!(m("test.u16"), GgufValue::U16(60000));
        assert_eq!(m("test.i16"), GgufValue::I16(-30000));
        assert_eq!(m("test.u32"), GgufValue::U32(4_000_000_000));
        assert_eq!(m("test.i32"), GgufValue::I32(-2_000_000_000));
        assert_eq!(m("test.f32"), GgufValue::F32(1.5));
        assert_eq!(m("test.bool"), GgufValue::Bool(true));
        assert_eq!(m("test.string").as_str(), Some("héllo wörld"));
        assert_eq!(m("test.u64"), GgufValue::U64((1 << 63) + 5));
        assert_eq!(m("test.i64"), GgufValue::I64(-(1 << 62)));
        assert_eq!(m("test.f64"), GgufValue::F64(-2.25));
        assert_eq!(
            m("test.array_i32"),
            GgufValue::Array(
                5,
                vec![GgufValue::I32(1), GgufValue::I32(-2), GgufValue::I32(3)]
            )
        );
        assert_eq!(
            m("test.array_str").as_string_array().unwrap(),
            vec!["a", "bc", "", "Ġthe"]
        );
        let nested = m("test.array_nested");
        let outer = nested.as_array().unwrap();
        assert_eq!(outer.len(), 2);
        assert_eq!(outer[0].as_string_array().unwrap(), vec!["x", "y"]);
        assert_eq!(outer[1].as_string_array().unwrap(), vec!["z"]);
        assert_eq!(
            m("test.array_bool"),
            GgufValue::Array(7, vec![GgufValue::Bool(true), GgufValue::Bool(false)])
        );
        assert_eq!(m("llama.embedding_length").as_u64(), Some(64));
        assert_eq!(m("tokenizer.ggml.bos_token_id").as_u64(), Some(0));
        assert_eq!(m("tokenizer.ggml.eos_token_id").as_u64(), Some(1));
        assert_eq!(
            m("tokenizer.ggml.tokens").as_string_array().unwrap(),
            vec!["<s>", "</s>", "a", "b"]
        );

        // Key order and types as gguf.GGUFReader saw them.
        let reference: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixtures().join("metadata.json")).unwrap())
                .unwrap();
        let keys: Vec<&str> = g.metadata().iter().map(|(k, _)| k.as_str()).collect();
        let ref_keys: Vec<&str> = reference["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["key"].as_str().unwrap())
            .collect();
        assert_eq!(keys, ref_keys);
        for t in reference["tensors"].as_array().unwrap() {
            let info = g.tensor(t["name"].as_str().unwrap()).unwrap();
            assert_eq!(info.ggml_type, GgmlType::F32);
            assert_eq!(info.offset, t["offset"].as_u64().unwrap() - g.data_start());
        }
        let x = g.dequantize_by_name("x").unwrap();
        assert_eq!(x, (0..64).map(|i| i as f32).collect::<Vec<_>>());
        assert_eq!(g.tensor("x").unwrap().shape(), vec![2, 32]);
    }
}

#[test]
fn smollm2_q8_0_and_q4_1_match_gguf_package() {
    let Some(path) = crate::common::smollm2_gguf() else {
        return;
    };
    let reference: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("smollm2_reference.json")).unwrap())
            .unwrap();
    let g = GgufFile::open(&path).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(
        g.get_metadata("llama.embedding_length")
            .and_then(|v| v.as_u64()),
        Some(576)
    );
    assert_eq!(
        g.get_metadata("llama.block_count").and_then(|v| v.as_u64()),
        Some(30)
    );
    assert_eq!(
        g.get_metadata("tokenizer.ggml.tokens")
            .and_then(|v| v.as_string_array())
            .map(|v| v.len()),
        Some(49152)
    );
    assert_eq!(
        g.get_metadata("tokenizer.ggml.merges")
            .and_then(|v| v.as_string_array())
            .map(|v| v.len()),
        Some(48900)
    );
    for (name, exp) in reference["tensors"].as_object().unwrap() {
        let t = g.tensor(name).unwrap();
        assert_eq!(t.ggml_type.to_string(), exp["type"].as_str().unwrap());
        let got = g.dequantize(t).unwrap();
        assert_eq!(got.len() as u64, exp["numel"].as_u64().unwrap());
        let idx = exp["sample_index"].as_array().unwrap();
        let bits = exp["sample_bits"].as_array().unwrap();
        for (i, b) in idx.iter().zip(bits) {
            let i = i.as_u64().unwrap() as usize;
            assert_eq!(got[i].to_bits() as u64, b.as_u64().unwrap(), "{name}[{i}]");
        }
        assert_eq!(sha_f32(&got), exp["sha256"].as_str().unwrap(), "{name}");
    }
}
