//! Driver for the external IREE tools (`iree-compile`, `iree-run-module`, …).

/// The IREE toolchain is missing or a tool failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IreeError(pub String);
