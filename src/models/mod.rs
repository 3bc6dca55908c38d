//! Model loaders: checkpoints (HF folders, GGUF files) to model graphs.
//!
//! `config` reads hyperparameters, `family/` holds one file per model
//! family (what its config keys and tensor names mean), `decoder` is the
//! graph every family shares, `rope` its position tables, `checkpoint`
//! opens files.

pub mod config;
pub mod decoder;
pub mod family;
pub mod kv;
pub mod rope;
pub mod weights;

pub use config::{Activation, Arch, DecoderConfig, RopeScaling};
pub use decoder::{MAX_TABLE_ROWS, MAX_TENSOR_BYTES};
pub use family::Family;
pub use weights::{Storage, WeightPlan};

/// A checkpoint that cannot be turned into a graph: names what is wrong
/// (file, key, tensor, expected vs found) and what is supported.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ModelError(pub String);

impl From<crate::graph::GraphError> for ModelError {
    fn from(e: crate::graph::GraphError) -> Self {
        ModelError(format!("internal graph build error: {e}"))
    }
}

pub mod checkpoint;
pub use checkpoint::Checkpoint;
