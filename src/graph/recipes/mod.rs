//! Recipes: [`Graph`](super::Graph) methods composed only of the IR core's
//! builder methods, so every node they add is checked like any other.
//!
//! - `composite`: what a transformer block is written with (linear,
//!   RMSNorm, SiLU, GELU, softmax, causal mask, RoPE, two-pass argmax);
//! - `top_k`: the K largest elements and their indices, exact on every
//!   target;
//! - `blocks`: in-graph widening of block-quantized and i8 weights.

mod blocks;
mod composite;
mod top_k;

pub(crate) use blocks::{BlockWeight, I4_BLOCK, I4_SUPER_BLOCK};
