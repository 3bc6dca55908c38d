//! Element layout shared by the kernels and the matmul: row-major strides,
//! strided offsets, gathers by offset and transposes.

use super::Tensor;

/// Row-major strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Source offsets `base + Σ idx[d]·step[d]` for every index of `shape`, in
/// row-major order.
pub(crate) fn strided_offsets(shape: &[usize], base: usize, step: &[usize]) -> Vec<usize> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    let r = shape.len();
    if r == 0 {
        out.push(base);
        return out;
    }
    let inner = shape[r - 1];
    let istep = step[r - 1];
    let mut idx = vec![0usize; r];
    let mut off = base;
    loop {
        for j in 0..inner {
            out.push(off + j * istep);
        }
        // Advance the outer dims (odometer).
        let mut d = r - 1;
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            off += step[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= step[d] * shape[d];
            idx[d] = 0;
        }
    }
}

fn pick<T: Copy + Send + Sync>(data: &[T], offs: &[usize]) -> Vec<T> {
    offs.iter().map(|&o| data[o]).collect()
}

/// Builds a tensor of `shape` whose element i is the source's element `offs[i]`.
pub(crate) fn gather_offsets(t: &Tensor, shape: &[usize], offs: &[usize]) -> Tensor {
    let shape = shape.to_vec();
    match t {
        Tensor::F32 { data, .. } => Tensor::F32 {
            shape,
            data: pick(data, offs),
        },
        Tensor::I32 { data, .. } => Tensor::I32 {
            shape,
            data: pick(data, offs),
        },
        Tensor::I1 { data, .. } => Tensor::I1 {
            shape,
            data: pick(data, offs),
        },
    }
}

/// `t` with its dims permuted: output dim i is input dim `perm[i]`.
pub(crate) fn transpose(t: &Tensor, perm: &[usize]) -> Tensor {
    let src = t.shape();
    let ss = strides(src);
    let out: Vec<usize> = perm.iter().map(|&p| src[p]).collect();
    let step: Vec<usize> = perm.iter().map(|&p| ss[p]).collect();
    gather_offsets(t, &out, &strided_offsets(&out, 0, &step))
}
