//! Element types and tensor types: what kiln's graphs carry and what a
//! compiled module's functions take and return (the compiler's graph DSL
//! re-exports them as `kiln::graph::{DType, TensorType}`).

use smallvec::SmallVec;
use std::fmt;

/// Element type of a tensor. Only what kiln's graphs need: no i64 (Vulkan
/// cannot legalize it), index tensors are i32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BF16,
    /// IEEE binary16.
    F16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 16-bit integer. Used to load bf16 weights by their bits
    /// (kiln's `Graph::weight`); no arithmetic op takes it.
    I16,
    /// Signed 8-bit integer: the codes of `--weights w8a8` matrices and the
    /// activations rounded for their products (kiln's `Graph::linear_w8a8`).
    /// Only `convert` and `dot_general` (into i32) take it.
    I8,
    /// Signed 4-bit integer, two per byte (element `2j` in the low nibble of
    /// byte `j`, as IREE stores it): the codes of `--weights w4a16`
    /// matrices (kiln's `Graph::linear_w4a16`). Only `convert`, `reshape`
    /// and `dot_general` (i8 × i4 into i32) take it.
    I4,
    /// Boolean (`i1` in MLIR).
    I1,
}

impl DType {
    /// All dtypes, in a fixed order.
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::BF16,
        DType::F16,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::I4,
        DType::I1,
    ];

    /// The MLIR spelling: `f32`, `bf16`, `f16`, `i32`, `i16`, `i8`, `i4`, `i1`.
    pub fn mlir(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::I4 => "i4",
            DType::I1 => "i1",
        }
    }

    /// Parses an MLIR element type spelling.
    pub fn from_mlir(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.mlir() == s)
    }

    /// Bytes per element in memory and in parameter files (i1 takes a
    /// byte). i4 shares a byte between two elements: this rounds it up to
    /// 1, so count bytes with [`DType::bytes`].
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::BF16 | DType::F16 | DType::I16 => 2,
            DType::I8 | DType::I4 | DType::I1 => 1,
        }
    }

    /// Bits per element as stored (i1 takes a byte, i4 half of one).
    pub fn bits(self) -> usize {
        match self {
            DType::I4 => 4,
            d => 8 * d.size(),
        }
    }

    /// Bytes of `n` elements as stored: i4 two per byte (an odd count
    /// rounds up), the others [`DType::size`] each.
    pub fn bytes(self, n: usize) -> usize {
        match self {
            DType::I4 => n.div_ceil(2),
            d => n.saturating_mul(d.size()),
        }
    }

    /// True for f32, bf16 and f16.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::BF16 | DType::F16)
    }

    /// True for i32 (i1 is a boolean, not an integer, for op checks).
    pub fn is_int(self) -> bool {
        self == DType::I32
    }

    /// True for the storage-only integers i16, i8 and i4, which no
    /// arithmetic op takes.
    pub fn is_storage_int(self) -> bool {
        matches!(self, DType::I16 | DType::I8 | DType::I4)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.mlir())
    }
}

/// A static shape. Most tensors have rank ≤ 4, which stays inline.
pub type Shape = SmallVec<[usize; 4]>;

/// Element type plus static shape: what every graph value carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first. Empty for a scalar.
    pub shape: Shape,
}

impl TensorType {
    /// A tensor type from a dtype and dims.
    pub fn new(dtype: DType, shape: &[usize]) -> Self {
        TensorType {
            dtype,
            shape: Shape::from_slice(shape),
        }
    }

    /// A rank-0 tensor type.
    pub fn scalar(dtype: DType) -> Self {
        TensorType {
            dtype,
            shape: Shape::new(),
        }
    }

    /// Rank (number of dims).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements, or `None` on overflow.
    pub fn checked_numel(&self) -> Option<usize> {
        self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
    }

    /// Number of elements (saturating; shapes in a built graph never overflow).
    pub fn numel(&self) -> usize {
        self.checked_numel().unwrap_or(usize::MAX)
    }

    /// Size in bytes of the tensor's data (saturating).
    pub fn byte_size(&self) -> usize {
        self.dtype.bytes(self.numel())
    }

    /// The same shape with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        TensorType {
            dtype,
            shape: self.shape.clone(),
        }
    }

    /// The type a value of this type has after kiln's Vulkan lowering
    /// (`Module::lower_for_vulkan`) when it is not a parameter: bf16
    /// `[…, D]` becomes i32 `[…, D/2]` (two bf16 per word; `None` for an
    /// odd D, which the pass refuses); any other type is kept. A KV
    /// module's bf16 caches take this form on Vulkan.
    pub fn lowered_for_vulkan(&self) -> Option<TensorType> {
        if self.dtype != DType::BF16 {
            return Some(self.clone());
        }
        let (&last, rest) = self.shape.split_last()?;
        if last % 2 != 0 {
            return None;
        }
        let mut shape = rest.to_vec();
        shape.push(last / 2);
        Some(TensorType::new(DType::I32, &shape))
    }

    /// The i32 shape a bf16 parameter of this shape is declared with by
    /// kiln's Vulkan lowering (and `Graph::weight`): see
    /// [`bf16_pairs_shape`].
    pub fn bf16_pairs_shape(&self) -> Option<Vec<usize>> {
        bf16_pairs_shape(&self.shape)
    }
}

/// The i32 shape a bf16 weight of `shape` is declared with (two bf16 per
/// word): the last dim halved when it is even, else `[n/2]`; `None` when
/// the element count is odd (or `shape` is rank 0).
pub fn bf16_pairs_shape(shape: &[usize]) -> Option<Vec<usize>> {
    let (&last, rest) = shape.split_last()?;
    if last % 2 == 0 {
        let mut s = rest.to_vec();
        s.push(last / 2);
        return Some(s);
    }
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    (n % 2 == 0).then(|| vec![n / 2])
}

impl fmt::Display for TensorType {
    /// MLIR spelling, e.g. `tensor<1x64xi32>` or `tensor<f32>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.shape {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.dtype)
    }
}
