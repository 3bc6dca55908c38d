//! What the export refuses: a name that is not a file name, and weight
//! forms the checkpoint's tensors cannot take.

use super::options::Weights;
use crate::graph::DType;
use crate::params::gguf::GgmlType;
use std::path::PathBuf;

/// [`ExportError::KEPT_TYPES`].
const KEPT_TYPES: &str = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K";

/// An export cannot be written as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// An export name that is not a plain file name.
    #[error("the export name \"{name}\" must be a plain file name")]
    BadName {
        /// The name given.
        name: String,
    },
    /// A weight override whose pattern matches no tensor.
    #[error("no tensor of {} has \"{pattern}\" in its name", checkpoint.display())]
    NoTensorMatches {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// The pattern of the override.
        pattern: String,
    },
    /// A plain weight dtype other than bf16, f16 or f32.
    #[error("weights are stored as bf16, f16, f32, keep, q8_0, q4_0, w8a8, w8a16, w8a16e, w16a16 or w4a16, not {dtype}")]
    WeightDtype {
        /// The dtype asked for.
        dtype: DType,
    },
    /// A quantized form other than Q8_0 or Q4_0.
    #[error("weights are quantized to q8_0 or q4_0, not {ty}")]
    QuantizeType {
        /// The type asked for.
        ty: GgmlType,
    },
    /// A matrix whose rows are not whole blocks of a block-quantized form.
    #[error(
        "{}: tensor \"{tensor}\" {shape:?}: rows of {} are not whole {block}-element blocks, \
         so {weights} weights cannot store it (use bf16)",
        checkpoint.display(),
        shape.get(1).copied().unwrap_or(0)
    )]
    PartialBlocks {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
        /// The form's block length.
        block: usize,
        /// The weight form asked for.
        weights: Weights,
    },
    /// `keep` or `w4a16` on a checkpoint that is not a GGUF file.
    #[error("{weights} weights keep a GGUF file's quantization; {} is not a GGUF file", checkpoint.display())]
    KeepNeedsGguf {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// The weight form asked for.
        weights: Weights,
    },
    /// `keep` on a tensor of a type it cannot store.
    #[error(
        "{}: tensor \"{tensor}\" is {ty}, which keep weights cannot store (they keep {KEPT_TYPES} matrices)",
        checkpoint.display()
    )]
    Unkeepable {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its GGUF type.
        ty: GgmlType,
    },
    /// A tensor whose stored bytes could not be made (its blocks do not
    /// repack, say).
    #[error("{}: tensor \"{tensor}\": {message}", checkpoint.display())]
    Tensor {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// The tensor.
        tensor: String,
        /// What went wrong.
        message: String,
    },
    /// A stored dtype weights cannot be encoded in.
    #[error("weights cannot be stored as {dtype}")]
    Unencodable {
        /// The dtype.
        dtype: DType,
    },
    /// The checkpoint could not be read or turned into a graph.
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    /// A parameter file could not be read or written.
    #[error(transparent)]
    Params(#[from] crate::params::ParamsError),
    /// kiln built a graph its own builder rejected.
    #[error(transparent)]
    Graph(#[from] crate::graph::GraphError),
    /// The module could not be printed as StableHLO text.
    #[error(transparent)]
    Print(#[from] crate::stablehlo::PrintError),
    /// A manifest beside the export could not be read.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    /// A file could not be read or written.
    #[error(transparent)]
    Io(#[from] crate::util::IoError),
    /// The IREE compiler's version could not be read (to record a
    /// compile).
    #[error(transparent)]
    Iree(#[from] crate::iree::IreeError),
}

/// `Result` of the export.
pub(crate) type Result<T, E = ExportError> = std::result::Result<T, E>;

impl ExportError {
    /// The weight forms `keep` stores as they are: GGUF tensor types of
    /// matrices kiln widens in-graph.
    pub const KEPT_TYPES: &'static str = KEPT_TYPES;
}
