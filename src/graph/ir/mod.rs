//! The IR core: values, the op vocabulary, element and tensor types,
//! graphs and modules, and the checked builder (one method per op). It
//! imports nothing from the recipes or passes built on it.

mod build;
mod module;
mod op;

pub(crate) use build::bf16_pairs_shape;
pub(crate) use kiln_runtime::types::Shape;
pub use kiln_runtime::types::{DType, TensorType};
pub use module::{Module, ParamDecl};
pub use op::{BinaryOp, BlockCodes, CompareDir, DotDims, Literal, Op, ReduceKind, UnaryOp};

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

    /// For a graph rebuilt node by node from `f` (`map`: the new value of
    /// each of `f`'s nodes, by index): `f`'s outputs and output storages,
    /// mapped. Arguments must have been added in `f`'s order.
    pub(crate) fn set_outputs_as(&mut self, f: &Graph, map: &[Value]) -> Result<(), GraphError> {
        let outputs: Vec<Value> = f.outputs().iter().map(|o| map[o.index()]).collect();
        self.set_outputs(&outputs);
        for &(arg, result) in f.output_storage() {
            let input = self.inputs[arg];
            self.store_output_in_input(result, input)?;
        }
        Ok(())
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
