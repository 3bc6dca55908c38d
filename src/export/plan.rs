//! The weight-storage plan: how each weight of a checkpoint is stored
//! ([`weight_plan`]), the archive entries that makes, and the stored bytes
//! of each entry, row chunk by row chunk.

use super::error::Result;
use super::options::Weights;
use super::ExportError;
use crate::graph::DType;
use crate::models::checkpoint::file_rows;
use crate::models::{Checkpoint, Int4Form, Int8Form, Storage, WeightPlan, EMBEDDING};
use crate::params::blocks::{self, part_key, BlockForm};
use crate::params::convert::encode_weights;
use crate::params::gguf::GgmlType;
use crate::params::quant::{quantize_rows_i8, quantize_rows_i8_two_terms};

/// How each weight of `ckpt` is stored under `weights`, with
/// `overrides` (`--weights-for PATTERN=FORM`: every tensor whose HF name
/// contains PATTERN; the last matching one wins). `keep` needs a GGUF
/// checkpoint whose tensors have types kiln can keep; `q8_0`/`q4_0` need
/// rows of whole 32-element blocks.
pub fn weight_plan(
    ckpt: &Checkpoint,
    weights: Weights,
    overrides: &[(String, Weights)],
) -> Result<WeightPlan> {
    let mut plan = WeightPlan::from(match weights {
        Weights::Dtype(d) => d,
        _ => DType::BF16,
    });
    for (pattern, _) in overrides {
        if !ckpt
            .tensors()
            .iter()
            .any(|(n, _)| n.contains(pattern.as_str()))
        {
            return Err(ExportError::NoTensorMatches {
                checkpoint: ckpt.path.clone(),
                pattern: pattern.clone(),
            });
        }
    }
    for (name, shape) in ckpt.tensors() {
        let w = overrides
            .iter()
            .rev()
            .find(|(p, _)| name.contains(p.as_str()))
            .map_or(weights, |(_, w)| *w);
        let storage = storage_for(ckpt, name, shape, w)?;
        if storage != Storage::Plain(plan.dtype) {
            plan.overrides.insert(name.clone(), storage);
        }
    }
    Ok(plan)
}

/// How tensor `name` of `shape` is stored under `w`.
fn storage_for(
    ckpt: &Checkpoint,
    name: &str,
    shape: &[usize],
    w: Weights,
) -> Result<Storage, ExportError> {
    let whole_blocks = |form: &BlockForm| -> Result<Storage, ExportError> {
        if shape[1] % form.block() != 0 {
            return Err(ExportError::PartialBlocks {
                checkpoint: ckpt.path.clone(),
                tensor: name.to_string(),
                shape: shape.to_vec(),
                block: form.block(),
                weights: w,
            });
        }
        Ok(Storage::Blocks(*form))
    };
    match w {
        Weights::Dtype(d @ (DType::BF16 | DType::F16 | DType::F32)) => Ok(Storage::Plain(d)),
        Weights::Dtype(dtype) => Err(ExportError::WeightDtype { dtype }),
        Weights::W8A8 | Weights::W8A16 | Weights::W8A16E | Weights::W16A16 if shape.len() == 2 => {
            Ok(Storage::Int8Rows(match w {
                Weights::W8A8 => Int8Form::W8A8,
                Weights::W8A16 => Int8Form::W8A16,
                // Only a gathered table has rows worth a second term.
                Weights::W8A16E if name == EMBEDDING => Int8Form::W8A16E,
                Weights::W8A16E => Int8Form::W8A16,
                _ => Int8Form::W16A16,
            }))
        }
        Weights::W8A8 | Weights::W8A16 | Weights::W8A16E | Weights::W16A16 => {
            Ok(Storage::Plain(DType::BF16))
        }
        // A GGUF's 4-bit matrices keep their codes; every other matrix is
        // w8a16's.
        Weights::W4A16 => {
            if ckpt.ggml_type(name).is_none() {
                return Err(ExportError::KeepNeedsGguf {
                    checkpoint: ckpt.path.clone(),
                    weights: w,
                });
            }
            match ckpt.four_bit_form(name, shape) {
                Some(form) => Ok(Storage::Int4Blocks(form)),
                None => storage_for(ckpt, name, shape, Weights::W8A16),
            }
        }
        Weights::Quantize(ty) => {
            let form = BlockForm::of(ty)
                .filter(|_| matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0))
                .ok_or(ExportError::QuantizeType { ty })?;
            if shape.len() != 2 {
                return Ok(Storage::Plain(DType::BF16));
            }
            whole_blocks(&form)
        }
        Weights::Keep => {
            let Some(ty) = ckpt.ggml_type(name) else {
                return Err(ExportError::KeepNeedsGguf {
                    checkpoint: ckpt.path.clone(),
                    weights: w,
                });
            };
            match (DType::try_from(ty).ok(), BlockForm::of(ty)) {
                (Some(d @ (DType::F16 | DType::BF16 | DType::F32)), _) => Ok(Storage::Plain(d)),
                (None, Some(form)) if shape.len() == 2 => whole_blocks(&form),
                _ => Err(ExportError::Unkeepable {
                    checkpoint: ckpt.path.clone(),
                    tensor: name.to_string(),
                    ty,
                }),
            }
        }
    }
}

/// One archive entry of an export: a whole tensor, or one part of a
/// block-quantized one.
pub(super) struct Entry {
    /// The archive key: the tensor's HF name, or `NAME.<part>`.
    pub(super) name: String,
    /// Stored dtype.
    pub(super) dtype: DType,
    /// Stored shape.
    pub(super) shape: Vec<u64>,
    /// The checkpoint tensor it stores: its index in
    /// [`Checkpoint::tensors`].
    pub(super) tensor: usize,
    /// Which of the tensor's [`Storage::parts`] it is (0 for a whole
    /// tensor).
    pub(super) part: usize,
}

impl Entry {
    /// Stored bytes.
    pub(super) fn bytes(&self) -> u64 {
        self.dtype
            .bytes(self.shape.iter().product::<u64>() as usize) as u64
    }

    /// A vector: at most one dimension above 1 (a norm's weight, a bias, the
    /// row scales of an i8 matrix).
    pub(super) fn is_vector(&self) -> bool {
        self.shape.iter().filter(|&&d| d > 1).count() <= 1
    }
}

/// The archive entries of `ckpt` stored as `plan` says, in the archives'
/// order: the vectors ([`Entry::is_vector`]) first, then the others, each
/// group in graph order.
///
/// A module compiled with `kiln compile --pack` reads its matrices from the
/// packed archive; from the export's archive, which it maps, it reads the
/// vectors and the rows an embedding gathers. Stored between the matrices,
/// each vector's first read also brought neighbouring matrix pages in by
/// the kernel's readahead: 15 of SmolLM2 `fast`'s 197 MB peak RSS
/// (spec/iree.md, "Packed at compile time"). Stored together they are a
/// few pages.
pub(super) fn entries(ckpt: &Checkpoint, plan: &WeightPlan) -> Vec<Entry> {
    let mut out = Vec::new();
    for (tensor, (n, s)) in ckpt.tensors().iter().enumerate() {
        let storage = plan.storage(n);
        match (storage, storage.parts(cols_of(s))) {
            (_, Some(parts)) => {
                for (part, (suffix, dtype, cols)) in parts.into_iter().enumerate() {
                    out.push(Entry {
                        name: part_key(n, suffix),
                        dtype,
                        shape: vec![s[0] as u64, cols as u64],
                        tensor,
                        part,
                    });
                }
            }
            (Storage::Plain(d), None) => out.push(Entry {
                name: n.clone(),
                dtype: d,
                shape: s.iter().map(|&d| d as u64).collect(),
                tensor,
                part: 0,
            }),
            (_, None) => unreachable!("only plain tensors have no parts"),
        }
    }
    // Stable: each group keeps graph order.
    out.sort_by_key(|e| !e.is_vector());
    out
}

/// The last dim of `shape` (a matrix's columns), 1 for a scalar.
pub(super) fn cols_of(shape: &[usize]) -> usize {
    shape.last().copied().unwrap_or(1)
}

/// The stored bytes of `tensor` as `storage` says: one vector, or one per
/// part (in [`Storage::parts`] order).
pub(super) fn tensor_bytes(
    ckpt: &Checkpoint,
    tensor: &str,
    storage: Storage,
) -> Result<Vec<Vec<u8>>> {
    let shape = ckpt.shape(tensor)?;
    tensor_rows_bytes(ckpt, tensor, &shape, storage, 0..rows_of(&shape))
}

/// Rows of `shape` for the row-chunked conversion: a matrix's rows, or 1.
pub(super) fn rows_of(shape: &[usize]) -> usize {
    match shape {
        [rows, _] => *rows,
        _ => 1,
    }
}

/// [`tensor_bytes`] of rows `rows` of `tensor` (`shape`) only: every part
/// of those rows. Each row is converted on its own, so the chunks of a
/// tensor joined are the whole tensor's bytes.
pub(super) fn tensor_rows_bytes(
    ckpt: &Checkpoint,
    tensor: &str,
    shape: &[usize],
    storage: Storage,
    rows: std::ops::Range<usize>,
) -> Result<Vec<Vec<u8>>> {
    let named = |message: String| ExportError::Tensor {
        checkpoint: ckpt.path.clone(),
        tensor: tensor.to_string(),
        message,
    };
    let cols = cols_of(shape);
    match storage {
        Storage::Plain(d) => {
            let bytes = encode_weights(&ckpt.read_f32_rows(tensor, rows)?, d)
                .ok_or(ExportError::Unencodable { dtype: d })?;
            Ok(vec![bytes])
        }
        Storage::Blocks(form) => {
            let n = rows.len();
            match ckpt.ggml_rows(tensor).filter(|r| r.ty == form.ggml) {
                // Kept: the file's own blocks, repacked.
                Some(r) => {
                    let bytes = file_rows(r.bytes, r.shape[0], r.order.as_deref(), rows);
                    blocks::repack(&form, &bytes, n, r.shape[1], None).map_err(named)
                }
                // Quantized here from the values (`--weights q8_0|q4_0`).
                None => {
                    let values = ckpt.read_f32_rows(tensor, rows)?;
                    let raw = blocks::quantize(form.ggml, &values).map_err(named)?;
                    blocks::repack(&form, &raw, n, cols, None).map_err(named)
                }
            }
        }
        Storage::Int4Blocks(form) => {
            let r = ckpt
                .ggml_rows(tensor)
                .filter(|r| r.ty == form.ggml)
                .ok_or_else(|| named(format!("is not {}: w4a16 keeps its codes", form.ggml)))?;
            let n = rows.len();
            let bytes = file_rows(r.bytes, r.shape[0], r.order.as_deref(), rows);
            let block = BlockForm::of(form.ggml).expect("4-bit forms are block forms");
            let parts = blocks::repack(&block, &bytes, n, r.shape[1], None).map_err(named)?;
            int4_parts(&form, &bytes, parts).map_err(named)
        }
        Storage::Int8Rows(form) => {
            let values = ckpt.read_f32_rows(tensor, rows)?;
            let bytes = |codes: &[i8]| codes.iter().map(|&q| q as u8).collect::<Vec<u8>>();
            let (codes, scales) = match form {
                Int8Form::W16A16 | Int8Form::W8A16E => quantize_rows_i8_two_terms(&values, cols),
                Int8Form::W8A8 | Int8Form::W8A16 => quantize_rows_i8(&values, cols),
            };
            let scales = scales.iter().flat_map(|x| x.to_le_bytes()).collect();
            Ok(match form {
                // Each row's two halves as two parts: the codes, the rest.
                Int8Form::W8A16E => {
                    let (first, rest): (Vec<_>, Vec<_>) = codes
                        .chunks(2 * cols.max(1))
                        .map(|row| row.split_at(cols))
                        .unzip();
                    vec![bytes(&first.concat()), scales, bytes(&rest.concat())]
                }
                _ => vec![bytes(&codes), scales],
            })
        }
    }
}

/// A 4-bit matrix's stored parts ([`Storage::Int4Blocks`]) from its
/// GGUF blocks `raw` and their block-form parts (`.qs` words, `.scale`,
/// `.min`: [`blocks::repack`]): each unsigned code `u` as the i4 `u − 8`
/// (the nibble `u ^ 8`; the words' bytes already hold the codes two per
/// byte, the first in the low nibble, as IREE packs i4); then Q4_0's and
/// Q4_1's f16 scales and minimums as they are, or Q4_K's 6-bit ones and
/// its super-blocks' `d` and `dmin` ([`blocks::q4_k_scale_parts`]).
fn int4_parts(form: &Int4Form, raw: &[u8], parts: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String> {
    let mut it = parts.into_iter();
    let codes = it.next().expect("a .qs part");
    let mut out = vec![codes.into_iter().map(|b| b ^ 0x88).collect()];
    if form.super_blocks {
        out.extend(blocks::q4_k_scale_parts(raw)?);
    } else {
        out.extend(it);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::Int4Form;
    use crate::params::blocks::tests::blocks;
    use crate::params::quant::dequantize;

    /// `w4a16`'s parts of Q4_0, Q4_1 and Q4_K rows widen as
    /// [`crate::graph::Graph::widen_i4_rows`] widens them, `(c + 8 −
    /// zero)·scale + min` with `c` the low nibble first (Q4_K's scale
    /// `d·sc` and minimum `−dmin·m` formed in f32 as
    /// [`crate::graph::Graph::super_block_scales`] forms them), to
    /// `gguf.quants.dequantize`'s values, bit for bit (a zero's sign
    /// aside).
    #[test]
    fn int4_parts_keep_the_gguf_codes() {
        let f16s = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect()
        };
        for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K] {
            let form = Int4Form::of(ty).unwrap();
            let block = BlockForm::of(ty).unwrap();
            let (rows, cols) = (3, 512);
            let raw = blocks(ty, rows * cols / block.block(), 7);
            let mut want = vec![0f32; rows * cols];
            dequantize(ty, &raw, &mut want).unwrap();
            let repacked = blocks::repack(&block, &raw, rows, cols, None).unwrap();
            let parts = int4_parts(&form, &raw, repacked).unwrap();
            let specs = form.parts(cols);
            assert_eq!(parts.len(), specs.len(), "{ty}");
            for (p, (suffix, dtype, n)) in parts.iter().zip(&specs) {
                assert_eq!(p.len(), dtype.bytes(rows * n), "{ty} .{suffix}");
            }
            let (scale, min): (Vec<f32>, Option<Vec<f32>>) = if form.super_blocks {
                let (d, dmin) = (f16s(&parts[3]), f16s(&parts[4]));
                let per = Int4Form::SUPER / Int4Form::GROUP;
                let times = |sub: &[u8], d: &[f32], sign: f32| -> Vec<f32> {
                    let v = sub.iter().enumerate().map(|(g, &q)| d[g / per] * q as f32);
                    v.map(|x| sign * x).collect()
                };
                (
                    times(&parts[1], &d, 1.0),
                    Some(times(&parts[2], &dmin, -1.0)),
                )
            } else {
                (f16s(&parts[1]), parts.get(2).map(|m| f16s(m)))
            };
            for (i, &w) in want.iter().enumerate() {
                let nibble = (parts[0][i / 2] >> (4 * (i % 2))) & 15;
                let c = ((nibble << 4) as i8 >> 4) as f32;
                let g = i / Int4Form::GROUP;
                let (s, m) = (scale[g], min.as_ref().map_or(0.0, |m| m[g]));
                let got = (c + 8.0 - form.zero as f32) * s + m;
                assert!(got == w, "{ty} element {i}: {got} against {w}");
            }
        }
    }
}
