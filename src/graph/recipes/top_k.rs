//! `top_k`: the K largest elements of a vector and their indices, in plain
//! StableHLO (compares, selects and reductions), for sampling on the host
//! without reading back the whole `[vocab]` logits.
//!
//! `chlo.top_k` (IREE's `iree_linalg_ext.topk`) is the obvious form, but on
//! the pinned IREE it costs 3.5 ms a call on the host over SmolLM2's 49152
//! logits and is silently wrong on Vulkan (`spec/kv-cache.md`). This form is
//! exact on every target and costs well under a millisecond:
//!
//! 1. the vector (padded with −∞ to `G·s`) is cut into `G` groups of `s`;
//!    each group's maximum is taken;
//! 2. the groups are ranked by their maxima (a rank is a count of the
//!    elements ordered before one: larger, or equal with a lower index), and
//!    the K best groups are gathered: the top K elements lie in them, since
//!    each of the K best groups holds an element at least as large as
//!    anything in a later group;
//! 3. within those K groups each element is ranked; the group ranked `j`
//!    can only hold top-K elements of within-group rank `< K − j` (the
//!    maxima of the `j` groups before it and the elements before it in its
//!    own group all come first), so only those `K(K+1)/2` slots (at most)
//!    are kept, a fixed list;
//! 4. the kept slots are ranked once more; rank `t` is the `t`-th result.
//!
//! The order is total (value descending, then index ascending), so every
//! rank is distinct and the result is exactly a stable descending sort's
//! first K: the same first index as [`Graph::argmax`]. The group size `s`
//! (a power of two) is chosen to minimise the compares of stages 2–4.

use crate::graph::{CompareDir, DType, Graph, GraphError, Value};

fn err<T>(msg: impl Into<String>) -> Result<T, GraphError> {
    Err(GraphError {
        op: "top_k",
        msg: msg.into(),
    })
}

/// The group size `s` for `n` elements and `k` results: the power of two
/// leaving at least `k` groups that needs the fewest compares in stages
/// 2–4 (rankings and picks).
fn plan(n: usize, k: usize) -> usize {
    let cost = |s: usize| {
        let g = n.div_ceil(s);
        let q = k.min(s);
        let m: usize = (0..k).map(|j| q.min(k - j)).sum();
        g * g + k * s * s + k * q * s + m * m + k * g + k * m
    };
    let mut best = 1;
    let mut s = 1;
    while s <= n && n.div_ceil(s) >= k {
        if cost(s) < cost(best) {
            best = s;
        }
        s *= 2;
    }
    best
}

impl Graph {
    /// The `k` largest elements of `x` (a float vector `[n]`, `1 ≤ k ≤ n`)
    /// and their indices: `([k] values, [k] i32 indices)`, largest first,
    /// the lower index first among equal values (see the module docs).
    pub fn top_k(&mut self, x: Value, k: usize) -> Result<(Value, Value), GraphError> {
        let t = self.ty(x).clone();
        if t.rank() != 1 || !t.dtype.is_float() {
            return err(format!("needs a float vector, got {t}"));
        }
        let n = t.shape[0];
        if k == 0 || k > n {
            return err(format!("k = {k} must be in 1..={n}"));
        }
        let s = plan(n, k);
        let groups = n.div_ceil(s);
        // Stage 1: groups of s (padded with -inf) and their maxima.
        let padded = if groups * s > n {
            let pad = self.splat(t.dtype, &[groups * s - n], f64::NEG_INFINITY)?;
            self.concatenate(&[x, pad], 0)?
        } else {
            x
        };
        let xg = self.reshape(padded, &[groups, s])?;
        let maxima = self.reduce_max(xg, &[1])?;
        let maxima = self.reshape(maxima, &[1, groups])?;
        let group_ids = self.iota(DType::I32, &[1, groups], 1)?;
        // Stage 2: the k best groups, best first.
        let rank = self.rank_desc(maxima, group_ids)?;
        let (_, best) = self.pick_by_rank(rank, maxima, group_ids, k)?;
        let best = self.reshape(best, &[k])?;
        let cand = self.gather_rows(xg, best)?;
        let base = self.splat(DType::I32, &[k], s as f64)?;
        let base = self.mul(best, base)?;
        let base = self.broadcast_in_dim(base, &[k, s], &[0])?;
        let within = self.iota(DType::I32, &[k, s], 1)?;
        let cand_ids = self.add(base, within)?;
        // Stage 3: each group's best q in order; only slots j + p < k can
        // hold a result.
        let q = k.min(s);
        let rank = self.rank_desc(cand, cand_ids)?;
        let (slots, slot_ids) = self.pick_by_rank(rank, cand, cand_ids, q)?;
        let keep: Vec<f64> = (0..k)
            .flat_map(|j| (0..q.min(k - j)).map(move |p| (j * q + p) as f64))
            .collect();
        let m = keep.len();
        let keep = self.dense(DType::I32, &[m], keep)?;
        let mut compact = |v: Value| -> Result<Value, GraphError> {
            let v = self.reshape(v, &[k * q, 1])?;
            let v = self.gather_rows(v, keep)?;
            self.reshape(v, &[1, m])
        };
        let (vals, ids) = (compact(slots)?, compact(slot_ids)?);
        // Stage 4: the k best of the kept slots, best first.
        let rank = self.rank_desc(vals, ids)?;
        let (vals, ids) = self.pick_by_rank(rank, vals, ids, k)?;
        Ok((self.reshape(vals, &[k])?, self.reshape(ids, &[k])?))
    }

    /// For each row of `v` (`[b, m]`, float) with distinct `ids` (`[b, m]`
    /// i32): each element's rank, the number of elements of its row ordered
    /// before it (larger, or equal with a lower id). `[b, m]` i32.
    fn rank_desc(&mut self, v: Value, ids: Value) -> Result<Value, GraphError> {
        let shape = self.ty(v).shape.to_vec();
        let (b, m) = (shape[0], shape[1]);
        let cube = [b, m, m];
        // [b, i, j]: element i against element j.
        let vi = self.broadcast_in_dim(v, &cube, &[0, 1])?;
        let vj = self.broadcast_in_dim(v, &cube, &[0, 2])?;
        let ii = self.broadcast_in_dim(ids, &cube, &[0, 1])?;
        let ij = self.broadcast_in_dim(ids, &cube, &[0, 2])?;
        let larger = self.compare(CompareDir::Gt, vj, vi)?;
        let equal = self.compare(CompareDir::Eq, vj, vi)?;
        let lower = self.compare(CompareDir::Lt, ij, ii)?;
        let before = self.select(equal, lower, larger)?;
        let before = self.convert(before, DType::I32)?;
        self.reduce_sum(before, &[2])
    }

    /// For each row, the elements of ranks `0..n` (from
    /// [`Graph::rank_desc`]): `([b, n] values, [b, n] ids)`.
    fn pick_by_rank(
        &mut self,
        rank: Value,
        v: Value,
        ids: Value,
        n: usize,
    ) -> Result<(Value, Value), GraphError> {
        let shape = self.ty(v).shape.to_vec();
        let (b, m) = (shape[0], shape[1]);
        let dtype = self.ty(v).dtype;
        let cube = [b, n, m];
        let r = self.broadcast_in_dim(rank, &cube, &[0, 2])?;
        let want = self.iota(DType::I32, &cube, 1)?;
        let hit = self.compare(CompareDir::Eq, r, want)?;
        let vb = self.broadcast_in_dim(v, &cube, &[0, 2])?;
        let none = self.splat(dtype, &cube, f64::NEG_INFINITY)?;
        let vals = self.select(hit, vb, none)?;
        let vals = self.reduce_max(vals, &[2])?;
        let ib = self.broadcast_in_dim(ids, &cube, &[0, 2])?;
        let zero = self.splat(DType::I32, &cube, 0.0)?;
        let picked = self.select(hit, ib, zero)?;
        Ok((vals, self.reduce_sum(picked, &[2])?))
    }
}

#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn plans_leave_at_least_k_groups() {
        for (n, k) in [(49152, 40), (262144, 40), (256, 40), (40, 40), (1000, 1)] {
            let s = plan(n, k);
            assert!(
                s.is_power_of_two() && n.div_ceil(s) >= k,
                "n {n} k {k} s {s}"
            );
        }
        assert_eq!(plan(40, 40), 1);
        assert!((32..=128).contains(&plan(49152, 40)));
    }
}
