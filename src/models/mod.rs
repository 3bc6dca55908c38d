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
pub use config::{
    Activation, Arch, DecoderConfig, Family, RopeScaling, SlidingRope, MAX_CONTEXT, MAX_HEADS,
    MAX_LAYERS, MAX_VOCAB, MAX_WIDTH,
};
pub(crate) use decoder::EMBEDDING;
pub(crate) use tables::MAX_TENSOR_BYTES;
pub(crate) use weights::{Int4Form, Int8Form, Storage, WeightPlan};

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
    /// A `config.json` value of the wrong JSON type.
    #[error("{file}: \"{key}\" must be {expected}")]
    ConfigType {
        /// Where the key was read: `config.json`.
        file: &'static str,
        /// The key, dotted below its object where nested
        /// (`rope_parameters.factor`).
        key: String,
        /// The type it must have, e.g. `a number or null`.
        expected: &'static str,
    },
    /// A hyperparameter out of its range, or absent where others need it.
    #[error("{file}: {key} {requirement}{}", found.as_ref().map(|f| format!(", found {f}")).unwrap_or_default())]
    ConfigValue {
        /// Where the value was read: `config.json`, or `config` for the
        /// hyperparameters from either source (config.json or GGUF
        /// metadata).
        file: &'static str,
        /// The key, or the setting in words where it has no one key
        /// (`longrope short_factor`, `rotary dims`).
        key: String,
        /// What it must satisfy, e.g. `must be positive`.
        requirement: String,
        /// The value found, when the requirement does not imply it.
        found: Option<String>,
    },
    /// Two hyperparameters that disagree with each other.
    #[error("{file}: {key} ({value}) {relation} {other_key} ({other})")]
    Mismatch {
        /// Where the values were read: `config.json`, or `config` for the
        /// hyperparameters from either source.
        file: &'static str,
        /// The first key.
        key: String,
        /// Its value.
        value: usize,
        /// How it fails to relate to the second, e.g. `is not a multiple of`.
        relation: &'static str,
        /// The second key.
        other_key: String,
        /// Its value.
        other: usize,
    },
    /// A `config.json` that is not valid JSON (or not a JSON object of the
    /// expected shape).
    #[error("invalid config.json: {source}")]
    ConfigJson {
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A graph or export option out of range (a sequence length, the max
    /// context, attention spans, top-K), or rows asked of a tensor that it
    /// does not have.
    #[error("{what} {requirement}, not {value}")]
    OutOfRange {
        /// The option, e.g. `the max context N`.
        what: String,
        /// What it must satisfy, e.g. `must be at least 1`.
        requirement: String,
        /// The value given, as printed (a number, a list, a range).
        value: String,
    },
    /// A weight that is not a matrix, planned in a storage form only
    /// matrices take (block-quantized, i8 rows).
    #[error("\"{name}\" {shape:?} cannot be stored {form}: only matrices are")]
    TensorForm {
        /// The tensor's HF name.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The form, e.g. `in q8_0 blocks` or `as i8 rows`.
        form: String,
    },
    /// A tensor the checkpoint holds that the family's graph does not use.
    #[error("unexpected tensor \"{name}\" (the {} graph does not use it)", family.name())]
    UnexpectedTensor {
        /// The tensor's name in the file (HF or GGUF).
        name: String,
        /// The family the config names.
        family: Family,
    },
    /// A path that is neither an HF folder with a `config.json` nor a GGUF
    /// file.
    #[error("{}", if *folder { "no config.json in this folder" } else { "not a checkpoint: expected an HF folder (config.json + *.safetensors) or a GGUF file" })]
    NotCheckpoint {
        /// Whether the path is a folder (one without `config.json`);
        /// otherwise it is a file without the GGUF signature.
        folder: bool,
    },
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
    /// One table row (aligned to a chunk) is over the tensor bound, so the
    /// table cannot be split in row chunks under it.
    #[error(
        "a table row of {width} values against {rows} rows takes {bytes} bytes (×{align} rows to align a chunk), \
         more than the {bound}-byte tensor bound"
    )]
    TableRowOverBound {
        /// Values per table row (the hidden size).
        width: usize,
        /// Rows multiplied against the table at once (the logits' rows).
        rows: usize,
        /// One row's bytes as f32 (of the table or of its logits, the larger).
        bytes: u64,
        /// Rows a chunk holds at least, for its bytes to stay aligned.
        align: usize,
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
    /// The same error, naming the file it was found in (a parameter file's
    /// or an I/O error names its own, and is returned as it is).
    pub fn in_file(self, path: impl Into<std::path::PathBuf>) -> ModelError {
        match self {
            e @ (ModelError::Params(_) | ModelError::Io(_)) => e,
            e => ModelError::InFile {
                path: path.into(),
                source: Box::new(e),
            },
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
