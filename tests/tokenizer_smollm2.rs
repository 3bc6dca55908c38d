//! kiln's tokenizer against HF transformers on SmolLM2-135M-Instruct.
//!
//! The reference is `tests/fixtures/tokenizer/cases.json`, written by
//! `scripts/fixtures/make_tokenizer_fixtures.py` (transformers + tokenizers). The
//! vocabulary comes from the real GGUF in the cache, found (fetched, or
//! skipped) by `common::smollm2_gguf`.

use kiln::tokenizer::{GgufVocab, StreamDecoder, Tokenizer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The `tokenizer.*` metadata of a GGUF file, read with kiln's GGUF reader.
#[derive(Default)]
struct GgufTokenizer {
    model: String,
    pre: String,
    tokens: Vec<String>,
    merges: Vec<String>,
    token_types: Vec<i32>,
    bos: Option<u32>,
    eos: Option<u32>,
    chat_template: Option<String>,
}

fn read_gguf_tokenizer(path: &Path) -> GgufTokenizer {
    use kiln::params::gguf::{GgufFile, GgufValue};
    let f = GgufFile::open(path).expect("open gguf");
    let s = |k: &str| {
        f.get_metadata(k)
            .and_then(GgufValue::as_str)
            .map(str::to_string)
    };
    let strs = |k: &str| -> Vec<String> {
        f.get_metadata(k)
            .and_then(GgufValue::as_string_array)
            .map(|v| v.into_iter().map(str::to_string).collect())
            .unwrap_or_default()
    };
    let id = |k: &str| {
        f.get_metadata(k)
            .and_then(GgufValue::as_u64)
            .map(|x| x as u32)
    };
    GgufTokenizer {
        model: s("tokenizer.ggml.model").unwrap_or_default(),
        pre: s("tokenizer.ggml.pre").unwrap_or_default(),
        tokens: strs("tokenizer.ggml.tokens"),
        merges: strs("tokenizer.ggml.merges"),
        token_types: f
            .get_metadata("tokenizer.ggml.token_type")
            .and_then(GgufValue::as_array)
            .map(|a| a.iter().map(|v| v.as_i64().unwrap_or(0) as i32).collect())
            .unwrap_or_default(),
        bos: id("tokenizer.ggml.bos_token_id"),
        eos: id("tokenizer.ggml.eos_token_id"),
        chat_template: s("tokenizer.chat_template"),
    }
}

/// The metadata as a [`GgufVocab`], with `pre` as `tokenizer.ggml.pre`.
fn gguf_vocab(g: &GgufTokenizer, pre: &str) -> GgufVocab {
    GgufVocab {
        model: g.model.clone(),
        pre: Some(pre.into()),
        tokens: g.tokens.clone(),
        token_types: Some(g.token_types.clone()),
        merges: Some(g.merges.clone()),
        bos: g.bos,
        eos: g.eos,
        chat_template: g.chat_template.clone(),
        ..GgufVocab::default()
    }
}

fn fixture() -> Value {
    let path = crate::common::root().join("tests/fixtures/tokenizer/cases.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Checks `tok` against every fixture case; `ids_key` names the expected
/// ids (falling back to `ids` when a case has no such entry).
fn check_cases(tok: &Tokenizer, ids_key: &str) {
    let fx = fixture();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 50, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(case.get(ids_key).unwrap_or(&case["ids"]));
        let got = tok.encode(text).unwrap();
        if got != want {
            failures.push(format!("{text:?}: kiln {got:?}, transformers {want:?}"));
            continue;
        }
        let decoded = tok.decode(&got).unwrap();
        let hf_decoded = case["decoded"].as_str().unwrap();
        if decoded != hf_decoded {
            failures.push(format!(
                "{text:?}: decodes to {decoded:?}, transformers {hf_decoded:?}"
            ));
        }
        // Round trip, except where the vocabulary lacks a byte (HF drops it too).
        if hf_decoded == text && decoded != text {
            failures.push(format!("{text:?}: round trip gave {decoded:?}"));
        }
        let mut stream = StreamDecoder::new();
        let mut streamed = String::new();
        for &id in &got {
            streamed.push_str(&stream.push(tok, id).unwrap());
        }
        streamed.push_str(&stream.finish(tok).unwrap());
        if streamed != decoded {
            failures.push(format!("{text:?}: streamed {streamed:?} != {decoded:?}"));
        }
    }
    for d in fx["decodes"].as_array().unwrap() {
        let want = d["text"].as_str().unwrap();
        let got = tok.decode(&ids(&d["ids"])).unwrap();
        if got != want {
            failures.push(format!(
                "decode {}: kiln {got:?}, transformers {want:?}",
                d["ids"]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn check_chats(tok: &Tokenizer) {
    let fx = fixture();
    let chats = fx["chats"].as_array().unwrap();
    assert!(chats.iter().any(|c| c["messages"][0][0] == "system"));
    assert!(chats.iter().any(|c| c["messages"][0][0] != "system"));
    for chat in chats {
        let messages: Vec<(String, String)> = chat["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m[0].as_str().unwrap().into(), m[1].as_str().unwrap().into()))
            .collect();
        let gen = chat["add_generation_prompt"].as_bool().unwrap();
        let text = tok.apply_chat(&messages, gen).unwrap();
        assert_eq!(text, chat["text"].as_str().unwrap(), "{messages:?}");
        assert_eq!(tok.encode(&text).unwrap(), ids(&chat["ids"]), "{text:?}");
        assert_eq!(tok.decode(&ids(&chat["ids"])).unwrap(), text);
    }
}

fn check_specials(tok: &Tokenizer) {
    let fx = fixture();
    assert_eq!(tok.bos().map(u64::from), fx["bos_token_id"].as_u64());
    assert_eq!(tok.eos().map(u64::from), fx["eos_token_id"].as_u64());
    assert_eq!(tok.vocab_size() as u64, fx["vocab_size"].as_u64().unwrap());
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
    assert!(tok.is_special(2) && !tok.is_special(17));
    assert_eq!(tok.id_to_token(216).as_deref(), Some("Ġ"));
    assert!(tok.decode(&[tok.vocab_size() as u32]).is_err());
}

fn gguf_tokenizer() -> Option<(GgufTokenizer, Tokenizer)> {
    let path = crate::common::smollm2_gguf()?;
    let g = read_gguf_tokenizer(&path);
    assert_eq!(g.model, "gpt2");
    assert_eq!(g.pre, "smollm");
    let tok = kiln::tokenizer::from_gguf_vocab(&gguf_vocab(&g, &g.pre), &path).unwrap();
    Some((g, tok))
}

#[test]
fn gguf_tokenizer_matches_transformers() {
    let Some((_, tok)) = gguf_tokenizer() else {
        return;
    };
    check_specials(&tok);
    check_cases(&tok, "ids");
    check_chats(&tok);
}

/// Writes the GGUF vocabulary as an HF tokenizer.json (the layout
/// transformers saves) with the given pre-tokenizer, plus the
/// tokenizer_config.json and chat_template.jinja transformers writes beside it.
fn write_tokenizer_json(g: &GgufTokenizer, dir: &Path, pre_tokenizer: Value) -> PathBuf {
    let vocab: serde_json::Map<String, Value> = g
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let merges: Vec<Value> = g
        .merges
        .iter()
        .map(|m| {
            let (a, b) = m.split_once(' ').unwrap();
            json!([a, b])
        })
        .collect();
    let added: Vec<Value> = g
        .token_types
        .iter()
        .enumerate()
        .filter(|(_, &t)| t == 3)
        .map(|(i, _)| {
            json!({"id": i, "content": g.tokens[i], "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let doc = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": false, "vocab": vocab, "merges": merges}
    });
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    let config = json!({"bos_token": g.tokens[g.bos.unwrap() as usize],
                        "eos_token": {"content": g.tokens[g.eos.unwrap() as usize]}});
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    std::fs::write(
        dir.join("chat_template.jinja"),
        g.chat_template.as_deref().unwrap(),
    )
    .unwrap();
    path
}

fn byte_level() -> Value {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})
}

#[test]
fn tokenizer_json_matches_transformers() {
    let Some((g, _)) = gguf_tokenizer() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pre = json!({"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": true}, byte_level()]});
    let tok = Tokenizer::from_tokenizer_json(write_tokenizer_json(&g, dir.path(), pre)).unwrap();
    check_specials(&tok);
    check_cases(&tok, "ids");
    check_chats(&tok);
}

/// transformers' GGUF loader gives `smollm` the plain ByteLevel
/// pre-tokenizer (no digit split); a tokenizer.json saved from it reproduces
/// those ids, recorded as `ids_plain_bytelevel` where they differ.
#[test]
fn plain_bytelevel_tokenizer_json_matches_transformers_gguf_loader() {
    let Some((g, _)) = gguf_tokenizer() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tok =
        Tokenizer::from_tokenizer_json(write_tokenizer_json(&g, dir.path(), byte_level())).unwrap();
    check_cases(&tok, "ids_plain_bytelevel");
    let differing = fixture()["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.get("ids_plain_bytelevel").is_some())
        .count();
    assert!(
        differing > 0,
        "fixture should show where the two pre-tokenizers differ"
    );
}

/// A long text (every case 50 times, long runs of spaces and letters)
/// round-trips; its encoding speed is printed, not asserted (speed belongs
/// in benchmarks).
#[test]
fn long_text_round_trips() {
    let Some((_, tok)) = gguf_tokenizer() else {
        return;
    };
    let fx = fixture();
    let mut text = String::new();
    // Bytes the vocabulary lacks are dropped (as in HF): count them.
    let mut dropped = 0;
    for c in fx["cases"].as_array().unwrap() {
        text.push_str(c["text"].as_str().unwrap());
        dropped += c["text"].as_str().unwrap().len() - c["decoded"].as_str().unwrap().len();
    }
    let text = text.repeat(50) + &" ".repeat(20_000) + &"a".repeat(20_000);
    let start = std::time::Instant::now();
    let ids = tok.encode(&text).unwrap();
    let elapsed = start.elapsed();
    eprintln!(
        "encoded {} bytes into {} ids in {elapsed:?}",
        text.len(),
        ids.len()
    );
    assert_eq!(tok.decode(&ids).unwrap().len(), text.len() - 50 * dropped);
}

/// The fixture of the `fixtures` branch (`scripts/fixtures/make_smollm2_fixtures.py`):
/// `ids` from transformers' GGUF loader (plain ByteLevel), `ids_llama_cpp`
/// with the `smollm` digit split.
fn fixtures_branch_cases() -> Value {
    let path = crate::common::root().join("tests/fixtures/smollm2/tokenizer_cases.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Checks `tok` against the fixtures-branch cases, ids taken from `ids_key`.
fn check_fixtures_branch_cases(tok: &Tokenizer, ids_key: &str) {
    let fx = fixtures_branch_cases();
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.len() >= 50);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let want = ids(&case[ids_key]);
        let got = tok.encode(text).unwrap();
        if got != want {
            failures.push(format!("{text:?}: kiln {got:?}, expected {want:?}"));
            continue;
        }
        if ids_key == "ids" {
            let tokens: Vec<String> = got.iter().map(|&i| tok.id_to_token(i).unwrap()).collect();
            let want_tokens: Vec<&str> = case["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            if tokens != want_tokens {
                failures.push(format!("{text:?}: tokens {tokens:?} != {want_tokens:?}"));
            }
        }
        let decoded = tok.decode(&got).unwrap();
        if decoded != case["decoded"].as_str().unwrap() || decoded != text {
            failures.push(format!("{text:?}: decodes to {decoded:?}"));
        }
        let skipped = tok.decode_skipping_special(&got).unwrap();
        if skipped != case["decoded_skip_special"].as_str().unwrap() {
            failures.push(format!("{text:?}: skip-special decode {skipped:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // A bare tokenizer.json has no template (transformers keeps it beside).
    if tok.chat_template().is_none() {
        return;
    }
    let chat = &fx["chat_example"];
    let messages: Vec<(&str, &str)> = chat["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    let gen = chat["add_generation_prompt"].as_bool().unwrap();
    assert_eq!(
        tok.apply_chat(&messages, gen).unwrap(),
        chat["text"].as_str().unwrap()
    );
    assert_eq!(tok.chat_template(), fx["chat_template"].as_str());
}

#[test]
fn gguf_tokenizer_matches_fixtures_branch_cases() {
    let Some((g, tok)) = gguf_tokenizer() else {
        return;
    };
    check_fixtures_branch_cases(&tok, "ids_llama_cpp");
    // With the plain split, it is transformers' GGUF tokenizer.
    let path = crate::common::smollm2_gguf().unwrap();
    let tok = kiln::tokenizer::from_gguf_vocab(&gguf_vocab(&g, "gpt2"), &path).unwrap();
    check_fixtures_branch_cases(&tok, "ids");
}

/// The tokenizer.json transformers itself saved from the GGUF, which only
/// the fixture script leaves in the cache: ignored (libtest counts it), run
/// with `--ignored` after `scripts/fixtures/make_smollm2_fixtures.py`.
#[test]
#[ignore = "needs the cache's smollm2/tokenizer.json (scripts/fixtures/make_smollm2_fixtures.py)"]
fn transformers_saved_tokenizer_json_matches() {
    let path = kiln::cache_dir().join("smollm2").join("tokenizer.json");
    assert!(
        path.is_file(),
        "{} is missing: scripts/fixtures/make_smollm2_fixtures.py writes it",
        path.display()
    );
    let tok = Tokenizer::from_tokenizer_json(&path).unwrap();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(1));
    check_fixtures_branch_cases(&tok, "ids");
    check_cases(&tok, "ids_plain_bytelevel");
}
