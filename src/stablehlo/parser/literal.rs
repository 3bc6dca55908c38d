//! Dense literals: `dense<…>` contents turned into exact [`Literal`] values
//! of a tensor type (decimal, hex bit patterns, booleans, raw hex strings).

use super::cursor::{Cursor, Num, PResult};
use super::syntax::{DenseLit, Scalar};
use crate::graph::{DType, Literal, TensorType};

fn scalar_value(c: &Cursor<'_>, s: Scalar, dtype: DType, pos: usize) -> PResult<f64> {
    let bad = |what: &str| {
        c.err_found(
            pos,
            format!("a literal of element type {dtype}"),
            what.to_string(),
        )
    };
    let v = match (s, dtype) {
        (Scalar::Bool(b), DType::I1) => b as u8 as f64,
        (Scalar::Bool(_), _) => return Err(bad("a boolean")),
        (Scalar::Num(Num::Int(i)), DType::I1) if i == 0 || i == 1 => i as f64,
        (Scalar::Num(Num::Hex(h)), DType::I1) if h <= 1 => h as f64,
        (Scalar::Num(Num::Int(i)), DType::I32) => {
            if i < i32::MIN as i128 || i > i32::MAX as i128 {
                return Err(bad(&format!("{i}, out of i32 range")));
            }
            i as f64
        }
        (Scalar::Num(Num::Hex(h)), DType::I32) => match u32::try_from(h) {
            Ok(u) => u as i32 as f64,
            Err(_) => return Err(bad(&format!("0x{h:X}, wider than 32 bits"))),
        },
        (Scalar::Num(Num::Int(i)), DType::I16) => {
            if i < i16::MIN as i128 || i > i16::MAX as i128 {
                return Err(bad(&format!("{i}, out of i16 range")));
            }
            i as f64
        }
        (Scalar::Num(Num::Hex(h)), DType::I16) => match u16::try_from(h) {
            Ok(u) => u as i16 as f64,
            Err(_) => return Err(bad(&format!("0x{h:X}, wider than 16 bits"))),
        },
        (Scalar::Num(Num::Int(i)), DType::I8) => {
            if i < i8::MIN as i128 || i > i8::MAX as i128 {
                return Err(bad(&format!("{i}, out of i8 range")));
            }
            i as f64
        }
        (Scalar::Num(Num::Hex(h)), DType::I8) => match u8::try_from(h) {
            Ok(u) => u as i8 as f64,
            Err(_) => return Err(bad(&format!("0x{h:X}, wider than 8 bits"))),
        },
        (Scalar::Num(Num::Float(x)), DType::F32) => (x as f32) as f64,
        (Scalar::Num(Num::Int(i)), DType::F32) => (i as f32) as f64,
        (Scalar::Num(Num::Hex(h)), DType::F32) => match u32::try_from(h) {
            Ok(u) => f32::from_bits(u) as f64,
            Err(_) => return Err(bad(&format!("0x{h:X}, wider than 32 bits"))),
        },
        (Scalar::Num(Num::Float(x)), DType::BF16) => half::bf16::from_f64(x).to_f64(),
        (Scalar::Num(Num::Int(i)), DType::BF16) => half::bf16::from_f64(i as f64).to_f64(),
        (Scalar::Num(Num::Hex(h)), DType::BF16) => match u16::try_from(h) {
            Ok(u) => half::bf16::from_bits(u).to_f64(),
            Err(_) => return Err(bad(&format!("0x{h:X}, wider than 16 bits"))),
        },
        (Scalar::Num(Num::Float(x)), DType::F16) => half::f16::from_f64(x).to_f64(),
        (Scalar::Num(Num::Int(i)), DType::F16) => half::f16::from_f64(i as f64).to_f64(),
        (Scalar::Num(Num::Hex(h)), DType::F16) => match u16::try_from(h) {
            Ok(u) => half::f16::from_bits(u).to_f64(),
            Err(_) => return Err(bad(&format!("0x{h:X}, wider than 16 bits"))),
        },
        (Scalar::Num(Num::Float(x)), _) => return Err(bad(&format!("float {x}"))),
        (Scalar::Num(n), _) => return Err(bad(&format!("{n:?}"))),
    };
    Ok(v)
}

fn hex_element(bytes: &[u8], dtype: DType) -> f64 {
    let mut b = [0u8; 4];
    b[..bytes.len()].copy_from_slice(bytes);
    match dtype {
        DType::F32 => f32::from_le_bytes(b) as f64,
        DType::I32 => i32::from_le_bytes(b) as f64,
        DType::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
        DType::I8 => b[0] as i8 as f64,
        DType::I4 => ((b[0] << 4) as i8 >> 4) as f64,
        DType::BF16 => half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        DType::F16 => half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        DType::I1 => (b[0] != 0) as u8 as f64,
    }
}

/// The literal of a `dense<…>` of type `ty`, every value exact in its dtype.
pub(crate) fn literal(
    c: &Cursor<'_>,
    lit: &DenseLit,
    ty: &TensorType,
    pos: usize,
) -> PResult<Literal> {
    let n = ty.numel();
    match lit {
        DenseLit::Splat(s) => Ok(Literal::Splat(scalar_value(c, *s, ty.dtype, pos)?)),
        DenseLit::List(shape, vals) => {
            if shape.as_slice() != ty.shape.as_slice() {
                return Err(c.err_found(
                    pos,
                    format!("a literal of shape {:?} for {ty}", ty.shape.as_slice()),
                    format!("one of shape {shape:?}"),
                ));
            }
            let v: PResult<Vec<f64>> = vals
                .iter()
                .map(|&s| scalar_value(c, s, ty.dtype, pos))
                .collect();
            Ok(Literal::Dense(v?))
        }
        DenseLit::Hex(bytes) => {
            let size = ty.dtype.size();
            if bytes.len() == size {
                return Ok(Literal::Splat(hex_element(bytes, ty.dtype)));
            }
            if Some(bytes.len()) != n.checked_mul(size) {
                return Err(c.err_found(
                    pos,
                    format!("{} bytes of hex data for {ty}", n.saturating_mul(size)),
                    format!("{} bytes", bytes.len()),
                ));
            }
            Ok(Literal::Dense(
                bytes
                    .chunks_exact(size)
                    .map(|ch| hex_element(ch, ty.dtype))
                    .collect(),
            ))
        }
    }
}
