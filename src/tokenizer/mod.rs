//! Tokenizers: byte-level BPE from a GGUF vocabulary or an HF `tokenizer.json`.

/// Tokenizer data is malformed or text cannot be encoded.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TokenizerError(pub String);
