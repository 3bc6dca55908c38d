//! The graph layer: turns parsed statements into graph nodes through the
//! builder methods, checking every stated type against the inferred one.

use super::body::{is_argmax_body, is_replace_body, single_reduce_kind};
use super::cursor::{Cursor, PResult};
pub(crate) use super::literal::literal;
use super::syntax::{self, Attr, RawType, Region, Stmt, Types};
use super::Global;
use crate::graph::{
    BinaryOp, BlockCodes, CompareDir, DType, DotDims, Graph, GraphError, Literal, Op, TensorType,
    UnaryOp, Value,
};
use crate::stablehlo::printer::{dequantize_blocks_text, dequantize_prefix};
use std::collections::HashMap;

/// A checked tensor type.
pub(crate) fn tensor_type(c: &Cursor<'_>, raw: &RawType) -> PResult<TensorType> {
    match DType::from_mlir(&raw.elem) {
        Some(d) => Ok(TensorType::new(d, &raw.shape)),
        None => Err(c.err_found(
            raw.pos,
            "a tensor of f32, bf16, f16, i32 or i1",
            format!("`{raw}`"),
        )),
    }
}

fn constant(g: &mut Graph, lit: Literal, ty: &TensorType) -> Result<Value, GraphError> {
    match lit {
        Literal::Splat(x) => g.splat(ty.dtype, &ty.shape, x),
        Literal::Dense(v) => g.dense(ty.dtype, &ty.shape, v),
    }
}

#[derive(Clone)]
enum Binding {
    One(Value),
    /// A multi-result op: the values of each result that is a node.
    Multi(Vec<Option<Value>>),
}

struct FnBuilder<'a, 'c> {
    c: &'c Cursor<'a>,
    g: Graph,
    names: HashMap<&'a str, Binding>,
    /// `tensor.empty` results: only a `linalg.generic`'s init reads one.
    empties: HashMap<&'a str, TensorType>,
    globals: &'c HashMap<String, Global>,
}

fn binary_op(name: &str) -> Option<BinaryOp> {
    BinaryOp::ALL
        .into_iter()
        .find(|b| name.strip_prefix("stablehlo.") == Some(b.name()))
}

fn unary_op(name: &str) -> Option<UnaryOp> {
    UnaryOp::ALL
        .into_iter()
        .find(|u| name.strip_prefix("stablehlo.") == Some(u.name()))
}

fn compare_dir(w: &str) -> Option<CompareDir> {
    CompareDir::ALL.into_iter().find(|d| d.name() == w)
}

impl<'a, 'c> FnBuilder<'a, 'c> {
    fn ty_of(&self, raw: &RawType) -> PResult<TensorType> {
        tensor_type(self.c, raw)
    }

    fn lookup(&self, name: &'a str, pos: usize) -> PResult<Value> {
        let (base, idx) = match name.split_once('#') {
            Some((b, i)) => (b, i.parse::<usize>().ok()),
            None => (name, None),
        };
        match (self.names.get(base), idx) {
            (None, _) => Err(self.c.err_found(pos, "a value defined earlier", format!("undefined `{name}`"))),
            (Some(Binding::One(v)), None | Some(0)) => Ok(*v),
            (Some(Binding::One(_)), Some(_)) => Err(self.c.err_found(pos, format!("`{base}` (a single result)"), format!("`{name}`"))),
            (Some(Binding::Multi(vs)), Some(i)) => match vs.get(i) {
                Some(Some(v)) => Ok(*v),
                Some(None) => Err(self.c.err_found(
                    pos,
                    format!("a usable result of `{base}` (only the indices of an argmax reduce are kept)"),
                    format!("`{name}`"),
                )),
                None => Err(self.c.err_found(pos, format!("a result number below {}", vs.len()), format!("`{name}`"))),
            },
            (Some(Binding::Multi(_)), None) => Err(self.c.err_found(
                pos,
                format!("a result number (`{base}#1`) of the multi-result op"),
                format!("`{name}`"),
            )),
        }
    }

    fn bind(&mut self, st: &Stmt<'a>, v: Value) -> PResult<()> {
        match st.results.as_slice() {
            [(n, 1, p)] => self.define(n, *p, Binding::One(v)),
            [] => Err(self
                .c
                .err_found(st.pos, format!("a result name for `{}`", st.name), "none")),
            [(_, k, p), ..] => Err(self.c.err_found(*p, "one result", format!("{k} results"))),
        }
    }

    fn define(&mut self, n: &'a str, p: usize, b: Binding) -> PResult<()> {
        if self.names.contains_key(n) {
            return Err(self
                .c
                .err_found(p, "a new SSA name", format!("`{n}`, already defined")));
        }
        self.names.insert(n, b);
        Ok(())
    }

    fn operands(&self, st: &Stmt<'a>, n: Option<usize>) -> PResult<Vec<Value>> {
        if let Some(n) = n {
            if st.operands.len() != n {
                let p = st.operands.get(n).map(|o| o.1).unwrap_or(st.pos);
                return Err(self.c.err_found(
                    p,
                    format!("{n} operand(s) for `{}`", st.name),
                    format!("{}", st.operands.len()),
                ));
            }
        }
        let vals: Vec<Value> = st
            .operands
            .iter()
            .map(|&(name, pos)| self.lookup(name, pos))
            .collect::<PResult<_>>()?;
        // Operand types stated in the text must be the operands' types.
        let stated: Vec<&RawType> = match &st.types {
            Types::Fn(ins, _) => {
                if ins.len() != vals.len() {
                    return Err(self.c.err_found(
                        st.types_pos,
                        format!("{} operand type(s)", vals.len()),
                        format!("{}", ins.len()),
                    ));
                }
                ins.iter().collect()
            }
            Types::Short(v) if st.name == "return" => {
                if v.len() != vals.len() {
                    return Err(self.c.err_found(
                        st.types_pos,
                        format!("{} type(s)", vals.len()),
                        format!("{}", v.len()),
                    ));
                }
                v.iter().collect()
            }
            Types::Short(v) if st.name == "stablehlo.select" && v.len() == 2 && vals.len() == 3 => {
                vec![&v[0], &v[1], &v[1]]
            }
            Types::Short(v)
                if v.len() == 1
                    && st.name != "stablehlo.compare"
                    && st.name != "stablehlo.convert"
                    && st.name != "stablehlo.bitcast_convert" =>
            {
                vec![&v[0]; vals.len()]
            }
            Types::Short(_) => Vec::new(),
        };
        for (i, t) in stated.into_iter().enumerate() {
            let want = self.g.ty(vals[i]);
            let have = self.ty_of(t)?;
            if &have != want {
                return Err(self.c.err_found(
                    t.pos,
                    format!("`{want}`, the type of `{}`", st.operands[i].0),
                    format!("`{t}`"),
                ));
            }
        }
        Ok(vals)
    }

    fn result_types(&self, st: &Stmt<'a>) -> PResult<Vec<TensorType>> {
        let raws: Vec<&RawType> = match &st.types {
            Types::Fn(_, outs) => outs.iter().collect(),
            Types::Short(v) => v.last().into_iter().collect(),
        };
        raws.into_iter().map(|r| self.ty_of(r)).collect()
    }

    fn result_type(&self, st: &Stmt<'a>) -> PResult<TensorType> {
        let v = self.result_types(st)?;
        match v.as_slice() {
            [t] => Ok(t.clone()),
            _ => Err(self
                .c
                .err_found(st.types_pos, "one result type", format!("{}", v.len()))),
        }
    }

    fn graph_err(&self, st: &Stmt<'a>, e: GraphError) -> super::super::ParseError {
        self.c.err_found(
            st.pos,
            format!("operands and attributes valid for `{}`", st.name),
            e.to_string(),
        )
    }

    /// Checks the built value's type against the stated result type, binds it.
    fn finish(&mut self, st: &Stmt<'a>, r: Result<Value, GraphError>) -> PResult<()> {
        let v = r.map_err(|e| self.graph_err(st, e))?;
        let want = self.result_type(st)?;
        let got = self.g.ty(v).clone();
        if want != got {
            return Err(self.c.err_found(
                st.types_pos,
                format!("result type `{got}` (inferred from the operands)"),
                format!("`{want}`"),
            ));
        }
        self.bind(st, v)
    }

    fn attr<'s>(&self, st: &'s Stmt<'a>, name: &str) -> PResult<(&'s Attr, usize)> {
        st.attr(name).ok_or_else(|| {
            self.c.err_found(
                st.pos,
                format!("attribute `{name}` of `{}`", st.name),
                "none",
            )
        })
    }

    fn dims(&self, a: &Attr, pos: usize, what: &str) -> PResult<Vec<usize>> {
        match a {
            Attr::Ints(v) => v
                .iter()
                .map(|&x| {
                    usize::try_from(x).map_err(|_| {
                        self.c
                            .err_found(pos, format!("non-negative {what}"), x.to_string())
                    })
                })
                .collect(),
            Attr::Int(x) => usize::try_from(*x).map(|d| vec![d]).map_err(|_| {
                self.c
                    .err_found(pos, format!("non-negative {what}"), x.to_string())
            }),
            other => Err(self.c.err_found(
                pos,
                format!("{what} (a list of integers)"),
                format!("{other:?}"),
            )),
        }
    }

    fn dims_attr(&self, st: &Stmt<'a>, name: &str) -> PResult<Vec<usize>> {
        let (a, p) = self.attr(st, name)?;
        self.dims(a, p, name)
    }

    fn int_attr(&self, st: &Stmt<'a>, name: &str) -> PResult<usize> {
        let (a, p) = self.attr(st, name)?;
        match a {
            Attr::Int(x) => usize::try_from(*x).map_err(|_| {
                self.c
                    .err_found(p, format!("non-negative `{name}`"), x.to_string())
            }),
            other => Err(self
                .c
                .err_found(p, format!("an integer `{name}`"), format!("{other:?}"))),
        }
    }

    fn struct_field(
        &self,
        fields: &[(String, Attr)],
        name: &str,
        pos: usize,
    ) -> PResult<Vec<usize>> {
        match fields.iter().find(|(n, _)| n == name) {
            Some((_, a)) => self.dims(a, pos, name),
            None => Ok(Vec::new()),
        }
    }

    /// One statement of a function body: its op built, its result bound.
    fn stmt(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let name = st.name.as_str();
        if let Some(b) = binary_op(name) {
            return self.two_operands(st, |g, x, y| g.binary(b, x, y));
        }
        if let Some(u) = unary_op(name) {
            return self.one_operand(st, |g, x| g.unary(u, x));
        }
        match name {
            "stablehlo.constant" => self.constant(st),
            "util.global.load" => self.global_load(st),
            "stablehlo.convert" => self.convert_like(st, Graph::convert),
            "stablehlo.bitcast_convert" => self.convert_like(st, Graph::bitcast_convert),
            "stablehlo.shift_left" => self.two_operands(st, Graph::shift_left),
            "stablehlo.shift_right_logical" => self.two_operands(st, Graph::shift_right_logical),
            "stablehlo.and" => self.two_operands(st, Graph::bitwise_and),
            "stablehlo.optimization_barrier" => self.one_operand(st, Graph::optimization_barrier),
            "stablehlo.compare" => self.compare(st),
            "stablehlo.select" => self.select(st),
            "stablehlo.broadcast_in_dim" => self.broadcast_in_dim(st),
            "stablehlo.reshape" => self.reshape(st),
            "stablehlo.transpose" => self.transpose(st),
            "stablehlo.slice" => self.slice(st),
            "stablehlo.concatenate" => self.concatenate(st),
            "stablehlo.iota" => self.iota(st),
            "stablehlo.dot_general" => self.dot_general(st),
            "stablehlo.dynamic_update_slice" => self.dynamic_update_slice(st),
            "stablehlo.gather" => self.gather(st),
            "stablehlo.scatter" => self.scatter(st),
            "stablehlo.reduce" => self.reduce(st),
            "tensor.empty" => self.empty(st),
            "linalg.generic" => self.dequantize_blocks(st),
            _ => Err(self.c.err_found(
                st.pos,
                "a StableHLO operation kiln supports",
                format!("`{name}`"),
            )),
        }
    }

    /// `tensor.empty`: remembered as the init of a later `linalg.generic`.
    fn empty(&mut self, st: &Stmt<'a>) -> PResult<()> {
        self.operands(st, Some(0))?;
        let t = self.result_type(st)?;
        match st.results.as_slice() {
            [(n, 1, p)] => {
                if self.names.contains_key(n) || self.empties.contains_key(n) {
                    return Err(self.c.err_found(
                        *p,
                        "a new SSA name",
                        format!("`{n}`, already defined"),
                    ));
                }
                self.empties.insert(n, t);
                Ok(())
            }
            _ => Err(self
                .c
                .err_found(st.pos, "one result name for `tensor.empty`", "none")),
        }
    }

    /// A `linalg.generic`: only the block dequantization kiln prints
    /// ([`crate::stablehlo::printer`]'s `dequantize_blocks_text`), read
    /// back by deriving its form from the operand types and comparing the
    /// statement's text, whitespace aside, with what the printer writes
    /// for that form and those names.
    fn dequantize_blocks(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let expected = "a `linalg.generic` that kiln prints for a block dequantization (spec/stablehlo-subset.md)";
        let fail = |why: &str| self.c.err_found(st.pos, expected, why.to_string());
        let Some((&(init, init_pos), ins)) = st.operands.split_last() else {
            return Err(fail("no operands"));
        };
        let Some(init_ty) = self.empties.get(init).cloned() else {
            return Err(self.c.err_found(
                init_pos,
                "a `tensor.empty` result as the init",
                format!("`{init}`"),
            ));
        };
        let args: Vec<Value> = ins
            .iter()
            .map(|&(n, p)| self.lookup(n, p))
            .collect::<PResult<_>>()?;
        let t = self.result_type(st)?;
        if t != init_ty || t.dtype != DType::F32 || t.rank() == 0 {
            return Err(fail("a result that is not the f32 init's type"));
        }
        let tys: Vec<TensorType> = args.iter().map(|&v| self.g.ty(v).clone()).collect();
        let k = t.shape[t.rank() - 1];
        let last = |ty: &TensorType| ty.shape.last().copied().unwrap_or(0);
        let bits = |ty: &TensorType| -> Option<u32> {
            let w = last(ty);
            (w > 0 && k % w == 0 && 32 % (k / w) == 0).then(|| (32 / (k / w)) as u32)
        };
        let ints = tys.iter().take_while(|ty| ty.dtype == DType::I32).count();
        let floats = tys.len() - ints;
        let (Some(low_bits), true, true) = (
            tys.first().and_then(bits),
            (1..=2).contains(&ints),
            (1..=2).contains(&floats),
        ) else {
            return Err(fail("operands other than i32 words, then f32 scales"));
        };
        let high_bits = match ints {
            2 => bits(&tys[1]).ok_or_else(|| fail("high words that do not fill the row"))?,
            _ => 0,
        };
        let g = last(&tys[ints]);
        if g == 0 || k % g != 0 {
            return Err(fail("scales that do not divide the row"));
        }
        let text = &self.c.src[st.results.first().map_or(st.pos, |r| r.2)..st.end];
        let res = st.results.first().map_or("%", |r| r.0);
        let zero = text
            .split_once(&format!("{}_z = arith.constant ", dequantize_prefix(res)))
            .and_then(|(_, rest)| rest.split_once(" : f32"))
            .and_then(|(z, _)| z.trim().parse::<f64>().ok())
            .map_or(0, |z| z as u32);
        let form = BlockCodes {
            low_bits,
            high_bits,
            group: k / g,
            zero,
            has_min: floats == 2,
        };
        let names: Vec<&str> = ins.iter().map(|o| o.0).collect();
        let ty_refs: Vec<&TensorType> = tys.iter().collect();
        let want = dequantize_blocks_text(res, init, &names, &ty_refs, &t, &form);
        let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        if squash(text) != squash(&want) {
            return Err(fail("another body, maps or attributes"));
        }
        let r = self.g.dequantize_blocks_op(form, &args);
        self.finish(st, r)
    }

    /// An op of one operand, built by `build`.
    fn one_operand(
        &mut self,
        st: &Stmt<'a>,
        build: impl FnOnce(&mut Graph, Value) -> Result<Value, GraphError>,
    ) -> PResult<()> {
        let v = self.operands(st, Some(1))?;
        let r = build(&mut self.g, v[0]);
        self.finish(st, r)
    }

    /// An op of two operands, built by `build`.
    fn two_operands(
        &mut self,
        st: &Stmt<'a>,
        build: impl FnOnce(&mut Graph, Value, Value) -> Result<Value, GraphError>,
    ) -> PResult<()> {
        let v = self.operands(st, Some(2))?;
        let r = build(&mut self.g, v[0], v[1]);
        self.finish(st, r)
    }

    /// An op of one operand whose result dtype is the stated one
    /// (`convert`, `bitcast_convert`), built by `build`.
    fn convert_like(
        &mut self,
        st: &Stmt<'a>,
        build: impl FnOnce(&mut Graph, Value, DType) -> Result<Value, GraphError>,
    ) -> PResult<()> {
        let v = self.operands(st, Some(1))?;
        let t = self.result_type(st)?;
        let r = build(&mut self.g, v[0], t.dtype);
        self.finish(st, r)
    }

    /// `stablehlo.constant dense<…>`.
    fn constant(&mut self, st: &Stmt<'a>) -> PResult<()> {
        self.operands(st, Some(0))?;
        let (a, p) = self.attr(st, "value")?;
        let Attr::Dense(lit, raw) = a else {
            return Err(self.c.err_found(p, "a `dense<…>` value", format!("{a:?}")));
        };
        let ty = self.ty_of(raw)?;
        let lit = literal(self.c, lit, &ty, p)?;
        let r = constant(&mut self.g, lit, &ty);
        self.finish(st, r)
    }

    /// `util.global.load @sym`: a parameter, or a constant global's value.
    fn global_load(&mut self, st: &Stmt<'a>) -> PResult<()> {
        self.operands(st, Some(0))?;
        let (sym, p) = st.symbol.clone().unwrap_or_default();
        let ty = self.result_type(st)?;
        let Some(global) = self.globals.get(&sym) else {
            return Err(self.c.err_found(
                p,
                "a global declared before the function",
                format!("`@{sym}`"),
            ));
        };
        let (Global::Param { ty: gt, .. } | Global::Const { ty: gt, .. }) = global;
        if *gt != ty {
            return Err(self.c.err_found(
                st.types_pos,
                format!("`{gt}`, the type of global @{sym}"),
                format!("`{ty}`"),
            ));
        }
        let r = match global {
            Global::Param { key, offset, .. } => match offset {
                None => self.g.parameter(key, ty),
                Some(o) => self.g.parameter_part(key, ty, *o),
            },
            Global::Const { lit, .. } => constant(&mut self.g, lit.clone(), &ty),
        };
        self.finish(st, r)
    }

    /// `stablehlo.compare DIR, %a, %b`.
    fn compare(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, Some(2))?;
        let (a, p) = self.attr(st, "comparison_direction")?;
        let dir = match a {
            Attr::Enum(w) => compare_dir(w),
            _ => None,
        }
        .ok_or_else(|| {
            self.c.err_found(
                p,
                "a comparison direction (`EQ`, `NE`, `LT`, `LE`, `GT`, `GE`)",
                format!("{a:?}"),
            )
        })?;
        let r = self.g.compare(dir, v[0], v[1]);
        self.finish(st, r)
    }

    /// `stablehlo.select %pred, %on_true, %on_false`.
    fn select(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, Some(3))?;
        let r = self.g.select(v[0], v[1], v[2]);
        self.finish(st, r)
    }

    /// `stablehlo.broadcast_in_dim` to the stated result shape.
    fn broadcast_in_dim(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, Some(1))?;
        let dims = self.dims_attr(st, "broadcast_dimensions")?;
        let t = self.result_type(st)?;
        let r = self.g.broadcast_in_dim(v[0], &t.shape, &dims);
        self.finish(st, r)
    }

    /// `stablehlo.reshape` to the stated result shape.
    fn reshape(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, Some(1))?;
        let t = self.result_type(st)?;
        let r = self.g.reshape(v[0], &t.shape);
        self.finish(st, r)
    }

    /// `stablehlo.transpose` by its `permutation`.
    fn transpose(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, Some(1))?;
        let perm = self.dims_attr(st, "permutation")?;
        let r = self.g.transpose(v[0], &perm);
        self.finish(st, r)
    }

    /// `stablehlo.slice`, its strides 1 when not given.
    fn slice(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, Some(1))?;
        let s = self.dims_attr(st, "start_indices")?;
        let l = self.dims_attr(st, "limit_indices")?;
        let k = match st.attr("strides") {
            Some((a, p)) => self.dims(a, p, "strides")?,
            None => vec![1; s.len()],
        };
        let r = self.g.slice(v[0], &s, &l, &k);
        self.finish(st, r)
    }

    /// `stablehlo.concatenate` of any number of operands.
    fn concatenate(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, None)?;
        let d = self.int_attr(st, "dimension")?;
        let r = self.g.concatenate(&v, d);
        self.finish(st, r)
    }

    /// `stablehlo.iota` of the stated result type.
    fn iota(&mut self, st: &Stmt<'a>) -> PResult<()> {
        self.operands(st, Some(0))?;
        let d = self.int_attr(st, "iota_dimension")?;
        let t = self.result_type(st)?;
        let r = self.g.iota(t.dtype, &t.shape, d);
        self.finish(st, r)
    }

    /// `stablehlo.dot_general` with its `#stablehlo.dot<…>` dimension numbers.
    fn dot_general(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, Some(2))?;
        let (a, p) = self.attr(st, "dot_dimension_numbers")?;
        let Attr::Struct(_, f) = a else {
            return Err(self.c.err_found(p, "`#stablehlo.dot<…>`", format!("{a:?}")));
        };
        let dims = DotDims {
            lhs_batch: self.struct_field(f, "lhs_batching_dimensions", p)?,
            rhs_batch: self.struct_field(f, "rhs_batching_dimensions", p)?,
            lhs_contract: self.struct_field(f, "lhs_contracting_dimensions", p)?,
            rhs_contract: self.struct_field(f, "rhs_contracting_dimensions", p)?,
        };
        let r = self.g.dot_general(v[0], v[1], dims);
        self.finish(st, r)
    }

    /// `stablehlo.dynamic_update_slice %operand, %update, %starts…`.
    fn dynamic_update_slice(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, None)?;
        if v.len() < 2 {
            return Err(self.c.err_found(
                st.pos,
                "an operand, an update and one start index per dim",
                format!("{} operand(s)", v.len()),
            ));
        }
        let r = self.g.dynamic_update_slice(v[0], v[1], &v[2..]);
        self.finish(st, r)
    }

    fn gather(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, Some(2))?;
        let (a, p) = self.attr(st, "dimension_numbers")?;
        let Attr::Struct(_, f) = a else {
            return Err(self
                .c
                .err_found(p, "`#stablehlo.gather<…>`", format!("{a:?}")));
        };
        let (tt, ti) = (self.g.ty(v[0]).clone(), self.g.ty(v[1]).clone());
        let k = ti.rank();
        let sizes = self.dims_attr(st, "slice_sizes")?;
        let ok = self.struct_field(f, "offset_dims", p)? == [k]
            && self.struct_field(f, "collapsed_slice_dims", p)? == [0]
            && self.struct_field(f, "start_index_map", p)? == [0]
            && self.struct_field(f, "index_vector_dim", p)? == [k]
            && self.struct_field(f, "operand_batching_dims", p)?.is_empty()
            && self
                .struct_field(f, "start_indices_batching_dims", p)?
                .is_empty()
            && tt.rank() == 2
            && sizes == [1, tt.shape[1]];
        if !ok {
            return Err(self.c.err_found(
                p,
                format!("a row gather (offset_dims = [{k}], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = {k}, slice_sizes = [1, D])"),
                "other gather dimension numbers",
            ));
        }
        let r = self.g.gather_rows(v[0], v[1]);
        self.finish(st, r)
    }

    /// A row scatter ([`Op::ScatterRows`]): indices `[B, k]` into the
    /// first k dims of a rank-(k + 1) operand, updates `[B, D]`, a body
    /// that returns the update.
    fn scatter(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, Some(3))?;
        let (a, p) = self.attr(st, "scatter_dimension_numbers")?;
        let Attr::Struct(_, f) = a else {
            return Err(self
                .c
                .err_found(p, "`#stablehlo.scatter<…>`", format!("{a:?}")));
        };
        let k = self.g.ty(v[0]).rank().saturating_sub(1);
        let firsts: Vec<usize> = (0..k).collect();
        let ok = self.struct_field(f, "update_window_dims", p)? == [1]
            && self.struct_field(f, "inserted_window_dims", p)? == firsts
            && self.struct_field(f, "scatter_dims_to_operand_dims", p)? == firsts
            && self.struct_field(f, "index_vector_dim", p)? == [1]
            && self.struct_field(f, "input_batching_dims", p)?.is_empty()
            && self
                .struct_field(f, "scatter_indices_batching_dims", p)?
                .is_empty();
        if !ok {
            return Err(self.c.err_found(
                p,
                format!("a row scatter (update_window_dims = [1], inserted_window_dims = scatter_dims_to_operand_dims = {firsts:?}, index_vector_dim = 1)"),
                "other scatter dimension numbers",
            ));
        }
        let body_ok = st.region.as_ref().is_some_and(|r| {
            let elem = self.g.ty(v[0]).dtype.mlir();
            is_replace_body(r)
                && r.args
                    .iter()
                    .all(|(_, t)| t.shape.is_empty() && t.elem == elem)
        });
        if !body_ok {
            return Err(self.c.err_found(
                st.pos,
                "a scatter body that returns its second argument (the update)",
                "another body",
            ));
        }
        let r = self.g.scatter_rows(v[0], v[1], v[2]);
        self.finish(st, r)
    }

    fn reduce(&mut self, st: &Stmt<'a>) -> PResult<()> {
        let v = self.operands(st, None)?;
        let dims = self.dims_attr(st, "dimensions")?;
        let Some(region) = &st.region else {
            return Err(self.c.err_found(st.pos, "a reduction body", "none"));
        };
        match v.len() {
            2 => {
                let kind = single_reduce_kind(region).ok_or_else(|| {
                    self.c.err_found(
                        st.pos,
                        "a reduction body of one `add`, `maximum` or `minimum`",
                        "another body",
                    )
                })?;
                let (tx, ti) = (self.g.ty(v[0]).clone(), self.g.ty(v[1]).clone());
                let mut sorted = dims.clone();
                sorted.sort_unstable();
                let ok = ti == TensorType::scalar(tx.dtype)
                    && !dims.is_empty()
                    && tx.dtype != DType::I1
                    && sorted.windows(2).all(|w| w[0] < w[1])
                    && sorted.iter().all(|&d| d < tx.rank())
                    && region
                        .args
                        .iter()
                        .all(|(_, t)| t.shape.is_empty() && t.elem == tx.dtype.mlir());
                if !ok {
                    return Err(self.c.err_found(
                        st.pos,
                        "a reduce of a tensor with a scalar init of its dtype over distinct dims",
                        format!("{tx} with init {ti} over {dims:?}"),
                    ));
                }
                let shape: Vec<usize> = (0..tx.rank())
                    .filter(|d| !sorted.contains(d))
                    .map(|d| tx.shape[d])
                    .collect();
                let ty = TensorType::new(tx.dtype, &shape);
                let r = self.g.push(Op::Reduce { kind, dims: sorted }, &v, ty);
                self.finish(st, Ok(r))
            }
            4 => self.argmax(st, &v, &dims, region),
            n => Err(self.c.err_found(
                st.pos,
                "a reduce of 1 operand (or an argmax of 2)",
                format!("{} operands", n / 2),
            )),
        }
    }

    fn argmax(
        &mut self,
        st: &Stmt<'a>,
        v: &[Value],
        dims: &[usize],
        region: &Region<'a>,
    ) -> PResult<()> {
        let tx = self.g.ty(v[0]).clone();
        let expected = "an argmax reduce: (values, i32 iota along the dim, -inf, 0) with the lowest-index-on-ties comparator";
        let fail = |why: &str| self.c.err_found(st.pos, expected, why.to_string());
        let [dim] = dims else {
            return Err(fail("more than one reduced dim"));
        };
        let dim = *dim;
        if !tx.dtype.is_float() || dim >= tx.rank() {
            return Err(fail("a non-float operand or a dim out of range"));
        }
        let iota_ok = matches!(self.g.node(v[1]).op, Op::Iota { dim: d } if d == dim)
            && *self.g.ty(v[1]) == tx.with_dtype(DType::I32);
        let splat_is = |val: Value, dt: DType, x: f64| {
            let n = self.g.node(val);
            n.ty == TensorType::scalar(dt)
                && match &n.op {
                    Op::Constant(Literal::Splat(y)) => *y == x,
                    Op::Constant(Literal::Dense(w)) => w.len() == 1 && w[0] == x,
                    _ => false,
                }
        };
        if !iota_ok {
            return Err(fail(
                "the second operand is not an i32 iota along the reduced dim",
            ));
        }
        if !splat_is(v[2], tx.dtype, f64::NEG_INFINITY) || !splat_is(v[3], DType::I32, 0.0) {
            return Err(fail("inits other than -inf and 0"));
        }
        let arg_types_ok = region.args.len() == 4
            && region.args.iter().enumerate().all(|(i, (_, t))| {
                t.shape.is_empty() && t.elem == if i % 2 == 0 { tx.dtype.mlir() } else { "i32" }
            });
        if !arg_types_ok || !is_argmax_body(region) {
            return Err(fail("another comparator"));
        }
        let shape: Vec<usize> = (0..tx.rank())
            .filter(|&d| d != dim)
            .map(|d| tx.shape[d])
            .collect();
        let ty = TensorType::new(DType::I32, &shape);
        let want = self.result_types(st)?;
        if want != [TensorType::new(tx.dtype, &shape), ty.clone()] {
            return Err(self.c.err_found(
                st.types_pos,
                format!("results `({}, {ty})`", TensorType::new(tx.dtype, &shape)),
                "other result types",
            ));
        }
        let r = self.g.push(Op::Argmax { dim }, v, ty);
        match st.results.as_slice() {
            [(n, 2, p)] => self.define(n, *p, Binding::Multi(vec![None, Some(r)])),
            [(a, 1, pa), (b, 1, pb)] => {
                self.define(a, *pa, Binding::Multi(vec![None]))?;
                self.define(b, *pb, Binding::One(r))
            }
            _ => Err(self
                .c
                .err_found(st.pos, "two results (`%N:2 = …`)", "another result list")),
        }
    }

    /// Binds the arguments as the function's inputs; returns the output
    /// storages they ask for, as (result, argument, attribute position).
    fn inputs(&mut self, args: Vec<Arg<'a>>) -> PResult<Vec<(usize, Value, usize)>> {
        let mut storage = Vec::new();
        for arg in args {
            let v = self.g.input(arg.ty);
            self.define(arg.name, arg.pos, Binding::One(v))?;
            if let Some((r, ap)) = arg.stored {
                storage.push((r, v, ap));
            }
        }
        Ok(storage)
    }

    /// Builds a function body; returns the values of its final `return`.
    fn body(&mut self, c: &Cursor<'a>, body: &[Stmt<'a>], rets: &[RawType]) -> PResult<Vec<Value>> {
        let mut returned = None;
        for st in body {
            if returned.is_some() {
                return Err(c.err_found(st.pos, "`}` after the return", format!("`{}`", st.name)));
            }
            if st.name == "return" {
                returned = Some(self.returned(c, st, rets)?);
                continue;
            }
            self.stmt(st)?;
        }
        returned.ok_or_else(|| {
            c.err_found(
                c.pos.saturating_sub(1),
                format!("a `return` in @{}", self.g.name),
                "`}`",
            )
        })
    }

    /// The values of a `return`, as many and of the types the signature says.
    fn returned(&self, c: &Cursor<'a>, st: &Stmt<'a>, rets: &[RawType]) -> PResult<Vec<Value>> {
        let v = self.operands(st, None)?;
        if v.len() != rets.len() {
            return Err(c.err_found(
                st.pos,
                format!("{} returned value(s), as the signature says", rets.len()),
                format!("{}", v.len()),
            ));
        }
        for (val, raw) in v.iter().zip(rets) {
            let want = tensor_type(c, raw)?;
            if *self.g.ty(*val) != want {
                return Err(c.err_found(
                    st.pos,
                    format!("a returned `{want}` as the signature says"),
                    format!("`{}`", self.g.ty(*val)),
                ));
            }
        }
        Ok(v)
    }
}

/// A function argument as declared: its SSA name and position, its type,
/// and the result stored in it (`iree.abi.output`) with that attribute's
/// position.
struct Arg<'a> {
    name: &'a str,
    pos: usize,
    ty: TensorType,
    stored: Option<(usize, usize)>,
}

/// `func.func @name(args) -> results { body }`.
pub(crate) fn function<'a>(
    c: &mut Cursor<'a>,
    globals: &HashMap<String, Global>,
) -> PResult<Graph> {
    c.expect_kw("func.func")?;
    for kw in ["public", "private", "nested"] {
        c.eat_kw(kw);
    }
    let (name, _) = c.symbol()?;
    let mut fb = FnBuilder {
        c: &Cursor::new(c.src),
        g: Graph::new(name),
        names: HashMap::new(),
        empties: HashMap::new(),
        globals,
    };
    let args = arguments(c)?;
    let rets = signature_results(c)?;
    if c.eat_kw("attributes") {
        let mut sink = Vec::new();
        syntax::attr_dict(c, &mut sink)?;
    }
    c.expect("{")?;
    let body = syntax::block(c, 0)?;
    let storage = fb.inputs(args)?;
    let outs = fb.body(c, &body, &rets)?;
    fb.g.set_outputs(&outs);
    for (r, v, ap) in storage {
        fb.g.store_output_in_input(r, v).map_err(|e| {
            c.err_found(
                ap,
                "an output storage for a result of the argument's type",
                e.to_string(),
            )
        })?;
    }
    Ok(fb.g)
}

/// `(%arg0: T {attrs}, …)` of a function signature.
fn arguments<'a>(c: &mut Cursor<'a>) -> PResult<Vec<Arg<'a>>> {
    c.expect("(")?;
    let mut args = Vec::new();
    if c.eat(")") {
        return Ok(args);
    }
    loop {
        let (name, pos) = c.ssa()?;
        c.expect(":")?;
        let raw = syntax::raw_type(c)?;
        let ty = tensor_type(c, &raw)?;
        let stored = if c.peek("{") {
            output_storage(c)?
        } else {
            None
        };
        args.push(Arg {
            name,
            pos,
            ty,
            stored,
        });
        if c.eat(")") {
            return Ok(args);
        }
        c.expect(",")?;
    }
}

/// An argument's attribute dictionary: the result stored in the argument
/// and the attribute's position, if any.
fn output_storage(c: &mut Cursor<'_>) -> PResult<Option<(usize, usize)>> {
    let mut attrs = Vec::new();
    syntax::attr_dict(c, &mut attrs)?;
    // `iree.abi.output = R : index`: result R is written into this
    // argument's buffer. Other argument attributes do not change what the
    // function computes and are dropped.
    match attrs.iter().find(|(k, _, _)| k == "iree.abi.output") {
        None => Ok(None),
        Some((_, Attr::Int(r), ap)) if *r >= 0 => Ok(Some((*r as usize, *ap))),
        Some((_, other, ap)) => Err(c.err_found(
            *ap,
            "`iree.abi.output = N : index` with a result number N",
            format!("{other:?}"),
        )),
    }
}

/// The result types after `->` (none without an arrow).
fn signature_results(c: &mut Cursor<'_>) -> PResult<Vec<RawType>> {
    if !c.eat("->") {
        return Ok(Vec::new());
    }
    if c.peek("(") {
        syntax::type_list_in_parens(c)
    } else {
        Ok(vec![syntax::raw_type(c)?])
    }
}
