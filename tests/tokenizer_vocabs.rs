//! kiln's tokenizers against the reference ids llama.cpp ships with its
//! vocabulary files: `.inp` texts and `.out` ids (what each model's HF
//! tokenizer gives them, `encode(text, add_special_tokens=False)`), from
//! llama.cpp's `models/` (MIT, `LICENSE` beside them). SentencePiece-style:
//! `tests/fixtures/tokenizer/llama.cpp/ggml-vocab-{llama-spm,phi-3}.gguf`
//! (committed). Byte-level with Llama 3's and Qwen2's regexes:
//! `ggml-vocab-{llama-bpe,qwen2}.gguf` in the cache
//! (`scripts/fetch-llama-vocab.sh`). Gemma 3: the real 270M GGUF in the
//! cache (`scripts/fetch-gemma3.sh`) against transformers' ids
//! (`gemma3-transformers.json`).

use crate::common;

use kiln::tokenizer::{StreamDecoder, Tokenizer};
use std::path::PathBuf;

fn vocab(name: &str) -> PathBuf {
    crate::common::root()
        .join("tests/fixtures/tokenizer/llama.cpp")
        .join(name)
}

/// The (text, ids) cases of a committed llama.cpp vocabulary test.
fn cases(name: &str) -> Vec<(String, Vec<u32>)> {
    cases_in(&vocab(""), name)
}

/// The (text, ids) cases of the llama.cpp vocabulary test `name` in `dir`.
fn cases_in(dir: &std::path::Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let sep = "\n__ggml_vocab_test__\n";
    let inp = std::fs::read_to_string(dir.join(format!("{name}.inp"))).unwrap();
    let out = std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap();
    let texts: Vec<&str> = inp.strip_suffix(sep).unwrap().split(sep).collect();
    let ids: Vec<Vec<u32>> = out
        .strip_suffix('\n')
        .unwrap()
        .split('\n')
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(texts.len(), ids.len(), "{name}: .inp and .out disagree");
    texts.into_iter().map(String::from).zip(ids).collect()
}

const VOCABS: [&str; 2] = ["ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"];

#[test]
fn gguf_sentencepiece_vocabularies_encode_as_the_reference() {
    for name in VOCABS {
        let tok = kiln::tokenizer::from_gguf(vocab(name)).unwrap();
        assert!(tok.adds_bos(), "{name}");
        let mut bad = Vec::new();
        for (text, want) in cases(name) {
            let got = tok.encode(&text).unwrap();
            if got != want {
                bad.push(format!("{text:?}: got {got:?}, want {want:?}"));
            }
            // Decoding gives the text back (one leading space is the
            // prefix, dropped as HF's Strip decoder does), in one go and
            // streamed token by token.
            assert_eq!(tok.decode(&got).unwrap(), text, "{name}: decode");
            let mut s = StreamDecoder::new();
            let mut streamed = String::new();
            for &id in &got {
                streamed.push_str(&s.push(&tok, id).unwrap());
            }
            streamed.push_str(&s.finish(&tok).unwrap());
            assert_eq!(streamed, text, "{name}: streamed decode");
        }
        assert!(
            bad.is_empty(),
            "{name}: {} of the cases differ:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }
}

/// transformers' GGUF tokenizer for the Phi-3 vocabulary on texts with
/// special tokens (`phi-3-transformers.json`, by
/// `scripts/fixtures/make_spm_tokenizer_fixtures.py`).
#[test]
fn phi3_special_tokens_bos_and_decoding_match_transformers() {
    let tok = kiln::tokenizer::from_gguf(vocab("ggml-vocab-phi-3.gguf")).unwrap();
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(32000)));
    let doc = transformers_doc();
    for c in doc["cases"].as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        let got = tok.encode(text).unwrap();
        assert_eq!(got, ids(&c["ids"]), "{text:?}");
        assert_eq!(
            tok.encode_prompt(text, false).unwrap(),
            ids(&c["ids_with_bos"]),
            "{text:?}"
        );
        assert_eq!(
            tok.encode_prompt(text, true).unwrap(),
            got,
            "templated: no bos"
        );
        assert_eq!(
            tok.decode(&got).unwrap(),
            c["decode"].as_str().unwrap(),
            "{text:?}"
        );
        assert_eq!(
            tok.decode_skipping_special(&got).unwrap(),
            c["decode_skip_special"].as_str().unwrap(),
            "{text:?}"
        );
    }
}

fn transformers_doc() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(vocab("phi-3-transformers.json")).unwrap())
        .unwrap()
}

/// A JSON array of token ids.
fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Every text encodes to its expected ids; the failures are listed together.
fn expect_encodes<'a>(
    tok: &Tokenizer,
    label: &str,
    cases: impl IntoIterator<Item = (&'a str, Vec<u32>)>,
) {
    let (mut n, mut bad) = (0, Vec::new());
    for (text, want) in cases {
        n += 1;
        let got = tok.encode(text).unwrap();
        if got != want {
            bad.push(format!("{text:?}: got {got:?}, want {want:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{label}: {} of {n} differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// kiln derives exactly the merges transformers derives from the scores
/// (those of the `tokenizer.json` it builds for the GGUF vocabulary).
#[test]
fn merges_from_scores_equal_transformers() {
    use sha2::{Digest, Sha256};
    let doc = transformers_doc();
    for name in VOCABS {
        let f = kiln::params::gguf::GgufFile::open(vocab(name)).unwrap();
        let files = kiln::tokenizer::TokenizerFiles::from_gguf(&f).unwrap();
        let json: serde_json::Value = serde_json::from_str(&files.tokenizer_json).unwrap();
        let merges = json["model"]["merges"].as_array().unwrap();
        let text = merges
            .iter()
            .map(|m| format!("{} {}", m[0].as_str().unwrap(), m[1].as_str().unwrap()))
            .collect::<Vec<_>>()
            .join("\n");
        let want = &doc["merges"][name];
        assert_eq!(
            merges.len() as u64,
            want["count"].as_u64().unwrap(),
            "{name}"
        );
        let got = format!("{:x}", Sha256::digest(text.as_bytes()));
        assert_eq!(
            got,
            want["sha256"].as_str().unwrap(),
            "{name}: merges differ from transformers'"
        );
    }
}

/// The tokenizer `kiln package` would ship for the GGUF vocabulary at
/// `gguf`: its `tokenizer.json` and `tokenizer_config.json`, loaded back.
fn packaged_tokenizer(gguf: &std::path::Path) -> Tokenizer {
    let f = kiln::params::gguf::GgufFile::open(gguf).unwrap();
    let files = kiln::tokenizer::TokenizerFiles::from_gguf(&f).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.tokenizer.json"), &files.tokenizer_json).unwrap();
    std::fs::write(
        dir.path().join("m.tokenizer_config.json"),
        &files.tokenizer_config_json,
    )
    .unwrap();
    Tokenizer::from_tokenizer_json(dir.path().join("m.tokenizer.json")).unwrap()
}

/// The `tokenizer.json` `kiln package` writes for a SentencePiece GGUF
/// loads back and encodes every reference case the same.
#[test]
fn packaged_tokenizer_json_encodes_as_the_gguf() {
    for name in VOCABS {
        let tok = packaged_tokenizer(&vocab(name));
        assert!(tok.adds_bos(), "{name}");
        let from_gguf = kiln::tokenizer::from_gguf(vocab(name)).unwrap();
        assert_eq!(
            (tok.bos(), tok.eos()),
            (from_gguf.bos(), from_gguf.eos()),
            "{name}"
        );
        for (text, want) in cases(name) {
            let got = tok.encode(&text).unwrap();
            assert_eq!(got, want, "{name}: {text:?}");
            assert_eq!(tok.decode(&got).unwrap(), text, "{name}: decode {text:?}");
        }
    }
}

/// The Metaspace spelling newer `tokenizer.json` files use (transformers'
/// Llama tokenizer: `prepend_scheme: first`) differs from the Prepend
/// normalizer only where a text starts with a space.
#[test]
fn metaspace_prepends_unless_the_text_starts_with_a_space() {
    let f = kiln::params::gguf::GgufFile::open(vocab("ggml-vocab-llama-spm.gguf")).unwrap();
    let files = kiln::tokenizer::TokenizerFiles::from_gguf(&f).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&files.tokenizer_json).unwrap();
    doc["normalizer"] = serde_json::Value::Null;
    doc["pre_tokenizer"] = serde_json::json!({
        "type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    let meta = Tokenizer::from_tokenizer_json(&path).unwrap();
    let prepend = kiln::tokenizer::from_gguf(vocab("ggml-vocab-llama-spm.gguf")).unwrap();
    // transformers' own Metaspace tokenizer for this file, on every case.
    for c in transformers_doc()["llama_spm_metaspace"]
        .as_array()
        .unwrap()
    {
        let text = c["text"].as_str().unwrap();
        let want = ids(&c["ids"]);
        let got = meta.encode(text).unwrap();
        assert_eq!(got, want, "{text:?}");
        assert_eq!(
            meta.decode(&got).unwrap(),
            c["decode"].as_str().unwrap(),
            "decode {text:?}"
        );
    }
    assert_eq!(
        meta.encode("Hello world").unwrap(),
        prepend.encode("Hello world").unwrap()
    );
    // " Hello": Metaspace gives ▁Hello, the Prepend normalizer ▁▁Hello.
    let (m, p) = (
        meta.encode(" Hello").unwrap(),
        prepend.encode(" Hello").unwrap(),
    );
    assert_eq!(m, prepend.encode("Hello").unwrap());
    assert_ne!(m, p);
    // "first": a piece after an added token gets no ▁.
    let s = prepend.token_to_id("</s>").unwrap();
    let after = meta.encode("</s>Hi").unwrap();
    assert_eq!(after[0], s);
    assert_ne!(after[1..], prepend.encode("Hi").unwrap()[..]);
}

/// A tokenizer.json that is not one is an error naming the file; a
/// GGUF with an unknown tokenizer model says which it is.
#[test]
fn bad_tokenizer_files_are_clear_errors() {
    let f = kiln::params::gguf::GgufFile::open(vocab("ggml-vocab-phi-3.gguf")).unwrap();
    let good: serde_json::Value = serde_json::from_str(
        &kiln::tokenizer::TokenizerFiles::from_gguf(&f)
            .unwrap()
            .tokenizer_json,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let try_load = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut doc = good.clone();
        edit(&mut doc);
        let p = dir.path().join("tokenizer.json");
        std::fs::write(&p, doc.to_string()).unwrap();
        Tokenizer::from_tokenizer_json(&p).unwrap_err().to_string()
    };
    let e = try_load(&|d| d["model"]["vocab"] = "not a map".into());
    assert!(e.contains("tokenizer.json"), "{e}");
    let e =
        try_load(&|d| d["model"]["merges"] = serde_json::json!([["\u{2581}", "no-such-token"]]));
    assert!(e.contains("tokenizer.json"), "{e}");
    let mut v = kiln::tokenizer::GgufVocab::read(&f).unwrap();
    v.model = "rwkv".into();
    let e = kiln::tokenizer::from_gguf_vocab(&v, std::path::Path::new("x.gguf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("x.gguf") && e.contains("rwkv"), "{e}");
}

/// llama.cpp's byte-level vocabularies of Llama 3 (`llama-bpe`) and Qwen2,
/// found (fetched, or skipped) by `common::llama_cpp_vocab_dir`.
fn byte_level_vocab_dir() -> Option<PathBuf> {
    common::llama_cpp_vocab_dir()
}

#[test]
fn gguf_llama3_and_qwen2_vocabularies_encode_as_the_reference() {
    let Some(dir) = byte_level_vocab_dir() else {
        return;
    };
    for name in ["ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen2.gguf"] {
        let cases = cases_in(&dir, name);
        let tok = kiln::tokenizer::from_gguf(dir.join(name)).unwrap();
        // And the tokenizer.json `kiln package` writes for it.
        let packaged = packaged_tokenizer(&dir.join(name));
        let mut bad = Vec::new();
        for (text, want) in &cases {
            let got = tok.encode(text).unwrap();
            if &got != want {
                bad.push(format!("{text:?}: got {got:?}, want {want:?}"));
            }
            assert_eq!(tok.decode(&got).unwrap(), *text, "{name}: decode");
            assert_eq!(
                packaged.encode(text).unwrap(),
                got,
                "{name}: packaged {text:?}"
            );
        }
        assert!(
            bad.is_empty(),
            "{name}: {} of {} cases differ:\n{}",
            bad.len(),
            cases.len(),
            bad.join("\n")
        );
    }
}

/// A `tokenizer.json` with Qwen2's NFC normalizer composes before splitting.
#[test]
fn nfc_normalizer_composes_text_pieces() {
    let Some(dir) = byte_level_vocab_dir() else {
        return;
    };
    let f = kiln::params::gguf::GgufFile::open(dir.join("ggml-vocab-qwen2.gguf")).unwrap();
    let files = kiln::tokenizer::TokenizerFiles::from_gguf(&f).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&files.tokenizer_json).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tokenizer.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    let plain = Tokenizer::from_tokenizer_json(&path).unwrap();
    doc["normalizer"] = serde_json::json!({"type": "NFC"});
    std::fs::write(&path, doc.to_string()).unwrap();
    let nfc = Tokenizer::from_tokenizer_json(&path).unwrap();
    let decomposed = "Cafe\u{301} au lait";
    assert_eq!(
        nfc.encode(decomposed).unwrap(),
        plain.encode("Caf\u{e9} au lait").unwrap()
    );
    assert_ne!(
        plain.encode(decomposed).unwrap(),
        nfc.encode(decomposed).unwrap()
    );
}

/// A `tokenizer.json` whose post-processor is a `Sequence` holding the bos
/// `TemplateProcessing` (Llama 3's shape) adds the bos.
#[test]
fn bos_from_a_post_processor_sequence() {
    let Some(dir) = byte_level_vocab_dir() else {
        return;
    };
    let f = kiln::params::gguf::GgufFile::open(dir.join("ggml-vocab-llama-bpe.gguf")).unwrap();
    let files = kiln::tokenizer::TokenizerFiles::from_gguf(&f).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&files.tokenizer_json).unwrap();
    // (This vocabulary file does not set add_bos_token: no post-processor
    // of its own.)
    assert!(doc["post_processor"].is_null());
    let bos = "<|begin_of_text|>";
    let template = serde_json::json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [],
        "special_tokens": {}
    });
    doc["post_processor"] = serde_json::json!({
        "type": "Sequence",
        "processors": [{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}, template]
    });
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("m.tokenizer.json"), doc.to_string()).unwrap();
    std::fs::write(
        tmp.path().join("m.tokenizer_config.json"),
        &files.tokenizer_config_json,
    )
    .unwrap();
    let tok = Tokenizer::from_tokenizer_json(tmp.path().join("m.tokenizer.json")).unwrap();
    assert!(tok.adds_bos());
    let ids = tok.encode_prompt("Hello", false).unwrap();
    assert_eq!(ids[0], tok.bos().unwrap());
}

/// Deterministic pseudo-random texts mixing scripts, digits, whitespace
/// kinds, contractions, emoji and unassigned-in-vocabulary characters.
fn random_texts(n: usize, seed: u64) -> Vec<String> {
    let pieces = [
        "a", "Z", "é", "ß", "ж", "ع", "中", "日本", "한", "ह", "ि", "1", "23", "٣", "½", " ", "  ",
        "\t", "\n", "\r\n", "\u{3000}", "\u{a0}", "'s", "'LL", "!", "?!", "...", "-", "🦙", "👍🏽",
        "🇫🇷", "\u{200d}", "\u{7f}", "\u{1}", "x", "hello", "World", " the", "ſ",
    ];
    let mut s = seed;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    (0..n)
        .map(|_| {
            let len = (next() % 12) as usize;
            (0..len)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect()
        })
        .collect()
}

/// decode(encode(text)) is the text for every tokenizer kiln reads, on
/// texts without special tokens (SentencePiece: the prefix `▁` comes back
/// as the one leading space the decoder drops).
#[test]
fn random_texts_round_trip() {
    let mut toks = vec![
        kiln::tokenizer::from_gguf(vocab("ggml-vocab-llama-spm.gguf")).unwrap(),
        kiln::tokenizer::from_gguf(vocab("ggml-vocab-phi-3.gguf")).unwrap(),
    ];
    if let Some(dir) = byte_level_vocab_dir() {
        toks.push(kiln::tokenizer::from_gguf(dir.join("ggml-vocab-llama-bpe.gguf")).unwrap());
        toks.push(kiln::tokenizer::from_gguf(dir.join("ggml-vocab-qwen2.gguf")).unwrap());
    }
    for (k, tok) in toks.iter().enumerate() {
        for text in random_texts(1500, 0x9E37_79B9 + k as u64) {
            let ids = tok.encode(&text).unwrap();
            assert_eq!(
                tok.decode(&ids).unwrap(),
                text,
                "tokenizer {k}: {text:?} -> {ids:?}"
            );
        }
    }
}

/// 300 pseudo-random mixed-script texts: kiln's Phi-3 ids equal
/// transformers' (`phi3_random` in `phi-3-transformers.json`).
#[test]
fn phi3_random_texts_match_transformers() {
    let tok = kiln::tokenizer::from_gguf(vocab("ggml-vocab-phi-3.gguf")).unwrap();
    let doc = transformers_doc();
    let cases = doc["phi3_random"].as_array().unwrap();
    assert_eq!(cases.len(), 300);
    expect_encodes(
        &tok,
        "phi-3",
        cases
            .iter()
            .map(|c| (c["text"].as_str().unwrap(), ids(&c["ids"]))),
    );
}

/// The same 300 texts through transformers' GGUF tokenizers of the Llama 3
/// and Qwen2 vocabularies (`byte_level_random`).
#[test]
fn byte_level_random_texts_match_transformers() {
    let Some(dir) = byte_level_vocab_dir() else {
        return;
    };
    let doc = transformers_doc();
    let texts: Vec<&str> = doc["phi3_random"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap())
        .collect();
    for name in ["ggml-vocab-llama-bpe.gguf", "ggml-vocab-qwen2.gguf"] {
        let tok = kiln::tokenizer::from_gguf(dir.join(name)).unwrap();
        let want = doc["byte_level_random"][name].as_array().unwrap();
        assert_eq!(want.len(), texts.len());
        expect_encodes(&tok, name, texts.iter().copied().zip(want.iter().map(ids)));
    }
}

/// Decodes `ids` one token at a time with [`StreamDecoder`].
fn streamed(tok: &Tokenizer, ids: &[u32]) -> String {
    let mut s = StreamDecoder::new();
    let mut out = String::new();
    for &id in ids {
        out.push_str(&s.push(tok, id).unwrap());
    }
    out + &s.finish(tok).unwrap()
}

/// The real Gemma 3 270M vocabulary (262,144 tokens, merges from token
/// positions, whitespace tokens respelled, byte fallback, no space prefix)
/// against transformers' GGUF tokenizer: special tokens, bos, decoding,
/// and the 300 pseudo-random texts; random texts round-trip.
#[test]
fn gemma3_vocabulary_matches_transformers() {
    let Some(gguf) = common::gemma3_gguf() else {
        return;
    };
    let t0 = std::time::Instant::now();
    let tok = kiln::tokenizer::from_gguf(&gguf).unwrap();
    eprintln!("Gemma 3 vocabulary loaded in {:?}", t0.elapsed());
    let doc: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(vocab("../gemma3-transformers.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(tok.vocab_size() as u64, doc["vocab_size"].as_u64().unwrap());
    assert_eq!(tok.bos().map(u64::from), doc["bos_token_id"].as_u64());
    assert_eq!(tok.eos().map(u64::from), doc["eos_token_id"].as_u64());
    assert_eq!(tok.adds_bos(), doc["adds_bos"].as_bool().unwrap());
    for c in doc["cases"].as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        let got = tok.encode(text).unwrap();
        assert_eq!(got, ids(&c["ids"]), "{text:?}");
        assert_eq!(
            tok.encode_prompt(text, false).unwrap(),
            ids(&c["ids_with_bos"]),
            "{text:?}"
        );
        let decoded = tok.decode(&got).unwrap();
        assert_eq!(decoded, c["decode"].as_str().unwrap(), "{text:?}");
        assert_eq!(streamed(&tok, &got), decoded, "streamed {text:?}");
        assert_eq!(
            tok.decode_skipping_special(&got).unwrap(),
            c["decode_skip_special"].as_str().unwrap(),
            "{text:?}"
        );
    }
    let texts = transformers_doc()["phi3_random"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    let want = doc["random"].as_array().unwrap();
    assert_eq!(want.len(), 300);
    expect_encodes(
        &tok,
        "gemma3",
        texts.iter().map(String::as_str).zip(want.iter().map(ids)),
    );
    for text in random_texts(1500, 0x6E6D_6133) {
        let ids = tok.encode(&text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text, "{text:?} -> {ids:?}");
        assert_eq!(streamed(&tok, &ids), text, "streamed {text:?}");
    }
}

/// The `tokenizer.json` `kiln package` writes for the Gemma 3 GGUF is the
/// one transformers builds: the same merges and added tokens (count and
/// sha256) and the same normalizer, pre-tokenizer and decoder.
#[test]
fn gemma3_packaged_tokenizer_json_is_transformers() {
    use sha2::{Digest, Sha256};
    let Some(gguf) = common::gemma3_gguf() else {
        return;
    };
    let f = kiln::params::gguf::GgufFile::open(&gguf).unwrap();
    let files = kiln::tokenizer::TokenizerFiles::from_gguf(&f).unwrap();
    let got: serde_json::Value = serde_json::from_str(&files.tokenizer_json).unwrap();
    let want: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(vocab("../gemma3-transformers.json")).unwrap(),
    )
    .unwrap();
    let want = &want["tokenizer_json"];
    let digest = |lines: Vec<String>| format!("{:x}", Sha256::digest(lines.join("\n").as_bytes()));
    let merges: Vec<String> = got["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| format!("{} {}", m[0].as_str().unwrap(), m[1].as_str().unwrap()))
        .collect();
    assert_eq!(
        merges.len() as u64,
        want["merges"]["count"].as_u64().unwrap()
    );
    assert_eq!(digest(merges), want["merges"]["sha256"].as_str().unwrap());
    let added: Vec<String> = got["added_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            format!(
                "{} {} {}",
                t["id"],
                t["content"].as_str().unwrap(),
                t["special"]
            )
        })
        .collect();
    assert_eq!(
        added.len() as u64,
        want["added_tokens"]["count"].as_u64().unwrap()
    );
    assert_eq!(
        digest(added),
        want["added_tokens"]["sha256"].as_str().unwrap()
    );
    for key in ["normalizer", "pre_tokenizer", "decoder"] {
        assert_eq!(got[key], want[key], "{key}");
    }
}
