//! Text generation: the loops of `kiln_runtime::generate` (redecode,
//! the KV [`Conversation`], sampling, stops), re-exported here, and the
//! runtimes only the compiler has, one file per job:
//!
//! - `backends.rs`: both protocols over a `Backend` (`Redecode`,
//!   `KvDriver`) and the runtimes that hand tensors back: kiln's
//!   `Interpreter`, one `iree-run-module` per call (`RunModule`);
//! - `driver.rs`: the runtime that fits a module ([`DriverOptions`] →
//!   [`Driver`]), the loaded IREE session included.
//!
//! The step interfaces and predictions are re-exported here, so
//! `kiln::generate::{Forward, KvStep, Prediction, …}` keep working.

mod backends;
mod driver;

/// `Result` of the drivers.
type Result<T, E = GenerateError> = std::result::Result<T, E>;

pub use crate::step::{Backend, Candidate, Forward, KvSpan, KvSpec, KvStep, Prediction};
pub use backends::{Interpreter, KvDriver, Redecode, RunModule};
pub use driver::{Driver, DriverLoop, DriverOptions};
pub use kiln_runtime::generate::{
    check_ids, generate, generate_kv, Conversation, GenerateError, Generation, Sampler,
    SamplingParams, Stop, Timings,
};

/// The compiler's stage errors met opening a runtime, kept whole
/// ([`GenerateError::Open`]; `kiln::Error` unwraps each to its own
/// variant).
macro_rules! open_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for GenerateError {
            fn from(e: $t) -> Self {
                GenerateError::open(e)
            }
        }
    )*};
}
open_errors!(
    crate::iree::IreeError,
    crate::interp::InterpError,
    crate::stablehlo::ParseError,
    crate::manifest::ManifestError,
    crate::util::IoError
);

/// The interpreter's failures, as a step runtime's: kept whole.
impl From<crate::interp::InterpError> for crate::step::CallError {
    fn from(e: crate::interp::InterpError) -> Self {
        crate::step::CallError::runtime(e)
    }
}
