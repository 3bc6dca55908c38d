//! Stopping a generation: why it stopped ([`Stop`]) and what it produced
//! ([`Generation`]).

/// Why a generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The model predicted an end-of-sequence id (not included in `ids`).
    Eos(i32),
    /// `max_new_tokens` were generated.
    MaxNewTokens,
    /// The window (SEQ) or the cache (N) is full.
    ContextFull,
    /// The caller's `on_token` asked to stop (a stop string, say).
    Caller,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::Eos(id) => write!(f, "end of sequence (id {id})"),
            Stop::MaxNewTokens => f.write_str("max_new_tokens reached"),
            Stop::ContextFull => f.write_str("context full"),
            Stop::Caller => f.write_str("stop string"),
        }
    }
}

/// What [`generate`](super::generate) or a [`Conversation`](super::Conversation) produced.
///
/// Two generations are equal when they produced the same ids and stopped
/// for the same reason; their [`Timings`] are measurements, not results,
/// and are not compared.
#[derive(Debug, Clone)]
pub struct Generation {
    /// The new ids, in order (the eos id is not included).
    pub ids: Vec<i32>,
    /// Why it stopped.
    pub stop: Stop,
    /// The time its model calls took, prefill and decode apart.
    pub timings: Timings,
}

impl PartialEq for Generation {
    fn eq(&self, other: &Generation) -> bool {
        (&self.ids, self.stop) == (&other.ids, other.stop)
    }
}

impl Eq for Generation {}

impl Generation {
    pub(super) fn new(ids: Vec<i32>, stop: Stop) -> Generation {
        Generation {
            ids,
            stop,
            timings: Timings::default(),
        }
    }

    pub(super) fn timed(mut self, timings: Timings) -> Generation {
        self.timings = timings;
        self
    }

    /// True when generation stopped at an eos id ([`Stop::Eos`]).
    pub fn stopped_at_eos(&self) -> bool {
        matches!(self.stop, Stop::Eos(_))
    }
}

/// The time a generation's model calls took, by phase, as llama.cpp
/// reports them: the prompt's prefill (the KV pair's prefill calls; for
/// the redecode loop its first forward, which predicts the first new
/// token) and the decode calls (one per token after the first). Its
/// `Display` is the summary `kiln generate` and `kiln chat` print:
/// `prefill 1500 tokens in 5.10 s (294.1 tokens/s); decode 31 tokens in
/// 0.45 s (14.5 ms/token)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    /// Prompt tokens prefilled.
    pub prefill_tokens: usize,
    /// Time in prefill calls.
    pub prefill: std::time::Duration,
    /// Decode calls (one token each).
    pub decode_tokens: usize,
    /// Time in decode calls.
    pub decode: std::time::Duration,
}

impl Timings {
    /// Prompt tokens per second of prefill (0 when nothing was prefilled).
    pub fn prefill_tokens_per_second(&self) -> f64 {
        let s = self.prefill.as_secs_f64();
        if self.prefill_tokens == 0 || s == 0.0 {
            return 0.0;
        }
        self.prefill_tokens as f64 / s
    }

    /// Milliseconds per decoded token (0 when nothing was decoded).
    pub fn decode_ms_per_token(&self) -> f64 {
        if self.decode_tokens == 0 {
            return 0.0;
        }
        self.decode.as_secs_f64() * 1e3 / self.decode_tokens as f64
    }

    /// Adds one prefill of `tokens` tokens that took `took`.
    pub(super) fn add_prefill(&mut self, tokens: usize, took: std::time::Duration) {
        self.prefill_tokens += tokens;
        self.prefill += took;
    }

    /// Adds one decode call that took `took`.
    pub(super) fn add_decode(&mut self, took: std::time::Duration) {
        self.decode_tokens += 1;
        self.decode += took;
    }
}

impl std::fmt::Display for Timings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "prefill {} tokens in {:.2} s ({:.1} tokens/s); decode {} tokens in {:.2} s ({:.1} ms/token)",
            self.prefill_tokens,
            self.prefill.as_secs_f64(),
            self.prefill_tokens_per_second(),
            self.decode_tokens,
            self.decode.as_secs_f64(),
            self.decode_ms_per_token()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_print_prefill_and_decode_apart() {
        let mut t = Timings::default();
        assert_eq!(
            t.to_string(),
            "prefill 0 tokens in 0.00 s (0.0 tokens/s); decode 0 tokens in 0.00 s (0.0 ms/token)"
        );
        t.add_prefill(1500, std::time::Duration::from_millis(5100));
        t.add_decode(std::time::Duration::from_millis(300));
        t.add_decode(std::time::Duration::from_millis(150));
        assert_eq!(
            t.to_string(),
            "prefill 1500 tokens in 5.10 s (294.1 tokens/s); decode 2 tokens in 0.45 s (225.0 ms/token)"
        );
        let g = Generation::new(vec![1], Stop::Caller);
        assert_eq!(g.clone().timed(t), g, "timings are not compared");
    }

    #[test]
    fn stopped_at_eos_is_derived_from_the_stop() {
        assert!(Generation::new(vec![1], Stop::Eos(2)).stopped_at_eos());
        assert!(!Generation::new(vec![1], Stop::MaxNewTokens).stopped_at_eos());
    }
}
