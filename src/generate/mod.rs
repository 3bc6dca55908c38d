//! The phone's redecode loop (see `android-contract.md`): the prompt is
//! padded with 0 to SEQ, the whole buffer is run every step, the
//! prediction at the last real position is appended, and generation stops
//! at an end-of-sequence id, after `max_new_tokens`, or when SEQ is full.

mod sample;

pub use sample::{Candidate, Prediction, Sampler, SamplingParams};

use crate::iree::run::{run_module, HostTensor, RunOptions};
use crate::iree::Toolchain;
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// One forward pass of a `tensor<1xSEQxi32> -> tensor<SEQxi32>` function.
pub trait Forward {
    /// Sequence length SEQ.
    fn seq(&self) -> usize;
    /// Runs the function on a full buffer of SEQ ids.
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>>;
}

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
            Stop::MaxNewTokens => f.write_str("--max-new-tokens reached"),
            Stop::ContextFull => f.write_str("context full"),
            Stop::Caller => f.write_str("stop string"),
        }
    }
}

/// What [`generate`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The new ids, in order (the eos id is not included).
    pub ids: Vec<i32>,
    /// True when generation stopped at an eos id.
    pub stopped_at_eos: bool,
    /// Why it stopped.
    pub stop: Stop,
}

impl Generation {
    fn new(ids: Vec<i32>, stop: Stop) -> Generation {
        Generation {
            ids,
            stopped_at_eos: matches!(stop, Stop::Eos(_)),
            stop,
        }
    }
}

/// A prompt must have a token and leave room for one more in `limit`
/// positions (SEQ, or the KV pair's N); `too_long` says why it does not.
fn check_prompt(prompt: &[i32], limit: usize, too_long: impl FnOnce() -> String) -> Result<()> {
    if prompt.is_empty() {
        return Err(Error::Input("the prompt is empty".into()));
    }
    if prompt.len() >= limit {
        return Err(Error::Input(too_long()));
    }
    Ok(())
}

/// Runs the redecode loop from `prompt`, calling `on_token` with each new
/// id as it arrives (`false` stops after it). The prompt must be shorter
/// than SEQ.
pub fn generate(
    model: &mut dyn Forward,
    prompt: &[i32],
    max_new_tokens: usize,
    eos: &[i32],
    mut on_token: impl FnMut(i32) -> bool,
) -> Result<Generation> {
    let seq = model.seq();
    check_prompt(prompt, seq, || {
        format!(
            "the prompt has {} tokens but SEQ is {seq}: it must be at most SEQ - 1 = {} (export with a larger --seq)",
            prompt.len(),
            seq - 1
        )
    })?;
    let mut buf = vec![0i32; seq];
    buf[..prompt.len()].copy_from_slice(prompt);
    let mut ids = Vec::new();
    loop {
        if ids.len() >= max_new_tokens {
            return Ok(Generation::new(ids, Stop::MaxNewTokens));
        }
        if prompt.len() + ids.len() >= seq {
            return Ok(Generation::new(ids, Stop::ContextFull));
        }
        let out = model.forward(&buf)?;
        let next = out[prompt.len() - 1 + ids.len()];
        if eos.contains(&next) {
            return Ok(Generation::new(ids, Stop::Eos(next)));
        }
        buf[prompt.len() + ids.len()] = next;
        ids.push(next);
        if !on_token(next) {
            return Ok(Generation::new(ids, Stop::Caller));
        }
    }
}

/// The redecode forward over a [`Backend`]: one call of `function` on
/// `[1, SEQ]` ids per step.
pub struct Redecode<B: Backend> {
    backend: B,
    function: String,
    seq: usize,
}

impl<B: Backend> Redecode<B> {
    /// The forward `function` (taking `[1, seq]` ids) over `backend`.
    pub fn new(backend: B, function: &str, seq: usize) -> Redecode<B> {
        Redecode {
            backend,
            function: function.to_string(),
            seq,
        }
    }
}

impl<B: Backend> Forward for Redecode<B> {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>> {
        let input = self.backend.i32(&[1, self.seq], ids.to_vec())?;
        let out = self.backend.run(&self.function, vec![input])?;
        out.first()
            .and_then(|t| self.backend.i32s(t))
            .filter(|v| v.len() == self.seq)
            .map(<[i32]>::to_vec)
            .ok_or_else(|| {
                Error::Module(format!(
                    "@{} did not return tensor<{}xi32>",
                    self.function, self.seq
                ))
            })
    }
}

/// The redecode forward through kiln's interpreter.
pub type Interpreted = Redecode<Interpreter>;

impl Redecode<Interpreter> {
    /// Parses `mlir` and opens `params`; SEQ is read from `function`'s
    /// signature.
    pub fn open(mlir: &Path, params: &Path, function: &str) -> Result<Interpreted> {
        let backend = Interpreter::open(mlir, params)?;
        let seq = ids_len(backend.function(function)?)
            .ok_or_else(|| Error::Module(format!("function @{function} takes no token ids")))?;
        Ok(Redecode::new(backend, function, seq))
    }
}

/// The redecode forward through `iree-run-module`, one process per step.
pub type IreeRunModule = Redecode<RunModule>;

/// One model driven through the KV-cache pair (`kiln export --kv-cache`):
/// prefill calls over chunks of at most P tokens at any position, one
/// decode per token, the caches kept by the implementation between calls.
/// [`Conversation`] drives it.
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
/// unless [`Conversation::set_sampler`] gives another).
pub struct Conversation<'m> {
    model: &'m mut dyn KvStep,
    tokens: Vec<i32>,
    sampler: Sampler,
}

impl<'m> Conversation<'m> {
    /// A new conversation on `model` (its caches zeroed).
    pub fn new(model: &'m mut dyn KvStep) -> Result<Conversation<'m>> {
        model.reset()?;
        Ok(Conversation {
            model,
            tokens: Vec::new(),
            sampler: Sampler::greedy(),
        })
    }

    /// Chooses the ids of [`Conversation::generate`] with `sampler` from now on.
    pub fn set_sampler(&mut self, sampler: Sampler) {
        self.sampler = sampler;
    }

    /// Starts over on the same model: zeroed caches, no tokens.
    pub fn restart(&mut self) -> Result<()> {
        self.model.reset()?;
        self.tokens.clear();
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
            return Err(Error::Input("nothing to append: no tokens".into()));
        }
        if self.tokens.len() + tokens.len() > n {
            return Err(Error::Input(format!(
                "the conversation holds {} tokens and this adds {}: more than the max context N = {n} \
                 (start a new conversation from a shorter history, or export with a larger --max-context)",
                self.tokens.len(),
                tokens.len()
            )));
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
            next = self.model.prefill(&chunk, start, overlap + take)?;
            self.tokens.extend_from_slice(&tokens[fed..fed + take]);
            fed += take;
        }
        Ok(next)
    }

    /// Appends `token` at the next position by decode; returns the model's
    /// prediction after it.
    pub fn step(&mut self, token: i32) -> Result<Prediction> {
        let pos = self.tokens.len();
        let next = self.model.decode(token, pos)?;
        self.tokens.push(token);
        Ok(next)
    }

    /// Generates from the current state, given the model's last prediction
    /// (what [`Conversation::append`] or [`Conversation::step`] returned):
    /// ids chosen by the sampler until an eos id, `max_new_tokens`, a full
    /// cache, or `on_token` returning false. Generated ids enter the
    /// caches except the last (it is returned, not yet decoded).
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
        loop {
            let next = self.sampler.choose(&prediction, &self.tokens)?;
            if eos.contains(&next) {
                return Ok(Generation::new(ids, Stop::Eos(next)));
            }
            ids.push(next);
            if !on_token(next) {
                return Ok(Generation::new(ids, Stop::Caller));
            }
            if ids.len() >= max_new_tokens {
                return Ok(Generation::new(ids, Stop::MaxNewTokens));
            }
            if self.tokens.len() + 1 >= n {
                return Ok(Generation::new(ids, Stop::ContextFull));
            }
            prediction = self.step(next)?;
        }
    }
}

/// The KV-cache loop: exactly the ids [`generate`] gives with SEQ = N (the
/// same greedy choice and eos handling), the prompt prefilled in chunks of
/// at most P, then one decode per new token instead of a whole-window
/// forward. The prompt must leave room in N.
pub fn generate_kv(
    model: &mut dyn KvStep,
    prompt: &[i32],
    max_new_tokens: usize,
    eos: &[i32],
    on_token: impl FnMut(i32) -> bool,
) -> Result<Generation> {
    generate_kv_with(
        model,
        prompt,
        max_new_tokens,
        eos,
        Sampler::greedy(),
        on_token,
    )
}

/// [`generate_kv`] with ids chosen by `sampler` (a module exported with
/// `--sampling topk=K` unless it is greedy).
pub fn generate_kv_with(
    model: &mut dyn KvStep,
    prompt: &[i32],
    max_new_tokens: usize,
    eos: &[i32],
    sampler: Sampler,
    on_token: impl FnMut(i32) -> bool,
) -> Result<Generation> {
    let n = model.max_context();
    check_prompt(prompt, n, || {
        format!(
            "the prompt has {} tokens but the max context N is {n}: no room for a new token (export with a larger --max-context)",
            prompt.len()
        )
    })?;
    if max_new_tokens == 0 {
        return Ok(Generation::new(Vec::new(), Stop::MaxNewTokens));
    }
    let mut c = Conversation::new(model)?;
    c.set_sampler(sampler);
    let next = c.append(prompt)?;
    c.generate(next, max_new_tokens, eos, on_token)
}

/// Checks a decode position against N: a generation past the max context
/// is an error, never a silent wrap-around.
pub(crate) fn check_position(position: usize, max_context: usize) -> Result<()> {
    if position >= max_context {
        return Err(Error::Input(format!(
            "decode position {position} is past the max context N = {max_context} (export with a larger --max-context)"
        )));
    }
    Ok(())
}

/// Checks the caches a call returned against the manifest's shape.
fn check_caches<'a>(
    shapes: impl IntoIterator<Item = &'a [usize]>,
    want: &[usize],
    function: &str,
) -> Result<()> {
    for s in shapes {
        if s != want {
            return Err(Error::Module(format!(
                "@{function} returned a cache of shape {s:?}, expected {want:?}: the module does not match its manifest (re-export)"
            )));
        }
    }
    Ok(())
}

/// What the KV driver needs of a runtime: build i32 tensors, run a
/// function by name, read its results. [`KvDriver`] over it is the whole
/// prefill/decode protocol, once for every runtime that hands tensors back
/// (kiln's interpreter, one `iree-run-module` per call); the loaded IREE
/// session keeps its caches on the device and speaks the protocol itself
/// ([`crate::iree::session::KvSession`]).
pub trait Backend {
    /// The runtime's tensor.
    type Tensor;
    /// An i32 tensor of `shape`.
    fn i32(&self, shape: &[usize], data: Vec<i32>) -> Result<Self::Tensor>;
    /// A tensor of zeros of type `ty` (a fresh KV cache).
    fn zeros(&self, ty: &crate::graph::TensorType) -> Result<Self::Tensor>;
    /// Runs `function` on `inputs`; returns its results.
    fn run(&mut self, function: &str, inputs: Vec<Self::Tensor>) -> Result<Vec<Self::Tensor>>;
    /// A tensor's dims.
    fn shape<'t>(&self, t: &'t Self::Tensor) -> &'t [usize];
    /// The elements of an i32 tensor.
    fn i32s<'t>(&self, t: &'t Self::Tensor) -> Option<&'t [i32]>;
    /// The elements of an f32 tensor.
    fn f32s<'t>(&self, t: &'t Self::Tensor) -> Option<&'t [f32]>;
}

/// The KV-cache pair driven over a [`Backend`]: the caches a call returns
/// are kept and passed to the next decode.
pub struct KvDriver<B: Backend> {
    backend: B,
    functions: (String, String),
    prompt_len: usize,
    cache: crate::graph::TensorType,
    /// Tensors per cache (`KvPair::cache_count`).
    count: usize,
    /// `K_0 … K_{count-1}, V_0 … V_{count-1}`, after a reset.
    caches: Option<Vec<B::Tensor>>,
}

impl<B: Backend> KvDriver<B> {
    /// A driver of `functions` (prefill, decode) with prompt bucket
    /// `prompt_len` and caches of type `cache` (`[L, KV, N, D]`).
    pub fn new(
        backend: B,
        functions: (String, String),
        prompt_len: usize,
        cache: crate::graph::TensorType,
    ) -> Result<KvDriver<B>> {
        if cache.rank() != 4 || prompt_len == 0 || prompt_len > cache.shape[2] {
            return Err(Error::Input(format!(
                "a KV pair needs caches [L, KV, N, D] and 1 ≤ P ≤ N, not {cache} and P = {prompt_len}"
            )));
        }
        Ok(KvDriver {
            backend,
            functions,
            prompt_len,
            cache,
            count: 1,
            caches: None,
        })
    }

    /// Each of K and V split into `count` tensors of type `cache`
    /// (`KvPair::cache_count`; 1 by default).
    pub fn with_cache_count(mut self, count: usize) -> KvDriver<B> {
        self.count = count.max(1);
        self
    }

    /// Runs `function` on `inputs` then the kept caches, and keeps the
    /// caches it returns; returns its prediction.
    fn call(&mut self, function: &str, mut inputs: Vec<B::Tensor>) -> Result<Prediction> {
        let caches = self
            .caches
            .take()
            .ok_or_else(|| Error::Input(format!("@{function} called before a reset")))?;
        inputs.extend(caches);
        let mut out = self.backend.run(function, inputs)?;
        let bad = || Error::Module(format!("@{function} must return (id, K, V[, values, ids])"));
        let n = 2 * self.count;
        if out.len() < 1 + n {
            return Err(bad());
        }
        let top = out.split_off(1 + n);
        let caches = out.split_off(1);
        let next = out.pop().ok_or_else(bad)?;
        let b = &self.backend;
        check_caches(
            caches.iter().map(|t| b.shape(t)),
            &self.cache.shape,
            function,
        )?;
        let id = b
            .i32s(&next)
            .and_then(|x| x.first().copied())
            .ok_or_else(|| Error::Module(format!("@{function} does not return an i32 id")))?;
        let top = match top.as_slice() {
            [] => Vec::new(),
            [values, ids] => {
                let (Some(values), Some(ids)) = (b.f32s(values), b.i32s(ids)) else {
                    return Err(bad());
                };
                candidates(ids, values).ok_or_else(bad)?
            }
            _ => return Err(bad()),
        };
        self.caches = Some(caches);
        Ok(Prediction { id, top })
    }
}

impl<B: Backend> KvStep for KvDriver<B> {
    fn prompt_len(&self) -> usize {
        self.prompt_len
    }
    fn max_context(&self) -> usize {
        self.cache.shape[2]
    }
    fn reset(&mut self) -> Result<()> {
        let b = &self.backend;
        let caches = (0..2 * self.count)
            .map(|_| b.zeros(&self.cache))
            .collect::<Result<_>>()?;
        self.caches = Some(caches);
        Ok(())
    }
    fn prefill(&mut self, chunk: &[i32], start: usize, length: usize) -> Result<Prediction> {
        check_chunk(
            chunk.len(),
            self.prompt_len,
            start,
            length,
            self.max_context(),
        )?;
        let b = &self.backend;
        let inputs = vec![
            b.i32(&[1, chunk.len()], chunk.to_vec())?,
            b.i32(&[], vec![start as i32])?,
            b.i32(&[], vec![length as i32])?,
        ];
        let f = self.functions.0.clone();
        self.call(&f, inputs)
    }
    fn decode(&mut self, token: i32, position: usize) -> Result<Prediction> {
        check_position(position, self.max_context())?;
        let b = &self.backend;
        let inputs = vec![
            b.i32(&[1], vec![token])?,
            b.i32(&[], vec![position as i32])?,
        ];
        let f = self.functions.1.clone();
        self.call(&f, inputs)
    }
}

/// Pairs a call's top-K `ids` and `values` (same length, at least one).
pub(crate) fn candidates(ids: &[i32], values: &[f32]) -> Option<Vec<Candidate>> {
    (ids.len() == values.len() && !ids.is_empty()).then(|| {
        ids.iter()
            .zip(values)
            .map(|(&id, &logit)| Candidate { id, logit })
            .collect()
    })
}

/// Checks a prefill chunk: P ids, 1..=P real, inside the caches.
pub(crate) fn check_chunk(
    ids: usize,
    p: usize,
    start: usize,
    length: usize,
    n: usize,
) -> Result<()> {
    if ids != p || length == 0 || length > p || start + p > n {
        return Err(Error::Input(format!(
            "a prefill chunk is P = {p} ids at start + P ≤ N = {n} with 1..=P real; got {ids} ids at {start}, {length} real"
        )));
    }
    Ok(())
}

/// kiln's own interpreter as a [`Backend`] (no IREE): the module parsed
/// once, the weights read from the parameter file on each call.
pub struct Interpreter {
    module: crate::graph::Module,
    params: crate::interp::files::FileParams,
}

impl Interpreter {
    /// Parses `mlir` and opens `params` (`.irpa`, `.safetensors` or `.gguf`).
    pub fn open(mlir: &Path, params: &Path) -> Result<Interpreter> {
        let text = std::fs::read_to_string(mlir).map_err(|e| Error::io(mlir, e))?;
        let module = crate::stablehlo::parse_module(&text).map_err(|e| e.with_file(mlir))?;
        Ok(Interpreter {
            module,
            params: crate::interp::files::FileParams::open(params)?,
        })
    }

    /// The parsed module.
    pub fn module(&self) -> &crate::graph::Module {
        &self.module
    }

    /// The module's function `name`.
    fn function(&self, name: &str) -> Result<&crate::graph::Graph> {
        crate::interp::find_function(&self.module, Some(name))
    }
}

/// How many token ids `g` takes: the last dimension of its first input.
fn ids_len(g: &crate::graph::Graph) -> Option<usize> {
    let &ids = g.inputs().first()?;
    g.ty(ids).shape.last().copied()
}

impl Backend for Interpreter {
    type Tensor = crate::interp::Tensor;
    fn i32(&self, shape: &[usize], data: Vec<i32>) -> Result<Self::Tensor> {
        Ok(crate::interp::Tensor::i32(shape, data))
    }
    fn zeros(&self, ty: &crate::graph::TensorType) -> Result<Self::Tensor> {
        // Float dtypes (f32, bf16) are held as f32.
        Ok(crate::interp::Tensor::f32(&ty.shape, vec![0.0; ty.numel()]))
    }
    fn run(&mut self, function: &str, inputs: Vec<Self::Tensor>) -> Result<Vec<Self::Tensor>> {
        crate::interp::run(self.function(function)?, &inputs, &self.params)
    }
    fn shape<'t>(&self, t: &'t Self::Tensor) -> &'t [usize] {
        t.shape()
    }
    fn i32s<'t>(&self, t: &'t Self::Tensor) -> Option<&'t [i32]> {
        t.as_i32()
    }
    fn f32s<'t>(&self, t: &'t Self::Tensor) -> Option<&'t [f32]> {
        t.as_f32()
    }
}

/// `iree-run-module` as a [`Backend`], one process per call (for emulated
/// targets): tensors go through `.npy` files.
pub struct RunModule {
    /// The toolchain.
    pub toolchain: Toolchain,
    /// The compiled module.
    pub vmfb: PathBuf,
    /// How to run it (parameters, device, emulation; `exact_outputs`
    /// Some(3) for the KV pair, whose caches must come back exactly);
    /// `function` is set per call.
    pub options: RunOptions,
}

impl Backend for RunModule {
    type Tensor = HostTensor;
    fn i32(&self, shape: &[usize], data: Vec<i32>) -> Result<Self::Tensor> {
        HostTensor::i32(shape.to_vec(), data)
    }
    fn zeros(&self, ty: &crate::graph::TensorType) -> Result<Self::Tensor> {
        if ty.dtype != crate::graph::DType::F32 {
            return Err(Error::Input(format!(
                "{ty} caches cannot go through iree-run-module's files (emulated or per-step runs): export with --kv-dtype f32"
            )));
        }
        HostTensor::f32(ty.shape.to_vec(), vec![0.0; ty.numel()])
    }
    fn run(&mut self, function: &str, inputs: Vec<Self::Tensor>) -> Result<Vec<Self::Tensor>> {
        let mut opts = self.options.clone();
        opts.function = function.to_string();
        run_module(&self.toolchain, &self.vmfb, &opts, &inputs)
    }
    fn shape<'t>(&self, t: &'t Self::Tensor) -> &'t [usize] {
        &t.shape
    }
    fn i32s<'t>(&self, t: &'t Self::Tensor) -> Option<&'t [i32]> {
        t.as_i32()
    }
    fn f32s<'t>(&self, t: &'t Self::Tensor) -> Option<&'t [f32]> {
        t.as_f32()
    }
}

/// The KV-cache pair through kiln's interpreter; the caches are host tensors.
pub type KvInterpreted = KvDriver<Interpreter>;

impl KvDriver<Interpreter> {
    /// Parses `mlir` (a `NAME-kv-gen.mlir`) and opens `params`; `prefill`
    /// and `decode` name the two functions. P, N and the cache shape are
    /// read from their signatures.
    pub fn open(mlir: &Path, params: &Path, prefill: &str, decode: &str) -> Result<KvInterpreted> {
        let backend = Interpreter::open(mlir, params)?;
        let pf = backend.function(prefill)?;
        let df = backend.function(decode)?;
        let bad = |f: &str| {
            Error::Module(format!(
                "function @{f} does not have the KV-cache signature (see spec/kv-cache.md)"
            ))
        };
        let prompt_len = ids_len(pf).ok_or_else(|| bad(prefill))?;
        let cache = df
            .inputs()
            .get(2)
            .map(|&v| df.ty(v).clone())
            .filter(|t| t.rank() == 4)
            .ok_or_else(|| bad(decode))?;
        // token, position, then K_0…, V_0….
        let count = (df.inputs().len() - 2) / 2;
        Ok(KvDriver::new(
            backend,
            (prefill.to_string(), decode.to_string()),
            prompt_len,
            cache,
        )?
        .with_cache_count(count))
    }
}

/// The KV-cache pair through `iree-run-module`, one process per call.
pub type KvRunModule = KvDriver<RunModule>;

/// Where and how to run a module for [`Driver::open`]:
/// [`DriverOptions::new`] and the setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DriverOptions {
    /// A `.vmfb` (run by IREE) or a `.mlir` (run by kiln's interpreter).
    pub module: PathBuf,
    /// The parameter file.
    pub params: PathBuf,
    /// Its scope in the module (`model`).
    pub scope: String,
    /// The redecode function.
    pub function: String,
    /// SEQ of the redecode function.
    pub seq: usize,
    /// The KV-cache pair to drive instead of the redecode function.
    pub kv: Option<crate::manifest::KvPair>,
    /// Runtime device.
    pub device: crate::iree::flags::Device,
    /// Run under an emulator (one `iree-run-module` per call).
    pub emulate: Option<crate::iree::run::Emulation>,
    /// local-task worker groups.
    pub task_groups: Option<usize>,
    /// One `iree-run-module` per call instead of a loaded session.
    pub per_step: bool,
    /// The IREE venv or tool directory (default: kiln's search).
    pub iree_dir: Option<PathBuf>,
}

impl DriverOptions {
    /// The redecode function `function` (SEQ `seq`) of `module` over the
    /// parameter file `params` in scope `model`, on the default device, a
    /// loaded session, kiln's IREE search.
    pub fn new(
        module: impl Into<PathBuf>,
        params: impl Into<PathBuf>,
        function: impl Into<String>,
        seq: usize,
    ) -> Self {
        DriverOptions {
            module: module.into(),
            params: params.into(),
            scope: "model".into(),
            function: function.into(),
            seq,
            kv: None,
            device: Default::default(),
            emulate: None,
            task_groups: None,
            per_step: false,
            iree_dir: None,
        }
    }

    /// Sets the parameter scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = scope.into();
        self
    }

    /// Drives the KV-cache pair `kv` (`None`: the redecode function).
    pub fn kv(mut self, kv: impl Into<Option<crate::manifest::KvPair>>) -> Self {
        self.kv = kv.into();
        self
    }

    /// Sets the runtime device.
    pub fn device(mut self, device: crate::iree::flags::Device) -> Self {
        self.device = device;
        self
    }

    /// Runs under an emulator (`None`: natively).
    pub fn emulate(mut self, emulate: impl Into<Option<crate::iree::run::Emulation>>) -> Self {
        self.emulate = emulate.into();
        self
    }

    /// Sets the local-task worker groups (`None`: IREE's default).
    pub fn task_groups(mut self, task_groups: impl Into<Option<usize>>) -> Self {
        self.task_groups = task_groups.into();
        self
    }

    /// One `iree-run-module` per call instead of a loaded session.
    pub fn per_step(mut self, per_step: bool) -> Self {
        self.per_step = per_step;
        self
    }

    /// Sets the IREE venv or tool directory (`None`: kiln's search).
    pub fn iree_dir(mut self, iree_dir: impl Into<Option<PathBuf>>) -> Self {
        self.iree_dir = iree_dir.into();
        self
    }
}

/// The loop a generation runs (redecode or KV cache) over the runtime that
/// fits the module: kiln's interpreter for `.mlir`, a loaded IREE session,
/// or one `iree-run-module` per call (`per_step`, emulation).
pub enum Driver {
    /// The whole SEQ window every step.
    Redecode(Box<dyn Forward>),
    /// One prefill, then one decode per token.
    Kv(Box<dyn KvStep>),
}

impl Driver {
    /// Opens the driver `o` describes (starting the IREE session when that
    /// is the runtime).
    pub fn open(o: &DriverOptions) -> Result<Driver> {
        use crate::iree::session::{KvSession, Session};
        let interpreted = o.module.extension().is_some_and(|e| e == "mlir");
        if interpreted {
            return Ok(match &o.kv {
                None => Driver::Redecode(Box::new(Interpreted::open(
                    &o.module,
                    &o.params,
                    &o.function,
                )?)),
                Some(kv) => Driver::Kv(Box::new(KvInterpreted::open(
                    &o.module,
                    &o.params,
                    &kv.prefill,
                    &kv.decode,
                )?)),
            });
        }
        let tc = Toolchain::locate(o.iree_dir.as_deref())?;
        let per_call = o.per_step || o.emulate.is_some();
        let backend = |exact_outputs| RunModule {
            toolchain: tc.clone(),
            vmfb: o.module.clone(),
            options: RunOptions {
                device: o.device,
                function: String::new(),
                params: vec![(o.scope.clone(), o.params.clone())],
                task_groups: o.task_groups,
                emulate: o.emulate,
                exact_outputs,
            },
        };
        Ok(match (&o.kv, per_call) {
            (None, true) => {
                Driver::Redecode(Box::new(Redecode::new(backend(None), &o.function, o.seq)))
            }
            (Some(kv), true) => Driver::Kv(Box::new(
                KvDriver::new(
                    backend(Some(kv.outputs())),
                    (kv.prefill.clone(), kv.decode.clone()),
                    kv.prompt_len,
                    kv.cache_type()?,
                )?
                .with_cache_count(kv.cache_count),
            )),
            (None, false) => Driver::Redecode(Box::new(Session::start(
                &tc,
                &o.module,
                &o.params,
                &o.scope,
                &o.function,
                o.device,
                o.seq,
                o.task_groups,
            )?)),
            (Some(kv), false) => Driver::Kv(Box::new(KvSession::start(
                &tc,
                &o.module,
                &o.params,
                &o.scope,
                kv,
                o.device,
                o.task_groups,
            )?)),
        })
    }

    /// Generates from `prompt` with this driver's loop ([`generate`] or
    /// [`generate_kv_with`]), choosing ids with `sampler` (only greedy on
    /// the redecode loop).
    pub fn generate(
        &mut self,
        prompt: &[i32],
        max_new_tokens: usize,
        eos: &[i32],
        sampler: Sampler,
        on_token: impl FnMut(i32) -> bool,
    ) -> Result<Generation> {
        match self {
            Driver::Redecode(_) if !sampler.params().is_greedy() => Err(Error::Input(
                "sampling needs the KV-cache pair: export with --kv-cache --sampling topk=K and generate with --kv-cache".into(),
            )),
            Driver::Redecode(m) => generate(m.as_mut(), prompt, max_new_tokens, eos, on_token),
            Driver::Kv(m) => {
                generate_kv_with(m.as_mut(), prompt, max_new_tokens, eos, sampler, on_token)
            }
        }
    }
}

/// Stop strings matched on streamed text (`kiln generate --stop`): text is
/// passed on as it arrives except what could still be the start of a stop
/// string, which is held back until it is decided; a completed stop string
/// and everything after it are never shown.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    pending: String,
}

impl StopStrings {
    /// Matches `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> StopStrings {
        StopStrings {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
        }
    }

    /// Adds `piece`; returns the text now safe to show and whether a stop
    /// string was completed (then the text ends just before it).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.pending.push_str(piece);
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = hit {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            return (out, true);
        }
        // Hold back the longest tail that is a proper prefix of a stop string.
        let keep = self
            .pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.pending[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.pending.len());
        let out = self.pending[..keep].to_string();
        self.pending.drain(..keep);
        (out, false)
    }

    /// The text held back at the end of a generation.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_hold_back_only_what_may_match() {
        let mut s = StopStrings::new(&["<|end|>".to_string(), "\n\n".to_string()]);
        assert_eq!(s.push("Hello"), ("Hello".to_string(), false));
        assert_eq!(s.push(" wor<|"), (" wor".to_string(), false));
        assert_eq!(s.push("en"), (String::new(), false));
        assert_eq!(s.push("d|> more"), (String::new(), true));
        let mut s = StopStrings::new(&["\n\n".to_string()]);
        assert_eq!(s.push("a\n"), ("a".to_string(), false));
        assert_eq!(s.push("b"), ("\nb".to_string(), false));
        assert_eq!(s.push("é\n"), ("é".to_string(), false));
        assert_eq!(s.finish(), "\n");
        let mut none = StopStrings::new(&[]);
        assert_eq!(none.push("x\n"), ("x\n".to_string(), false));
    }
}
