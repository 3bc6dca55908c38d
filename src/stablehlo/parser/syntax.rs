//! The syntax layer: types, attributes, dense literals and operation
//! statements, in both MLIR's generic form and StableHLO's pretty forms,
//! normalized into one [`Stmt`] shape that the graph builder consumes.

use super::cursor::{Cursor, Num, PResult};

/// A `tensor<…>` type as written, before its element type is checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawType {
    pub shape: Vec<usize>,
    pub elem: String,
    pub pos: usize,
}

impl std::fmt::Display for RawType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("tensor<")?;
        for d in &self.shape {
            write!(f, "{d}x")?;
        }
        write!(f, "{}>", self.elem)
    }
}

/// One scalar of a dense literal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scalar {
    Num(Num),
    Bool(bool),
}

/// The inside of `dense<…>`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DenseLit {
    /// One scalar for every element.
    Splat(Scalar),
    /// Nested lists: their shape and row-major scalars.
    List(Vec<usize>, Vec<Scalar>),
    /// A `"0x…"` hex string of raw little-endian bytes.
    Hex(Vec<u8>),
}

/// An attribute value, as far as kiln's ops need to understand it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Attr {
    /// `array<i64: …>`, `[…]` or an i64 `dense<…>`.
    Ints(Vec<i64>),
    /// `N` or `N : i64`.
    Int(i64),
    /// `true` / `false`.
    Bool(bool),
    /// `#stablehlo<comparison_direction GT>` and bare enum words: the word.
    Enum(String),
    /// `dense<…> : type`.
    Dense(DenseLit, RawType),
    /// `#stablehlo.dot<…>`, `#stablehlo.gather<…>`: named fields.
    Struct(String, Vec<(String, Attr)>),
    /// A string.
    Str(String),
    /// Anything else, as raw text.
    Other(String),
}

/// The type section after `:`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Types {
    /// `(ins) -> outs`.
    Fn(Vec<RawType>, Vec<RawType>),
    /// A bare type list (`T` or `Tpred, T`).
    Short(Vec<RawType>),
}

/// A region: block arguments and statements.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Region<'a> {
    pub args: Vec<(&'a str, RawType)>,
    pub body: Vec<Stmt<'a>>,
}

/// One operation, normalized.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stmt<'a> {
    /// Position of the op name.
    pub pos: usize,
    /// Result names (without `#`), each with its result count.
    pub results: Vec<(&'a str, usize, usize)>,
    /// Full op name, e.g. `stablehlo.add`; `return` for any return.
    pub name: String,
    /// Operand names (with `#N`) and positions.
    pub operands: Vec<(&'a str, usize)>,
    /// Attributes, canonical names.
    pub attrs: Vec<(String, Attr, usize)>,
    /// The region of a reduce.
    pub region: Option<Region<'a>>,
    /// The type section, with its position.
    pub types: Types,
    pub types_pos: usize,
    /// Symbol operand of `util.global.load`.
    pub symbol: Option<(String, usize)>,
    /// Where the statement's text ends (its start is its first result's
    /// position, else `pos`).
    pub end: usize,
}

impl<'a> Stmt<'a> {
    pub fn attr(&self, name: &str) -> Option<(&Attr, usize)> {
        self.attrs
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, a, p)| (a, *p))
    }
}

/// `tensor<2x3xf32>` (any element word; checked later).
pub(crate) fn raw_type(c: &mut Cursor<'_>) -> PResult<RawType> {
    c.ws();
    let pos = c.pos;
    if !c.eat_kw("tensor") {
        return Err(c.err("a tensor type (`tensor<…>`)"));
    }
    if !c.rest().starts_with('<') {
        return Err(c.err("`<`"));
    }
    c.pos += 1;
    let mut shape = Vec::new();
    loop {
        let r = c.rest();
        if r.starts_with(|ch: char| ch.is_ascii_digit()) {
            let n = r.find(|ch: char| !ch.is_ascii_digit()).unwrap_or(r.len());
            let d: usize = r[..n]
                .parse()
                .map_err(|_| c.err_found(c.pos, "a dimension size", format!("`{}`", &r[..n])))?;
            c.pos += n;
            if !c.rest().starts_with('x') {
                return Err(c.err_at(c.pos, "`x` after a dimension"));
            }
            c.pos += 1;
            shape.push(d);
        } else if r.starts_with('?') {
            return Err(c.err_at(c.pos, "a static dimension size"));
        } else {
            break;
        }
    }
    let epos = c.pos;
    let r = c.rest();
    let n = r
        .find(|ch: char| !ch.is_ascii_alphanumeric())
        .unwrap_or(r.len());
    if n == 0 {
        return Err(c.err_at(epos, "an element type"));
    }
    let elem = r[..n].to_string();
    c.pos += n;
    if !c.rest().starts_with('>') {
        return Err(c.err_at(c.pos, "`>` closing the tensor type"));
    }
    c.pos += 1;
    if shape
        .iter()
        .try_fold(1usize, |a: usize, &d| a.checked_mul(d))
        .is_none()
    {
        return Err(c.err_found(
            pos,
            "a tensor type of addressable size",
            "an element count that overflows",
        ));
    }
    Ok(RawType { shape, elem, pos })
}

pub(crate) fn type_list_in_parens(c: &mut Cursor<'_>) -> PResult<Vec<RawType>> {
    c.expect("(")?;
    let mut v = Vec::new();
    if c.eat(")") {
        return Ok(v);
    }
    loop {
        v.push(raw_type(c)?);
        skip_opt_attr_dict(c)?;
        if c.eat(")") {
            return Ok(v);
        }
        c.expect(",")?;
    }
}

/// The type section after `:`.
pub(crate) fn types(c: &mut Cursor<'_>) -> PResult<(Types, usize)> {
    c.ws();
    let pos = c.pos;
    if c.peek("(") {
        let ins = type_list_in_parens(c)?;
        c.expect("->")?;
        let outs = if c.peek("(") {
            type_list_in_parens(c)?
        } else {
            vec![raw_type(c)?]
        };
        return Ok((Types::Fn(ins, outs), pos));
    }
    let mut v = vec![raw_type(c)?];
    while c.eat(",") {
        v.push(raw_type(c)?);
    }
    Ok((Types::Short(v), pos))
}

fn scalar(c: &mut Cursor<'_>) -> PResult<Scalar> {
    if c.eat_kw("true") {
        return Ok(Scalar::Bool(true));
    }
    if c.eat_kw("false") {
        return Ok(Scalar::Bool(false));
    }
    Ok(Scalar::Num(c.num("a number, `true` or `false`")?))
}

fn dense_list(c: &mut Cursor<'_>, depth: usize, out: &mut Vec<Scalar>) -> PResult<Vec<usize>> {
    if depth > 64 {
        return Err(c.err("a dense literal nested at most 64 deep"));
    }
    c.ws();
    let start = c.pos;
    c.expect("[")?;
    let mut inner: Option<Vec<usize>> = None;
    let mut n = 0usize;
    if !c.eat("]") {
        loop {
            c.ws();
            let epos = c.pos;
            let shape = if c.peek("[") {
                dense_list(c, depth + 1, out)?
            } else {
                out.push(scalar(c)?);
                Vec::new()
            };
            match &inner {
                None => inner = Some(shape),
                Some(s) if *s == shape => {}
                Some(s) => {
                    return Err(c.err_found(
                        epos,
                        format!("an element of shape {s:?} like its siblings"),
                        format!("one of shape {shape:?}"),
                    ))
                }
            }
            n += 1;
            if c.eat("]") {
                break;
            }
            if !c.eat(",") {
                return Err(c.err("`,` or `]`"));
            }
        }
    }
    let _ = start;
    let mut shape = vec![n];
    shape.extend(inner.unwrap_or_default());
    Ok(shape)
}

/// `dense<…>` (the `dense` keyword already seen at `c`).
pub(crate) fn dense(c: &mut Cursor<'_>) -> PResult<DenseLit> {
    c.expect_kw("dense")?;
    if !c.rest().starts_with('<') {
        return Err(c.err("`<`"));
    }
    c.pos += 1;
    c.ws();
    let lit = if c.peek("\"") {
        let spos = c.pos;
        let s = c.string()?;
        let hex = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .ok_or_else(|| c.err_found(spos, "a hex string `\"0x…\"`", format!("\"{s}\"")))?;
        if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(c.err_found(spos, "an even number of hex digits", format!("\"{s}\"")));
        }
        let bytes = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0))
            .collect();
        DenseLit::Hex(bytes)
    } else if c.peek("[") {
        let mut vals = Vec::new();
        let shape = dense_list(c, 0, &mut vals)?;
        DenseLit::List(shape, vals)
    } else {
        DenseLit::Splat(scalar(c)?)
    };
    c.expect(">")?;
    Ok(lit)
}

fn int_list_brackets(c: &mut Cursor<'_>) -> PResult<Vec<i64>> {
    c.expect("[")?;
    let mut v = Vec::new();
    if c.eat("]") {
        return Ok(v);
    }
    loop {
        v.push(c.i64("an integer")?);
        if c.eat("]") {
            return Ok(v);
        }
        if !c.eat(",") {
            return Err(c.err("`,` or `]`"));
        }
    }
}

/// An attribute value.
pub(crate) fn attr_value(c: &mut Cursor<'_>) -> PResult<Attr> {
    c.ws();
    if c.peek("array<") {
        return i64_array(c);
    }
    if c.peek_kw("dense") {
        return dense_attr(c);
    }
    if c.peek("#stablehlo<") {
        c.pos += "#stablehlo<".len();
        let _kind = c.ident("an enum kind")?;
        let word = c.ident("an enum value")?;
        c.expect(">")?;
        return Ok(Attr::Enum(word.to_string()));
    }
    if c.peek("#stablehlo.") {
        if let Some(a) = struct_attr(c)? {
            return Ok(a);
        }
    }
    if c.peek("[") {
        let save = c.pos;
        if let Ok(v) = int_list_brackets(c) {
            return Ok(Attr::Ints(v));
        }
        c.pos = save;
    }
    if c.eat_kw("true") {
        return Ok(Attr::Bool(true));
    }
    if c.eat_kw("false") {
        return Ok(Attr::Bool(false));
    }
    if c.peek("\"") {
        return Ok(Attr::Str(c.string()?));
    }
    let r = c.rest();
    if r.starts_with(|ch: char| ch.is_ascii_digit() || ch == '-') {
        return int_attr(c);
    }
    if r.starts_with(|ch: char| ch.is_ascii_uppercase()) {
        let w = c.ident("an enum value")?;
        return Ok(Attr::Enum(w.to_string()));
    }
    Ok(Attr::Other(c.skip_balanced()?.to_string()))
}

/// `array<i64: …>` (at `c`).
fn i64_array(c: &mut Cursor<'_>) -> PResult<Attr> {
    c.pos += "array<".len();
    let elem = c.ident("an element type")?;
    if elem != "i64" {
        c.pos -= elem.len();
        let pos = c.pos;
        return Err(c.err_found(pos, "`i64` array", format!("`{elem}`")));
    }
    let mut v = Vec::new();
    if c.eat(":") {
        loop {
            v.push(c.i64("an integer")?);
            if !c.eat(",") {
                break;
            }
        }
    }
    c.expect(">")?;
    Ok(Attr::Ints(v))
}

/// `dense<…> : type`; integers when the type is an i64 scalar or vector.
fn dense_attr(c: &mut Cursor<'_>) -> PResult<Attr> {
    let lit = dense(c)?;
    c.expect(":")?;
    let ty = raw_type(c)?;
    if ty.elem == "i64" && ty.shape.len() <= 1 {
        if let Some(v) = dense_i64s(&lit, &ty) {
            return Ok(Attr::Ints(v));
        }
    }
    Ok(Attr::Dense(lit, ty))
}

/// The values of an i64 `dense<…>` of type `ty` (rank at most 1), when
/// every one is an integer in range.
fn dense_i64s(lit: &DenseLit, ty: &RawType) -> Option<Vec<i64>> {
    match lit {
        DenseLit::List(_, v) => v
            .iter()
            .map(|s| match s {
                Scalar::Num(Num::Int(i)) => i64::try_from(*i).ok(),
                _ => None,
            })
            .collect(),
        DenseLit::Splat(Scalar::Num(Num::Int(i))) => {
            let n = ty.shape.first().copied().unwrap_or(1);
            i64::try_from(*i).ok().map(|i| vec![i; n])
        }
        _ => None,
    }
}

/// `#stablehlo.NAME<field = ints, …>` (at `c`), or `None` with `c`
/// unmoved when no `<` follows the name.
fn struct_attr(c: &mut Cursor<'_>) -> PResult<Option<Attr>> {
    let save = c.pos;
    c.pos += "#stablehlo.".len();
    let name = c.ident("an attribute name")?.to_string();
    if !c.eat("<") {
        c.pos = save;
        return Ok(None);
    }
    let mut fields = Vec::new();
    if !c.eat(">") {
        loop {
            let key = c.ident("a field name")?.to_string();
            c.expect("=")?;
            let v = if c.peek("[") {
                Attr::Ints(int_list_brackets(c)?)
            } else {
                Attr::Int(c.i64("an integer")?)
            };
            fields.push((key, v));
            if c.eat(">") {
                break;
            }
            c.expect(",")?;
        }
    }
    Ok(Some(Attr::Struct(name, fields)))
}

/// `N` or `N : T` for an integer type `T`.
fn int_attr(c: &mut Cursor<'_>) -> PResult<Attr> {
    let v = c.i64("an integer")?;
    if c.eat(":") {
        let t = c.ident("an integer type")?;
        if !matches!(t, "i64" | "i32" | "ui64" | "ui32" | "index") {
            return Err(c.err("an integer type"));
        }
    }
    Ok(Attr::Int(v))
}

/// `{name = value, …}` into `out`.
pub(crate) fn attr_dict(c: &mut Cursor<'_>, out: &mut Vec<(String, Attr, usize)>) -> PResult<()> {
    c.expect("{")?;
    if c.eat("}") {
        return Ok(());
    }
    loop {
        c.ws();
        let pos = c.pos;
        let key = if c.peek("\"") {
            c.string()?
        } else {
            c.ident("an attribute name")?.to_string()
        };
        let v = if c.eat("=") {
            attr_value(c)?
        } else {
            Attr::Other("unit".into())
        };
        out.push((key, v, pos));
        if c.eat("}") {
            return Ok(());
        }
        if !c.eat(",") {
            return Err(c.err("`,` or `}`"));
        }
    }
}

fn skip_opt_attr_dict(c: &mut Cursor<'_>) -> PResult<()> {
    if c.peek("{") {
        let mut sink = Vec::new();
        attr_dict(c, &mut sink)?;
    }
    Ok(())
}

fn stmt_base<'a>(pos: usize, name: &str) -> Stmt<'a> {
    Stmt {
        pos,
        results: Vec::new(),
        name: name.to_string(),
        operands: Vec::new(),
        attrs: Vec::new(),
        region: None,
        types: Types::Short(Vec::new()),
        types_pos: pos,
        symbol: None,
        end: pos,
    }
}

fn operand<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    let (n, p) = c.ssa()?;
    st.operands.push((n, p));
    Ok(())
}

/// Comma-separated operands (possibly none), stopping before a non-`%` token.
fn operands<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    if !c.peek("%") {
        return Ok(());
    }
    operand(c, st)?;
    while c.peek(",") {
        let save = c.pos;
        c.eat(",");
        if !c.peek("%") {
            c.pos = save;
            break;
        }
        operand(c, st)?;
    }
    Ok(())
}

fn type_section<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    if c.peek("{") {
        attr_dict(c, &mut st.attrs)?;
    }
    c.expect(":")?;
    let (t, p) = types(c)?;
    st.types = t;
    st.types_pos = p;
    Ok(())
}

fn kw_list<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>, kw: &str, attr: &str) -> PResult<()> {
    c.ws();
    let pos = c.pos;
    c.expect_kw(kw)?;
    c.expect("=")?;
    let v = int_list_brackets(c)?;
    st.attrs.push((attr.to_string(), Attr::Ints(v), pos));
    Ok(())
}

fn kw_int<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>, kw: &str, attr: &str) -> PResult<()> {
    c.ws();
    let pos = c.pos;
    c.expect_kw(kw)?;
    c.expect("=")?;
    let v = c.i64("an integer")?;
    st.attrs.push((attr.to_string(), Attr::Int(v), pos));
    Ok(())
}

fn block_arg<'a>(c: &mut Cursor<'a>) -> PResult<(&'a str, RawType)> {
    let (n, _) = c.ssa()?;
    c.expect(":")?;
    let t = raw_type(c)?;
    Ok((n, t))
}

/// Statements up to (and consuming) a closing `}`.
pub(crate) fn block<'a>(c: &mut Cursor<'a>, depth: usize) -> PResult<Vec<Stmt<'a>>> {
    let mut v = Vec::new();
    loop {
        if c.eat("}") {
            return Ok(v);
        }
        if c.at_end() {
            return Err(c.err("`}` closing the block"));
        }
        v.push(stmt(c, depth)?);
    }
}

/// `({ ^bb0(args): stmts })` of the generic form, `(` already seen.
fn generic_region<'a>(c: &mut Cursor<'a>, depth: usize) -> PResult<Region<'a>> {
    c.expect("{")?;
    let mut args = Vec::new();
    if c.peek("^") {
        c.pos += 1;
        c.ident("a block label")?;
        c.expect("(")?;
        if !c.eat(")") {
            loop {
                args.push(block_arg(c)?);
                if c.eat(")") {
                    break;
                }
                c.expect(",")?;
            }
        }
        c.expect(":")?;
    }
    let body = block(c, depth + 1)?;
    c.expect(")")?;
    Ok(Region { args, body })
}

/// The pretty `stablehlo.reduce(%x init: %c), … applies OP | reducer(…) {…}` form.
fn pretty_reduce<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>, depth: usize) -> PResult<()> {
    let mut inits = Vec::new();
    loop {
        c.expect("(")?;
        operand(c, st)?;
        c.expect_kw("init")?;
        c.expect(":")?;
        let (n, p) = c.ssa()?;
        inits.push((n, p));
        c.expect(")")?;
        if !c.eat(",") {
            break;
        }
    }
    st.operands.extend(inits);
    let n = st.operands.len() / 2;
    let mut applies: Option<(String, usize)> = None;
    if c.eat_kw("applies") {
        c.ws();
        let p = c.pos;
        applies = Some((c.ident("a reduction op name")?.to_string(), p));
    }
    c.expect_kw("across")?;
    kw_list(c, st, "dimensions", "dimensions")?;
    type_section(c, st)?;
    if let Some((op, p)) = applies {
        // Synthesize the one-op body: %a, %b -> op(%a, %b).
        let ty = match &st.types {
            Types::Fn(ins, _) if ins.len() == 2 * n => ins[n..].to_vec(),
            _ => return Err(c.err_at(st.types_pos, "`(operand and init types) -> result types`")),
        };
        if n != 1 {
            return Err(c.err_at(p, "`applies` with a single operand"));
        }
        let names: [&'a str; 3] = ["%__a", "%__b", "%__c"];
        let args = vec![(names[0], ty[0].clone()), (names[1], ty[0].clone())];
        let mut body_op = stmt_base(p, &op);
        body_op.results.push((names[2], 1, p));
        body_op.operands = vec![(names[0], p), (names[1], p)];
        body_op.types = Types::Short(vec![ty[0].clone()]);
        let mut ret = stmt_base(p, "return");
        ret.operands = vec![(names[2], p)];
        ret.types = Types::Short(vec![ty[0].clone()]);
        st.region = Some(Region {
            args,
            body: vec![body_op, ret],
        });
        return Ok(());
    }
    c.expect_kw("reducer")?;
    let mut firsts = Vec::new();
    let mut seconds = Vec::new();
    for _ in 0..n {
        c.expect("(")?;
        firsts.push(block_arg(c)?);
        c.expect(",")?;
        seconds.push(block_arg(c)?);
        c.expect(")")?;
    }
    c.expect("{")?;
    let body = block(c, depth + 1)?;
    firsts.extend(seconds);
    st.region = Some(Region { args: firsts, body });
    Ok(())
}

/// `%x [0:4, 2:8:2] : types` of the pretty slice.
fn pretty_slice<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    operand(c, st)?;
    c.ws();
    let pos = c.pos;
    c.expect("[")?;
    let (mut s, mut l, mut k) = (Vec::new(), Vec::new(), Vec::new());
    if !c.eat("]") {
        loop {
            s.push(c.i64("a start index")?);
            c.expect(":")?;
            l.push(c.i64("a limit index")?);
            k.push(if c.eat(":") { c.i64("a stride")? } else { 1 });
            if c.eat("]") {
                break;
            }
            c.expect(",")?;
        }
    }
    st.attrs.push(("start_indices".into(), Attr::Ints(s), pos));
    st.attrs.push(("limit_indices".into(), Attr::Ints(l), pos));
    st.attrs.push(("strides".into(), Attr::Ints(k), pos));
    type_section(c, st)
}

/// `%a, %b, batching_dims = [..] x [..], contracting_dims = [..] x [..] : types`
/// of the pretty `dot_general` (`precision` and `algorithm` skipped).
fn pretty_dot<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    operand(c, st)?;
    c.expect(",")?;
    operand(c, st)?;
    let mut fields = Vec::new();
    let mut pos = c.pos;
    while c.eat(",") {
        c.ws();
        pos = c.pos;
        let key = c.ident("`batching_dims`, `contracting_dims`, `precision` or `algorithm`")?;
        c.expect("=")?;
        match key {
            "batching_dims" | "contracting_dims" => {
                let l = int_list_brackets(c)?;
                c.expect_kw("x")?;
                let r = int_list_brackets(c)?;
                let (lk, rk) = if key == "batching_dims" {
                    ("lhs_batching_dimensions", "rhs_batching_dimensions")
                } else {
                    ("lhs_contracting_dimensions", "rhs_contracting_dimensions")
                };
                fields.push((lk.to_string(), Attr::Ints(l)));
                fields.push((rk.to_string(), Attr::Ints(r)));
            }
            "precision" | "algorithm" => {
                c.skip_balanced()?;
            }
            _ => {
                return Err(c.err_found(
                    pos,
                    "`batching_dims`, `contracting_dims`, `precision` or `algorithm`",
                    format!("`{key}`"),
                ))
            }
        }
    }
    st.attrs.push((
        "dot_dimension_numbers".into(),
        Attr::Struct("dot".into(), fields),
        pos,
    ));
    type_section(c, st)
}

/// One statement: `results = op …` or a return.
pub(crate) fn stmt<'a>(c: &mut Cursor<'a>, depth: usize) -> PResult<Stmt<'a>> {
    if depth > 16 {
        return Err(c.err("regions nested at most 16 deep"));
    }
    c.ws();
    let results = result_names(c)?;
    c.ws();
    let pos = c.pos;
    let mut st = if c.peek("\"") {
        generic_stmt(c, pos, results, depth)?
    } else {
        pretty_stmt(c, pos, results, depth)?
    };
    st.end = c.pos;
    Ok(st)
}

/// The results before `=`, if any: each name (without `#`), its result
/// count (`%N:2`) and its position.
fn result_names<'a>(c: &mut Cursor<'a>) -> PResult<Vec<(&'a str, usize, usize)>> {
    let mut results = Vec::new();
    if !c.peek("%") {
        return Ok(results);
    }
    loop {
        let (n, p) = c.ssa()?;
        if n.contains('#') {
            return Err(c.err_at(p, "a result name without `#`"));
        }
        let count = if c.peek(":") {
            c.pos += 1;
            c.usize("a result count")?
        } else {
            1
        };
        results.push((n, count, p));
        if !c.eat(",") {
            break;
        }
    }
    c.expect("=")?;
    Ok(results)
}

/// The generic form `"op"(operands) <{properties}> ({region}) {attrs} : types`,
/// its op name at `pos`.
fn generic_stmt<'a>(
    c: &mut Cursor<'a>,
    pos: usize,
    results: Vec<(&'a str, usize, usize)>,
    depth: usize,
) -> PResult<Stmt<'a>> {
    let name = c.string()?;
    let mut st = stmt_base(pos, &name);
    st.results = results;
    c.expect("(")?;
    operands(c, &mut st)?;
    c.expect(")")?;
    if st.name == "linalg.generic" {
        // Only kiln's block dequantization is read, and it is read back
        // as text (the graph layer checks it against the printer's);
        // here its properties and region are only skipped.
        c.ws();
        if c.peek("<{") {
            c.skip_group()?;
        }
        c.expect("(")?;
        c.ws();
        if !c.peek("{") {
            return Err(c.err("`{` opening the region of `linalg.generic`"));
        }
        c.skip_group()?;
        c.expect(")")?;
        type_section(c, &mut st)?;
        return Ok(st);
    }
    if c.peek("<{") {
        c.pos += 1;
        attr_dict(c, &mut st.attrs)?;
        c.expect(">")?;
    }
    if c.eat("(") {
        st.region = Some(generic_region(c, depth)?);
    }
    type_section(c, &mut st)?;
    if st.name == "func.return" || st.name == "stablehlo.return" {
        st.name = "return".into();
    }
    Ok(st)
}

/// A pretty form, its op name at `pos`: each op with its own syntax, any
/// other as `op operands : types`.
fn pretty_stmt<'a>(
    c: &mut Cursor<'a>,
    pos: usize,
    results: Vec<(&'a str, usize, usize)>,
    depth: usize,
) -> PResult<Stmt<'a>> {
    let name = c.ident("an operation name")?;
    let name = match name {
        "func.return" | "stablehlo.return" => "return",
        n => n,
    };
    let mut st = stmt_base(pos, name);
    st.results = results;
    match name {
        "return" => pretty_return(c, &mut st)?,
        "stablehlo.constant" => pretty_constant(c, &mut st)?,
        "util.global.load" => global_load(c, &mut st)?,
        "stablehlo.compare" => pretty_compare(c, &mut st)?,
        "stablehlo.broadcast_in_dim" => pretty_dims(c, &mut st, "broadcast_dimensions")?,
        "stablehlo.transpose" => pretty_dims(c, &mut st, "permutation")?,
        "stablehlo.concatenate" => pretty_concatenate(c, &mut st)?,
        "stablehlo.iota" => pretty_iota(c, &mut st)?,
        "stablehlo.slice" => pretty_slice(c, &mut st)?,
        "stablehlo.dot_general" => pretty_dot(c, &mut st)?,
        "stablehlo.reduce" => pretty_reduce(c, &mut st, depth)?,
        _ => plain_form(c, &mut st)?,
    }
    Ok(st)
}

/// `op operands : types`, the form of every op without its own syntax.
fn plain_form<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    operands(c, st)?;
    type_section(c, st)
}

/// `return operands` with an optional `: types`.
fn pretty_return<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    operands(c, st)?;
    if c.peek(":") {
        type_section(c, st)?;
    }
    Ok(())
}

/// `stablehlo.constant {attrs} dense<…> : type`, the literal kept as the
/// `value` attribute.
fn pretty_constant<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    if c.peek("{") {
        attr_dict(c, &mut st.attrs)?;
    }
    c.ws();
    let p = c.pos;
    let lit = dense(c)?;
    c.expect(":")?;
    let (t, tp) = types(c)?;
    let ty = match &t {
        Types::Short(v) if v.len() == 1 => v[0].clone(),
        Types::Fn(i, o) if i.is_empty() && o.len() == 1 => o[0].clone(),
        _ => return Err(c.err_at(tp, "one tensor type")),
    };
    st.attrs.push(("value".into(), Attr::Dense(lit, ty), p));
    st.types = t;
    st.types_pos = tp;
    Ok(())
}

/// `util.global.load [immutable] @sym : type`.
fn global_load<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    c.eat_kw("immutable");
    st.symbol = Some(c.symbol()?);
    type_section(c, st)
}

/// `stablehlo.compare DIR, %a, %b[, TYPE] : types`.
fn pretty_compare<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    c.ws();
    let p = c.pos;
    let dir = c.ident("a comparison direction (`EQ`, `NE`, `LT`, `LE`, `GT`, `GE`)")?;
    st.attrs
        .push(("comparison_direction".into(), Attr::Enum(dir.into()), p));
    c.expect(",")?;
    operand(c, st)?;
    c.expect(",")?;
    operand(c, st)?;
    if c.eat(",") {
        c.ws();
        let p = c.pos;
        let t = c.ident("a comparison type (`FLOAT`, `SIGNED`, `UNSIGNED`, `TOTALORDER`)")?;
        st.attrs
            .push(("compare_type".into(), Attr::Enum(t.into()), p));
    }
    type_section(c, st)
}

/// `%x, dims = [..] : types` of `broadcast_in_dim` and `transpose`, the
/// dims kept as attribute `attr`.
fn pretty_dims<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>, attr: &str) -> PResult<()> {
    operand(c, st)?;
    c.expect(",")?;
    kw_list(c, st, "dims", attr)?;
    type_section(c, st)
}

/// `operands, dim = N : types` of `concatenate`.
fn pretty_concatenate<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    operands(c, st)?;
    c.expect(",")?;
    kw_int(c, st, "dim", "dimension")?;
    type_section(c, st)
}

/// `dim = N : type` of `iota`.
fn pretty_iota<'a>(c: &mut Cursor<'a>, st: &mut Stmt<'a>) -> PResult<()> {
    kw_int(c, st, "dim", "iota_dimension")?;
    type_section(c, st)
}
