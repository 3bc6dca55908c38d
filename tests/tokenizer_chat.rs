//! Chat templates rendered by kiln (minijinja) against transformers'
//! `apply_chat_template(messages, add_generation_prompt=True)`, text and
//! ids, for the model families kiln exports
//! (`tests/fixtures/tokenizer/chat-templates.json`, written by
//! `scripts/fixtures/make_chat_template_fixtures.py`). The vocabularies are the
//! committed Phi-3 one and cached GGUFs (llama.cpp's Llama 3 and Qwen2
//! files, Gemma 3, SmolLM2), skipped or fetched as `tests/common` says.

use crate::common;

use kiln::tokenizer::Tokenizer;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

fn vocab_path(name: &str) -> Option<PathBuf> {
    match name {
        "phi-3" => Some(common::fixture("tokenizer/llama.cpp/ggml-vocab-phi-3.gguf")),
        "llama-bpe" | "qwen2" => common::llama_cpp_vocab(name),
        "gemma3" => common::gemma3_gguf(),
        "smollm2" => common::smollm2_gguf(),
        other => panic!("unknown vocabulary {other}"),
    }
}

#[test]
fn family_templates_render_as_transformers() {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture("tokenizer/chat-templates.json")).unwrap(),
    )
    .unwrap();
    let mut vocabs: HashMap<String, Option<Tokenizer>> = HashMap::new();
    let mut checked = 0;
    for fam in doc["families"].as_array().unwrap() {
        let name = fam["family"].as_str().unwrap();
        let vocab = fam["vocab"].as_str().unwrap();
        let tok = vocabs
            .entry(vocab.to_string())
            .or_insert_with(|| vocab_path(vocab).map(|p| kiln::tokenizer::from_gguf(p).unwrap()));
        let Some(tok) = tok.clone() else {
            continue;
        };
        let name_of = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i));
        assert_eq!(
            name_of(tok.bos()).as_deref(),
            fam["bos_token"].as_str(),
            "{name}"
        );
        let tok = match fam["template"].as_str().unwrap() {
            // The GGUF's own `tokenizer.chat_template`.
            "gguf" => {
                assert!(tok.chat_template().is_some(), "{name}");
                tok
            }
            file => tok.with_chat_template(
                std::fs::read_to_string(common::fixture(&format!(
                    "tokenizer/chat_templates/{file}"
                )))
                .unwrap(),
            ),
        };
        if name == "smollm2" {
            // What docs/android.md shows for SmolLM2's manifest.
            let a = tok.template().unwrap().unwrap().affixes();
            let pair = |p: &str, s: &str| Some((p.to_string(), s.to_string()));
            assert_eq!(a.user, pair("<|im_start|>user\n", "<|im_end|>\n"));
            assert_eq!(a.system, pair("<|im_start|>system\n", "<|im_end|>\n"));
            assert_eq!(
                a.generation_prompt.as_deref(),
                Some("<|im_start|>assistant\n")
            );
            assert!(a
                .first_user_prefix
                .unwrap()
                .ends_with("Hugging Face<|im_end|>\n<|im_start|>user\n"));
        }
        for case in fam["cases"].as_array().unwrap() {
            let messages: Vec<(&str, &str)> = case["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| (m[0].as_str().unwrap(), m[1].as_str().unwrap()))
                .collect();
            let got = tok.apply_chat(&messages, true);
            if let Some(err) = case["error"].as_str() {
                let e = got.unwrap_err().to_string();
                assert!(e.contains(err), "{name} {messages:?}: {e}");
                continue;
            }
            let text = got.unwrap_or_else(|e| panic!("{name} {messages:?}: {e}"));
            assert_eq!(text, case["text"].as_str().unwrap(), "{name} {messages:?}");
            let ids: Vec<u32> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            // The template writes its own special tokens: no bos added.
            assert_eq!(
                tok.encode_prompt(&text, true).unwrap(),
                ids,
                "{name} {text:?}"
            );
            checked += 1;
        }
    }
    eprintln!("{checked} conversations checked");
    // The committed Phi-3 vocabulary alone covers three families.
    assert!(checked >= 9, "{checked}");
}
