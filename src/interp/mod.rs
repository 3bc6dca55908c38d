//! Pure-Rust reference interpreter for kiln graphs.
//!
//! [`run`] evaluates one [`Graph`] on the CPU: every float is computed in
//! f32 (values typed bf16/f16 are rounded to their type after each op, and
//! parameters stored as bf16/f16 are upcast when loaded), integers in i32,
//! booleans as `bool`. `dot_general` is a cache-blocked, rayon-parallel
//! matmul; each intermediate is dropped as soon as its last user has run.
//! It lets `cargo test` verify any exported module without IREE, and
//! cross-check IREE's own results.
//!
//! ```
//! use kiln::graph::{DType, Graph, TensorType};
//! use kiln::interp::{run, Tensor};
//! use std::collections::HashMap;
//! let mut g = Graph::new("f");
//! let x = g.input(TensorType::new(DType::F32, &[2]));
//! let y = g.add(x, x).unwrap();
//! g.set_outputs(&[y]);
//! let params: HashMap<String, Tensor> = HashMap::new();
//! let out = run(&g, &[Tensor::f32(&[2], vec![1.0, 2.5])], &params).unwrap();
//! assert_eq!(out[0], Tensor::f32(&[2], vec![2.0, 5.0]));
//! ```

pub(crate) mod files;
mod kernels;
mod layout;
mod matmul;

use crate::graph::{DType, Graph, Literal, Module, Op, TensorType};
use std::collections::HashMap;

/// A graph the interpreter cannot evaluate, or a module or parameter file
/// it cannot read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InterpError {
    /// A parameter the graph reads has no value (in a parameter map) or no
    /// tensor (in a parameter file).
    #[error("{}", no_parameter(key, file.as_deref()))]
    NoParameter {
        /// The parameter's key.
        key: String,
        /// The parameter file, when the values come from one.
        file: Option<std::path::PathBuf>,
    },
    /// A parameter whose stored value has another type, shape or size than
    /// the graph declares for it (or for the part of it the graph reads).
    #[error("{}", parameter_type(key, file.as_deref(), found, expected, *offset))]
    ParameterType {
        /// The parameter's key.
        key: String,
        /// The parameter file, when the values come from one.
        file: Option<std::path::PathBuf>,
        /// The stored value: `float[2, 3]`, or in a file its dtype, shape
        /// and byte size (`bf16 [2, 3] (12 bytes)`).
        found: String,
        /// The type the graph declares (boxed: the error stays small).
        expected: Box<TensorType>,
        /// Where the declared part starts, in bytes into the stored entry
        /// ([`Graph::parameter_part`]); `None` for the whole entry.
        ///
        /// [`Graph::parameter_part`]: crate::graph::Graph::parameter_part
        offset: Option<u64>,
    },
    /// A parameter source that cannot load a part of an entry
    /// ([`ParamSource::load_part`]).
    #[error("parameter \"{key}\": this parameter source cannot load parts of an entry")]
    NoParts {
        /// The parameter's key.
        key: String,
    },
    /// A function called with another number of arguments than it takes.
    #[error("function @{function} takes {expected} argument(s), {found} given")]
    ArgumentCount {
        /// The function.
        function: String,
        /// How many arguments it takes.
        expected: usize,
        /// How many were given.
        found: usize,
    },
    /// A function argument that is missing or of another type or shape
    /// than the function declares.
    #[error("{}", argument(function, *index, expected, found.as_deref()))]
    Argument {
        /// The function.
        function: String,
        /// The argument's position (from 0).
        index: usize,
        /// The type the function declares (boxed: the error stays small).
        expected: Box<TensorType>,
        /// The given tensor (`float[2, 3]`); `None` when none was given.
        found: Option<String>,
    },
    /// A module without the function asked for (`name`), or without any
    /// function (`name` is `None`).
    #[error("{}", no_function(module, name.as_deref(), available))]
    NoFunction {
        /// The module.
        module: String,
        /// The function asked for; `None` for the first.
        name: Option<String>,
        /// The names of the module's functions.
        available: Vec<String>,
    },
    /// A function that does not map token ids to token ids: it takes no
    /// arguments, or its first result is not i32.
    #[error(
        "function @{function} {}",
        if *result { "does not return i32 ids" } else { "takes no token ids" }
    )]
    NotIds {
        /// The function.
        function: String,
        /// True when the result is at fault, false when the argument is.
        result: bool,
    },
    /// More token ids than the function's SEQ.
    #[error("{count} ids do not fit SEQ = {seq}")]
    TooManyIds {
        /// How many ids were given.
        count: usize,
        /// The function's SEQ (the last dimension of its first argument).
        seq: usize,
    },
    /// An op that cannot be evaluated on its operands, or a value the
    /// interpreter did not compute.
    #[error("@{function} node %{node} ({op}): {detail}")]
    Op {
        /// The function.
        function: String,
        /// The op's node (its result's value number).
        node: usize,
        /// The op's name (`add`, `dot_general`).
        op: String,
        /// What is wrong with the operands or the result, in words
        /// (`operand shapes differ: float[2] and float[3]`).
        detail: String,
    },
    /// A parameter file is malformed or does not hold a tensor.
    #[error(transparent)]
    Params(#[from] crate::params::ParamsError),
    /// A module's StableHLO text does not parse.
    #[error(transparent)]
    Parse(Box<crate::stablehlo::ParseError>),
    /// Reading a module file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// [`InterpError::NoParameter`]'s message.
fn no_parameter(key: &str, file: Option<&std::path::Path>) -> String {
    match file {
        None => format!("no value for parameter \"{key}\""),
        Some(f) => format!("{}: no tensor \"{key}\"", f.display()),
    }
}

/// [`InterpError::ParameterType`]'s message.
fn parameter_type(
    key: &str,
    file: Option<&std::path::Path>,
    found: &str,
    expected: &TensorType,
    offset: Option<u64>,
) -> String {
    let at = match offset {
        None => String::new(),
        Some(o) => format!(" at byte {o} of it"),
    };
    match file {
        None => format!("parameter \"{key}\" is {found}, the graph declares {expected}{at}"),
        Some(f) => format!(
            "{}: tensor \"{key}\" is {found}, the module declares {expected}{at}",
            f.display()
        ),
    }
}

/// [`InterpError::Argument`]'s message.
fn argument(function: &str, index: usize, expected: &TensorType, found: Option<&str>) -> String {
    match found {
        Some(f) => format!("argument {index} of @{function} must be {expected}, got {f}"),
        None => format!("argument {index} of @{function} ({expected}) is missing"),
    }
}

/// [`InterpError::NoFunction`]'s message.
fn no_function(module: &str, name: Option<&str>, available: &[String]) -> String {
    match name {
        None => format!("module @{module} has no functions"),
        Some(n) if available.is_empty() => {
            format!("module @{module} has no function @{n} (it has none)")
        }
        Some(n) => {
            let names: Vec<String> = available.iter().map(|f| format!("@{f}")).collect();
            format!(
                "module @{module} has no function @{n} (it has {})",
                names.join(", ")
            )
        }
    }
}

/// Boxed: a parse error is large, and the crate's `Error` stays small.
impl From<crate::stablehlo::ParseError> for InterpError {
    fn from(e: crate::stablehlo::ParseError) -> Self {
        InterpError::Parse(Box::new(e))
    }
}

/// Why a kernel cannot evaluate an op on its operands, in words; [`run`]
/// names the function, node and op around it ([`InterpError::Op`]).
#[derive(Debug)]
struct OpFault(String);

/// Result of the interpreter.
pub(crate) type Result<T, E = InterpError> = std::result::Result<T, E>;

/// A runtime tensor: row-major data plus shape. Every float dtype
/// (f32, bf16, f16) is held as f32.
#[derive(Debug, Clone, PartialEq)]
pub enum Tensor {
    /// Float data (values of bf16/f16 tensors are exactly representable).
    F32 {
        /// Dimensions.
        shape: Vec<usize>,
        /// Row-major values.
        data: Vec<f32>,
    },
    /// i32 data.
    I32 {
        /// Dimensions.
        shape: Vec<usize>,
        /// Row-major values.
        data: Vec<i32>,
    },
    /// i1 data.
    I1 {
        /// Dimensions.
        shape: Vec<usize>,
        /// Row-major values.
        data: Vec<bool>,
    },
}

impl Tensor {
    /// An f32 tensor.
    pub fn f32(shape: &[usize], data: Vec<f32>) -> Self {
        Tensor::F32 {
            shape: shape.to_vec(),
            data,
        }
    }

    /// An i32 tensor.
    pub fn i32(shape: &[usize], data: Vec<i32>) -> Self {
        Tensor::I32 {
            shape: shape.to_vec(),
            data,
        }
    }

    /// A boolean (i1) tensor.
    pub fn i1(shape: &[usize], data: Vec<bool>) -> Self {
        Tensor::I1 {
            shape: shape.to_vec(),
            data,
        }
    }

    /// The dims.
    pub fn shape(&self) -> &[usize] {
        match self {
            Tensor::F32 { shape, .. } | Tensor::I32 { shape, .. } | Tensor::I1 { shape, .. } => {
                shape
            }
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Tensor::F32 { data, .. } => data.len(),
            Tensor::I32 { data, .. } => data.len(),
            Tensor::I1 { data, .. } => data.len(),
        }
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The f32 data, if this is a float tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            Tensor::F32 { data, .. } => Some(data),
            _ => None,
        }
    }

    /// The i32 data, if this is an i32 tensor.
    pub fn as_i32(&self) -> Option<&[i32]> {
        match self {
            Tensor::I32 { data, .. } => Some(data),
            _ => None,
        }
    }

    /// The boolean data, if this is an i1 tensor.
    pub fn as_i1(&self) -> Option<&[bool]> {
        match self {
            Tensor::I1 { data, .. } => Some(data),
            _ => None,
        }
    }

    /// The `shape.product()` elements from flat index `start`, as a tensor
    /// of `shape`; `None` past the end.
    pub fn elements(&self, start: usize, shape: &[usize]) -> Option<Tensor> {
        let n: usize = shape.iter().product();
        let end = start.checked_add(n)?;
        Some(match self {
            Tensor::F32 { data, .. } => Tensor::f32(shape, data.get(start..end)?.to_vec()),
            Tensor::I32 { data, .. } => Tensor::i32(shape, data.get(start..end)?.to_vec()),
            Tensor::I1 { data, .. } => Tensor::i1(shape, data.get(start..end)?.to_vec()),
        })
    }

    /// Short description, e.g. `f32[2, 3]`.
    pub fn describe(&self) -> String {
        let k = match self {
            Tensor::F32 { .. } => "float",
            Tensor::I32 { .. } => "i32",
            Tensor::I1 { .. } => "i1",
        };
        format!("{k}{:?}", self.shape())
    }

    /// Whether this tensor can hold a value of type `ty` (same shape, and
    /// the variant matching the dtype: F32 for f32/bf16/f16).
    pub fn fits(&self, ty: &TensorType) -> bool {
        let kind_ok = matches!(
            (self, ty.dtype),
            (Tensor::F32 { .. }, DType::F32 | DType::BF16 | DType::F16)
                | (
                    Tensor::I32 { .. },
                    DType::I32 | DType::I16 | DType::I8 | DType::I4
                )
                | (Tensor::I1 { .. }, DType::I1)
        );
        kind_ok && self.shape() == ty.shape.as_slice() && self.len() == ty.numel()
    }
}

/// Where parameter values come from.
pub trait ParamSource {
    /// The values of parameter `key`, whose stored type is `ty`; float
    /// dtypes are returned upcast to f32.
    /// A key it does not hold is [`InterpError::NoParameter`], a value of
    /// another type or shape [`InterpError::ParameterType`].
    fn load(&self, key: &str, ty: &TensorType) -> Result<Tensor>;

    /// The part of parameter `key` that starts `offset` bytes into its
    /// stored entry and is as long as `ty` ([`Graph::parameter_part`]).
    /// The default loads the whole entry as `ty`'s dtype and takes the
    /// elements `offset / element size ..` from it.
    ///
    /// [`Graph::parameter_part`]: crate::graph::Graph::parameter_part
    fn load_part(&self, key: &str, ty: &TensorType, offset: u64) -> Result<Tensor> {
        let _ = (key, ty, offset);
        Err(InterpError::NoParts {
            key: key.to_string(),
        })
    }
}

impl ParamSource for HashMap<String, Tensor> {
    fn load(&self, key: &str, ty: &TensorType) -> Result<Tensor> {
        let t = self.get(key).ok_or_else(|| InterpError::NoParameter {
            key: key.to_string(),
            file: None,
        })?;
        if !t.fits(ty) {
            return Err(InterpError::ParameterType {
                key: key.to_string(),
                file: None,
                found: t.describe(),
                expected: Box::new(ty.clone()),
                offset: None,
            });
        }
        Ok(t.clone())
    }

    fn load_part(&self, key: &str, ty: &TensorType, offset: u64) -> Result<Tensor> {
        let t = self.get(key).ok_or_else(|| InterpError::NoParameter {
            key: key.to_string(),
            file: None,
        })?;
        let start = (offset * 8 / ty.dtype.bits() as u64) as usize;
        t.elements(start, &ty.shape)
            .ok_or_else(|| InterpError::ParameterType {
                key: key.to_string(),
                file: None,
                found: t.describe(),
                expected: Box::new(ty.clone()),
                offset: Some(offset),
            })
    }
}

/// For each node, the index of the last node that reads it (`usize::MAX`
/// for returned values, which are never freed).
fn last_uses(g: &Graph) -> Vec<usize> {
    let mut last = vec![0usize; g.nodes().len()];
    for (i, n) in g.nodes().iter().enumerate() {
        last[i] = last[i].max(i);
        for a in &n.args {
            last[a.index()] = i;
        }
    }
    for o in g.outputs() {
        last[o.index()] = usize::MAX;
    }
    last
}

fn literal_tensor(lit: &Literal, ty: &TensorType) -> Tensor {
    let n = ty.numel();
    let vals: Vec<f64> = match lit {
        Literal::Splat(x) => vec![*x; n],
        Literal::Dense(v) => v.clone(),
    };
    let shape = ty.shape.to_vec();
    match ty.dtype {
        // i16, i8 and i4 values are held widened in i32 tensors.
        DType::I32 | DType::I16 | DType::I8 | DType::I4 => Tensor::I32 {
            shape,
            data: vals.iter().map(|&x| x as i32).collect(),
        },
        DType::I1 => Tensor::I1 {
            shape,
            data: vals.iter().map(|&x| x != 0.0).collect(),
        },
        _ => Tensor::F32 {
            shape,
            data: vals.iter().map(|&x| x as f32).collect(),
        },
    }
}

/// Evaluates `graph` on `inputs` (one per function argument, in order),
/// reading parameters from `params`. Returns the function's results.
pub fn run(graph: &Graph, inputs: &[Tensor], params: &dyn ParamSource) -> Result<Vec<Tensor>> {
    if inputs.len() != graph.inputs().len() {
        return Err(InterpError::ArgumentCount {
            function: graph.name.clone(),
            expected: graph.inputs().len(),
            found: inputs.len(),
        });
    }
    let last = last_uses(graph);
    let mut vals: Vec<Option<Tensor>> = vec![None; graph.nodes().len()];
    for (i, node) in graph.nodes().iter().enumerate() {
        let op_error = |detail: String| InterpError::Op {
            function: graph.name.clone(),
            node: i,
            op: node.op.name().to_string(),
            detail,
        };
        let out = match &node.op {
            Op::Input { index } => {
                let argument = |found: Option<String>| InterpError::Argument {
                    function: graph.name.clone(),
                    index: *index,
                    expected: Box::new(node.ty.clone()),
                    found,
                };
                let t = inputs.get(*index).ok_or_else(|| argument(None))?;
                if !t.fits(&node.ty) {
                    return Err(argument(Some(t.describe())));
                }
                t.clone()
            }
            Op::Parameter { key, offset } => {
                let t = match offset {
                    None => params.load(key, &node.ty)?,
                    Some(o) => params.load_part(key, &node.ty, *o)?,
                };
                if !t.fits(&node.ty) {
                    return Err(InterpError::ParameterType {
                        key: key.clone(),
                        file: None,
                        found: t.describe(),
                        expected: Box::new(node.ty.clone()),
                        offset: *offset,
                    });
                }
                // Sources return values exact in the stored dtype: no rounding.
                t
            }
            Op::Constant(lit) => literal_tensor(lit, &node.ty),
            op => {
                // Operands whose last use is this node may be consumed in place.
                let mut owned: Vec<Option<Tensor>> = Vec::with_capacity(node.args.len());
                for (k, a) in node.args.iter().enumerate() {
                    let dup = node.args[..k].contains(a) || node.args[k + 1..].contains(a);
                    owned.push(if last[a.index()] == i && !dup {
                        vals[a.index()].take()
                    } else {
                        None
                    });
                }
                let mut args: Vec<kernels::Arg<'_>> = Vec::with_capacity(node.args.len());
                for (k, a) in node.args.iter().enumerate() {
                    match owned[k].take() {
                        Some(t) => args.push(kernels::Arg::Owned(t)),
                        None => match &vals[a.index()] {
                            Some(t) => args.push(kernels::Arg::Ref(t)),
                            None => {
                                return Err(op_error(format!(
                                    "operand %{} was freed or never computed",
                                    a.0
                                )))
                            }
                        },
                    }
                }
                let src = node.args.first().map(|a| graph.nodes()[a.index()].ty.dtype);
                let r = kernels::eval(op, &node.ty, src, args).map_err(|e| op_error(e.0))?;
                kernels::round_to(r, node.ty.dtype)
            }
        };
        if !out.fits(&node.ty) {
            return Err(op_error(format!(
                "computed {} for {}",
                out.describe(),
                node.ty
            )));
        }
        vals[i] = Some(out);
        for a in &node.args {
            if last[a.index()] == i {
                vals[a.index()] = None;
            }
        }
        if last[i] == i {
            vals[i] = None;
        }
    }
    graph
        .outputs()
        .iter()
        .map(|o| {
            vals[o.index()].clone().ok_or_else(|| InterpError::Op {
                function: graph.name.clone(),
                node: o.index(),
                op: graph.nodes()[o.index()].op.name().to_string(),
                detail: "returned but not computed".into(),
            })
        })
        .collect()
}

impl Module {
    /// The function called `name` (the first when `None`), for [`run`]:
    /// an error naming the functions there are when it has none so called.
    pub fn function(&self, name: Option<&str>) -> Result<&Graph> {
        match name {
            None => self
                .functions
                .first()
                .ok_or_else(|| InterpError::NoFunction {
                    module: self.name.clone(),
                    name: None,
                    available: Vec::new(),
                }),
            Some(n) => {
                self.functions
                    .iter()
                    .find(|f| f.name == n)
                    .ok_or_else(|| InterpError::NoFunction {
                        module: self.name.clone(),
                        name: Some(n.to_string()),
                        available: self.functions.iter().map(|f| f.name.clone()).collect(),
                    })
            }
        }
    }
}

/// Parses the StableHLO file `mlir`, runs `function` (default: the first)
/// on `ids` (padded with 0 to SEQ) with weights from `params` (`.irpa` or
/// `.safetensors`), and returns the predicted ids.
pub fn predict_file(
    mlir: &std::path::Path,
    params: &std::path::Path,
    function: Option<&str>,
    ids: &[i32],
) -> Result<Vec<i32>> {
    let text = std::fs::read_to_string(mlir).map_err(|source| InterpError::Io {
        path: mlir.to_path_buf(),
        source,
    })?;
    let module = Module::parse(&text).map_err(|e| e.with_file(mlir))?;
    let g = module.function(function)?;
    let arg = g.inputs().first().ok_or_else(|| InterpError::NotIds {
        function: g.name.clone(),
        result: false,
    })?;
    let shape = g.ty(*arg).shape.to_vec();
    let seq = shape.last().copied().unwrap_or(0);
    if ids.len() > seq {
        return Err(InterpError::TooManyIds {
            count: ids.len(),
            seq,
        });
    }
    let mut data = ids.to_vec();
    data.resize(seq, 0);
    let p = <dyn crate::params::ParamSource>::open(params)?;
    let out = run(g, &[Tensor::i32(&shape, data)], &p)?;
    out.first()
        .and_then(Tensor::as_i32)
        .map(<[i32]>::to_vec)
        .ok_or_else(|| InterpError::NotIds {
            function: g.name.clone(),
            result: true,
        })
}
