//! Opening a tokenizer from a file: a GGUF checkpoint (its own vocabulary)
//! or an HF `tokenizer.json`, chosen by the file's magic bytes.

use super::{Tokenizer, TokenizerError};
use crate::params::gguf::{GgufFile, GgufValue};
use crate::Result;
use std::path::Path;

/// Names the file in a tokenizer error that does not already.
fn prefix_path(path: &Path, e: crate::Error) -> crate::Error {
    match e {
        crate::Error::Tokenizer(TokenizerError::Malformed(m)) => {
            TokenizerError::Malformed(format!("{}: {m}", path.display())).into()
        }
        other => other,
    }
}

impl Tokenizer {
    /// Opens a GGUF file's tokenizer (`tokenizer.ggml.*`): byte-level BPE
    /// (`gpt2`) or SentencePiece-style BPE (`llama`, not for Gemma files).
    pub fn from_gguf(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let f = GgufFile::open(path)?;
        let s = |k: &str| {
            f.get_metadata(k)
                .and_then(GgufValue::as_str)
                .map(str::to_string)
        };
        let strings = |k: &str| -> Vec<String> {
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
        let model = s("tokenizer.ggml.model").unwrap_or_default();
        let arch = s("general.architecture").unwrap_or_default();
        let types: Option<Vec<i32>> = f
            .get_metadata("tokenizer.ggml.token_type")
            .and_then(GgufValue::as_array)
            .map(|a| a.iter().map(|v| v.as_i64().unwrap_or(0) as i32).collect());
        let flag = |k: &str, default: bool| {
            f.get_metadata(k)
                .and_then(GgufValue::as_bool)
                .unwrap_or(default)
        };
        let spm = super::gguf_is_sentencepiece(&model, &arch).map_err(|what| {
            TokenizerError::Unsupported(format!(
                "{}: {what} (supported: {}); pass token ids with --tokens",
                path.display(),
                super::SUPPORTED_MODELS
            ))
        })?;
        if spm {
            let scores = f
                .get_metadata("tokenizer.ggml.scores")
                .and_then(GgufValue::as_array)
                .map(|a| a.iter().map(|v| v.as_f64().unwrap_or(0.0) as f32).collect())
                .unwrap_or_default();
            let parts = super::gguf::SpmParts {
                scores,
                token_types: types,
                bos: id("tokenizer.ggml.bos_token_id"),
                eos: id("tokenizer.ggml.eos_token_id"),
                unk: id("tokenizer.ggml.unknown_token_id"),
                add_bos: flag("tokenizer.ggml.add_bos_token", true),
                add_space_prefix: flag("tokenizer.ggml.add_space_prefix", true),
                chat_template: s("tokenizer.chat_template"),
            };
            return Tokenizer::from_gguf_spm(strings("tokenizer.ggml.tokens"), parts)
                .map_err(|e| prefix_path(path, e));
        }
        Tokenizer::from_gguf_parts(
            strings("tokenizer.ggml.tokens"),
            strings("tokenizer.ggml.merges"),
            types,
            id("tokenizer.ggml.bos_token_id"),
            id("tokenizer.ggml.eos_token_id"),
            &s("tokenizer.ggml.pre").unwrap_or_else(|| "gpt2".into()),
            s("tokenizer.chat_template"),
        )
    }

    /// Opens a tokenizer from a GGUF file or an HF `tokenizer.json`.
    pub fn open(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let mut magic = [0u8; 4];
        let is_gguf = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
            .is_ok()
            && &magic == b"GGUF";
        if is_gguf {
            Tokenizer::from_gguf(path)
        } else {
            Tokenizer::from_tokenizer_json(path)
        }
    }
}
