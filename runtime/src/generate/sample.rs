//! Choosing the next id: greedy (the in-graph argmax), or sampling over the
//! top-K candidates a `--sampling topk=K` module returns with each call.
//!
//! The filters follow Hugging Face transformers' order and definitions
//! (`RepetitionPenaltyLogitsProcessor`, then the temperature, top-k, top-p
//! and min-p warpers), applied to the K candidates only: the module never
//! hands back the whole `[vocab]` logits. So a token outside the K largest
//! raw logits is never drawn; with `--top-k k ≤ K` that is exactly
//! transformers' rule, and top-p or min-p alone see the K best only.
//!
//! Draws come from ChaCha8 seeded with `seed` (one `u64` per sampled
//! token), so a seed gives the same ids on every run and every runtime
//! (the candidates are the same on every target).

use super::{GenerateError, Result};
use crate::step::{Candidate, Prediction};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How to choose the next id (`kiln generate --temperature …`). The
/// default is greedy; change it with the setters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SamplingParams {
    /// Softmax temperature; 0 is greedy (the best candidate).
    pub temperature: f32,
    /// Keep the `top_k` best candidates; 0 keeps all K.
    pub top_k: usize,
    /// Keep the smallest set of best candidates whose probability reaches
    /// `top_p` (in (0, 1]; 1 keeps all).
    pub top_p: f32,
    /// Drop candidates less likely than `min_p` × the best one's
    /// probability (in [0, 1]; 0 keeps all).
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of ids already in the
    /// conversation by this (≥ 0; 1 is off), as transformers'
    /// `repetition_penalty`.
    pub repeat_penalty: f32,
    /// The seed of the draws.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Sets the softmax temperature (0 is greedy).
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = temperature;
        self
    }

    /// Sets how many best candidates are kept (0 keeps all).
    pub fn top_k(mut self, top_k: usize) -> Self {
        self.top_k = top_k;
        self
    }

    /// Sets the nucleus probability mass (1 keeps all).
    pub fn top_p(mut self, top_p: f32) -> Self {
        self.top_p = top_p;
        self
    }

    /// Sets the minimum probability relative to the best (0 keeps all).
    pub fn min_p(mut self, min_p: f32) -> Self {
        self.min_p = min_p;
        self
    }

    /// Sets the repetition penalty (1 is off).
    pub fn repeat_penalty(mut self, repeat_penalty: f32) -> Self {
        self.repeat_penalty = repeat_penalty;
        self
    }

    /// Sets the seed of the draws.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// True when the choice is the in-graph argmax (no candidates needed).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 && self.repeat_penalty == 1.0
    }

    /// Checks every value's range; the error names the field.
    pub fn validate(&self) -> Result<(), GenerateError> {
        let bad = |param: &'static str, value: f32, range: &'static str| {
            Err(GenerateError::OutOfRange {
                param,
                value,
                range,
            })
        };
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad("temperature", self.temperature, "≥ 0 (0 is greedy)");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", self.top_p, "in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p, "in [0, 1]");
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return bad("repeat_penalty", self.repeat_penalty, "> 0 (1 is off)");
        }
        Ok(())
    }
}

/// Chooses ids by [`SamplingParams`], drawing from its own seeded stream.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

impl Sampler {
    /// A sampler for `params` (checked).
    pub fn new(params: SamplingParams) -> Result<Sampler, GenerateError> {
        params.validate()?;
        let rng = ChaCha8Rng::seed_from_u64(params.seed);
        Ok(Sampler { params, rng })
    }

    /// The greedy sampler: always the in-graph argmax.
    pub fn greedy() -> Sampler {
        Sampler::new(SamplingParams::default()).expect("the defaults are valid")
    }

    /// Its parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Checks that a module returning `k` candidates a call (`None`: a
    /// greedy module) can serve this sampler: before loading it, say.
    pub fn check_candidates(&self, k: Option<usize>) -> Result<(), GenerateError> {
        let o = &self.params;
        if o.is_greedy() {
            return Ok(());
        }
        let Some(k) = k else {
            return Err(GenerateError::NoCandidates);
        };
        if o.top_k > k {
            return Err(GenerateError::TooFewCandidates { top_k: o.top_k, k });
        }
        Ok(())
    }

    /// Chooses the next id from `p`; `history` (the conversation so far)
    /// is what the repetition penalty applies to.
    pub fn choose(&mut self, p: &Prediction, history: &[i32]) -> Result<i32, GenerateError> {
        let o = &self.params;
        if o.is_greedy() {
            return Ok(p.id);
        }
        self.check_candidates(Some(p.top.len()).filter(|&k| k > 0))?;
        let mut c = p.top.clone();
        if o.repeat_penalty != 1.0 {
            for x in c.iter_mut().filter(|x| history.contains(&x.id)) {
                x.logit = if x.logit < 0.0 {
                    x.logit * o.repeat_penalty
                } else {
                    x.logit / o.repeat_penalty
                };
            }
            // Equal logits: the lower id first, as in the module's order.
            c.sort_by(|a, b| b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id)));
        }
        if o.temperature == 0.0 {
            return Ok(c[0].id);
        }
        if o.top_k > 0 {
            c.truncate(o.top_k);
        }
        let probs = filtered_probs(&c, o.temperature, o.top_p, o.min_p);
        let total: f64 = probs.iter().sum();
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
        let mut acc = 0.0;
        for (x, &pr) in c.iter().zip(&probs) {
            acc += pr;
            if pr > 0.0 && u < acc {
                return Ok(x.id);
            }
        }
        // Rounding at the very top of the range: the last kept candidate.
        let last = probs.iter().rposition(|&pr| pr > 0.0).unwrap_or(0);
        Ok(c[last].id)
    }
}

/// The probabilities of candidates `c` (best first) at `temperature`, zero
/// where top-p or min-p drop them (never the best): unnormalised weights
/// of what may be drawn.
fn filtered_probs(c: &[Candidate], temperature: f32, top_p: f32, min_p: f32) -> Vec<f64> {
    let t = temperature as f64;
    let best = c[0].logit as f64 / t;
    let mut probs: Vec<f64> = c
        .iter()
        .map(|x| (x.logit as f64 / t - best).exp())
        .collect();
    let sum: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= sum);
    if top_p < 1.0 {
        // transformers: drop a token when the mass of it and everything
        // below it is ≤ 1 − top_p.
        let mut tail = 0.0;
        let limit = 1.0 - top_p as f64;
        for i in (1..probs.len()).rev() {
            tail += probs[i];
            if tail <= limit {
                probs[i] = 0.0;
            }
        }
    }
    if min_p > 0.0 {
        let floor = min_p as f64 * probs[0];
        for p in probs.iter_mut().skip(1) {
            if *p < floor {
                *p = 0.0;
            }
        }
    }
    probs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pred(logits: &[f32]) -> Prediction {
        Prediction {
            id: 0,
            top: logits
                .iter()
                .enumerate()
                .map(|(i, &logit)| Candidate {
                    id: i as i32,
                    logit,
                })
                .collect(),
        }
    }

    fn sampler(f: impl FnOnce(&mut SamplingParams)) -> Sampler {
        let mut p = SamplingParams {
            temperature: 1.0,
            seed: 7,
            ..Default::default()
        };
        f(&mut p);
        Sampler::new(p).unwrap()
    }

    fn counts(s: &mut Sampler, p: &Prediction, n: usize) -> Vec<usize> {
        let mut c = vec![0; p.top.len()];
        for _ in 0..n {
            c[s.choose(p, &[]).unwrap() as usize] += 1;
        }
        c
    }

    #[test]
    fn greedy_is_the_argmax_without_candidates() {
        let mut s = Sampler::greedy();
        assert_eq!(s.choose(&Prediction::greedy(42), &[]).unwrap(), 42);
    }

    #[test]
    fn draws_follow_the_softmax_and_the_seed() {
        let p = pred(&[2.0, 1.0, 0.0, -1.0]);
        let c = counts(&mut sampler(|_| {}), &p, 20000);
        // softmax: 0.644 0.237 0.087 0.032
        let want = [0.644, 0.237, 0.087, 0.032];
        for (got, w) in c.iter().zip(want) {
            assert!((*got as f64 / 20000.0 - w).abs() < 0.015, "{c:?}");
        }
        assert_eq!(c, counts(&mut sampler(|_| {}), &p, 20000));
        assert_ne!(c, counts(&mut sampler(|o| o.seed = 8), &p, 20000));
    }

    #[test]
    fn filters_drop_what_transformers_drops() {
        let p = pred(&[2.0, 1.0, 0.0, -1.0]);
        let c = counts(&mut sampler(|o| o.top_k = 2), &p, 2000);
        assert!(c[0] > 0 && c[1] > 0 && c[2] == 0 && c[3] == 0, "{c:?}");
        // Cumulative 0.644, 0.881: top-p 0.8 keeps two.
        let c = counts(&mut sampler(|o| o.top_p = 0.8), &p, 2000);
        assert!(c[1] > 0 && c[2] == 0, "{c:?}");
        // 0.2 × 0.644 = 0.129: min-p keeps two.
        let c = counts(&mut sampler(|o| o.min_p = 0.2), &p, 2000);
        assert!(c[1] > 0 && c[2] == 0, "{c:?}");
        let c = counts(&mut sampler(|o| o.top_k = 1), &p, 100);
        assert_eq!(c, [100, 0, 0, 0]);
    }

    #[test]
    fn the_penalty_can_change_the_greedy_choice() {
        let p = pred(&[2.0, 1.5, -1.0]);
        let mut s = sampler(|o| {
            o.temperature = 0.0;
            o.repeat_penalty = 2.0;
        });
        assert_eq!(s.choose(&p, &[0]).unwrap(), 1);
        assert_eq!(s.choose(&p, &[1]).unwrap(), 0);
    }

    #[test]
    fn bad_values_name_their_field() {
        for (f, flag) in [
            (
                &(|o: &mut SamplingParams| o.temperature = -1.0) as &dyn Fn(&mut SamplingParams),
                "temperature -1",
            ),
            (&|o: &mut SamplingParams| o.top_p = 0.0, "top_p 0"),
            (&|o: &mut SamplingParams| o.top_p = 1.5, "top_p 1.5"),
            (&|o: &mut SamplingParams| o.min_p = 2.0, "min_p 2"),
            (
                &|o: &mut SamplingParams| o.repeat_penalty = 0.0,
                "repeat_penalty 0",
            ),
        ] {
            let mut p = SamplingParams::default();
            f(&mut p);
            let e = Sampler::new(p).unwrap_err().to_string();
            assert!(e.contains(flag), "{e}");
        }
        let mut s = sampler(|_| {});
        let e = s
            .choose(&Prediction::greedy(1), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs the top-K candidates"), "{e}");
        let e = sampler(|o| o.top_k = 9)
            .choose(&pred(&[1.0; 4]), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("top_k 9: the module returns only K = 4"), "{e}");
    }
}
