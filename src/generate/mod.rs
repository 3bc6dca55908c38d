//! Text generation over the step interfaces of [`crate::step`], one file
//! per job:
//!
//! - `redecode.rs`: the phone's redecode loop ([`generate`]) over a
//!   [`Forward`];
//! - `conversation.rs`: the KV-cache [`Conversation`] over a [`KvStep`],
//!   and the one-shot KV loop [`generate_kv`];
//! - `backends.rs`: both protocols over a `Backend` (`Redecode`,
//!   `KvDriver`) and the runtimes that hand tensors back: kiln's
//!   `Interpreter`, one `iree-run-module` per call (`RunModule`);
//! - `driver.rs`: the runtime that fits a module ([`DriverOptions`] →
//!   [`Driver`]), the loaded IREE session included;
//! - `stop.rs`: why a generation stopped ([`Stop`], [`Generation`]) and
//!   its prefill and decode times ([`Timings`]);
//! - `sample.rs`: choosing the next id ([`Sampler`]).
//!
//! The step interfaces and predictions are re-exported here, so
//! `kiln::generate::{Forward, KvStep, Prediction, …}` keep working.

mod backends;
mod conversation;
mod driver;
mod error;
mod redecode;
mod sample;
mod stop;

/// `Result` of the generation loops and drivers.
type Result<T, E = GenerateError> = std::result::Result<T, E>;

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

pub use crate::step::{Backend, Candidate, Forward, KvSpan, KvSpec, KvStep, Prediction};
pub use backends::{Interpreter, KvDriver, Redecode, RunModule};
pub use conversation::{generate_kv, Conversation};
pub use driver::{Driver, DriverLoop, DriverOptions};
pub use error::GenerateError;
pub use redecode::generate;
pub use sample::{Sampler, SamplingParams};
pub use stop::{Generation, Stop, Timings};
