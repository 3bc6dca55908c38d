//! A conversation over the KV-cache pair ([`Conversation`] over a
//! [`KvStep`]): the prompt and each turn prefilled in chunks of at most P,
//! one decode per generated token; and the one-shot KV loops
//! [`generate_kv`] built on it.

use super::redecode::check_prompt;
use super::sample::Sampler;
use super::stop::{Generation, Stop, Timings};
use super::{GenerateError, Result};
use crate::step::{KvStep, Prediction};

/// A conversation over the KV-cache pair: every token so far sits in the
/// caches, so a new turn costs only its own tokens. [`Conversation::append`]
/// feeds a prompt or a turn of any length in prefill chunks of at most P;
/// [`Conversation::step`] appends one token by decode.
///
/// When a call would pass the max context N it is an error (the
/// conversation is unchanged): the app then stops, or starts a new
/// conversation from a truncated history (`spec/kv-cache.md`).
///
/// [`Conversation::generate`] chooses ids with its [`Sampler`] (greedy
/// unless [`Conversation::set_sampler`] gives another), and its
/// [`Generation`] carries the [`Timings`] of every model call since the
/// previous generation: a turn's prefill and its decodes.
pub struct Conversation<'m> {
    model: &'m mut dyn KvStep,
    tokens: Vec<i32>,
    sampler: Sampler,
    timings: Timings,
}

impl<'m> Conversation<'m> {
    /// A new conversation on `model` (its caches zeroed).
    pub fn new(model: &'m mut dyn KvStep) -> Result<Conversation<'m>> {
        model.reset()?;
        Ok(Conversation {
            model,
            tokens: Vec::new(),
            sampler: Sampler::greedy(),
            timings: Timings::default(),
        })
    }

    /// A conversation over `model`'s caches as an earlier one left them,
    /// holding `tokens` ([`Conversation::into_tokens`]): no reset, so a
    /// caller that owns the model keeps a conversation across calls.
    pub fn resume(model: &'m mut dyn KvStep, tokens: Vec<i32>) -> Conversation<'m> {
        Conversation {
            model,
            tokens,
            sampler: Sampler::greedy(),
            timings: Timings::default(),
        }
    }

    /// The tokens the caches hold, for [`Conversation::resume`].
    pub fn into_tokens(self) -> Vec<i32> {
        self.tokens
    }

    /// Chooses the ids of [`Conversation::generate`] with `sampler` from now on.
    pub fn set_sampler(&mut self, sampler: Sampler) {
        self.sampler = sampler;
    }

    /// Starts over on the same model: zeroed caches, no tokens.
    pub fn restart(&mut self) -> Result<()> {
        self.model.reset()?;
        self.tokens.clear();
        self.timings = Timings::default();
        Ok(())
    }

    /// The tokens in the caches, in order.
    pub fn tokens(&self) -> &[i32] {
        &self.tokens
    }

    /// Positions left in the caches.
    pub fn remaining(&self) -> usize {
        self.model.max_context() - self.tokens.len()
    }

    /// Appends `tokens` (a prompt, or the next turn) from the current
    /// position in prefill chunks of at most P; returns the id the model
    /// predicts after the last one. A chunk that would pass N starts at
    /// N − P instead and recomputes the positions it overlaps (the same
    /// tokens, so the same keys and values).
    pub fn append(&mut self, tokens: &[i32]) -> Result<Prediction> {
        let (p, n) = (self.model.prompt_len(), self.model.max_context());
        if tokens.is_empty() {
            return Err(GenerateError::NothingToAppend);
        }
        if self.tokens.len() + tokens.len() > n {
            return Err(GenerateError::ConversationFull {
                held: self.tokens.len(),
                adding: tokens.len(),
                max_context: n,
            });
        }
        let mut next = Prediction::greedy(0);
        let mut fed = 0;
        while fed < tokens.len() {
            let pos = self.tokens.len();
            let start = pos.min(n - p);
            let overlap = pos - start;
            let take = (p - overlap).min(tokens.len() - fed);
            let mut chunk = vec![0i32; p];
            chunk[..overlap].copy_from_slice(&self.tokens[start..pos]);
            chunk[overlap..overlap + take].copy_from_slice(&tokens[fed..fed + take]);
            let t0 = std::time::Instant::now();
            next = self.model.prefill(&chunk, start, overlap + take)?;
            self.timings.add_prefill(take, t0.elapsed());
            self.tokens.extend_from_slice(&tokens[fed..fed + take]);
            fed += take;
        }
        Ok(next)
    }

    /// Appends `token` at the next position by decode; returns the model's
    /// prediction after it.
    pub fn step(&mut self, token: i32) -> Result<Prediction> {
        let pos = self.tokens.len();
        let t0 = std::time::Instant::now();
        let next = self.model.decode(token, pos)?;
        self.timings.add_decode(t0.elapsed());
        self.tokens.push(token);
        Ok(next)
    }

    /// Generates from the current state, given the model's last prediction
    /// (what [`Conversation::append`] or [`Conversation::step`] returned):
    /// ids chosen by the sampler until an eos id, `max_new_tokens`, a full
    /// cache, or `on_token` returning false. Generated ids enter the
    /// caches except the last (it is returned, not yet decoded). The
    /// generation's [`Timings`] are those of every model call since the
    /// previous generation (the turn's prefill included).
    pub fn generate(
        &mut self,
        prediction: Prediction,
        max_new_tokens: usize,
        eos: &[i32],
        mut on_token: impl FnMut(i32) -> bool,
    ) -> Result<Generation> {
        let n = self.model.max_context();
        let mut ids = Vec::new();
        let mut prediction = prediction;
        let stop = loop {
            let next = self.sampler.choose(&prediction, &self.tokens)?;
            if eos.contains(&next) {
                break Stop::Eos(next);
            }
            ids.push(next);
            if !on_token(next) {
                break Stop::Caller;
            }
            if ids.len() >= max_new_tokens {
                break Stop::MaxNewTokens;
            }
            if self.tokens.len() + 1 >= n {
                break Stop::ContextFull;
            }
            prediction = self.step(next)?;
        };
        let timings = std::mem::take(&mut self.timings);
        Ok(Generation::new(ids, stop).timed(timings))
    }
}

/// The KV-cache loop, ids chosen by `sampler`: with
/// [`Sampler::greedy`], exactly the ids [`generate`](super::generate)
/// gives with SEQ = N (the same greedy choice and eos handling), the
/// prompt prefilled in chunks of at most P, then one decode per new token
/// instead of a whole-window forward; any other sampler needs a module
/// exported with `--sampling topk=K`. The prompt must leave room in N.
pub fn generate_kv(
    model: &mut dyn KvStep,
    prompt: &[i32],
    max_new_tokens: usize,
    eos: &[i32],
    sampler: Sampler,
    on_token: impl FnMut(i32) -> bool,
) -> Result<Generation> {
    let n = model.max_context();
    check_prompt(prompt, n, || GenerateError::PromptOverContext {
        tokens: prompt.len(),
        max_context: n,
    })?;
    if max_new_tokens == 0 {
        return Ok(Generation::new(Vec::new(), Stop::MaxNewTokens));
    }
    let mut c = Conversation::new(model)?;
    c.set_sampler(sampler);
    let next = c.append(prompt)?;
    c.generate(next, max_new_tokens, eos, on_token)
}
