//! Ops that move elements without computing on them: broadcasts,
//! reshapes, transposes, slices, concatenation, iota.

use super::{err, unique_in_range};
use crate::graph::ir::{DType, Graph, GraphError, Op, Shape, TensorType, Value};

impl Graph {
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

    /// `operand` (`[d0, …, dk, D]`) with row `b` of `updates` (`[B, D]`,
    /// the operand's dtype) written at `operand[indices[b, 0], …,
    /// indices[b, k], :]` ([`Op::ScatterRows`]); `indices` is i32
    /// `[B, k + 1]`. The caller keeps the indices in range and distinct.
    pub fn scatter_rows(
        &mut self,
        operand: Value,
        indices: Value,
        updates: Value,
    ) -> Result<Value, GraphError> {
        let all = [operand, indices, updates];
        self.checked("scatter", &all)?;
        let (to, ti, tu) = (self.ty(operand), self.ty(indices), self.ty(updates));
        let r = to.rank();
        let rows_ok = r >= 2
            && ti.dtype == DType::I32
            && ti.shape[..] == [tu.shape.first().copied().unwrap_or(0), r - 1]
            && tu.dtype == to.dtype
            && tu.rank() == 2
            && tu.shape[1] == to.shape[r - 1];
        if !rows_ok {
            return err(
                "scatter",
                format!(
                    "cannot write rows {tu} at indices {ti} into {to}: \
                     want i32 indices [B, rank - 1] and updates [B, last dim] of the operand's dtype"
                ),
            );
        }
        let ty = to.clone();
        Ok(self.push(Op::ScatterRows, &all, ty))
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
}
