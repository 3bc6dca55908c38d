//! One builder method per op. Each checks its operands and returns the
//! new value, or a [`GraphError`] that names the op and the offending types.

use super::{
    BinaryOp, BlockCodes, CompareDir, DType, DotDims, Graph, GraphError, Literal, Op, ReduceKind,
    Shape, TensorType, UnaryOp, Value,
};

fn err<T>(op: &'static str, msg: impl Into<String>) -> Result<T, GraphError> {
    Err(GraphError {
        op,
        msg: msg.into(),
    })
}

fn unique_in_range(dims: &[usize], rank: usize) -> bool {
    dims.iter().all(|&d| d < rank) && dims.iter().enumerate().all(|(i, d)| !dims[..i].contains(d))
}

impl Graph {
    fn check_value(&self, op: &'static str, v: Value) -> Result<(), GraphError> {
        if v.index() < self.nodes.len() {
            Ok(())
        } else {
            err(
                op,
                format!(
                    "operand #{} is not defined in function @{} ({} nodes)",
                    v.index(),
                    self.name,
                    self.nodes.len()
                ),
            )
        }
    }

    /// Errors (naming `op`) unless every value of `vs` is defined in this
    /// graph: what a recipe checks before reading its operands' types.
    pub(crate) fn checked(&self, op: &'static str, vs: &[Value]) -> Result<(), GraphError> {
        vs.iter().try_for_each(|&v| self.check_value(op, v))
    }

    /// Adds a function argument of type `ty`.
    pub fn input(&mut self, ty: TensorType) -> Value {
        let index = self.inputs.len();
        let v = self.push(Op::Input { index }, &[], ty);
        self.inputs.push(v);
        v
    }

    /// A named external weight of its stored type. Using one key twice in a
    /// function returns the same value; with another type it is an error.
    pub fn parameter(&mut self, key: &str, ty: TensorType) -> Result<Value, GraphError> {
        self.declare_parameter(key, None, ty)
    }

    /// The part of external weight `key` that starts `offset` bytes into its
    /// archive entry and is as long as `ty` (printed as
    /// `#flow.parameter.named<…, {offset = …, length = …}>`): one row chunk
    /// of a table too large to be bound as one device buffer. The same
    /// (key, offset) twice returns the same value.
    pub fn parameter_part(
        &mut self,
        key: &str,
        ty: TensorType,
        offset: u64,
    ) -> Result<Value, GraphError> {
        self.declare_parameter(key, Some(offset), ty)
    }

    fn declare_parameter(
        &mut self,
        key: &str,
        offset: Option<u64>,
        ty: TensorType,
    ) -> Result<Value, GraphError> {
        for (i, n) in self.nodes.iter().enumerate() {
            if let Op::Parameter { key: k, offset: o } = &n.op {
                if k == key && *o == offset {
                    if n.ty == ty {
                        return Ok(Value(i as u32));
                    }
                    return err(
                        "parameter",
                        format!("\"{key}\" already declared as {}, now as {ty}", n.ty),
                    );
                }
            }
        }
        if ty.checked_numel().is_none() {
            return err(
                "parameter",
                format!("\"{key}\": element count of {ty} overflows"),
            );
        }
        Ok(self.push(
            Op::Parameter {
                key: key.to_string(),
                offset,
            },
            &[],
            ty,
        ))
    }

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

    /// Ok when `x` is exactly representable in `dtype`.
    pub(crate) fn check_literal(dtype: DType, x: f64) -> Result<(), GraphError> {
        let ok = match dtype {
            DType::F32 => x.is_nan() || (x as f32) as f64 == x,
            DType::BF16 => x.is_nan() || half::bf16::from_f64(x).to_f64() == x,
            DType::F16 => x.is_nan() || half::f16::from_f64(x).to_f64() == x,
            DType::I32 => x.fract() == 0.0 && x >= i32::MIN as f64 && x <= i32::MAX as f64,
            DType::I16 => x.fract() == 0.0 && x >= i16::MIN as f64 && x <= i16::MAX as f64,
            DType::I8 => x.fract() == 0.0 && x >= i8::MIN as f64 && x <= i8::MAX as f64,
            DType::I1 => x == 0.0 || x == 1.0,
        };
        if ok {
            Ok(())
        } else {
            err(
                "constant",
                format!("{x} is not exactly representable as {dtype}"),
            )
        }
    }

    /// A constant whose every element is `value` (must be exact in `dtype`).
    pub fn splat(
        &mut self,
        dtype: DType,
        shape: &[usize],
        value: f64,
    ) -> Result<Value, GraphError> {
        Self::check_literal(dtype, value)?;
        let ty = TensorType::new(dtype, shape);
        if ty.checked_numel().is_none() {
            return err("constant", format!("element count of {ty} overflows"));
        }
        Ok(self.push(Op::Constant(Literal::Splat(value)), &[], ty))
    }

    /// A rank-0 constant.
    pub fn scalar(&mut self, dtype: DType, value: f64) -> Result<Value, GraphError> {
        self.splat(dtype, &[], value)
    }

    /// A dense constant from row-major values (each exact in `dtype`).
    pub fn dense(
        &mut self,
        dtype: DType,
        shape: &[usize],
        values: Vec<f64>,
    ) -> Result<Value, GraphError> {
        let ty = TensorType::new(dtype, shape);
        if ty.checked_numel() != Some(values.len()) {
            return err(
                "constant",
                format!("{} values given for {ty}", values.len()),
            );
        }
        for &x in &values {
            Self::check_literal(dtype, x)?;
        }
        Ok(self.push(Op::Constant(Literal::Dense(values)), &[], ty))
    }

    /// Converts `x` to element type `dtype` (same shape).
    pub fn convert(&mut self, x: Value, dtype: DType) -> Result<Value, GraphError> {
        self.checked("convert", &[x])?;
        let ty = self.ty(x).with_dtype(dtype);
        Ok(self.push(Op::Convert, &[x], ty))
    }

    /// Reinterprets the bits of each element of `x` as `dtype`, which must
    /// have the same width (f32/i32 or bf16/f16/i16); same shape.
    pub fn bitcast_convert(&mut self, x: Value, dtype: DType) -> Result<Value, GraphError> {
        self.checked("bitcast_convert", &[x])?;
        let t = self.ty(x);
        if t.dtype.size() != dtype.size() || t.dtype == DType::I1 || dtype == DType::I1 {
            return err(
                "bitcast_convert",
                format!("cannot reinterpret {t} as {dtype}: element widths differ"),
            );
        }
        let ty = t.with_dtype(dtype);
        Ok(self.push(Op::BitcastConvert, &[x], ty))
    }

    /// `a << b` elementwise on i32 tensors of one type (`b` ≥ 32 gives 0).
    pub fn shift_left(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.int32_binary(Op::ShiftLeft, a, b)
    }

    /// `a >> b` elementwise on i32 tensors of one type, zeros shifted in
    /// (`stablehlo.shift_right_logical`; shifts of 32 or more give 0).
    pub fn shift_right_logical(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.int32_binary(Op::ShiftRightLogical, a, b)
    }

    /// `a & b` elementwise on i32 tensors of one type (`stablehlo.and`).
    pub fn bitwise_and(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.int32_binary(Op::BitwiseAnd, a, b)
    }

    /// A bit-level op on two i32 tensors of one type.
    fn int32_binary(&mut self, op: Op, a: Value, b: Value) -> Result<Value, GraphError> {
        let name = op.name();
        self.checked(name, &[a, b])?;
        let (ta, tb) = (self.ty(a), self.ty(b));
        if ta != tb || ta.dtype != DType::I32 {
            return err(
                name,
                format!("needs two i32 tensors of one type, got {ta} and {tb}"),
            );
        }
        let ty = ta.clone();
        Ok(self.push(op, &[a, b], ty))
    }

    /// The identity on `x`, as a barrier IREE does not fuse across. Used
    /// after the embedding gather: fused into its consumers, the gather
    /// breaks IREE's Vulkan codegen for the Mali `valhall` target.
    pub fn optimization_barrier(&mut self, x: Value) -> Result<Value, GraphError> {
        self.checked("optimization_barrier", &[x])?;
        let ty = self.ty(x).clone();
        Ok(self.push(Op::OptimizationBarrier, &[x], ty))
    }

    /// Elementwise binary op; both operands must have the same type.
    pub fn binary(&mut self, op: BinaryOp, a: Value, b: Value) -> Result<Value, GraphError> {
        let name = op.name();
        self.checked(name, &[a, b])?;
        let (ta, tb) = (self.ty(a), self.ty(b));
        if ta != tb {
            return err(name, format!("operand types differ: {ta} and {tb}"));
        }
        let ok = match op {
            BinaryOp::Power | BinaryOp::Divide => ta.dtype.is_float() || ta.dtype.is_int(),
            _ => !matches!(ta.dtype, DType::I1) && !ta.dtype.is_storage_int(),
        };
        if !ok {
            return err(name, format!("unsupported element type in {ta}"));
        }
        let ty = ta.clone();
        Ok(self.push(Op::Binary(op), &[a, b], ty))
    }

    /// `a + b`
    pub fn add(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.binary(BinaryOp::Add, a, b)
    }
    /// `a - b`
    pub fn sub(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.binary(BinaryOp::Subtract, a, b)
    }
    /// `a * b`
    pub fn mul(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.binary(BinaryOp::Multiply, a, b)
    }
    /// `a / b`
    pub fn div(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.binary(BinaryOp::Divide, a, b)
    }
    /// `max(a, b)`
    pub fn max(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.binary(BinaryOp::Maximum, a, b)
    }
    /// `min(a, b)`
    pub fn min(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.binary(BinaryOp::Minimum, a, b)
    }
    /// `a ^ b`
    pub fn pow(&mut self, a: Value, b: Value) -> Result<Value, GraphError> {
        self.binary(BinaryOp::Power, a, b)
    }

    /// Elementwise unary op; float operands (negate also takes i32).
    pub fn unary(&mut self, op: UnaryOp, x: Value) -> Result<Value, GraphError> {
        let name = op.name();
        self.checked(name, &[x])?;
        let t = self.ty(x);
        let ok = t.dtype.is_float() || (op == UnaryOp::Negate && t.dtype.is_int());
        if !ok {
            return err(name, format!("needs a float tensor, got {t}"));
        }
        let ty = t.clone();
        Ok(self.push(Op::Unary(op), &[x], ty))
    }

    /// `-x`
    pub fn neg(&mut self, x: Value) -> Result<Value, GraphError> {
        self.unary(UnaryOp::Negate, x)
    }
    /// `e^x`
    pub fn exp(&mut self, x: Value) -> Result<Value, GraphError> {
        self.unary(UnaryOp::Exponential, x)
    }
    /// `ln x`
    pub fn log(&mut self, x: Value) -> Result<Value, GraphError> {
        self.unary(UnaryOp::Log, x)
    }
    /// `1/sqrt(x)`
    pub fn rsqrt(&mut self, x: Value) -> Result<Value, GraphError> {
        self.unary(UnaryOp::Rsqrt, x)
    }
    /// `sqrt(x)`
    pub fn sqrt(&mut self, x: Value) -> Result<Value, GraphError> {
        self.unary(UnaryOp::Sqrt, x)
    }
    /// `tanh(x)`
    pub fn tanh(&mut self, x: Value) -> Result<Value, GraphError> {
        self.unary(UnaryOp::Tanh, x)
    }
    /// `1/(1+e^-x)`
    pub fn logistic(&mut self, x: Value) -> Result<Value, GraphError> {
        self.unary(UnaryOp::Logistic, x)
    }

    /// Elementwise comparison; result is i1 of the operands' shape.
    pub fn compare(&mut self, dir: CompareDir, a: Value, b: Value) -> Result<Value, GraphError> {
        self.checked("compare", &[a, b])?;
        let (ta, tb) = (self.ty(a), self.ty(b));
        if ta != tb {
            return err("compare", format!("operand types differ: {ta} and {tb}"));
        }
        let ty = ta.with_dtype(DType::I1);
        Ok(self.push(Op::Compare(dir), &[a, b], ty))
    }

    /// `pred ? on_true : on_false`, elementwise; `pred` is i1 of the same shape.
    pub fn select(
        &mut self,
        pred: Value,
        on_true: Value,
        on_false: Value,
    ) -> Result<Value, GraphError> {
        self.checked("select", &[pred, on_true, on_false])?;
        let (tp, tt, tf) = (self.ty(pred), self.ty(on_true), self.ty(on_false));
        if tt != tf {
            return err("select", format!("branch types differ: {tt} and {tf}"));
        }
        if tp.dtype != DType::I1 || tp.shape != tt.shape {
            return err(
                "select",
                format!("predicate must be i1 shaped like {tt}, got {tp}"),
            );
        }
        let ty = tt.clone();
        Ok(self.push(Op::Select, &[pred, on_true, on_false], ty))
    }

    /// Broadcasts `x` to `shape`, operand dim i mapping to result dim `dims[i]`
    /// (strictly increasing; each operand dim is 1 or equals its result dim).
    pub fn broadcast_in_dim(
        &mut self,
        x: Value,
        shape: &[usize],
        dims: &[usize],
    ) -> Result<Value, GraphError> {
        self.checked("broadcast_in_dim", &[x])?;
        let t = self.ty(x);
        let bad = dims.len() != t.rank()
            || dims.windows(2).any(|w| w[0] >= w[1])
            || dims.iter().any(|&d| d >= shape.len())
            || dims
                .iter()
                .zip(&t.shape)
                .any(|(&d, &s)| s != 1 && s != shape[d]);
        if bad {
            return err(
                "broadcast_in_dim",
                format!("cannot broadcast {t} to shape {shape:?} with dims {dims:?}"),
            );
        }
        let ty = TensorType::new(t.dtype, shape);
        Ok(self.push(
            Op::BroadcastInDim {
                dims: dims.to_vec(),
            },
            &[x],
            ty,
        ))
    }

    /// Broadcasts `x` to `shape` aligning trailing dims (numpy style).
    pub fn broadcast_to(&mut self, x: Value, shape: &[usize]) -> Result<Value, GraphError> {
        self.checked("broadcast_in_dim", &[x])?;
        let r = self.ty(x).rank();
        if r > shape.len() {
            return err(
                "broadcast_in_dim",
                format!("cannot broadcast {} to lower rank {shape:?}", self.ty(x)),
            );
        }
        let dims: Vec<usize> = (shape.len() - r..shape.len()).collect();
        self.broadcast_in_dim(x, shape, &dims)
    }

    /// Reshapes `x` to `shape` (same element count).
    pub fn reshape(&mut self, x: Value, shape: &[usize]) -> Result<Value, GraphError> {
        self.checked("reshape", &[x])?;
        let t = self.ty(x);
        let ty = TensorType::new(t.dtype, shape);
        if ty.checked_numel() != Some(t.numel()) {
            return err("reshape", format!("cannot reshape {t} to {ty}"));
        }
        Ok(self.push(Op::Reshape, &[x], ty))
    }

    /// Permutes dims: result dim i is operand dim `perm[i]`.
    pub fn transpose(&mut self, x: Value, perm: &[usize]) -> Result<Value, GraphError> {
        self.checked("transpose", &[x])?;
        let t = self.ty(x);
        if perm.len() != t.rank() || !unique_in_range(perm, t.rank()) {
            return err(
                "transpose",
                format!("{perm:?} is not a permutation of the dims of {t}"),
            );
        }
        let shape: Shape = perm.iter().map(|&p| t.shape[p]).collect();
        let ty = TensorType {
            dtype: t.dtype,
            shape,
        };
        Ok(self.push(
            Op::Transpose {
                perm: perm.to_vec(),
            },
            &[x],
            ty,
        ))
    }

    /// Strided slice `[start, limit)` with `strides` per dim.
    pub fn slice(
        &mut self,
        x: Value,
        start: &[usize],
        limit: &[usize],
        strides: &[usize],
    ) -> Result<Value, GraphError> {
        self.checked("slice", &[x])?;
        let t = self.ty(x);
        let r = t.rank();
        let bad = start.len() != r
            || limit.len() != r
            || strides.len() != r
            || (0..r).any(|i| start[i] > limit[i] || limit[i] > t.shape[i] || strides[i] == 0);
        if bad {
            return err(
                "slice",
                format!("bad slice of {t}: start {start:?}, limit {limit:?}, strides {strides:?}"),
            );
        }
        let shape: Shape = (0..r)
            .map(|i| (limit[i] - start[i]).div_ceil(strides[i]))
            .collect();
        let ty = TensorType {
            dtype: t.dtype,
            shape,
        };
        Ok(self.push(
            Op::Slice {
                start: start.to_vec(),
                limit: limit.to_vec(),
                strides: strides.to_vec(),
            },
            &[x],
            ty,
        ))
    }

    /// Unit-stride slice of `x` along one dim: `[begin, end)`.
    pub fn slice_dim(
        &mut self,
        x: Value,
        dim: usize,
        begin: usize,
        end: usize,
    ) -> Result<Value, GraphError> {
        self.checked("slice", &[x])?;
        let t = self.ty(x);
        if dim >= t.rank() {
            return err("slice", format!("dim {dim} out of range for {t}"));
        }
        let mut start = vec![0; t.rank()];
        let mut limit: Vec<usize> = t.shape.to_vec();
        start[dim] = begin;
        limit[dim] = end;
        let strides = vec![1; t.rank()];
        self.slice(x, &start, &limit, &strides)
    }

    /// `operand` with `update` written at `starts` (one i32 scalar per dim,
    /// each clamped so the update lies inside the operand). Same rank and
    /// dtype; every update dim at most the operand's.
    pub fn dynamic_update_slice(
        &mut self,
        operand: Value,
        update: Value,
        starts: &[Value],
    ) -> Result<Value, GraphError> {
        let mut all = vec![operand, update];
        all.extend_from_slice(starts);
        self.checked("dynamic_update_slice", &all)?;
        let (to, tu) = (self.ty(operand), self.ty(update));
        if to.dtype != tu.dtype
            || to.rank() != tu.rank()
            || to.shape.iter().zip(&tu.shape).any(|(o, u)| u > o)
        {
            return err(
                "dynamic_update_slice",
                format!("cannot write {tu} into {to}"),
            );
        }
        if starts.len() != to.rank() {
            return err(
                "dynamic_update_slice",
                format!("{} start indices for {to}", starts.len()),
            );
        }
        if let Some(&s) = starts
            .iter()
            .find(|&&s| *self.ty(s) != TensorType::scalar(DType::I32))
        {
            return err(
                "dynamic_update_slice",
                format!("start indices must be tensor<i32>, got {}", self.ty(s)),
            );
        }
        let ty = to.clone();
        Ok(self.push(Op::DynamicUpdateSlice, &all, ty))
    }

    /// Concatenates `xs` along `dim`; all other dims and the dtype must agree.
    pub fn concatenate(&mut self, xs: &[Value], dim: usize) -> Result<Value, GraphError> {
        self.checked("concatenate", xs)?;
        let Some(&first) = xs.first() else {
            return err("concatenate", "needs at least one operand");
        };
        let t0 = self.ty(first).clone();
        if dim >= t0.rank() {
            return err("concatenate", format!("dim {dim} out of range for {t0}"));
        }
        let mut total = 0usize;
        for &x in xs {
            let t = self.ty(x);
            let same_other = t.rank() == t0.rank()
                && t.dtype == t0.dtype
                && (0..t.rank()).all(|i| i == dim || t.shape[i] == t0.shape[i]);
            if !same_other {
                return err(
                    "concatenate",
                    format!("operands {t0} and {t} do not agree outside dim {dim}"),
                );
            }
            total += t.shape[dim];
        }
        let mut ty = t0;
        ty.shape[dim] = total;
        Ok(self.push(Op::Concatenate { dim }, xs, ty))
    }

    /// Indices `0..shape[dim]` along `dim`, broadcast over the other dims.
    pub fn iota(&mut self, dtype: DType, shape: &[usize], dim: usize) -> Result<Value, GraphError> {
        let ty = TensorType::new(dtype, shape);
        if dim >= shape.len()
            || dtype == DType::I1
            || dtype.is_storage_int()
            || ty.checked_numel().is_none()
        {
            return err("iota", format!("bad iota {ty} along dim {dim}"));
        }
        Ok(self.push(Op::Iota { dim }, &[], ty))
    }

    /// General dot product. Result dims: batch, lhs free, rhs free.
    pub fn dot_general(&mut self, a: Value, b: Value, dims: DotDims) -> Result<Value, GraphError> {
        self.checked("dot_general", &[a, b])?;
        let (ta, tb) = (self.ty(a), self.ty(b));
        let fail = |why: &str| -> Result<Value, GraphError> {
            err(
                "dot_general",
                format!(
                    "{why}: lhs {ta}, rhs {tb}, batching {:?} x {:?}, contracting {:?} x {:?}",
                    dims.lhs_batch, dims.rhs_batch, dims.lhs_contract, dims.rhs_contract
                ),
            )
        };
        // Integer products take i8 operands and accumulate in i32.
        let out = match (ta.dtype, tb.dtype) {
            (a, b) if a == b && a.is_float() => a,
            (DType::I8, DType::I8) => DType::I32,
            _ => return fail("operands must share one float element type, or both be i8"),
        };
        if dims.lhs_batch.len() != dims.rhs_batch.len()
            || dims.lhs_contract.len() != dims.rhs_contract.len()
        {
            return fail("dimension lists differ in length");
        }
        let lhs_used: Vec<usize> = dims
            .lhs_batch
            .iter()
            .chain(&dims.lhs_contract)
            .copied()
            .collect();
        let rhs_used: Vec<usize> = dims
            .rhs_batch
            .iter()
            .chain(&dims.rhs_contract)
            .copied()
            .collect();
        if !unique_in_range(&lhs_used, ta.rank()) || !unique_in_range(&rhs_used, tb.rank()) {
            return fail("dims out of range or repeated");
        }
        let pairs = dims
            .lhs_batch
            .iter()
            .zip(&dims.rhs_batch)
            .chain(dims.lhs_contract.iter().zip(&dims.rhs_contract));
        for (&l, &r) in pairs {
            if ta.shape[l] != tb.shape[r] {
                return fail("paired dims differ in size");
            }
        }
        let mut shape: Shape = dims.lhs_batch.iter().map(|&d| ta.shape[d]).collect();
        shape.extend(
            (0..ta.rank())
                .filter(|d| !lhs_used.contains(d))
                .map(|d| ta.shape[d]),
        );
        shape.extend(
            (0..tb.rank())
                .filter(|d| !rhs_used.contains(d))
                .map(|d| tb.shape[d]),
        );
        let ty = TensorType { dtype: out, shape };
        Ok(self.push(Op::DotGeneral(dims), &[a, b], ty))
    }

    /// Reduces `x` over `dims` with `kind`; the init constant is added first.
    pub fn reduce(
        &mut self,
        x: Value,
        kind: ReduceKind,
        dims: &[usize],
    ) -> Result<Value, GraphError> {
        self.checked("reduce", &[x])?;
        let t = self.ty(x).clone();
        if dims.is_empty()
            || !unique_in_range(dims, t.rank())
            || t.dtype == DType::I1
            || t.dtype.is_storage_int()
        {
            return err("reduce", format!("cannot reduce {t} over dims {dims:?}"));
        }
        let mut dims = dims.to_vec();
        dims.sort_unstable();
        let init = match (kind, t.dtype.is_float()) {
            (ReduceKind::Sum, _) => 0.0,
            (ReduceKind::Max, true) => f64::NEG_INFINITY,
            (ReduceKind::Min, true) => f64::INFINITY,
            (ReduceKind::Max, false) => i32::MIN as f64,
            (ReduceKind::Min, false) => i32::MAX as f64,
        };
        let init = self.scalar(t.dtype, init)?;
        let shape: Shape = (0..t.rank())
            .filter(|d| !dims.contains(d))
            .map(|d| t.shape[d])
            .collect();
        let ty = TensorType {
            dtype: t.dtype,
            shape,
        };
        Ok(self.push(Op::Reduce { kind, dims }, &[x, init], ty))
    }

    /// Sum over `dims`.
    pub fn reduce_sum(&mut self, x: Value, dims: &[usize]) -> Result<Value, GraphError> {
        self.reduce(x, ReduceKind::Sum, dims)
    }
    /// Maximum over `dims`.
    pub fn reduce_max(&mut self, x: Value, dims: &[usize]) -> Result<Value, GraphError> {
        self.reduce(x, ReduceKind::Max, dims)
    }
    /// Minimum over `dims`.
    pub fn reduce_min(&mut self, x: Value, dims: &[usize]) -> Result<Value, GraphError> {
        self.reduce(x, ReduceKind::Min, dims)
    }

    /// Rows of `table` (`[V, D]`) at i32 `ids` (any shape): result `ids.shape + [D]`.
    pub fn gather_rows(&mut self, table: Value, ids: Value) -> Result<Value, GraphError> {
        self.checked("gather", &[table, ids])?;
        let (tt, ti) = (self.ty(table), self.ty(ids));
        if tt.rank() != 2 || ti.dtype != DType::I32 || ti.rank() == 0 {
            return err(
                "gather",
                format!("needs a [V, D] table and i32 ids of rank >= 1, got {tt} and {ti}"),
            );
        }
        let mut shape = ti.shape.clone();
        shape.push(tt.shape[1]);
        let ty = TensorType {
            dtype: tt.dtype,
            shape,
        };
        Ok(self.push(Op::GatherRows, &[table, ids], ty))
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

    /// Index of the largest element along `dim` as i32 (lowest index on ties),
    /// one variadic reduce over (values, iota).
    pub fn argmax(&mut self, x: Value, dim: usize) -> Result<Value, GraphError> {
        self.checked("argmax", &[x])?;
        let t = self.ty(x).clone();
        if !t.dtype.is_float() || dim >= t.rank() {
            return err(
                "argmax",
                format!("needs a float tensor with dim {dim}, got {t}"),
            );
        }
        let iota = self.iota(DType::I32, &t.shape, dim)?;
        let ninf = self.scalar(t.dtype, f64::NEG_INFINITY)?;
        let zero = self.scalar(DType::I32, 0.0)?;
        let shape: Shape = (0..t.rank())
            .filter(|&d| d != dim)
            .map(|d| t.shape[d])
            .collect();
        let ty = TensorType {
            dtype: DType::I32,
            shape,
        };
        Ok(self.push(Op::Argmax { dim }, &[x, iota, ninf, zero], ty))
    }
}

/// The i32 shape a bf16 weight of `shape` is declared with
/// ([`Graph::weight`]): the last dim halved when it is even, else `[n/2]`;
/// `None` when the element count is odd (or `shape` is rank 0).
pub(crate) fn bf16_pairs_shape(shape: &[usize]) -> Option<Vec<usize>> {
    let (&last, rest) = shape.split_last()?;
    if last % 2 == 0 {
        let mut s = rest.to_vec();
        s.push(last / 2);
        return Some(s);
    }
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    (n % 2 == 0).then(|| vec![n / 2])
}
