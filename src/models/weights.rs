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

    /// Whether some weight is block-quantized.
    pub fn has_blocks(&self) -> bool {
        self.overrides
            .values()
            .any(|s| matches!(s, Storage::Blocks(_)))
    }
}
