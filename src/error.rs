//! The crate-wide error type, on the top floor. Each stage has its own
//! error enum, which carries the errors of the floors below whole; this one
//! wraps them so a caller can `?` across stages and still print one line
//! that names the file, tensor or op at fault, each carried error flattened
//! back to its own variant (so exit codes and hints see one shape).
//! Messages state facts (what, where, what is supported); what to type
//! about it (a flag, a `kiln` verb) is the command line's to add.

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
    Model(crate::models::ModelError),
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
    Generate(crate::generate::GenerateError),
    /// An export cannot be written as asked (its name, or a weight form
    /// the checkpoint's tensors cannot take).
    #[error(transparent)]
    Export(crate::export::ExportError),
    /// A manifest cannot be read as one.
    #[error(transparent)]
    Manifest(crate::manifest::ManifestError),
    /// The files of an export cannot be packaged as they are.
    #[error(transparent)]
    Package(crate::package::PackageError),
    /// A folder could not be verified at all (`kiln verify`; a mismatch is
    /// a fault in its report, not an error).
    #[error(transparent)]
    Verify(crate::verify::VerifyError),
    /// A library user's own step runtime failed (`step::CallError::Runtime`
    /// holding an error that is not kiln's).
    #[error(transparent)]
    Runtime(Box<dyn std::error::Error + Send + Sync>),
    /// An I/O operation on a named path failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
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

/// A stage's error becomes the crate variant it was before that stage had
/// its own: the lower stages' errors it passes on are unwrapped to their
/// own variants (so exit codes and the command line's hints see them), and
/// only its own facts stay under its variant.
impl From<crate::verify::VerifyError> for Error {
    fn from(e: crate::verify::VerifyError) -> Self {
        use crate::verify::VerifyError;
        match e {
            VerifyError::Io(e) => e.into(),
            e => Error::Verify(e),
        }
    }
}

impl From<crate::models::ModelError> for Error {
    fn from(e: crate::models::ModelError) -> Self {
        use crate::models::ModelError;
        match e {
            ModelError::Params(e) => e.into(),
            ModelError::Io(e) => e.into(),
            e => Error::Model(e),
        }
    }
}

impl From<crate::step::CallError> for Error {
    fn from(e: crate::step::CallError) -> Self {
        use crate::step::CallError;
        match e {
            CallError::Step(e) => e.into(),
            CallError::Signature(e) => e.into(),
            CallError::Runtime(e) => runtime(e),
            e => Error::Runtime(Box::new(e)),
        }
    }
}

/// A step runtime's boxed error as the crate `Error`: kiln's own runtimes
/// raise kiln's stage errors, each unwrapped to its own variant.
fn runtime(e: Box<dyn std::error::Error + Send + Sync>) -> Error {
    macro_rules! unbox {
        ($e:ident, $($t:ty),*) => {{
            $(let $e = match $e.downcast::<$t>() {
                Ok(e) => return Error::from(*e),
                Err(e) => e,
            };)*
            $e
        }};
    }
    let e = unbox!(
        e,
        crate::iree::IreeError,
        crate::interp::InterpError,
        crate::generate::GenerateError,
        crate::step::StepError,
        crate::step::SignatureError,
        crate::params::ParamsError,
        crate::stablehlo::ParseError,
        crate::util::IoError,
        crate::manifest::ManifestError
    );
    Error::Runtime(e)
}

impl From<crate::generate::GenerateError> for Error {
    fn from(e: crate::generate::GenerateError) -> Self {
        use crate::generate::GenerateError as G;
        match e {
            G::Call(e) => e.into(),
            G::Open(e) => runtime(e),
            e => Error::Generate(e),
        }
    }
}

impl From<kiln_runtime::chat::ChatError> for Error {
    fn from(e: kiln_runtime::chat::ChatError) -> Self {
        use kiln_runtime::chat::ChatError as C;
        match e {
            C::Template(e) | C::Tokenizer(e) => e.into(),
            C::Generate(e) => e.into(),
            e => Error::Runtime(Box::new(e)),
        }
    }
}

impl From<crate::manifest::ManifestError> for Error {
    fn from(e: crate::manifest::ManifestError) -> Self {
        use crate::manifest::ManifestError;
        match e {
            ManifestError::Io(e) => e.into(),
            e => Error::Manifest(e),
        }
    }
}

impl From<crate::export::ExportError> for Error {
    fn from(e: crate::export::ExportError) -> Self {
        use crate::export::ExportError as E;
        match e {
            E::Model(e) => e.into(),
            E::Params(e) => e.into(),
            E::Graph(e) => e.into(),
            E::Print(e) => e.into(),
            E::Manifest(e) => e.into(),
            E::Io(e) => e.into(),
            E::Iree(e) => e.into(),
            e => Error::Export(e),
        }
    }
}

impl From<crate::package::PackageError> for Error {
    fn from(e: crate::package::PackageError) -> Self {
        use crate::package::PackageError as P;
        match e {
            P::Manifest(e) => e.into(),
            P::Io(e) => e.into(),
            P::Iree(e) => e.into(),
            P::Params(e) => e.into(),
            P::Step(e) => e.into(),
            e => Error::Package(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use crate::generate::GenerateError;
    use crate::iree::IreeError;
    use crate::step::{CallError, StepError};
    use crate::util::IoError;

    fn io() -> IoError {
        IoError::new("a.gguf", std::io::ErrorKind::NotFound.into())
    }

    /// A stage's carried error comes out as its own variant, however deep
    /// it was carried; a runtime's boxed error too, with its exit code.
    #[test]
    fn carried_errors_flatten_to_their_own_variants() {
        let e = Error::from(crate::models::ModelError::Io(io()));
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        let e = Error::from(crate::export::ExportError::Model(
            crate::models::ModelError::Io(io()),
        ));
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        let e = Error::from(GenerateError::Call(CallError::runtime(
            IreeError::SessionIds { got: 1, seq: 2 },
        )));
        assert!(
            matches!(e, Error::Iree(IreeError::SessionIds { .. })),
            "{e:?}"
        );
        assert_eq!(e.exit_code(), 3);
        let step = StepError::PastContext {
            position: 9,
            max_context: 8,
        };
        let e = Error::from(CallError::runtime(GenerateError::from(step.clone())));
        assert!(matches!(e, Error::Step(ref s) if *s == step), "{e:?}");
        let e = Error::from(CallError::runtime(GenerateError::NotReset {
            function: "decode".into(),
        }));
        assert!(matches!(e, Error::Generate(GenerateError::NotReset { .. })));
        assert_eq!(e.exit_code(), 2);
        let e = Error::from(CallError::runtime(std::fmt::Error));
        assert!(matches!(e, Error::Runtime(_)), "{e:?}");
    }
}
