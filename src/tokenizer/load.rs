//! Opening a tokenizer from a file: a GGUF checkpoint (its own vocabulary)
//! or an HF `tokenizer.json`, chosen by the file's magic bytes.

use super::{Tokenizer, TokenizerError};
use crate::params::gguf::{GgufFile, GgufValue};
use crate::Result;
use std::path::Path;

impl Tokenizer {
    /// Opens a GGUF file's tokenizer (`tokenizer.ggml.*`, byte-level BPE only).
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
        if model != "gpt2" {
            return Err(TokenizerError::Unsupported(format!(
                "{}: tokenizer.ggml.model = \"{model}\" (supported: gpt2, byte-level BPE)",
                path.display()
            ))
            .into());
        }
        let types = f
            .get_metadata("tokenizer.ggml.token_type")
            .and_then(GgufValue::as_array)
            .map(|a| a.iter().map(|v| v.as_i64().unwrap_or(0) as i32).collect());
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
