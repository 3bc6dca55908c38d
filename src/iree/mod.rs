//! Driver for the external IREE tools (`iree-compile`, `iree-run-module`, …).
//!
//! kiln never links IREE: it finds the pinned release's native executables
//! ([`Toolchain`]), builds their flags in one place ([`Target`], [`Device`]),
//! and runs them as child processes ([`compile()`], [`run_module`], and the
//! long-lived runtime sessions that [`Driver`](crate::Driver) opens).
//!
//! ```no_run
//! use kiln::iree::{compile, Target, Toolchain};
//! # fn main() -> kiln::Result<()> {
//! let tc = Toolchain::find()?;
//! let out = std::path::Path::new("out/model-host.vmfb");
//! compile(&tc, "model-gen.mlir".as_ref(), &Target::Host, out, &[])?;
//! # Ok(()) }
//! ```

pub(crate) mod compile;
pub(crate) mod flags;
pub mod inspect;
pub(crate) mod limits;
pub mod pack;
pub(crate) mod remote;
pub(crate) mod run;
pub(crate) mod session;
pub(crate) mod toolchain;

pub use compile::{compile, CompileOptions};
pub use flags::{Device, Target};
pub use limits::TensorUse;
pub use remote::{RemoteKvSession, RemoteRuntime, RemoteSession};
pub use run::{run_module, Emulation, HostTensor, RunOptions, TensorData};
pub use session::{ForwardSession, KvSession, SessionSpec};
pub use toolchain::Toolchain;

use std::path::PathBuf;

/// The IREE toolchain is missing or one of its tools failed, or a module
/// given to it cannot be compiled as it is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IreeError {
    /// No usable IREE installation was found.
    #[error("IREE {IREE_VERSION} not found ({looked})", IREE_VERSION = flags::IREE_VERSION)]
    NotFound {
        /// Where kiln looked, in order.
        looked: String,
    },
    /// A tool named by the caller or an environment variable does not
    /// exist.
    #[error("{what} points to {}, which is not an executable", path.display())]
    BadToolPath {
        /// What named it: an environment variable, or
        /// [`Toolchain::EXPLICIT_DIR`].
        what: String,
        /// The path given.
        path: PathBuf,
    },
    /// Installing the pinned venv failed.
    #[error("installing IREE failed: {0}")]
    Install(String),
    /// Installing the aarch64 runtime needs the pinned venv (for pip),
    /// which is not installed.
    #[error("installing IREE failed: {} missing", python.display())]
    NoVenv {
        /// The venv's Python that is missing.
        python: PathBuf,
    },
    /// `--target` named something other than host, arm64, arm32 or vulkan.
    #[error("unknown target '{0}': expected host, arm64, arm32 or vulkan (comma-separated)")]
    UnknownTarget(String),
    /// A Vulkan target name iree-compile would crash on.
    #[error("unknown Vulkan target '{0}' for iree-compile {v}: use one of vp_android_baseline_2022 (default), valhall, valhall1-4, mali-g57/g77/g78/g310/g510/g615/g710/g715/g720/g725, adreno, adreno-NNN, llvmpipe, rdna1-4, ampere, … (see spec/iree.md)", v = flags::IREE_VERSION)]
    UnknownVulkanTarget(String),
    /// `--device` named an unknown runtime device.
    #[error("unknown device '{0}': expected local-task, local-sync or vulkan")]
    UnknownDevice(String),
    /// `--emulate` named an unknown architecture.
    #[error("unknown emulation '{0}': only arm64 is supported")]
    UnknownEmulation(String),
    /// iree-compile exited with an error; carries its stderr.
    #[error("iree-compile failed for target {target} on {} ({status}):\n{stderr}", mlir.display())]
    CompileFailed {
        /// The input module.
        mlir: PathBuf,
        /// The target being compiled.
        target: String,
        /// Exit status as text.
        status: String,
        /// iree-compile's stderr (trimmed).
        stderr: String,
    },
    /// iree-run-module exited with an error; carries its stderr.
    #[error("iree-run-module failed on {} ({status}): {stderr}", module.display())]
    RunFailed {
        /// The module being run.
        module: PathBuf,
        /// Exit status as text.
        status: String,
        /// iree-run-module's stderr (trimmed).
        stderr: String,
    },
    /// A tool could not be started.
    #[error("cannot start {}: {source}", tool.display())]
    Spawn {
        /// The executable.
        tool: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `--device vulkan` on a machine without a Vulkan driver.
    #[error("no Vulkan driver available ({0}); install one: apt-get install mesa-vulkan-drivers libvulkan1 (or run scripts/install-deps.sh)")]
    VulkanUnavailable(String),
    /// qemu or the aarch64 runtime for an emulated run is missing.
    #[error("{0} not found")]
    EmulatorMissing(String),
    /// iree-run-module printed something kiln cannot parse.
    #[error("cannot parse iree-run-module output: {0}")]
    BadOutput(String),
    /// kiln's runtime (IREE's C runtime, in-process) failed: its message.
    #[error("IREE runtime: {0}")]
    Runtime(kiln_runtime::Error),
    /// The redecode session returned another number of ids than SEQ.
    #[error("the runner returned {got} ids, expected SEQ = {seq}")]
    SessionIds {
        /// Ids returned.
        got: usize,
        /// The function's SEQ.
        seq: usize,
    },
    /// An input tensor is inconsistent (shape vs. data).
    #[error("bad input tensor: {0}")]
    BadInput(String),
    /// iree-dump-module could not read a module.
    #[error("iree-dump-module cannot read {} ({status}): {stderr}", module.display())]
    InspectFailed {
        /// The module read.
        module: PathBuf,
        /// Exit status as text.
        status: String,
        /// iree-dump-module's stderr (trimmed).
        stderr: String,
    },
    /// An I/O operation on a module, a parameter file or an output failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A module to compile for Vulkan does not parse (and has bf16
    /// globals, which must be lowered).
    #[error(transparent)]
    Parse(Box<crate::stablehlo::ParseError>),
    /// The Vulkan lowering of a module failed.
    #[error("{}: {source}", mlir.display())]
    Lowering {
        /// The module.
        mlir: PathBuf,
        /// What the lowering refused.
        source: crate::graph::GraphError,
    },
    /// The lowered module could not be printed.
    #[error(transparent)]
    Print(#[from] crate::stablehlo::PrintError),
    /// A module for Vulkan has a parameter stored as i8 (the w8a8 form),
    /// which the Android Vulkan baseline cannot store or multiply.
    #[error("{}: @{function}: parameter \"{key}\" is {dtype} (w8a8, w8a16, w8a16e, w16a16 or w4a16 weights), a CPU-only form: the Android Vulkan baseline has no 8- or 4-bit storage and no integer matmul", mlir.display())]
    I8Weights {
        /// The module.
        mlir: PathBuf,
        /// The parameter's element type (i8 or i4).
        dtype: crate::graph::DType,
        /// The function that loads it.
        function: String,
        /// The parameter's key.
        key: String,
    },
    /// The packed archive of `kiln compile --pack` could not be written.
    #[error("{}: its packed weights: {source}", module.display())]
    Pack {
        /// The module being compiled.
        module: PathBuf,
        /// What failed (boxed: the crate's `Error` stays small).
        source: Box<crate::params::ParamsError>,
    },
    /// Two targets of one compile would write the same module.
    #[error("two targets would both write {}: name each target once", path.display())]
    DuplicateTarget {
        /// The module both would write.
        path: PathBuf,
    },
    /// A module for Vulkan has a product with more result columns than
    /// the workgroup count every Vulkan device guarantees (and no tensor
    /// over the storage-buffer range), found by kiln's own check of the
    /// module text before `iree-compile` runs.
    #[error("{}", limits::workgroups_text(file, target, first, *more))]
    VulkanWorkgroups {
        /// The module.
        file: PathBuf,
        /// The Vulkan target.
        target: String,
        /// The first such product (boxed: the crate's `Error` stays small).
        first: Box<TensorUse>,
        /// How many more there are.
        more: usize,
    },
    /// A module for Vulkan has tensors over the storage-buffer range every
    /// Vulkan device guarantees, found by kiln's own check of the module
    /// text before `iree-compile` runs.
    #[error("{}", limits::storage_text(file, target, over))]
    VulkanStorageBuffer {
        /// The module.
        file: PathBuf,
        /// The Vulkan target.
        target: String,
        /// Every tensor over the range, in text order (at least one).
        over: Vec<TensorUse>,
    },
}

/// Boxed: a parse error is large, and the crate's `Error` stays small.
/// The runtime's error, but a Vulkan device that cannot be made for want
/// of a driver, which says what to install.
impl From<kiln_runtime::Error> for IreeError {
    fn from(e: kiln_runtime::Error) -> Self {
        match &e {
            kiln_runtime::Error::Iree { during, message }
                if during.contains("vulkan device") && run::looks_like_missing_vulkan(message) =>
            {
                IreeError::VulkanUnavailable(message.clone())
            }
            _ => IreeError::Runtime(e),
        }
    }
}

impl From<crate::stablehlo::ParseError> for IreeError {
    fn from(e: crate::stablehlo::ParseError) -> Self {
        IreeError::Parse(Box::new(e))
    }
}

/// `Result` of the IREE driver.
pub(crate) type Result<T, E = IreeError> = std::result::Result<T, E>;

impl From<crate::util::IoError> for IreeError {
    fn from(e: crate::util::IoError) -> Self {
        IreeError::Io {
            path: e.path,
            source: e.source,
        }
    }
}

impl IreeError {
    /// Whether an external tool failed or is missing (rather than kiln
    /// being given a bad target, device or input tensor).
    pub fn is_tool_failure(&self) -> bool {
        !matches!(
            self,
            IreeError::UnknownTarget(_)
                | IreeError::BadToolPath { .. }
                | IreeError::UnknownVulkanTarget(_)
                | IreeError::UnknownDevice(_)
                | IreeError::UnknownEmulation(_)
                | IreeError::BadInput(_)
                | IreeError::Io { .. }
                | IreeError::Parse(_)
                | IreeError::Lowering { .. }
                | IreeError::Print(_)
                | IreeError::I8Weights { .. }
                | IreeError::DuplicateTarget { .. }
                | IreeError::VulkanWorkgroups { .. }
                | IreeError::VulkanStorageBuffer { .. }
        )
    }
}

/// Turns an exit status into short text (`exit status 1`, `signal 11`).
pub(crate) fn status_text(status: &std::process::ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("killed by signal {sig}");
        }
    }
    "unknown exit status".to_string()
}

/// Keeps at most `max_lines` lines of a tool's stderr (head and tail).
pub(crate) fn trim_log(text: &str, max_lines: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    if lines.len() <= max_lines {
        return lines.join("\n");
    }
    let head = max_lines / 2;
    let tail = max_lines - head;
    let mut out: Vec<String> = lines[..head].iter().map(|s| s.to_string()).collect();
    out.push(format!("… ({} lines omitted) …", lines.len() - max_lines));
    out.extend(lines[lines.len() - tail..].iter().map(|s| s.to_string()));
    out.join("\n")
}
