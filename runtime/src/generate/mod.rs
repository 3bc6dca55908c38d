//! Text generation over the step interfaces of [`crate::step`], one file
//! per job:
//!
//! - `redecode.rs`: the phone's redecode loop ([`generate`]) over a
//!   [`Forward`];
//! - `conversation.rs`: the KV-cache [`Conversation`] over a [`KvStep`],
//!   and the one-shot KV loop [`generate_kv`];
//! - `stop.rs`: why a generation stopped ([`Stop`], [`Generation`]) and
//!   its prefill and decode times ([`Timings`]);
//! - `sample.rs`: choosing the next id ([`Sampler`]);
//! - `error.rs`: what can go wrong ([`GenerateError`]).
//!
//! The runtimes that drive them live beside: the IREE session of this
//! crate, and the compiler's own (kiln's interpreter, `iree-run-module`),
//! which `kiln::generate` adds.

mod conversation;
mod error;
mod redecode;
mod sample;
mod stop;

/// `Result` of the generation loops.
pub type Result<T, E = GenerateError> = std::result::Result<T, E>;

/// Refuses any of `ids` that is negative or not below `vocab_size` (the
/// manifest's): the one check of token ids against the vocabulary, made
/// before a runtime sees them.
pub fn check_ids(ids: &[i32], vocab_size: usize) -> Result<()> {
    match ids
        .iter()
        .find(|&&id| id < 0 || id as u64 >= vocab_size as u64)
    {
        Some(&id) => Err(GenerateError::IdPastVocabulary {
            id: id.into(),
            vocab_size,
        }),
        None => Ok(()),
    }
}

pub use crate::step::{Candidate, Forward, KvSpan, KvSpec, KvStep, Prediction};
pub use conversation::{generate_kv, Conversation};
pub use error::GenerateError;
pub use redecode::generate;
pub use sample::{Sampler, SamplingParams};
pub use stop::{Generation, Stop, Timings};
