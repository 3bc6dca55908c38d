//! The long-lived forward-pass runners of `kiln generate`: the module and
//! the parameters are loaded once, in-process, through kiln's own runtime
//! crate (`kiln_runtime`, IREE's C runtime built from source); each step
//! passes SEQ ids and reads SEQ predicted ids back, and the KV pair's
//! caches stay on the device between calls.
//!
//! The sessions are the runtime crate's ([`ForwardSession`] is a
//! `Forward`, [`KvSession`] a `KvStep`); what kiln adds is how a module is
//! opened: [`SessionSpec`] (module, parameters, device) and
//! [`SessionSpec::open`], which picks how the archive is read.

use super::flags::Device;
use super::{IreeError, Result};
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

/// Opens `spec`'s module on its device over its archive (and the packed
/// archive of `kiln compile --pack` beside the module, scope `packed`).
fn open(spec: &SessionSpec) -> Result<rt::Session> {
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

/// How `spec`'s archive is opened: read through a file handle on Vulkan,
/// whose device copies every parameter into its own memory anyway; else
/// mapped, so that only the pages the module touches are resident (a
/// module packed at compile time reads only what is not packed), unless
/// the module reads chunk entries as slices ([`rt::ParamMode::Auto`]).
pub(super) fn param_mode(spec: &SessionSpec) -> rt::ParamMode {
    if spec.device == Device::Vulkan {
        rt::ParamMode::File
    } else {
        rt::ParamMode::Auto
    }
}

impl SessionSpec {
    /// Loads this spec's module on its device over its archive (and the
    /// packed archive of `kiln compile --pack` beside the module, scope
    /// `packed`).
    pub fn open(&self) -> Result<rt::Session> {
        open(self)
    }
}

/// A session over the redecode forward of one module:
/// `ForwardSession::new(spec.open()?, function, seq)`.
pub use rt::steps::ForwardSession;
/// A session over a KV-cache module: `KvSession::new(spec.open()?, &kv)`.
pub use rt::steps::KvSession;

/// The session's failures are the runtime's, kept whole.
impl From<IreeError> for crate::step::CallError {
    fn from(e: IreeError) -> Self {
        crate::step::CallError::runtime(e)
    }
}
