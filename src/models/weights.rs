//! How a graph reads each weight: one stored dtype for every weight, or,
//! per tensor, a block-quantized form (`kiln export --weights keep`,
//! `spec/quantized-weights.md`).

use crate::graph::DType;
use crate::params::blocks::BlockForm;
use std::collections::BTreeMap;

/// How one weight is stored in the archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// One tensor of this dtype (bf16, f16 or f32), widened to f32.
    Plain(DType),
    /// Block-quantized parts (`<name>.qs`, `.qh`, `.scale`, `.min`),
    /// widened in the graph.
    Blocks(BlockForm),
    /// i8 codes with one f32 scale per row (`<name>.q8` `[rows, cols]`,
    /// `<name>.scale` `[rows, 1]`), multiplied by activations rounded to
    /// i8 per row: one i8 term (`--weights w8a8`, lossy:
    /// [`crate::graph::Graph::linear_w8a8`]) or, with `two_terms`, two
    /// (`--weights w8a16`: [`crate::graph::Graph::linear_w8a16`]). The
    /// archive is the same either way.
    Int8Rows {
        /// The activations are carried by two i8 terms per row.
        two_terms: bool,
    },
}

/// The parts of an [`Storage::Int8Rows`] matrix with `cols` columns:
/// `(suffix, dtype, columns per row)`.
pub fn int8_parts(cols: usize) -> [(&'static str, DType, usize); 2] {
    let [codes, scale] = crate::params::quant::I8_ROWS_PARTS;
    [(codes, DType::I8, cols), (scale, DType::F32, 1)]
}

impl Storage {
    /// The archive entries of a matrix with `cols` columns stored this way,
    /// `(suffix, dtype, columns per row)` in archive order (each entry is
    /// `<name>.<suffix>`); `None` for a plain tensor, which is one entry
    /// under its own name.
    pub fn parts(self, cols: usize) -> Option<Vec<(&'static str, DType, usize)>> {
        match self {
            Storage::Plain(_) => None,
            Storage::Blocks(form) => Some(
                form.parts(cols)
                    .iter()
                    .map(|p| (p.suffix, p.dtype, p.cols))
                    .collect(),
            ),
            Storage::Int8Rows { .. } => Some(int8_parts(cols).to_vec()),
        }
    }
}

/// The storage of every weight of a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightPlan {
    /// Stored dtype of every weight `overrides` does not name.
    pub dtype: DType,
    /// Per-tensor storage, by HF tensor name.
    pub overrides: BTreeMap<String, Storage>,
}

impl From<DType> for WeightPlan {
    fn from(dtype: DType) -> WeightPlan {
        WeightPlan {
            dtype,
            overrides: BTreeMap::new(),
        }
    }
}

impl WeightPlan {
    /// How weight `name` is stored.
    pub fn storage(&self, name: &str) -> Storage {
        self.overrides
            .get(name)
            .copied()
            .unwrap_or(Storage::Plain(self.dtype))
    }
}
