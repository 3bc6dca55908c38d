//! `dot_general` as a batched matmul: both operands are laid out with the
//! contracted dims innermost (`[B, M, K]` and `[B, N, K]`, transposing only
//! when needed), then every output element is a dot product of two
//! contiguous rows, computed in register tiles over cache-sized blocks of
//! the rhs, the blocks spread over rayon's threads.

use super::kernels::transpose;
use super::{InterpError, Tensor};
use crate::graph::DotDims;
use rayon::prelude::*;
use std::borrow::Cow;

/// Rows of the rhs per block: with K = 576 floats per row, 64 rows are
/// ~150 KB, which stays in L2 while every lhs row streams past.
const NB: usize = 64;

/// Arranges `t` as `[batch…, free…, contract…]`, returning (data, free size).
fn arrange<'t>(t: &'t Tensor, batch: &[usize], contract: &[usize]) -> Result<(Cow<'t, [f32]>, usize), InterpError> {
    let shape = t.shape();
    let free: Vec<usize> = (0..shape.len())
        .filter(|d| !batch.contains(d) && !contract.contains(d))
        .collect();
    let mut perm: Vec<usize> = batch.to_vec();
    perm.extend(&free);
    perm.extend(contract);
    let fsize: usize = free.iter().map(|&d| shape[d]).product();
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let data = if identity {
        Cow::Borrowed(t.as_f32().ok_or_else(|| InterpError(format!("dot_general of {}", t.describe())))?)
    } else {
        match transpose(t, &perm) {
            Tensor::F32 { data, .. } => Cow::Owned(data),
            other => return Err(InterpError(format!("dot_general of {}", other.describe()))),
        }
    };
    Ok((data, fsize))
}

#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s = (acc[0] + acc[4]) + (acc[1] + acc[5]) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// A 4×4 tile of dot products: rows `a[0..4]` against rows `b[0..4]`.
#[inline(always)]
fn tile4x4(a: [&[f32]; 4], b: [&[f32]; 4], k: usize) -> [[f32; 4]; 4] {
    let mut acc = [[[0f32; 4]; 4]; 4];
    let full = k / 4 * 4;
    let mut p = 0;
    while p < full {
        let av: [[f32; 4]; 4] = std::array::from_fn(|i| {
            let s = &a[i][p..p + 4];
            [s[0], s[1], s[2], s[3]]
        });
        let bv: [[f32; 4]; 4] = std::array::from_fn(|j| {
            let s = &b[j][p..p + 4];
            [s[0], s[1], s[2], s[3]]
        });
        for i in 0..4 {
            for j in 0..4 {
                for l in 0..4 {
                    acc[i][j][l] += av[i][l] * bv[j][l];
                }
            }
        }
        p += 4;
    }
    let mut out = [[0f32; 4]; 4];
    for i in 0..4 {
        for j in 0..4 {
            let v = acc[i][j];
            let mut s = (v[0] + v[2]) + (v[1] + v[3]);
            for q in full..k {
                s += a[i][q] * b[j][q];
            }
            out[i][j] = s;
        }
    }
    out
}

/// `C[m, n] = Σ_k A[m, k]·B[n, k]` for one block of B rows; `c` is `[M, nb]`.
fn block<'a>(a: &'a [f32], b: &'a [f32], m: usize, nb: usize, k: usize, c: &mut [f32]) {
    let row = |s: &'a [f32], i: usize| -> &'a [f32] { &s[i * k..(i + 1) * k] };
    let m4 = m / 4 * 4;
    let n4 = nb / 4 * 4;
    for i in (0..m4).step_by(4) {
        let ar = [row(a, i), row(a, i + 1), row(a, i + 2), row(a, i + 3)];
        for j in (0..n4).step_by(4) {
            let br = [row(b, j), row(b, j + 1), row(b, j + 2), row(b, j + 3)];
            let t = tile4x4(ar, br, k);
            for (di, tr) in t.iter().enumerate() {
                c[(i + di) * nb + j..(i + di) * nb + j + 4].copy_from_slice(tr);
            }
        }
        for j in n4..nb {
            for di in 0..4 {
                c[(i + di) * nb + j] = dot(ar[di], row(b, j));
            }
        }
    }
    for i in m4..m {
        for j in 0..nb {
            c[i * nb + j] = dot(row(a, i), row(b, j));
        }
    }
}

/// Evaluates a `dot_general` with float operands; `out` is the result shape.
pub(crate) fn dot_general(lhs: &Tensor, rhs: &Tensor, d: &DotDims, out: &[usize]) -> Result<Tensor, InterpError> {
    let bsize: usize = d.lhs_batch.iter().map(|&i| lhs.shape()[i]).product();
    let k: usize = d.lhs_contract.iter().map(|&i| lhs.shape()[i]).product();
    let (a, m) = arrange(lhs, &d.lhs_batch, &d.lhs_contract)?;
    let (b, n) = arrange(rhs, &d.rhs_batch, &d.rhs_contract)?;
    let total = bsize * m * n;
    if a.len() != bsize * m * k || b.len() != bsize * n * k {
        return Err(InterpError("dot_general operand sizes do not match the dims".into()));
    }
    let mut c = vec![0f32; total];
    if total == 0 || k == 0 {
        return Ok(Tensor::f32(out, c));
    }
    let nblocks = n.div_ceil(NB);
    let jobs: Vec<(usize, usize)> = (0..bsize)
        .flat_map(|bi| (0..nblocks).map(move |nbk| (bi, nbk)))
        .collect();
    let results: Vec<(usize, usize, usize, Vec<f32>)> = jobs
        .into_par_iter()
        .map(|(bi, nbk)| {
            let n0 = nbk * NB;
            let nb = NB.min(n - n0);
            let a_b = &a[bi * m * k..(bi + 1) * m * k];
            let b_b = &b[(bi * n + n0) * k..(bi * n + n0 + nb) * k];
            let mut cb = vec![0f32; m * nb];
            block(a_b, b_b, m, nb, k, &mut cb);
            (bi, n0, nb, cb)
        })
        .collect();
    for (bi, n0, nb, cb) in results {
        for i in 0..m {
            let dst = (bi * m + i) * n + n0;
            c[dst..dst + nb].copy_from_slice(&cb[i * nb..(i + 1) * nb]);
        }
    }
    Ok(Tensor::f32(out, c))
}
