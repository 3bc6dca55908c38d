//! Parameter files: safetensors, IREE parameter archives (irpa) and GGUF.

/// A malformed or unsupported parameter file.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {msg}")]
pub struct ParamsError {
    /// The file at fault.
    pub file: String,
    /// What is wrong.
    pub msg: String,
}
