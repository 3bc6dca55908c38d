//! The crate-wide error type. Each stage has its own error enum; this one
//! wraps them so a caller can `?` across stages and still print one line
//! that names the file, tensor, op or flag at fault.

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
    /// A command-line argument or option value is invalid.
    #[error("{0}")]
    Usage(String),
    /// An input to a library call is out of the range it accepts (an empty
    /// prompt, a token id outside the vocabulary, a weight form the
    /// checkpoint cannot take).
    #[error("{0}")]
    Input(String),
    /// A compiled or exported module does not match what it is used as: its
    /// manifest, kiln's function contract, or the other module of a pair.
    #[error("{0}")]
    Module(String),
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
