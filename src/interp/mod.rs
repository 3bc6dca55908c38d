//! Pure-Rust reference interpreter for kiln graphs.

/// A graph the interpreter cannot evaluate.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InterpError(pub String);
