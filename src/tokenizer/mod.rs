//! Tokenizers: BPE from a GGUF vocabulary or an HF `tokenizer.json`.
//!
//! [`Tokenizer`] reproduces HF `tokenizers` for two kinds of BPE. Byte-level
//! (SmolLM2, StarCoder, GPT-2): added/special tokens are matched in the raw
//! text first, the rest is pre-tokenized ([`PreTokenizer`]), each word is
//! spelled in GPT-2's byte alphabet and merged by rank. SentencePiece-style
//! (Llama 2, Phi-3): spaces spelled `▁`, a `▁` prepended, characters merged
//! by rank with `<0xXX>` byte fallback. Decoding maps tokens back to bytes
//! and replaces invalid UTF-8 with U+FFFD, as HF does.
//!
//! ```no_run
//! # fn main() -> kiln::Result<()> {
//! let tok = kiln::tokenizer::Tokenizer::from_tokenizer_json("tokenizer.json")?;
//! let prompt = tok.apply_chat(&[("user", "Hello!")], true)?;
//! let ids = tok.encode(&prompt)?;
//! assert_eq!(tok.decode(&ids)?, prompt);
//! # Ok(()) }
//! ```
//!
//! See `spec/tokenizer.md` for what is supported.

mod added;
mod bpe;
mod byte_level;
mod chat;
mod gguf;
mod hf_json;
mod load;
mod pretokenize;
mod spm;

pub use gguf::{
    gguf_is_sentencepiece, ignores_merges, pre_tokenizer_for, SUPPORTED_MODELS, SUPPORTED_PRE,
};
pub use pretokenize::{PreTokenizer, LLAMA3_REGEX, QWEN2_REGEX};
pub use spm::merges_from_scores as sentencepiece_merges;
pub use spm::Prefix as SpacePrefix;

use added::{AddedToken, AddedTokens};
use bpe::Bpe;
use std::collections::HashMap;
use std::ops::Range;

/// Tokenizer data is malformed, unsupported, or an id is out of range.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The vocabulary, merges or tokenizer file contradict themselves.
    #[error("malformed tokenizer: {0}")]
    Malformed(String),
    /// A tokenizer file could not be parsed as JSON of the expected shape.
    #[error("{path}: {message}")]
    File {
        /// The file at fault.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The tokenizer uses a feature kiln does not implement.
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),
    /// A token id is not in the vocabulary.
    #[error("token id {id} is out of range (vocabulary size {vocab_size})")]
    UnknownId {
        /// The offending id.
        id: u32,
        /// The number of ids the tokenizer knows.
        vocab_size: usize,
    },
    /// The tokenizer has no chat template, or one kiln cannot render.
    #[error("chat template: {0}")]
    ChatTemplate(String),
}

/// A BPE tokenizer (byte-level or SentencePiece-style) with its special
/// tokens and chat template.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    bpe: Bpe,
    pre: PreTokenizer,
    /// SentencePiece-style spelling (`▁`, byte fallback) instead of the
    /// byte-level alphabet and pre-tokenizer.
    spm: Option<spm::Spm>,
    /// Whether HF's `encode(text)` puts the bos token first.
    add_bos: bool,
    /// Text pieces are NFC-normalized before pre-tokenizing (Qwen2's
    /// `tokenizer.json`).
    nfc: bool,
    added: AddedTokens,
    /// Each id's token string (added tokens: their content).
    id_tokens: Vec<String>,
    /// Each id's bytes, as the byte-level decoder produces them.
    id_bytes: Vec<Vec<u8>>,
    /// Ids of special (control) tokens.
    special: Vec<bool>,
    bos: Option<u32>,
    eos: Option<u32>,
    chat_template: Option<String>,
}

impl Tokenizer {
    /// Assembles a tokenizer; `vocab_size` ids `0..vocab_size` must all be
    /// named by the vocabulary or the added tokens.
    fn assemble(
        bpe: Bpe,
        pre: PreTokenizer,
        added: Vec<AddedToken>,
        bos: Option<u32>,
        eos: Option<u32>,
        chat_template: Option<String>,
    ) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::assemble_with(bpe, pre, None, added, bos, eos, chat_template)
    }

    /// [`Tokenizer::assemble`] with SentencePiece-style spelling when `spm`
    /// is given.
    fn assemble_with(
        bpe: Bpe,
        pre: PreTokenizer,
        spm: Option<spm::Spm>,
        added: Vec<AddedToken>,
        bos: Option<u32>,
        eos: Option<u32>,
        chat_template: Option<String>,
    ) -> Result<Tokenizer, TokenizerError> {
        let max_id = bpe
            .vocab
            .values()
            .chain(added.iter().map(|t| &t.id))
            .copied()
            .max();
        let size = max_id.map_or(0, |m| m as usize + 1);
        // Ids must be 0..size without gaps; check before allocating `size`.
        if size > bpe.vocab.len() + added.len() {
            return Err(TokenizerError::Malformed(format!(
                "token ids run to {} but there are only {} tokens",
                size - 1,
                bpe.vocab.len() + added.len()
            )));
        }
        let mut id_tokens: Vec<Option<String>> = vec![None; size];
        for (token, &id) in &bpe.vocab {
            id_tokens[id as usize] = Some(token.clone());
        }
        let mut special = vec![false; size];
        // Added tokens decode to their content (HF looks them up first).
        for t in &added {
            id_tokens[t.id as usize] = Some(t.content.clone());
            special[t.id as usize] = t.special;
        }
        let id_tokens: Vec<String> = id_tokens
            .into_iter()
            .enumerate()
            .map(|(id, t)| {
                t.ok_or_else(|| {
                    TokenizerError::Malformed(format!(
                        "ids run to {} but no token has id {id}",
                        size - 1
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        for (what, id) in [("bos", bos), ("eos", eos)] {
            if let Some(id) = id {
                if id as usize >= size {
                    return Err(TokenizerError::Malformed(format!(
                        "{what} token id {id} is out of range (vocabulary size {size})"
                    )));
                }
            }
        }
        let is_added: Vec<bool> = {
            let mut v = vec![false; size];
            for t in &added {
                v[t.id as usize] = true;
            }
            v
        };
        let id_bytes = id_tokens
            .iter()
            .zip(&is_added)
            .map(|(t, &a)| match (&spm, a) {
                // An added token decodes to its content as written.
                (Some(_), true) => t.as_bytes().to_vec(),
                (Some(_), false) => spm::decode_token(t),
                (None, _) => byte_level::decode_token(t),
            })
            .collect();
        Ok(Tokenizer {
            bpe,
            pre,
            spm,
            add_bos: false,
            nfc: false,
            added: AddedTokens::new(added),
            id_tokens,
            id_bytes,
            special,
            bos,
            eos,
            chat_template,
        })
    }

    /// Token ids of `text`, without adding any special token (HF
    /// `encode(text, add_special_tokens=False)`). Special tokens written in
    /// the text, like `<|im_start|>`, become their ids.
    pub fn encode(&self, text: &str) -> crate::Result<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        // BPE of a word depends only on its bytes: cache it for this call.
        let mut cache: HashMap<&str, Range<usize>> = HashMap::new();
        let mut words: Vec<Range<usize>> = Vec::new();
        if let Some(spm) = &self.spm {
            for piece in self.added.split(text) {
                match piece {
                    added::Piece::Token(id) => ids.push(id),
                    added::Piece::Text(range) => {
                        let first = range.start == 0;
                        spm.encode_piece(&self.bpe, &text[range], first, &mut ids);
                    }
                }
            }
            return Ok(ids);
        }
        let pieces = self.added.split(text);
        // NFC-normalized text pieces (Qwen2's normalizer), owned here so the
        // word cache can borrow from them.
        let normalized: Vec<Option<String>> = pieces
            .iter()
            .map(|p| match p {
                added::Piece::Text(r) if self.nfc => {
                    use unicode_normalization::UnicodeNormalization;
                    Some(text[r.clone()].nfc().collect())
                }
                _ => None,
            })
            .collect();
        for (piece, norm) in pieces.into_iter().zip(&normalized) {
            match piece {
                added::Piece::Token(id) => ids.push(id),
                added::Piece::Text(range) => {
                    let part = norm.as_deref().unwrap_or(&text[range]);
                    words.clear();
                    self.pre.split(part, &mut words);
                    for w in &words {
                        let word = &part[w.clone()];
                        if let Some(r) = cache.get(word) {
                            ids.extend_from_within(r.clone());
                            continue;
                        }
                        let start = ids.len();
                        self.bpe.encode_word(word.as_bytes(), &mut ids);
                        cache.insert(word, start..ids.len());
                    }
                }
            }
        }
        Ok(ids)
    }

    /// The ids of a prompt as HF's `tokenizer(text)` gives them: the bos
    /// token first when the tokenizer adds one ([`Tokenizer::adds_bos`]),
    /// then [`Tokenizer::encode`]. A prompt rendered by a chat template
    /// (which writes its own special tokens) is encoded without it, as
    /// transformers' `apply_chat_template(tokenize=True)` does: pass
    /// `templated`.
    pub fn encode_prompt(&self, text: &str, templated: bool) -> crate::Result<Vec<u32>> {
        let mut ids = Vec::new();
        if !templated && self.adds_bos() {
            ids.extend(self.bos);
        }
        ids.extend(self.encode(text)?);
        Ok(ids)
    }

    /// Text of `ids` (HF `decode(ids)` with special tokens kept): token
    /// bytes concatenated, invalid UTF-8 replaced by U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> crate::Result<String> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            bytes.extend_from_slice(self.decode_token_bytes(id)?);
        }
        Ok(self.strip_leading_space(String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// HF's `Strip(" ", 1, 0)` decoder of SentencePiece-style tokenizers:
    /// the decoded text loses one leading space.
    fn strip_leading_space(&self, text: String) -> String {
        match (&self.spm, text.strip_prefix(' ')) {
            (Some(s), Some(rest)) if s.strip_leading_space => rest.to_string(),
            _ => text,
        }
    }

    /// Whether decoding drops one leading space ([`Tokenizer::decode`]).
    pub fn strips_leading_space(&self) -> bool {
        self.spm.as_ref().is_some_and(|s| s.strip_leading_space)
    }

    /// True for a SentencePiece-style tokenizer (`▁` spaces, byte fallback).
    pub fn is_sentencepiece(&self) -> bool {
        self.spm.is_some()
    }

    /// Whether HF's `encode(text)` (with `add_special_tokens`) puts the bos
    /// token first: GGUF `tokenizer.ggml.add_bos_token`, or a
    /// `tokenizer.json` post-processor that writes it. [`Tokenizer::encode`]
    /// never adds it; callers encoding a prompt do.
    pub fn adds_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// Like [`Tokenizer::decode`], leaving out special tokens (HF
    /// `decode(ids, skip_special_tokens=True)`).
    pub fn decode_skipping_special(&self, ids: &[u32]) -> crate::Result<String> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            let b = self.decode_token_bytes(id)?;
            if !self.is_special(id) {
                bytes.extend_from_slice(b);
            }
        }
        Ok(self.strip_leading_space(String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// The raw bytes one token stands for, which may be part of a UTF-8
    /// character; see [`StreamDecoder`] for streaming text.
    pub fn decode_token_bytes(&self, id: u32) -> crate::Result<&[u8]> {
        self.id_bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .ok_or_else(|| self.unknown(id).into())
    }

    /// The token string of `id` in the vocabulary's own spelling (byte-level
    /// characters, e.g. `Ġthe`; added tokens as written, e.g. `<|im_end|>`).
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.id_tokens.get(id as usize).map(String::as_str)
    }

    /// The id of a token given in the vocabulary's spelling, or of an added
    /// token given by its content.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.added
            .id_of(token)
            .or_else(|| self.bpe.vocab.get(token).copied())
    }

    /// True for special (control) tokens such as `<|im_end|>`.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// The beginning-of-sequence token, if the tokenizer names one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token, if the tokenizer names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The number of token ids (vocabulary plus added tokens).
    pub fn vocab_size(&self) -> usize {
        self.id_tokens.len()
    }

    /// The pre-tokenizer in use.
    pub fn pre_tokenizer(&self) -> PreTokenizer {
        self.pre
    }

    /// The same tokenizer with another pre-tokenizer. For instance
    /// transformers' GGUF loader gives SmolLM2 (`smollm`) the plain
    /// [`PreTokenizer::Gpt2`] split instead of the model's own digit split;
    /// this reproduces it.
    pub fn with_pre_tokenizer(mut self, pre: PreTokenizer) -> Tokenizer {
        self.pre = pre;
        self
    }

    /// The chat template's source text, if the tokenizer carries one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Renders a conversation of `(role, content)` messages with the
    /// tokenizer's chat template, as transformers'
    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=…)`
    /// does. Only ChatML templates (those writing `<|im_start|>`) are
    /// supported, including a default system prompt the template inserts
    /// when the first message is not a system message (SmolLM2 does).
    pub fn apply_chat<R: AsRef<str>, C: AsRef<str>>(
        &self,
        messages: &[(R, C)],
        add_generation_prompt: bool,
    ) -> crate::Result<String> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            TokenizerError::ChatTemplate("the tokenizer has no chat template".into())
        })?;
        Ok(chat::render(template, messages, add_generation_prompt)?)
    }

    fn unknown(&self, id: u32) -> TokenizerError {
        TokenizerError::UnknownId {
            id,
            vocab_size: self.vocab_size(),
        }
    }
}

/// Turns a stream of token ids into text as soon as it is complete UTF-8:
/// a character split across tokens comes out with its last byte. The
/// concatenated output equals [`Tokenizer::decode`] of all ids.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    /// Some text has come out (the leading-space strip applies only before).
    started: bool,
}

impl StreamDecoder {
    /// An empty decoder.
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Adds one token and returns the text it completes (maybe empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> crate::Result<String> {
        self.pending
            .extend_from_slice(tokenizer.decode_token_bytes(id)?);
        let out = self.drain();
        if self.started || out.is_empty() {
            return Ok(out);
        }
        self.started = true;
        Ok(tokenizer.strip_leading_space(out))
    }

    /// The complete UTF-8 text at the front of `pending`, removed from it.
    fn drain(&mut self) -> String {
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // Valid by construction: `good` bytes passed the check.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..good]));
                    match e.error_len() {
                        // An incomplete character at the end: wait for more.
                        None => {
                            self.pending.drain(..good);
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
        out
    }

    /// Flushes what is left (an incomplete character becomes U+FFFD).
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}
