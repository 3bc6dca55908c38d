//! The lowering pass for IREE's Vulkan backend: bf16 parameters as 32-bit words.
//!
//! kiln's graphs declare a bf16 weight as a `bf16` global widened by
//! `convert` ([`Graph::weight`]): the CPU backends load 16-bit values and
//! widen them inside the matmul, the fastest form there (a SmolLM2 forward
//! at SEQ 64 runs in less than half the time of the 32-bit-word form). The
//! pinned IREE's SPIR-V backend cannot take it: bf16 buffers feeding a
//! `dot_general` fail to legalize (`vector.bitcast … vector<4xbf16>`), i16
//! loads widened inside a matmul take minutes per dispatch to compile, and
//! the Android baseline profile has no 16-bit storage at all. So before a
//! Vulkan compile, [`lower_for_vulkan`] re-declares every bf16
//! parameter over the same archive bytes as i32 pairs (or i16 for an odd
//! element count) and widens it exactly in-graph
//! ([`Graph::bf16_pairs_to_f32`], [`Graph::bf16_bits_to_f32`]). The archive
//! is the same; only the MLIR iree-compile sees differs.
//!
//! The same pass turns the two-reduction argmax
//! ([`Graph::argmax_two_pass`], the CPU backends' fast form) back into the
//! variadic (value, index) reduce ([`Graph::argmax`]): on `valhall` the
//! index reduction fails to legalize (`failed to legalize operation
//! 'memref.alloc' … memref<96xindex, #spirv.storage_class<Workgroup>>`).

use crate::graph::{
    bf16_pairs_shape, CompareDir, DType, Graph, GraphError, Literal, Module, Node, Op, ReduceKind,
    TensorType, Value,
};

/// True when some function of `m` has a bf16 parameter.
pub fn has_bf16_parameters(m: &Module) -> bool {
    m.functions
        .iter()
        .any(|f| f.parameters().any(|d| d.ty.dtype == DType::BF16))
}

/// `m` with every bf16 parameter declared by its bits and widened in-graph
/// (see the module docs). A bf16 parameter may only feed `convert`s to f32.
pub fn lower_for_vulkan(m: &Module) -> Result<Module, GraphError> {
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
    let mut map: Vec<Value> = Vec::with_capacity(f.nodes().len());
    let mut widened: Vec<bool> = vec![false; f.nodes().len()];
    for (i, node) in f.nodes().iter().enumerate() {
        let v = match &node.op {
            Op::Parameter { key, .. } if node.ty.dtype == DType::I8 => {
                return Err(GraphError {
                    op: "lower_for_vulkan",
                    msg: format!(
                        "@{}: parameter \"{key}\" is i8 (`kiln export --weights w8a8`), a CPU-only form: \
                         the Android Vulkan baseline has no 8-bit storage and no i8 matmul; \
                         export with --weights keep, q8_0 or q4_0 for Vulkan",
                        f.name
                    ),
                });
            }
            Op::Parameter { key, offset } if matches!(node.ty.dtype, DType::BF16 | DType::F16) => {
                widened[i] = true;
                let f16 = node.ty.dtype == DType::F16;
                let shape = node.ty.shape.to_vec();
                // Same bytes (and so the same offset), other element type.
                let mut declare = |ty: TensorType| match offset {
                    None => g.parameter(key, ty),
                    Some(o) => g.parameter_part(key, ty, *o),
                };
                match bf16_pairs_shape(&shape) {
                    Some(pairs) if f16 => {
                        let p = declare(TensorType::new(DType::I32, &pairs))?;
                        g.f16_pairs_to_f32(p, &shape)?
                    }
                    Some(pairs) => {
                        let p = declare(TensorType::new(DType::I32, &pairs))?;
                        g.bf16_pairs_to_f32(p, &shape)?
                    }
                    None if f16 => {
                        let p = declare(TensorType::new(DType::I16, &shape))?;
                        let h = g.convert(p, DType::I32)?;
                        let mask = g.splat(DType::I32, &shape, 65535.0)?;
                        let h = g.bitwise_and(h, mask)?;
                        g.f16_bits_to_f32(h)?
                    }
                    None => {
                        let p = declare(TensorType::new(DType::I16, &shape))?;
                        g.bf16_bits_to_f32(p)?
                    }
                }
            }
            Op::Convert if widened[node.args[0].index()] => {
                if node.ty.dtype != DType::F32 {
                    return Err(GraphError {
                        op: "lower_for_vulkan",
                        msg: format!(
                            "@{}: a bf16 or f16 parameter is converted to {}, only f32 is supported",
                            f.name, node.ty.dtype
                        ),
                    });
                }
                map[node.args[0].index()]
            }
            op => match two_pass_argmax(f, node) {
                Some((x, dim)) => g.argmax(map[x.index()], dim)?,
                None => {
                    if let Some(a) = node.args.iter().find(|a| widened[a.index()]) {
                        return Err(GraphError {
                            op: "lower_for_vulkan",
                            msg: format!(
                                "@{}: 16-bit parameter %{} feeds `{}`; only a convert to f32 can be lowered",
                                f.name,
                                a.0,
                                op.name()
                            ),
                        });
                    }
                    // An argument keeps its position: arguments are added
                    // in order, as the builder numbers them.
                    if let Op::Input { .. } = op {
                        g.input(node.ty.clone())
                    } else {
                        let args: Vec<Value> = node.args.iter().map(|a| map[a.index()]).collect();
                        g.push(op.clone(), &args, node.ty.clone())
                    }
                }
            },
        };
        map.push(v);
    }
    let outputs: Vec<Value> = f.outputs().iter().map(|o| map[o.index()]).collect();
    g.set_outputs(&outputs);
    for &(arg, result) in f.output_storage() {
        let input = g.inputs()[arg];
        g.store_output_in_input(result, input)?;
    }
    Ok(g)
}

/// When `node` is [`Graph::argmax_two_pass`]'s final reduction,
/// `reduce_min(select(x == broadcast(reduce_max(x, [dim])), iota(dim),
/// i32::MAX), [dim])`, returns `(x, dim)`.
fn two_pass_argmax(f: &Graph, node: &Node) -> Option<(Value, usize)> {
    let dim = match &node.op {
        Op::Reduce {
            kind: ReduceKind::Min,
            dims,
        } if dims.len() == 1 => dims[0],
        _ => return None,
    };
    let sel = f.node(node.args[0]);
    if sel.op != Op::Select {
        return None;
    }
    let (cmp, idx, none) = (
        f.node(sel.args[0]),
        f.node(sel.args[1]),
        f.node(sel.args[2]),
    );
    let is_iota = matches!(idx.op, Op::Iota { dim: d } if d == dim);
    let is_max = matches!(none.op, Op::Constant(Literal::Splat(c)) if c == i32::MAX as f64);
    if !is_iota || !is_max || cmp.op != Op::Compare(CompareDir::Eq) {
        return None;
    }
    let (x, b) = (cmp.args[0], f.node(cmp.args[1]));
    if !matches!(b.op, Op::BroadcastInDim { .. }) {
        return None;
    }
    let m = f.node(b.args[0]);
    let max_of_x = matches!(&m.op, Op::Reduce { kind: ReduceKind::Max, dims } if dims[..] == [dim])
        && m.args[0] == x;
    max_of_x.then_some((x, dim))
}
