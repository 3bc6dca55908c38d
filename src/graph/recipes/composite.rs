//! Composite ops built only from the primitive builder methods: what a
//! transformer block is written with.

use crate::graph::{CompareDir, DType, DotDims, Graph, GraphError, Value};

fn err<T>(op: &'static str, msg: impl Into<String>) -> Result<T, GraphError> {
    Err(GraphError {
        op,
        msg: msg.into(),
    })
}

impl Graph {
    /// A constant of `x`'s type with every element `value`.
    pub fn splat_like(&mut self, x: Value, value: f64) -> Result<Value, GraphError> {
        let t = self.ty(x).clone();
        self.splat(t.dtype, &t.shape, value)
    }

    /// `x · Wᵀ` with `w` stored `[out, in]` as checkpoints store it:
    /// `x: [..., in]` → `[..., out]`.
    pub fn linear(&mut self, x: Value, w: Value) -> Result<Value, GraphError> {
        let (tx, tw) = (self.ty(x), self.ty(w));
        if tw.rank() != 2 || tx.rank() == 0 || tx.shape[tx.rank() - 1] != tw.shape[1] {
            return err(
                "linear",
                format!("needs x [..., in] and w [out, in], got {tx} and {tw}"),
            );
        }
        let last = tx.rank() - 1;
        self.dot_general(
            x,
            w,
            DotDims {
                lhs_contract: vec![last],
                rhs_contract: vec![1],
                ..Default::default()
            },
        )
    }

    /// [`Graph::linear`], written weight first (`W · xᵀ`, reshaped back to
    /// `[1, out]`) when `x` is one row `[1, in]`: the form IREE 3.13's data
    /// tiling gives a one-row product anyway (it swaps a narrow left side),
    /// so a matrix computed from its parameters (a block widening) gets the
    /// same hoisted packing in a decode as in a prefill, and IREE keeps one
    /// packed copy for both instead of two
    /// (docs/journal/2026-12-05-fast-exact-and-small.md, "One widened copy
    /// at load"). Other shapes are [`Graph::linear`].
    pub fn linear_weight_first(&mut self, x: Value, w: Value) -> Result<Value, GraphError> {
        let (tx, tw) = (self.ty(x).clone(), self.ty(w).clone());
        if tx.rank() != 2 || tx.shape[0] != 1 || tw.rank() != 2 || tw.shape[1] != tx.shape[1] {
            return self.linear(x, w);
        }
        let column = self.dot_general(
            w,
            x,
            DotDims {
                lhs_contract: vec![1],
                rhs_contract: vec![1],
                ..Default::default()
            },
        )?;
        self.reshape(column, &[1, tw.shape[0]])
    }

    /// RMSNorm over the last dim: `x / sqrt(mean(x²) + eps) * w`, `w: [D]`.
    pub fn rms_norm(&mut self, x: Value, w: Value, eps: f32) -> Result<Value, GraphError> {
        let (tx, tw) = (self.ty(x).clone(), self.ty(w).clone());
        let d = *tx.shape.last().unwrap_or(&0);
        if tx.rank() == 0 || tw.rank() != 1 || tw.shape[0] != d || tx.dtype != tw.dtype {
            return err(
                "rms_norm",
                format!("needs x [..., D] and w [D], got {tx} and {tw}"),
            );
        }
        let last = tx.rank() - 1;
        let sq = self.mul(x, x)?;
        let sum = self.reduce_sum(sq, &[last])?;
        let n = self.splat_like(sum, d as f64)?;
        let mean = self.div(sum, n)?;
        let e = self.splat_like(mean, eps as f64)?;
        let var = self.add(mean, e)?;
        let inv = self.rsqrt(var)?;
        let dims: Vec<usize> = (0..last).collect();
        let inv = self.broadcast_in_dim(inv, &tx.shape, &dims)?;
        let y = self.mul(x, inv)?;
        let wb = self.broadcast_in_dim(w, &tx.shape, &[last])?;
        self.mul(y, wb)
    }

    /// SiLU: `x · logistic(x)`.
    pub fn silu(&mut self, x: Value) -> Result<Value, GraphError> {
        let s = self.logistic(x)?;
        self.mul(x, s)
    }

    /// tanh-approximated GELU (PyTorch's `gelu(approximate="tanh")`):
    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
    pub fn gelu_tanh(&mut self, x: Value) -> Result<Value, GraphError> {
        let t = self.ty(x).clone();
        if !t.dtype.is_float() {
            return err("gelu_tanh", format!("needs a float tensor, got {t}"));
        }
        let c = |g: &mut Graph, v: f64| g.splat_like(x, v as f32 as f64);
        let x2 = self.mul(x, x)?;
        let x3 = self.mul(x2, x)?;
        let k = c(self, 0.044715)?;
        let kx3 = self.mul(x3, k)?;
        let inner = self.add(x, kx3)?;
        let s = c(self, (2.0 / std::f64::consts::PI).sqrt())?;
        let inner = self.mul(inner, s)?;
        let th = self.tanh(inner)?;
        let one = c(self, 1.0)?;
        let th1 = self.add(th, one)?;
        let half = c(self, 0.5)?;
        let hx = self.mul(x, half)?;
        self.mul(hx, th1)
    }

    /// Index of the largest element along `dim` (lowest index on ties) as
    /// two plain reductions: `m = reduce_max(x)`, then
    /// `reduce_min(select(x == m, iota, i32::MAX))`. Same result as
    /// [`Graph::argmax`] for rows without NaN (a row holding NaN gives
    /// i32::MAX here), and IREE's CPU codegen runs it much faster than the
    /// variadic (value, index) reduce: 17 → 2 ms over SmolLM2's
    /// `[64, 49152]` logits.
    pub fn argmax_two_pass(&mut self, x: Value, dim: usize) -> Result<Value, GraphError> {
        Ok(self.max_argmax(x, dim)?.1)
    }

    /// The maximum along `dim` and [`Graph::argmax_two_pass`]'s index of it,
    /// from one `reduce_max`: what merging the argmaxes of row chunks needs.
    pub fn max_argmax(&mut self, x: Value, dim: usize) -> Result<(Value, Value), GraphError> {
        let t = self.ty(x).clone();
        if !t.dtype.is_float() || dim >= t.rank() {
            return err(
                "argmax",
                format!("needs a float tensor with dim {dim}, got {t}"),
            );
        }
        let keep: Vec<usize> = (0..t.rank()).filter(|&d| d != dim).collect();
        let max = self.reduce_max(x, &[dim])?;
        let m = self.broadcast_in_dim(max, &t.shape, &keep)?;
        let hit = self.compare(CompareDir::Eq, x, m)?;
        let idx = self.iota(DType::I32, &t.shape, dim)?;
        let none = self.splat(DType::I32, &t.shape, i32::MAX as f64)?;
        let cand = self.select(hit, idx, none)?;
        Ok((max, self.reduce_min(cand, &[dim])?))
    }

    /// Max-subtracted softmax along `dim`.
    pub fn softmax(&mut self, x: Value, dim: usize) -> Result<Value, GraphError> {
        let t = self.ty(x).clone();
        if dim >= t.rank() || !t.dtype.is_float() {
            return err(
                "softmax",
                format!("needs a float tensor with dim {dim}, got {t}"),
            );
        }
        let keep: Vec<usize> = (0..t.rank()).filter(|&d| d != dim).collect();
        let m = self.reduce_max(x, &[dim])?;
        let m = self.broadcast_in_dim(m, &t.shape, &keep)?;
        let z = self.sub(x, m)?;
        let e = self.exp(z)?;
        let s = self.reduce_sum(e, &[dim])?;
        let s = self.broadcast_in_dim(s, &t.shape, &keep)?;
        self.div(e, s)
    }

    /// Causal mask over the last two dims `[..., Q, K]`: entries with key
    /// index greater than query index become -inf.
    pub fn causal_mask(&mut self, scores: Value) -> Result<Value, GraphError> {
        let t = self.ty(scores).clone();
        let r = t.rank();
        if r < 2 || !t.dtype.is_float() {
            return err(
                "causal_mask",
                format!("needs float scores [..., Q, K], got {t}"),
            );
        }
        let (q, k) = (t.shape[r - 2], t.shape[r - 1]);
        let qi = self.iota(DType::I32, &[q, k], 0)?;
        let ki = self.iota(DType::I32, &[q, k], 1)?;
        let keep = self.compare(CompareDir::Ge, qi, ki)?;
        let keep = self.broadcast_in_dim(keep, &t.shape, &[r - 2, r - 1])?;
        let ninf = self.splat_like(scores, f64::NEG_INFINITY)?;
        self.select(keep, scores, ninf)
    }

    /// Rotate-half RoPE: `x·cos + rotate_half(x)·sin` where
    /// `rotate_half([a, b]) = [-b, a]` over the last dim. `x: [..., S, D]`,
    /// `cos`, `sin`: `[S, D]`.
    pub fn rope(&mut self, x: Value, cos: Value, sin: Value) -> Result<Value, GraphError> {
        let (t, tc, ts) = (
            self.ty(x).clone(),
            self.ty(cos).clone(),
            self.ty(sin).clone(),
        );
        let r = t.rank();
        let ok = r >= 2
            && tc == ts
            && tc.rank() == 2
            && tc.dtype == t.dtype
            && tc.shape[0] == t.shape[r - 2]
            && tc.shape[1] == t.shape[r - 1]
            && t.shape[r - 1] % 2 == 0;
        if !ok {
            return err(
                "rope",
                format!("needs x [..., S, D] (D even) and cos/sin [S, D], got {t}, {tc}, {ts}"),
            );
        }
        let d = t.shape[r - 1];
        let x1 = self.slice_dim(x, r - 1, 0, d / 2)?;
        let x2 = self.slice_dim(x, r - 1, d / 2, d)?;
        let nx2 = self.neg(x2)?;
        let rot = self.concatenate(&[nx2, x1], r - 1)?;
        let cb = self.broadcast_in_dim(cos, &t.shape, &[r - 2, r - 1])?;
        let sb = self.broadcast_in_dim(sin, &t.shape, &[r - 2, r - 1])?;
        let a = self.mul(x, cb)?;
        let b = self.mul(rot, sb)?;
        self.add(a, b)
    }
}
