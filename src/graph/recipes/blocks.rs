//! In-graph widening of block-quantized weights (`params::blocks`,
//! `spec/quantized-weights.md`): codes unpacked from i32 words with shifts
//! and masks, then `(code − zero)·scale + min` per group.

use crate::graph::{BlockCodes, CompareDir, DType, Graph, GraphError, ReduceKind, UnaryOp, Value};

/// A block-quantized matrix's parts as graph values, with the shape of
/// its form (`params::blocks::BlockForm`). Every part has the
/// same leading dims (rows, or gathered ids); the last dim is per row.
/// Crate-private, as the forms are: only the model loaders build one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockWeight {
    /// i32 words of the low code bits.
    pub qs: Value,
    /// Bits per code in `qs` (4 or 8).
    pub low_bits: u32,
    /// i32 words of the high code bits and their width (1 or 2), if any.
    pub qh: Option<(Value, u32)>,
    /// One f16 or f32 scale per group.
    pub scale: Value,
    /// One f16 or f32 minimum per group, if any.
    pub min: Option<Value>,
    /// Elements per group.
    pub group: usize,
    /// Offset subtracted from each unsigned code.
    pub zero: u32,
}

fn err<T>(msg: String) -> Result<T, GraphError> {
    Err(GraphError {
        op: "dequantize_blocks",
        msg,
    })
}

impl Graph {
    /// Unpacks `bits`-bit unsigned codes from i32 `words` `[..., W]` into
    /// i32 `[..., W·32/bits]`: element `i` is bits `bits·(i mod n)` of word
    /// `i / n`, `n = 32/bits`. `broadcast_in_dim` to `[..., W, n]`,
    /// `shift_right_logical` by `[0, bits, 2·bits, …]`, `and` with
    /// `2^bits − 1`, `reshape`.
    pub fn unpack_codes(&mut self, words: Value, bits: u32) -> Result<Value, GraphError> {
        self.checked("unpack_codes", &[words])?;
        let t = self.ty(words).clone();
        if t.dtype != DType::I32 || t.rank() == 0 || !matches!(bits, 1 | 2 | 4 | 8 | 16) {
            return err(format!(
                "unpack_codes needs i32 words and 1, 2, 4, 8 or 16 bits, got {t} and {bits}"
            ));
        }
        let n = (32 / bits) as usize;
        let rank = t.rank();
        let mut wide = t.shape.to_vec();
        wide.push(n);
        let dims: Vec<usize> = (0..rank).collect();
        let b = self.broadcast_in_dim(words, &wide, &dims)?;
        let amounts: Vec<f64> = (0..n).map(|i| (i as u32 * bits) as f64).collect();
        let amounts = self.dense(DType::I32, &[n], amounts)?;
        let amounts = self.broadcast_in_dim(amounts, &wide, &[rank])?;
        let shifted = self.shift_right_logical(b, amounts)?;
        let mask = self.splat(DType::I32, &wide, ((1u64 << bits) - 1) as f64)?;
        let codes = self.bitwise_and(shifted, mask)?;
        let mut out = t.shape.to_vec();
        out[rank - 1] *= n;
        self.reshape(codes, &out)
    }

    /// The f32 values of a block-quantized weight, `[..., K]`:
    /// `(f32(lo | hi << low_bits) − zero)·scale + min`, each scale and
    /// minimum broadcast over its group, as one [`Op::DequantizeBlocks`]
    /// (f16 scales and minimums widened first). Exact: the same products
    /// and sums as `gguf.quants.dequantize`.
    ///
    /// [`Op::DequantizeBlocks`]: crate::graph::Op::DequantizeBlocks
    pub(crate) fn dequantize_blocks(&mut self, w: &BlockWeight) -> Result<Value, GraphError> {
        let (form, args) = self.block_operands(w)?;
        self.dequantize_blocks_op(form, &args)
    }

    /// A [`BlockWeight`]'s form and its [`Op::DequantizeBlocks`] operands,
    /// f16 scales and minimums widened to f32.
    ///
    /// [`Op::DequantizeBlocks`]: crate::graph::Op::DequantizeBlocks
    fn block_operands(&mut self, w: &BlockWeight) -> Result<(BlockCodes, Vec<Value>), GraphError> {
        let mut args = vec![w.qs];
        args.extend(w.qh.map(|(v, _)| v));
        args.push(w.scale);
        args.extend(w.min);
        self.checked("dequantize_blocks", &args)?;
        for a in args.iter_mut().skip(1 + usize::from(w.qh.is_some())) {
            let t = self.ty(*a).clone();
            match t.dtype {
                DType::F32 => {}
                DType::F16 => *a = self.convert(*a, DType::F32)?,
                _ => return err(format!("a scale or minimum is {t}, expected f16 or f32")),
            }
        }
        let form = BlockCodes {
            low_bits: w.low_bits,
            high_bits: w.qh.map_or(0, |(_, b)| b),
            group: w.group,
            zero: w.zero,
            has_min: w.min.is_some(),
        };
        Ok((form, args))
    }
}

impl Graph {
    /// [`Op::DequantizeBlocks`] written as StableHLO elementwise ops: codes
    /// unpacked from their words ([`Graph::unpack_codes`]), the high bits
    /// shifted and added, `convert` to f32, minus the zero, then the
    /// scales and minimums broadcast over `[..., K/group, group]` and a
    /// reshape back to `[..., K]`. The same f32 operations as the one op,
    /// so the same values: the form the Vulkan lowering gives it.
    pub(crate) fn dequantize_blocks_chain(
        &mut self,
        form: BlockCodes,
        args: &[Value],
    ) -> Result<Value, GraphError> {
        self.checked("dequantize_blocks", args)?;
        if args.len() != form.arity() {
            return err(format!(
                "{form:?} takes {} operands, got {}",
                form.arity(),
                args.len()
            ));
        }
        let mut it = args.iter().copied();
        let qs = it.next().expect("arity checked");
        let qh = (form.high_bits > 0).then(|| it.next().expect("arity checked"));
        let scale = it.next().expect("arity checked");
        let min = form.has_min.then(|| it.next().expect("arity checked"));
        let lo = self.unpack_codes(qs, form.low_bits)?;
        let shape = self.ty(lo).shape.to_vec();
        let rank = shape.len();
        let k = shape[rank - 1];
        let mut code = lo;
        if let Some(qh) = qh {
            let hi = self.unpack_codes(qh, form.high_bits)?;
            if self.ty(hi).shape != self.ty(lo).shape {
                return err(format!(
                    "high codes {} do not match low codes {}",
                    self.ty(hi),
                    self.ty(lo)
                ));
            }
            let by = self.splat(DType::I32, &shape, form.low_bits as f64)?;
            let hi = self.shift_left(hi, by)?;
            code = self.add(code, hi)?;
        }
        let mut x = self.convert(code, DType::F32)?;
        if form.zero != 0 {
            let z = self.splat(DType::F32, &shape, form.zero as f64)?;
            x = self.sub(x, z)?;
        }
        if form.group == 0 || k % form.group != 0 {
            return err(format!(
                "{k} elements per row are not whole groups of {}",
                form.group
            ));
        }
        let mut grouped = shape[..rank - 1].to_vec();
        grouped.push(k / form.group);
        grouped.push(form.group);
        let x = self.reshape(x, &grouped)?;
        let keep: Vec<usize> = (0..rank).collect();
        let s = self.broadcast_in_dim(scale, &grouped, &keep)?;
        let mut x = self.mul(x, s)?;
        if let Some(m) = min {
            let m = self.broadcast_in_dim(m, &grouped, &keep)?;
            x = self.add(x, m)?;
        }
        self.reshape(x, &shape)
    }
}

/// Elements per block of a `--weights w4a16` matrix: one scale (and
/// minimum) each ([`Graph::linear_w4a16`]).
pub(crate) const I4_BLOCK: usize = 32;

/// Elements per Q4_K super-block of a `--weights w4a16` matrix: one `d`
/// and `dmin` each ([`Graph::linear_w4a16_super`]).
pub(crate) const I4_SUPER_BLOCK: usize = 256;

/// How many i8 terms carry the weights and the activations of a product
/// ([`Graph::linear_i8`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum I8Terms {
    W8A8,
    W8A16,
    W16A16,
}

impl Graph {
    /// `x · Wᵀ` with both sides in i8 (`--weights w8a8`, lossy): `codes`
    /// i8 `[out, in]` and one f32 `scale` per row (`[out, 1]`), `x` f32
    /// `[S, in]`. Each row of `x` is rounded to i8 with its own scale
    /// `max|x|/127` (`round_nearest_even`), the i8 × i8 products are summed
    /// exactly in i32 (what IREE's integer matmul kernels take), and the
    /// sums are scaled by the row's scale, then by the weight row's.
    pub fn linear_w8a8(
        &mut self,
        x: Value,
        codes: Value,
        scale: Value,
    ) -> Result<Value, GraphError> {
        self.linear_i8(x, codes, scale, I8Terms::W8A8)
    }

    /// `x · Wᵀ` as [`Graph::linear_w8a8`], with each row of `x` carried by
    /// two i8 terms (`--weights w8a16`): `x ≈ s₁·q₁ + s₂·q₂`, where `q₁` is
    /// `x` rounded as in `linear_w8a8` and `q₂ = round((x/s₁ − q₁)·254)`
    /// the rounding error with the fixed scale `s₂ = s₁/254` (`x/s₁ − q₁`
    /// lies in [−½, ½]), so the activations keep about 15 bits. Both terms
    /// go through one i8 × i8 → i32 product (stacked as `[2·S, in]`, one
    /// read of the weights), and the result is `(s₁·(q₁·Wᵀ) + s₂·(q₂·Wᵀ))`
    /// times the weight row's scale. Only the weights' rounding to i8 per
    /// row is lossy.
    pub fn linear_w8a16(
        &mut self,
        x: Value,
        codes: Value,
        scale: Value,
    ) -> Result<Value, GraphError> {
        self.linear_i8(x, codes, scale, I8Terms::W8A16)
    }

    /// `x · Wᵀ` with both sides in two i8 terms (`--weights w16a16`): `x`
    /// as in [`Graph::linear_w8a16`], and `codes` i8 `[out, 2·in]`, each
    /// row `r₁` then `r₂` with `w ≈ scale·(r₁ + r₂/254)`
    /// (`kiln export`'s `quantize_rows_i8_two_terms`). The codes
    /// are read as `[2·out, in]` (a reshape), so one i8 × i8 → i32 product
    /// of `[2·S, in]` by `[2·out, in]` gives all four term products; each
    /// weight row's pair is joined as `Y(r₁) + Y(r₂)/254` before the
    /// activations' scales. About 15 bits on both sides.
    pub fn linear_w16a16(
        &mut self,
        x: Value,
        codes: Value,
        scale: Value,
    ) -> Result<Value, GraphError> {
        self.linear_i8(x, codes, scale, I8Terms::W16A16)
    }

    /// `x · Wᵀ` with `x` and `W` as one or two i8 terms per row, `W` with
    /// one scale per row ([`Graph::linear_w8a8`], [`Graph::linear_w8a16`],
    /// [`Graph::linear_w16a16`]).
    fn linear_i8(
        &mut self,
        x: Value,
        codes: Value,
        scale: Value,
        terms: I8Terms,
    ) -> Result<Value, GraphError> {
        let (op, wide) = match terms {
            I8Terms::W8A8 => ("linear_w8a8", 1),
            I8Terms::W8A16 => ("linear_w8a16", 1),
            I8Terms::W16A16 => ("linear_w16a16", 2),
        };
        let (tx, tq, ts) = (self.ty(x).clone(), self.ty(codes), self.ty(scale));
        if tx.rank() != 2
            || tx.dtype != DType::F32
            || tq.rank() != 2
            || tq.dtype != DType::I8
            || tq.shape[1] != wide * tx.shape[1]
            || ts.dtype != DType::F32
            || ts.shape.as_slice() != [tq.shape[0], 1]
        {
            let k = if wide == 2 { "2·in" } else { "in" };
            return Err(GraphError {
                op,
                msg: format!("needs f32 x [S, in], i8 codes [out, {k}] and f32 scale [out, 1], got {tx}, {tq} and {ts}"),
            });
        }
        let (s, n, k) = (tx.shape[0], tq.shape[0], tx.shape[1]);
        // The weights' two terms as rows 2r and 2r + 1: a free reshape.
        let w = match wide {
            1 => codes,
            _ => self.reshape(codes, &[2 * n, k])?,
        };
        // i32 sums `[rows, n·wide]` as f32 `[rows, n]`: each weight row's
        // second term joined to its first with the scale 1/254.
        let join = |g: &mut Graph, sums: Value, rows: usize| -> Result<Value, GraphError> {
            let y = g.convert(sums, DType::F32)?;
            if wide == 1 {
                return Ok(y);
            }
            let y = g.reshape(y, &[rows, n, 2])?;
            let hi = g.slice_dim(y, 2, 0, 1)?;
            let lo = g.slice_dim(y, 2, 1, 2)?;
            let k254 = g.splat_like(lo, 254.0)?;
            let lo = g.div(lo, k254)?;
            let y = g.add(hi, lo)?;
            g.reshape(y, &[rows, n])
        };
        let y = if terms == I8Terms::W8A8 {
            let (q1, s1) = self.round_rows_i8(x)?;
            let sums = self.linear(q1, w)?;
            let y = join(self, sums, s)?;
            let s1o = self.broadcast_in_dim(s1, &[s, n], &[0])?;
            self.mul(y, s1o)?
        } else {
            let (s1, both) = self.two_term_rows(x)?;
            let sums = self.linear(both, w)?;
            let y = join(self, sums, 2 * s)?;
            self.join_two_term_rows(y, s1)?
        };
        let sw = self.reshape(scale, &[n])?;
        let swo = self.broadcast_in_dim(sw, &[s, n], &[1])?;
        self.mul(y, swo)
    }

    /// `x · Wᵀ` for a GGUF matrix whose 4-bit codes are kept (`--weights
    /// w4a16`): `codes` i4 `[out, in]`, each the GGUF's unsigned code
    /// minus 8, `scale` and `min` f32 `[out, in/32]` (one per 32-element
    /// block; `min` absent for Q4_0), and `zero` the type's offset, so
    /// `W = (c + 8 − zero)·scale + min`. `x` f32 `[S, in]` is carried by
    /// [`Graph::linear_w8a16`]'s two i8 terms `[2·S, in]`, and the product
    /// is taken block by block in i8 × i4 → i32, batched over the blocks
    /// (`[in/32, 2·S, out]`, arm64's s8 × s4 micro-kernel), each block's
    /// sums exact in f32 (at most 32·128·8 in size). Then the code offset
    /// `(8 − zero)·Σq` per block (exact in f32), the block scales, the sum
    /// over blocks, the two terms joined as `w8a16` joins them, and the
    /// minimums times the f32 block sums of `x`. Only the activations'
    /// rounding to about 15 bits is lossy: the codes are the GGUF's.
    pub fn linear_w4a16(
        &mut self,
        x: Value,
        codes: Value,
        scale: Value,
        min: Option<Value>,
        zero: u32,
    ) -> Result<Value, GraphError> {
        const G: usize = I4_BLOCK;
        let (tx, tq, ts) = (
            self.ty(x).clone(),
            self.ty(codes).clone(),
            self.ty(scale).clone(),
        );
        let tm = min.map(|m| self.ty(m).clone());
        let ok = tx.rank() == 2
            && tx.dtype == DType::F32
            && tq.rank() == 2
            && tq.dtype == DType::I4
            && tq.shape[1] == tx.shape[1]
            && tx.shape[1] % G == 0
            && ts.dtype == DType::F32
            && ts.shape.as_slice() == [tq.shape[0], tq.shape[1] / G]
            && tm.as_ref().is_none_or(|tm| *tm == ts)
            && zero <= 8;
        if !ok {
            return Err(GraphError {
                op: "linear_w4a16",
                msg: format!(
                    "needs f32 x [S, in] (in a multiple of {G}), i4 codes [out, in], f32 scale                      and minimum [out, in/{G}] and a zero of at most 8, got {tx}, {tq}, {ts}, {} and {zero}",
                    tm.map_or("no minimum".to_string(), |t| t.to_string())
                ),
            });
        }
        let (s, n, k) = (tx.shape[0], tq.shape[0], tx.shape[1]);
        let (b, r) = (k / G, 2 * s);
        let (p, s1) = self.i4_block_products(x, codes, zero)?;
        let st = self.transpose(scale, &[1, 0])?;
        let sb = self.broadcast_in_dim(st, &[b, r, n], &[0, 2])?;
        let p = self.mul(p, sb)?;
        let y = self.reduce_sum(p, &[0])?;
        let y = self.join_two_term_rows(y, s1)?;
        let Some(m) = min else { return Ok(y) };
        let xb = self.reshape(x, &[s, b, G])?;
        let xsum = self.reduce_sum(xb, &[2])?;
        let ym = self.linear(xsum, m)?;
        self.add(y, ym)
    }

    /// [`Graph::linear_w4a16`] for a Q4_K matrix, its block scales as
    /// GGML stores them: `sc` and `m` i8 `[out, in/32]`, each block's
    /// 6-bit scale and minimum, and `d` and `dmin` f16 `[out, in/256]`,
    /// each 256-element super-block's, so `W = (c + 8)·d·sc − dmin·m`.
    /// The block products are [`Graph::linear_w4a16`]'s; the scales are
    /// applied as broadcasts beside them: each block's sums times `sc`,
    /// summed over its super-block, times `d`, summed over the
    /// super-blocks. The minimums `−Σ dmin·m·Σx` are broadcasts too for
    /// one row (a decode step: nothing of the size of the scales is formed
    /// on a call, nor kept at load), and a product with the minimums
    /// `dmin·m` for several (a prefill, where the rows share them).
    pub fn linear_w4a16_super(
        &mut self,
        x: Value,
        codes: Value,
        [sc, m, d, dmin]: [Value; 4],
    ) -> Result<Value, GraphError> {
        const G: usize = I4_BLOCK;
        const PER: usize = I4_SUPER_BLOCK / G;
        let (tx, tq) = (self.ty(x).clone(), self.ty(codes).clone());
        let (tsc, td) = (self.ty(sc).clone(), self.ty(d).clone());
        let (s, n, k) = (tx.shape[0], tq.shape[0], tx.shape[1]);
        let ok = tx.rank() == 2
            && tx.dtype == DType::F32
            && tq.rank() == 2
            && tq.dtype == DType::I4
            && tq.shape[1] == k
            && k % (G * PER) == 0
            && tsc.dtype == DType::I8
            && tsc.shape.as_slice() == [n, k / G]
            && *self.ty(m) == tsc
            && td.dtype.is_float()
            && td.shape.as_slice() == [n, k / G / PER]
            && *self.ty(dmin) == td;
        if !ok {
            return Err(GraphError {
                op: "linear_w4a16_super",
                msg: format!(
                    "needs f32 x [S, in] (in a multiple of 256), i4 codes [out, in], i8 block scales and minimums [out, in/32] and float super-block scales [out, in/256], got {tx}, {tq}, {tsc} and {td}"
                ),
            });
        }
        let (r, nb) = (2 * s, k / G / PER);
        let (p, s1) = self.i4_block_products(x, codes, 0)?;
        // [B, 8, r, n]: block j of super-block B. Each block's sums times
        // its 6-bit scale, summed over the super-block's 8 blocks, then
        // times the super-block's d and summed over the super-blocks: two
        // reductions of one dimension each, each with its broadcast
        // product in the same dispatch (one reduction over both, or over
        // the blocks reshaped back to [in/32, r, n], is not fused, and
        // iree-compile 3.13 cannot vectorize the two-dimension sum at some
        // shapes: "'vector.contract' op invalid accumulator/result vector
        // shape").
        let p = self.reshape(p, &[nb, PER, r, n])?;
        let scf = self.convert(sc, DType::F32)?;
        let scf = self.reshape(scf, &[n, nb, PER])?;
        let sct = self.transpose(scf, &[1, 2, 0])?;
        let scb = self.broadcast_in_dim(sct, &[nb, PER, r, n], &[0, 1, 3])?;
        let p = self.mul(p, scb)?;
        let t = self.reduce_sum(p, &[1])?;
        let df = self.convert(d, DType::F32)?;
        let dt = self.transpose(df, &[1, 0])?;
        let db = self.broadcast_in_dim(dt, &[nb, r, n], &[0, 2])?;
        let t = self.mul(t, db)?;
        let y = self.reduce_sum(t, &[0])?;
        let y = self.join_two_term_rows(y, s1)?;
        let xb = self.reshape(x, &[s, nb * PER, G])?;
        let xsum = self.reduce_sum(xb, &[2])?;
        let ym = if s == 1 {
            // One row (a decode step): Σ dmin·m·xsum as broadcasts over
            // [1, out, in/32] and one reduction, no minimum matrix formed.
            let mgrid = [s, n, nb, PER];
            let xs = self.reshape(xsum, &[s, nb, PER])?;
            let xs = self.broadcast_in_dim(xs, &mgrid, &[0, 2, 3])?;
            let mf = self.convert(m, DType::F32)?;
            let mf = self.reshape(mf, &[n, nb, PER])?;
            let mb = self.broadcast_in_dim(mf, &mgrid, &[1, 2, 3])?;
            let dmf = self.convert(dmin, DType::F32)?;
            let dmb = self.broadcast_in_dim(dmf, &mgrid, &[1, 2])?;
            let t = self.mul(xs, mb)?;
            let t = self.mul(t, dmb)?;
            let t = self.reshape(t, &[s, n, nb * PER])?;
            self.reduce_sum(t, &[2])?
        } else {
            // Several rows (a prefill): the minimums `dmin·m` formed once
            // and multiplied as a matrix, which the rows share.
            let mins = self.super_block_scales(m, dmin)?;
            self.linear(xsum, mins)?
        };
        self.sub(y, ym)
    }

    /// The block products of [`Graph::linear_w4a16`]: `x` f32 `[S, in]` as
    /// two i8 terms `[2·S, in]` against i4 `codes` `[out, in]`, i8 × i4 →
    /// i32 batched over the 32-blocks, as f32 `[in/32, 2·S, out]` with the
    /// code offset `(8 − zero)·Σq` added per block; and the rows' scales
    /// `s₁` `[S]` to join the terms with ([`Graph::join_two_term_rows`]).
    fn i4_block_products(
        &mut self,
        x: Value,
        codes: Value,
        zero: u32,
    ) -> Result<(Value, Value), GraphError> {
        const G: usize = I4_BLOCK;
        let (s, k) = (self.ty(x).shape[0], self.ty(x).shape[1]);
        let n = self.ty(codes).shape[0];
        let (b, r) = (k / G, 2 * s);
        let (s1, both) = self.two_term_rows(x)?;
        let qb = self.reshape(both, &[r, b, G])?;
        let cb = self.reshape(codes, &[n, b, G])?;
        let dims = crate::graph::DotDims {
            lhs_batch: vec![1],
            rhs_batch: vec![1],
            lhs_contract: vec![2],
            rhs_contract: vec![2],
        };
        let p = self.dot_general(qb, cb, dims)?;
        let mut p = self.convert(p, DType::F32)?;
        if zero != 8 {
            // Σ q·(c + 8 − zero) = Σ q·c + (8 − zero)·Σ q, per block.
            let qf = self.convert(qb, DType::F32)?;
            let qsum = self.reduce_sum(qf, &[2])?;
            let off = self.splat_like(qsum, (8 - zero) as f64)?;
            let qsum = self.mul(qsum, off)?;
            let qsum = self.transpose(qsum, &[1, 0])?;
            let qsum = self.broadcast_in_dim(qsum, &[b, r, n], &[0, 1])?;
            p = self.add(p, qsum)?;
        }
        Ok((p, s1))
    }

    /// `w8a16`'s activations: each row of f32 `x` `[S, in]` as two i8
    /// terms, stacked as the rows of one i8 `[2·S, in]` (first terms, then
    /// second terms), and the rows' scales `s₁` `[S]`
    /// ([`Graph::linear_w8a16`]). `x/s₁ − round(x/s₁)` lies in [−½, ½]:
    /// times 254 it rounds into i8, the second term with the fixed scale
    /// `s₂ = s₁/254`.
    fn two_term_rows(&mut self, x: Value) -> Result<(Value, Value), GraphError> {
        let s = self.ty(x).shape[0];
        let (s1, xs) = self.row_scales_i8(x)?;
        let both = if s == 1 {
            self.two_terms_in_one_op(xs)?
        } else {
            let (q1, q2) = self.two_terms(xs)?;
            self.concatenate(&[q1, q2], 0)?
        };
        Ok((s1, both))
    }

    /// f32 products `y` `[2·S, n]` of [`Graph::two_term_rows`]' rows
    /// joined: `s₁·y[..S] + s₂·y[S..]` → `[S, n]`.
    fn join_two_term_rows(&mut self, y: Value, s1: Value) -> Result<Value, GraphError> {
        let (r, n) = {
            let t = self.ty(y);
            (t.shape[0], t.shape[1])
        };
        let s = r / 2;
        let first = self.slice_dim(y, 0, 0, s)?;
        let second = self.slice_dim(y, 0, s, r)?;
        let s1o = self.broadcast_in_dim(s1, &[s, n], &[0])?;
        let y1 = self.mul(first, s1o)?;
        // s₂ = s₁/254 divided after the broadcast, element by element (the
        // same values): IREE fuses it into the product's epilogue, where a
        // scale of its own is a one-element dispatch.
        let k254 = self.splat_like(s1o, 254.0)?;
        let s2o = self.div(s1o, k254)?;
        let y2 = self.mul(second, s2o)?;
        self.add(y1, y2)
    }

    /// Rows of a `--weights w4a16` matrix widened to f32 `[R, in]`:
    /// `(f32(c) + 8 − zero)·scale + min` per 32-element block, `codes` i4
    /// `[R, in]`, `scale` and `min` f32 `[R, in/32]`
    /// ([`Graph::linear_w4a16`]'s weights).
    pub fn widen_i4_rows(
        &mut self,
        codes: Value,
        scale: Value,
        min: Option<Value>,
        zero: u32,
    ) -> Result<Value, GraphError> {
        const G: usize = I4_BLOCK;
        let shape = self.ty(codes).shape.to_vec();
        if shape.len() != 2 || shape[1] % G != 0 {
            return err(format!(
                "i4 rows must be [R, in] with in a multiple of {G}, got {shape:?}"
            ));
        }
        let grouped = [shape[0], shape[1] / G, G];
        let f = self.convert(codes, DType::F32)?;
        let mut f = self.reshape(f, &grouped)?;
        if zero != 8 {
            let off = self.splat_like(f, 8.0 - zero as f64)?;
            f = self.add(f, off)?;
        }
        let sb = self.broadcast_in_dim(scale, &grouped, &[0, 1])?;
        let mut f = self.mul(f, sb)?;
        if let Some(m) = min {
            let mb = self.broadcast_in_dim(m, &grouped, &[0, 1])?;
            f = self.add(f, mb)?;
        }
        self.reshape(f, &shape)
    }

    /// Q4_K's 32-block scales (or minimums) as f32 `[R, in/32]`: each
    /// block's 6-bit integer `sub` (i8 `[R, in/32]`) times its
    /// 256-element super-block's `d` (f16 `[R, in/256]`), one f32 product
    /// as GGML forms `d·sc` (`--weights w4a16`, [`Graph::linear_w4a16`]'s
    /// scales).
    pub fn super_block_scales(&mut self, sub: Value, d: Value) -> Result<Value, GraphError> {
        const PER: usize = I4_SUPER_BLOCK / I4_BLOCK;
        let (ts, td) = (self.ty(sub).clone(), self.ty(d).clone());
        let ok = ts.rank() == 2
            && ts.dtype == DType::I8
            && td.rank() == 2
            && td.dtype.is_float()
            && td.shape[0] == ts.shape[0]
            && ts.shape[1] == PER * td.shape[1];
        if !ok {
            return Err(GraphError {
                op: "super_block_scales",
                msg: format!(
                    "needs i8 block scales [R, {PER}·n] and float super-block scales [R, n], got {ts} and {td}"
                ),
            });
        }
        let grouped = [ts.shape[0], td.shape[1], PER];
        let f = self.convert(sub, DType::F32)?;
        let f = self.reshape(f, &grouped)?;
        let df = self.convert(d, DType::F32)?;
        let db = self.broadcast_in_dim(df, &grouped, &[0, 1])?;
        let f = self.mul(f, db)?;
        self.reshape(f, &ts.shape)
    }

    /// The two i8 terms of `xs = x / s₁` (f32 `[S, in]`), each `[S, in]`:
    /// `round(xs)`, then `round((xs − round(xs)) · 254)`, each rounded by
    /// its own op (the form for several rows: a prefill, a forward), to be
    /// joined as the rows of one `[2·S, in]` input.
    fn two_terms(&mut self, xs: Value) -> Result<(Value, Value), GraphError> {
        let r1 = self.unary(UnaryOp::RoundNearestEven, xs)?;
        let q1 = self.convert(r1, DType::I8)?;
        let rest = self.rounded_rest(xs, r1)?;
        let q2 = self.convert(rest, DType::I8)?;
        Ok((q1, q2))
    }

    /// The second term's values, `round((xs − r) · 254)` for `r =
    /// round(xs)` (f32, `xs`'s shape).
    fn rounded_rest(&mut self, xs: Value, r: Value) -> Result<Value, GraphError> {
        let rest = self.sub(xs, r)?;
        let k254 = self.splat_like(rest, 254.0)?;
        let rest = self.mul(rest, k254)?;
        self.unary(UnaryOp::RoundNearestEven, rest)
    }

    /// [`Graph::two_terms`]' values joined, by one elementwise op over
    /// `[2, S, in]` (plane 0 the first term, plane 1 the second), which IREE
    /// fuses with the packing of the product's input: one dispatch where
    /// the joined form takes three. The form for one row (a decode step),
    /// where dispatches, not bytes, bound the call: SmolLM2's decode runs
    /// 1480 dispatches instead of 1692, and its decode medians were 5–18 %
    /// lower in four interleaved A/B runs; at 64 rows the fused pack
    /// measured slower (prefill 185 against 170 ms), so a prefill keeps the
    /// joined form (docs/journal/2026-12-05-fast-exact-and-small.md,
    /// "Decode on an AVX2 host").
    fn two_terms_in_one_op(&mut self, xs: Value) -> Result<Value, GraphError> {
        let (s, k) = {
            let t = self.ty(xs);
            (t.shape[0], t.shape[1])
        };
        let xs2 = self.broadcast_in_dim(xs, &[2, s, k], &[1, 2])?;
        let r = self.unary(UnaryOp::RoundNearestEven, xs2)?;
        let rest = self.rounded_rest(xs2, r)?;
        let plane = self.iota(DType::I32, &[2, s, k], 0)?;
        let zero = self.splat_like(plane, 0.0)?;
        let first = self.compare(CompareDir::Eq, plane, zero)?;
        let both = self.select(first, r, rest)?;
        let both = self.convert(both, DType::I8)?;
        self.reshape(both, &[2 * s, k])
    }

    /// Each row of f32 `x` `[S, in]` rounded to i8 with its own scale
    /// ([`Graph::row_scales_i8`]): `(codes i8 [S, in], scales f32 [S])`.
    fn round_rows_i8(&mut self, x: Value) -> Result<(Value, Value), GraphError> {
        let (sx, xs) = self.row_scales_i8(x)?;
        let xr = self.unary(UnaryOp::RoundNearestEven, xs)?;
        let xq = self.convert(xr, DType::I8)?;
        Ok((xq, sx))
    }

    /// Each row's i8 scale `max|x|/127` of f32 `x` `[S, in]` (an all-zero
    /// row keeps a positive scale), and `x / scale`, which
    /// `round_nearest_even` takes to the row's codes: `(scales f32 [S],
    /// x / scale f32 [S, in])`.
    fn row_scales_i8(&mut self, x: Value) -> Result<(Value, Value), GraphError> {
        let shape = self.ty(x).shape.to_vec();
        // max(max|x|/127, tiny) = max over the row of max(|x|/127, tiny),
        // bit for bit (a rounded division by 127 keeps the order): all of
        // it elementwise before the reduction, which IREE fuses into the
        // reduction's dispatch, instead of a one-element dispatch after it.
        let a = self.unary(UnaryOp::Abs, x)?;
        let k127 = self.splat_like(a, 127.0)?;
        let a = self.div(a, k127)?;
        let tiny = self.splat_like(a, f32::MIN_POSITIVE as f64)?;
        let a = self.max(a, tiny)?;
        let sx = self.reduce(a, ReduceKind::Max, &[1])?;
        let sxb = self.broadcast_in_dim(sx, &shape, &[0])?;
        let xs = self.div(x, sxb)?;
        Ok((sx, xs))
    }

    /// Rows of an i8 matrix widened: `f32(codes) · scale`, `codes` i8
    /// `[R, in]`, `scale` f32 `[R, 1]` (gathered embedding rows of a
    /// `--weights w8a8` table).
    pub fn widen_i8_rows(&mut self, codes: Value, scale: Value) -> Result<Value, GraphError> {
        let shape = self.ty(codes).shape.to_vec();
        let f = self.convert(codes, DType::F32)?;
        let sb = self.broadcast_in_dim(scale, &shape, &[0, 1])?;
        self.mul(f, sb)
    }

    /// Rows of a two-term i8 matrix widened: `(f32(r₁) + f32(r₂)/254) ·
    /// scale`, `codes` i8 `[R, 2·in]` (each row `r₁` then `r₂`), `scale`
    /// f32 `[R, 1]` (gathered embedding rows of a `--weights w16a16`
    /// table) → f32 `[R, in]`.
    pub fn widen_i8_two_term_rows(
        &mut self,
        codes: Value,
        scale: Value,
    ) -> Result<Value, GraphError> {
        let shape = self.ty(codes).shape.to_vec();
        let (r, k) = (shape[0], shape[1] / 2);
        let pairs = self.reshape(codes, &[r, 2, k])?;
        let first = self.slice_dim(pairs, 1, 0, 1)?;
        let first = self.reshape(first, &[r, k])?;
        let rest = self.slice_dim(pairs, 1, 1, 2)?;
        let rest = self.reshape(rest, &[r, k])?;
        self.widen_i8_rows_and_rest(first, rest, scale)
    }

    /// Rows of an i8 matrix and of its rounding error widened:
    /// `(f32(codes) + f32(rest)/254) · scale`, `codes` and `rest` i8 `[R,
    /// in]`, `scale` f32 `[R, 1]` (gathered rows of a `--weights w8a16e`
    /// table, `quantize_rows_i8_two_terms`'s two
    /// terms) → f32 `[R, in]`.
    pub fn widen_i8_rows_and_rest(
        &mut self,
        codes: Value,
        rest: Value,
        scale: Value,
    ) -> Result<Value, GraphError> {
        let shape = self.ty(codes).shape.to_vec();
        let hi = self.convert(codes, DType::F32)?;
        let lo = self.convert(rest, DType::F32)?;
        let k254 = self.splat_like(lo, 254.0)?;
        let lo = self.div(lo, k254)?;
        let v = self.add(hi, lo)?;
        let sb = self.broadcast_in_dim(scale, &shape, &[0, 1])?;
        self.mul(v, sb)
    }
}
