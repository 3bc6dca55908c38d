//! The step interfaces between the generation loops (`generate`)
//! and the runtimes that run a model one call at a time (kiln's
//! interpreter, `iree-run-module`, the loaded IREE session in
//! `iree::session`).
//!
//! A runtime implements [`Forward`] (the redecode forward: SEQ ids in, SEQ
//! predicted ids out) or [`KvStep`] (the KV-cache pair: prefill and
//! decode, the caches kept between calls, described by a `KvSpec`); a
//! runtime that only hands tensors back implements `Backend` and gets
//! both from generate's drivers. Each call's result is a [`Prediction`].
//! `generate::Driver` opens the runtime that fits a module and hands back
//! a [`Forward`] or a [`KvStep`].
//! The checks every implementation makes on its arguments (a prefill
//! chunk, a decode position) live here too, so a runtime never reaches up
//! into the loops that drive it.
//!
//! This module imports neither the IREE session nor `generate`: both
//! import it (as do the compiler's own runtimes, `kiln::step`).

use crate::types::TensorType;
use std::path::PathBuf;

/// `Result` of a step call.
pub type Result<T, E = CallError> = std::result::Result<T, E>;

/// A step call that failed: the call itself (outside what the caches hold,
/// results of another signature than the contract's), or the runtime that
/// ran it, whose own error is kept whole.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// A call outside what the caches hold.
    #[error(transparent)]
    Step(#[from] StepError),
    /// A function returned results of another signature than its step
    /// contract gives it.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// The runtime failed (an IREE tool, the interpreter, a file it reads,
    /// or a library user's own backend); its error, kept whole (the crate
    /// `Error` unwraps kiln's own).
    #[error(transparent)]
    Runtime(Box<dyn std::error::Error + Send + Sync>),
}

impl CallError {
    /// The runtime's error `e`, kept whole.
    pub fn runtime(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        CallError::Runtime(Box::new(e))
    }
}

/// A step call outside what the caches hold, or a KV pair that cannot be
/// one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// Caches that are not `[L, KV, N, D]`, or a prompt bucket P outside
    /// 1..=N (`KvSpec::new`).
    #[error(
        "a KV pair needs caches [L, KV, N, D] and 1 ≤ P ≤ N, not {cache} and P = {prompt_len}"
    )]
    BadSpec {
        /// The cache type given.
        cache: TensorType,
        /// The prompt bucket P given.
        prompt_len: usize,
    },
    /// A prefill chunk that is not P ids with 1..=P real inside the caches.
    #[error("a prefill chunk is P = {prompt_len} ids at start + P ≤ N = {max_context} with 1..=P real; got {ids} ids at {start}, {length} real")]
    BadChunk {
        /// Ids given.
        ids: usize,
        /// The pair's prompt bucket P.
        prompt_len: usize,
        /// The chunk's first position.
        start: usize,
        /// Real ids in it.
        length: usize,
        /// The pair's max context N.
        max_context: usize,
    },
    /// A decode at or past the max context N: never a silent wrap-around.
    #[error("decode position {position} is past the max context N = {max_context}")]
    PastContext {
        /// The position asked for.
        position: usize,
        /// The pair's max context N.
        max_context: usize,
    },
    /// Attention spans that do not ascend from P and stay below N
    /// (`KvSpec::spans`).
    #[error("attention spans must ascend from P = {prompt_len} and stay below N = {max_context}: got {spans:?}")]
    BadSpans {
        /// The spans given.
        spans: Vec<usize>,
        /// The pair's prompt bucket P.
        prompt_len: usize,
        /// The pair's max context N.
        max_context: usize,
    },
    /// bf16 caches whose head dim is odd cannot be held as i32 pairs (a
    /// module compiled for Vulkan, `KvSpec::for_vulkan`).
    #[error("a KV cache {cache} with an odd head dim cannot be held as bf16 pairs")]
    OddPairs {
        /// The cache type.
        cache: TensorType,
    },
}

/// A module's function does not have the signature its step contract
/// gives it: the redecode forward (`[1, SEQ]` ids in, SEQ ids out) or the
/// KV pair (`spec/kv-cache.md`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// A function without a token-id argument.
    #[error("function @{function} takes no token ids")]
    NoTokenIds {
        /// The function.
        function: String,
    },
    /// A function whose first argument is not `[1, SEQ]` or `[SEQ]`.
    #[error(
        "the module's first argument has shape {shape:?}; expected [1, SEQ] or [SEQ] token ids"
    )]
    IdsShape {
        /// The argument's shape.
        shape: Vec<usize>,
    },
    /// A forward taking more than its token ids, or ids of another type.
    #[error("function @{function} must take one i32 token tensor, it takes {count} argument(s) starting with {first}")]
    Arguments {
        /// The function.
        function: String,
        /// How many arguments it takes.
        count: usize,
        /// The type of the first.
        first: TensorType,
    },
    /// A function that returns nothing.
    #[error("function @{function} returns nothing")]
    NoResults {
        /// The function.
        function: String,
    },
    /// A forward whose result is not i32 ids.
    #[error("the function returns {found}, not i32 token ids")]
    NotIds {
        /// What it returns.
        found: String,
    },
    /// A forward call that did not return SEQ ids.
    #[error("@{function} did not return tensor<{seq}xi32>")]
    NotSeqIds {
        /// The function.
        function: String,
        /// SEQ.
        seq: usize,
    },
    /// A compiled forward with another number of results than one.
    #[error("{} returned {count} results, expected one tensor<{seq}xi32>", module.display())]
    ResultCount {
        /// The module.
        module: PathBuf,
        /// How many results it returned.
        count: usize,
        /// SEQ.
        seq: usize,
    },
    /// A compiled forward whose result is not `tensor<SEQxi32>`.
    #[error("{} returned tensor<{found}>, expected tensor<{seq}xi32>", module.display())]
    ResultType {
        /// The module.
        module: PathBuf,
        /// The result's type (`8xf32`).
        found: String,
        /// SEQ.
        seq: usize,
    },
    /// A KV function without the pair's arguments.
    #[error("function @{function} does not have the KV-cache signature (see spec/kv-cache.md)")]
    NotKvPair {
        /// The function.
        function: String,
    },
    /// A KV call whose results are not `(id, K, V[, values, ids])`.
    #[error("@{function} must return (id, K, V[, values, ids])")]
    KvResults {
        /// The function.
        function: String,
    },
    /// A KV call whose first result is not an i32 id.
    #[error("@{function} does not return an i32 id")]
    NoId {
        /// The function.
        function: String,
    },
    /// A KV call returning a cache of another shape than the pair's.
    #[error("@{function} returned a cache of shape {found:?}, expected {expected:?}: the module does not match its manifest (re-export)")]
    CacheShape {
        /// The function.
        function: String,
        /// The shape returned.
        found: Vec<usize>,
        /// The pair's cache shape.
        expected: Vec<usize>,
    },
}

/// One forward pass of a `tensor<1xSEQxi32> -> tensor<SEQxi32>` function.
pub trait Forward {
    /// Sequence length SEQ.
    fn seq(&self) -> usize;
    /// Runs the function on a full buffer of SEQ ids.
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>>;
}

/// One model driven through the KV-cache pair (`kiln export --kv-cache`):
/// prefill calls over chunks of at most P tokens at any position, one
/// decode per token, the caches kept by the implementation between calls.
/// `generate::Conversation` drives it.
pub trait KvStep {
    /// Prompt bucket P.
    fn prompt_len(&self) -> usize;
    /// Max context N (cache length).
    fn max_context(&self) -> usize;
    /// Starts over: zeroed caches.
    fn reset(&mut self) -> Result<()>;
    /// Runs prefill on `chunk` (P ids) at positions `start..start + P`, of
    /// which the first `length` are real (the rest padding); returns the
    /// prediction after position `start + length - 1` and keeps the
    /// updated caches. `start + P ≤ N`.
    fn prefill(&mut self, chunk: &[i32], start: usize, length: usize) -> Result<Prediction>;
    /// Runs decode for `token` at `position` on the kept caches; returns
    /// the prediction after it and keeps the updated caches.
    fn decode(&mut self, token: i32, position: usize) -> Result<Prediction>;
}

/// What a runtime needs to offer for generate's drivers
/// (`generate::Redecode`, `generate::KvDriver`) to run
/// the whole redecode or prefill/decode protocol over it: build i32
/// tensors, run a function by name, read its results. Implemented by
/// kiln's interpreter and by one `iree-run-module` per call; the loaded
/// IREE session keeps its caches on the device and implements [`KvStep`]
/// itself (`iree::session::KvSession`).
// Public so the integration tests can build the runtimes they pin;
// a library user opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub trait Backend {
    /// The runtime's tensor.
    type Tensor;
    /// An i32 tensor of `shape`.
    fn i32(&self, shape: &[usize], data: Vec<i32>) -> Result<Self::Tensor>;
    /// A tensor of zeros of type `ty` (a fresh KV cache).
    fn zeros(&self, ty: &TensorType) -> Result<Self::Tensor>;
    /// Runs `function` on `inputs`; returns its results.
    fn run(&mut self, function: &str, inputs: Vec<Self::Tensor>) -> Result<Vec<Self::Tensor>>;
    /// A tensor's dims.
    fn shape<'t>(&self, t: &'t Self::Tensor) -> &'t [usize];
    /// The elements of an i32 tensor.
    fn i32s<'t>(&self, t: &'t Self::Tensor) -> Option<&'t [i32]>;
    /// The elements of an f32 tensor.
    fn f32s<'t>(&self, t: &'t Self::Tensor) -> Option<&'t [f32]>;
}

/// One KV-cache pair of a module (`spec/kv-cache.md`): its two functions,
/// the prompt bucket P and the type of every cache tensor the functions
/// take and return. [`KvSpec::new`] checks it; a manifest's
/// `manifest::KvPair` converts with `KvSpec::try_from`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
// Public so the integration tests can build the runtimes they pin;
// a library user opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct KvSpec {
    /// The prefill function: `(ids [1, P], start, length, caches…) ->
    /// (id, caches…[, values, ids])`.
    pub prefill: String,
    /// The decode function: `(token [1], position, caches…) -> (id,
    /// caches…[, values, ids])`.
    pub decode: String,
    /// Prompt bucket P.
    pub prompt_len: usize,
    /// Every cache tensor, in argument order: `K_0 … K_{c-1}, V_0 …
    /// V_{c-1}`, each `[L, KV, N, D]` with the same N.
    pub caches: Vec<TensorType>,
    /// Attention spans below N, ascending (`KvSpec::spans`): functions
    /// with the same signature and caches that attend to the first `span`
    /// positions only. Empty: `prefill` and `decode` serve every call.
    pub spans: Vec<KvSpan>,
}

/// One attention span of a KV pair: a prefill and a decode over the
/// pair's caches that attend to the first `span` positions only, so a
/// call whose positions all lie below `span` costs what a pair of max
/// context `span` would (`spec/kv-cache.md`, "Attention spans").
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
// Public so the integration tests can build the runtimes they pin;
// a library user opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct KvSpan {
    /// Positions the functions attend to: `0..span`.
    pub span: usize,
    /// Its prefill function (the pair's prefill signature).
    pub prefill: String,
    /// Its decode function (the pair's decode signature).
    pub decode: String,
}

impl KvSpan {
    /// The span `span` served by `prefill` and `decode`.
    pub fn new(span: usize, prefill: impl Into<String>, decode: impl Into<String>) -> KvSpan {
        KvSpan {
            span,
            prefill: prefill.into(),
            decode: decode.into(),
        }
    }
}

impl KvSpec {
    /// The pair `prefill`/`decode` with prompt bucket `prompt_len`, whose
    /// K and V are each `count` tensors (at least 1) of type `cache`
    /// (`[L, KV, N, D]`); checks that 1 ≤ P ≤ N.
    pub fn new(
        prefill: impl Into<String>,
        decode: impl Into<String>,
        prompt_len: usize,
        cache: TensorType,
        count: usize,
    ) -> Result<KvSpec, StepError> {
        if cache.rank() != 4 || prompt_len == 0 || prompt_len > cache.shape[2] {
            return Err(StepError::BadSpec { cache, prompt_len });
        }
        Ok(KvSpec {
            prefill: prefill.into(),
            decode: decode.into(),
            prompt_len,
            caches: vec![cache; 2 * count.max(1)],
            spans: Vec::new(),
        })
    }

    /// The pair with the attention spans `spans` (each `P ≤ span < N`,
    /// ascending); see [`KvSpan`].
    pub fn spans(mut self, spans: Vec<KvSpan>) -> Result<KvSpec, StepError> {
        let (p, n) = (self.prompt_len, self.max_context());
        let mut below = p;
        for s in &spans {
            if s.span < below || s.span >= n {
                return Err(StepError::BadSpans {
                    spans: spans.iter().map(|s| s.span).collect(),
                    prompt_len: p,
                    max_context: n,
                });
            }
            below = s.span + 1;
        }
        self.spans = spans;
        Ok(self)
    }

    /// The prefill function for a chunk whose real tokens end before
    /// position `end` (`start + length`): the smallest span holding them,
    /// else the pair's own.
    pub fn prefill_for(&self, end: usize) -> &str {
        self.spans
            .iter()
            .find(|s| end <= s.span)
            .map_or(&self.prefill, |s| &s.prefill)
    }

    /// The decode function for a token at `position`: the smallest span
    /// holding it, else the pair's own.
    pub fn decode_for(&self, position: usize) -> &str {
        self.spans
            .iter()
            .find(|s| position < s.span)
            .map_or(&self.decode, |s| &s.decode)
    }

    /// Every (prefill, decode) function pair, the spans' in ascending
    /// order and then the pair over all N positions.
    pub fn functions(&self) -> Vec<(&str, &str)> {
        self.spans
            .iter()
            .map(|s| (s.prefill.as_str(), s.decode.as_str()))
            .chain([(self.prefill.as_str(), self.decode.as_str())])
            .collect()
    }

    /// The index into [`KvSpec::functions`] of the pair for a call whose
    /// positions end before `end`: the smallest span that holds them, else
    /// the pair over all N positions.
    pub fn pair_for(&self, end: usize) -> usize {
        self.spans
            .iter()
            .position(|s| end <= s.span)
            .unwrap_or(self.spans.len())
    }

    /// Checks a prefill chunk of `ids` ids at `start` with `length` real
    /// ([`check_chunk`]) and gives the index into [`KvSpec::functions`]
    /// of the pair that serves it: what every KV runtime does first.
    pub fn prefill_pair(
        &self,
        ids: usize,
        start: usize,
        length: usize,
    ) -> Result<usize, StepError> {
        check_chunk(ids, self.prompt_len, start, length, self.max_context())?;
        Ok(self.pair_for(start + length))
    }

    /// Checks a decode `position` against N ([`check_position`]) and gives
    /// the index into [`KvSpec::functions`] of the pair that serves it.
    pub fn decode_pair(&self, position: usize) -> Result<usize, StepError> {
        check_position(position, self.max_context())?;
        Ok(self.pair_for(position + 1))
    }

    /// The pair as a module compiled for Vulkan takes it: bf16 caches are
    /// i32 words holding two values each, `[L, KV, N, D/2]`, the same
    /// bytes ([`TensorType::lowered_for_vulkan`]); f32 caches as they
    /// are.
    pub fn for_vulkan(&self) -> Result<KvSpec, StepError> {
        let mut spec = self.clone();
        for c in &mut spec.caches {
            *c = c
                .lowered_for_vulkan()
                .ok_or_else(|| StepError::OddPairs { cache: c.clone() })?;
        }
        Ok(spec)
    }

    /// Max context N: the caches' length.
    pub fn max_context(&self) -> usize {
        self.caches[0].shape[2]
    }

    /// Tensors per cache: how many each of K and V is split into.
    pub fn cache_count(&self) -> usize {
        self.caches.len() / 2
    }
}

/// One candidate for the next position: an id and its logit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The token id.
    pub id: i32,
    /// Its logit (after the model's final soft-capping, if any).
    pub logit: f32,
}

/// What one prefill or decode call predicts for the next position.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    /// The in-graph argmax: the greedy choice.
    pub id: i32,
    /// With a `--sampling topk=K` module: the K largest logits, largest
    /// first (the lower id first among equal logits, so `top[0].id ==
    /// id`); empty otherwise.
    pub top: Vec<Candidate>,
}

impl Prediction {
    /// A prediction with no candidates (a greedy module).
    pub fn greedy(id: i32) -> Prediction {
        Prediction {
            id,
            top: Vec::new(),
        }
    }
}

/// Pairs a call's top-K `ids` and `values` (same length, at least one).
pub fn candidates(ids: &[i32], values: &[f32]) -> Option<Vec<Candidate>> {
    (ids.len() == values.len() && !ids.is_empty()).then(|| {
        ids.iter()
            .zip(values)
            .map(|(&id, &logit)| Candidate { id, logit })
            .collect()
    })
}

/// Checks a prefill chunk of `ids` ids against a pair with prompt bucket
/// `p` and max context `n`: P ids, 1..=P real, inside the caches.
pub fn check_chunk(
    ids: usize,
    p: usize,
    start: usize,
    length: usize,
    n: usize,
) -> Result<(), StepError> {
    if ids != p || length == 0 || length > p || start + p > n {
        return Err(StepError::BadChunk {
            ids,
            prompt_len: p,
            start,
            length,
            max_context: n,
        });
    }
    Ok(())
}

/// Checks a decode position against N: a generation past the max context
/// is an error, never a silent wrap-around.
pub fn check_position(position: usize, max_context: usize) -> Result<(), StepError> {
    if position >= max_context {
        return Err(StepError::PastContext {
            position,
            max_context,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DType;

    #[test]
    fn a_kv_spec_holds_every_cache_and_checks_p_against_n() {
        let cache = TensorType::new(DType::F32, &[1, 2, 16, 12]);
        let kv = KvSpec::new("prefill", "decode", 4, cache.clone(), 2).unwrap();
        assert_eq!((kv.caches.len(), kv.cache_count()), (4, 2));
        assert_eq!(kv.max_context(), 16);
        let e = KvSpec::new("p", "d", 17, cache, 1).unwrap_err().to_string();
        assert!(e.contains("1 ≤ P ≤ N"), "{e}");
        let flat = TensorType::new(DType::F32, &[16, 12]);
        assert!(KvSpec::new("p", "d", 4, flat, 1).is_err());
    }

    #[test]
    fn the_smallest_span_holding_a_call_serves_it() {
        let cache = TensorType::new(DType::F32, &[1, 2, 64, 12]);
        let kv = KvSpec::new("p", "d", 8, cache, 1).unwrap();
        assert_eq!((kv.prefill_for(64), kv.decode_for(63)), ("p", "d"));
        let kv = kv
            .spans(vec![
                KvSpan::new(16, "p16", "d16"),
                KvSpan::new(32, "p32", "d32"),
            ])
            .unwrap();
        assert_eq!(kv.prefill_for(16), "p16");
        assert_eq!(kv.prefill_for(17), "p32");
        assert_eq!(kv.prefill_for(33), "p");
        assert_eq!(kv.decode_for(15), "d16");
        assert_eq!(kv.decode_for(16), "d32");
        assert_eq!(kv.decode_for(32), "d");
        assert_eq!(
            kv.functions(),
            vec![("p16", "d16"), ("p32", "d32"), ("p", "d")]
        );
        let cache = TensorType::new(DType::F32, &[1, 2, 64, 12]);
        let kv = KvSpec::new("p", "d", 8, cache, 1).unwrap();
        for bad in [vec![4], vec![64], vec![32, 16], vec![16, 16]] {
            let spans = bad.iter().map(|&b| KvSpan::new(b, "x", "y")).collect();
            assert!(kv.clone().spans(spans).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn chunks_and_positions_stay_inside_the_caches() {
        assert!(check_chunk(4, 4, 12, 4, 16).is_ok());
        assert!(check_chunk(4, 4, 13, 1, 16).is_err());
        assert!(check_chunk(3, 4, 0, 3, 16).is_err());
        assert!(check_chunk(4, 4, 0, 0, 16).is_err());
        assert!(check_position(15, 16).is_ok());
        assert!(check_position(16, 16).is_err());
        assert_eq!(candidates(&[1], &[0.5, 1.0]), None);
    }
}
