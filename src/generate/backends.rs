//! The generation protocols over a [`Backend`], once for every runtime that
//! hands tensors back: [`Redecode`] (a [`Forward`]) and [`KvDriver`] (a
//! [`KvStep`]); and the two such runtimes, kiln's [`Interpreter`] and
//! [`RunModule`] (one `iree-run-module` per call).

use super::{GenerateError, Result};
use crate::iree::run::{run_module, HostTensor, RunOptions};
use crate::iree::Toolchain;
use crate::step::Result as StepResult;
use crate::step::{candidates, Backend, Forward, KvSpec, KvStep, Prediction, SignatureError};
use crate::util::IoError;
use std::path::{Path, PathBuf};

/// The redecode forward over a [`Backend`]: one call of `function` on
/// `[1, SEQ]` ids per step.
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
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
    fn forward(&mut self, ids: &[i32]) -> StepResult<Vec<i32>> {
        let input = self.backend.i32(&[1, self.seq], ids.to_vec())?;
        let out = self.backend.run(&self.function, vec![input])?;
        out.first()
            .and_then(|t| self.backend.i32s(t))
            .filter(|v| v.len() == self.seq)
            .map(<[i32]>::to_vec)
            .ok_or_else(|| {
                SignatureError::NotSeqIds {
                    function: self.function.clone(),
                    seq: self.seq,
                }
                .into()
            })
    }
}

/// The redecode forward through kiln's interpreter.
impl Redecode<Interpreter> {
    /// Parses `mlir` and opens `params`; SEQ is read from `function`'s
    /// signature.
    pub fn open(mlir: &Path, params: &Path, function: &str) -> Result<Self> {
        let backend = Interpreter::open(mlir, params)?;
        let seq =
            ids_len(backend.function(function)?).ok_or_else(|| SignatureError::NoTokenIds {
                function: function.to_string(),
            })?;
        Ok(Redecode::new(backend, function, seq))
    }
}

/// The KV-cache pair driven over a [`Backend`]: the caches a call returns
/// are kept and passed to the next decode.
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct KvDriver<B: Backend> {
    backend: B,
    spec: KvSpec,
    /// The caches of `spec`, in argument order, after a reset.
    caches: Option<Vec<B::Tensor>>,
}

impl<B: Backend> KvDriver<B> {
    /// A driver of the pair `spec` over `backend`.
    pub fn new(backend: B, spec: KvSpec) -> KvDriver<B> {
        KvDriver {
            backend,
            spec,
            caches: None,
        }
    }

    /// The same driver with the attention spans `spans` of its pair
    /// ([`KvSpec::spans`]): each call runs the smallest span that holds it.
    pub fn with_spans(mut self, spans: Vec<crate::step::KvSpan>) -> Result<KvDriver<B>> {
        self.spec = self.spec.spans(spans)?;
        Ok(self)
    }

    /// The pair this driver runs.
    pub fn spec(&self) -> &KvSpec {
        &self.spec
    }

    /// Runs `function` on `inputs` then the kept caches, and keeps the
    /// caches it returns; returns its prediction.
    fn call(&mut self, function: &str, mut inputs: Vec<B::Tensor>) -> StepResult<Prediction> {
        let caches = self.caches.take().ok_or_else(|| GenerateError::NotReset {
            function: function.to_string(),
        })?;
        inputs.extend(caches);
        let mut out = self.backend.run(function, inputs)?;
        let bad = || SignatureError::KvResults {
            function: function.to_string(),
        };
        let n = self.spec.caches.len();
        if out.len() < 1 + n {
            return Err(bad().into());
        }
        let top = out.split_off(1 + n);
        let caches = out.split_off(1);
        let next = out.pop().ok_or_else(bad)?;
        let b = &self.backend;
        check_caches(caches.iter().map(|t| b.shape(t)), &self.spec, function)?;
        let id = b
            .i32s(&next)
            .and_then(|x| x.first().copied())
            .ok_or_else(|| SignatureError::NoId {
                function: function.to_string(),
            })?;
        let top = match top.as_slice() {
            [] => Vec::new(),
            [values, ids] => {
                let (Some(values), Some(ids)) = (b.f32s(values), b.i32s(ids)) else {
                    return Err(bad().into());
                };
                candidates(ids, values).ok_or_else(bad)?
            }
            _ => return Err(bad().into()),
        };
        self.caches = Some(caches);
        Ok(Prediction { id, top })
    }
}

/// Checks the caches a call returned against the pair's cache types.
fn check_caches<'a>(
    shapes: impl IntoIterator<Item = &'a [usize]>,
    spec: &KvSpec,
    function: &str,
) -> Result<(), SignatureError> {
    for (s, want) in shapes.into_iter().zip(&spec.caches) {
        if s != &want.shape[..] {
            return Err(SignatureError::CacheShape {
                function: function.to_string(),
                found: s.to_vec(),
                expected: want.shape.to_vec(),
            });
        }
    }
    Ok(())
}

impl<B: Backend> KvStep for KvDriver<B> {
    fn prompt_len(&self) -> usize {
        self.spec.prompt_len
    }
    fn max_context(&self) -> usize {
        self.spec.max_context()
    }
    fn reset(&mut self) -> StepResult<()> {
        let b = &self.backend;
        let caches = self
            .spec
            .caches
            .iter()
            .map(|ty| b.zeros(ty))
            .collect::<StepResult<_>>()?;
        self.caches = Some(caches);
        Ok(())
    }
    fn prefill(&mut self, chunk: &[i32], start: usize, length: usize) -> StepResult<Prediction> {
        let f = self.spec.prefill_pair(chunk.len(), start, length)?;
        let f = self.spec.functions()[f].0.to_string();
        let b = &self.backend;
        let inputs = vec![
            b.i32(&[1, chunk.len()], chunk.to_vec())?,
            b.i32(&[], vec![start as i32])?,
            b.i32(&[], vec![length as i32])?,
        ];
        self.call(&f, inputs)
    }
    fn decode(&mut self, token: i32, position: usize) -> StepResult<Prediction> {
        let f = self.spec.decode_pair(position)?;
        let f = self.spec.functions()[f].1.to_string();
        let b = &self.backend;
        let inputs = vec![
            b.i32(&[1], vec![token])?,
            b.i32(&[], vec![position as i32])?,
        ];
        self.call(&f, inputs)
    }
}

/// kiln's own interpreter as a [`Backend`] (no IREE): the module parsed
/// once, the weights read from the parameter file on each call.
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct Interpreter {
    module: crate::graph::Module,
    params: Box<dyn crate::params::ParamSource>,
}

impl Interpreter {
    /// Parses `mlir` and opens `params` (`.irpa`, `.safetensors` or `.gguf`).
    pub fn open(mlir: &Path, params: &Path) -> Result<Interpreter> {
        let text = std::fs::read_to_string(mlir).map_err(|e| IoError::new(mlir, e))?;
        let module = crate::graph::Module::parse(&text).map_err(|e| e.with_file(mlir))?;
        Ok(Interpreter {
            module,
            params: <dyn crate::params::ParamSource>::open(params)
                .map_err(crate::interp::InterpError::from)?,
        })
    }

    /// The parsed module.
    pub fn module(&self) -> &crate::graph::Module {
        &self.module
    }

    /// The module's function `name`.
    fn function(&self, name: &str) -> Result<&crate::graph::Graph> {
        Ok(self.module.function(Some(name))?)
    }
}

/// How many token ids `g` takes: the last dimension of its first input.
fn ids_len(g: &crate::graph::Graph) -> Option<usize> {
    let &ids = g.inputs().first()?;
    g.ty(ids).shape.last().copied()
}

impl Backend for Interpreter {
    type Tensor = crate::interp::Tensor;
    fn i32(&self, shape: &[usize], data: Vec<i32>) -> StepResult<Self::Tensor> {
        Ok(crate::interp::Tensor::i32(shape, data))
    }
    fn zeros(&self, ty: &crate::graph::TensorType) -> StepResult<Self::Tensor> {
        // Float dtypes (f32, bf16) are held as f32; i32 pairs (a module
        // lowered for Vulkan) as i32.
        Ok(match ty.dtype {
            crate::graph::DType::I32 => crate::interp::Tensor::i32(&ty.shape, vec![0; ty.numel()]),
            _ => crate::interp::Tensor::f32(&ty.shape, vec![0.0; ty.numel()]),
        })
    }
    fn run(&mut self, function: &str, inputs: Vec<Self::Tensor>) -> StepResult<Vec<Self::Tensor>> {
        Ok(crate::interp::run(
            self.function(function)?,
            &inputs,
            &self.params,
        )?)
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
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct RunModule {
    /// The toolchain.
    pub toolchain: Toolchain,
    /// The compiled module.
    pub vmfb: PathBuf,
    /// How to run it (parameters, device, emulation; for the KV pair,
    /// whose caches must come back exactly, `output_types` or
    /// `exact_outputs`);
    /// `function` is set per call.
    pub options: RunOptions,
}

impl Backend for RunModule {
    type Tensor = HostTensor;
    fn i32(&self, shape: &[usize], data: Vec<i32>) -> StepResult<Self::Tensor> {
        Ok(HostTensor::i32(shape.to_vec(), data)?)
    }
    fn zeros(&self, ty: &crate::graph::TensorType) -> StepResult<Self::Tensor> {
        use crate::graph::DType;
        use crate::iree::run::TensorData;
        let n = ty.numel();
        let data = match ty.dtype {
            DType::F32 => TensorData::F32(vec![0.0; n]),
            DType::BF16 => TensorData::Bf16(vec![0; n]),
            // A Vulkan module's bf16 caches, two per word.
            DType::I32 => TensorData::I32(vec![0; n]),
            _ => return Err(GenerateError::CacheThroughFiles { cache: ty.clone() }.into()),
        };
        Ok(HostTensor::new(ty.shape.to_vec(), data)?)
    }
    fn run(&mut self, function: &str, inputs: Vec<Self::Tensor>) -> StepResult<Vec<Self::Tensor>> {
        let mut opts = self.options.clone();
        opts.function = function.to_string();
        Ok(run_module(&self.toolchain, &self.vmfb, &opts, &inputs)?)
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
impl KvDriver<Interpreter> {
    /// Parses `mlir` (a `NAME-kv-gen.mlir`) and opens `params`; `prefill`
    /// and `decode` name the two functions. P, N and the cache types are
    /// read from their signatures.
    pub fn open(mlir: &Path, params: &Path, prefill: &str, decode: &str) -> Result<Self> {
        let backend = Interpreter::open(mlir, params)?;
        let pf = backend.function(prefill)?;
        let df = backend.function(decode)?;
        let bad = |f: &str| SignatureError::NotKvPair {
            function: f.to_string(),
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
        let spec = KvSpec::new(prefill, decode, prompt_len, cache, count)?;
        Ok(KvDriver::new(backend, spec))
    }
}
