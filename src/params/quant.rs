//! GGML block dequantization kernels (f32 output), bit-exact with the
//! `gguf` Python package's `gguf.quants.dequantize` (same operation order,
//! no fused multiply-add). Work is split across rayon by runs of blocks;
//! nothing is allocated per element. Also kiln's own i8 rows
//! ([`quantize_rows_i8`], `kiln export --weights w8a8`).

use super::convert::{bf16_bits_to_f32, f16_bits_to_f32};
use super::gguf::GgmlType;
use rayon::prelude::*;

#[inline]
pub(super) fn f16_at(b: &[u8], o: usize) -> f32 {
    f16_bits_to_f32(u16::from_le_bytes([b[o], b[o + 1]]))
}

/// The archive parts of a matrix stored as i8 rows, each `NAME.<suffix>`:
/// the codes (i8 `[rows, K]`) and one f32 scale per row (`[rows, 1]`),
/// as [`quantize_rows_i8`] makes them.
pub const I8_ROWS_PARTS: [&str; 2] = ["q8", "scale"];

/// The codes part of a matrix stored as i8 rows in two terms
/// (`kiln export --weights w16a16`): i8 `[rows, 2·K]`, each row's codes
/// ([`quantize_rows_i8`]'s) followed by those of its rounding error
/// ([`quantize_rows_i8_two_terms`]); the scale part is the same.
pub const I8_TWO_TERM_CODES: &str = "q8x2";

/// The part of a matrix stored as i8 rows that holds the codes of each
/// row's rounding error (`kiln export --weights w8a16e`): i8 `[rows, K]`,
/// the second half of [`quantize_rows_i8_two_terms`]'s rows, beside the
/// `q8` codes and the scales.
pub const I8_REST_CODES: &str = "q8lo";

/// Rounds each row of `cols` values to two i8 terms with one f32 scale
/// per row: `q₁` and `scale` as [`quantize_rows_i8`] makes them, then
/// `q₂ = round_ties_even((w/scale − q₁)·254)` (in [−127, 127], since
/// `|w/scale − q₁| ≤ ½`), so `w ≈ scale·(q₁ + q₂/254)`. Each row of the
/// codes is `q₁` then `q₂` (`2·cols` codes per row).
pub fn quantize_rows_i8_two_terms(values: &[f32], cols: usize) -> (Vec<i8>, Vec<f32>) {
    let (first, scales) = quantize_rows_i8(values, cols);
    let cols = cols.max(1);
    let mut codes = Vec::with_capacity(2 * values.len());
    for ((row, q1), &scale) in values.chunks(cols).zip(first.chunks(cols)).zip(&scales) {
        codes.extend_from_slice(q1);
        codes.extend(row.iter().zip(q1).map(|(&x, &q)| {
            if scale == 0.0 {
                0
            } else {
                ((x / scale - f32::from(q)) * 254.0)
                    .round_ties_even()
                    .clamp(-127.0, 127.0) as i8
            }
        }));
    }
    (codes, scales)
}

/// Rounds each row of `cols` values to i8 codes with one f32 scale per
/// row, `max|w|/127` (0 for an all-zero row): `w ≈ code · scale`, the
/// codes `round_ties_even(w / scale)`.
pub fn quantize_rows_i8(values: &[f32], cols: usize) -> (Vec<i8>, Vec<f32>) {
    let mut codes = Vec::with_capacity(values.len());
    let mut scales = Vec::with_capacity(values.len() / cols.max(1));
    for row in values.chunks(cols.max(1)) {
        let amax = row.iter().fold(0f32, |m, &x| m.max(x.abs()));
        let scale = amax / 127.0;
        scales.push(scale);
        codes.extend(row.iter().map(|&x| {
            if scale == 0.0 {
                0
            } else {
                (x / scale).round_ties_even().clamp(-127.0, 127.0) as i8
            }
        }));
    }
    (codes, scales)
}

type Kernel = fn(&[u8], &mut [f32]);

fn kernel(ty: GgmlType) -> Option<Kernel> {
    use GgmlType as G;
    Some(match ty {
        G::F32 => deq_f32,
        G::F16 => deq_f16,
        G::BF16 => deq_bf16,
        G::F64 => deq_f64,
        G::I8 => deq_i8,
        G::I16 => deq_i16,
        G::I32 => deq_i32,
        G::Q8_0 => deq_q8_0,
        G::Q4_0 => deq_q4_0,
        G::Q4_1 => deq_q4_1,
        G::Q5_0 => deq_q5_0,
        G::Q5_1 => deq_q5_1,
        G::Q4_K => deq_q4_k,
        G::Q5_K => deq_q5_k,
        G::Q6_K => deq_q6_k,
        _ => return None,
    })
}

impl GgmlType {
    /// Dequantizes `src` (whole blocks of this type) into `dst`. Returns
    /// an error message when the type is unsupported or the sizes disagree.
    pub fn dequantize(self, src: &[u8], dst: &mut [f32]) -> Result<(), String> {
        dequantize(self, src, dst)
    }
}

/// Dequantizes `src` (whole blocks of `ty`) into `dst`. Returns an error
/// message when the type is unsupported or the sizes disagree.
pub(crate) fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), String> {
    let k = kernel(ty).ok_or_else(|| format!("dequantization of {ty} is not supported"))?;
    let (bs, ts) = (ty.block_size() as usize, ty.type_size() as usize);
    if dst.len() % bs != 0 || src.len() != dst.len() / bs * ts {
        return Err(format!(
            "{} bytes of {ty} cannot hold {} elements",
            src.len(),
            dst.len()
        ));
    }
    // About 16k elements per task: big enough to amortize scheduling.
    let blocks = (16384 / bs).max(1);
    dst.par_chunks_mut(blocks * bs)
        .zip(src.par_chunks(blocks * ts))
        .for_each(|(d, s)| k(s, d));
    Ok(())
}

fn deq_f32(s: &[u8], d: &mut [f32]) {
    for (y, c) in d.iter_mut().zip(s.chunks_exact(4)) {
        *y = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}
fn deq_f16(s: &[u8], d: &mut [f32]) {
    super::convert::f16_bytes_to_f32(s, d);
}
fn deq_bf16(s: &[u8], d: &mut [f32]) {
    for (y, c) in d.iter_mut().zip(s.chunks_exact(2)) {
        *y = bf16_bits_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}
fn deq_f64(s: &[u8], d: &mut [f32]) {
    for (y, c) in d.iter_mut().zip(s.chunks_exact(8)) {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        *y = f64::from_le_bytes(a) as f32;
    }
}
fn deq_i8(s: &[u8], d: &mut [f32]) {
    for (y, &c) in d.iter_mut().zip(s) {
        *y = c as i8 as f32;
    }
}
fn deq_i16(s: &[u8], d: &mut [f32]) {
    for (y, c) in d.iter_mut().zip(s.chunks_exact(2)) {
        *y = i16::from_le_bytes([c[0], c[1]]) as f32;
    }
}
fn deq_i32(s: &[u8], d: &mut [f32]) {
    for (y, c) in d.iter_mut().zip(s.chunks_exact(4)) {
        *y = i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32;
    }
}

/// Q8_0: f16 d, 32 × i8; x = q·d.
fn deq_q8_0(s: &[u8], d: &mut [f32]) {
    for (y, b) in d.chunks_exact_mut(32).zip(s.chunks_exact(34)) {
        let sc = f16_at(b, 0);
        for (yi, &q) in y.iter_mut().zip(&b[2..34]) {
            *yi = (q as i8 as f32) * sc;
        }
    }
}

/// Q4_0: f16 d, 16 bytes; x = d·(q − 8), low nibbles first.
fn deq_q4_0(s: &[u8], d: &mut [f32]) {
    for (y, b) in d.chunks_exact_mut(32).zip(s.chunks_exact(18)) {
        let sc = f16_at(b, 0);
        let (lo, hi) = y.split_at_mut(16);
        for j in 0..16 {
            let q = b[2 + j];
            lo[j] = sc * ((q & 0x0f) as i32 - 8) as f32;
            hi[j] = sc * ((q >> 4) as i32 - 8) as f32;
        }
    }
}

/// Q4_1: f16 d, f16 m, 16 bytes; x = d·q + m.
fn deq_q4_1(s: &[u8], d: &mut [f32]) {
    for (y, b) in d.chunks_exact_mut(32).zip(s.chunks_exact(20)) {
        let sc = f16_at(b, 0);
        let m = f16_at(b, 2);
        let (lo, hi) = y.split_at_mut(16);
        for j in 0..16 {
            let q = b[4 + j];
            lo[j] = sc * ((q & 0x0f) as f32) + m;
            hi[j] = sc * ((q >> 4) as f32) + m;
        }
    }
}

/// Q5_0: f16 d, u32 high bits, 16 bytes; x = d·(q − 16).
fn deq_q5_0(s: &[u8], d: &mut [f32]) {
    for (y, b) in d.chunks_exact_mut(32).zip(s.chunks_exact(22)) {
        let sc = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let (lo, hi) = y.split_at_mut(16);
        for j in 0..16 {
            let q = b[6 + j];
            let l = (q & 0x0f) as u32 | (((qh >> j) & 1) << 4);
            let h = (q >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
            lo[j] = sc * (l as i32 - 16) as f32;
            hi[j] = sc * (h as i32 - 16) as f32;
        }
    }
}

/// Q5_1: f16 d, f16 m, u32 high bits, 16 bytes; x = d·q + m.
fn deq_q5_1(s: &[u8], d: &mut [f32]) {
    for (y, b) in d.chunks_exact_mut(32).zip(s.chunks_exact(24)) {
        let sc = f16_at(b, 0);
        let m = f16_at(b, 2);
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let (lo, hi) = y.split_at_mut(16);
        for j in 0..16 {
            let q = b[8 + j];
            let l = (q & 0x0f) as u32 | (((qh >> j) & 1) << 4);
            let h = (q >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
            lo[j] = sc * l as f32 + m;
            hi[j] = sc * h as f32 + m;
        }
    }
}

/// The eight 6-bit scales and mins of a Q4_K/Q5_K super-block.
#[inline]
pub(super) fn scale_min_k4(sc: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut s = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        s[j] = sc[j] & 0x3f;
        m[j] = sc[j + 4] & 0x3f;
        s[j + 4] = (sc[j + 8] & 0x0f) | ((sc[j] >> 2) & 0x30);
        m[j + 4] = (sc[j + 8] >> 4) | ((sc[j + 4] >> 2) & 0x30);
    }
    (s, m)
}

/// Q4_K: 256-element super-blocks of eight 32-element sub-blocks.
fn deq_q4_k(s: &[u8], d: &mut [f32]) {
    deq_q4_5_k::<false>(s, d)
}

/// Q5_K: like Q4_K plus one high bit per element.
fn deq_q5_k(s: &[u8], d: &mut [f32]) {
    deq_q4_5_k::<true>(s, d)
}

/// Q4_K (144-byte blocks) and, with `HIGH`, Q5_K (176 bytes: 32 bytes of
/// high bits before the nibbles): d, dmin, 6-bit scales and mins, then the
/// 4-bit values of eight 32-element sub-blocks.
fn deq_q4_5_k<const HIGH: bool>(s: &[u8], d: &mut [f32]) {
    let (size, qs_at) = if HIGH { (176, 48) } else { (144, 16) };
    for (y, b) in d.chunks_exact_mut(256).zip(s.chunks_exact(size)) {
        let dd = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let (sc, mn) = scale_min_k4(&b[4..16]);
        let qh = &b[16..48];
        let qs = &b[qs_at..size];
        for j in 0..8 {
            let dl = dd * sc[j] as f32;
            let ml = dmin * mn[j] as f32;
            let base = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
            let shift = 4 * (j % 2);
            for (l, yi) in y[j * 32..j * 32 + 32].iter_mut().enumerate() {
                let mut q = (base[l] >> shift) & 0x0f;
                if HIGH {
                    q |= ((qh[l] >> j) & 1) << 4;
                }
                *yi = dl * q as f32 - ml;
            }
        }
    }
}

/// Q6_K: 4 low bits in `ql`, 2 high bits in `qh`, 16 i8 scales, f16 d.
fn deq_q6_k(s: &[u8], d: &mut [f32]) {
    for (y, b) in d.chunks_exact_mut(256).zip(s.chunks_exact(210)) {
        let ql = &b[0..128];
        let qh = &b[128..192];
        let scales = &b[192..208];
        let dd = f16_at(b, 208);
        let mut dls = [0f32; 16];
        for (dl, &sc) in dls.iter_mut().zip(scales) {
            *dl = dd * (sc as i8) as f32;
        }
        // Element e = 128·h + 32·s + l takes its low nibble from
        // ql[64·h + 32·(s & 1) + l] (shift 4·(s >> 1)) and its two high
        // bits from qh[32·h + l] (shift 2·s); its scale is dls[e / 16].
        for h in 0..2 {
            let qhb = &qh[h * 32..h * 32 + 32];
            for sub in 0..4 {
                let qlb = &ql[h * 64 + (sub & 1) * 32..][..32];
                let (shl, shh) = (4 * (sub >> 1), 2 * sub);
                let base = h * 128 + sub * 32;
                for half in 0..2 {
                    let dl = dls[base / 16 + half];
                    for l in half * 16..half * 16 + 16 {
                        let lo = (qlb[l] >> shl) & 0x0f;
                        let hi = (qhb[l] >> shh) & 0x03;
                        y[base + l] = dl * ((lo | (hi << 4)) as i32 - 32) as f32;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two terms carry each row to within `scale/508` of its values; the
    /// first is `quantize_rows_i8`'s codes, an all-zero row is all zeros.
    #[test]
    fn two_terms_round_each_row_to_about_15_bits() {
        let cols = 40;
        let mut values: Vec<f32> = (0..3 * cols)
            .map(|i| ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * (1 + i / cols) as f32)
            .collect();
        values[2 * cols..].fill(0.0);
        let (codes, scales) = quantize_rows_i8_two_terms(&values, cols);
        let (first, same_scales) = quantize_rows_i8(&values, cols);
        assert_eq!(scales, same_scales);
        assert_eq!(codes.len(), 2 * values.len());
        for (r, row) in values.chunks(cols).enumerate() {
            let (q1, q2) = codes[2 * r * cols..2 * (r + 1) * cols].split_at(cols);
            assert_eq!(q1, &first[r * cols..(r + 1) * cols]);
            let s = scales[r];
            for ((&w, &a), &b) in row.iter().zip(q1).zip(q2) {
                let back = s * (f32::from(a) + f32::from(b) / 254.0);
                assert!((back - w).abs() <= s / 508.0 * 1.01 + 1e-9, "{w} {back}");
            }
        }
        assert!(codes[4 * cols..].iter().all(|&q| q == 0));
    }
}
