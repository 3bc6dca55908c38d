//! Model loaders: checkpoints (HF folders, GGUF files) to model graphs.

pub mod config;
pub mod llama;

pub use config::{Family, LlamaConfig, RopeScaling};

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
