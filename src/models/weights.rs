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
    /// or `<name>.q8x2` `[rows, 2·cols]` for [`Int8Form::W16A16`];
    /// `<name>.scale` `[rows, 1]`), multiplied by activations rounded to
    /// i8 per row, as [`Int8Form`] says.
    Int8Rows(Int8Form),
    /// A GGUF matrix's own 4-bit codes kept as i4, two per byte, with its
    /// own scale (and minimum) per 32-element block (`<name>.q4`
    /// `[rows, cols]`, and the parts [`Int4Form::parts`] names),
    /// multiplied block by block by activations in two i8 terms
    /// ([`crate::graph::Graph::linear_w4a16`], `--weights w4a16`).
    Int4Blocks(Int4Form),
}

/// How an [`Storage::Int4Blocks`] matrix was stored: which GGML type its
/// codes come from. Element `i` of a row is `(c + 8 − zero)·scale + min`,
/// where `c` is the stored i4 code, the GGUF's unsigned code minus 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int4Form {
    /// The GGML type of the source blocks (Q4_0, Q4_1 or Q4_K).
    pub ggml: crate::params::gguf::GgmlType,
    /// The type's fixed offset (8 for Q4_0, 0 for Q4_1 and Q4_K).
    pub zero: u32,
    /// Whether the matrix has a `.min4` part.
    pub min: bool,
    /// Whether the block scales and minimums are Q4_K's: 6-bit integers
    /// (`.scale4`, `.min4`, i8 `[rows, cols/32]`) times their 256-element
    /// super-block's f16 `d` and `dmin` (`.d4`, `.dmin4`, `[rows,
    /// cols/256]`), as GGML stores them. Otherwise `.scale4` and `.min4`
    /// are the blocks' own f16 scales and minimums (Q4_0, Q4_1).
    pub super_blocks: bool,
}

impl Int4Form {
    /// Elements per block: one scale (and minimum) each.
    pub const GROUP: usize = crate::graph::I4_BLOCK;

    /// The 4-bit form of `ty`'s blocks, if its codes are 4-bit (Q4_0,
    /// Q4_1, Q4_K).
    pub fn of(ty: crate::params::gguf::GgmlType) -> Option<Int4Form> {
        let b = BlockForm::of(ty)?;
        (b.low_bits == 4 && b.high_bits == 0 && b.group == Self::GROUP).then_some(Int4Form {
            ggml: ty,
            zero: b.zero,
            min: b.min,
            super_blocks: b.block() > Self::GROUP,
        })
    }

    /// Elements per super-block (Q4_K): one `d` and `dmin` each.
    pub const SUPER: usize = crate::graph::I4_SUPER_BLOCK;

    /// The parts of a matrix with `cols` columns: `(suffix, dtype,
    /// columns per row)`.
    pub fn parts(self, cols: usize) -> Vec<(&'static str, DType, usize)> {
        let groups = cols / Self::GROUP;
        if self.super_blocks {
            let supers = cols / Self::SUPER;
            return vec![
                (I4_CODES, DType::I4, cols),
                (I4_SCALES, DType::I8, groups),
                (I4_MINS, DType::I8, groups),
                (I4_SUPER_SCALES, DType::F16, supers),
                (I4_SUPER_MINS, DType::F16, supers),
            ];
        }
        let mut v = vec![(I4_CODES, DType::I4, cols), (I4_SCALES, DType::F16, groups)];
        if self.min {
            v.push((I4_MINS, DType::F16, groups));
        }
        v
    }
}

/// Suffix of an [`Storage::Int4Blocks`] matrix's codes.
pub const I4_CODES: &str = "q4";
/// Suffix of an [`Storage::Int4Blocks`] matrix's block scales.
pub const I4_SCALES: &str = "scale4";
/// Suffix of an [`Storage::Int4Blocks`] matrix's block minimums.
pub const I4_MINS: &str = "min4";
/// Suffix of a Q4_K [`Storage::Int4Blocks`] matrix's super-block scales.
pub const I4_SUPER_SCALES: &str = "d4";
/// Suffix of a Q4_K [`Storage::Int4Blocks`] matrix's super-block minimums.
pub const I4_SUPER_MINS: &str = "dmin4";

/// How an [`Storage::Int8Rows`] matrix and the activations of its products
/// are carried (`spec/quantized-weights.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Form {
    /// One i8 term each (`--weights w8a8`, lossy twice:
    /// [`crate::graph::Graph::linear_w8a8`]).
    W8A8,
    /// One i8 term per weight, two per activation (`--weights w8a16`:
    /// [`crate::graph::Graph::linear_w8a16`]); the archive is `w8a8`'s.
    W8A16,
    /// `W8A16`'s products, and each row's rounding error stored as a
    /// second i8 term (`<name>.q8lo` `[rows, cols]`) that only gathers
    /// read (the embedding table under `--weights w8a16e`: a gather
    /// widens `scale·(q + lo/254)`, a tied head multiplies `q` alone).
    W8A16E,
    /// Two i8 terms each (`--weights w16a16`:
    /// [`crate::graph::Graph::linear_w16a16`]): each row's codes are
    /// followed by the codes of its rounding error.
    W16A16,
}

/// The parts of an [`Storage::Int8Rows`] matrix with `cols` columns:
/// `(suffix, dtype, columns per row)`.
pub fn int8_parts(form: Int8Form, cols: usize) -> Vec<(&'static str, DType, usize)> {
    use crate::params::quant::{I8_REST_CODES, I8_ROWS_PARTS, I8_TWO_TERM_CODES};
    let [codes, scale] = I8_ROWS_PARTS;
    match form {
        Int8Form::W16A16 => vec![
            (I8_TWO_TERM_CODES, DType::I8, 2 * cols),
            (scale, DType::F32, 1),
        ],
        Int8Form::W8A16E => vec![
            (codes, DType::I8, cols),
            (scale, DType::F32, 1),
            (I8_REST_CODES, DType::I8, cols),
        ],
        Int8Form::W8A8 | Int8Form::W8A16 => vec![(codes, DType::I8, cols), (scale, DType::F32, 1)],
    }
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
            Storage::Int8Rows(form) => Some(int8_parts(form, cols)),
            Storage::Int4Blocks(form) => Some(form.parts(cols)),
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
