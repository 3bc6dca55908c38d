//! What can go wrong in a generation loop: a prompt that does not fit, a
//! conversation past its max context, sampling a module cannot serve.

use crate::types::TensorType;

/// A generation cannot run as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// A prompt without a token.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A token id outside the vocabulary: on a device, a gather past the
    /// end of the embedding.
    #[error(
        "token id {id} is not in the vocabulary: its size is {vocab_size} (ids 0..{vocab_size})"
    )]
    IdPastVocabulary {
        /// The id.
        id: i64,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// A prompt that leaves no room for a new token in the redecode
    /// window.
    #[error("the prompt has {tokens} tokens but SEQ is {seq}: it must be at most SEQ - 1 = {}", seq - 1)]
    PromptOverSeq {
        /// Tokens in the prompt.
        tokens: usize,
        /// The window SEQ.
        seq: usize,
    },
    /// A prompt that leaves no room for a new token in the KV caches.
    #[error("the prompt has {tokens} tokens but the max context N is {max_context}: no room for a new token")]
    PromptOverContext {
        /// Tokens in the prompt.
        tokens: usize,
        /// The pair's max context N.
        max_context: usize,
    },
    /// Nothing to append to a conversation.
    #[error("nothing to append: no tokens")]
    NothingToAppend,
    /// A turn that would take a conversation past the max context.
    #[error("the conversation holds {held} tokens and this adds {adding}: more than the max context N = {max_context}")]
    ConversationFull {
        /// Tokens the caches hold.
        held: usize,
        /// Tokens the turn adds.
        adding: usize,
        /// The pair's max context N.
        max_context: usize,
    },
    /// A KV call before the caches were made.
    #[error("@{function} called before a reset")]
    NotReset {
        /// The function called.
        function: String,
    },
    /// Caches of a type `iree-run-module`'s `.npy` files cannot carry.
    #[error(
        "{cache} caches cannot go through iree-run-module's files (emulated or per-step runs)"
    )]
    CacheThroughFiles {
        /// The cache type.
        cache: TensorType,
    },
    /// Sampling on the redecode forward, which returns ids only.
    #[error("sampling needs the KV-cache pair")]
    SamplingNeedsKv,
    /// A sampling parameter outside its range.
    #[error("{param} {value}: must be {range}")]
    OutOfRange {
        /// The [`SamplingParams`](super::SamplingParams) field.
        param: &'static str,
        /// Its value.
        value: f32,
        /// What it must be.
        range: &'static str,
    },
    /// Sampling on a module that returns no candidates (a greedy module).
    #[error("sampling (a temperature above 0 or a repeat penalty) needs the top-K candidates, and the module returns none")]
    NoCandidates,
    /// A `top_k` larger than the K candidates the module returns.
    #[error("top_k {top_k}: the module returns only K = {k} candidates")]
    TooFewCandidates {
        /// The `top_k` asked for.
        top_k: usize,
        /// The module's K.
        k: usize,
    },
    /// A model call failed (outside the caches, results of another
    /// signature, or its runtime's own error).
    #[error(transparent)]
    Call(#[from] crate::step::CallError),
    /// The runtime that runs the model could not be opened or read: its
    /// own error, kept whole (the IREE session's, or the compiler's own
    /// runtimes', which `kiln::Error` unwraps to their own variants).
    #[error(transparent)]
    Open(Box<dyn std::error::Error + Send + Sync>),
}

impl GenerateError {
    /// A runtime's error `e` met while opening or reading it, kept whole.
    pub fn open(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        GenerateError::Open(Box::new(e))
    }
}

impl From<crate::Error> for GenerateError {
    fn from(e: crate::Error) -> Self {
        GenerateError::open(e)
    }
}

impl From<crate::step::StepError> for GenerateError {
    fn from(e: crate::step::StepError) -> Self {
        GenerateError::Call(e.into())
    }
}

impl From<crate::step::SignatureError> for GenerateError {
    fn from(e: crate::step::SignatureError) -> Self {
        GenerateError::Call(e.into())
    }
}

/// A generation loop's own refusals met inside a step call (a call before
/// a reset, caches `iree-run-module` cannot carry), kept whole.
impl From<GenerateError> for crate::step::CallError {
    fn from(e: GenerateError) -> Self {
        match e {
            GenerateError::Call(e) => e,
            e => crate::step::CallError::runtime(e),
        }
    }
}
