//! The typed tensor-graph DSL.
//!
//! A [`Graph`] is one function: an arena of [`Node`]s addressed by small
//! `Copy` [`Value`] handles. Every value has a [`TensorType`] (dtype and
//! static shape) fixed when it is built. One builder method per op checks
//! operand dtypes and shapes and returns `Result<Value>`, so a bad build is
//! a [`GraphError`] naming the op and the offending types — it never panics
//! and never reaches the printer. A [`Module`] holds one or more graphs
//! (functions) that may share parameters.
//!
//! ```
//! use kiln::graph::{DType, Graph, TensorType};
//! let mut g = Graph::new("f");
//! let x = g.input(TensorType::new(DType::F32, &[2, 3]));
//! let w = g.parameter("w", TensorType::new(DType::F32, &[4, 3])).unwrap();
//! let y = g.linear(x, w).unwrap();
//! assert_eq!(g.ty(y).shape.as_slice(), &[2, 4]);
//! g.set_outputs(&[y]);
//! ```

mod blocks;
mod composite;
pub mod lower;
mod ops;
mod top_k;
mod types;

pub use blocks::BlockWeight;
pub use ops::{bf16_pairs_shape, DotDims};
pub use types::{DType, Shape, TensorType};

use smallvec::SmallVec;

/// Handle to a value in a [`Graph`]: the index of the node that defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub u32);

impl Value {
    /// Index of the defining node in [`Graph::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Elementwise binary ops (operands and result share one type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `stablehlo.add`
    Add,
    /// `stablehlo.subtract`
    Subtract,
    /// `stablehlo.multiply`
    Multiply,
    /// `stablehlo.divide`
    Divide,
    /// `stablehlo.maximum`
    Maximum,
    /// `stablehlo.minimum`
    Minimum,
    /// `stablehlo.power`
    Power,
}

impl BinaryOp {
    /// All binary ops.
    pub const ALL: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Subtract,
        BinaryOp::Multiply,
        BinaryOp::Divide,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Power,
    ];

    /// Op name without dialect prefix.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Subtract => "subtract",
            BinaryOp::Multiply => "multiply",
            BinaryOp::Divide => "divide",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Power => "power",
        }
    }
}

/// Elementwise unary ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `stablehlo.negate`
    Negate,
    /// `stablehlo.exponential`
    Exponential,
    /// `stablehlo.log`
    Log,
    /// `stablehlo.rsqrt`
    Rsqrt,
    /// `stablehlo.sqrt`
    Sqrt,
    /// `stablehlo.tanh`
    Tanh,
    /// `stablehlo.logistic`
    Logistic,
    /// `stablehlo.abs`
    Abs,
    /// `stablehlo.round_nearest_even`
    RoundNearestEven,
}

impl UnaryOp {
    /// All unary ops.
    pub const ALL: [UnaryOp; 9] = [
        UnaryOp::Negate,
        UnaryOp::Exponential,
        UnaryOp::Log,
        UnaryOp::Rsqrt,
        UnaryOp::Sqrt,
        UnaryOp::Tanh,
        UnaryOp::Logistic,
        UnaryOp::Abs,
        UnaryOp::RoundNearestEven,
    ];

    /// Op name without dialect prefix.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Negate => "negate",
            UnaryOp::Exponential => "exponential",
            UnaryOp::Log => "log",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Logistic => "logistic",
            UnaryOp::Abs => "abs",
            UnaryOp::RoundNearestEven => "round_nearest_even",
        }
    }
}

/// Comparison direction of `stablehlo.compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareDir {
    /// equal
    Eq,
    /// not equal
    Ne,
    /// less than
    Lt,
    /// less or equal
    Le,
    /// greater than
    Gt,
    /// greater or equal
    Ge,
}

impl CompareDir {
    /// All directions.
    pub const ALL: [CompareDir; 6] = [
        CompareDir::Eq,
        CompareDir::Ne,
        CompareDir::Lt,
        CompareDir::Le,
        CompareDir::Gt,
        CompareDir::Ge,
    ];

    /// Whether `x` compares to `y` in this direction (`x < y` for `Lt`).
    pub fn holds<T: PartialOrd>(self, x: T, y: T) -> bool {
        match self {
            CompareDir::Eq => x == y,
            CompareDir::Ne => x != y,
            CompareDir::Lt => x < y,
            CompareDir::Le => x <= y,
            CompareDir::Gt => x > y,
            CompareDir::Ge => x >= y,
        }
    }

    /// MLIR spelling (`EQ`, `NE`, …).
    pub fn name(self) -> &'static str {
        match self {
            CompareDir::Eq => "EQ",
            CompareDir::Ne => "NE",
            CompareDir::Lt => "LT",
            CompareDir::Le => "LE",
            CompareDir::Gt => "GT",
            CompareDir::Ge => "GE",
        }
    }
}

/// The combining function of a [`Op::Reduce`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Sum (init 0).
    Sum,
    /// Maximum (init -inf, or i32::MIN).
    Max,
    /// Minimum (init +inf, or i32::MAX).
    Min,
}

impl ReduceKind {
    /// The StableHLO op used in the reduction body.
    pub fn body_op(self) -> &'static str {
        match self {
            ReduceKind::Sum => "add",
            ReduceKind::Max => "maximum",
            ReduceKind::Min => "minimum",
        }
    }
}

/// Literal data of a constant: one value per element (or one for a splat),
/// stored as f64, which holds every f32/bf16/f16/i32/i1 value exactly.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// Every element has this value.
    Splat(f64),
    /// Row-major values, exactly `numel` of them.
    Dense(Vec<f64>),
}

/// What a node computes. Attributes live here; operands are in
/// [`Node::args`]; the result type in [`Node::ty`].
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Function argument number `index`.
    Input {
        /// Position in the function signature.
        index: usize,
    },
    /// A named external weight, in its stored dtype.
    Parameter {
        /// The checkpoint's tensor name (the archive key).
        key: String,
        /// `None`: the whole archive entry. `Some(bytes)`: the part of the
        /// entry that starts `bytes` into it and is as long as the node's
        /// type, e.g. a row chunk of a table too large for one device
        /// buffer ([`Graph::parameter_part`]).
        offset: Option<u64>,
    },
    /// A constant tensor.
    Constant(Literal),
    /// Element type conversion.
    Convert,
    /// Reinterprets each element's bits as another element type of the
    /// same width (`stablehlo.bitcast_convert`).
    BitcastConvert,
    /// `stablehlo.shift_left` of i32 operands (bits shifted out are lost;
    /// shifts of 32 or more give 0).
    ShiftLeft,
    /// `stablehlo.shift_right_logical` of i32 operands (zeros shifted in;
    /// shifts of 32 or more give 0).
    ShiftRightLogical,
    /// `stablehlo.and` of i32 operands (bitwise).
    BitwiseAnd,
    /// `stablehlo.optimization_barrier`: the identity, which IREE does not
    /// fuse across.
    OptimizationBarrier,
    /// Elementwise binary op.
    Binary(BinaryOp),
    /// Elementwise unary op.
    Unary(UnaryOp),
    /// Elementwise comparison, result i1.
    Compare(CompareDir),
    /// `select(pred, on_true, on_false)`.
    Select,
    /// `broadcast_in_dim`: operand dim i goes to result dim `dims[i]`.
    BroadcastInDim {
        /// Result dim of each operand dim.
        dims: Vec<usize>,
    },
    /// Reshape to the node's type.
    Reshape,
    /// Permute dims: result dim i is operand dim `perm[i]`.
    Transpose {
        /// Permutation.
        perm: Vec<usize>,
    },
    /// Strided slice.
    Slice {
        /// Start index per dim.
        start: Vec<usize>,
        /// Exclusive limit per dim.
        limit: Vec<usize>,
        /// Stride per dim (≥ 1).
        strides: Vec<usize>,
    },
    /// `stablehlo.dynamic_update_slice`: args (operand, update, one i32
    /// scalar start index per dim). The result is the operand with the
    /// update written at the starts, each clamped to
    /// `0..=operand_dim - update_dim` as StableHLO specifies.
    DynamicUpdateSlice,
    /// Concatenation of all args along `dim`.
    Concatenate {
        /// The dim joined along.
        dim: usize,
    },
    /// Indices along `dim`, broadcast over the other dims.
    Iota {
        /// The counting dim.
        dim: usize,
    },
    /// General contraction.
    DotGeneral(DotDims),
    /// Reduction over `dims`; args are (operand, init scalar).
    Reduce {
        /// Combining function.
        kind: ReduceKind,
        /// Dims reduced away (sorted, unique).
        dims: Vec<usize>,
    },
    /// Row gather (embedding lookup): args (table `[V, D]`, i32 ids of any
    /// shape), result `ids.shape + [D]`.
    GatherRows,
    /// Index of the maximum along `dim` (lowest index on ties), as i32.
    /// Args: (operand, i32 iota over operand's shape along `dim`, -inf init, 0 init).
    Argmax {
        /// The dim reduced away.
        dim: usize,
    },
}

impl Op {
    /// Short op name for errors and statistics.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Parameter { .. } => "parameter",
            Op::Constant(_) => "constant",
            Op::Convert => "convert",
            Op::BitcastConvert => "bitcast_convert",
            Op::ShiftLeft => "shift_left",
            Op::ShiftRightLogical => "shift_right_logical",
            Op::BitwiseAnd => "and",
            Op::OptimizationBarrier => "optimization_barrier",
            Op::Binary(b) => b.name(),
            Op::Unary(u) => u.name(),
            Op::Compare(_) => "compare",
            Op::Select => "select",
            Op::BroadcastInDim { .. } => "broadcast_in_dim",
            Op::Reshape => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Slice { .. } => "slice",
            Op::DynamicUpdateSlice => "dynamic_update_slice",
            Op::Concatenate { .. } => "concatenate",
            Op::Iota { .. } => "iota",
            Op::DotGeneral(_) => "dot_general",
            Op::Reduce { .. } => "reduce",
            Op::GatherRows => "gather",
            Op::Argmax { .. } => "argmax",
        }
    }
}

/// One operation in a graph: op, operands, result type.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// What it computes.
    pub op: Op,
    /// Operands, all defined by earlier nodes.
    pub args: SmallVec<[Value; 4]>,
    /// Result type.
    pub ty: TensorType,
}

/// A rejected graph build: which op, and what was wrong with its operands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("graph op `{op}`: {msg}")]
pub struct GraphError {
    /// The op being built.
    pub op: &'static str,
    /// What was wrong, naming the offending types.
    pub msg: String,
}

/// One function: an arena of nodes in definition order, its inputs and outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    /// Function name (printed as `@name`).
    pub name: String,
    /// Nodes in definition order; a [`Value`] indexes this.
    nodes: Vec<Node>,
    /// Function arguments, in order.
    inputs: Vec<Value>,
    /// Returned values, in order.
    outputs: Vec<Value>,
    /// Results whose storage is an argument's buffer, as (argument
    /// position, result index): printed as `{iree.abi.output = R : index}`
    /// on the argument, so IREE writes that result into the buffer the
    /// caller passed (an in-place update when the result is the argument
    /// with a slice rewritten). What the function computes is unchanged.
    output_storage: Vec<(usize, usize)>,
}

impl Graph {
    /// Nodes in definition order; a [`Value`] indexes this. Only the
    /// builder methods add nodes, each checked, so a graph is always
    /// well-typed.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Function arguments, in order.
    pub fn inputs(&self) -> &[Value] {
        &self.inputs
    }

    /// Returned values, in order.
    pub fn outputs(&self) -> &[Value] {
        &self.outputs
    }

    /// The SSA name of every node as printed MLIR spells it: arguments
    /// `%argN`, every other node `%N` in definition order (an argmax's
    /// indices `%N#1`). A [`Value`] has no name of its own (it is an index
    /// into this graph); error messages use these.
    pub fn ssa_names(&self) -> Vec<String> {
        let mut counter = 0usize;
        self.nodes
            .iter()
            .map(|n| match &n.op {
                Op::Input { index } => format!("%arg{index}"),
                Op::Argmax { .. } => {
                    counter += 1;
                    format!("%{}#1", counter - 1)
                }
                _ => {
                    counter += 1;
                    format!("%{}", counter - 1)
                }
            })
            .collect()
    }

    /// The printed SSA name of `v` ([`Graph::ssa_names`]).
    pub fn ssa_name(&self, v: Value) -> String {
        self.ssa_names()
            .swap_remove(v.index().min(self.nodes.len().saturating_sub(1)))
    }

    /// Results stored in an argument's buffer, as (argument position,
    /// result index) ([`Graph::store_output_in_input`]).
    pub fn output_storage(&self) -> &[(usize, usize)] {
        &self.output_storage
    }

    /// An empty function called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Graph {
            name: name.into(),
            nodes: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            output_storage: Vec::new(),
        }
    }

    /// The type of a value.
    pub fn ty(&self, v: Value) -> &TensorType {
        &self.nodes[v.index()].ty
    }

    /// The node that defines a value.
    pub fn node(&self, v: Value) -> &Node {
        &self.nodes[v.index()]
    }

    /// Sets the returned values.
    /// Output storages name results of the old outputs, so setting the
    /// outputs clears them: set storages after the outputs.
    pub fn set_outputs(&mut self, outs: &[Value]) {
        self.outputs = outs.to_vec();
        self.output_storage.clear();
    }

    /// Makes argument `input`'s buffer the storage of result `output`
    /// (see [`Graph::output_storage`]). Call after [`Graph::set_outputs`]:
    /// both must have one type, and neither may be given twice.
    pub fn store_output_in_input(&mut self, output: usize, input: Value) -> Result<(), GraphError> {
        let fail = |msg: String| {
            Err(GraphError {
                op: "output_storage",
                msg,
            })
        };
        let Some(pos) = self.inputs.iter().position(|&v| v == input) else {
            return fail(format!(
                "{} is not an argument of @{}",
                self.ssa_name(input),
                self.name
            ));
        };
        let Some(&out) = self.outputs.get(output) else {
            return fail(format!(
                "result {output} of @{}, which has {} results",
                self.name,
                self.outputs.len()
            ));
        };
        if self.ty(out) != self.ty(input) {
            return fail(format!(
                "result {output} is {} but argument {pos} is {}",
                self.ty(out),
                self.ty(input)
            ));
        }
        if self
            .output_storage
            .iter()
            .any(|&(a, r)| a == pos || r == output)
        {
            return fail(format!(
                "argument {pos} or result {output} already has an output storage"
            ));
        }
        self.output_storage.push((pos, output));
        self.output_storage.sort_unstable();
        Ok(())
    }

    /// The result whose storage is argument `pos`, if any.
    pub fn output_stored_in(&self, pos: usize) -> Option<usize> {
        self.output_storage
            .iter()
            .find(|&&(a, _)| a == pos)
            .map(|&(_, r)| r)
    }

    /// Every parameter node, in definition order.
    pub fn parameters(&self) -> impl Iterator<Item = ParamDecl> + '_ {
        self.nodes.iter().filter_map(|n| match &n.op {
            Op::Parameter { key, offset } => Some(ParamDecl {
                key: key.clone(),
                offset: *offset,
                ty: n.ty.clone(),
            }),
            _ => None,
        })
    }

    /// Appends a node without checks; builder methods call this after
    /// validating. The parser uses it too, after its own validation.
    pub(crate) fn push(&mut self, op: Op, args: &[Value], ty: TensorType) -> Value {
        let v = Value(self.nodes.len() as u32);
        self.nodes.push(Node {
            op,
            args: SmallVec::from_slice(args),
            ty,
        });
        v
    }
}

/// A module: one or more functions, plus advisory attributes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Module {
    /// Module name (printed as `module @name`).
    pub name: String,
    /// Advisory attributes, printed verbatim as `key = value`, in order.
    /// They never change what the graph computes.
    pub attributes: Vec<(String, String)>,
    /// Functions, in order.
    pub functions: Vec<Graph>,
}

impl Module {
    /// An empty module.
    pub fn new(name: impl Into<String>) -> Self {
        Module {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Records which axes of the exported function's first argument are
    /// independent, as the advisory `kiln.schedule` attribute, e.g.
    /// `[("batch", 0), ("position", 1)]`.
    pub fn set_schedule(&mut self, axes: &[(&str, usize)]) {
        let text = axes
            .iter()
            .map(|(n, a)| format!("{n}=arg0[{a}]"))
            .collect::<Vec<_>>()
            .join(", ");
        self.attributes.retain(|(k, _)| k != "kiln.schedule");
        self.attributes
            .push(("kiln.schedule".into(), format!("\"independent: {text}\"")));
    }

    /// Every distinct parameter declaration (key and offset) over all
    /// functions, in order of first appearance. Errors if one declaration
    /// has two types.
    pub fn parameters(&self) -> Result<Vec<ParamDecl>, GraphError> {
        let mut seen: Vec<ParamDecl> = Vec::new();
        let mut index = std::collections::HashMap::new();
        for f in &self.functions {
            for d in f.parameters() {
                match index.get(&(d.key.clone(), d.offset)) {
                    None => {
                        index.insert((d.key.clone(), d.offset), seen.len());
                        seen.push(d);
                    }
                    Some(&i) if seen[i].ty != d.ty => {
                        return Err(GraphError {
                            op: "parameter",
                            msg: format!(
                                "parameter {} is used as {} and as {}",
                                d.describe(),
                                seen[i].ty,
                                d.ty
                            ),
                        })
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(seen)
    }
}

/// One external parameter declaration: an archive key, the part of its
/// entry (all of it, or from a byte offset) and the stored type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamDecl {
    /// The archive key.
    pub key: String,
    /// Byte offset into the entry; `None` for the whole entry.
    pub offset: Option<u64>,
    /// The declared type (its byte size is the declared length).
    pub ty: TensorType,
}

impl ParamDecl {
    /// `"key"`, or `"key" bytes A..B` for a part, for messages.
    pub fn describe(&self) -> String {
        match self.offset {
            None => format!("\"{}\"", self.key),
            Some(o) => format!(
                "\"{}\" bytes {o}..{}",
                self.key,
                o + self.ty.byte_size() as u64
            ),
        }
    }
}
