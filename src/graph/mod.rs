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
//!
//! The module is in three parts, each built only on the one before:
//!
//! - the IR core (`ir/`): values, ops, types, graphs, modules and the
//!   checked builder, one method per StableHLO op;
//! - recipes (`recipes/`): more [`Graph`] methods written with the core's
//!   builder only: the composites a transformer block is written with
//!   ([`Graph::linear`], [`Graph::rms_norm`], [`Graph::rope`], …), the
//!   exact [`Graph::top_k`], and the in-graph widening of block-quantized
//!   weights (`Graph::dequantize_blocks`, crate-private, for the model
//!   loaders' GGML forms);
//! - passes (`passes/`): whole-module rewrites, such as the lowering for
//!   IREE's Vulkan backend ([`Module::lower_for_vulkan`]).
//!
//! A [`Module`] prints as StableHLO with `{}` (the default
//! [`crate::stablehlo::PrintOptions`]); [`Module::print`] takes other
//! options, and [`Module::parse`] reads the text back.

mod ir;
mod passes;
mod recipes;

pub(crate) use ir::bf16_pairs_shape;
pub use ir::{
    BinaryOp, BlockCodes, CompareDir, DType, DotDims, Graph, GraphError, Literal, Module, Node, Op,
    ParamDecl, ReduceKind, TensorType, UnaryOp, Value,
};
pub(crate) use recipes::{BlockWeight, I4_BLOCK, I4_SUPER_BLOCK};
