//! The phone's redecode loop (see `android-contract.md`): the prompt is
//! padded with 0 to SEQ, the whole buffer is run every step, the
//! prediction at the last real position is appended, and generation stops
//! at an end-of-sequence id, after `max_new_tokens`, or when SEQ is full.

use crate::iree::run::{run_module, HostTensor, RunOptions};
use crate::iree::Toolchain;
use crate::{Error, Result};
use std::path::PathBuf;

/// One forward pass of a `tensor<1xSEQxi32> -> tensor<SEQxi32>` function.
pub trait Forward {
    /// Sequence length SEQ.
    fn seq(&self) -> usize;
    /// Runs the function on a full buffer of SEQ ids.
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>>;
}

/// A forward pass through `iree-run-module`, one process per call.
pub struct IreeRunModule {
    /// The toolchain.
    pub toolchain: Toolchain,
    /// The compiled module.
    pub vmfb: PathBuf,
    /// How to run it (function, parameters, device, emulation).
    pub options: RunOptions,
    /// SEQ.
    pub seq: usize,
}

impl Forward for IreeRunModule {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>> {
        let input = HostTensor::i32(vec![1, self.seq], ids.to_vec())?;
        let out = run_module(&self.toolchain, &self.vmfb, &self.options, &[input])?;
        out.first()
            .and_then(|t| t.as_i32())
            .filter(|v| v.len() == self.seq)
            .map(<[i32]>::to_vec)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "the module did not return tensor<{}xi32>",
                    self.seq
                ))
            })
    }
}

/// What [`generate`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The new ids, in order (the eos id is not included).
    pub ids: Vec<i32>,
    /// True when generation stopped at an eos id.
    pub stopped_at_eos: bool,
}

/// Runs the redecode loop from `prompt`, calling `on_token` with each new
/// id as it arrives. The prompt must be shorter than SEQ.
pub fn generate(
    model: &mut dyn Forward,
    prompt: &[i32],
    max_new_tokens: usize,
    eos: &[i32],
    mut on_token: impl FnMut(i32),
) -> Result<Generation> {
    let seq = model.seq();
    if prompt.is_empty() {
        return Err(Error::Usage("the prompt is empty".into()));
    }
    if prompt.len() >= seq {
        return Err(Error::Usage(format!(
            "the prompt has {} tokens but SEQ is {seq}: it must be at most SEQ - 1 = {} (export with a larger --seq)",
            prompt.len(),
            seq - 1
        )));
    }
    let mut buf = vec![0i32; seq];
    buf[..prompt.len()].copy_from_slice(prompt);
    let mut ids = Vec::new();
    let mut step = 0;
    while prompt.len() + step < seq && step < max_new_tokens {
        let out = model.forward(&buf)?;
        let next = out[prompt.len() - 1 + step];
        if eos.contains(&next) {
            return Ok(Generation {
                ids,
                stopped_at_eos: true,
            });
        }
        buf[prompt.len() + step] = next;
        ids.push(next);
        on_token(next);
        step += 1;
    }
    Ok(Generation {
        ids,
        stopped_at_eos: false,
    })
}

/// A forward pass through kiln's own interpreter (no IREE): the module is
/// parsed once and the weights are read from the parameter file on each
/// call (memory-mapped).
pub struct Interpreted {
    module: crate::graph::Module,
    function: String,
    params: crate::interp::files::FileParams,
    seq: usize,
}

impl Interpreted {
    /// Parses `mlir` and opens `params` (`.irpa` or `.safetensors`).
    pub fn open(
        mlir: &std::path::Path,
        params: &std::path::Path,
        function: &str,
    ) -> Result<Interpreted> {
        let text = std::fs::read_to_string(mlir).map_err(|e| Error::io(mlir, e))?;
        let module = crate::stablehlo::parse_module(&text).map_err(|e| e.with_file(mlir))?;
        let g = crate::interp::find_function(&module, Some(function))?;
        let seq = g
            .inputs
            .first()
            .and_then(|&v| g.ty(v).shape.last().copied())
            .ok_or_else(|| Error::Usage(format!("function @{function} takes no token ids")))?;
        Ok(Interpreted {
            params: crate::interp::files::FileParams::open(params)?,
            function: function.to_string(),
            module,
            seq,
        })
    }
}

impl Forward for Interpreted {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> Result<Vec<i32>> {
        let g = crate::interp::find_function(&self.module, Some(&self.function))?;
        let shape = g.ty(g.inputs[0]).shape.to_vec();
        let out = crate::interp::run(
            g,
            &[crate::interp::Tensor::i32(&shape, ids.to_vec())],
            &self.params,
        )?;
        out.first()
            .and_then(crate::interp::Tensor::as_i32)
            .map(<[i32]>::to_vec)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "function @{} does not return i32 ids",
                    self.function
                ))
            })
    }
}

/// One model driven through the KV-cache pair (`kiln export --kv-cache`):
/// a prefill over the prompt bucket P, then one decode per token, the
/// caches kept by the implementation between calls.
pub trait KvStep {
    /// Prompt bucket P.
    fn prompt_len(&self) -> usize;
    /// Max context N (cache length).
    fn max_context(&self) -> usize;
    /// Runs prefill on `padded` (P ids, the prompt then 0s) whose first
    /// `length` ids are the prompt; returns the id predicted after it and
    /// keeps the caches.
    fn prefill(&mut self, padded: &[i32], length: usize) -> Result<i32>;
    /// Runs decode for `token` at `position` on the kept caches; returns
    /// the id predicted after it and keeps the updated caches.
    fn decode(&mut self, token: i32, position: usize) -> Result<i32>;
}

/// The KV-cache loop: exactly the ids [`generate`] gives with SEQ = N (the
/// same greedy choice and eos handling), one prefill then one decode per
/// new token instead of a whole-window forward per token. The prompt must
/// fit P and leave room in N.
pub fn generate_kv(
    model: &mut dyn KvStep,
    prompt: &[i32],
    max_new_tokens: usize,
    eos: &[i32],
    mut on_token: impl FnMut(i32),
) -> Result<Generation> {
    let (p, n) = (model.prompt_len(), model.max_context());
    if prompt.is_empty() {
        return Err(Error::Usage("the prompt is empty".into()));
    }
    if prompt.len() > p {
        return Err(Error::Usage(format!(
            "the prompt has {} tokens but the prompt bucket P is {p} (export with a larger --prompt-len)",
            prompt.len()
        )));
    }
    if prompt.len() >= n {
        return Err(Error::Usage(format!(
            "the prompt has {} tokens but the max context N is {n}: no room for a new token (export with a larger --max-context)",
            prompt.len()
        )));
    }
    let mut padded = vec![0i32; p];
    padded[..prompt.len()].copy_from_slice(prompt);
    let mut ids = Vec::new();
    let mut step = 0;
    let mut next = None;
    while prompt.len() + step < n && step < max_new_tokens {
        let id = match next {
            None => model.prefill(&padded, prompt.len())?,
            Some(prev) => model.decode(prev, prompt.len() + step - 1)?,
        };
        if eos.contains(&id) {
            return Ok(Generation {
                ids,
                stopped_at_eos: true,
            });
        }
        ids.push(id);
        on_token(id);
        next = Some(id);
        step += 1;
    }
    Ok(Generation {
        ids,
        stopped_at_eos: false,
    })
}

/// Checks a decode position against N: a generation past the max context
/// is an error, never a silent wrap-around.
fn check_position(position: usize, max_context: usize) -> Result<()> {
    if position >= max_context {
        return Err(Error::Usage(format!(
            "decode position {position} is past the max context N = {max_context} (export with a larger --max-context)"
        )));
    }
    Ok(())
}

/// Checks the caches a call returned against the manifest's shape.
fn check_caches(shapes: [&[usize]; 2], want: &[usize], function: &str) -> Result<()> {
    for s in shapes {
        if s != want {
            return Err(Error::Usage(format!(
                "@{function} returned a cache of shape {s:?}, expected {want:?}: the module does not match its manifest (re-export)"
            )));
        }
    }
    Ok(())
}

/// The KV-cache pair through kiln's own interpreter (no IREE); the caches
/// are host tensors.
pub struct KvInterpreted {
    module: crate::graph::Module,
    names: (String, String),
    params: crate::interp::files::FileParams,
    prompt_len: usize,
    max_context: usize,
    cache_shape: Vec<usize>,
    caches: Option<(crate::interp::Tensor, crate::interp::Tensor)>,
}

impl KvInterpreted {
    /// Parses `mlir` (a `NAME-kv-gen.mlir`) and opens `params`; `prefill`
    /// and `decode` name the two functions. P, N and the cache shape are
    /// read from their signatures.
    pub fn open(
        mlir: &std::path::Path,
        params: &std::path::Path,
        prefill: &str,
        decode: &str,
    ) -> Result<KvInterpreted> {
        let text = std::fs::read_to_string(mlir).map_err(|e| Error::io(mlir, e))?;
        let module = crate::stablehlo::parse_module(&text).map_err(|e| e.with_file(mlir))?;
        let pf = crate::interp::find_function(&module, Some(prefill))?;
        let df = crate::interp::find_function(&module, Some(decode))?;
        let bad = |f: &str| {
            Error::Usage(format!(
                "function @{f} does not have the KV-cache signature (see spec/kv-cache.md)"
            ))
        };
        let prompt_len = pf
            .inputs
            .first()
            .and_then(|&v| pf.ty(v).shape.last().copied())
            .ok_or_else(|| bad(prefill))?;
        let cache_shape = df
            .inputs
            .get(2)
            .map(|&v| df.ty(v).shape.to_vec())
            .filter(|s| s.len() == 4)
            .ok_or_else(|| bad(decode))?;
        Ok(KvInterpreted {
            params: crate::interp::files::FileParams::open(params)?,
            names: (prefill.to_string(), decode.to_string()),
            max_context: cache_shape[2],
            module,
            prompt_len,
            cache_shape,
            caches: None,
        })
    }

    fn call(&mut self, decode: bool, inputs: Vec<crate::interp::Tensor>) -> Result<i32> {
        let name = if decode { &self.names.1 } else { &self.names.0 };
        let g = crate::interp::find_function(&self.module, Some(name))?;
        let mut out = crate::interp::run(g, &inputs, &self.params)?.into_iter();
        let (next, k, v) = match (out.next(), out.next(), out.next()) {
            (Some(n), Some(k), Some(v)) => (n, k, v),
            _ => {
                return Err(Error::Usage(format!(
                    "function @{name} must return (id, K, V)"
                )))
            }
        };
        check_caches([k.shape(), v.shape()], &self.cache_shape, name)?;
        let id = next
            .as_i32()
            .and_then(|x| x.first().copied())
            .ok_or_else(|| Error::Usage(format!("function @{name} does not return an i32 id")))?;
        self.caches = Some((k, v));
        Ok(id)
    }
}

impl KvStep for KvInterpreted {
    fn prompt_len(&self) -> usize {
        self.prompt_len
    }
    fn max_context(&self) -> usize {
        self.max_context
    }
    fn prefill(&mut self, padded: &[i32], length: usize) -> Result<i32> {
        use crate::interp::Tensor;
        let inputs = vec![
            Tensor::i32(&[1, padded.len()], padded.to_vec()),
            Tensor::i32(&[], vec![length as i32]),
        ];
        self.call(false, inputs)
    }
    fn decode(&mut self, token: i32, position: usize) -> Result<i32> {
        use crate::interp::Tensor;
        check_position(position, self.max_context)?;
        let (k, v) = self
            .caches
            .take()
            .ok_or_else(|| Error::Usage("decode before prefill".into()))?;
        let inputs = vec![
            Tensor::i32(&[1], vec![token]),
            Tensor::i32(&[], vec![position as i32]),
            k,
            v,
        ];
        self.call(true, inputs)
    }
}

/// The KV-cache pair through `iree-run-module`, one process per call (for
/// emulated targets): the caches go through `.npy` files between calls.
pub struct KvRunModule {
    /// The toolchain.
    pub toolchain: Toolchain,
    /// The compiled KV module.
    pub vmfb: PathBuf,
    /// How to run it (parameters, device, emulation); `function` is set
    /// per call.
    pub options: RunOptions,
    /// (prefill, decode) function names.
    pub functions: (String, String),
    /// Prompt bucket P.
    pub prompt_len: usize,
    /// Shape of each cache, `[L, KV, N, D]`.
    pub cache_shape: Vec<usize>,
    /// The caches after the last call.
    pub caches: Option<(HostTensor, HostTensor)>,
}

impl KvRunModule {
    fn call(&mut self, decode: bool, inputs: &[HostTensor]) -> Result<i32> {
        let mut opts = self.options.clone();
        opts.function = if decode {
            self.functions.1.clone()
        } else {
            self.functions.0.clone()
        };
        opts.exact_outputs = Some(3);
        let out = run_module(&self.toolchain, &self.vmfb, &opts, inputs)?;
        let mut it = out.into_iter();
        let (next, k, v) = match (it.next(), it.next(), it.next()) {
            (Some(n), Some(k), Some(v)) => (n, k, v),
            _ => {
                return Err(Error::Usage(format!(
                    "@{} must return (id, K, V)",
                    opts.function
                )))
            }
        };
        check_caches([&k.shape, &v.shape], &self.cache_shape, &opts.function)?;
        self.caches = Some((k, v));
        next.as_i32()
            .and_then(|x| x.first().copied())
            .ok_or_else(|| Error::Usage(format!("@{} does not return an i32 id", opts.function)))
    }
}

impl KvStep for KvRunModule {
    fn prompt_len(&self) -> usize {
        self.prompt_len
    }
    fn max_context(&self) -> usize {
        self.cache_shape[2]
    }
    fn prefill(&mut self, padded: &[i32], length: usize) -> Result<i32> {
        let inputs = [
            HostTensor::i32(vec![1, padded.len()], padded.to_vec())?,
            HostTensor::i32(vec![], vec![length as i32])?,
        ];
        self.call(false, &inputs)
    }
    fn decode(&mut self, token: i32, position: usize) -> Result<i32> {
        check_position(position, self.max_context())?;
        let (k, v) = self
            .caches
            .take()
            .ok_or_else(|| Error::Usage("decode before prefill".into()))?;
        let inputs = [
            HostTensor::i32(vec![1], vec![token])?,
            HostTensor::i32(vec![], vec![position as i32])?,
            k,
            v,
        ];
        self.call(true, &inputs)
    }
}
