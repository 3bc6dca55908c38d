//! Element conversions between f32 and the 16-bit float formats.
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
