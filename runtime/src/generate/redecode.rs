//! The phone's redecode loop (see `android-contract.md`): the prompt is
//! padded with 0 to SEQ, the whole buffer is run every step, the
//! prediction at the last real position is appended, and generation stops
//! at an end-of-sequence id, after `max_new_tokens`, or when SEQ is full.

use super::stop::{Generation, Stop, Timings};
use super::{GenerateError, Result};
use crate::step::Forward;

/// A prompt must have a token and leave room for one more in `limit`
/// positions (SEQ, or the KV pair's N); `too_long` says why it does not.
pub(super) fn check_prompt(
    prompt: &[i32],
    limit: usize,
    too_long: impl FnOnce() -> GenerateError,
) -> Result<(), GenerateError> {
    if prompt.is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    if prompt.len() >= limit {
        return Err(too_long());
    }
    Ok(())
}

/// Runs the redecode loop from `prompt`, calling `on_token` with each new
/// id as it arrives (`false` stops after it). The prompt must be shorter
/// than SEQ. Its [`Timings`] count the first forward as the prompt's
/// prefill and every later one as a decode.
pub fn generate(
    model: &mut dyn Forward,
    prompt: &[i32],
    max_new_tokens: usize,
    eos: &[i32],
    mut on_token: impl FnMut(i32) -> bool,
) -> Result<Generation> {
    let seq = model.seq();
    check_prompt(prompt, seq, || GenerateError::PromptOverSeq {
        tokens: prompt.len(),
        seq,
    })?;
    let mut buf = vec![0i32; seq];
    buf[..prompt.len()].copy_from_slice(prompt);
    let mut ids = Vec::new();
    let mut timings = Timings::default();
    let stop = loop {
        if ids.len() >= max_new_tokens {
            break Stop::MaxNewTokens;
        }
        if prompt.len() + ids.len() >= seq {
            break Stop::ContextFull;
        }
        let t0 = std::time::Instant::now();
        let out = model.forward(&buf)?;
        match ids.len() {
            0 => timings.add_prefill(prompt.len(), t0.elapsed()),
            _ => timings.add_decode(t0.elapsed()),
        }
        let next = out[prompt.len() - 1 + ids.len()];
        if eos.contains(&next) {
            break Stop::Eos(next);
        }
        buf[prompt.len() + ids.len()] = next;
        ids.push(next);
        if !on_token(next) {
            break Stop::Caller;
        }
    };
    Ok(Generation::new(ids, stop).timed(timings))
}
