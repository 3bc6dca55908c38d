//! Parameter files (`.irpa`, `.safetensors`, `.gguf`) as interpreter
//! [`ParamSource`]s, read through kiln's codecs in [`crate::params`]
//! (`<dyn params::ParamSource>::open(path)`): the
//! file is memory-mapped and each tensor is converted to f32 only when the
//! graph loads it (and dropped after its last use), so the whole model is
//! never copied at once.

use super::{InterpError, ParamSource, Result, Tensor};
use crate::graph::{DType, TensorType};

fn decode_raw(bytes: &[u8], ty: &TensorType) -> Option<Tensor> {
    let shape: Vec<usize> = ty.shape.to_vec();
    if bytes.len() != ty.byte_size() {
        return None;
    }
    let u16s = || {
        bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
    };
    let u32s = || {
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    };
    Some(match ty.dtype {
        DType::F32 => Tensor::f32(&shape, u32s().map(f32::from_bits).collect()),
        DType::BF16 => Tensor::f32(
            &shape,
            u16s().map(|b| half::bf16::from_bits(b).to_f32()).collect(),
        ),
        DType::F16 => Tensor::f32(
            &shape,
            u16s().map(|b| half::f16::from_bits(b).to_f32()).collect(),
        ),
        DType::I32 => Tensor::i32(&shape, u32s().map(|u| u as i32).collect()),
        DType::I16 => Tensor::i32(&shape, u16s().map(|u| u as i16 as i32).collect()),
        DType::I8 => Tensor::i32(&shape, bytes.iter().map(|&b| b as i8 as i32).collect()),
        // Two per byte, the low nibble first, each sign-extended.
        DType::I4 => Tensor::i32(
            &shape,
            bytes
                .iter()
                .flat_map(|&b| [((b << 4) as i8 >> 4) as i32, (b as i8 >> 4) as i32])
                .take(ty.numel())
                .collect(),
        ),
        DType::I1 => Tensor::i1(&shape, bytes.iter().map(|&b| b != 0).collect()),
    })
}

/// Whether entries stored as `stored` can be read as elements of the
/// declared `dtype`: the same type, or a bf16 weight declared by its bits
/// (i16) or as i32 pairs (`Graph::weight`, the Vulkan lowering).
fn reads_as(stored: crate::params::DType, dtype: DType) -> bool {
    use crate::params::DType as P;
    matches!(
        (stored, dtype),
        (P::F32, DType::F32)
            | (P::BF16, DType::BF16)
            | (P::F16, DType::F16)
            | (P::I32 | P::BF16 | P::I16, DType::I32)
            | (P::BF16 | P::I16, DType::I16)
            | (P::I8, DType::I8)
            | (P::U8, DType::I4)
            | (P::Bool, DType::I1)
    )
}

/// The error for tensor `key` of the file `src`, stored as `meta`, read
/// as `ty` (from byte `offset` of it, for a part).
fn mismatch(
    src: &dyn crate::params::ParamSource,
    key: &str,
    meta: &crate::params::TensorMeta,
    ty: &TensorType,
    offset: Option<u64>,
) -> InterpError {
    InterpError::ParameterType {
        key: key.to_string(),
        file: Some(src.path().to_path_buf()),
        found: format!("{} {:?} ({} bytes)", meta.dtype, meta.shape, meta.nbytes),
        expected: Box::new(ty.clone()),
        offset,
    }
}

/// A parameter file opened with `<dyn params::ParamSource>::open(path)`
/// ([`crate::params::ParamSource`]) feeds the interpreter.
impl ParamSource for Box<dyn crate::params::ParamSource> {
    fn load(&self, key: &str, ty: &TensorType) -> Result<Tensor> {
        let src: &dyn crate::params::ParamSource = &**self;
        let meta = src.meta(key).ok_or_else(|| InterpError::NoParameter {
            key: key.to_string(),
            file: Some(src.path().to_path_buf()),
        })?;
        let shape_ok = meta.shape.len() == ty.rank()
            && meta
                .shape
                .iter()
                .zip(&ty.shape)
                .all(|(&a, &b)| a == b as u64);
        let plain = meta.dtype.plain();
        // bf16 weights with an even element count are declared as i32
        // pairs over the same bytes (`Graph::weight`).
        let file_shape: Vec<usize> = meta.shape.iter().map(|&d| d as usize).collect();
        let bf16_pairs = matches!(
            plain,
            Some(crate::params::DType::BF16 | crate::params::DType::I16)
        ) && ty.dtype == DType::I32
            && crate::graph::bf16_pairs_shape(&file_shape).as_deref() == Some(&ty.shape[..]);
        let same_dtype = plain.is_some_and(|p| reads_as(p, ty.dtype));
        if shape_ok && same_dtype && ty.dtype.is_float() {
            let data = src.to_f32(key)?;
            return Ok(Tensor::f32(&ty.shape, data));
        }
        // Same bytes, typed by the graph: integer tensors, bf16 pairs, and
        // IRPA entries that carry no dtype (listed as `[bytes]`).
        // An i4 tensor's bytes, two codes each, are stored as u8.
        let nibbles = ty.dtype == DType::I4 && same_dtype && meta.nbytes == ty.byte_size() as u64;
        if (shape_ok && same_dtype) || bf16_pairs || nibbles || plain.is_none() {
            let raw = src.raw(key)?;
            if let Some(t) = decode_raw(&raw, ty) {
                return Ok(t);
            }
        }
        Err(mismatch(src, key, meta, ty, None))
    }

    fn load_part(&self, key: &str, ty: &TensorType, offset: u64) -> Result<Tensor> {
        let src: &dyn crate::params::ParamSource = &**self;
        let meta = src.meta(key).ok_or_else(|| InterpError::NoParameter {
            key: key.to_string(),
            file: Some(src.path().to_path_buf()),
        })?;
        let len = ty.byte_size() as u64;
        // A part is typed by the graph over the stored bytes (bytes of an
        // entry without a dtype too); quantized GGUF blocks are not.
        let bytes_ok = match meta.dtype {
            crate::params::SourceDType::Ggml(g) if g.plain().is_none() => false,
            d => d.plain().is_none_or(|p| reads_as(p, ty.dtype)),
        };
        if bytes_ok {
            if offset.checked_add(len).is_none_or(|end| end > meta.nbytes) {
                return Err(mismatch(src, key, meta, ty, Some(offset)));
            }
            let raw = src.raw(key)?;
            let part = &raw[offset as usize..(offset + len) as usize];
            if let Some(t) = decode_raw(part, ty) {
                return Ok(t);
            }
        }
        // A quantized GGUF tensor: dequantize it and take the elements the
        // part covers, counted in the declared element size.
        if ty.dtype.is_float() {
            let size = ty.dtype.size() as u64;
            let numel = ty.numel();
            let values = src.to_f32(key)?;
            let start = (offset / size) as usize;
            if offset % size == 0 && start.checked_add(numel).is_some_and(|e| e <= values.len()) {
                return Ok(Tensor::f32(
                    &ty.shape,
                    values[start..start + numel].to_vec(),
                ));
            }
        }
        Err(mismatch(src, key, meta, ty, Some(offset)))
    }
}
