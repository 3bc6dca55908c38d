//! A tokenizer from a GGUF file's `tokenizer.*` metadata (llama.cpp's
//! `gpt2` tokenizer model: byte-level BPE).

use super::added::AddedToken;
use super::bpe::{Bpe, BpeOptions};
use super::{byte_level, PreTokenizer, Tokenizer, TokenizerError};
use std::collections::HashMap;

/// llama.cpp's token type for control tokens (`<|im_end|>`).
const CONTROL: i32 = 3;
/// llama.cpp's token type for user-defined tokens, matched whole.
const USER_DEFINED: i32 = 4;

/// The pre-tokenizer of a `tokenizer.ggml.pre` value, for the values whose
/// HF tokenizer kiln reproduces exactly.
pub fn pre_tokenizer_for(pre: &str) -> Option<PreTokenizer> {
    match pre {
        // llama.cpp: regexes `\p{N}` then the GPT-2 one; HF tokenizer.json:
        // Sequence[Digits(individual_digits), ByteLevel].
        "smollm" | "starcoder" => Some(PreTokenizer::DigitsThenGpt2),
        "gpt2" => Some(PreTokenizer::Gpt2),
        _ => None,
    }
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes, from its metadata:
    /// `tokenizer.ggml.tokens`, `.merges`, `.token_type` (3 = control,
    /// 4 = user-defined), `.bos_token_id`, `.eos_token_id`, `.pre` and
    /// `tokenizer.chat_template`. The caller checks that
    /// `tokenizer.ggml.model` is `gpt2` (byte-level BPE).
    ///
    /// As transformers does when it loads a GGUF: a token spelled outside
    /// the byte alphabet is re-spelled from its UTF-8 bytes; control tokens
    /// become special added tokens and user-defined ones plain added tokens,
    /// both matched whole in the text.
    pub fn from_gguf_parts(
        tokens: Vec<String>,
        merges: Vec<String>,
        token_types: Option<Vec<i32>>,
        bos: Option<u32>,
        eos: Option<u32>,
        pre: &str,
        chat_template: Option<String>,
    ) -> crate::Result<Tokenizer> {
        let pre_tokenizer = pre_tokenizer_for(pre).ok_or_else(|| {
            TokenizerError::Unsupported(format!(
                "GGUF pre-tokenizer `tokenizer.ggml.pre = {pre}` (supported: smollm, starcoder, gpt2)"
            ))
        })?;
        if let Some(types) = &token_types {
            if types.len() != tokens.len() {
                return Err(TokenizerError::Malformed(format!(
                    "tokenizer.ggml.token_type has {} entries for {} tokens",
                    types.len(),
                    tokens.len()
                ))
                .into());
            }
        }
        if u32::try_from(tokens.len()).is_err() {
            return Err(TokenizerError::Malformed("too many tokens".into()).into());
        }
        let mut vocab = HashMap::with_capacity(tokens.len());
        for (id, token) in tokens.iter().enumerate() {
            let spelled = if byte_level::is_byte_level(token) {
                token.clone()
            } else {
                let mut s = String::new();
                byte_level::encode_bytes(token.as_bytes(), &mut s);
                s
            };
            vocab.insert(spelled, id as u32);
        }
        let mut added = Vec::new();
        for (id, (token, &ty)) in tokens.iter().zip(token_types.iter().flatten()).enumerate() {
            // A control token outside the byte alphabet is a llama.cpp
            // mislabel; transformers skips it, and so do we.
            let special = ty == CONTROL && byte_level::is_byte_level(token);
            if special || ty == USER_DEFINED {
                added.push(AddedToken {
                    id: id as u32,
                    content: token.clone(),
                    special,
                    normalized: false,
                    lstrip: false,
                    rstrip: false,
                });
            }
        }
        let pairs = merges
            .iter()
            .enumerate()
            .map(|(i, m)| match m.split_once(' ') {
                Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(' ') => {
                    Ok((a.to_string(), b.to_string()))
                }
                _ => Err(TokenizerError::Malformed(format!(
                    "tokenizer.ggml.merges[{i}] = {m:?} is not two tokens separated by one space"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let bpe = Bpe::new(vocab, &pairs, BpeOptions::default())?;
        Ok(Tokenizer::assemble(
            bpe,
            pre_tokenizer,
            added,
            bos,
            eos,
            chat_template,
        )?)
    }
}
