//! One kernel per op: elementwise math, data movement, reductions, gather.

use super::layout::{gather_offsets, strided_offsets, strides, transpose};
use super::{matmul, OpFault, Tensor};
use crate::graph::{BinaryOp, BlockCodes, CompareDir, DType, Op, ReduceKind, TensorType, UnaryOp};
use rayon::prelude::*;

type KResult<T> = Result<T, OpFault>;

fn kerr<T>(msg: impl Into<String>) -> KResult<T> {
    Err(OpFault(msg.into()))
}

/// An operand: borrowed, or owned because this op is its last use (so its
/// buffer can be reused).
pub(crate) enum Arg<'a> {
    /// Moved out of the value table.
    Owned(Tensor),
    /// Still needed later.
    Ref(&'a Tensor),
}

impl Arg<'_> {
    fn t(&self) -> &Tensor {
        match self {
            Arg::Owned(t) => t,
            Arg::Ref(t) => t,
        }
    }

    fn into_owned(self) -> Tensor {
        match self {
            Arg::Owned(t) => t,
            Arg::Ref(t) => t.clone(),
        }
    }
}

/// Rounds float data to bf16/f16 when the value has that type.
pub(crate) fn round_to(t: Tensor, dtype: DType) -> Tensor {
    match (t, dtype) {
        (Tensor::F32 { shape, mut data }, DType::BF16) => {
            data.iter_mut()
                .for_each(|x| *x = half::bf16::from_f32(*x).to_f32());
            Tensor::F32 { shape, data }
        }
        (Tensor::F32 { shape, mut data }, DType::F16) => {
            data.iter_mut()
                .for_each(|x| *x = half::f16::from_f32(*x).to_f32());
            Tensor::F32 { shape, data }
        }
        (t, _) => t,
    }
}

fn with_shape(t: Tensor, shape: &[usize]) -> Tensor {
    let shape = shape.to_vec();
    match t {
        Tensor::F32 { data, .. } => Tensor::F32 { shape, data },
        Tensor::I32 { data, .. } => Tensor::I32 { shape, data },
        Tensor::I1 { data, .. } => Tensor::I1 { shape, data },
    }
}

const PAR_MIN: usize = 1 << 15;

fn map_f32(a: Arg<'_>, f: impl Fn(f32) -> f32 + Sync + Send) -> KResult<Tensor> {
    match a {
        Arg::Owned(Tensor::F32 { shape, mut data }) => {
            if data.len() >= PAR_MIN {
                data.par_iter_mut().for_each(|x| *x = f(*x));
            } else {
                data.iter_mut().for_each(|x| *x = f(*x));
            }
            Ok(Tensor::F32 { shape, data })
        }
        Arg::Ref(Tensor::F32 { shape, data }) => Ok(Tensor::F32 {
            shape: shape.clone(),
            data: if data.len() >= PAR_MIN {
                data.par_iter().map(|&x| f(x)).collect()
            } else {
                data.iter().map(|&x| f(x)).collect()
            },
        }),
        other => kerr(format!("float op on {}", other.t().describe())),
    }
}

fn zip_f32(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32 + Sync + Send) -> Vec<f32> {
    if a.len() >= PAR_MIN {
        a.par_iter()
            .zip(b.par_iter())
            .map(|(&x, &y)| f(x, y))
            .collect()
    } else {
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    }
}

fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    if a.shape() != b.shape() {
        return kerr(format!(
            "operand shapes differ: {} and {}",
            a.describe(),
            b.describe()
        ));
    }
    match (a, b) {
        (Tensor::F32 { shape, data: x }, Tensor::F32 { data: y, .. }) => {
            let data = match op {
                BinaryOp::Add => zip_f32(x, y, |p, q| p + q),
                BinaryOp::Subtract => zip_f32(x, y, |p, q| p - q),
                BinaryOp::Multiply => zip_f32(x, y, |p, q| p * q),
                BinaryOp::Divide => zip_f32(x, y, |p, q| p / q),
                BinaryOp::Maximum => zip_f32(x, y, |p, q| {
                    if p.is_nan() || q.is_nan() {
                        f32::NAN
                    } else {
                        p.max(q)
                    }
                }),
                BinaryOp::Minimum => zip_f32(x, y, |p, q| {
                    if p.is_nan() || q.is_nan() {
                        f32::NAN
                    } else {
                        p.min(q)
                    }
                }),
                BinaryOp::Power => zip_f32(x, y, f32::powf),
            };
            Ok(Tensor::F32 {
                shape: shape.clone(),
                data,
            })
        }
        (Tensor::I32 { shape, data: x }, Tensor::I32 { data: y, .. }) => {
            let f = |p: i32, q: i32| -> i32 {
                match op {
                    BinaryOp::Add => p.wrapping_add(q),
                    BinaryOp::Subtract => p.wrapping_sub(q),
                    BinaryOp::Multiply => p.wrapping_mul(q),
                    // x/0 is implementation-defined in StableHLO: -1 here.
                    BinaryOp::Divide => {
                        if q == 0 {
                            -1
                        } else {
                            p.wrapping_div(q)
                        }
                    }
                    BinaryOp::Maximum => p.max(q),
                    BinaryOp::Minimum => p.min(q),
                    BinaryOp::Power => ipow(p, q),
                }
            };
            Ok(Tensor::I32 {
                shape: shape.clone(),
                data: x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect(),
            })
        }
        (Tensor::I1 { shape, data: x }, Tensor::I1 { data: y, .. }) => {
            let f = |p: bool, q: bool| match op {
                BinaryOp::Maximum | BinaryOp::Add => p | q,
                BinaryOp::Minimum | BinaryOp::Multiply => p & q,
                BinaryOp::Subtract => p ^ q,
                BinaryOp::Divide | BinaryOp::Power => p,
            };
            Ok(Tensor::I1 {
                shape: shape.clone(),
                data: x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect(),
            })
        }
        _ => kerr(format!(
            "operand kinds differ: {} and {}",
            a.describe(),
            b.describe()
        )),
    }
}

fn ipow(base: i32, exp: i32) -> i32 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut r, mut b, mut e) = (1i32, base, exp as u32);
    while e > 0 {
        if e & 1 == 1 {
            r = r.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    r
}

fn unary(op: UnaryOp, a: Arg<'_>) -> KResult<Tensor> {
    match a.t() {
        Tensor::F32 { .. } => match op {
            UnaryOp::Negate => map_f32(a, |x| -x),
            UnaryOp::Exponential => map_f32(a, f32::exp),
            UnaryOp::Log => map_f32(a, f32::ln),
            UnaryOp::Rsqrt => map_f32(a, |x| 1.0 / x.sqrt()),
            UnaryOp::Sqrt => map_f32(a, f32::sqrt),
            UnaryOp::Tanh => map_f32(a, f32::tanh),
            UnaryOp::Logistic => map_f32(a, |x| 1.0 / (1.0 + (-x).exp())),
            UnaryOp::Abs => map_f32(a, f32::abs),
            UnaryOp::RoundNearestEven => map_f32(a, f32::round_ties_even),
        },
        Tensor::I32 { shape, data } if op == UnaryOp::Negate => Ok(Tensor::I32 {
            shape: shape.clone(),
            data: data.iter().map(|x| x.wrapping_neg()).collect(),
        }),
        t => kerr(format!("{} of {}", op.name(), t.describe())),
    }
}

fn convert(a: Arg<'_>, to: DType) -> Tensor {
    let t = a.t();
    let shape = t.shape().to_vec();
    // A 16-bit float is held as the f32 it rounds to (to nearest, ties
    // to even, as `convert` rounds).
    let round: fn(f32) -> f32 = match to {
        DType::BF16 => |x| half::bf16::from_f32(x).to_f32(),
        DType::F16 => |x| half::f16::from_f32(x).to_f32(),
        _ => |x| x,
    };
    match (to, t) {
        (DType::F32, Tensor::F32 { .. }) => a.into_owned(),
        (DType::BF16 | DType::F16, Tensor::F32 { data, .. }) => Tensor::F32 {
            shape,
            data: data.iter().map(|&x| round(x)).collect(),
        },
        (DType::F32 | DType::BF16 | DType::F16, Tensor::I32 { data, .. }) => Tensor::F32 {
            shape,
            data: data.iter().map(|&x| round(x as f32)).collect(),
        },
        (DType::F32 | DType::BF16 | DType::F16, Tensor::I1 { data, .. }) => Tensor::F32 {
            shape,
            data: data.iter().map(|&x| x as u8 as f32).collect(),
        },
        (DType::I32, Tensor::F32 { data, .. }) => Tensor::I32 {
            shape,
            data: data.iter().map(|&x| x as i32).collect(),
        },
        (DType::I32, Tensor::I32 { .. }) => a.into_owned(),
        (DType::I32, Tensor::I1 { data, .. }) => Tensor::I32 {
            shape,
            data: data.iter().map(|&x| x as i32).collect(),
        },
        (DType::I1, Tensor::F32 { data, .. }) => Tensor::I1 {
            shape,
            data: data.iter().map(|&x| x != 0.0).collect(),
        },
        (DType::I1, Tensor::I32 { data, .. }) => Tensor::I1 {
            shape,
            data: data.iter().map(|&x| x != 0).collect(),
        },
        (DType::I1, Tensor::I1 { .. }) => a.into_owned(),
        // i16, i8 and i4 values live in i32 tensors: truncate (or saturate
        // from float).
        (DType::I16, Tensor::I32 { data, .. }) => Tensor::I32 {
            shape,
            data: data.iter().map(|&x| x as i16 as i32).collect(),
        },
        (DType::I16, Tensor::F32 { data, .. }) => Tensor::I32 {
            shape,
            data: data.iter().map(|&x| x as i16 as i32).collect(),
        },
        (DType::I8, Tensor::I32 { data, .. }) => Tensor::I32 {
            shape,
            data: data.iter().map(|&x| x as i8 as i32).collect(),
        },
        (DType::I8, Tensor::F32 { data, .. }) => Tensor::I32 {
            shape,
            data: data.iter().map(|&x| x as i8 as i32).collect(),
        },
        (DType::I4, Tensor::I32 { data, .. }) => Tensor::I32 {
            shape,
            data: data.iter().map(|&x| ((x as i8) << 4 >> 4) as i32).collect(),
        },
        (DType::I4, Tensor::F32 { data, .. }) => Tensor::I32 {
            shape,
            data: data.iter().map(|&x| ((x as i8) << 4 >> 4) as i32).collect(),
        },
        (DType::I16 | DType::I8 | DType::I4, Tensor::I1 { data, .. }) => Tensor::I32 {
            shape,
            data: data.iter().map(|&x| x as i32).collect(),
        },
    }
}

/// Reinterprets element bits between types of one width. Values of 16-bit
/// types are held widened (bf16/f16 as f32, i16 as i32), so `from` says
/// which bits an f32 holds.
fn bitcast_convert(t: &Tensor, from: Option<DType>, to: DType) -> KResult<Tensor> {
    let shape = t.shape().to_vec();
    let bits16 = |x: f32| -> Option<u16> {
        match from? {
            DType::BF16 => Some(half::bf16::from_f32(x).to_bits()),
            DType::F16 => Some(half::f16::from_f32(x).to_bits()),
            _ => None,
        }
    };
    match (t, to) {
        (Tensor::I32 { data, .. }, DType::F32) if from == Some(DType::I32) => Ok(Tensor::F32 {
            shape,
            data: data.iter().map(|&x| f32::from_bits(x as u32)).collect(),
        }),
        (Tensor::F32 { data, .. }, DType::I32) if from == Some(DType::F32) => Ok(Tensor::I32 {
            shape,
            data: data.iter().map(|&x| x.to_bits() as i32).collect(),
        }),
        (Tensor::I32 { data, .. }, DType::BF16) => Ok(Tensor::F32 {
            shape,
            data: data
                .iter()
                .map(|&x| half::bf16::from_bits(x as u16).to_f32())
                .collect(),
        }),
        (Tensor::I32 { data, .. }, DType::F16) => Ok(Tensor::F32 {
            shape,
            data: data
                .iter()
                .map(|&x| half::f16::from_bits(x as u16).to_f32())
                .collect(),
        }),
        (Tensor::F32 { data, .. }, DType::I16) => Ok(Tensor::I32 {
            shape,
            data: data
                .iter()
                .map(|&x| bits16(x).map(|b| b as i16 as i32))
                .collect::<Option<Vec<i32>>>()
                .ok_or_else(|| OpFault("bitcast_convert: unknown 16-bit source".into()))?,
        }),
        (Tensor::F32 { data, .. }, DType::BF16 | DType::F16) => {
            let v: Option<Vec<f32>> = data
                .iter()
                .map(|&x| {
                    bits16(x).map(|b| match to {
                        DType::BF16 => half::bf16::from_bits(b).to_f32(),
                        _ => half::f16::from_bits(b).to_f32(),
                    })
                })
                .collect();
            Ok(Tensor::F32 {
                shape,
                data: v.ok_or_else(|| OpFault("bitcast_convert: unknown 16-bit source".into()))?,
            })
        }
        (t, to) => kerr(format!("bitcast_convert of {} to {to}", t.describe())),
    }
}

/// `a << b` on i32 (StableHLO: shifts outside 0..32 give 0).
fn shift_left(a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    shift(a, b, "shift_left", |v, s| v << s)
}

/// `a >> b` on i32, zeros shifted in; shifts outside 0..32 give 0.
fn shift_right_logical(a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    shift(a, b, "shift_right_logical", |v, s| v >> s)
}

/// An i32 shift by `f` on the bits as u32; shifts outside 0..32 give 0.
fn shift(a: &Tensor, b: &Tensor, name: &str, f: fn(u32, i32) -> u32) -> KResult<Tensor> {
    match (a, b) {
        (Tensor::I32 { shape, data: x }, Tensor::I32 { data: y, .. }) => Ok(Tensor::I32 {
            shape: shape.clone(),
            data: x
                .iter()
                .zip(y)
                .map(|(&v, &s)| {
                    if (0..32).contains(&s) {
                        f(v as u32, s) as i32
                    } else {
                        0
                    }
                })
                .collect(),
        }),
        _ => kerr(format!("{name} of {} and {}", a.describe(), b.describe())),
    }
}

/// `a & b` on i32.
fn bitwise_and(a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    match (a, b) {
        (Tensor::I32 { shape, data: x }, Tensor::I32 { data: y, .. }) => Ok(Tensor::I32 {
            shape: shape.clone(),
            data: x.iter().zip(y).map(|(&v, &w)| v & w).collect(),
        }),
        _ => kerr(format!("and of {} and {}", a.describe(), b.describe())),
    }
}

fn compare(dir: CompareDir, a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    let shape = a.shape().to_vec();
    let data: Vec<bool> = match (a, b) {
        (Tensor::F32 { data: x, .. }, Tensor::F32 { data: y, .. }) => {
            x.iter().zip(y).map(|(&p, &q)| dir.holds(p, q)).collect()
        }
        (Tensor::I32 { data: x, .. }, Tensor::I32 { data: y, .. }) => {
            x.iter().zip(y).map(|(&p, &q)| dir.holds(p, q)).collect()
        }
        (Tensor::I1 { data: x, .. }, Tensor::I1 { data: y, .. }) => {
            x.iter().zip(y).map(|(&p, &q)| dir.holds(p, q)).collect()
        }
        _ => {
            return kerr(format!(
                "cannot compare {} and {}",
                a.describe(),
                b.describe()
            ))
        }
    };
    if data.len() != b.len() {
        return kerr("operand sizes differ");
    }
    Ok(Tensor::I1 { shape, data })
}

fn select(p: &Tensor, a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    let Tensor::I1 { data: pd, .. } = p else {
        return kerr(format!("predicate is {}", p.describe()));
    };
    let shape = a.shape().to_vec();
    fn sel<T: Copy>(p: &[bool], x: &[T], y: &[T]) -> Vec<T> {
        p.iter()
            .zip(x.iter().zip(y))
            .map(|(&c, (&u, &v))| if c { u } else { v })
            .collect()
    }
    Ok(match (a, b) {
        (Tensor::F32 { data: x, .. }, Tensor::F32 { data: y, .. }) => Tensor::F32 {
            shape,
            data: sel(pd, x, y),
        },
        (Tensor::I32 { data: x, .. }, Tensor::I32 { data: y, .. }) => Tensor::I32 {
            shape,
            data: sel(pd, x, y),
        },
        (Tensor::I1 { data: x, .. }, Tensor::I1 { data: y, .. }) => Tensor::I1 {
            shape,
            data: sel(pd, x, y),
        },
        _ => {
            return kerr(format!(
                "branches differ: {} and {}",
                a.describe(),
                b.describe()
            ))
        }
    })
}

fn broadcast(t: &Tensor, out: &[usize], dims: &[usize]) -> Tensor {
    let src = t.shape();
    let ss = strides(src);
    let mut step = vec![0usize; out.len()];
    for (i, &d) in dims.iter().enumerate() {
        if src[i] != 1 {
            step[d] = ss[i];
        }
    }
    gather_offsets(t, out, &strided_offsets(out, 0, &step))
}

fn slice(t: &Tensor, start: &[usize], strd: &[usize], out: &[usize]) -> Tensor {
    let ss = strides(t.shape());
    let base: usize = start.iter().zip(&ss).map(|(a, b)| a * b).sum();
    let step: Vec<usize> = strd.iter().zip(&ss).map(|(a, b)| a * b).collect();
    gather_offsets(t, out, &strided_offsets(out, base, &step))
}

/// `stablehlo.dynamic_update_slice`: `operand` (reused when owned) with
/// `update` written at the clamped start indices.
fn dynamic_update_slice(operand: Arg<'_>, update: &Tensor, starts: &[Arg<'_>]) -> KResult<Tensor> {
    let os = operand.t().shape().to_vec();
    let us = update.shape().to_vec();
    if os.len() != us.len() || starts.len() != os.len() {
        return kerr("dynamic_update_slice operands do not agree in rank");
    }
    let mut base = 0usize;
    let ss = strides(&os);
    for (d, s) in starts.iter().enumerate() {
        let Tensor::I32 { data, .. } = s.t() else {
            return kerr(format!("start index {d} is {}", s.t().describe()));
        };
        let Some(&v) = data.first() else {
            return kerr(format!("start index {d} is empty"));
        };
        // Clamped so the update lies inside the operand, as StableHLO specifies.
        let hi = os[d].checked_sub(us[d]).ok_or_else(|| {
            OpFault(format!(
                "update dim {d} ({}) exceeds the operand's ({})",
                us[d], os[d]
            ))
        })?;
        base += (v.max(0) as usize).min(hi) * ss[d];
    }
    let offs = strided_offsets(&us, base, &ss);
    let mut out = operand.into_owned();
    fn put<T: Copy>(dst: &mut [T], src: &[T], offs: &[usize]) {
        for (&o, &x) in offs.iter().zip(src) {
            dst[o] = x;
        }
    }
    match (&mut out, update) {
        (Tensor::F32 { data, .. }, Tensor::F32 { data: u, .. }) => put(data, u, &offs),
        (Tensor::I32 { data, .. }, Tensor::I32 { data: u, .. }) => put(data, u, &offs),
        (Tensor::I1 { data, .. }, Tensor::I1 { data: u, .. }) => put(data, u, &offs),
        (o, u) => {
            return kerr(format!(
                "dynamic_update_slice of {} into {}",
                u.describe(),
                o.describe()
            ))
        }
    }
    Ok(out)
}

/// `stablehlo.scatter` of whole rows ([`Op::ScatterRows`]): `operand`
/// (reused when owned) with row `b` of `updates` at the index in row `b`
/// of `indices`. An index out of range or repeated is refused: StableHLO
/// leaves those writes implementation-defined.
fn scatter_rows(operand: Arg<'_>, indices: &Tensor, updates: &Tensor) -> KResult<Tensor> {
    let os = operand.t().shape().to_vec();
    let Tensor::I32 { data: idx, .. } = indices else {
        return kerr(format!("scatter indices are {}", indices.describe()));
    };
    let (k, d) = (os.len().saturating_sub(1), *os.last().unwrap_or(&0));
    let rows = updates.shape().first().copied().unwrap_or(0);
    if indices.shape() != [rows, k] || updates.shape() != [rows, d] {
        return kerr(format!(
            "scatter of {} at {} into {}",
            updates.describe(),
            indices.describe(),
            operand.t().describe()
        ));
    }
    let ss = strides(&os);
    let mut starts = Vec::with_capacity(rows);
    for (b, ix) in idx.chunks_exact(k.max(1)).take(rows).enumerate() {
        let mut base = 0;
        for (dim, &i) in ix.iter().enumerate() {
            if i < 0 || i as usize >= os[dim] {
                return kerr(format!(
                    "scatter row {b}: index {i} is out of range for dim {dim} of size {}",
                    os[dim]
                ));
            }
            base += i as usize * ss[dim];
        }
        if starts.contains(&base) {
            return kerr(format!(
                "scatter row {b}: its index {ix:?} repeats an earlier row's"
            ));
        }
        starts.push(base);
    }
    let mut out = operand.into_owned();
    fn put<T: Copy>(dst: &mut [T], src: &[T], starts: &[usize], d: usize) {
        for (&s, row) in starts.iter().zip(src.chunks_exact(d.max(1))) {
            dst[s..s + row.len()].copy_from_slice(row);
        }
    }
    match (&mut out, updates) {
        (Tensor::F32 { data, .. }, Tensor::F32 { data: u, .. }) => put(data, u, &starts, d),
        (Tensor::I32 { data, .. }, Tensor::I32 { data: u, .. }) => put(data, u, &starts, d),
        (Tensor::I1 { data, .. }, Tensor::I1 { data: u, .. }) => put(data, u, &starts, d),
        (o, u) => return kerr(format!("scatter of {} into {}", u.describe(), o.describe())),
    }
    Ok(out)
}

fn concatenate(args: &[Arg<'_>], dim: usize, out: &[usize]) -> KResult<Tensor> {
    let outer: usize = out[..dim].iter().product();
    fn cat<T: Copy>(parts: Vec<(&[T], usize)>, outer: usize, total: usize) -> Vec<T> {
        let mut v = Vec::with_capacity(total);
        for o in 0..outer {
            for (d, chunk) in &parts {
                v.extend_from_slice(&d[o * chunk..(o + 1) * chunk]);
            }
        }
        v
    }
    let total: usize = out.iter().product();
    let inner: usize = out[dim + 1..].iter().product();
    let chunk = |t: &Tensor| t.shape()[dim] * inner;
    let shape = out.to_vec();
    match args[0].t() {
        Tensor::F32 { .. } => {
            let parts: Option<Vec<(&[f32], usize)>> = args
                .iter()
                .map(|a| a.t().as_f32().map(|d| (d, chunk(a.t()))))
                .collect();
            let parts = parts.ok_or_else(|| OpFault("mixed operand kinds".into()))?;
            Ok(Tensor::F32 {
                shape,
                data: cat(parts, outer, total),
            })
        }
        Tensor::I32 { .. } => {
            let parts: Option<Vec<(&[i32], usize)>> = args
                .iter()
                .map(|a| a.t().as_i32().map(|d| (d, chunk(a.t()))))
                .collect();
            let parts = parts.ok_or_else(|| OpFault("mixed operand kinds".into()))?;
            Ok(Tensor::I32 {
                shape,
                data: cat(parts, outer, total),
            })
        }
        Tensor::I1 { .. } => {
            let parts: Option<Vec<(&[bool], usize)>> = args
                .iter()
                .map(|a| a.t().as_i1().map(|d| (d, chunk(a.t()))))
                .collect();
            let parts = parts.ok_or_else(|| OpFault("mixed operand kinds".into()))?;
            Ok(Tensor::I1 {
                shape,
                data: cat(parts, outer, total),
            })
        }
    }
}

fn iota(ty: &TensorType, dim: usize) -> Tensor {
    let shape = ty.shape.to_vec();
    let n = ty.numel();
    let inner: usize = shape[dim + 1..].iter().product();
    let len = shape[dim];
    let idx = |i: usize| (i / inner.max(1)) % len.max(1);
    match ty.dtype {
        DType::I32 => Tensor::I32 {
            shape,
            data: (0..n).map(|i| idx(i) as i32).collect(),
        },
        DType::I1 => Tensor::I1 {
            shape,
            data: (0..n).map(|i| idx(i) != 0).collect(),
        },
        _ => Tensor::F32 {
            shape,
            data: (0..n).map(|i| idx(i) as f32).collect(),
        },
    }
}

/// Moves `dims` to the end (keeping order otherwise), copying only when
/// they are not already trailing; returns the tensor and (kept, reduced) sizes.
fn dims_last<'t>(t: &'t Tensor, dims: &[usize]) -> (std::borrow::Cow<'t, Tensor>, usize, usize) {
    let r = t.shape().len();
    let kept: Vec<usize> = (0..r).filter(|d| !dims.contains(d)).collect();
    let mut perm = kept.clone();
    perm.extend(dims.iter().copied());
    let k: usize = kept.iter().map(|&d| t.shape()[d]).product();
    let n: usize = dims.iter().map(|&d| t.shape()[d]).product();
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        (std::borrow::Cow::Borrowed(t), k, n)
    } else {
        (std::borrow::Cow::Owned(transpose(t, &perm)), k, n)
    }
}

fn reduce(
    kind: ReduceKind,
    x: &Tensor,
    init: &Tensor,
    dims: &[usize],
    out: &[usize],
) -> KResult<Tensor> {
    let (src, _, n) = dims_last(x, dims);
    let shape = out.to_vec();
    match (src.as_ref(), init) {
        (Tensor::F32 { data, .. }, Tensor::F32 { data: i, .. }) => {
            let i0 = i[0];
            let f = |row: &[f32]| -> f32 {
                match kind {
                    ReduceKind::Sum => row.iter().fold(i0, |a, &b| a + b),
                    ReduceKind::Max => row.iter().fold(i0, |a, &b| {
                        if a.is_nan() || b.is_nan() {
                            f32::NAN
                        } else {
                            a.max(b)
                        }
                    }),
                    ReduceKind::Min => row.iter().fold(i0, |a, &b| {
                        if a.is_nan() || b.is_nan() {
                            f32::NAN
                        } else {
                            a.min(b)
                        }
                    }),
                }
            };
            let data = if n == 0 {
                vec![i0; shape.iter().product()]
            } else {
                data.chunks(n).map(f).collect()
            };
            Ok(Tensor::F32 { shape, data })
        }
        (Tensor::I32 { data, .. }, Tensor::I32 { data: i, .. }) => {
            let i0 = i[0];
            let f = |row: &[i32]| -> i32 {
                match kind {
                    ReduceKind::Sum => row.iter().fold(i0, |a, &b| a.wrapping_add(b)),
                    ReduceKind::Max => row.iter().fold(i0, |a, &b| a.max(b)),
                    ReduceKind::Min => row.iter().fold(i0, |a, &b| a.min(b)),
                }
            };
            let data = if n == 0 {
                vec![i0; shape.iter().product()]
            } else {
                data.chunks(n).map(f).collect()
            };
            Ok(Tensor::I32 { shape, data })
        }
        _ => kerr(format!(
            "cannot reduce {} with init {}",
            x.describe(),
            init.describe()
        )),
    }
}

fn argmax(x: &Tensor, dim: usize, out: &[usize]) -> KResult<Tensor> {
    let (t, k, n) = dims_last(x, &[dim]);
    let Tensor::F32 { data, .. } = t.as_ref() else {
        return kerr(format!("argmax of {}", x.describe()));
    };
    let mut res = Vec::with_capacity(k);
    for row in data.chunks(n.max(1)).take(k) {
        // The comparator body(acc, next) keeps the accumulator when it is
        // larger, or equal with a lower index; otherwise it takes the next
        // element (so a NaN is taken, then dropped again, as IREE does).
        // The init is (-inf, 0).
        let (mut bv, mut bi) = (f32::NEG_INFINITY, 0i32);
        for (i, &v) in row.iter().enumerate() {
            let i = i as i32;
            let keep = bv > v || (bv == v && bi < i);
            if !keep {
                bv = v;
                bi = i;
            }
        }
        res.push(bi);
    }
    if n == 0 {
        res = vec![0; k];
    }
    Ok(Tensor::I32 {
        shape: out.to_vec(),
        data: res,
    })
}

fn gather_rows(table: &Tensor, ids: &Tensor, out: &[usize]) -> KResult<Tensor> {
    let Tensor::I32 { data: idx, .. } = ids else {
        return kerr(format!("gather ids are {}", ids.describe()));
    };
    let (v, d) = match table.shape() {
        [v, d] => (*v, *d),
        s => return kerr(format!("gather table of shape {s:?}")),
    };
    // Start indices are clamped so the row lies in the table, as StableHLO specifies.
    let rows: Vec<usize> = idx
        .iter()
        .map(|&i| (i.max(0) as usize).min(v.saturating_sub(1)))
        .collect();
    let offs: Vec<usize> = rows
        .iter()
        .flat_map(|&r| (0..d).map(move |j| r * d + j))
        .collect();
    if v == 0 {
        return kerr("gather from an empty table");
    }
    Ok(gather_offsets(table, out, &offs))
}

/// Evaluates one op on its operands.
/// `src` is the element type of the first operand (needed where the value
/// alone does not say it: `bitcast_convert` of a bf16/f16 held as f32).
pub(crate) fn eval(
    op: &Op,
    ty: &TensorType,
    src: Option<DType>,
    mut args: Vec<Arg<'_>>,
) -> KResult<Tensor> {
    let shape = ty.shape.as_slice();
    let arity = |n: usize| -> KResult<()> {
        if args.len() == n {
            Ok(())
        } else {
            kerr(format!("{} operands, expected {n}", args.len()))
        }
    };
    match op {
        Op::Input { .. } | Op::Parameter { .. } | Op::Constant(_) => kerr("not an operation"),
        Op::Convert => {
            arity(1)?;
            let a = args.remove(0);
            Ok(convert(a, ty.dtype))
        }
        Op::BitcastConvert => {
            arity(1)?;
            bitcast_convert(args[0].t(), src, ty.dtype)
        }
        Op::ShiftLeft => {
            arity(2)?;
            shift_left(args[0].t(), args[1].t())
        }
        Op::ShiftRightLogical => {
            arity(2)?;
            shift_right_logical(args[0].t(), args[1].t())
        }
        Op::BitwiseAnd => {
            arity(2)?;
            bitwise_and(args[0].t(), args[1].t())
        }
        Op::OptimizationBarrier => {
            arity(1)?;
            Ok(args.remove(0).into_owned())
        }
        Op::Binary(b) => {
            arity(2)?;
            binary(*b, args[0].t(), args[1].t())
        }
        Op::Unary(u) => {
            arity(1)?;
            unary(*u, args.remove(0))
        }
        Op::Compare(d) => {
            arity(2)?;
            compare(*d, args[0].t(), args[1].t())
        }
        Op::Select => {
            arity(3)?;
            select(args[0].t(), args[1].t(), args[2].t())
        }
        Op::BroadcastInDim { dims } => {
            arity(1)?;
            Ok(broadcast(args[0].t(), shape, dims))
        }
        Op::Reshape => {
            arity(1)?;
            Ok(with_shape(args.remove(0).into_owned(), shape))
        }
        Op::Transpose { perm } => {
            arity(1)?;
            Ok(transpose(args[0].t(), perm))
        }
        Op::Slice { start, strides, .. } => {
            arity(1)?;
            Ok(slice(args[0].t(), start, strides, shape))
        }
        Op::DynamicUpdateSlice => {
            if args.len() < 2 {
                return kerr("dynamic_update_slice needs an operand and an update");
            }
            let rest = args.split_off(2);
            let update = args.pop().expect("two operands");
            let operand = args.pop().expect("two operands");
            dynamic_update_slice(operand, update.t(), &rest)
        }
        Op::ScatterRows => {
            arity(3)?;
            let updates = args.pop().expect("three operands");
            let indices = args.pop().expect("three operands");
            let operand = args.pop().expect("three operands");
            scatter_rows(operand, indices.t(), updates.t())
        }
        Op::Concatenate { dim } => {
            if args.is_empty() || *dim >= shape.len() {
                return kerr("concatenate needs operands and a dim in range");
            }
            concatenate(&args, *dim, shape)
        }
        Op::Iota { dim } => Ok(iota(ty, *dim)),
        Op::DotGeneral(d) => {
            arity(2)?;
            match args[0].t() {
                Tensor::I32 { .. } => matmul::dot_general_i8(args[0].t(), args[1].t(), d, shape),
                _ => matmul::dot_general(args[0].t(), args[1].t(), d, shape),
            }
        }
        Op::Reduce { kind, dims } => {
            arity(2)?;
            reduce(*kind, args[0].t(), args[1].t(), dims, shape)
        }
        Op::GatherRows => {
            arity(2)?;
            gather_rows(args[0].t(), args[1].t(), shape)
        }
        Op::Argmax { dim } => {
            arity(4)?;
            argmax(args[0].t(), *dim, shape)
        }
        Op::DequantizeBlocks(form) => {
            arity(form.arity())?;
            let ts: Vec<&Tensor> = args.iter().map(Arg::t).collect();
            dequantize_blocks(form, &ts, shape)
        }
    }
}

/// [`Op::DequantizeBlocks`]: each element's code unpacked from its word(s),
/// then `(f32(code) − zero)·scale + min` in f32, the order the op specifies.
fn dequantize_blocks(form: &BlockCodes, args: &[&Tensor], shape: &[usize]) -> KResult<Tensor> {
    fn ints(t: &Tensor) -> KResult<&[i32]> {
        match t {
            Tensor::I32 { data, .. } => Ok(data.as_slice()),
            _ => kerr("dequantize_blocks: words are not i32"),
        }
    }
    fn floats(t: &Tensor) -> KResult<&[f32]> {
        match t {
            Tensor::F32 { data, .. } => Ok(data.as_slice()),
            _ => kerr("dequantize_blocks: scales and minimums are not f32"),
        }
    }
    let mut it = args.iter();
    let lo = ints(it.next().expect("arity checked"))?;
    let hi = if form.high_bits > 0 {
        Some(ints(it.next().expect("arity checked"))?)
    } else {
        None
    };
    let scale = floats(it.next().expect("arity checked"))?;
    let min = if form.has_min {
        Some(floats(it.next().expect("arity checked"))?)
    } else {
        None
    };
    let k = *shape.last().unwrap_or(&0);
    let numel: usize = shape.iter().product();
    if k == 0 || form.group == 0 {
        return Ok(Tensor::F32 {
            shape: shape.to_vec(),
            data: vec![0.0; numel],
        });
    }
    let field = |words: &[i32], bits: u32, row: usize, j: usize| -> i32 {
        let n = (32 / bits) as usize;
        let w = words[row * (k / n) + j / n] as u32;
        let mask = ((1u64 << bits) - 1) as u32;
        ((w >> (bits as usize * (j % n))) & mask) as i32
    };
    let groups = k / form.group;
    let zero = form.zero as f32;
    let mut data = vec![0f32; numel];
    let fill = |(row, out): (usize, &mut [f32])| {
        for (j, o) in out.iter_mut().enumerate() {
            let mut code = field(lo, form.low_bits, row, j);
            if let Some(hi) = hi {
                code += field(hi, form.high_bits, row, j) << form.low_bits;
            }
            let mut x = code as f32;
            if form.zero != 0 {
                x -= zero;
            }
            let g = row * groups + j / form.group;
            x *= scale[g];
            if let Some(m) = min {
                x += m[g];
            }
            *o = x;
        }
    };
    if numel >= PAR_MIN {
        data.par_chunks_mut(k).enumerate().for_each(fill);
    } else {
        data.chunks_mut(k).enumerate().for_each(fill);
    }
    Ok(Tensor::F32 {
        shape: shape.to_vec(),
        data,
    })
}
