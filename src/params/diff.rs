//! Two parameter files compared tensor by tensor (`kiln params diff`), in
//! any formats: dtypes, shapes, and the largest difference of the values
//! (or the bytes, where a side is untyped), then the quantized matrices
//! their parts make.

use super::blocks::Recognized;
use super::inspect::blocks_of;
use super::{ParamSource, Result, SourceDType, TensorMeta};
use std::path::Path;

/// Two open parameter files and the tolerance they are compared with.
pub struct Diff {
    a: Box<dyn ParamSource>,
    b: Box<dyn ParamSource>,
    tolerance: f64,
}

impl std::fmt::Debug for Diff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Diff")
            .field("a", &self.a.path())
            .field("b", &self.b.path())
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

/// One tensor of either file, compared.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorDiff {
    /// A tensor of A that B lacks.
    OnlyInA(String),
    /// A tensor of B that A lacks.
    OnlyInB(String),
    /// A tensor both have.
    Compared {
        /// Its name.
        name: String,
        /// Its stored dtype in A and in B.
        dtypes: (SourceDType, SourceDType),
        /// What was compared, and found.
        outcome: Outcome,
        /// Whether the two differ (by more than the tolerance).
        differs: bool,
    },
}

/// What comparing one tensor of both files found.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The shapes differ (A's, B's): the values are not compared.
    Shapes(Vec<u64>, Vec<u64>),
    /// A side is untyped (an IRPA entry without a description): the bytes
    /// were compared.
    Bytes {
        /// Whether they are the same.
        identical: bool,
    },
    /// The values were compared as f32.
    Values {
        /// The largest |a − b|.
        max_abs_diff: f64,
    },
}

impl TensorDiff {
    /// Whether the files differ in this tensor.
    pub fn differs(&self) -> bool {
        match self {
            TensorDiff::OnlyInA(_) | TensorDiff::OnlyInB(_) => true,
            TensorDiff::Compared { differs, .. } => *differs,
        }
    }
}

/// One block-quantized matrix that is not the same in both files.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockChange<'d> {
    /// In both, with another form, size or element count (A's, B's).
    Differs(&'d Recognized, &'d Recognized),
    /// In A only.
    OnlyInA(&'d Recognized),
    /// In B only.
    OnlyInB(&'d Recognized),
}

/// The block-quantized matrices of both files (`inspect::blocks_of`).
#[derive(Debug, Clone, PartialEq)]
pub struct BlockDiff {
    /// A's.
    pub a: Vec<Recognized>,
    /// B's.
    pub b: Vec<Recognized>,
}

impl BlockDiff {
    /// The matrices that differ or are on one side only: A's in order,
    /// then B's own.
    pub fn changes(&self) -> Vec<BlockChange<'_>> {
        let mut out = Vec::new();
        for x in &self.a {
            match self.b.iter().find(|y| y.name == x.name) {
                Some(y) if (y.form, y.elements, y.bytes) == (x.form, x.elements, x.bytes) => {}
                Some(y) => out.push(BlockChange::Differs(x, y)),
                None => out.push(BlockChange::OnlyInA(x)),
            }
        }
        for y in self
            .b
            .iter()
            .filter(|y| !self.a.iter().any(|x| x.name == y.name))
        {
            out.push(BlockChange::OnlyInB(y));
        }
        out
    }
}

impl Diff {
    /// Opens both files; values further apart than `tolerance` differ.
    pub fn open(a: &Path, b: &Path, tolerance: f64) -> Result<Diff> {
        Ok(Diff {
            a: <dyn ParamSource>::open(a)?,
            b: <dyn ParamSource>::open(b)?,
            tolerance,
        })
    }

    /// Every tensor compared, in A's order, then B's own tensors; each
    /// comparison reads both tensors when it is reached.
    pub fn tensors(&self) -> impl Iterator<Item = Result<TensorDiff>> + '_ {
        let ours = self
            .a
            .tensors()
            .iter()
            .map(|ta| match self.b.meta(&ta.name) {
                None => Ok(TensorDiff::OnlyInA(ta.name.clone())),
                Some(tb) => self.compare(ta, tb),
            });
        let theirs = self
            .b
            .tensors()
            .iter()
            .filter(|tb| self.a.meta(&tb.name).is_none())
            .map(|tb| Ok(TensorDiff::OnlyInB(tb.name.clone())));
        ours.chain(theirs)
    }

    /// The block-quantized matrices of both files: the tensors are their
    /// parts.
    pub fn blocks(&self) -> BlockDiff {
        BlockDiff {
            a: blocks_of(&*self.a),
            b: blocks_of(&*self.b),
        }
    }

    /// Compares tensor `ta` of A with its namesake `tb` of B.
    fn compare(&self, ta: &TensorMeta, tb: &TensorMeta) -> Result<TensorDiff> {
        let raw_side = ta.dtype == SourceDType::Raw || tb.dtype == SourceDType::Raw;
        let outcome = if !raw_side && ta.shape != tb.shape {
            Outcome::Shapes(ta.shape.clone(), tb.shape.clone())
        } else if raw_side {
            Outcome::Bytes {
                identical: self.a.raw(&ta.name)? == self.b.raw(&tb.name)?,
            }
        } else {
            Outcome::Values {
                max_abs_diff: max_abs_diff(&self.a.to_f32(&ta.name)?, &self.b.to_f32(&tb.name)?),
            }
        };
        let differs = match outcome {
            Outcome::Shapes(..) => true,
            Outcome::Bytes { identical } => !identical,
            Outcome::Values { max_abs_diff } => max_abs_diff > self.tolerance,
        };
        Ok(TensorDiff::Compared {
            name: ta.name.clone(),
            dtypes: (ta.dtype, tb.dtype),
            outcome,
            differs,
        })
    }
}

/// Largest |a − b| over two equally long vectors (NaN vs NaN counts as equal,
/// NaN vs a number as infinite).
fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            if x.is_nan() && y.is_nan() || x == y {
                0.0
            } else {
                let d = (x as f64 - y as f64).abs();
                if d.is_nan() {
                    f64::INFINITY
                } else {
                    d
                }
            }
        })
        .fold(0.0, f64::max)
}
