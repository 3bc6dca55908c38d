//! A tokenizer from a GGUF file's `tokenizer.*` metadata: llama.cpp's
//! `gpt2` tokenizer model (byte-level BPE) and its `llama` one
//! (SentencePiece-style BPE with scores).

use super::added::AddedToken;
use super::bpe::{Bpe, BpeOptions};
use super::{byte_level, PreTokenizer, Tokenizer, TokenizerError};
use std::collections::HashMap;

/// llama.cpp's token type for control tokens (`<|im_end|>`).
const CONTROL: i32 = 3;
/// llama.cpp's token type for user-defined tokens, matched whole.
const USER_DEFINED: i32 = 4;

/// Whether a GGUF vocabulary is SentencePiece-style, from its
/// `tokenizer.ggml.model` and `general.architecture`: `gpt2` is byte-level
/// BPE (false), `llama` SentencePiece-style BPE (true) except in Gemma
/// files, whose vocabularies need transformers' Gemma rules (merge order
/// from token positions, whitespace tokens respelled), which kiln does not
/// reproduce. Anything else is `Err` with the unsupported setting, for a
/// message that goes on with [`SUPPORTED_MODELS`].
pub fn gguf_is_sentencepiece(model: &str, arch: &str) -> Result<bool, String> {
    match model {
        "gpt2" => Ok(false),
        "llama" if !arch.starts_with("gemma") => Ok(true),
        "llama" => Err(format!("tokenizer.ggml.model = \"llama\" of a {arch} GGUF")),
        _ => Err(format!("tokenizer.ggml.model = \"{model}\"")),
    }
}

/// The GGUF tokenizer models kiln reads, for error messages.
pub const SUPPORTED_MODELS: &str =
    "gpt2, byte-level BPE; llama, SentencePiece BPE, for llama/mistral/phi3 files";

/// The pre-tokenizer of a `tokenizer.ggml.pre` value, for the values whose
/// HF tokenizer kiln reproduces exactly.
pub fn pre_tokenizer_for(pre: &str) -> Option<PreTokenizer> {
    match pre {
        // llama.cpp: regexes `\p{N}` then the GPT-2 one; HF tokenizer.json:
        // Sequence[Digits(individual_digits), ByteLevel].
        "smollm" | "starcoder" => Some(PreTokenizer::DigitsThenGpt2),
        "gpt2" => Some(PreTokenizer::Gpt2),
        // The names llama.cpp and transformers give Llama 3's and Qwen2's
        // regexes.
        "llama-bpe" | "llama3" | "llama-v3" => Some(PreTokenizer::Llama3),
        "qwen2" | "deepseek-r1-qwen" => Some(PreTokenizer::Qwen2),
        _ => None,
    }
}

/// The `tokenizer.ggml.pre` values kiln reads, for error messages.
pub const SUPPORTED_PRE: &str =
    "smollm, starcoder, gpt2, llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen";

/// Whether a vocabulary's BPE takes a word that is itself a token whole
/// (HF `ignore_merges`): Llama 3's tokenizer does (llama.cpp sets it for
/// `llama-bpe`).
pub fn ignores_merges(pre: PreTokenizer) -> bool {
    pre == PreTokenizer::Llama3
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
                "GGUF pre-tokenizer `tokenizer.ggml.pre = {pre}` (supported: {SUPPORTED_PRE})"
            ))
        })?;
        check_counts(&tokens, token_types.as_deref())?;
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
        // A control token outside the byte alphabet is a llama.cpp
        // mislabel; transformers skips it, and so do we.
        let added = gguf_added_tokens(&tokens, token_types.as_deref(), byte_level::is_byte_level);
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
        let options = BpeOptions {
            ignore_merges: ignores_merges(pre_tokenizer),
            ..BpeOptions::default()
        };
        let bpe = Bpe::new(vocab, &pairs, options)?;
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

/// What a GGUF `llama` (SentencePiece) vocabulary holds beside its tokens.
#[derive(Debug, Clone, Default)]
pub struct SpmParts {
    /// `tokenizer.ggml.scores`, one per token.
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.token_type` (3 = control, 4 = user-defined).
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` (llama.cpp's default for this model: true).
    pub add_bos: bool,
    /// `tokenizer.ggml.add_space_prefix` (default true).
    pub add_space_prefix: bool,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

/// The added tokens of a GGUF vocabulary, as transformers' GGUF loader
/// adds them: control tokens (type 3) special, user-defined ones (type 4)
/// plain; both matched whole. `keep_control` filters the control ones.
fn gguf_added_tokens(
    tokens: &[String],
    token_types: Option<&[i32]>,
    keep_control: impl Fn(&str) -> bool,
) -> Vec<AddedToken> {
    let mut added = Vec::new();
    for (id, (token, &ty)) in tokens
        .iter()
        .zip(token_types.into_iter().flatten())
        .enumerate()
    {
        let special = ty == CONTROL && keep_control(token);
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
    added
}

/// The number of tokens as a u32-addressable count, and the token types'
/// length checked against it.
fn check_counts(tokens: &[String], token_types: Option<&[i32]>) -> Result<(), TokenizerError> {
    if let Some(types) = token_types {
        if types.len() != tokens.len() {
            return Err(TokenizerError::Malformed(format!(
                "tokenizer.ggml.token_type has {} entries for {} tokens",
                types.len(),
                tokens.len()
            )));
        }
    }
    if u32::try_from(tokens.len()).is_err() {
        return Err(TokenizerError::Malformed("too many tokens".into()));
    }
    Ok(())
}

impl Tokenizer {
    /// Builds the SentencePiece-style tokenizer of a GGUF `llama` vocabulary
    /// (Llama 2, Phi-3, Mistral v0.1): the merges transformers derives from
    /// the scores ([`super::spm::merges_from_scores`]), `<0xXX>` byte
    /// fallback, `▁` put before every piece of text when
    /// `add_space_prefix` (as llama.cpp and transformers' Phi-3 tokenizer
    /// do), one leading space dropped on decoding then; control and
    /// user-defined tokens as added tokens.
    pub fn from_gguf_spm(tokens: Vec<String>, parts: SpmParts) -> crate::Result<Tokenizer> {
        check_counts(&tokens, parts.token_types.as_deref())?;
        if parts.scores.len() != tokens.len() {
            return Err(TokenizerError::Malformed(format!(
                "tokenizer.ggml.scores has {} entries for {} tokens",
                parts.scores.len(),
                tokens.len()
            ))
            .into());
        }
        let merges = super::spm::merges_from_scores(&tokens, &parts.scores);
        let mut vocab = HashMap::with_capacity(tokens.len());
        // A repeated token keeps its last id, as transformers' dict does.
        for (id, token) in tokens.iter().enumerate() {
            vocab.insert(token.clone(), id as u32);
        }
        let added = gguf_added_tokens(&tokens, parts.token_types.as_deref(), |_| true);
        let prefix = if parts.add_space_prefix {
            super::spm::Prefix::Prepend
        } else {
            super::spm::Prefix::Never
        };
        let spm = super::spm::Spm::new(&vocab, prefix, false, parts.add_space_prefix);
        let options = BpeOptions {
            unk: parts.unk.filter(|&u| (u as usize) < tokens.len()),
            fuse_unk: true,
            ignore_merges: false,
        };
        let bpe = Bpe::new(vocab, &merges, options)?;
        let mut t = Tokenizer::assemble_with(
            bpe,
            PreTokenizer::Gpt2,
            Some(spm),
            added,
            parts.bos,
            parts.eos,
            parts.chat_template,
        )?;
        t.add_bos = parts.add_bos;
        Ok(t)
    }
}
