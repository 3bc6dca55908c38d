//! The StableHLO printer: one op per line, every attribute in a fixed
//! order, so the same module prints to the same bytes on every run.
//!
//! Simple ops use StableHLO's pretty forms; `slice`, `gather`, `scatter` and `reduce`
//! (and the variadic reduce behind `argmax`) use the generic form, whose
//! meaning does not depend on custom assembly formats.

use crate::graph::{
    BlockCodes, DType, DotDims, Graph, GraphError, Literal, Module, Node, Op, ReduceKind,
    TensorType,
};
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

/// How a parameter slice's byte range starts in a printed module, right
/// after the key: `#flow.parameter.named<"model"::"KEY", {offset = O : i64,
/// length = L : i64}>`. A module's text holds it exactly when the module
/// reads a slice.
pub(crate) const SLICE_OPENS: &str = ", {offset = ";

/// How parameters (weights) appear in the printed module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConstantPolicy {
    /// Every parameter becomes a `util.global` bound to
    /// `#flow.parameter.named<"scope"::"key">` (the default, scope `model`).
    ExternalAlways {
        /// Parameter scope, matched by the runtime's `--parameters=SCOPE=file`.
        scope: String,
    },
    /// Every parameter is inlined as an exact `stablehlo.constant dense<…>`.
    InlineAlways,
    /// Parameters smaller than `bytes` are inlined, larger ones external.
    SizeThreshold {
        /// Inline when the stored size is below this many bytes.
        bytes: u64,
        /// Scope of the external ones.
        scope: String,
    },
}

impl Default for ConstantPolicy {
    fn default() -> Self {
        ConstantPolicy::ExternalAlways {
            scope: "model".into(),
        }
    }
}

impl ConstantPolicy {
    /// Whether a parameter of this type is inlined.
    fn inlines(&self, ty: &TensorType) -> bool {
        match self {
            ConstantPolicy::ExternalAlways { .. } => false,
            ConstantPolicy::InlineAlways => true,
            ConstantPolicy::SizeThreshold { bytes, .. } => (ty.byte_size() as u64) < *bytes,
        }
    }

    fn scope(&self) -> &str {
        match self {
            ConstantPolicy::ExternalAlways { scope }
            | ConstantPolicy::SizeThreshold { scope, .. } => scope,
            ConstantPolicy::InlineAlways => "model",
        }
    }
}

/// A module StableHLO text cannot express, or parameter values the printer
/// cannot inline exactly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrintError {
    /// The module's parameters contradict each other (one key declared
    /// with two types).
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A [`WeightSource`] could not give a parameter's values (a file it
    /// reads failed, say).
    #[error("{source}")]
    Weights {
        /// The parameter's key.
        key: String,
        /// What went wrong in the source.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A module or function name that is not a bare MLIR identifier.
    #[error("{what} name \"{name}\" is not a valid MLIR identifier (letters, digits, _ $ .; not starting with a digit)")]
    InvalidName {
        /// What is named: `module` or `function`.
        what: &'static str,
        /// The name as given.
        name: String,
    },
    /// A function that returns no value.
    #[error("function @{function} returns nothing")]
    NoResults {
        /// The function's name.
        function: String,
    },
    /// A parameter the policy inlines, printed without a weight source.
    #[error("parameter \"{key}\" is to be inlined but no weights were given")]
    NoWeights {
        /// The parameter's key.
        key: String,
    },
    /// A weight source without values for a parameter.
    #[error("no values for parameter \"{key}\"")]
    MissingValues {
        /// The parameter's key.
        key: String,
    },
    /// A weight source with another number of values than the parameter
    /// has elements.
    #[error("parameter \"{key}\": {count} values for {ty}")]
    ValueCount {
        /// The parameter's key.
        key: String,
        /// How many values the source gave.
        count: usize,
        /// The parameter's type.
        ty: TensorType,
    },
    /// A parameter value its dtype cannot hold exactly.
    #[error("parameter \"{key}\": value {value} is not exact in {ty}")]
    InexactValue {
        /// The parameter's key.
        key: String,
        /// The first value that is not exact.
        value: f64,
        /// The parameter's type.
        ty: TensorType,
    },
}

/// Result of the printer.
pub type Result<T, E = PrintError> = std::result::Result<T, E>;

impl PrintError {
    /// [`PrintError::Weights`]: the source's error `source` for parameter
    /// `key`.
    pub fn weights(
        key: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        PrintError::Weights {
            key: key.into(),
            source: source.into(),
        }
    }
}

/// Printer options.
#[derive(Debug, Clone, Default)]
pub struct PrintOptions {
    /// How parameters are materialized.
    pub constants: ConstantPolicy,
}

/// Where inlined parameter values come from.
pub trait WeightSource {
    /// The values of parameter `key` (row-major, `ty.numel()` of them),
    /// exact in `ty.dtype`. A source's own failures come back as
    /// [`PrintError::weights`].
    fn values(&self, key: &str, ty: &TensorType) -> Result<Vec<f64>>;
}

impl WeightSource for HashMap<String, Vec<f64>> {
    fn values(&self, key: &str, ty: &TensorType) -> Result<Vec<f64>> {
        let v = self.get(key).ok_or_else(|| PrintError::MissingValues {
            key: key.to_string(),
        })?;
        if v.len() != ty.numel() {
            return Err(PrintError::ValueCount {
                key: key.to_string(),
                count: v.len(),
                ty: ty.clone(),
            });
        }
        Ok(v.clone())
    }
}

/// `name` as a bare MLIR identifier: `[A-Za-z0-9_]` kept, anything else
/// becomes `_`; `prefix` is put in front when it would be empty or start
/// with a digit.
pub fn sanitize_identifier(name: &str, prefix: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert_str(0, prefix);
    }
    s
}

/// A symbol name for a parameter key: [`sanitize_identifier`] with a `p_`
/// prefix. Not injective by itself: [`Module::print`] appends `_N` on a clash.
pub fn sanitize_symbol(key: &str) -> String {
    sanitize_identifier(key, "p_")
}

/// Escapes a string for an MLIR string literal: printable ASCII stays,
/// `"` and `\` and every other byte become `\XX` hex escapes.
pub fn escape_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b as char);
        } else {
            let _ = write!(out, "\\{b:02X}");
        }
    }
    out
}

fn float_bits_hex(x: f64, dtype: DType) -> String {
    match dtype {
        DType::BF16 => format!("0x{:04X}", half::bf16::from_f64(x).to_bits()),
        DType::F16 => format!("0x{:04X}", half::f16::from_f64(x).to_bits()),
        _ => format!("0x{:08X}", (x as f32).to_bits()),
    }
}

/// An exact MLIR float literal for `x` in `dtype`: the shortest decimal
/// that reads back to the same bits (MLIR parses decimals as f64, then
/// rounds), else the hex bit pattern (always for NaN and ±inf).
pub fn format_float(x: f64, dtype: DType) -> String {
    if !x.is_finite() {
        return float_bits_hex(x, dtype);
    }
    let f = x as f32;
    let mut s = format!("{f:?}");
    if let Some(e) = s.find('e') {
        if !s[..e].contains('.') {
            s.insert_str(e, ".0");
        }
    }
    let back: f64 = s.parse().unwrap_or(f64::NAN);
    let same = match dtype {
        DType::BF16 => half::bf16::from_f64(back).to_bits() == half::bf16::from_f64(x).to_bits(),
        DType::F16 => half::f16::from_f64(back).to_bits() == half::f16::from_f64(x).to_bits(),
        _ => (back as f32).to_bits() == f.to_bits(),
    };
    if same {
        s
    } else {
        float_bits_hex(x, dtype)
    }
}

/// One element of a `dense<…>` literal in `dtype`.
pub fn format_literal_value(x: f64, dtype: DType) -> String {
    match dtype {
        DType::I1 => (if x != 0.0 { "true" } else { "false" }).to_string(),
        DType::I32 | DType::I16 | DType::I8 | DType::I4 => format!("{}", x as i64),
        _ => format_float(x, dtype),
    }
}

fn dense_text(values: &[f64], ty: &TensorType) -> String {
    fn rec(out: &mut String, vals: &[f64], shape: &[usize], dtype: DType) {
        if shape.is_empty() {
            out.push_str(&format_literal_value(vals[0], dtype));
            return;
        }
        let inner: usize = shape[1..].iter().product();
        out.push('[');
        for i in 0..shape[0] {
            if i > 0 {
                out.push_str(", ");
            }
            rec(out, &vals[i * inner..(i + 1) * inner], &shape[1..], dtype);
        }
        out.push(']');
    }
    let mut out = String::new();
    rec(&mut out, values, &ty.shape, ty.dtype);
    out
}

fn list(xs: &[usize]) -> String {
    xs.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn i64_array(xs: &[usize]) -> String {
    if xs.is_empty() {
        "array<i64>".to_string()
    } else {
        format!("array<i64: {}>", list(xs))
    }
}

fn compare_type(dtype: DType) -> &'static str {
    match dtype {
        DType::I32 | DType::I16 | DType::I8 | DType::I4 => "SIGNED",
        DType::I1 => "UNSIGNED",
        _ => "FLOAT",
    }
}

fn check_identifier(what: &'static str, name: &str) -> Result<()> {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_$.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(PrintError::InvalidName {
            what,
            name: name.to_string(),
        })
    }
}

/// Where each parameter declaration (key, offset) goes: a global symbol,
/// or inline.
struct ParamPlan {
    symbols: HashMap<(String, Option<u64>), String>,
}

impl Module {
    /// Prints the module as StableHLO text with `opts` (`{}` prints it
    /// with the default options). `weights` supplies values for parameters
    /// the policy inlines (an error if it is needed and absent).
    pub fn print(&self, opts: &PrintOptions, weights: Option<&dyn WeightSource>) -> Result<String> {
        print_module(self, opts, weights)
    }
}

/// [`Module::print`].
pub(crate) fn print_module(
    module: &Module,
    opts: &PrintOptions,
    weights: Option<&dyn WeightSource>,
) -> Result<String> {
    check_identifier("module", &module.name)?;
    let params = module.parameters()?;
    let policy = &opts.constants;
    let mut out = String::new();
    let _ = write!(out, "module @{}", module.name);
    if !module.attributes.is_empty() {
        let attrs: Vec<String> = module
            .attributes
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect();
        let _ = write!(out, " attributes {{{}}}", attrs.join(", "));
    }
    out.push_str(" {\n");

    let mut plan = ParamPlan {
        symbols: HashMap::new(),
    };
    let mut taken: HashSet<String> = module.functions.iter().map(|f| f.name.clone()).collect();
    for d in &params {
        if d.offset.is_none() && policy.inlines(&d.ty) {
            continue;
        }
        let base = match d.offset {
            None => sanitize_symbol(&d.key),
            Some(o) => format!("{}_at{o}", sanitize_symbol(&d.key)),
        };
        let mut sym = base.clone();
        let mut n = 1;
        while taken.contains(&sym) {
            sym = format!("{base}_{n}");
            n += 1;
        }
        taken.insert(sym.clone());
        // A part of an entry names its byte range (IREE's parameter slice).
        let part = match d.offset {
            None => String::new(),
            Some(o) => format!(
                "{SLICE_OPENS}{o} : i64, length = {} : i64}}",
                d.ty.byte_size()
            ),
        };
        let _ = writeln!(
            out,
            "  util.global private @{sym} = #flow.parameter.named<\"{}\"::\"{}\"{part}> : {}",
            escape_string(policy.scope()),
            escape_string(&d.key),
            d.ty
        );
        plan.symbols.insert((d.key.clone(), d.offset), sym);
    }
    for f in &module.functions {
        print_function(&mut out, f, &plan, weights)?;
    }
    out.push_str("}\n");
    Ok(out)
}

fn print_function(
    out: &mut String,
    g: &Graph,
    plan: &ParamPlan,
    weights: Option<&dyn WeightSource>,
) -> Result<()> {
    check_function(g)?;
    let names = g.ssa_names();
    let rets: Vec<String> = g.outputs().iter().map(|&v| g.ty(v).to_string()).collect();
    print_signature(out, g, &names, &rets);
    for (n, res) in g.nodes().iter().zip(&names) {
        let node = NodeText {
            g,
            names: &names,
            n,
            res,
        };
        if let Some(line) = node.line(plan, weights)? {
            let _ = writeln!(out, "    {line}");
        }
    }
    let outs: Vec<&str> = g
        .outputs()
        .iter()
        .map(|&v| names[v.index()].as_str())
        .collect();
    let _ = writeln!(out, "    return {} : {}", outs.join(", "), rets.join(", "));
    out.push_str("  }\n");
    Ok(())
}

/// `{}` prints the module as [`Module::print`] does with the default
/// [`PrintOptions`] (every parameter an external `util.global` of scope
/// `model`), so `println!("{module}")` shows it while debugging. A module
/// the printer rejects prints as one `//` line naming the error.
impl std::fmt::Display for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match print_module(self, &PrintOptions::default(), None) {
            Ok(text) => f.write_str(&text),
            Err(e) => writeln!(f, "// module @{} cannot be printed: {e}", self.name),
        }
    }
}

/// `{}` prints the function as a module of its own, named after it, with
/// the default [`PrintOptions`] (see [`Module`]'s `Display`). A function
/// the printer rejects, e.g. one whose outputs are not set yet, prints as
/// one `//` line naming the error.
impl std::fmt::Display for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let module = Module {
            name: self.name.clone(),
            attributes: Vec::new(),
            functions: vec![self.clone()],
        };
        match print_module(&module, &PrintOptions::default(), None) {
            Ok(text) => f.write_str(&text),
            Err(e) => writeln!(f, "// function @{} cannot be printed: {e}", self.name),
        }
    }
}

/// Rejects a function StableHLO text cannot express: a bad name, no
/// results, or an output storage that does not fit.
fn check_function(g: &Graph) -> Result<()> {
    check_identifier("function", &g.name)?;
    if g.outputs().is_empty() {
        return Err(PrintError::NoResults {
            function: g.name.clone(),
        });
    }
    // Output storages need no check: only the builder's checked
    // `store_output_in_input` sets them.
    Ok(())
}

/// `  func.func @name(args) -> results {`, each argument with the result
/// stored in it, if any.
fn print_signature(out: &mut String, g: &Graph, names: &[String], rets: &[String]) {
    let args: Vec<String> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(pos, &v)| match g.output_stored_in(pos) {
            Some(r) => format!(
                "{}: {} {{iree.abi.output = {r} : index}}",
                names[v.index()],
                g.ty(v)
            ),
            None => format!("{}: {}", names[v.index()], g.ty(v)),
        })
        .collect();
    let ret_sig = if rets.len() == 1 {
        rets[0].clone()
    } else {
        format!("({})", rets.join(", "))
    };
    let _ = writeln!(
        out,
        "  func.func @{}({}) -> {} {{",
        g.name,
        args.join(", "),
        ret_sig
    );
}

/// The SSA name of the `tensor.empty` a [`Op::DequantizeBlocks`] named
/// `res` writes into.
pub(crate) fn dequantize_init_name(res: &str) -> String {
    format!("{}_init", dequantize_prefix(res))
}

/// The prefix of the names a [`Op::DequantizeBlocks`] named `res` defines
/// (`%dqN` for `%N`).
pub(crate) fn dequantize_prefix(res: &str) -> String {
    format!("%dq{}", &res[1..])
}

/// A [`Op::DequantizeBlocks`] as one `linalg.generic` in MLIR's generic
/// form (its body in arith's pretty form, its names `%dqN_…` after the
/// result `%N`): result `res`, init `init`, operands `args` of types
/// `tys`, result type `t`. The parser reads back exactly this text.
pub(crate) fn dequantize_blocks_text(
    res: &str,
    init: &str,
    args: &[&str],
    tys: &[&TensorType],
    t: &TensorType,
    form: &BlockCodes,
) -> String {
    let rank = t.rank();
    let dims: Vec<String> = (0..rank).map(|d| format!("d{d}")).collect();
    let last = rank - 1;
    let map = |div: usize| {
        let mut outs = dims[..last].to_vec();
        outs.push(if div == 1 {
            dims[last].clone()
        } else {
            format!("{} floordiv {div}", dims[last])
        });
        format!("affine_map<({}) -> ({})>", dims.join(", "), outs.join(", "))
    };
    let per_word = |bits: u32| (32 / bits) as usize;
    let mut maps = vec![map(per_word(form.low_bits))];
    if form.high_bits > 0 {
        maps.push(map(per_word(form.high_bits)));
    }
    maps.push(map(form.group));
    if form.has_min {
        maps.push(map(form.group));
    }
    maps.push(map(1));
    let iterators = vec!["#linalg.iterator_type<parallel>"; rank].join(", ");
    let p = dequantize_prefix(res);
    let mut block_args = vec![format!("{p}_w: i32")];
    if form.high_bits > 0 {
        block_args.push(format!("{p}_h: i32"));
    }
    block_args.push(format!("{p}_s: f32"));
    if form.has_min {
        block_args.push(format!("{p}_m: f32"));
    }
    block_args.push(format!("{p}_o: f32"));
    let mut body = vec![format!("{p}_k = linalg.index {last} : index")];
    // Field `k mod n` of word `w`: `(w >> bits·(k mod n)) & (2^bits − 1)`.
    let field = |body: &mut Vec<String>, x: &str, word: &str, bits: u32| {
        let n = per_word(bits);
        let mask = (1u64 << bits) - 1;
        body.extend([
            format!("{p}_{x}n = arith.constant {n} : index"),
            format!("{p}_{x}j = arith.remui {p}_k, {p}_{x}n : index"),
            format!("{p}_{x}i = arith.index_cast {p}_{x}j : index to i32"),
            format!("{p}_{x}b = arith.constant {bits} : i32"),
            format!("{p}_{x}s = arith.muli {p}_{x}i, {p}_{x}b : i32"),
            format!("{p}_{x}w = arith.shrui {word}, {p}_{x}s : i32"),
            format!("{p}_{x}m = arith.constant {mask} : i32"),
            format!("{p}_{x}c = arith.andi {p}_{x}w, {p}_{x}m : i32"),
        ]);
    };
    field(&mut body, "l", &format!("{p}_w"), form.low_bits);
    let mut code = format!("{p}_lc");
    if form.high_bits > 0 {
        field(&mut body, "h", &format!("{p}_h"), form.high_bits);
        body.push(format!("{p}_hu = arith.shli {p}_hc, {p}_lb : i32"));
        body.push(format!("{p}_c = arith.addi {p}_lc, {p}_hu : i32"));
        code = format!("{p}_c");
    }
    body.push(format!("{p}_f = arith.sitofp {code} : i32 to f32"));
    let mut x = format!("{p}_f");
    if form.zero != 0 {
        let z = format_float(form.zero as f64, DType::F32);
        body.push(format!("{p}_z = arith.constant {z} : f32"));
        body.push(format!("{p}_fz = arith.subf {x}, {p}_z : f32"));
        x = format!("{p}_fz");
    }
    body.push(format!("{p}_x = arith.mulf {x}, {p}_s : f32"));
    x = format!("{p}_x");
    if form.has_min {
        body.push(format!("{p}_y = arith.addf {x}, {p}_m : f32"));
        x = format!("{p}_y");
    }
    body.push(format!("linalg.yield {x} : f32"));
    let types: Vec<String> = tys.iter().map(|t| t.to_string()).collect();
    format!(
        "{res} = \"linalg.generic\"({}, {init}) <{{indexing_maps = [{}], iterator_types = [{iterators}], operandSegmentSizes = array<i32: {}, 1>}}> ({{\n    ^bb0({}):\n      {}\n    }}) : ({}, {t}) -> {t}",
        args.join(", "),
        maps.join(", "),
        args.len(),
        block_args.join(", "),
        body.join("\n      "),
        types.join(", ")
    )
}

/// One node of a function being printed, with the function's SSA names.
struct NodeText<'g> {
    g: &'g Graph,
    names: &'g [String],
    n: &'g Node,
    /// The node's own SSA name.
    res: &'g str,
}

impl NodeText<'_> {
    /// Operand `k`'s name.
    fn a(&self, k: usize) -> &str {
        self.names[self.n.args[k].index()].as_str()
    }

    /// Operand `k`'s type.
    fn ta(&self, k: usize) -> &TensorType {
        self.g.ty(self.n.args[k])
    }

    /// Every operand's name, comma-separated.
    fn all_names(&self) -> String {
        (0..self.n.args.len())
            .map(|k| self.a(k))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Every operand's type, comma-separated.
    fn all_types(&self) -> String {
        (0..self.n.args.len())
            .map(|k| self.ta(k).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The node's line (without indent), or `None` for an argument.
    fn line(&self, plan: &ParamPlan, weights: Option<&dyn WeightSource>) -> Result<Option<String>> {
        let (res, t) = (self.res, &self.n.ty);
        let a = |k: usize| self.a(k);
        let ta = |k: usize| self.ta(k);
        let line = match &self.n.op {
            Op::Input { .. } => return Ok(None),
            Op::Parameter { key, offset } => self.parameter(key, *offset, plan, weights)?,
            Op::Constant(Literal::Splat(x)) => format!(
                "{res} = stablehlo.constant dense<{}> : {t}",
                format_literal_value(*x, t.dtype)
            ),
            Op::Constant(Literal::Dense(vals)) => {
                format!(
                    "{res} = stablehlo.constant dense<{}> : {t}",
                    dense_text(vals, t)
                )
            }
            Op::Convert => format!("{res} = stablehlo.convert {} : ({}) -> {t}", a(0), ta(0)),
            Op::BitcastConvert => format!(
                "{res} = stablehlo.bitcast_convert {} : ({}) -> {t}",
                a(0),
                ta(0)
            ),
            Op::ShiftLeft => format!("{res} = stablehlo.shift_left {}, {} : {t}", a(0), a(1)),
            Op::ShiftRightLogical => format!(
                "{res} = stablehlo.shift_right_logical {}, {} : {t}",
                a(0),
                a(1)
            ),
            Op::BitwiseAnd => format!("{res} = stablehlo.and {}, {} : {t}", a(0), a(1)),
            Op::OptimizationBarrier => {
                format!("{res} = stablehlo.optimization_barrier {} : {t}", a(0))
            }
            Op::Binary(b) => format!("{res} = stablehlo.{} {}, {} : {t}", b.name(), a(0), a(1)),
            Op::Unary(u) => format!("{res} = stablehlo.{} {} : {t}", u.name(), a(0)),
            Op::Compare(dir) => format!(
                "{res} = stablehlo.compare {}, {}, {}, {} : ({}, {}) -> {t}",
                dir.name(),
                a(0),
                a(1),
                compare_type(ta(0).dtype),
                ta(0),
                ta(1)
            ),
            Op::Select => format!(
                "{res} = stablehlo.select {}, {}, {} : {}, {t}",
                a(0),
                a(1),
                a(2),
                ta(0)
            ),
            Op::BroadcastInDim { dims } => format!(
                "{res} = stablehlo.broadcast_in_dim {}, dims = [{}] : ({}) -> {t}",
                a(0),
                list(dims),
                ta(0)
            ),
            Op::Reshape => format!("{res} = stablehlo.reshape {} : ({}) -> {t}", a(0), ta(0)),
            Op::Transpose { perm } => format!(
                "{res} = stablehlo.transpose {}, dims = [{}] : ({}) -> {t}",
                a(0),
                list(perm),
                ta(0)
            ),
            Op::Slice {
                start,
                limit,
                strides,
            } => self.slice(start, limit, strides),
            Op::DynamicUpdateSlice => format!(
                "{res} = stablehlo.dynamic_update_slice {} : ({}) -> {t}",
                self.all_names(),
                self.all_types()
            ),
            Op::Concatenate { dim } => format!(
                "{res} = stablehlo.concatenate {}, dim = {dim} : ({}) -> {t}",
                self.all_names(),
                self.all_types()
            ),
            Op::Iota { dim } => format!("{res} = stablehlo.iota dim = {dim} : {t}"),
            Op::DotGeneral(d) => self.dot_general(d),
            Op::Reduce { kind, dims } => self.reduce(*kind, dims),
            Op::GatherRows => self.gather_rows(),
            Op::ScatterRows => self.scatter_rows(),
            Op::Argmax { dim } => self.argmax(*dim),
            Op::DequantizeBlocks(form) => {
                let init = dequantize_init_name(res);
                let args: Vec<&str> = (0..self.n.args.len()).map(a).collect();
                let tys: Vec<&TensorType> = (0..self.n.args.len()).map(ta).collect();
                format!(
                    "{init} = \"tensor.empty\"() : () -> {t}\n    {}",
                    dequantize_blocks_text(res, &init, &args, &tys, t, form)
                )
            }
        };
        Ok(Some(line))
    }

    /// A parameter: a load of its global, or its values inlined.
    fn parameter(
        &self,
        key: &str,
        offset: Option<u64>,
        plan: &ParamPlan,
        weights: Option<&dyn WeightSource>,
    ) -> Result<String> {
        let (res, t) = (self.res, &self.n.ty);
        if let Some(sym) = plan.symbols.get(&(key.to_string(), offset)) {
            return Ok(format!("{res} = util.global.load @{sym} : {t}"));
        }
        let w = weights.ok_or_else(|| PrintError::NoWeights {
            key: key.to_string(),
        })?;
        let vals = w.values(key, t)?;
        if let Some(&bad) = vals
            .iter()
            .find(|&&x| Graph::check_literal(t.dtype, x).is_err())
        {
            return Err(PrintError::InexactValue {
                key: key.to_string(),
                value: bad,
                ty: t.clone(),
            });
        }
        Ok(format!(
            "{res} = stablehlo.constant dense<{}> : {t}",
            dense_text(&vals, t)
        ))
    }

    /// `slice` in the generic form.
    fn slice(&self, start: &[usize], limit: &[usize], strides: &[usize]) -> String {
        let (res, t) = (self.res, &self.n.ty);
        format!(
            "{res} = \"stablehlo.slice\"({}) {{start_indices = {}, limit_indices = {}, strides = {}}} : ({}) -> {t}",
            self.a(0),
            i64_array(start),
            i64_array(limit),
            i64_array(strides),
            self.ta(0)
        )
    }

    /// `dot_general`, its batching dims only when there are some.
    fn dot_general(&self, d: &DotDims) -> String {
        let batching = if d.lhs_batch.is_empty() {
            String::new()
        } else {
            format!(
                ", batching_dims = [{}] x [{}]",
                list(&d.lhs_batch),
                list(&d.rhs_batch)
            )
        };
        let (res, t) = (self.res, &self.n.ty);
        format!(
            "{res} = stablehlo.dot_general {}, {}{batching}, contracting_dims = [{}] x [{}] : ({}, {}) -> {t}",
            self.a(0),
            self.a(1),
            list(&d.lhs_contract),
            list(&d.rhs_contract),
            self.ta(0),
            self.ta(1)
        )
    }

    /// A one-operand `reduce` in the generic form, its body one op.
    fn reduce(&self, kind: ReduceKind, dims: &[usize]) -> String {
        let (res, t) = (self.res, &self.n.ty);
        let s = TensorType::scalar(t.dtype);
        let r = format!("%r{}", &res[1..]);
        format!(
            "{res} = \"stablehlo.reduce\"({}, {}) ({{\n    ^bb0({r}_a: {s}, {r}_b: {s}):\n      {r}_c = stablehlo.{} {r}_a, {r}_b : {s}\n      stablehlo.return {r}_c : {s}\n    }}) {{dimensions = {}}} : ({}, {}) -> {t}",
            self.a(0),
            self.a(1),
            kind.body_op(),
            i64_array(dims),
            self.ta(0),
            self.ta(1)
        )
    }

    /// A row gather in the generic form.
    fn gather_rows(&self) -> String {
        let k = self.ta(1).rank();
        let d = self.ta(0).shape[1];
        let (res, t) = (self.res, &self.n.ty);
        format!(
            "{res} = \"stablehlo.gather\"({}, {}) {{dimension_numbers = #stablehlo.gather<offset_dims = [{k}], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = {k}>, slice_sizes = array<i64: 1, {d}>, indices_are_sorted = false}} : ({}, {}) -> {t}",
            self.a(0),
            self.a(1),
            self.ta(0),
            self.ta(1)
        )
    }

    /// A row scatter in the generic form, its body returning the update.
    fn scatter_rows(&self) -> String {
        let (res, t) = (self.res, &self.n.ty);
        let k = t.rank() - 1;
        let s = TensorType::scalar(t.dtype);
        let r = format!("%r{}", &res[1..]);
        let firsts = list(&(0..k).collect::<Vec<_>>());
        format!(
            "{res} = \"stablehlo.scatter\"({}, {}, {}) ({{\n    ^bb0({r}_a: {s}, {r}_b: {s}):\n      stablehlo.return {r}_b : {s}\n    }}) {{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [{}], scatter_dims_to_operand_dims = [{}], index_vector_dim = 1>, unique_indices = true}} : ({}, {}, {}) -> {t}",
            self.a(0),
            self.a(1),
            self.a(2),
            firsts,
            firsts,
            self.ta(0),
            self.ta(1),
            self.ta(2)
        )
    }

    /// An argmax: the variadic reduce of (values, iota, -inf, 0) whose
    /// comparator keeps the lowest index on ties.
    fn argmax(&self, dim: usize) -> String {
        let a = |k: usize| self.a(k);
        let ta = |k: usize| self.ta(k);
        let t = &self.n.ty;
        let base = self.res.trim_end_matches("#1");
        let r = format!("%r{}", &base[1..]);
        let vs = TensorType::scalar(ta(0).dtype);
        let is = TensorType::scalar(DType::I32);
        let b = TensorType::scalar(DType::I1);
        let vt = t.with_dtype(ta(0).dtype);
        format!(
            "{base}:2 = \"stablehlo.reduce\"({}, {}, {}, {}) ({{\n    ^bb0({r}_av: {vs}, {r}_ai: {is}, {r}_bv: {vs}, {r}_bi: {is}):\n      {r}_gt = stablehlo.compare GT, {r}_av, {r}_bv, FLOAT : ({vs}, {vs}) -> {b}\n      {r}_eq = stablehlo.compare EQ, {r}_av, {r}_bv, FLOAT : ({vs}, {vs}) -> {b}\n      {r}_lt = stablehlo.compare LT, {r}_ai, {r}_bi, SIGNED : ({is}, {is}) -> {b}\n      {r}_tie = stablehlo.and {r}_eq, {r}_lt : {b}\n      {r}_pick = stablehlo.or {r}_gt, {r}_tie : {b}\n      {r}_v = stablehlo.select {r}_pick, {r}_av, {r}_bv : {b}, {vs}\n      {r}_i = stablehlo.select {r}_pick, {r}_ai, {r}_bi : {b}, {is}\n      stablehlo.return {r}_v, {r}_i : {vs}, {is}\n    }}) {{dimensions = array<i64: {dim}>}} : ({}, {}, {}, {}) -> ({vt}, {t})",
            a(0),
            a(1),
            a(2),
            a(3),
            ta(0),
            ta(1),
            ta(2),
            ta(3)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Module {
        let mut g = Graph::new("f");
        let x = g.input(TensorType::new(DType::F32, &[2, 3]));
        let w = g
            .parameter("w", TensorType::new(DType::F32, &[4, 3]))
            .unwrap();
        let y = g.linear(x, w).unwrap();
        g.set_outputs(&[y]);
        let mut m = Module::new("m");
        m.functions.push(g);
        m
    }

    #[test]
    fn display_is_print_module_with_default_options() {
        let m = tiny();
        let printed = print_module(&m, &PrintOptions::default(), None).unwrap();
        assert_eq!(m.to_string(), printed);
        assert!(printed.contains("#flow.parameter.named<\"model\"::\"w\">"));
    }

    #[test]
    fn a_graph_displays_as_a_module_of_its_own() {
        let g = tiny().functions.remove(0);
        let mut alone = Module::new("f");
        alone.functions.push(g.clone());
        let text = format!("{g}");
        assert!(text.starts_with("module @f {\n"), "{text}");
        assert_eq!(
            text,
            print_module(&alone, &PrintOptions::default(), None).unwrap()
        );
    }

    #[test]
    fn an_unprintable_module_displays_its_error() {
        let mut g = Graph::new("f");
        g.input(TensorType::scalar(DType::F32));
        assert_eq!(
            g.to_string(),
            "// function @f cannot be printed: function @f returns nothing\n"
        );
        let bad = Module::new("not a name");
        assert!(bad
            .to_string()
            .starts_with("// module @not a name cannot be printed: "));
    }
}
