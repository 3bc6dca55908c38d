//! Reduction bodies: which one-op body a reduce applies, and whether a
//! two-operand body is the argmax comparator (checked by evaluating it).

use super::syntax::{Attr, Region};
use crate::graph::{CompareDir, ReduceKind};
use std::collections::HashMap;

fn compare_dir(w: &str) -> Option<CompareDir> {
    CompareDir::ALL.into_iter().find(|d| d.name() == w)
}

/// The kind of a one-op reduction body `(a, b) -> op(a, b)`.
pub(crate) fn single_reduce_kind(r: &Region<'_>) -> Option<ReduceKind> {
    let [(a, _), (b, _)] = r.args.as_slice() else {
        return None;
    };
    let [op, ret] = r.body.as_slice() else {
        return None;
    };
    let kind = match op.name.as_str() {
        "stablehlo.add" => ReduceKind::Sum,
        "stablehlo.maximum" => ReduceKind::Max,
        "stablehlo.minimum" => ReduceKind::Min,
        _ => return None,
    };
    let ops: Vec<&str> = op.operands.iter().map(|o| o.0).collect();
    let [(res, 1, _)] = op.results.as_slice() else {
        return None;
    };
    let args_ok = ops == [*a, *b] || ops == [*b, *a];
    let ret_ok = ret.name == "return" && ret.operands.len() == 1 && ret.operands[0].0 == *res;
    (args_ok && ret_ok).then_some(kind)
}

/// Whether a two-argument body returns its second argument unchanged
/// (a scatter that replaces).
pub(crate) fn is_replace_body(r: &Region<'_>) -> bool {
    let [_, (b, _)] = r.args.as_slice() else {
        return false;
    };
    let [ret] = r.body.as_slice() else {
        return false;
    };
    ret.name == "return" && ret.operands.len() == 1 && ret.operands[0].0 == *b
}

/// Evaluates a scalar reduction body on f64 values (booleans as 0/1).
fn eval_body(r: &Region<'_>, args: &[f64]) -> Option<Vec<f64>> {
    let mut env: HashMap<&str, f64> = HashMap::new();
    for ((n, _), &x) in r.args.iter().zip(args) {
        env.insert(n, x);
    }
    for st in &r.body {
        let vals: Option<Vec<f64>> = st
            .operands
            .iter()
            .map(|(n, _)| env.get(n).copied())
            .collect();
        let vals = vals?;
        let res = match st.name.as_str() {
            "return" => return Some(vals),
            "stablehlo.compare" => {
                let dir = match st.attr("comparison_direction") {
                    Some((Attr::Enum(w), _)) => compare_dir(w)?,
                    _ => return None,
                };
                let (x, y) = (*vals.first()?, *vals.get(1)?);
                dir.holds(x, y) as u8 as f64
            }
            "stablehlo.and" => ((*vals.first()? != 0.0) && (*vals.get(1)? != 0.0)) as u8 as f64,
            "stablehlo.or" => ((*vals.first()? != 0.0) || (*vals.get(1)? != 0.0)) as u8 as f64,
            "stablehlo.not" => (*vals.first()? == 0.0) as u8 as f64,
            "stablehlo.select" => {
                if *vals.first()? != 0.0 {
                    *vals.get(1)?
                } else {
                    *vals.get(2)?
                }
            }
            _ => return None,
        };
        let [(n, 1, _)] = st.results.as_slice() else {
            return None;
        };
        env.insert(n, res);
    }
    None
}

/// Whether a 4-argument body is the argmax comparator: keep the larger
/// value, and on equal values the lower index. Checked by evaluation on
/// every combination of special and ordinary values.
pub(crate) fn is_argmax_body(r: &Region<'_>) -> bool {
    let vals = [f64::NEG_INFINITY, -2.5, 0.0, 1.0, f64::INFINITY, f64::NAN];
    let idx = [0.0, 1.0, 5.0];
    let same = |x: f64, y: f64| x == y || (x.is_nan() && y.is_nan());
    for &av in &vals {
        for &ai in &idx {
            for &bv in &vals {
                for &bi in &idx {
                    let pick = av > bv || (av == bv && ai < bi);
                    let want = if pick { (av, ai) } else { (bv, bi) };
                    match eval_body(r, &[av, ai, bv, bi]) {
                        Some(got)
                            if got.len() == 2 && same(got[0], want.0) && same(got[1], want.1) => {}
                        _ => return false,
                    }
                }
            }
        }
    }
    true
}
