//! The StableHLO parser: text → [`Module`], the inverse of the printer.
//!
//! It accepts everything [`Module::print`] emits plus the
//! equivalent generic and pretty spellings used by StableHLO's and IREE's
//! own tests, and rebuilds the graph node by node through the graph builder,
//! so the types a line states are checked against the types the builder
//! infers. Printing the parsed module reproduces printer output byte for
//! byte; a non-canonical spelling prints in canonical form.
//!
//! ```
//! use kiln::graph::Module;
//! use kiln::stablehlo::PrintOptions;
//! let text = "module @m {\n  func.func @f(%arg0: tensor<2xf32>) -> tensor<2xf32> {\n    %0 = stablehlo.add %arg0, %arg0 : tensor<2xf32>\n    return %0 : tensor<2xf32>\n  }\n}\n";
//! let m = Module::parse(text).unwrap();
//! assert_eq!(m.print(&PrintOptions::default(), None).unwrap(), text);
//! ```

mod body;
mod build;
mod cursor;
mod literal;
mod syntax;

use crate::graph::{Literal, Module, TensorType};
use crate::stablehlo::ParseError;
use cursor::{Cursor, PResult};
use std::collections::HashMap;

/// A parsed module plus what the text said about parameter scopes.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedModule {
    /// The module.
    pub module: Module,
    /// Scope of the first `#flow.parameter.named` global, if any.
    pub scope: Option<String>,
}

impl ParsedModule {
    /// Printer options that reproduce the parsed text's parameter scope.
    pub fn print_options(&self) -> super::PrintOptions {
        super::PrintOptions {
            constants: super::ConstantPolicy::ExternalAlways {
                scope: self.scope.clone().unwrap_or_else(|| "model".into()),
            },
        }
    }
}

/// What a `util.global` is bound to.
#[derive(Debug, Clone)]
pub(crate) enum Global {
    /// An external parameter: the whole entry, or the part from a byte
    /// offset as long as the type.
    Param {
        key: String,
        offset: Option<u64>,
        ty: TensorType,
    },
    /// An inline constant.
    Const { lit: Literal, ty: TensorType },
}

impl Module {
    /// Parses StableHLO text into a module (the inverse of
    /// [`Module::print`]).
    pub fn parse(text: &str) -> Result<Module, ParseError> {
        parse_module_full(text).map(|p| p.module)
    }
}

impl ParsedModule {
    /// Parses StableHLO text into a module, keeping the parameter scope
    /// ([`Module::parse`] keeps the module only).
    pub fn parse(text: &str) -> Result<ParsedModule, ParseError> {
        parse_module_full(text)
    }
}

/// [`ParsedModule::parse`].
pub(crate) fn parse_module_full(text: &str) -> Result<ParsedModule, ParseError> {
    let mut c = Cursor::new(text);
    let mut module = Module::new("module");
    let mut globals: HashMap<String, Global> = HashMap::new();
    let mut scope = None;
    let wrapped = c.eat_kw("module");
    if wrapped {
        if c.peek("@") {
            module.name = c.symbol()?.0;
        }
        if c.eat_kw("attributes") {
            module.attributes = module_attributes(&mut c)?;
        }
        c.expect("{")?;
    }
    loop {
        if wrapped && c.eat("}") {
            if !c.at_end() {
                return Err(c.err("end of input after the module"));
            }
            break;
        }
        if !wrapped && c.at_end() {
            break;
        }
        if c.at_end() {
            return Err(c.err("`}` closing the module"));
        }
        if c.peek_kw("util.global") {
            let at = c.pos;
            let (sym, g, s) = global(&mut c)?;
            if scope.is_none() {
                scope = s;
            }
            // iree-compile refuses a redefined symbol: so does kiln.
            if globals.contains_key(&sym) {
                return Err(c.err_found(at, "distinct global names", format!("a second @{sym}")));
            }
            globals.insert(sym, g);
        } else if c.peek_kw("func.func") {
            let f = build::function(&mut c, &globals)?;
            if module.functions.iter().any(|g| g.name == f.name) {
                return Err(c.err_found(
                    c.pos,
                    "distinct function names",
                    format!("a second @{}", f.name),
                ));
            }
            module.functions.push(f);
        } else {
            return Err(c.err("`util.global` or `func.func`"));
        }
    }
    if module.functions.is_empty() {
        return Err(c.err("at least one `func.func`"));
    }
    if let Err(e) = module.parameters() {
        return Err(c.err_found(0, "one type per parameter key", e.to_string()));
    }
    Ok(ParsedModule { module, scope })
}

/// `{key = value, …}` kept as raw text pairs.
fn module_attributes(c: &mut Cursor<'_>) -> PResult<Vec<(String, String)>> {
    c.expect("{")?;
    let mut out = Vec::new();
    if c.eat("}") {
        return Ok(out);
    }
    loop {
        c.ws();
        let start = c.pos;
        let key = if c.peek("\"") {
            c.string()?;
            c.src[start..c.pos].to_string()
        } else {
            c.ident("an attribute name")?.to_string()
        };
        let value = if c.eat("=") {
            c.skip_balanced()?.to_string()
        } else {
            "unit".to_string()
        };
        out.push((key, value));
        if c.eat("}") {
            return Ok(out);
        }
        if !c.eat(",") {
            return Err(c.err("`,` or `}`"));
        }
    }
}

/// `util.global private @sym = #flow.parameter.named<"scope"::"key"> : type`.
fn global(c: &mut Cursor<'_>) -> PResult<(String, Global, Option<String>)> {
    c.expect_kw("util.global")?;
    for kw in ["private", "public", "nested", "mutable"] {
        c.eat_kw(kw);
    }
    c.eat_kw("mutable");
    let (sym, _) = c.symbol()?;
    if c.peek("{") {
        let mut sink = Vec::new();
        syntax::attr_dict(c, &mut sink)?;
    }
    if !c.eat("=") {
        return Err(c.err(format!("`=` and an initial value for global @{sym}")));
    }
    c.ws();
    let ipos = c.pos;
    enum Init {
        Param(Option<String>, String, Option<(u64, Option<u64>, usize)>),
        Dense(syntax::DenseLit),
    }
    let init = if c.eat("#flow.parameter.named") || c.eat("#stream.parameter.named") {
        c.expect("<")?;
        let first = c.string()?;
        let (scope, key) = if c.eat("::") {
            (Some(first), c.string()?)
        } else {
            (None, first)
        };
        let part = if c.eat(",") {
            c.ws();
            let at = c.pos;
            let (offset, length) = parameter_slice(c)?;
            Some((offset, length, at))
        } else {
            None
        };
        c.expect(">")?;
        Init::Param(scope, key, part)
    } else if c.peek_kw("dense") {
        Init::Dense(syntax::dense(c)?)
    } else {
        return Err(c.err("`#flow.parameter.named<\"scope\"::\"key\">` or `dense<…>`"));
    };
    c.expect(":")?;
    let raw = syntax::raw_type(c)?;
    let ty = build::tensor_type(c, &raw)?;
    Ok(match init {
        Init::Param(scope, key, part) => {
            let offset = match part {
                None => None,
                Some((offset, length, at)) => {
                    if let Some(len) = length.filter(|&l| l != ty.byte_size() as u64) {
                        return Err(c.err_found(
                            at,
                            format!("`length = {}`, the byte size of {ty}", ty.byte_size()),
                            format!("`length = {len}`"),
                        ));
                    }
                    Some(offset)
                }
            };
            (sym, Global::Param { key, offset, ty }, scope)
        }
        Init::Dense(lit) => {
            let lit = build::literal(c, &lit, &ty, ipos)?;
            (sym, Global::Const { lit, ty }, None)
        }
    })
}

/// `{offset = N : i64, length = M : i64}` of a parameter slice (either key
/// may be absent; offset defaults to 0). Returns (offset, length).
fn parameter_slice(c: &mut Cursor<'_>) -> PResult<(u64, Option<u64>)> {
    c.expect("{")?;
    let (mut offset, mut length) = (None, None);
    loop {
        c.ws();
        let at = c.pos;
        let name = c.ident("`offset` or `length`")?;
        c.expect("=")?;
        let v = c.i64("a byte count")?;
        if c.eat(":") {
            c.expect_kw("i64")?;
        }
        let v = u64::try_from(v)
            .map_err(|_| c.err_found(at, "a byte count ≥ 0", format!("`{name} = {v}`")))?;
        match name {
            "offset" if offset.is_none() => offset = Some(v),
            "length" if length.is_none() => length = Some(v),
            _ => {
                return Err(c.err_found(
                    at,
                    "`offset` or `length` (once each)",
                    format!("`{name}`"),
                ))
            }
        }
        if c.eat("}") {
            return Ok((offset.unwrap_or(0), length));
        }
        c.expect(",")?;
    }
}
