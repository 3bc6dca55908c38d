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
//! Vulkan compile, [`Module::lower_for_vulkan`] re-declares every bf16
//! parameter over the same archive bytes as i32 pairs (or i16 for an odd
//! element count) and widens it exactly in-graph
//! ([`Graph::bf16_pairs_to_f32`], [`Graph::bf16_bits_to_f32`]). The archive
//! is the same; only the MLIR iree-compile sees differs.
//!
//! **bf16 function arguments and results** (the KV caches of `kiln export
//! --kv-cache --kv-dtype bf16`) take the same form: an argument
//! `tensor<…xDxbf16>` becomes `tensor<…x(D/2)xi32>` (the same bytes), rows
//! written into it are rounded to bf16 and packed two per word
//! ([`Graph::f32_to_bf16_pairs`]), and rows read from it are widened
//! exactly ([`Graph::bf16_pairs_to_f32`]). A bf16 value that is not a
//! parameter may only be an argument, a `convert` from f32, a
//! `dynamic_update_slice` of whole rows, a row `scatter` (written as
//! `dynamic_update_slice`s, below), a `slice` or `reshape` that keeps
//! the last dim, an `optimization_barrier`, a result, or a `convert` to
//! f32 ([`TensorType::lowered_for_vulkan`] gives the form of each). A caller passes and gets
//! back i32 words where the CPU module takes bf16.
//!
//! A block-quantized matrix widened in one op ([`Op::DequantizeBlocks`], a
//! `linalg.generic` that the CPU backends widen once at load) is written
//! back as StableHLO elementwise ops ([`Graph::dequantize_blocks_chain`]),
//! the same f32 operations.
//!
//! The same pass turns the two-reduction argmax
//! ([`Graph::argmax_two_pass`], the CPU backends' fast form) back into the
//! variadic (value, index) reduce ([`Graph::argmax`]): on `valhall` the
//! index reduction fails to legalize (`failed to legalize operation
//! 'memref.alloc' … memref<96xindex, #spirv.storage_class<Workgroup>>`).
//!
//! No row `scatter` ([`Op::ScatterRows`]) reaches the Vulkan backend: the
//! KV decode's cache write becomes one `dynamic_update_slice` at
//! (layer, 0, position, 0), any other row scatter one per row. A decode
//! that writes by scatter is recorded once and replayed by IREE 3.13, and
//! on lavapipe the replayed decode gives other ids than the host's.

use crate::graph::{
    bf16_pairs_shape, BinaryOp, CompareDir, DType, Graph, GraphError, Literal, Module, Node, Op,
    ReduceKind, TensorType, Value,
};

impl Module {
    /// True when some function of this module has a bf16 parameter.
    pub fn has_bf16_parameters(&self) -> bool {
        self.functions
            .iter()
            .any(|f| f.parameters().any(|d| d.ty.dtype == DType::BF16))
    }

    /// The lowering for IREE's Vulkan backend: this module with every bf16
    /// parameter declared by its bits (i32 pairs over the same archive
    /// bytes, or i16 for an odd element count) and widened exactly
    /// in-graph, bf16 arguments and results as i32 pairs
    /// ([`TensorType::lowered_for_vulkan`]), and the two-reduction argmax
    /// as the variadic reduce. A bf16 parameter may only feed `convert`s
    /// to f32.
    pub fn lower_for_vulkan(&self) -> Result<Module, GraphError> {
        let mut out = Module {
            name: self.name.clone(),
            attributes: self.attributes.clone(),
            functions: Vec::with_capacity(self.functions.len()),
        };
        for f in &self.functions {
            out.functions.push(lower_function(f)?);
        }
        Ok(out)
    }
}

fn lower_function(f: &Graph) -> Result<Graph, GraphError> {
    let mut g = Graph::new(f.name.clone());
    // New value of each old node; for a bf16 parameter, its f32 widening;
    // for any other bf16 value, its i32 pairs (`packed`).
    let mut map: Vec<Value> = Vec::with_capacity(f.nodes().len());
    let mut widened: Vec<bool> = vec![false; f.nodes().len()];
    let mut packed: Vec<bool> = vec![false; f.nodes().len()];
    for (i, node) in f.nodes().iter().enumerate() {
        if node.op == Op::ScatterRows {
            // Whole rows, which stay whole as bf16 pairs.
            let [operand, indices, updates] = [0, 1, 2].map(|k| map[node.args[k].index()]);
            let v = match head_rows_at(f, node) {
                Some((layer, pos)) => {
                    let t = g.ty(updates).clone();
                    let rows = g.reshape(updates, &[1, t.shape[0], 1, t.shape[1]])?;
                    let l = g.scalar(DType::I32, layer)?;
                    let zero = g.scalar(DType::I32, 0.0)?;
                    g.dynamic_update_slice(operand, rows, &[l, zero, map[pos.index()], zero])?
                }
                None => rows_by_dynamic_update_slices(&mut g, operand, indices, updates)?,
            };
            packed[i] = node.ty.dtype == DType::BF16;
            map.push(v);
            continue;
        }
        if let Some(v) = lower_packed(f, node, &map, &packed, &mut g)? {
            packed[i] = node.ty.dtype == DType::BF16;
            map.push(v);
            continue;
        }
        let v = match &node.op {
            Op::Parameter { key, .. } if matches!(node.ty.dtype, DType::I8 | DType::I4) => {
                return Err(GraphError {
                    op: "lower_for_vulkan",
                    msg: format!(
                        "@{}: parameter \"{key}\" is {} (w8a8, w8a16, w8a16e, w16a16 or w4a16 weights), a CPU-only form: \
                         the Android Vulkan baseline has no 8- or 4-bit storage and no integer matmul",
                        f.name, node.ty.dtype
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
            // Widened on every call in StableHLO's elementwise ops, the
            // form Vulkan has always compiled (the same values).
            Op::DequantizeBlocks(form) => {
                let args: Vec<Value> = node.args.iter().map(|a| map[a.index()]).collect();
                g.dequantize_blocks_chain(*form, &args)?
            }
            op => match two_pass_argmax(f, node) {
                Some((x, dim)) => g.argmax(map[x.index()], dim)?,
                None => {
                    if let Some(a) = node.args.iter().find(|a| packed[a.index()]) {
                        return Err(GraphError {
                            op: "lower_for_vulkan",
                            msg: format!(
                                "@{}: bf16 value %{} feeds `{}`, which the 32-bit form of bf16 tensors does not support",
                                f.name,
                                a.0,
                                op.name()
                            ),
                        });
                    }
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
    g.set_outputs_as(f, &map)?;
    Ok(g)
}

/// Lowers `node` when it makes or reads a bf16 value that is not a
/// parameter (see the module docs): `Some(new value)`, or `None` when the
/// node is none of those.
fn lower_packed(
    f: &Graph,
    node: &Node,
    map: &[Value],
    packed: &[bool],
    g: &mut Graph,
) -> Result<Option<Value>, GraphError> {
    let arg = |k: usize| node.args[k];
    let is_packed = |k: usize| packed[arg(k).index()];
    let bad = |what: String| GraphError {
        op: "lower_for_vulkan",
        msg: format!("@{}: {what}", f.name),
    };
    let new_ty = || {
        node.ty.lowered_for_vulkan().ok_or_else(|| {
            bad(format!(
                "bf16 tensor {} has an odd last dim and cannot be held as pairs",
                node.ty
            ))
        })
    };
    let bf16 = node.ty.dtype == DType::BF16;
    let v = match &node.op {
        Op::Input { .. } if bf16 => g.input(new_ty()?),
        Op::Convert if bf16 => {
            let src = f.ty(arg(0)).dtype;
            if src != DType::F32 {
                return Err(bad(format!(
                    "a convert from {src} to bf16; only f32 is supported"
                )));
            }
            g.f32_to_bf16_pairs(map[arg(0).index()])?
        }
        Op::Convert if is_packed(0) => {
            if node.ty.dtype != DType::F32 {
                return Err(bad(format!(
                    "a bf16 value converted to {}; only f32 is supported",
                    node.ty.dtype
                )));
            }
            g.bf16_pairs_to_f32(map[arg(0).index()], &node.ty.shape)?
        }
        // Operands that are not pairs (a bf16 parameter) fall through to
        // the caller's check, which names the parameter.
        Op::DynamicUpdateSlice if bf16 && is_packed(0) && is_packed(1) => {
            let (to, tu) = (f.ty(arg(0)), f.ty(arg(1)));
            if to.shape.last() != tu.shape.last() {
                return Err(bad(format!(
                    "a dynamic_update_slice of {tu} into {to}: only whole rows of bf16 pairs can be written"
                )));
            }
            let starts: Vec<Value> = node.args[2..].iter().map(|a| map[a.index()]).collect();
            g.dynamic_update_slice(map[arg(0).index()], map[arg(1).index()], &starts)?
        }
        Op::Slice {
            start,
            limit,
            strides,
        } if bf16 && is_packed(0) => {
            let r = start.len();
            let last = f.ty(arg(0)).shape[r - 1];
            if start[r - 1] != 0 || limit[r - 1] != last || strides[r - 1] != 1 {
                return Err(bad(format!(
                    "a slice of bf16 {} within its last dim; only whole rows can be sliced",
                    f.ty(arg(0))
                )));
            }
            let mut limit = limit.clone();
            limit[r - 1] = last / 2;
            g.slice(map[arg(0).index()], start, &limit, strides)?
        }
        Op::Reshape if bf16 && is_packed(0) => {
            if f.ty(arg(0)).shape.last() != node.ty.shape.last() {
                return Err(bad(format!(
                    "a reshape of bf16 {} to {} that changes the last dim",
                    f.ty(arg(0)),
                    node.ty
                )));
            }
            g.reshape(map[arg(0).index()], &new_ty()?.shape)?
        }
        Op::OptimizationBarrier if bf16 && is_packed(0) => {
            g.optimization_barrier(map[arg(0).index()])?
        }
        _ => return Ok(None),
    };
    Ok(Some(v))
}

/// A row scatter on Vulkan (other than the KV decode's, [`head_rows_at`]):
/// one `dynamic_update_slice` per row, its start sliced from the row's
/// indices; the same values for the in-range, distinct indices a scatter
/// requires. IREE 3.13's replayed scatter is wrong on lavapipe (see
/// [`head_rows_at`]), so no scatter reaches the Vulkan backend.
fn rows_by_dynamic_update_slices(
    g: &mut Graph,
    operand: Value,
    indices: Value,
    updates: Value,
) -> Result<Value, GraphError> {
    let (rank, k) = (g.ty(operand).rank(), g.ty(indices).shape[1]);
    let (rows, d) = (g.ty(updates).shape[0], g.ty(updates).shape[1]);
    let mut shape = vec![1; rank];
    shape[rank - 1] = d;
    let zero = g.scalar(DType::I32, 0.0)?;
    let mut out = operand;
    for b in 0..rows {
        let mut starts = Vec::with_capacity(rank);
        for j in 0..k {
            let s = g.slice(indices, &[b, j], &[b + 1, j + 1], &[1, 1])?;
            starts.push(g.reshape(s, &[])?);
        }
        starts.push(zero);
        let row = g.slice(updates, &[b, 0], &[b + 1, d], &[1, 1])?;
        let row = g.reshape(row, &shape)?;
        out = g.dynamic_update_slice(out, row, &starts)?;
    }
    Ok(out)
}

/// When the row scatter `node` is the KV decode's cache write, into
/// `[L, KV, N, D]` at indices `(l, h, 0) + broadcast(p) × (0, 0, 1)` (the
/// rows of two constants), returns `(l, p)`: the pass writes those rows by
/// one `dynamic_update_slice` at `(l, 0, p, 0)` instead, the same values
/// (`p` is in range). On Vulkan, IREE 3.13 records the scatter form's
/// decode once and replays it, and from the second decode call on the
/// replays on lavapipe give other ids than the host's
/// (`--iree-hal-memoization=false` or
/// `--iree-hal-indirect-command-buffers=false` make them right again).
/// `dynamic_update_slice` reads the position to the host, so the decode
/// is recorded per call, the form Vulkan has always run
/// (`spec/kv-cache.md`).
fn head_rows_at(f: &Graph, node: &Node) -> Option<(f64, Value)> {
    if node.ty.rank() != 4 {
        return None;
    }
    let heads = node.ty.shape[1];
    let rows3 = TensorType::new(DType::I32, &[heads, 3]);
    let two = |v: Value, op: BinaryOp| {
        let n = f.node(v);
        (n.op == Op::Binary(op) && n.ty == rows3).then(|| (n.args[0], n.args[1]))
    };
    let rows_of = |v: Value| match &f.node(v).op {
        Op::Constant(Literal::Dense(x)) if f.node(v).ty == rows3 => Some(x.clone()),
        _ => None,
    };
    let (lh, at) = two(node.args[1], BinaryOp::Add)?;
    let (b, third) = two(at, BinaryOp::Multiply)?;
    let (lh, third) = (rows_of(lh)?, rows_of(third)?);
    let l = *lh.first()?;
    let lh_ok = lh
        .chunks_exact(3)
        .enumerate()
        .all(|(h, r)| r == [l, h as f64, 0.0]);
    let third_ok = third.chunks_exact(3).all(|r| r == [0.0, 0.0, 1.0]);
    let b = f.node(b);
    let b_ok = b.op == (Op::BroadcastInDim { dims: vec![] });
    (lh_ok && third_ok && b_ok).then(|| (l, b.args[0]))
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
