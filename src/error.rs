//! The crate-wide error type. Each stage has its own error enum; this one
//! wraps them so a caller can `?` across stages and still print one line
//! that names the file, tensor or op at fault. Messages state facts (what,
//! where, what is supported); what to type about it (a flag, a `kiln` verb)
//! is the command line's to add.

use std::path::PathBuf;

/// Everything that can go wrong in kiln.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A graph build was rejected (bad dtype or shape for an op).
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    /// A parameter file (safetensors, irpa, gguf) is malformed or unsupported.
    #[error(transparent)]
    Params(#[from] crate::params::ParamsError),
    /// The IREE toolchain is missing or one of its tools failed.
    #[error(transparent)]
    Iree(#[from] crate::iree::IreeError),
    /// A checkpoint could not be turned into a model graph.
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    /// StableHLO text could not be parsed.
    #[error(transparent)]
    Parse(#[from] crate::stablehlo::ParseError),
    /// A module could not be printed as StableHLO text.
    #[error(transparent)]
    Print(#[from] crate::stablehlo::PrintError),
    /// The interpreter could not evaluate a module.
    #[error(transparent)]
    Interp(#[from] crate::interp::InterpError),
    /// Tokenizer data is malformed or text cannot be encoded.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// A step call outside the caches, or a KV pair that cannot be one.
    #[error(transparent)]
    Step(#[from] crate::step::StepError),
    /// A module's function does not have the signature its step contract
    /// gives it.
    #[error(transparent)]
    Signature(#[from] crate::step::SignatureError),
    /// A generation cannot run as asked (a prompt that does not fit,
    /// sampling a module cannot serve).
    #[error(transparent)]
    Generate(#[from] crate::generate::GenerateError),
    /// An export cannot be written as asked (its name, or a weight form
    /// the checkpoint's tensors cannot take).
    #[error(transparent)]
    Export(#[from] crate::export::ExportError),
    /// A manifest cannot be read as one.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    /// The files of an export cannot be packaged as they are.
    #[error(transparent)]
    Package(#[from] crate::package::PackageError),
    /// A folder could not be verified at all (`kiln verify`; a mismatch is
    /// a fault in its report, not an error).
    #[error(transparent)]
    Verify(#[from] crate::verify::VerifyError),
    /// An I/O operation on a named path failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A command-line argument or option value is invalid (raised by the
    /// `kiln` binary, never by the library).
    #[error("{0}")]
    Usage(String),
}

/// `Result` with kiln's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The process exit code `kiln` uses for this error: 3 when an external
    /// tool (iree-compile, iree-run-module, qemu, the Vulkan driver) failed
    /// or is missing, 2 for everything else, which is bad input: a flag, a
    /// file, a checkpoint, a module. (1 is a failed check, such as `kiln
    /// demo` printing FAIL; that is a result, not an error.)
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Iree(e) if e.is_tool_failure() => 3,
            _ => 2,
        }
    }

    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<crate::util::IoError> for Error {
    fn from(e: crate::util::IoError) -> Self {
        Error::Io {
            path: e.path,
            source: e.source,
        }
    }
}
