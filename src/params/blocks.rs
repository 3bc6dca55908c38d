//! kiln's block-quantized weight form (`kiln export --weights keep`,
//! `spec/quantized-weights.md`): a GGML block-quantized `[rows, K]` matrix
//! repacked, exactly, into parts a StableHLO graph can widen with integer
//! shifts and one multiply-add per element:
//!
//! - `<name>.qs`: the low `low_bits` (4 or 8) of every code, packed into
//!   little-endian i32 words, element `i` of a row at bits
//!   `low_bits·(i mod (32/low_bits))` of word `i / (32/low_bits)`;
//! - `<name>.qh` (5- and 6-bit types): the code's high 1 or 2 bits, packed
//!   the same way;
//! - `<name>.scale`: one scale per group of `group` elements, `[rows, K/group]`,
//!   f16 where the GGML scale is an f16, f32 where it is a product of an
//!   f16 and a sub-block scale (K-quants), which f16 would round;
//! - `<name>.min` (types with a minimum): one per group, like the scale.
//!
//! Element `i` of a row is `(code − zero)·scale + min`, where
//! `code = lo | hi << low_bits` is unsigned and `zero` is the type's fixed
//! offset. Every product and sum is the one `gguf.quants.dequantize`
//! computes, so the widened values equal the Python package's bit for bit
//! (checked against [`super::quant::dequantize`] in the tests below).

use super::gguf::GgmlType;
use super::quant::{f16_at, scale_min_k4};
use crate::graph::DType;
use byteorder::{ByteOrder, LittleEndian};
use rayon::prelude::*;

/// How one GGML type is stored in kiln's block form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockForm {
    /// The GGML type it repacks.
    pub ggml: GgmlType,
    /// Elements per scale (32, or 16 for Q6_K).
    pub group: usize,
    /// Bits of each code in the `.qs` part (4 or 8).
    pub low_bits: u32,
    /// Bits of each code in the `.qh` part (0: no `.qh`).
    pub high_bits: u32,
    /// The offset subtracted from every code (8 for Q4_0, 128 for Q8_0…).
    pub zero: u32,
    /// Element type of the `.scale` (and `.min`) parts: f16 or f32.
    pub scale: DType,
    /// Whether the type has a `.min` part.
    pub min: bool,
}

/// The GGML types kiln keeps in its block form ([`BlockForm::of`]).
pub const KEPT: [GgmlType; 8] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Suffix of the low-code part.
pub const QS: &str = "qs";
/// Suffix of the high-code part.
pub const QH: &str = "qh";
/// Suffix of the scale part.
pub const SCALE: &str = "scale";
/// Suffix of the minimum part.
pub const MIN: &str = "min";

/// One stored part of a block-form matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartSpec {
    /// Suffix appended to the tensor name after a dot ([`QS`], [`QH`],
    /// [`SCALE`], [`MIN`]).
    pub suffix: &'static str,
    /// Element type (i32 words, f16 or f32).
    pub dtype: DType,
    /// Elements per row.
    pub cols: usize,
}

impl BlockForm {
    /// kiln's form of `ty`, if it has one.
    pub fn of(ty: GgmlType) -> Option<BlockForm> {
        use GgmlType as G;
        let f = |group, low_bits, high_bits, zero, scale, min| BlockForm {
            ggml: ty,
            group,
            low_bits,
            high_bits,
            zero,
            scale,
            min,
        };
        Some(match ty {
            G::Q8_0 => f(32, 8, 0, 128, DType::F16, false),
            G::Q4_0 => f(32, 4, 0, 8, DType::F16, false),
            G::Q4_1 => f(32, 4, 0, 0, DType::F16, true),
            G::Q5_0 => f(32, 4, 1, 16, DType::F16, false),
            G::Q5_1 => f(32, 4, 1, 0, DType::F16, true),
            G::Q4_K => f(32, 4, 0, 0, DType::F32, true),
            G::Q5_K => f(32, 4, 1, 0, DType::F32, true),
            G::Q6_K => f(16, 4, 2, 32, DType::F32, false),
            _ => return None,
        })
    }

    /// GGML elements per block of the source type (32 or 256): a row's
    /// length must be a multiple of it.
    pub fn block(&self) -> usize {
        self.ggml.block_size() as usize
    }

    /// The stored parts of a row of `cols` elements, in archive order.
    pub fn parts(&self, cols: usize) -> Vec<PartSpec> {
        let mut v = vec![PartSpec {
            suffix: QS,
            dtype: DType::I32,
            cols: cols * self.low_bits as usize / 32,
        }];
        if self.high_bits > 0 {
            v.push(PartSpec {
                suffix: QH,
                dtype: DType::I32,
                cols: cols * self.high_bits as usize / 32,
            });
        }
        let groups = cols / self.group;
        v.push(PartSpec {
            suffix: SCALE,
            dtype: self.scale,
            cols: groups,
        });
        if self.min {
            v.push(PartSpec {
                suffix: MIN,
                dtype: self.scale,
                cols: groups,
            });
        }
        v
    }

    /// Stored bytes of one row of `cols` elements, all parts.
    pub fn row_bytes(&self, cols: usize) -> usize {
        self.parts(cols)
            .iter()
            .map(|p| p.cols * p.dtype.size())
            .sum()
    }
}

/// The archive key of `part` of tensor `name`.
pub fn part_key(name: &str, suffix: &str) -> String {
    format!("{name}.{suffix}")
}

/// A block-quantized matrix found among a file's tensors by its parts
/// (`recognize`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recognized {
    /// The matrix's name (the parts' names without the suffix).
    pub name: String,
    /// Its form (the GGML type it was repacked from).
    pub form: BlockForm,
    /// `[rows, K]`; `None` from an IRPA archive, whose entries are only
    /// bytes (the form and the element count still follow from the parts'
    /// byte counts).
    pub shape: Option<[usize; 2]>,
    /// Elements, `rows · K`.
    pub elements: u64,
    /// Stored bytes, all parts.
    pub bytes: u64,
    /// The parts' suffixes, in archive order.
    pub parts: Vec<&'static str>,
}

/// The block-quantized matrices among `tensors` (name, element type,
/// shape): every `NAME.qs` whose sibling parts have the dtypes and shapes
/// of exactly one form. Entries without an element type (an IRPA
/// archive's, whose shape is `[bytes]`) are recognized by their parts'
/// byte counts, which tell the forms apart too (bytes of codes per byte
/// of scales, and which of `.qh`/`.min` exist).
pub fn recognize(tensors: &[(String, Option<DType>, Vec<u64>)]) -> Vec<Recognized> {
    let by_name: std::collections::HashMap<&str, (Option<DType>, &[u64])> = tensors
        .iter()
        .map(|(n, d, s)| (n.as_str(), (*d, s.as_slice())))
        .collect();
    let find = |n: &str| by_name.get(n).copied();
    let mut out = Vec::new();
    for (name, dtype, shape) in tensors {
        let Some(base) = name.strip_suffix(".qs") else {
            continue;
        };
        if dtype.is_none() {
            out.extend(recognize_bytes(base, shape, &by_name));
            continue;
        }
        let (&[rows, qs_cols], Some(DType::I32)) = (&shape[..], dtype) else {
            continue;
        };
        for ty in KEPT {
            let form = BlockForm::of(ty).expect("a kept type");
            let cols = qs_cols as usize * 32 / form.low_bits as usize;
            if cols % form.block() != 0 {
                continue;
            }
            let parts = form.parts(cols);
            let matches = parts.iter().all(|p| {
                find(&part_key(base, p.suffix))
                    .is_some_and(|(d, s)| d == Some(p.dtype) && s == [rows, p.cols as u64])
            });
            let extra = [QH, MIN].iter().any(|s| {
                !parts.iter().any(|p| p.suffix == *s) && find(&part_key(base, s)).is_some()
            });
            if matches && !extra {
                out.push(Recognized {
                    name: base.to_string(),
                    form,
                    shape: Some([rows as usize, cols]),
                    elements: rows * cols as u64,
                    bytes: rows * form.row_bytes(cols) as u64,
                    parts: parts.iter().map(|p| p.suffix).collect(),
                });
                break;
            }
        }
    }
    out
}

/// [`recognize`] for untyped entries: `base.qs` of `qs` (`[bytes]`) and
/// its siblings, as the one form whose parts have these byte counts.
fn recognize_bytes(
    base: &str,
    qs: &[u64],
    by_name: &std::collections::HashMap<&str, (Option<DType>, &[u64])>,
) -> Option<Recognized> {
    let &[qs_bytes] = qs else { return None };
    let bytes_of = |suffix: &str| match by_name.get(part_key(base, suffix).as_str()) {
        Some(&(None, &[b])) => Some(b),
        _ => None,
    };
    KEPT.iter().find_map(|&ty| {
        let form = BlockForm::of(ty)?;
        // One block's bytes per part; the blocks follow from the codes.
        let parts = form.parts(form.block());
        let per_block = |i: usize| (parts[i].cols * parts[i].dtype.size()) as u64;
        let blocks = qs_bytes / per_block(0);
        let matches = blocks > 0
            && (0..parts.len()).all(|i| bytes_of(parts[i].suffix) == Some(blocks * per_block(i)));
        let extra = [QH, MIN]
            .iter()
            .any(|s| !parts.iter().any(|p| p.suffix == *s) && bytes_of(s).is_some());
        (matches && !extra).then(|| Recognized {
            name: base.to_string(),
            form,
            shape: None,
            elements: blocks * form.block() as u64,
            bytes: (0..parts.len()).map(|i| blocks * per_block(i)).sum(),
            parts: parts.iter().map(|p| p.suffix).collect(),
        })
    })
}

impl GgmlType {
    /// Quantizes f32 `values` (whole 32-element blocks, row after row) to
    /// blocks of this type, Q8_0 or Q4_0, bit for bit as
    /// `gguf.quants.quantize` writes them (`spec/quantized-weights.md`).
    pub fn quantize(self, values: &[f32]) -> Result<Vec<u8>, String> {
        quantize(self, values)
    }
}

/// Quantizes f32 `values` (whole 32-element blocks, row after row) to GGML
/// `ty` blocks — Q8_0 or Q4_0 — with llama.cpp's reference rounding, bit
/// for bit what `gguf.quants.quantize` writes: Q8_0 `d = max|x|/127`,
/// `q = round(x/d)` half away from zero; Q4_0 `d = x[argmax |x|]/−8`,
/// `q = min(15, trunc(x/d + 8.5))`; `d` rounded to f16 (nearest even),
/// every step in f32.
pub(crate) fn quantize(ty: GgmlType, values: &[f32]) -> Result<Vec<u8>, String> {
    if values.len() % 32 != 0 {
        return Err(format!(
            "{} values are not whole 32-element {ty} blocks",
            values.len()
        ));
    }
    // Each block is the f16 `d`, then the codes.
    let one: fn(&[f32], &mut [u8]) = match ty {
        GgmlType::Q8_0 => |x, out| {
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            LittleEndian::write_u16(out, half::f16::from_f32(d).to_bits());
            for (q, &v) in out[2..].iter_mut().zip(x) {
                // gguf's np_roundf: floor(|a|) + floor(2·(|a| − floor(|a|))), signed.
                let a = (v * id).abs();
                let f = a.floor();
                let r = f + (2.0 * (a - f)).floor();
                *q = ((r.copysign(v * id)) as i8) as u8;
            }
        },
        GgmlType::Q4_0 => |x, out| {
            // The first element of largest magnitude, with its sign.
            let mut max = 0f32;
            for &v in x {
                if v.abs() > max.abs() {
                    max = v;
                }
            }
            let d = max / -8.0;
            let id = if d == 0.0 { 0.0 } else { 1.0 / d };
            LittleEndian::write_u16(out, half::f16::from_f32(d).to_bits());
            let q = |v: f32| ((v * id + 8.5).trunc() as u8).min(15);
            for (j, b) in out[2..].iter_mut().enumerate() {
                *b = q(x[j]) | (q(x[j + 16]) << 4);
            }
        },
        _ => return Err(format!("kiln quantizes to Q8_0 and Q4_0, not {ty}")),
    };
    let ts = ty.type_size() as usize;
    let mut out = vec![0u8; values.len() / 32 * ts];
    for (block, dst) in values.chunks_exact(32).zip(out.chunks_exact_mut(ts)) {
        one(block, dst);
    }
    Ok(out)
}

/// Codes, scales and minimums of one GGML block, decoded.
struct Decoded {
    /// Unsigned codes (`q + zero`), one per element.
    codes: Vec<u8>,
    scales: Vec<f32>,
    mins: Vec<f32>,
}

/// Decodes one block of `ty` (layouts as in [`super::quant`]).
fn decode(ty: GgmlType, b: &[u8], out: &mut Decoded) {
    use GgmlType as G;
    out.codes.clear();
    out.scales.clear();
    out.mins.clear();
    let nibbles = |qs: &[u8], codes: &mut Vec<u8>| {
        // Legacy 32-blocks: element j is the low nibble of byte j, element
        // j + 16 the high nibble.
        codes.extend(qs.iter().map(|q| q & 0x0f));
        codes.extend(qs.iter().map(|q| q >> 4));
    };
    match ty {
        G::Q8_0 => {
            out.scales.push(f16_at(b, 0));
            out.codes.extend(b[2..34].iter().map(|&q| q ^ 0x80));
        }
        G::Q4_0 => {
            out.scales.push(f16_at(b, 0));
            nibbles(&b[2..18], &mut out.codes);
        }
        G::Q4_1 => {
            out.scales.push(f16_at(b, 0));
            out.mins.push(f16_at(b, 2));
            nibbles(&b[4..20], &mut out.codes);
        }
        G::Q5_0 | G::Q5_1 => {
            let o = if ty == G::Q5_0 { 2 } else { 4 };
            out.scales.push(f16_at(b, 0));
            if ty == G::Q5_1 {
                out.mins.push(f16_at(b, 2));
            }
            let qh = LittleEndian::read_u32(&b[o..]);
            nibbles(&b[o + 4..o + 20], &mut out.codes);
            for (i, c) in out.codes.iter_mut().enumerate() {
                *c |= (((qh >> i) & 1) as u8) << 4;
            }
        }
        G::Q4_K | G::Q5_K => {
            let (dd, dmin) = (f16_at(b, 0), f16_at(b, 2));
            let (sc, mn) = scale_min_k4(&b[4..16]);
            let (qh, qs) = if ty == G::Q5_K {
                (Some(&b[16..48]), &b[48..176])
            } else {
                (None, &b[16..144])
            };
            for j in 0..8 {
                out.scales.push(dd * sc[j] as f32);
                // d·q − dmin·m, as x + (−m): the same rounding.
                out.mins.push(-(dmin * mn[j] as f32));
                let base = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
                let shift = 4 * (j % 2);
                for l in 0..32 {
                    let mut q = (base[l] >> shift) & 0x0f;
                    if let Some(qh) = qh {
                        q |= ((qh[l] >> j) & 1) << 4;
                    }
                    out.codes.push(q);
                }
            }
        }
        G::Q6_K => {
            let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
            let dd = f16_at(b, 208);
            out.scales
                .extend(scales.iter().map(|&s| dd * (s as i8) as f32));
            out.codes.resize(256, 0);
            for h in 0..2 {
                for sub in 0..4 {
                    let qlb = &ql[h * 64 + (sub & 1) * 32..][..32];
                    let (shl, shh) = (4 * (sub >> 1), 2 * sub);
                    for l in 0..32 {
                        let lo = (qlb[l] >> shl) & 0x0f;
                        let hi = (qh[h * 32 + l] >> shh) & 0x03;
                        out.codes[h * 128 + sub * 32 + l] = lo | (hi << 4);
                    }
                }
            }
        }
        _ => unreachable!("BlockForm::of admits only the types decoded here"),
    }
}

/// Packs `code(c)` of every `c` in `codes` (each below 2^bits) into
/// little-endian i32 words, `out` (4 bytes a word, `32/bits` codes each).
fn pack(codes: &[u8], code: impl Fn(u8) -> u8, bits: u32, out: &mut [u8]) {
    let per = (32 / bits) as usize;
    debug_assert_eq!(codes.len(), out.len() / 4 * per, "rows are whole words");
    for (dst, group) in out.chunks_exact_mut(4).zip(codes.chunks_exact(per)) {
        let word = group.iter().enumerate().fold(0u32, |word, (n, &c)| {
            word | ((code(c) as u32) << (bits as usize * n))
        });
        LittleEndian::write_u32(dst, word);
    }
}

/// Writes `xs` as `dtype` (f16 or f32) little-endian scales into `out`.
fn write_scales(xs: &[f32], dtype: DType, out: &mut [u8]) {
    debug_assert_eq!(xs.len() * dtype.size(), out.len());
    for (dst, &x) in out.chunks_exact_mut(dtype.size()).zip(xs) {
        match dtype {
            DType::F16 => LittleEndian::write_u16(dst, half::f16::from_f32(x).to_bits()),
            _ => LittleEndian::write_f32(dst, x),
        }
    }
}

/// Repacks rows of GGML blocks into the parts of `form`. `raw` holds
/// `rows` rows of `cols` elements; `order` gives the source row of each
/// output row (a row permutation, e.g. llama.cpp's Q/K layout undone), or
/// `None` for the identity. Returns one byte vector per part, in
/// [`BlockForm::parts`] order.
pub fn repack(
    form: &BlockForm,
    raw: &[u8],
    rows: usize,
    cols: usize,
    order: Option<&[usize]>,
) -> Result<Vec<Vec<u8>>, String> {
    let bs = form.block();
    let ts = form.ggml.type_size() as usize;
    if cols % bs != 0 {
        return Err(format!(
            "a row of {cols} elements is not a whole number of {}-element {} blocks",
            bs, form.ggml
        ));
    }
    let src_row = cols / bs * ts;
    if raw.len() != rows * src_row {
        return Err(format!(
            "{} bytes of {} cannot hold {rows} × {cols} elements",
            raw.len(),
            form.ggml
        ));
    }
    let parts = form.parts(cols);
    let mut out: Vec<Vec<u8>> = parts
        .iter()
        .map(|p| Vec::with_capacity(rows * p.cols * p.dtype.size()))
        .collect();
    // Rows repack in parallel, a batch at a time, so only one batch's rows
    // are held beside the output.
    const BATCH: usize = 512;
    for first in (0..rows).step_by(BATCH) {
        let batch = repack_rows(
            form,
            &parts,
            raw,
            src_row,
            cols,
            first..rows.min(first + BATCH),
            order,
        );
        for row in batch {
            for (o, r) in out.iter_mut().zip(row) {
                o.extend_from_slice(&r);
            }
        }
    }
    Ok(out)
}

/// A Q4_K matrix's block scales as GGML stores them, for `--weights
/// w4a16`: each 32-block's 6-bit scale and minimum (one byte each, in
/// element order), and each 256-element super-block's f16 `d` and `dmin`
/// (their bytes), from `raw`, whole Q4_K blocks in row order. A row's
/// block `j` scales by `d·sc[j]` and subtracts `dmin·m[j]`
/// ([`super::quant`]'s Q4_K).
pub fn q4_k_scale_parts(raw: &[u8]) -> Result<[Vec<u8>; 4], String> {
    let ts = GgmlType::Q4_K.type_size() as usize;
    if raw.len() % ts != 0 {
        return Err(format!(
            "{} bytes are not whole {ts}-byte Q4_K blocks",
            raw.len()
        ));
    }
    let n = raw.len() / ts;
    let [mut sc, mut mn, mut d, mut dmin] = [
        Vec::with_capacity(8 * n),
        Vec::with_capacity(8 * n),
        Vec::with_capacity(2 * n),
        Vec::with_capacity(2 * n),
    ];
    for b in raw.chunks_exact(ts) {
        d.extend_from_slice(&b[0..2]);
        dmin.extend_from_slice(&b[2..4]);
        let (s, m) = scale_min_k4(&b[4..16]);
        sc.extend_from_slice(&s);
        mn.extend_from_slice(&m);
    }
    Ok([sc, mn, d, dmin])
}

/// The parts of rows `range` of the output, each row's in [`BlockForm::parts`] order.
fn repack_rows(
    form: &BlockForm,
    parts: &[PartSpec],
    raw: &[u8],
    src_row: usize,
    cols: usize,
    range: std::ops::Range<usize>,
    order: Option<&[usize]>,
) -> Vec<Vec<Vec<u8>>> {
    let ts = form.ggml.type_size() as usize;
    range
        .into_par_iter()
        .map(|r| {
            let src = order.map_or(r, |o| o[r]);
            let row = &raw[src * src_row..(src + 1) * src_row];
            let mut dec = Decoded {
                codes: Vec::with_capacity(256),
                scales: Vec::with_capacity(16),
                mins: Vec::with_capacity(16),
            };
            let mut codes = Vec::with_capacity(cols);
            let mut scales = Vec::new();
            let mut mins = Vec::new();
            for b in row.chunks_exact(ts) {
                decode(form.ggml, b, &mut dec);
                codes.extend_from_slice(&dec.codes);
                scales.extend_from_slice(&dec.scales);
                mins.extend_from_slice(&dec.mins);
            }
            parts
                .iter()
                .map(|p| {
                    let mut out = vec![0u8; p.cols * p.dtype.size()];
                    match p.suffix {
                        QS => {
                            let mask = ((1u32 << form.low_bits) - 1) as u8;
                            pack(&codes, |c| c & mask, form.low_bits, &mut out)
                        }
                        QH => pack(&codes, |c| c >> form.low_bits, form.high_bits, &mut out),
                        SCALE => write_scales(&scales, p.dtype, &mut out),
                        _ => write_scales(&mins, p.dtype, &mut out),
                    }
                    out
                })
                .collect()
        })
        .collect()
}

/// Widens repacked parts back to f32 as the graph does:
/// `(code − zero)·scale + min`: the reference the tests check repacking
/// against.
#[cfg(test)]
fn widen(form: &BlockForm, parts: &[Vec<u8>], rows: usize, cols: usize) -> Vec<f32> {
    let specs = form.parts(cols);
    let get = |suffix: &str| {
        specs
            .iter()
            .position(|p| p.suffix == suffix)
            .map(|i| &parts[i])
    };
    let word = |b: &[u8], i: usize| LittleEndian::read_u32(&b[4 * i..]);
    let code = |b: &[u8], bits: u32, row_words: usize, r: usize, i: usize| {
        let per = (32 / bits) as usize;
        (word(b, r * row_words + i / per) >> (bits as usize * (i % per))) & ((1 << bits) - 1)
    };
    let scale_at = |b: &[u8], i: usize| match form.scale {
        DType::F16 => half::f16::from_bits(LittleEndian::read_u16(&b[2 * i..])).to_f32(),
        _ => LittleEndian::read_f32(&b[4 * i..]),
    };
    let qs = get(QS).expect("every form has codes");
    let (lw, hw) = (
        cols * form.low_bits as usize / 32,
        cols * form.high_bits as usize / 32,
    );
    let groups = cols / form.group;
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        for i in 0..cols {
            let mut c = code(qs, form.low_bits, lw, r, i);
            if let Some(qh) = get(QH) {
                c |= code(qh, form.high_bits, hw, r, i) << form.low_bits;
            }
            let g = r * groups + i / form.group;
            let mut x = (c as f32 - form.zero as f32) * scale_at(get(SCALE).unwrap(), g);
            if let Some(m) = get(MIN) {
                x += scale_at(m, g);
            }
            out.push(x);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::params::quant::dequantize;

    /// Deterministic bytes with sane f16 scales at the given offsets.
    pub(crate) fn blocks(ty: GgmlType, n: usize, seed: u64) -> Vec<u8> {
        let ts = ty.type_size() as usize;
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        };
        let mut out: Vec<u8> = (0..n * ts).map(|_| next()).collect();
        let scales: &[usize] = match ty {
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q4_1 | GgmlType::Q5_1 => &[0, 2],
            GgmlType::Q6_K => &[208],
            _ => &[0],
        };
        for b in out.chunks_exact_mut(ts) {
            for &o in scales {
                let x = half::f16::from_f32((b[o] as f32 - 128.0) / 3000.0 + 1e-3);
                LittleEndian::write_u16(&mut b[o..], x.to_bits());
            }
        }
        out
    }

    #[test]
    fn repacked_blocks_widen_to_the_dequantized_values_bit_for_bit() {
        for ty in KEPT {
            let form = BlockForm::of(ty).unwrap();
            let (rows, cols) = (3, 2 * form.block());
            let raw = blocks(
                ty,
                rows * cols / form.block(),
                form.ggml.type_size() + ty.block_size(),
            );
            let mut want = vec![0f32; rows * cols];
            dequantize(ty, &raw, &mut want).unwrap();
            let parts = repack(&form, &raw, rows, cols, None).unwrap();
            for (p, spec) in parts.iter().zip(form.parts(cols)) {
                assert_eq!(
                    p.len(),
                    rows * spec.cols * spec.dtype.size(),
                    "{ty} {}",
                    spec.suffix
                );
            }
            let got = widen(&form, &parts, rows, cols);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{ty} element {i}: {a} vs {b}");
            }
            // A row permutation moves whole rows.
            let parts = repack(&form, &raw, rows, cols, Some(&[2, 0, 1])).unwrap();
            let got = widen(&form, &parts, rows, cols);
            assert_eq!(got[..cols], want[2 * cols..]);
        }
    }

    #[test]
    fn every_form_is_recognized_from_its_parts() {
        for ty in KEPT {
            let form = BlockForm::of(ty).unwrap();
            let tensors: Vec<(String, Option<DType>, Vec<u64>)> = form
                .parts(512)
                .iter()
                .map(|p| {
                    (
                        part_key("w", p.suffix),
                        Some(p.dtype),
                        vec![3, p.cols as u64],
                    )
                })
                .collect();
            let r = recognize(&tensors);
            assert_eq!(r.len(), 1, "{ty}");
            assert_eq!((r[0].form.ggml, r[0].shape), (ty, Some([3, 512])), "{ty}");
            assert_eq!(r[0].bytes, 3 * form.row_bytes(512) as u64);
            // The same parts as untyped entries of their byte counts (IRPA).
            let untyped: Vec<(String, Option<DType>, Vec<u64>)> = tensors
                .iter()
                .map(|(n, d, s)| {
                    let bytes = s.iter().product::<u64>() * d.unwrap().size() as u64;
                    (n.clone(), None, vec![bytes])
                })
                .collect();
            let u = recognize(&untyped);
            assert_eq!(u.len(), 1, "{ty} untyped");
            assert_eq!(
                (u[0].form, u[0].shape, u[0].elements, u[0].bytes),
                (form, None, 3 * 512, r[0].bytes),
                "{ty} untyped"
            );
        }
    }

    #[test]
    fn rows_that_are_not_whole_blocks_are_refused() {
        let form = BlockForm::of(GgmlType::Q4_K).unwrap();
        let e = repack(&form, &[0; 144], 1, 128, None).unwrap_err();
        assert!(
            e.contains("not a whole number of 256-element Q4_K blocks"),
            "{e}"
        );
    }
}
