//! The long-lived forward-pass runners of `kiln generate`: the module and
//! the parameters are loaded once, in-process, through kiln's own runtime
//! crate (`kiln_runtime`, IREE's C runtime built from source); each step
//! passes SEQ ids and reads SEQ predicted ids back, and the KV pair's
//! caches stay on the device between calls.
//!
//! The sessions only implement the step interfaces of [`crate::step`]:
//! [`Session`] is a [`Forward`], [`KvSession`] a [`KvStep`]. Each is
//! started from a [`SessionSpec`] (module, parameters, device) and what it
//! serves (a function and SEQ, or a [`KvSpec`]).

use super::flags::Device;
use super::{IreeError, Result};
use crate::graph::TensorType;
use crate::step::{candidates, check_chunk, check_position, Forward, KvSpec, KvStep, Prediction};
use kiln_runtime as rt;
use std::path::PathBuf;

/// Where and how a session runs: the module, its parameter file and
/// scope, the device. [`SessionSpec::new`] and the setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct SessionSpec {
    /// The compiled module.
    pub vmfb: PathBuf,
    /// The parameter archive.
    pub params: PathBuf,
    /// Its scope in the module (`model`).
    pub scope: String,
    /// Runtime device.
    pub device: Device,
    /// local-task worker groups (`None`: IREE's default).
    pub task_groups: Option<usize>,
}

impl SessionSpec {
    /// `vmfb` over the parameter archive `params` in scope `model`, on the
    /// default device with IREE's default worker groups.
    pub fn new(vmfb: impl Into<PathBuf>, params: impl Into<PathBuf>) -> SessionSpec {
        SessionSpec {
            vmfb: vmfb.into(),
            params: params.into(),
            scope: "model".into(),
            device: Device::default(),
            task_groups: None,
        }
    }

    /// Sets the parameter scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = scope.into();
        self
    }

    /// Sets the runtime device.
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Sets the local-task worker groups (`None`: IREE's default).
    pub fn task_groups(mut self, task_groups: impl Into<Option<usize>>) -> Self {
        self.task_groups = task_groups.into();
        self
    }
}

/// The runtime's device for kiln's.
fn device(d: Device) -> rt::Device {
    match d {
        Device::LocalSync => rt::Device::LocalSync,
        Device::LocalTask => rt::Device::LocalTask,
        Device::Vulkan => rt::Device::Vulkan,
    }
}

/// The runtime's element type of a tensor type kiln passes (ids, caches).
fn element(t: &TensorType) -> Result<rt::ElementType> {
    rt::ElementType::from_name(&t.dtype.to_string())
        .ok_or_else(|| IreeError::BadInput(format!("no runtime element type for {t}")))
}

/// Opens `spec`'s module on its device over its archive (and the packed
/// archive of `kiln compile --pack` beside the module, scope `packed`).
fn open(spec: &SessionSpec) -> Result<rt::Session> {
    // On a CPU device the archive is mapped: the module reads the pages in
    // place, so only the pages it touches are resident (a module packed at
    // compile time reads only what is not packed). Not when the module
    // reads a parameter slice past an entry's start, which IREE 3.13's
    // runtime reads from the entry's start out of a mapped (host
    // allocation) file; nor on Vulkan, whose device copies every
    // parameter into its own memory anyway.
    let mode = param_mode(spec);
    let mut options = rt::SessionOptions::new(device(spec.device))
        .task_groups(spec.task_groups)
        .param(rt::ParamFile::new(&spec.scope, &spec.params, mode));
    let packed = super::pack::packed_archive(&spec.vmfb);
    if packed.is_file() {
        // kiln stores each packed tensor once, shared by the prefill's and
        // the decode's entries; only a mapping holds it once.
        options = options.param(rt::ParamFile::new("packed", packed, rt::ParamMode::Map));
    }
    Ok(rt::Session::open(&spec.vmfb, &options)?)
}

/// How `spec`'s archive is opened: mapped on a CPU device, read through a
/// file handle on Vulkan or when the module reads slices
/// ([`reads_slices`]).
pub(super) fn param_mode(spec: &SessionSpec) -> rt::ParamMode {
    if spec.device == Device::Vulkan || reads_slices(spec) {
        rt::ParamMode::File
    } else {
        rt::ParamMode::Map
    }
}

/// Whether `spec`'s module reads row chunks of its archive as slices (at
/// an offset into an entry) rather than through the archive's chunk
/// entries (`KEY@OFFSET`, what `kiln compile` reads when the export's
/// archive sits beside the MLIR). A module names the parameters it reads
/// as plain strings, so one that reads no chunk entry of a chunked archive
/// reads its chunks as slices.
fn reads_slices(spec: &SessionSpec) -> bool {
    let Ok(archive) = crate::params::irpa::IrpaReader::open(&spec.params) else {
        return false;
    };
    let chunks: Vec<&str> = archive
        .entries()
        .iter()
        .map(|e| e.name.as_str())
        .filter(|n| crate::params::irpa::parse_chunk_key(n).is_some())
        .collect();
    if chunks.is_empty() {
        return false;
    }
    let Ok(module) = std::fs::read(&spec.vmfb) else {
        return true;
    };
    !chunks
        .iter()
        .any(|k| module.windows(k.len()).any(|w| w == k.as_bytes()))
}

/// The i32 ids as the runtime's bytes.
fn id_bytes(ids: &[i32]) -> Vec<u8> {
    ids.iter().flat_map(|i| i.to_le_bytes()).collect()
}

/// A running session over the redecode forward of one module: each step
/// passes SEQ ids and reads SEQ predicted ids back.
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct Session {
    session: rt::Session,
    function: rt::Function,
    seq: usize,
}

impl Session {
    /// Loads `spec`'s module, serving `function` (taking `[1, seq]` ids).
    pub fn start(spec: &SessionSpec, function: &str, seq: usize) -> Result<Session> {
        let session = open(spec)?;
        let function = session.function(function)?;
        Ok(Session {
            session,
            function,
            seq,
        })
    }

    /// Runs one forward pass on SEQ ids.
    pub fn run(&mut self, ids: &[i32]) -> Result<Vec<i32>> {
        let input = self
            .session
            .tensor(rt::ElementType::I32, &[1, ids.len()], &id_bytes(ids))?;
        let outs = self.session.call(&self.function, &[&input])?;
        let first = outs.first().ok_or(IreeError::SessionIds {
            got: 0,
            seq: self.seq,
        })?;
        let v = self.session.read_i32(first)?;
        if v.len() != self.seq {
            return Err(IreeError::SessionIds {
                got: v.len(),
                seq: self.seq,
            });
        }
        Ok(v)
    }
}

impl Forward for Session {
    fn seq(&self) -> usize {
        self.seq
    }
    fn forward(&mut self, ids: &[i32]) -> crate::step::Result<Vec<i32>> {
        Ok(self.run(ids)?)
    }
}

/// The session's failures are the runtime's, kept whole.
impl From<IreeError> for crate::step::CallError {
    fn from(e: IreeError) -> Self {
        crate::step::CallError::runtime(e)
    }
}

/// A session over a KV-cache module (`kiln export --kv-cache`): prefill
/// and decode loaded once, the K/V caches kept on the device between
/// calls (`kiln_runtime::KvPair`).
// Public so the integration tests can pin this runtime; a library user
// opens a `generate::Driver` (issue 31: curated API).
#[doc(hidden)]
pub struct KvSession {
    pair: rt::KvPair,
    spec: KvSpec,
}

impl KvSession {
    /// Loads `spec`'s module serving the pair `kv`.
    pub fn start(spec: &SessionSpec, kv: &KvSpec) -> Result<KvSession> {
        let functions: Vec<(String, String)> = kv
            .functions()
            .iter()
            .map(|(p, d)| (p.to_string(), d.to_string()))
            .collect();
        let caches = kv
            .caches
            .iter()
            .map(|c| {
                Ok(rt::CacheType {
                    element: element(c)?,
                    shape: c.shape.to_vec(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvSession {
            pair: rt::KvPair::new(open(spec)?, &functions, caches)?,
            spec: kv.clone(),
        })
    }
}

/// The runtime's step as kiln's prediction.
fn prediction(step: rt::Step) -> Result<Prediction> {
    let top = if step.top_ids.is_empty() {
        Vec::new()
    } else {
        candidates(&step.top_ids, &step.top_values)
            .ok_or_else(|| IreeError::BadInput("a module returned a bad top-K".into()))?
    };
    Ok(Prediction { id: step.id, top })
}

impl KvStep for KvSession {
    fn prompt_len(&self) -> usize {
        self.spec.prompt_len
    }
    fn max_context(&self) -> usize {
        self.spec.max_context()
    }
    fn reset(&mut self) -> crate::step::Result<()> {
        Ok(self.pair.reset().map_err(IreeError::from)?)
    }
    fn prefill(
        &mut self,
        chunk: &[i32],
        start: usize,
        length: usize,
    ) -> crate::step::Result<Prediction> {
        check_chunk(
            chunk.len(),
            self.spec.prompt_len,
            start,
            length,
            self.max_context(),
        )?;
        let f = self.spec.pair_for(start + length);
        let step = self
            .pair
            .prefill(f, chunk, start as i32, length as i32)
            .map_err(IreeError::from)?;
        Ok(prediction(step)?)
    }
    fn decode(&mut self, token: i32, position: usize) -> crate::step::Result<Prediction> {
        check_position(position, self.max_context())?;
        let f = self.spec.pair_for(position + 1);
        let step = self
            .pair
            .decode(f, token, position as i32)
            .map_err(IreeError::from)?;
        Ok(prediction(step)?)
    }
}
