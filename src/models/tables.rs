//! The matrices of a decoder as graph values ([`Table`]): whole, or in
//! row chunks under the tensor bound ([`row_chunks`]), plain, block-quantized
//! or i8 rows; and how a gather reads rows of each ([`Rows`]).

use super::weights::{Int4Form, Int8Form};
use super::ModelError;
use crate::graph::{BlockWeight, DType, Graph, Value};

/// [`DecoderConfig::MAX_TENSOR_BYTES`](super::DecoderConfig::MAX_TENSOR_BYTES).
pub(crate) const MAX_TENSOR_BYTES: u64 = 1 << 27;

/// [`DecoderConfig::MAX_TABLE_ROWS`](super::DecoderConfig::MAX_TABLE_ROWS).
pub(crate) const MAX_TABLE_ROWS: usize = 65535;

/// A `[rows, cols]` matrix (the embedding, the LM head, a block's weight
/// matrix): one f32 value, or row chunks `(first row, f32 [rows, cols])`
/// in order when the whole matrix or its products would pass the tensor
/// bound, or block-quantized row chunks (one when it fits), widened where
/// they are used ([`Decoder::dense`](super::decoder::Decoder)): a gather widens only its rows.
#[derive(Clone)]
pub(crate) enum Table {
    Whole(Value),
    Rows(Vec<(usize, Value)>),
    Blocks(Vec<(usize, BlockWeight)>),
    /// `--weights w8a8` / `w8a16` / `w8a16e` / `w16a16` chunks: i8 codes
    /// `[rows, cols]` (`[rows, 2·cols]` for `w16a16`), f32 row scales
    /// `[rows, 1]` and, for a `w8a16e` table, the rows' rest for gathers;
    /// multiplied as the form says.
    Int8(Int8Form, Vec<(usize, I8Chunk)>),
    /// `--weights w4a16` chunks: i4 codes `[rows, cols]` with f32 block
    /// scales (and minimums) `[rows, cols/32]`, multiplied block by block.
    Int4(Int4Form, Vec<(usize, I4Chunk)>),
}

/// The parts of one chunk of a `w4a16` matrix, as stored
/// ([`Int4Form::parts`]).
#[derive(Clone, Copy)]
pub(crate) struct I4Chunk {
    /// i4 codes `[rows, cols]`.
    pub(crate) q: Value,
    /// Block scales `[rows, cols/32]`: f16, or Q4_K's 6-bit i8.
    pub(crate) scale: Value,
    /// Block minimums `[rows, cols/32]`, if the type has them.
    pub(crate) min: Option<Value>,
    /// Q4_K's super-block `d` and `dmin`, f16 `[rows, cols/256]`.
    pub(crate) supers: Option<(Value, Value)>,
}

impl I4Chunk {
    /// The chunk's parts gathered at rows `ids`.
    pub(crate) fn gather(
        self,
        g: &mut Graph,
        ids: Value,
    ) -> Result<I4Chunk, crate::graph::GraphError> {
        Ok(I4Chunk {
            q: g.gather_rows(self.q, ids)?,
            scale: g.gather_rows(self.scale, ids)?,
            min: self.min.map(|m| g.gather_rows(m, ids)).transpose()?,
            supers: self
                .supers
                .map(|(d, dmin)| {
                    Ok::<_, crate::graph::GraphError>((
                        g.gather_rows(d, ids)?,
                        g.gather_rows(dmin, ids)?,
                    ))
                })
                .transpose()?,
        })
    }

    /// The f32 block scales and minimums `[rows, cols/32]`: the stored
    /// f16s widened, or Q4_K's `d·sc` and `−dmin·m`
    /// ([`Graph::super_block_scales`]).
    pub(crate) fn block_scales(
        self,
        g: &mut Graph,
    ) -> Result<(Value, Option<Value>), crate::graph::GraphError> {
        let Some((d, dmin)) = self.supers else {
            let scale = g.convert(self.scale, DType::F32)?;
            let min = self.min.map(|m| g.convert(m, DType::F32)).transpose()?;
            return Ok((scale, min));
        };
        let scale = g.super_block_scales(self.scale, d)?;
        let min = match self.min {
            Some(m) => {
                let m = g.super_block_scales(m, dmin)?;
                Some(g.neg(m)?)
            }
            None => None,
        };
        Ok((scale, min))
    }

    /// The chunk's rows widened to f32 ([`Graph::widen_i4_rows`]).
    pub(crate) fn widen(
        self,
        g: &mut Graph,
        form: Int4Form,
    ) -> Result<Value, crate::graph::GraphError> {
        let (scale, min) = self.block_scales(g)?;
        g.widen_i4_rows(self.q, scale, min, form.zero)
    }

    /// `x · Wᵀ` for f32 `x` `[S, cols]` ([`Graph::linear_w4a16`], or
    /// [`Graph::linear_w4a16_super`] for Q4_K's scales).
    pub(crate) fn linear(
        self,
        g: &mut Graph,
        form: Int4Form,
        x: Value,
    ) -> Result<Value, crate::graph::GraphError> {
        match (self.supers, self.min) {
            (Some((d, dmin)), Some(m)) => g.linear_w4a16_super(x, self.q, [self.scale, m, d, dmin]),
            _ => {
                let (scale, min) = self.block_scales(g)?;
                g.linear_w4a16(x, self.q, scale, min, form.zero)
            }
        }
    }
}

/// Row ranges of a `[v, h]` table whose stored parts have `row_bytes`
/// bytes per row each, when it (widened to f32) or the `[m, v]` f32 logits
/// of `m` rows against it pass `limit` bytes, or it has more than
/// [`MAX_TABLE_ROWS`] rows; `None` when one piece fits, or when `limit` is
/// 0 (no bound: CPU-only modules). Chunks are equal but for the last, and
/// each one's bytes in every part are a multiple of 256 (so every part
/// starts aligned for any device's buffer offsets).
pub(crate) fn row_chunks(
    v: usize,
    h: usize,
    m: usize,
    row_bytes: &[u64],
    limit: u64,
) -> Result<Option<Vec<std::ops::Range<usize>>>, ModelError> {
    let f32_row = 4 * h.max(m) as u64;
    if limit == 0 || (v as u64 * f32_row <= limit && v <= MAX_TABLE_ROWS) {
        return Ok(None);
    }
    // Rows per chunk: a multiple of 64 where the bound allows (GPU matmul
    // tiles stay whole), and always of what aligns a chunk's bytes to 256.
    let byte_align = row_bytes
        .iter()
        .map(|&b| 256 / gcd(b, 256))
        .fold(1, |a, b| a * b / gcd(a, b)) as usize;
    let tile_align = byte_align * 64 / gcd(byte_align as u64, 64) as usize;
    let fit = ((limit / f32_row) as usize).min(MAX_TABLE_ROWS);
    let align = if fit >= tile_align {
        tile_align
    } else {
        byte_align
    };
    let max_rows = fit / align * align;
    if max_rows == 0 {
        return Err(ModelError::TableRowOverBound {
            width: h,
            rows: m,
            bytes: f32_row,
            align,
            bound: limit,
        });
    }
    let count = v.div_ceil(max_rows);
    let rows = v.div_ceil(count).div_ceil(align) * align;
    let rows = rows.min(max_rows);
    Ok(Some(
        (0..v.div_ceil(rows))
            .map(|c| c * rows..((c + 1) * rows).min(v))
            .collect(),
    ))
}

/// The parts of one chunk of an i8-rows matrix: codes, row scales, and
/// the codes of the rows' rounding error (`w8a16e` only).
#[derive(Clone, Copy)]
pub(crate) struct I8Chunk {
    /// i8 codes `[rows, cols]` (`[rows, 2·cols]` for `w16a16`).
    pub(crate) q: Value,
    /// f32 row scales `[rows, 1]`.
    pub(crate) s: Value,
    /// `w8a16e` only: the codes of the rows' rounding error.
    pub(crate) rest: Option<Value>,
}

/// One chunk of a table, for a gather.
pub(crate) enum Rows {
    Plain(Value),
    Blocks(BlockWeight),
    Int8(Int8Form, I8Chunk),
    Int4(Int4Form, I4Chunk),
}

impl Rows {
    /// Rows `ids` of the chunk as f32: a block chunk gathers the rows of
    /// every part, then widens only them.
    pub(crate) fn gather(
        &self,
        g: &mut Graph,
        ids: Value,
    ) -> Result<Value, crate::graph::GraphError> {
        match *self {
            Rows::Plain(t) => g.gather_rows(t, ids),
            Rows::Blocks(bw) => {
                let mut r = bw;
                r.qs = g.gather_rows(bw.qs, ids)?;
                if let Some((qh, bits)) = bw.qh {
                    r.qh = Some((g.gather_rows(qh, ids)?, bits));
                }
                r.scale = g.gather_rows(bw.scale, ids)?;
                r.min = bw.min.map(|m| g.gather_rows(m, ids)).transpose()?;
                g.dequantize_blocks(&r)
            }
            Rows::Int4(form, c) => c.gather(g, ids)?.widen(g, form),
            Rows::Int8(form, c) => {
                let rows = I8Chunk {
                    q: g.gather_rows(c.q, ids)?,
                    s: g.gather_rows(c.s, ids)?,
                    rest: c.rest.map(|r| g.gather_rows(r, ids)).transpose()?,
                };
                widen_i8(g, form, rows)
            }
        }
    }
}

/// An i8-rows chunk widened to f32 as its form stores it.
pub(crate) fn widen_i8(
    g: &mut Graph,
    form: Int8Form,
    c: I8Chunk,
) -> Result<Value, crate::graph::GraphError> {
    match (form, c.rest) {
        (Int8Form::W16A16, _) => g.widen_i8_two_term_rows(c.q, c.s),
        (_, Some(rest)) => g.widen_i8_rows_and_rest(c.q, rest, c.s),
        (_, None) => g.widen_i8_rows(c.q, c.s),
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_that_fit_are_not_chunked() {
        // SmolLM2: 49152 × 576, 113 MB widened, at SEQ 64.
        assert_eq!(
            row_chunks(49152, 576, 64, &[2 * 576], MAX_TENSOR_BYTES).unwrap(),
            None
        );
        assert_eq!(row_chunks(262144, 640, 32, &[2 * 640], 0).unwrap(), None);
    }

    #[test]
    fn gemma3_table_in_six_aligned_chunks() {
        let c = row_chunks(262144, 640, 32, &[2 * 640], MAX_TENSOR_BYTES)
            .unwrap()
            .unwrap();
        assert_eq!(c.len(), 6);
        assert!(c
            .iter()
            .all(|r| r.start % 64 == 0 && r.len() <= MAX_TABLE_ROWS));
        assert!(c
            .iter()
            .all(|r| r.len() as u64 * 640 * 4 <= MAX_TENSOR_BYTES));
        assert_eq!((c[0].clone(), c[5].end), (0..43712, 262144));
        assert!(c.windows(2).all(|w| w[0].end == w[1].start));
    }

    #[test]
    fn rows_are_capped_by_the_workgroup_count_and_the_logits() {
        // 100k × 256 fits in bytes but has more rows than 65535.
        let c = row_chunks(100_000, 256, 1, &[2 * 256], MAX_TENSOR_BYTES)
            .unwrap()
            .unwrap();
        assert_eq!(c.len(), 2);
        // Logits of 2048 rows × 49152 (402 MB) force chunks of ≤ 16384 rows.
        let c = row_chunks(49152, 576, 2048, &[2 * 576], MAX_TENSOR_BYTES)
            .unwrap()
            .unwrap();
        assert!(c.iter().all(|r| r.len() * 2048 * 4 <= 1 << 27));
        // A row that alone passes the bound is an error naming it.
        let e = row_chunks(96, 48, 8, &[2 * 48], 100).unwrap_err();
        assert!(e.to_string().contains("100-byte tensor bound"), "{e}");
    }
}
