//! Element conversions between f32 and the 16-bit float formats, and the
//! encoding of f32 weights as stored bytes ([`encode_weights`]).
//!
//! f32 → bf16 and f32 → f16 round to nearest, ties to even; overflow rounds
//! to infinity; NaN stays NaN (sign and the top payload bits kept, quiet bit
//! set, so a NaN never turns into an infinity). bf16 → f32 and f16 → f32 are
//! exact. Bytes are little-endian throughout, as in every format kiln reads.

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};

/// Converts one f32 to bf16 bits, rounding to nearest even.
#[inline]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if (b & 0x7fff_ffff) > 0x7f80_0000 {
        // NaN: truncate the payload and force it quiet.
        return ((b >> 16) | 0x0040) as u16;
    }
    let rounding = 0x7fff + ((b >> 16) & 1);
    (b.wrapping_add(rounding) >> 16) as u16
}

/// Converts bf16 bits to f32 (exact).
#[inline]
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Converts one f32 to f16 bits, rounding to nearest even.
#[inline]
pub fn f32_to_f16_bits(x: f32) -> u16 {
    f16::from_f32(x).to_bits()
}

/// Converts f16 bits to f32 (exact).
#[inline]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    f16::from_bits(h).to_f32()
}

/// Bulk f32 → bf16 (bits), round to nearest even. Panics if lengths differ.
pub fn f32_to_bf16_rne(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_bf16_rne: length mismatch");
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f32_to_bf16_bits(s);
    }
}

/// Bulk f32 → f16 (bits), round to nearest even. Panics if lengths differ.
pub fn f32_to_f16(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_f16: length mismatch");
    let out: &mut [f16] = dst.reinterpret_cast_mut();
    out.convert_from_f32_slice(src);
}

/// Bulk bf16 (bits) → f32, exact. Panics if lengths differ.
pub fn bf16_to_f32(src: &[u16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "bf16_to_f32: length mismatch");
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = bf16_bits_to_f32(s);
    }
}

/// Bulk f16 (bits) → f32, exact. Panics if lengths differ.
pub fn f16_to_f32(src: &[u16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16_to_f32: length mismatch");
    let inp: &[f16] = src.reinterpret_cast();
    inp.convert_to_f32_slice(dst);
}

/// Decodes little-endian f16 bytes (any alignment) into `dst`, through a
/// small aligned buffer so `half` can use the F16C instructions when present.
pub fn f16_bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    let mut buf = [f16::ZERO; 256];
    for (d, s) in dst.chunks_mut(256).zip(src.chunks(512)) {
        let n = d.len().min(s.len() / 2);
        for (b, c) in buf[..n].iter_mut().zip(s.chunks_exact(2)) {
            *b = f16::from_bits(u16::from_le_bytes([c[0], c[1]]));
        }
        buf[..n].convert_to_f32_slice(&mut d[..n]);
    }
}

/// Reads little-endian u16s from bytes (any alignment).
pub fn le_u16s(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
}

/// Decodes little-endian elements of `dtype` to f32 (exact for every float
/// type but f64, which rounds; integers convert as `as f32`).
pub fn bytes_to_f32(dtype: crate::params::DType, bytes: &[u8], out: &mut Vec<f32>) {
    use crate::params::DType as D;
    out.clear();
    out.reserve(bytes.len() / dtype.size());
    match dtype {
        D::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        D::F64 => out.extend(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32),
        ),
        D::BF16 => out.extend(le_u16s(bytes).map(bf16_bits_to_f32)),
        D::F16 => {
            out.resize(bytes.len() / 2, 0.0);
            f16_bytes_to_f32(bytes, out);
        }
        D::I64 => out.extend(
            bytes
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32),
        ),
        D::I32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32),
        ),
        D::I16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as f32),
        ),
        D::I8 => out.extend(bytes.iter().map(|&b| b as i8 as f32)),
        D::U8 | D::Bool => out.extend(bytes.iter().map(|&b| b as f32)),
    }
}

/// Encodes f32 values as little-endian bytes of a float `dtype`
/// (F32, F16, BF16 or F64), appending to `out`. Returns false for other dtypes.
pub fn f32_to_bytes(dtype: crate::params::DType, src: &[f32], out: &mut Vec<u8>) -> bool {
    use crate::params::DType as D;
    match dtype {
        D::F32 => src
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        D::F64 => src
            .iter()
            .for_each(|&x| out.extend_from_slice(&(x as f64).to_le_bytes())),
        D::BF16 => src
            .iter()
            .for_each(|&x| out.extend_from_slice(&f32_to_bf16_bits(x).to_le_bytes())),
        D::F16 => {
            let mut tmp = vec![0u16; src.len()];
            f32_to_f16(src, &mut tmp);
            tmp.iter()
                .for_each(|h| out.extend_from_slice(&h.to_le_bytes()));
        }
        _ => return false,
    }
    true
}

/// The `half` crate's bf16 for `bits` (convenience for callers using `half`).
pub fn bf16_from_bits(bits: u16) -> bf16 {
    bf16::from_bits(bits)
}

/// Encodes f32 weights as the stored little-endian bytes of `dtype`: f32,
/// or bf16 and f16 (rounded to nearest even, in parallel chunks, each
/// element as [`f32_to_bf16_bits`] or [`f32_to_f16_bits`] rounds it).
/// `None` for any other dtype.
pub fn encode_weights(values: &[f32], dtype: impl Into<crate::params::DType>) -> Option<Vec<u8>> {
    use crate::params::DType as D;
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 16;
    let dtype = dtype.into();
    match dtype {
        D::F32 => Some(values.iter().flat_map(|x| x.to_le_bytes()).collect()),
        D::BF16 | D::F16 => {
            // One pass straight into the little-endian bytes.
            let one: fn(f32) -> u16 = if dtype == D::BF16 {
                f32_to_bf16_bits
            } else {
                f32_to_f16_bits
            };
            let mut out = vec![0u8; values.len() * 2];
            out.par_chunks_mut(CHUNK * 2)
                .zip(values.par_chunks(CHUNK))
                .for_each(|(o, s)| {
                    for (d, &x) in o.chunks_exact_mut(2).zip(s) {
                        d.copy_from_slice(&one(x).to_le_bytes());
                    }
                });
            Some(out)
        }
        _ => None,
    }
}

/// Little-endian stored values as f64: i32 and f16 exactly, every other
/// dtype read as 4-byte f32 values.
pub fn bytes_to_f64(dtype: crate::params::DType, bytes: &[u8]) -> Vec<f64> {
    use crate::params::DType as D;
    match dtype {
        D::I32 => bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        D::F16 => bytes
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunked encoder gives each element's own rounding, in order,
    /// across chunk boundaries and a ragged tail.
    #[test]
    fn encode_weights_matches_per_element_rounding() {
        use crate::params::DType;
        let n = (1 << 16) * 2 + 1500; // two full chunks and a ragged tail
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut values: Vec<f32> = (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                f32::from_bits(state as u32)
            })
            .collect();
        values[..6].copy_from_slice(&[
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NAN,
            1.0 + f32::EPSILON,
            65520.0,
        ]);
        for (dtype, one) in [
            (DType::BF16, f32_to_bf16_bits as fn(f32) -> u16),
            (DType::F16, f32_to_f16_bits as fn(f32) -> u16),
        ] {
            let bytes = encode_weights(&values, dtype).unwrap();
            assert_eq!(bytes.len(), 2 * n);
            for (i, (b, &v)) in bytes.chunks_exact(2).zip(&values).enumerate() {
                assert_eq!(
                    u16::from_le_bytes([b[0], b[1]]),
                    one(v),
                    "{dtype} element {i} ({v})"
                );
            }
        }
        let f32_bytes = encode_weights(&values[..3], DType::F32).unwrap();
        assert_eq!(
            f32_bytes,
            [0.0f32, -0.0, f32::INFINITY]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<_>>()
        );
        assert_eq!(encode_weights(&values[..3], DType::I32), None);
    }
}
