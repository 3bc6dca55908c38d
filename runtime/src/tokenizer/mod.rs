//! Tokenizers and chat templates, from the model's own files.
//!
//! Encoding and decoding go through the `tokenizers` crate (the engine of
//! transformers' fast tokenizers, built here without C code), which loads
//! any HF `tokenizer.json`; a kiln package ships `NAME.tokenizer.json` and
//! `NAME.tokenizer_config.json` ([`Tokenizer::from_tokenizer_json`]). Chat
//! templates are the model's own Jinja `chat_template`, rendered with
//! minijinja ([`ChatTemplate`]). (The compiler, `kiln::tokenizer`, also
//! builds a tokenizer from a GGUF file's vocabulary, through
//! [`Tokenizer::from_engine`].)
//!
//! ```no_run
//! use kiln_runtime::tokenizer::Tokenizer;
//! let tok = Tokenizer::from_tokenizer_json("out/smollm2.tokenizer.json")?;
//! let prompt = tok.apply_chat(&[("user", "Hello!")], true)?;
//! let ids = tok.encode(&prompt)?;
//! assert_eq!(tok.decode(&ids)?, prompt);
//! # Ok::<(), kiln_runtime::tokenizer::TokenizerError>(())
//! ```
//!
//! See `spec/tokenizer.md` for what is supported.

mod chat;
mod load;

pub use chat::{ChatAffixes, ChatTemplate};

/// Tokenizer data is malformed, unsupported, or an id is out of range.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The vocabulary, merges or tokenizer file contradict themselves.
    #[error("malformed tokenizer: {0}")]
    Malformed(String),
    /// A tokenizer file could not be read as a tokenizer.
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
    /// The tokenizer has no chat template, or it failed to render.
    #[error("chat template: {0}")]
    ChatTemplate(String),
    /// The `tokenizers` crate failed to encode or decode.
    #[error("tokenizer: {0}")]
    Engine(String),
    /// The file a tokenizer is built from (a GGUF checkpoint, read by the
    /// compiler) could not be read: its reader's error, whole.
    #[error(transparent)]
    Source(Box<dyn std::error::Error + Send + Sync>),
    /// Reading a tokenizer file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl TokenizerError {
    /// A [`TokenizerError::File`]: `path` cannot be read as a tokenizer
    /// because of `message`.
    pub fn file(path: &std::path::Path, message: impl std::fmt::Display) -> TokenizerError {
        TokenizerError::File {
            path: path.display().to_string(),
            message: message.to_string(),
        }
    }
}

/// Result of the tokenizer.
pub(crate) type Result<T, E = TokenizerError> = std::result::Result<T, E>;

/// A tokenizer (any HF `tokenizer.json`) with its special tokens and chat
/// template.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Whether HF's `encode(text)` puts the bos token first.
    add_bos: bool,
    /// Ids of special (control) tokens.
    special: Vec<bool>,
    vocab_size: usize,
    bos: Option<u32>,
    eos: Option<u32>,
    chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("chat_template", &self.chat_template.is_some())
            .finish_non_exhaustive()
    }
}

fn engine(e: tokenizers::Error) -> TokenizerError {
    TokenizerError::Engine(e.to_string())
}

impl Tokenizer {
    /// Token ids of `text`, without adding any special token (HF
    /// `encode(text, add_special_tokens=False)`). Special tokens written in
    /// the text, like `<|im_start|>`, become their ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode_fast(text, false).map_err(engine)?;
        Ok(enc.get_ids().to_vec())
    }

    /// The ids of a prompt as HF's `tokenizer(text)` gives them: the bos
    /// token first when the tokenizer adds one ([`Tokenizer::adds_bos`]),
    /// then [`Tokenizer::encode`]. A prompt rendered by a chat template
    /// (which writes its own special tokens) is encoded without it, as
    /// transformers' `apply_chat_template(tokenize=True)` does: pass
    /// `templated`.
    pub fn encode_prompt(&self, text: &str, templated: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if !templated && self.adds_bos() {
            ids.extend(self.bos);
        }
        ids.extend(self.encode(text)?);
        Ok(ids)
    }

    fn check_ids(&self, ids: &[u32]) -> Result<(), TokenizerError> {
        match ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            Some(&id) => Err(self.unknown(id)),
            None => Ok(()),
        }
    }

    /// Text of `ids` (HF `decode(ids)` with special tokens kept).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.check_ids(ids)?;
        self.inner.decode(ids, false).map_err(engine)
    }

    /// Like [`Tokenizer::decode`], leaving out special tokens (HF
    /// `decode(ids, skip_special_tokens=True)`).
    pub fn decode_skipping_special(&self, ids: &[u32]) -> Result<String> {
        self.check_ids(ids)?;
        self.inner.decode(ids, true).map_err(engine)
    }

    /// Whether HF's `encode(text)` (with `add_special_tokens`) puts the bos
    /// token first: `add_bos_token` in the config, or a post-processor that
    /// writes it. [`Tokenizer::encode`] never adds it; callers encoding a
    /// prompt do.
    pub fn adds_bos(&self) -> bool {
        self.add_bos && self.bos.is_some()
    }

    /// The token string of `id` in the vocabulary's own spelling (byte-level
    /// characters, e.g. `Ġthe`; added tokens as written, e.g. `<|im_end|>`).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of a token given in the vocabulary's spelling, or of an added
    /// token given by its content.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
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
        self.vocab_size
    }

    /// The chat template's source text, if the tokenizer carries one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The same tokenizer with another chat template (`--chat-template`).
    pub fn with_chat_template(mut self, template: String) -> Tokenizer {
        self.chat_template = Some(template);
        self
    }

    /// The template [`Tokenizer::apply_chat`] renders with: the tokenizer's
    /// own, compiled, or `None` when it has none.
    pub fn template(&self) -> Result<Option<ChatTemplate>> {
        let Some(source) = self.chat_template.as_deref() else {
            return Ok(None);
        };
        let name = |id: Option<u32>| id.and_then(|i| self.id_to_token(i));
        Ok(Some(ChatTemplate::new(
            source,
            name(self.bos),
            name(self.eos),
        )?))
    }

    /// Renders a conversation of `(role, content)` messages with the
    /// tokenizer's chat template, as transformers'
    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=…)`
    /// does. An error when the tokenizer has no template.
    pub fn apply_chat<R: AsRef<str>, C: AsRef<str>>(
        &self,
        messages: &[(R, C)],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = self.template()?.ok_or_else(|| {
            TokenizerError::ChatTemplate("the tokenizer has no chat template".into())
        })?;
        template.render(messages, add_generation_prompt)
    }

    fn unknown(&self, id: u32) -> TokenizerError {
        TokenizerError::UnknownId {
            id,
            vocab_size: self.vocab_size(),
        }
    }
}

/// Turns a stream of token ids into text as soon as it is complete (the
/// `tokenizers` crate's streaming decoder): a character split across
/// byte-fallback tokens comes out with its last byte. The concatenated
/// output equals [`Tokenizer::decode`] of all ids.
#[derive(Debug, Default, Clone)]
pub struct StreamDecoder {
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
    /// Text given out so far, for [`StreamDecoder::finish`].
    out_len: usize,
    all: Vec<u32>,
}

impl StreamDecoder {
    /// An empty decoder.
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// Adds one token and returns the text it completes (maybe empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String> {
        tokenizer.check_ids(&[id])?;
        self.all.push(id);
        let out = tokenizers::tokenizer::step_decode_stream(
            &tokenizer.inner,
            vec![id],
            false,
            &mut self.ids,
            &mut self.prefix,
            &mut self.prefix_index,
        )
        .map_err(engine)?
        .unwrap_or_default();
        self.out_len += out.len();
        Ok(out)
    }

    /// The text not given out yet (an incomplete character as U+FFFD).
    pub fn finish(self, tokenizer: &Tokenizer) -> Result<String> {
        let text = tokenizer.decode(&self.all)?;
        Ok(text.get(self.out_len..).unwrap_or_default().to_string())
    }
}
