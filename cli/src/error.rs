//! The command line's error: the library's, or a usage error that only the
//! command line can make (a flag's value, a missing option).

use kiln::export::ExportError;
use kiln::generate::GenerateError;
use kiln::graph::GraphError;
use kiln::interp::InterpError;
use kiln::iree::IreeError;
use kiln::manifest::ManifestError;
use kiln::models::ModelError;
use kiln::package::PackageError;
use kiln::params::ParamsError;
use kiln::stablehlo::{ParseError, PrintError};
use kiln::step::{CallError, SignatureError, StepError};
use kiln::tokenizer::TokenizerError;
use kiln::verify::VerifyError;

/// What a verb can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The library failed (bad input, a tool that failed or is missing).
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
    /// A command-line argument or option value is invalid.
    #[error("{0}")]
    Usage(String),
}

/// `Result` with the command line's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The process exit code: a usage error is bad input (2); the
    /// library's errors say their own ([`kiln::Error::exit_code`]).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Kiln(e) => e.exit_code(),
            Error::Usage(_) => 2,
        }
    }

    /// An I/O error on a named path ([`kiln::Error::io`]).
    pub fn io(path: impl Into<std::path::PathBuf>, source: std::io::Error) -> Self {
        Error::Kiln(kiln::Error::io(path, source))
    }
}

/// Each stage's error converts through [`kiln::Error`], so `?` works on
/// every library call.
macro_rules! through_kiln {
    ($($ty:ty),* $(,)?) => {
        $(impl From<$ty> for Error {
            fn from(e: $ty) -> Self {
                Error::Kiln(e.into())
            }
        })*
    };
}

through_kiln!(
    CallError,
    ExportError,
    GenerateError,
    GraphError,
    InterpError,
    IreeError,
    ManifestError,
    ModelError,
    PackageError,
    ParamsError,
    ParseError,
    PrintError,
    SignatureError,
    StepError,
    TokenizerError,
    VerifyError,
    kiln_runtime::chat::ChatError,
);
