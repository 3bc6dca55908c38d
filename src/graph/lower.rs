//! Lowering for IREE's Vulkan backend: bf16 parameters as 32-bit words.
//!
//! kiln's graphs declare a bf16 weight as a `bf16` global widened by
//! `convert` ([`Graph::weight`]): the CPU backends load 16-bit values and
//! widen them inside the matmul, the fastest form there (a SmolLM2 forward
//! at SEQ 64 runs in less than half the time of the 32-bit-word form). The
//! pinned IREE's SPIR-V backend cannot take it: bf16 buffers feeding a
//! `dot_general` fail to legalize (`vector.bitcast … vector<4xbf16>`), i16
//! loads widened inside a matmul take minutes per dispatch to compile, and
//! the Android baseline profile has no 16-bit storage at all. So before a
//! Vulkan compile, [`lower_bf16_parameters`] re-declares every bf16
//! parameter over the same archive bytes as i32 pairs (or i16 for an odd
//! element count) and widens it exactly in-graph
//! ([`Graph::bf16_pairs_to_f32`], [`Graph::bf16_bits_to_f32`]). The archive
//! is the same; only the MLIR iree-compile sees differs.

use super::{bf16_pairs_shape, DType, Graph, GraphError, Module, Op, TensorType, Value};

/// True when some function of `m` has a bf16 parameter.
pub fn has_bf16_parameters(m: &Module) -> bool {
    m.functions
        .iter()
        .any(|f| f.parameters().any(|(_, t)| t.dtype == DType::BF16))
}

/// `m` with every bf16 parameter declared by its bits and widened in-graph
/// (see the module docs). A bf16 parameter may only feed `convert`s to f32.
pub fn lower_bf16_parameters(m: &Module) -> Result<Module, GraphError> {
    let mut out = Module {
        name: m.name.clone(),
        attributes: m.attributes.clone(),
        functions: Vec::with_capacity(m.functions.len()),
    };
    for f in &m.functions {
        out.functions.push(lower_function(f)?);
    }
    Ok(out)
}

fn lower_function(f: &Graph) -> Result<Graph, GraphError> {
    let mut g = Graph::new(f.name.clone());
    // New value of each old node; for a bf16 parameter, its f32 widening.
    let mut map: Vec<Value> = Vec::with_capacity(f.nodes.len());
    let mut widened: Vec<bool> = vec![false; f.nodes.len()];
    for (i, node) in f.nodes.iter().enumerate() {
        let v = match &node.op {
            Op::Parameter { key } if node.ty.dtype == DType::BF16 => {
                widened[i] = true;
                let shape = node.ty.shape.to_vec();
                match bf16_pairs_shape(&shape) {
                    Some(pairs) => {
                        let p = g.parameter(key, TensorType::new(DType::I32, &pairs))?;
                        g.bf16_pairs_to_f32(p, &shape)?
                    }
                    None => {
                        let p = g.parameter(key, TensorType::new(DType::I16, &shape))?;
                        g.bf16_bits_to_f32(p)?
                    }
                }
            }
            Op::Convert if widened[node.args[0].index()] => {
                if node.ty.dtype != DType::F32 {
                    return Err(GraphError {
                        op: "lower_bf16_parameters",
                        msg: format!(
                            "@{}: a bf16 parameter is converted to {}, only f32 is supported",
                            f.name, node.ty.dtype
                        ),
                    });
                }
                map[node.args[0].index()]
            }
            op => {
                if let Some(a) = node.args.iter().find(|a| widened[a.index()]) {
                    return Err(GraphError {
                        op: "lower_bf16_parameters",
                        msg: format!(
                            "@{}: bf16 parameter %{} feeds `{}`; only a convert to f32 can be lowered",
                            f.name,
                            a.0,
                            op.name()
                        ),
                    });
                }
                let args: Vec<Value> = node.args.iter().map(|a| map[a.index()]).collect();
                let v = g.push(op.clone(), &args, node.ty.clone());
                if let Op::Input { .. } = op {
                    g.inputs.push(v);
                }
                v
            }
        };
        map.push(v);
    }
    g.outputs = f.outputs.iter().map(|o| map[o.index()]).collect();
    Ok(g)
}
