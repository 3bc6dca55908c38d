//! `dot_general` as a batched matmul: both operands are laid out with the
//! contracted dims innermost (`[B, M, K]` and `[B, N, K]`, transposing only
//! when needed), then every output element is a dot product of two
//! contiguous rows, computed in register tiles over cache-sized blocks of
//! the rhs, the blocks spread over rayon's threads.

use super::layout::transpose;
use super::{OpFault, Tensor};
use crate::graph::DotDims;
use rayon::prelude::*;
use std::borrow::Cow;

/// Rows of the rhs per block: with K = 576 floats per row, 64 rows are
/// ~150 KB, which stays in L2 while every lhs row streams past.
const NB: usize = 64;

/// The permutation of `shape`'s dims to `[batch…, free…, contract…]`, and
/// the product of the free dims.
fn contract_last(shape: &[usize], batch: &[usize], contract: &[usize]) -> (Vec<usize>, usize) {
    let free: Vec<usize> = (0..shape.len())
        .filter(|d| !batch.contains(d) && !contract.contains(d))
        .collect();
    let mut perm: Vec<usize> = batch.to_vec();
    perm.extend(&free);
    perm.extend(contract);
    (perm, free.iter().map(|&d| shape[d]).product())
}

/// Arranges `t` as `[batch…, free…, contract…]`, returning (data, free size).
fn arrange<'t>(
    t: &'t Tensor,
    batch: &[usize],
    contract: &[usize],
) -> Result<(Cow<'t, [f32]>, usize), OpFault> {
    let (perm, fsize) = contract_last(t.shape(), batch, contract);
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let data = if identity {
        Cow::Borrowed(
            t.as_f32()
                .ok_or_else(|| OpFault(format!("dot_general of {}", t.describe())))?,
        )
    } else {
        match transpose(t, &perm) {
            Tensor::F32 { data, .. } => Cow::Owned(data),
            other => return Err(OpFault(format!("dot_general of {}", other.describe()))),
        }
    };
    Ok((data, fsize))
}

/// Rows of the lhs per register tile.
const MR: usize = 4;
/// Columns (rhs rows) per register tile and per packed panel.
const NR: usize = 16;

/// Packs rhs rows `[nb, k]` into panels of `NR` columns laid out `[k, NR]`
/// (zero-padded), so the microkernel reads one contiguous vector per k.
fn pack(b: &[f32], nb: usize, k: usize) -> Vec<f32> {
    let panels = nb.div_ceil(NR);
    let mut p = vec![0f32; panels * k * NR];
    for (j, row) in b.chunks_exact(k).take(nb).enumerate() {
        let (pi, c) = (j / NR, j % NR);
        let base = pi * k * NR;
        for (q, &x) in row.iter().enumerate() {
            p[base + q * NR + c] = x;
        }
    }
    p
}

/// `acc[i][j] += Σ_q a[i][q]·panel[q][j]` for `rows` lhs rows.
#[inline(always)]
fn micro<const FMA: bool>(
    a: &[f32],
    i0: usize,
    rows: usize,
    k: usize,
    panel: &[f32],
) -> [[f32; NR]; MR] {
    let mut acc = [[0f32; NR]; MR];
    let ar: [&[f32]; MR] = std::array::from_fn(|r| {
        let i = i0 + r.min(rows - 1);
        &a[i * k..(i + 1) * k]
    });
    for (q, bv) in panel.chunks_exact(NR).take(k).enumerate() {
        let bv: &[f32; NR] = bv.try_into().unwrap_or(&[0f32; NR]);
        for r in 0..MR {
            let x = ar[r][q];
            for j in 0..NR {
                acc[r][j] = if FMA {
                    x.mul_add(bv[j], acc[r][j])
                } else {
                    acc[r][j] + x * bv[j]
                };
            }
        }
    }
    acc
}

/// `C[m, n] = Σ_k A[m, k]·B[n, k]` for one block of B rows; `c` is `[M, nb]`.
#[inline(always)]
fn block_impl<const FMA: bool>(a: &[f32], b: &[f32], m: usize, nb: usize, k: usize, c: &mut [f32]) {
    let packed = pack(b, nb, k);
    for (pi, panel) in packed.chunks_exact(k * NR).enumerate() {
        let j0 = pi * NR;
        let cols = NR.min(nb - j0);
        let mut i = 0;
        while i < m {
            let rows = MR.min(m - i);
            let acc = micro::<FMA>(a, i, rows, k, panel);
            for (r, accr) in acc.iter().enumerate().take(rows) {
                c[(i + r) * nb + j0..(i + r) * nb + j0 + cols].copy_from_slice(&accr[..cols]);
            }
            i += MR;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_avx2(a: &[f32], b: &[f32], m: usize, nb: usize, k: usize, c: &mut [f32]) {
    block_impl::<true>(a, b, m, nb, k, c)
}

fn block(a: &[f32], b: &[f32], m: usize, nb: usize, k: usize, c: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above).
        unsafe { block_avx2(a, b, m, nb, k, c) };
        return;
    }
    block_impl::<false>(a, b, m, nb, k, c)
}

/// The batch size and contraction size of `d` over `lhs`, checked against
/// the arranged operands (`(len, free size)` of each).
fn batch_and_contraction(
    lhs: &Tensor,
    d: &DotDims,
    (a_len, m): (usize, usize),
    (b_len, n): (usize, usize),
) -> Result<(usize, usize), OpFault> {
    let bsize: usize = d.lhs_batch.iter().map(|&i| lhs.shape()[i]).product();
    let k: usize = d.lhs_contract.iter().map(|&i| lhs.shape()[i]).product();
    if a_len != bsize * m * k || b_len != bsize * n * k {
        return Err(OpFault(
            "dot_general operand sizes do not match the dims".into(),
        ));
    }
    Ok((bsize, k))
}

/// Evaluates a `dot_general` with float operands; `out` is the result shape.
pub(crate) fn dot_general(
    lhs: &Tensor,
    rhs: &Tensor,
    d: &DotDims,
    out: &[usize],
) -> Result<Tensor, OpFault> {
    let (a, m) = arrange(lhs, &d.lhs_batch, &d.lhs_contract)?;
    let (b, n) = arrange(rhs, &d.rhs_batch, &d.rhs_contract)?;
    let (bsize, k) = batch_and_contraction(lhs, d, (a.len(), m), (b.len(), n))?;
    let total = bsize * m * n;
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

/// Evaluates a `dot_general` of i8 operands (held in i32 tensors) into
/// exact i32 sums, as IREE's integer matmul accumulates.
pub(crate) fn dot_general_i8(
    lhs: &Tensor,
    rhs: &Tensor,
    d: &DotDims,
    out: &[usize],
) -> Result<Tensor, OpFault> {
    let (a, m) = arrange_i32(lhs, &d.lhs_batch, &d.lhs_contract)?;
    let (b, n) = arrange_i32(rhs, &d.rhs_batch, &d.rhs_contract)?;
    let (bsize, k) = batch_and_contraction(lhs, d, (a.len(), m), (b.len(), n))?;
    let c: Vec<i32> = (0..bsize * m)
        .into_par_iter()
        .flat_map_iter(|row| {
            let bi = row / m;
            let ar = &a[row * k..(row + 1) * k];
            let (a, b) = (ar, &b[bi * n * k..(bi + 1) * n * k]);
            b.chunks_exact(k.max(1))
                .take(n)
                .map(move |br| a.iter().zip(br).map(|(&x, &y)| x * y).sum::<i32>())
        })
        .collect();
    Ok(Tensor::i32(out, c))
}

/// [`arrange`] for integer tensors.
fn arrange_i32(
    t: &Tensor,
    batch: &[usize],
    contract: &[usize],
) -> Result<(Vec<i32>, usize), OpFault> {
    let (perm, fsize) = contract_last(t.shape(), batch, contract);
    match transpose(t, &perm) {
        Tensor::I32 { data, .. } => Ok((data, fsize)),
        other => Err(OpFault(format!("dot_general of {}", other.describe()))),
    }
}
