//! Element conversions between f32 and the 16-bit float formats, and the
//! encoding of f32 weights as stored bytes ([`encode_weights`]).
//!
//! f32 → bf16 and f32 → f16 round to nearest, ties to even; overflow rounds
//! to infinity; NaN stays NaN (sign and the top payload bits kept, quiet bit
//! set, so a NaN never turns into an infinity). bf16 → f32 and f16 → f32 are
//! exact. Bytes are little-endian throughout, as in every format kiln reads.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

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

/// Bulk f32 → f16 (bits), round to nearest even. Panics if lengths differ.
pub fn f32_to_f16(src: &[f32], dst: &mut [u16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_f16: length mismatch");
    let out: &mut [f16] = dst.reinterpret_cast_mut();
    out.convert_from_f32_slice(src);
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

impl crate::params::DType {
    /// Encodes f32 weights as the stored little-endian bytes of this dtype:
    /// f32, or bf16 and f16 (rounded to nearest even). `None` for any
    /// other dtype.
    pub fn encode_weights(self, values: &[f32]) -> Option<Vec<u8>> {
        encode_weights(values, self)
    }
}

/// Encodes f32 weights as the stored little-endian bytes of `dtype`: f32,
/// or bf16 and f16 (rounded to nearest even, in parallel chunks, each
/// element as `f32_to_bf16_bits` or `f32_to_f16_bits` rounds it).
/// `None` for any other dtype.
pub(crate) fn encode_weights(
    values: &[f32],
    dtype: impl Into<crate::params::DType>,
) -> Option<Vec<u8>> {
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

/// Little-endian `bytes` of `dtype` as f64 values, exactly (every dtype a
/// parameter part can have: floats, integers, booleans). A ragged tail
/// shorter than one element is ignored.
pub fn bytes_to_f64(dtype: crate::params::DType, bytes: &[u8]) -> Vec<f64> {
    use crate::params::DType as D;
    use byteorder::{ByteOrder, LittleEndian as LE};
    fn each<const N: usize>(bytes: &[u8], f: impl Fn(&[u8]) -> f64) -> Vec<f64> {
        bytes.chunks_exact(N).map(f).collect()
    }
    match dtype {
        D::F64 => each::<8>(bytes, LE::read_f64),
        D::F32 => each::<4>(bytes, |c| LE::read_f32(c) as f64),
        D::F16 => each::<2>(bytes, |c| f16::from_bits(LE::read_u16(c)).to_f64()),
        D::BF16 => each::<2>(bytes, |c| half::bf16::from_bits(LE::read_u16(c)).to_f64()),
        D::I64 => each::<8>(bytes, |c| LE::read_i64(c) as f64),
        D::I32 => each::<4>(bytes, |c| LE::read_i32(c) as f64),
        D::I16 => each::<2>(bytes, |c| LE::read_i16(c) as f64),
        D::I8 => bytes.iter().map(|&b| b as i8 as f64).collect(),
        D::U8 | D::Bool => bytes.iter().map(|&b| b as f64).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every dtype reads back exactly, little-endian, signed where signed.
    #[test]
    fn bytes_to_f64_reads_every_dtype() {
        use crate::params::DType as D;
        assert_eq!(
            bytes_to_f64(D::I8, &[0x80, 0x7f, 0xff]),
            [-128.0, 127.0, -1.0]
        );
        assert_eq!(bytes_to_f64(D::U8, &[0x80, 0xff]), [128.0, 255.0]);
        assert_eq!(bytes_to_f64(D::Bool, &[0, 1]), [0.0, 1.0]);
        assert_eq!(bytes_to_f64(D::I16, &(-300i16).to_le_bytes()), [-300.0]);
        assert_eq!(bytes_to_f64(D::I32, &(-70000i32).to_le_bytes()), [-70000.0]);
        assert_eq!(
            bytes_to_f64(D::I64, &(-(1i64 << 40)).to_le_bytes()),
            [-(2f64.powi(40))]
        );
        assert_eq!(bytes_to_f64(D::F64, &0.1f64.to_le_bytes()), [0.1]);
        assert_eq!(bytes_to_f64(D::F32, &1.5f32.to_le_bytes()), [1.5]);
        assert_eq!(
            bytes_to_f64(D::F16, &f16::from_f32(-2.5).to_le_bytes()),
            [-2.5]
        );
        let bf = half::bf16::from_f32(3.0).to_bits().to_le_bytes();
        assert_eq!(bytes_to_f64(D::BF16, &bf), [3.0]);
    }

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

    // f32 ⇄ bf16/f16 on edge values.

    fn bf16(x: u32) -> u16 {
        f32_to_bf16_bits(f32::from_bits(x))
    }
    fn f16(x: f32) -> u16 {
        f32_to_f16_bits(x)
    }

    #[test]
    fn bf16_round_to_nearest_even() {
        assert_eq!(bf16(0x3f80_0000), 0x3f80); // 1.0
        assert_eq!(bf16(0x3f80_8000), 0x3f80); // tie, even stays
        assert_eq!(bf16(0x3f81_8000), 0x3f82); // tie, odd rounds up
        assert_eq!(bf16(0x3f80_8001), 0x3f81); // above the tie
        assert_eq!(bf16(0x3f80_7fff), 0x3f80); // below the tie
        assert_eq!(bf16(0xbf81_8000), 0xbf82); // negative tie
        assert_eq!(bf16(0x7f7f_ffff), 0x7f80); // f32::MAX rounds to +inf
        assert_eq!(bf16(0x7f7f_7fff), 0x7f7f); // largest value that stays finite
        assert_eq!(bf16(0x7f80_0000), 0x7f80); // +inf
        assert_eq!(bf16(0xff80_0000), 0xff80); // -inf
        assert_eq!(bf16(0x0000_0000), 0x0000);
        assert_eq!(bf16(0x8000_0000), 0x8000); // -0
                                               // Subnormals.
        assert_eq!(bf16(0x0000_0001), 0x0000);
        assert_eq!(bf16(0x0000_8000), 0x0000); // tie to even (0)
        assert_eq!(bf16(0x0001_8000), 0x0002); // tie to even (2)
        assert_eq!(bf16(0x007f_ffff), 0x0080); // largest subnormal rounds to the smallest normal
    }

    #[test]
    fn bf16_nan_stays_nan_with_payload() {
        assert_eq!(bf16(0x7fc0_0000), 0x7fc0);
        assert_eq!(bf16(0x7fc0_0001), 0x7fc0); // low payload bits are dropped, not rounded into inf
        assert_eq!(bf16(0x7f80_0001), 0x7fc0); // signalling NaN with only low bits: quiet NaN, not inf
        assert_eq!(bf16(0x7fa5_0000), 0x7fe5); // high payload kept, quieted
        assert_eq!(bf16(0xffff_ffff), 0xffff); // sign and payload kept
        assert_eq!(bf16(0x7fff_ffff), 0x7fff); // must not carry into the sign bit
        for bits in [0x7f80_0001u32, 0x7fbf_ffff, 0xff80_0001, 0x7fff_8000] {
            assert!(bf16_bits_to_f32(bf16(bits)).is_nan(), "{bits:#x}");
        }
    }

    #[test]
    fn bf16_matches_half_crate_on_a_sweep() {
        let mut x = 0x9e37_79b9u32;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let f = f32::from_bits(x);
            if f.is_nan() {
                continue;
            }
            assert_eq!(bf16(x), half::bf16::from_f32(f).to_bits(), "{x:#x}");
        }
    }

    #[test]
    fn f16_round_to_nearest_even() {
        assert_eq!(f16(1.0), 0x3c00);
        assert_eq!(f16(65504.0), 0x7bff); // max
        assert_eq!(f16(65519.99), 0x7bff); // below the tie
        assert_eq!(f16(65520.0), 0x7c00); // tie above max rounds to inf
        assert_eq!(f16(f32::MAX), 0x7c00);
        assert_eq!(f16(-f32::INFINITY), 0xfc00);
        assert_eq!(f16(1.0 + 1.0 / 2048.0), 0x3c00); // tie to even
        assert_eq!(f16(1.0 + 3.0 / 2048.0), 0x3c02); // tie to even (up)
        assert_eq!(f16(5.960_464_5e-8), 0x0001); // smallest subnormal
        assert_eq!(f16(2.980_232_2e-8), 0x0000); // half of it: tie to even (0)
        assert_eq!(f16(8.940_697e-8), 0x0002); // 1.5 × smallest: tie to even (2)
        assert_eq!(f16(6.097_555e-5), 0x03ff); // largest subnormal
        assert_eq!(f16(-0.0), 0x8000);
        assert!(f16_bits_to_f32(f16(f32::NAN)).is_nan());
        assert!(f16_bits_to_f32(f16(f32::from_bits(0x7f80_0001))).is_nan());
        assert_eq!(
            f16(f32::from_bits(0xffc0_0000)) & 0x8000,
            0x8000,
            "NaN sign kept"
        );
    }

    #[test]
    fn sixteen_bit_to_f32_is_exact_and_round_trips() {
        for h in 0..=u16::MAX {
            let f = bf16_bits_to_f32(h);
            assert_eq!(f.to_bits(), (h as u32) << 16);
            let b = f32_to_bf16_bits(f);
            if !f.is_nan() || h & 0x0040 != 0 {
                assert_eq!(b, h, "bf16 {h:#x}");
            } else {
                assert!(bf16_bits_to_f32(b).is_nan());
            }
        }
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let f: Vec<f32> = all.iter().map(|&h| f16_bits_to_f32(h)).collect();
        let mut back = vec![0u16; all.len()];
        f32_to_f16(&f, &mut back);
        for (i, (&h, &b)) in all.iter().zip(&back).enumerate() {
            assert_eq!(f[i].to_bits(), half::f16::from_bits(h).to_f32().to_bits());
            if f[i].is_nan() {
                assert!(f16_bits_to_f32(b).is_nan(), "f16 {h:#x}");
            } else {
                assert_eq!(b, h, "f16 {h:#x}");
            }
        }
        // Known values.
        assert_eq!(f16_bits_to_f32(0x0001), 5.960_464_5e-8);
        assert_eq!(f16_bits_to_f32(0x7bff), 65504.0);
        assert_eq!(bf16_bits_to_f32(0x7f7f), 3.389_531_4e38);
    }
}
