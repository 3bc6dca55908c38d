//! Progress of the long steps (writing weights, compiling targets,
//! copying and hashing a package's files), reported to a [`Progress`] the
//! caller supplies. The library never draws anything itself; the `kiln`
//! binary draws indicatif bars on a terminal.

use std::sync::Arc;

/// What a step's units count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Weight tensors written.
    Tensors,
    /// Bytes copied and hashed.
    Bytes,
    /// No count: the step only starts and finishes (one iree-compile run).
    None,
}

/// Receives progress. Each step is named by a label that is unique while
/// it runs (`writing weights`, `compile arm64`, `copy NAME.irpa`); steps
/// may run concurrently (one per compile target), so implementations must
/// be `Sync`. Every method has an empty default.
pub trait Progress: Send + Sync {
    /// Step `label` starts; it will count `total` units of `unit`.
    fn start(&self, label: &str, total: u64, unit: Unit) {
        let _ = (label, total, unit);
    }
    /// `n` more units of `label` are done.
    fn advance(&self, label: &str, n: u64) {
        let _ = (label, n);
    }
    /// Step `label` ended: `ok` is false when it failed.
    fn finish(&self, label: &str, ok: bool) {
        let _ = (label, ok);
    }
}

impl std::fmt::Debug for dyn Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Progress")
    }
}

/// A shared [`Progress`], as options hold it.
pub(crate) type SharedProgress = Arc<dyn Progress>;

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Silent;

impl Progress for Silent {}

/// The progress of `opt`, or [`Silent`].
pub(crate) fn or_silent(opt: &Option<SharedProgress>) -> &dyn Progress {
    match opt {
        Some(p) => p.as_ref(),
        None => &Silent,
    }
}
