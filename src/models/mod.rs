//! Model loaders: checkpoints (HF folders, GGUF files) to model graphs.

/// A checkpoint that cannot be turned into a graph.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ModelError(pub String);
