//! Tokenizers and chat templates, from the model's own files.
//!
//! The tokenizer itself lives in the runtime crate
//! ([`kiln_runtime::tokenizer`], re-exported here): the `tokenizers` crate
//! over any HF `tokenizer.json`, and the model's Jinja `chat_template`
//! rendered with minijinja ([`ChatTemplate`]). A GGUF file carries no
//! `tokenizer.json`: the compiler builds one from its `tokenizer.*`
//! metadata as transformers' GGUF loader does ([`GgufVocab`]), and opens a
//! GGUF's tokenizer directly ([`from_gguf`], [`open`]).
//!
//! ```no_run
//! # fn main() -> kiln::Result<()> {
//! let tok = kiln::tokenizer::open("model.gguf")?;
//! let prompt = tok.apply_chat(&[("user", "Hello!")], true)?;
//! let ids = tok.encode(&prompt)?;
//! assert_eq!(tok.decode(&ids)?, prompt);
//! # Ok(()) }
//! ```
//!
//! See `spec/tokenizer.md` for what is supported.

mod gguf;

pub use gguf::{GgufVocab, TokenizerFiles};
pub use kiln_runtime::tokenizer::{
    ChatAffixes, ChatTemplate, StreamDecoder, Tokenizer, TokenizerError,
};

use crate::params::gguf::GgufFile;
use std::path::Path;

/// The tokenizer of a GGUF file's `tokenizer.*` metadata, built as
/// transformers builds it ([`GgufVocab::tokenizer_files`]).
pub fn from_gguf(path: impl AsRef<Path>) -> Result<Tokenizer, TokenizerError> {
    let path = path.as_ref();
    let f = GgufFile::open(path).map_err(|e| TokenizerError::Source(Box::new(e)))?;
    let vocab = GgufVocab::read(&f).map_err(|e| TokenizerError::file(path, e))?;
    from_gguf_vocab(&vocab, path)
}

/// The tokenizer of GGUF tokenizer metadata read elsewhere; errors name
/// `path`.
pub fn from_gguf_vocab(vocab: &GgufVocab, path: &Path) -> Result<Tokenizer, TokenizerError> {
    let (inner, config) = vocab.build().map_err(|e| TokenizerError::file(path, e))?;
    Tokenizer::from_engine(inner, &config, vocab.tokens.len(), path)
}

/// Opens a tokenizer from a GGUF file (by its magic bytes), an HF
/// `tokenizer.json`, or an HF folder holding one.
pub fn open(path: impl AsRef<Path>) -> Result<Tokenizer, TokenizerError> {
    let path = path.as_ref();
    if path.is_dir() {
        return Tokenizer::from_tokenizer_json(path.join("tokenizer.json"));
    }
    let mut magic = [0u8; 4];
    let is_gguf = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && &magic == b"GGUF";
    if is_gguf {
        from_gguf(path)
    } else {
        Tokenizer::from_tokenizer_json(path)
    }
}
