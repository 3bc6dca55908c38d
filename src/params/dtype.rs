//! The element types of parameter files, shared by the safetensors, IRPA
//! and GGUF code (the stored [`DType`], GGML's [`GgmlType`] and a parameter
//! file's [`SourceDType`]), and the conversions between them and the
//! graph's [`crate::graph::DType`] (`From` where every value converts,
//! `TryFrom` giving the value back where not).

use crate::graph::DType as GraphDType;
use std::fmt;

/// A plain (unquantized) element type as stored in a parameter file.
/// GGUF's block-quantized types are [`GgmlType`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE binary64.
    F64,
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (the top half of an f32).
    BF16,
    /// Signed 64-bit integer.
    I64,
    /// Signed 32-bit integer.
    I32,
    /// Signed 16-bit integer.
    I16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Boolean, one byte (0 or 1).
    Bool,
}

impl DType {
    /// Every dtype, in safetensors' spelling order.
    pub const ALL: [DType; 10] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U8,
        DType::Bool,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    /// The spelling in a safetensors header (`"BF16"`, `"BOOL"`, …).
    pub fn safetensors_name(self) -> &'static str {
        match self {
            DType::F64 => "F64",
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I64 => "I64",
            DType::I32 => "I32",
            DType::I16 => "I16",
            DType::I8 => "I8",
            DType::U8 => "U8",
            DType::Bool => "BOOL",
        }
    }

    /// Parses a safetensors dtype spelling.
    pub fn from_safetensors_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.safetensors_name() == s)
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.safetensors_name())
    }
}

/// GGML tensor types kiln knows the layout of.
#[allow(non_camel_case_types, missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    I8,
    I16,
    I32,
    I64,
    F64,
    BF16,
}

impl GgmlType {
    /// The type for a GGUF type id, if known.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        use GgmlType::*;
        Some(match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2_K,
            11 => Q3_K,
            12 => Q4_K,
            13 => Q5_K,
            14 => Q6_K,
            15 => Q8_K,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            30 => BF16,
            _ => return None,
        })
    }

    /// The GGUF type id.
    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            Q8_K => 15,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            BF16 => 30,
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> u64 {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K => 256,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        use GgmlType::*;
        match self {
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            F64 | I64 => 8,
            I8 => 1,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2_K => 84,
            Q3_K => 110,
            Q4_K => 144,
            Q5_K => 176,
            Q6_K => 210,
            Q8_K => 292,
        }
    }

    /// The plain dtype this type stores unquantized, if any.
    pub fn plain(self) -> Option<DType> {
        DType::try_from(self).ok()
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A tensor's element type as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceDType {
    /// A plain dtype.
    Plain(DType),
    /// A GGML type (possibly block-quantized).
    Ggml(GgmlType),
    /// Bytes of unknown type (an IRPA entry without a description).
    Raw,
}

impl fmt::Display for SourceDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceDType::Plain(d) => write!(f, "{d}"),
            SourceDType::Ggml(g) => write!(f, "{g}"),
            SourceDType::Raw => f.write_str("bytes"),
        }
    }
}

impl SourceDType {
    /// The plain dtype the values have without dequantization, if any.
    pub fn plain(self) -> Option<DType> {
        DType::try_from(self).ok()
    }
}

/// Number of elements of `shape`, or `None` on overflow.
pub fn checked_numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// Bytes of a `dtype` tensor of `shape`, or `None` on overflow.
pub fn checked_nbytes(dtype: DType, shape: &[u64]) -> Option<u64> {
    checked_numel(shape)?.checked_mul(dtype.size() as u64)
}

impl From<GraphDType> for DType {
    /// The stored dtype of a graph dtype (`i1` is stored as one byte, [`DType::Bool`]).
    fn from(d: GraphDType) -> DType {
        match d {
            GraphDType::F32 => DType::F32,
            GraphDType::BF16 => DType::BF16,
            GraphDType::F16 => DType::F16,
            GraphDType::I32 => DType::I32,
            GraphDType::I16 => DType::I16,
            GraphDType::I8 => DType::I8,
            // Two per byte: an i4 tensor's bytes are stored as u8, half
            // as many (`export`'s safetensors file).
            GraphDType::I4 => DType::U8,
            GraphDType::I1 => DType::Bool,
        }
    }
}

impl TryFrom<DType> for GraphDType {
    type Error = DType;

    /// The graph dtype of a stored dtype; f64, i64 and u8 have none.
    fn try_from(d: DType) -> Result<GraphDType, DType> {
        Ok(match d {
            DType::F32 => GraphDType::F32,
            DType::BF16 => GraphDType::BF16,
            DType::F16 => GraphDType::F16,
            DType::I32 => GraphDType::I32,
            DType::I16 => GraphDType::I16,
            DType::I8 => GraphDType::I8,
            DType::Bool => GraphDType::I1,
            DType::F64 | DType::I64 | DType::U8 => return Err(d),
        })
    }
}

impl TryFrom<GgmlType> for DType {
    type Error = GgmlType;

    /// The plain dtype a GGML type stores unquantized; the block-quantized
    /// types have none.
    fn try_from(t: GgmlType) -> Result<DType, GgmlType> {
        use GgmlType as G;
        Ok(match t {
            G::F32 => DType::F32,
            G::F16 => DType::F16,
            G::BF16 => DType::BF16,
            G::F64 => DType::F64,
            G::I8 => DType::I8,
            G::I16 => DType::I16,
            G::I32 => DType::I32,
            G::I64 => DType::I64,
            _ => return Err(t),
        })
    }
}

impl TryFrom<GgmlType> for GraphDType {
    type Error = GgmlType;

    /// The graph dtype of a GGML type's values without dequantization.
    fn try_from(t: GgmlType) -> Result<GraphDType, GgmlType> {
        DType::try_from(t).and_then(|p| GraphDType::try_from(p).map_err(|_| t))
    }
}

impl From<DType> for SourceDType {
    fn from(d: DType) -> SourceDType {
        SourceDType::Plain(d)
    }
}

impl From<GgmlType> for SourceDType {
    fn from(t: GgmlType) -> SourceDType {
        SourceDType::Ggml(t)
    }
}

impl TryFrom<SourceDType> for DType {
    type Error = SourceDType;

    /// The plain dtype a stored tensor's values have without
    /// dequantization: none for a block-quantized GGML type or raw bytes.
    fn try_from(d: SourceDType) -> Result<DType, SourceDType> {
        match d {
            SourceDType::Plain(p) => Ok(p),
            SourceDType::Ggml(g) => DType::try_from(g).map_err(|_| d),
            SourceDType::Raw => Err(d),
        }
    }
}

impl TryFrom<SourceDType> for GraphDType {
    type Error = SourceDType;

    /// The graph dtype of a stored tensor's values without dequantization.
    fn try_from(d: SourceDType) -> Result<GraphDType, SourceDType> {
        DType::try_from(d).and_then(|p| GraphDType::try_from(p).map_err(|_| d))
    }
}
