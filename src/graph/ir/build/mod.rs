//! One builder method per op. Each checks its operands and returns the
//! new value, or a [`GraphError`] that names the op and the offending types.
//! This file holds values (arguments, parameters, literals) and elementwise
//! ops; the other families have a file each.

mod contract;
mod shape;
mod weights;

pub(crate) use weights::bf16_pairs_shape;

use super::{
    BinaryOp, CompareDir, DType, Graph, GraphError, Literal, Op, TensorType, UnaryOp, Value,
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

    /// Ok when `x` is exactly representable in `dtype`.
    pub(crate) fn check_literal(dtype: DType, x: f64) -> Result<(), GraphError> {
        let ok = match dtype {
            DType::F32 => x.is_nan() || (x as f32) as f64 == x,
            DType::BF16 => x.is_nan() || half::bf16::from_f64(x).to_f64() == x,
            DType::F16 => x.is_nan() || half::f16::from_f64(x).to_f64() == x,
            DType::I32 => x.fract() == 0.0 && x >= i32::MIN as f64 && x <= i32::MAX as f64,
            DType::I16 => x.fract() == 0.0 && x >= i16::MIN as f64 && x <= i16::MAX as f64,
            DType::I8 => x.fract() == 0.0 && x >= i8::MIN as f64 && x <= i8::MAX as f64,
            DType::I4 => x.fract() == 0.0 && (-8.0..=7.0).contains(&x),
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
        if t.dtype.bits() != dtype.bits() || t.dtype == DType::I1 || dtype == DType::I1 {
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
}
