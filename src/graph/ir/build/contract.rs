//! Ops that combine many elements into one: dot products, reductions,
//! row gathers and argmax.

use super::{err, unique_in_range};
use crate::graph::ir::{
    DType, DotDims, Graph, GraphError, Op, ReduceKind, Shape, TensorType, Value,
};

impl Graph {
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
            (DType::I8, DType::I8 | DType::I4) => DType::I32,
            _ => return fail("operands must share one float element type, or be i8 and i8 or i4"),
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
