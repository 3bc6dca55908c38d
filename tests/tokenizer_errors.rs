//! The tokenizer on small hand-made vocabularies: loading, malformed and
//! unsupported input, chat templates. Needs no model files.

use kiln::tokenizer::{GgufVocab, StreamDecoder, Tokenizer};
use serde_json::{json, Value};
use std::path::PathBuf;

/// A tiny byte-level vocabulary: the 256 byte characters, `Ġt`, `he`,
/// `Ġthe`, and the special token `<|end|>`.
fn tiny_json(pre_tokenizer: Value) -> Value {
    let mut vocab = serde_json::Map::new();
    // GPT-2's byte alphabet, in byte order.
    let mut next = 256u32;
    for b in 0u32..256 {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            next += 1;
            next - 1
        };
        vocab.insert(char::from_u32(c).unwrap().to_string(), json!(b));
    }
    for (i, t) in ["Ġt", "he", "Ġthe"].iter().enumerate() {
        vocab.insert(t.to_string(), json!(256 + i));
    }
    json!({
        "added_tokens": [{"id": 259, "content": "<|end|>", "special": true, "normalized": false,
                          "lstrip": false, "rstrip": false, "single_word": false}],
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "decoder": byte_level(),
        "model": {"type": "BPE", "vocab": vocab, "merges": ["Ġ t", "h e", "Ġt he"]}
    })
}

fn byte_level() -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})
}

fn write(dir: &tempfile::TempDir, doc: &Value) -> PathBuf {
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

fn load(doc: &Value) -> Result<Tokenizer, kiln::tokenizer::TokenizerError> {
    let dir = tempfile::tempdir().unwrap();
    Tokenizer::from_tokenizer_json(write(&dir, doc))
}

#[test]
fn tiny_vocabulary_encodes_and_decodes() {
    let tok = load(&tiny_json(byte_level())).unwrap();
    assert_eq!(tok.vocab_size(), 260);
    let ids = tok.encode("the the<|end|>").unwrap();
    // "the" alone has no merge for `t he`; " the" merges fully.
    assert_eq!(ids, vec![u32::from(b't'), 257, 258, 259]);
    assert_eq!(tok.decode(&ids).unwrap(), "the the<|end|>");
    assert!(tok.is_special(259));
    assert_eq!(tok.bos(), None);
    assert!(tok.apply_chat(&[("user", "x")], true).is_err());
}

#[test]
fn invalid_utf8_decodes_like_hf() {
    let tok = load(&tiny_json(byte_level())).unwrap();
    // é = C3 A9; a lone C3, a lone A9, and C3 followed by ASCII.
    let cases: [(&[u32], &str); 4] = [
        (&[0xc3], "\u{fffd}"),
        (&[0xa9], "\u{fffd}"),
        (&[0xc3, u32::from(b'a')], "\u{fffd}a"),
        (&[0xc3, 0xa9], "é"),
    ];
    for (ids, want) in cases {
        assert_eq!(tok.decode(ids).unwrap(), want, "{ids:?}");
        let mut s = StreamDecoder::new();
        let mut out = String::new();
        for &id in ids {
            out.push_str(&s.push(&tok, id).unwrap());
        }
        out.push_str(&s.finish(&tok).unwrap());
        assert_eq!(out, want, "streamed {ids:?}");
    }
    let err = tok.decode(&[260]).unwrap_err().to_string();
    assert!(err.contains("260"), "{err}");
}

#[test]
fn config_and_template_beside_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, &tiny_json(byte_level()));
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        json!({"eos_token": "<|end|>", "bos_token": {"content": "<|end|>"},
               "chat_template": kiln::tokenizer::ChatTemplate::CHATML})
        .to_string(),
    )
    .unwrap();
    let tok = Tokenizer::from_tokenizer_json(&path).unwrap();
    assert_eq!(tok.eos(), Some(259));
    assert_eq!(tok.bos(), Some(259));
    assert_eq!(
        tok.apply_chat(&[("user", "hi")], true).unwrap(),
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        json!({"eos_token": "<|missing|>"}).to_string(),
    )
    .unwrap();
    let err = Tokenizer::from_tokenizer_json(&path)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tokenizer_config.json") && err.contains("<|missing|>"),
        "{err}"
    );
}

/// Any tokenizer.json the `tokenizers` crate reads loads: other
/// normalizers and pre-tokenizers than kiln once knew included.
#[test]
fn other_tokenizer_json_components_load() {
    let mut doc = tiny_json(byte_level());
    doc["normalizer"] = json!({"type": "NFKC"});
    let tok = load(&doc).unwrap();
    // NFKC turns the ligature "ﬁ" into "fi".
    assert_eq!(tok.encode("\u{fb01}").unwrap(), tok.encode("fi").unwrap());

    let doc = tiny_json(json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": " "}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}));
    let tok = load(&doc).unwrap();
    assert_eq!(
        tok.decode(&tok.encode("the the").unwrap()).unwrap(),
        "the the"
    );

    let mut doc = tiny_json(byte_level());
    doc["model"]["type"] = json!("NoSuchModel");
    let err = load(&doc).unwrap_err().to_string();
    assert!(err.contains("tokenizer.json"), "{err}");
}

#[test]
fn malformed_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, "{not json").unwrap();
    let err = Tokenizer::from_tokenizer_json(&path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tokenizer.json"), "{err}");

    let missing = dir.path().join("nope.json");
    let err = Tokenizer::from_tokenizer_json(&missing)
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope.json"), "{err}");

    let mut doc = tiny_json(byte_level());
    doc["model"]["merges"] = json!(["Ġ q"]);
    let err = load(&doc).unwrap_err().to_string();
    assert!(
        err.contains("tokenizer.json") && err.contains("Ġq"),
        "{err}"
    );
}

/// The tiny vocabulary as GGUF `tokenizer.*` metadata.
fn gguf_vocab() -> GgufVocab {
    let doc = tiny_json(byte_level());
    let vocab = doc["model"]["vocab"].as_object().unwrap();
    let mut tokens = vec![String::new(); 260];
    for (t, id) in vocab {
        tokens[id.as_u64().unwrap() as usize] = t.clone();
    }
    tokens[259] = "<|end|>".into();
    let mut types = vec![1; 260];
    types[259] = 3;
    GgufVocab {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens,
        token_types: Some(types),
        merges: Some(vec!["Ġ t".into(), "h e".into(), "Ġt he".into()]),
        eos: Some(259),
        chat_template: Some(kiln::tokenizer::ChatTemplate::CHATML.into()),
        ..GgufVocab::default()
    }
}

fn from_vocab(v: &GgufVocab) -> Result<Tokenizer, kiln::tokenizer::TokenizerError> {
    kiln::tokenizer::from_gguf_vocab(v, std::path::Path::new("tiny.gguf"))
}

#[test]
fn gguf_vocabulary_builds_a_tokenizer() {
    let tok = from_vocab(&gguf_vocab()).unwrap();
    assert_eq!(tok.encode(" the<|end|>").unwrap(), vec![258, 259]);
    // smollm splits digits one by one.
    assert_eq!(
        tok.encode("12").unwrap(),
        vec![u32::from(b'1'), u32::from(b'2')]
    );
    assert_eq!(tok.eos(), Some(259));
    assert!(tok.is_special(259));
}

#[test]
fn gguf_vocabulary_errors() {
    let err = |edit: &dyn Fn(&mut GgufVocab)| {
        let mut v = gguf_vocab();
        edit(&mut v);
        let e = from_vocab(&v).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("tiny.gguf"), "{e}");
        e
    };
    let e = err(&|v| v.pre = Some("deepseek-llm".into()));
    assert!(e.contains("deepseek-llm") && e.contains("llama-bpe"), "{e}");
    let e = err(&|v| v.merges = Some(vec!["Ġt".into()]));
    assert!(e.contains("merges[0]"), "{e}");
    let e = err(&|v| v.token_types = Some(vec![1; 3]));
    assert!(e.contains("token_type"), "{e}");
    let e = err(&|v| v.bos = Some(999));
    assert!(e.contains("999"), "{e}");
    let e = err(&|v| v.model = "rwkv".into());
    assert!(e.contains("rwkv") && e.contains("gpt2"), "{e}");
}

#[test]
fn huge_or_sparse_ids_are_rejected() {
    let mut doc = tiny_json(byte_level());
    doc["model"]["vocab"]["Ġthe"] = json!(4_000_000_000u32);
    let err = load(&doc).unwrap_err().to_string();
    assert!(err.contains("4000000000"), "{err}");
}
