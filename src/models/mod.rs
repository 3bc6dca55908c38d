//! Model loaders: checkpoints (HF folders, GGUF files) to model graphs.
//!
//! `config` reads hyperparameters, `family/` holds one file per model
//! family (what its config keys and tensor names mean), `decoder` is the
//! graph every family shares (`tables` its matrices, whole or in row
//! chunks), `rope` its position tables, `checkpoint` opens files.

pub(crate) mod checkpoint;
mod config;
pub(crate) mod decoder;
mod family;
pub(crate) mod kv;
mod masks;
mod rope;
mod tables;
mod weights;

pub use checkpoint::Checkpoint;
pub use config::{Activation, Arch, DecoderConfig, Family, RopeScaling, SlidingRope};
pub(crate) use decoder::EMBEDDING;
pub(crate) use tables::MAX_TENSOR_BYTES;
pub(crate) use weights::{Int8Form, Storage, WeightPlan};

/// A checkpoint that cannot be turned into a graph: names what is wrong
/// (file, key, tensor, expected vs found) and what is supported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A required key is absent from `config.json` or the GGUF metadata.
    #[error("{file}: missing required key \"{key}\"")]
    MissingKey {
        /// Where the key was looked up: `config.json` or `GGUF metadata`.
        file: &'static str,
        /// The key.
        key: String,
    },
    /// A value kiln has no graph for.
    #[error("unsupported {what} (supported: {supported})")]
    Unsupported {
        /// The setting and its value, e.g. `hidden_act "relu" for llama`.
        what: String,
        /// What kiln does support in its place.
        supported: String,
    },
    /// A tensor the graph needs is absent.
    #[error("missing tensor \"{name}\"{}", expected.as_ref().map(|s| format!(" (expected shape {s:?} from the config)")).unwrap_or_default())]
    MissingTensor {
        /// The tensor's HF name.
        name: String,
        /// The shape the config implies, when known.
        expected: Option<Vec<usize>>,
    },
    /// A tensor's shape disagrees with the config.
    #[error("tensor \"{name}\": expected shape {expected:?} from the config, found {found:?}")]
    Shape {
        /// The tensor's HF name.
        name: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// Any other inconsistency (hyperparameters that disagree, an option
    /// out of range, a tensor the graph does not use).
    #[error("{0}")]
    Invalid(String),
    /// One layer's KV cache at the max context N is over the tensor bound
    /// (the caches are split by layers, never within one).
    #[error(
        "one layer's KV cache at the max context N = {max_context} takes {bytes} bytes as f32 \
         ({kv_heads} KV heads × N × head dim {head_dim} × 4), more than the {bound}-byte tensor bound \
         (Vulkan's storage-buffer range)"
    )]
    KvLayerOverBound {
        /// The max context N.
        max_context: usize,
        /// One layer's cache, in bytes as f32.
        bytes: u64,
        /// KV heads.
        kv_heads: usize,
        /// Head dim.
        head_dim: usize,
        /// The tensor bound, in bytes.
        bound: u64,
    },
    /// One of the above, in the named file.
    #[error("{}: {source}", path.display())]
    InFile {
        /// The checkpoint file or folder.
        path: std::path::PathBuf,
        /// What is wrong in it.
        source: Box<ModelError>,
    },
    /// kiln built a graph its own builder rejected: a bug in a model file.
    #[error("internal graph build error: {0}")]
    Graph(#[from] crate::graph::GraphError),
    /// A checkpoint's parameter file (safetensors, GGUF) is malformed or
    /// unsupported.
    #[error(transparent)]
    Params(#[from] crate::params::ParamsError),
    /// A checkpoint's file could not be read.
    #[error(transparent)]
    Io(#[from] crate::util::IoError),
}

impl ModelError {
    /// The same error, naming the file it was found in.
    pub fn in_file(self, path: impl Into<std::path::PathBuf>) -> ModelError {
        ModelError::InFile {
            path: path.into(),
            source: Box::new(self),
        }
    }

    /// A setting kiln does not support, and what it supports instead.
    pub(crate) fn unsupported(what: impl Into<String>, supported: impl Into<String>) -> Self {
        ModelError::Unsupported {
            what: what.into(),
            supported: supported.into(),
        }
    }
}
