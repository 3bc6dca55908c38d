//! Opening the runtime that fits a module ([`DriverOptions`] →
//! [`Driver`]): kiln's interpreter for `.mlir`, a loaded IREE session, or
//! one `iree-run-module` per call; and the loop each runs.

use super::backends::{Interpreter, KvDriver, Redecode, RunModule};
use super::{check_ids, generate, generate_kv, GenerateError, Generation, Result, Sampler};
use crate::graph::{DType, TensorType};
use crate::iree::remote::{RemoteKvSession, RemoteRuntime, RemoteSession};
use crate::iree::run::RunOptions;
use crate::iree::session::{ForwardSession, KvSession, SessionSpec};
use crate::iree::Toolchain;
use crate::manifest::KvPair;
use crate::step::{Forward, KvSpan, KvSpec, KvStep};
use std::path::PathBuf;

/// The pair a manifest records, checked (its cache dtype known, 1 ≤ P ≤ N,
/// its spans ascending from P and below N).
impl TryFrom<&KvPair> for KvSpec {
    type Error = GenerateError;
    fn try_from(kv: &KvPair) -> Result<KvSpec> {
        let spans = kv
            .spans
            .iter()
            .map(|s| KvSpan::new(s.span, &s.prefill, &s.decode))
            .collect();
        Ok(KvSpec::new(
            &kv.prefill,
            &kv.decode,
            kv.prompt_len,
            kv.cache_type()?,
            kv.cache_count,
        )?
        .spans(spans)?)
    }
}

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
    pub kv: Option<KvPair>,
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
    /// The vocabulary size (the export manifest's `vocab_size`), when
    /// known: [`Driver::generate`] refuses a prompt id at or past it
    /// before any call ([`check_ids`]).
    pub vocab_size: Option<usize>,
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
            vocab_size: None,
        }
    }

    /// Sets the parameter scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = scope.into();
        self
    }

    /// Drives the KV-cache pair `kv` (`None`: the redecode function).
    pub fn kv(mut self, kv: impl Into<Option<KvPair>>) -> Self {
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

    /// Sets the vocabulary size the prompt ids are checked against
    /// (`None`: unchecked; `RunManifest::vocab_size` gives an export's).
    pub fn vocab_size(mut self, vocab_size: impl Into<Option<usize>>) -> Self {
        self.vocab_size = vocab_size.into();
        self
    }
}

/// The loop a generation runs (redecode or KV cache) over the runtime that
/// fits the module: kiln's interpreter for `.mlir`, a loaded IREE session,
/// or one `iree-run-module` per call (`per_step`, emulation).
pub enum DriverLoop {
    /// The whole SEQ window every step.
    Redecode(Box<dyn Forward>),
    /// One prefill, then one decode per token.
    Kv(Box<dyn KvStep>),
}

/// A generation loop over its runtime ([`DriverLoop`]), with the
/// vocabulary its prompt ids are checked against.
pub struct Driver {
    /// The loop and its runtime.
    pub model: DriverLoop,
    /// The vocabulary size, when known: [`Driver::generate`] refuses a
    /// prompt id at or past it before any call.
    pub vocab_size: Option<usize>,
}

impl Driver {
    /// Opens the driver `o` describes (starting the IREE session when that
    /// is the runtime).
    pub fn open(o: &DriverOptions) -> Result<Driver> {
        Ok(Driver {
            model: Self::open_loop(o)?,
            vocab_size: o.vocab_size,
        })
    }

    /// The loop and runtime `o` describes.
    fn open_loop(o: &DriverOptions) -> Result<DriverLoop> {
        let interpreted = o.module.extension().is_some_and(|e| e == "mlir");
        if interpreted {
            return Ok(match &o.kv {
                None => DriverLoop::Redecode(Box::new(Redecode::<Interpreter>::open(
                    &o.module,
                    &o.params,
                    &o.function,
                )?)),
                Some(kv) => DriverLoop::Kv(Box::new(
                    KvDriver::<Interpreter>::open(&o.module, &o.params, &kv.prefill, &kv.decode)?
                        .with_spans(KvSpec::try_from(kv)?.spans)?,
                )),
            });
        }
        // In-process sessions need no IREE tool. An emulated run needs qemu
        // and kiln's runtime program built for the emulated architecture
        // (aarch64 on local-task, armv7 on local-sync), which then serves
        // the whole generation; without that program, or with --per-step,
        // each step is one iree-run-module.
        let tc = if o.per_step || o.emulate.is_some() {
            Some(Toolchain::locate(o.iree_dir.as_deref())?)
        } else {
            None
        };
        let remote = match (&tc, o.emulate, o.per_step) {
            (Some(tc), Some(emulation), false) => RemoteRuntime::find(tc, emulation),
            _ => None,
        };
        let per_call = o.per_step || (o.emulate.is_some() && remote.is_none());
        // The KV pair's results come back bit-exactly, typed: the id, the
        // caches, then the top-K values and ids.
        let backend = |output_types| RunModule {
            toolchain: tc.clone().expect("located for per-call runs"),
            vmfb: o.module.clone(),
            options: RunOptions {
                device: o.device,
                function: String::new(),
                params: vec![(o.scope.clone(), o.params.clone())],
                task_groups: o.task_groups,
                emulate: o.emulate,
                exact_outputs: None,
                output_types,
            },
        };
        let session = || {
            SessionSpec::new(&o.module, &o.params)
                .scope(&o.scope)
                .device(o.device)
                .task_groups(o.task_groups)
        };
        // A Vulkan module holds bf16 caches as i32 pairs.
        let kv_spec = |kv: &KvPair| match o.device {
            crate::iree::flags::Device::Vulkan => Ok(KvSpec::try_from(kv)?.for_vulkan()?),
            _ => KvSpec::try_from(kv),
        };
        if let Some(remote) = &remote {
            return Ok(match &o.kv {
                None => DriverLoop::Redecode(Box::new(RemoteSession::start(
                    remote,
                    &session(),
                    &o.function,
                    o.seq,
                )?)),
                Some(kv) => DriverLoop::Kv(Box::new(RemoteKvSession::start(
                    remote,
                    &session(),
                    &kv_spec(kv)?,
                )?)),
            });
        }
        Ok(match (&o.kv, per_call) {
            (None, true) => DriverLoop::Redecode(Box::new(Redecode::new(
                backend(Vec::new()),
                &o.function,
                o.seq,
            ))),
            (Some(kv), true) => {
                let spec = kv_spec(kv)?;
                let mut types = vec![TensorType::new(DType::I32, &[])];
                types.extend(spec.caches.iter().cloned());
                if let Some(k) = kv.top_k {
                    types.push(TensorType::new(DType::F32, &[k]));
                    types.push(TensorType::new(DType::I32, &[k]));
                }
                DriverLoop::Kv(Box::new(KvDriver::new(backend(types), spec)))
            }
            (None, false) => DriverLoop::Redecode(Box::new(ForwardSession::new(
                session().open()?,
                &o.function,
                o.seq,
            )?)),
            (Some(kv), false) => {
                DriverLoop::Kv(Box::new(KvSession::new(session().open()?, &kv_spec(kv)?)?))
            }
        })
    }

    /// Generates from `prompt` with this driver's loop ([`generate`] or
    /// [`generate_kv`]), choosing ids with `sampler` (only greedy on
    /// the redecode loop). A prompt id at or past the vocabulary size,
    /// when known, is refused before any call
    /// ([`GenerateError::IdPastVocabulary`]).
    pub fn generate(
        &mut self,
        prompt: &[i32],
        max_new_tokens: usize,
        eos: &[i32],
        sampler: Sampler,
        on_token: impl FnMut(i32) -> bool,
    ) -> Result<Generation> {
        if let Some(vocab_size) = self.vocab_size {
            check_ids(prompt, vocab_size)?;
        }
        match &mut self.model {
            DriverLoop::Redecode(_) if !sampler.params().is_greedy() => {
                Err(GenerateError::SamplingNeedsKv)
            }
            DriverLoop::Redecode(m) => generate(m.as_mut(), prompt, max_new_tokens, eos, on_token),
            DriverLoop::Kv(m) => {
                generate_kv(m.as_mut(), prompt, max_new_tokens, eos, sampler, on_token)
            }
        }
    }
}
