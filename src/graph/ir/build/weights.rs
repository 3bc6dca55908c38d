//! Stored weights as f32 values: parameters declared in their stored
//! type and widened in the graph (bf16 and f16 words, block-quantized codes).

use super::err;
use crate::graph::ir::{BlockCodes, CompareDir, DType, Graph, GraphError, Op, TensorType, Value};

impl Graph {
    /// A weight of stored dtype `stored`, widened in-graph to f32 when it
    /// is stored as bf16 or f16: a parameter of the stored type followed by
    /// a `convert` to f32, so the weight is loaded in its stored size and
    /// widened inside the op that uses it.
    ///
    /// IREE's Vulkan backend cannot take bf16 parameters; before a Vulkan
    /// compile kiln re-declares them over the same bytes as 32-bit words
    /// ([`Module::lower_for_vulkan`](crate::graph::Module::lower_for_vulkan), see
    /// `spec/stablehlo-subset.md`).
    pub fn weight(
        &mut self,
        key: &str,
        stored: DType,
        shape: &[usize],
    ) -> Result<Value, GraphError> {
        let p = self.parameter(key, TensorType::new(stored, shape))?;
        if stored == DType::F32 {
            return Ok(p);
        }
        self.convert(p, DType::F32)
    }

    /// Rows `rows` of the weight `key` whose archive entry is `[R, …rest]`
    /// in `stored`, widened to f32 like [`Graph::weight`]: a
    /// [`Graph::parameter_part`] at byte offset `rows.start × row bytes`.
    pub fn weight_rows(
        &mut self,
        key: &str,
        stored: DType,
        rest: &[usize],
        rows: std::ops::Range<usize>,
    ) -> Result<Value, GraphError> {
        if rows.is_empty() {
            return err("parameter", format!("\"{key}\": empty row range {rows:?}"));
        }
        let mut shape = vec![rows.len()];
        shape.extend_from_slice(rest);
        let row_bytes = TensorType::new(stored, rest).byte_size() as u64;
        let p = self.parameter_part(
            key,
            TensorType::new(stored, &shape),
            rows.start as u64 * row_bytes,
        )?;
        if stored == DType::F32 {
            return Ok(p);
        }
        self.convert(p, DType::F32)
    }

    /// Widens i32 tensors holding two bf16 bit patterns each (element `2i`
    /// in the low half, `2i+1` in the high half) to the f32 values of
    /// `shape` (exact; `shape` has twice the elements). Elementwise only,
    /// so IREE fuses it into the consumer:
    /// `b = broadcast(pairs) : […, 2]`,
    /// `f = bitcast_convert(and(shift_left(b, [16, 0]), 0xFFFF0000), f32)`,
    /// `reshape(f, shape)`.
    pub fn bf16_pairs_to_f32(
        &mut self,
        pairs: Value,
        shape: &[usize],
    ) -> Result<Value, GraphError> {
        let t = self.check_pairs("bf16_pairs_to_f32", pairs, shape)?;
        let mut wide = t.shape.to_vec();
        wide.push(2);
        let rank = t.rank();
        let dims: Vec<usize> = (0..rank).collect();
        let b = self.broadcast_in_dim(pairs, &wide, &dims)?;
        let amounts = self.dense(DType::I32, &[2], vec![16.0, 0.0])?;
        let amounts = self.broadcast_in_dim(amounts, &wide, &[rank])?;
        let shifted = self.shift_left(b, amounts)?;
        let mask = self.splat(DType::I32, &wide, -65536.0)?;
        let high = self.bitwise_and(shifted, mask)?;
        let f = self.bitcast_convert(high, DType::F32)?;
        self.reshape(f, shape)
    }

    /// Rounds f32 `x` to bf16 (to nearest, ties to even, as `convert`
    /// rounds) and packs the bit patterns two per i32 word, element `2i`
    /// in the low half and `2i+1` in the high half: the form
    /// [`Graph::bf16_pairs_to_f32`] widens back exactly, and the same bytes
    /// as a bf16 tensor (little-endian). Only 32-bit integer ops, for
    /// devices without 16-bit storage. The last dim must be even; the
    /// result has half of it. NaNs are not kept (KV caches are finite).
    pub fn f32_to_bf16_pairs(&mut self, x: Value) -> Result<Value, GraphError> {
        self.checked("f32_to_bf16_pairs", &[x])?;
        let t = self.ty(x).clone();
        let pairs = match t.shape.split_last() {
            Some((&last, rest)) if t.dtype == DType::F32 && last % 2 == 0 => {
                let mut p = rest.to_vec();
                p.push(last / 2);
                p
            }
            _ => {
                return err(
                    "f32_to_bf16_pairs",
                    format!("needs f32 with an even last dim, got {t}"),
                )
            }
        };
        let s = t.shape.to_vec();
        let bits = self.bitcast_convert(x, DType::I32)?;
        // bits + 0x7fff + (bit 16 of bits), then the high half.
        let sixteen = self.splat(DType::I32, &s, 16.0)?;
        let high = self.shift_right_logical(bits, sixteen)?;
        let one = self.splat(DType::I32, &s, 1.0)?;
        let lsb = self.bitwise_and(high, one)?;
        let half = self.splat(DType::I32, &s, 32767.0)?;
        let bias = self.add(lsb, half)?;
        let rounded = self.add(bits, bias)?;
        let b16 = self.shift_right_logical(rounded, sixteen)?;
        // Element 2i in the low half of word i, 2i+1 in the high half.
        let r = s.len();
        let mut two = pairs.clone();
        two.push(2);
        let b16 = self.reshape(b16, &two)?;
        let start = vec![0; r + 1];
        let mut limit = two.clone();
        limit[r] = 1;
        let ones = vec![1; r + 1];
        let lo = self.slice(b16, &start, &limit, &ones)?;
        let mut start_hi = start;
        start_hi[r] = 1;
        let hi = self.slice(b16, &start_hi, &two, &ones)?;
        let lo = self.reshape(lo, &pairs)?;
        let hi = self.reshape(hi, &pairs)?;
        let sixteen = self.splat(DType::I32, &pairs, 16.0)?;
        let hi = self.shift_left(hi, sixteen)?;
        self.add(lo, hi)
    }

    /// Widens i32 tensors holding two f16 bit patterns each (element `2i`
    /// in the low half, `2i+1` in the high half) to the f32 values of
    /// `shape`: the halves split as 16-bit codes ([`Graph::unpack_codes`]),
    /// then [`Graph::f16_bits_to_f32`].
    pub fn f16_pairs_to_f32(&mut self, pairs: Value, shape: &[usize]) -> Result<Value, GraphError> {
        self.check_pairs("f16_pairs_to_f32", pairs, shape)?;
        let bits = self.unpack_codes(pairs, 16)?;
        let f = self.f16_bits_to_f32(bits)?;
        self.reshape(f, shape)
    }

    /// The type of `pairs`, checked to be i32 with half the elements of
    /// `shape` (two 16-bit patterns per word).
    fn check_pairs(
        &self,
        op: &'static str,
        pairs: Value,
        shape: &[usize],
    ) -> Result<TensorType, GraphError> {
        self.checked(op, &[pairs])?;
        let t = self.ty(pairs).clone();
        let n: Option<usize> = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if t.dtype != DType::I32 || n != t.numel().checked_mul(2) {
            return err(
                op,
                format!("needs an i32 tensor of half the elements of {shape:?}, got {t}"),
            );
        }
        Ok(t)
    }

    /// Widens f16 bit patterns held in i32 (0..=65535) to the f32 values
    /// they encode, exactly, with only 32-bit integer and float ops (no
    /// 16-bit type; for Vulkan): a normal magnitude `m = bits & 0x7fff` is
    /// `bitcast((m << 13) + (112 << 23))`, a subnormal one `f32(m)·2^-24`
    /// (both exact, and neither an f32 subnormal, so a device that flushes
    /// subnormals gives the same values); the sign bit negates. Infinities
    /// and NaNs are not kept (weights and scales are finite).
    pub fn f16_bits_to_f32(&mut self, bits: Value) -> Result<Value, GraphError> {
        self.checked("f16_bits_to_f32", &[bits])?;
        let t = self.ty(bits).clone();
        if t.dtype != DType::I32 {
            return err("f16_bits_to_f32", format!("needs an i32 tensor, got {t}"));
        }
        let s = t.shape.to_vec();
        let lo15 = self.splat(DType::I32, &s, 32767.0)?;
        let m = self.bitwise_and(bits, lo15)?;
        let thirteen = self.splat(DType::I32, &s, 13.0)?;
        let shifted = self.shift_left(m, thirteen)?;
        let bias = self.splat(DType::I32, &s, (112u32 << 23) as f64)?;
        let normal = self.add(shifted, bias)?;
        let normal = self.bitcast_convert(normal, DType::F32)?;
        let mf = self.convert(m, DType::F32)?;
        let tiny = self.splat(DType::F32, &s, 2f64.powi(-24))?;
        let sub = self.mul(mf, tiny)?;
        let first_normal = self.splat(DType::I32, &s, 1024.0)?;
        let is_sub = self.compare(CompareDir::Lt, m, first_normal)?;
        let mag = self.select(is_sub, sub, normal)?;
        let neg = self.neg(mag)?;
        let signed = self.compare(CompareDir::Gt, bits, lo15)?;
        self.select(signed, neg, mag)
    }

    /// Widens i16 bf16 bit patterns to the f32 values they encode (exact):
    /// `bitcast_convert(shift_left(convert(bits, i32), 16), f32)`.
    pub fn bf16_bits_to_f32(&mut self, bits: Value) -> Result<Value, GraphError> {
        self.checked("bf16_bits_to_f32", &[bits])?;
        let t = self.ty(bits).clone();
        if t.dtype != DType::I16 {
            return err("bf16_bits_to_f32", format!("needs an i16 tensor, got {t}"));
        }
        let wide = self.convert(bits, DType::I32)?;
        let sixteen = self.splat(DType::I32, &t.shape, 16.0)?;
        let high = self.shift_left(wide, sixteen)?;
        self.bitcast_convert(high, DType::F32)
    }

    /// The f32 values of block-quantized codes in one op
    /// ([`Op::DequantizeBlocks`]): `args` are the low words, the high words
    /// (when `form.high_bits > 0`), the f32 scales and the f32 minimums
    /// (when `form.has_min`), all of one leading shape.
    pub fn dequantize_blocks_op(
        &mut self,
        form: BlockCodes,
        args: &[Value],
    ) -> Result<Value, GraphError> {
        const OP: &str = "dequantize_blocks";
        self.checked(OP, args)?;
        if args.len() != form.arity() {
            return err(
                OP,
                format!(
                    "{form:?} takes {} operands, got {}",
                    form.arity(),
                    args.len()
                ),
            );
        }
        let unpacks = |bits: u32| matches!(bits, 1 | 2 | 4 | 8 | 16);
        if !unpacks(form.low_bits) || !(form.high_bits == 0 || unpacks(form.high_bits)) {
            return err(OP, format!("codes of {form:?} do not fill whole i32 words"));
        }
        let words = self.ty(args[0]).clone();
        if words.dtype != DType::I32 || words.rank() == 0 {
            return err(
                OP,
                format!("the low words are {words}, expected i32 [..., W]"),
            );
        }
        let rank = words.rank();
        let lead = &words.shape[..rank - 1];
        let k = words.shape[rank - 1] * (32 / form.low_bits) as usize;
        if form.group == 0 || k % form.group != 0 {
            return err(
                OP,
                format!(
                    "{k} elements per row are not whole groups of {}",
                    form.group
                ),
            );
        }
        let mut expect = Vec::with_capacity(args.len());
        if let Some(per_word) = 32u32.checked_div(form.high_bits) {
            expect.push((DType::I32, k / per_word as usize, "high words"));
        }
        expect.push((DType::F32, k / form.group, "scales"));
        if form.has_min {
            expect.push((DType::F32, k / form.group, "minimums"));
        }
        for (&v, (dtype, last, what)) in args[1..].iter().zip(expect) {
            let t = self.ty(v);
            let mut shape = lead.to_vec();
            shape.push(last);
            if t.dtype != dtype || t.shape[..] != shape[..] {
                return err(
                    OP,
                    format!(
                        "the {what} are {t}, expected {}",
                        TensorType::new(dtype, &shape)
                    ),
                );
            }
        }
        let mut shape = lead.to_vec();
        shape.push(k);
        let ty = TensorType::new(DType::F32, &shape);
        Ok(self.push(Op::DequantizeBlocks(form), args, ty))
    }
}

pub(crate) use kiln_runtime::types::bf16_pairs_shape;
