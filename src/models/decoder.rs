//! The decoder every family shares, written with the graph DSL: embedding,
//! N × [norm → q/k/v → RoPE → grouped-query attention → o_proj → residual →
//! norm → gated MLP → residual] → norm → LM head → argmax. What a family
//! changes is read from [`Arch`](super::Arch); the pieces here are used by
//! the redecode forward ([`build_graph`]) and by the KV-cache graphs
//! (`models/kv.rs`).
//!
//! The redecode forward: `tensor<1xSEQxi32>` ids → `tensor<SEQxi32>`, one
//! fixed sequence length, no KV cache, argmax in the graph.

use super::config::{Activation, DecoderConfig};
use super::masks::{CausalMasks, Mask};
use super::tables::{
    row_chunks, widen_i8, I4Chunk, I8Chunk, Rows, Table, MAX_TABLE_ROWS, MAX_TENSOR_BYTES,
};
use super::weights::{Int8Form, Storage, WeightPlan};
use super::ModelError;
use crate::graph::{BlockWeight, CompareDir, DType, DotDims, Graph, TensorType, Value};
use crate::params::blocks::{part_key, BlockForm};

/// Every weight a checkpoint must provide, as (HF name, shape), in the
/// order the graph uses them: the parameters of the forward graph (at SEQ
/// 1, f32, unchunked), so each weight is named once, where
/// the decoder declares it. A tied model has no `lm_head.weight`.
pub fn expected_tensors(cfg: &DecoderConfig) -> Result<Vec<(String, Vec<usize>)>, ModelError> {
    let g = build_graph(
        cfg,
        &GraphOptions {
            seq: 1,
            weights: WeightPlan::from(DType::F32),
            function: "expected".into(),
            max_tensor_bytes: 0,
        },
    )?;
    Ok(g.parameters()
        .map(|p| (p.key, p.ty.shape.to_vec()))
        .collect())
}

/// Options of the redecode forward graph.
#[derive(Debug, Clone)]
pub struct GraphOptions {
    /// Fixed sequence length.
    pub seq: usize,
    /// How the weights are stored (bf16 by default; f16, f32, or block
    /// forms per tensor).
    pub weights: WeightPlan,
    /// Exported function name.
    pub function: String,
    /// The largest tensor, in bytes, a table or weight matrix may bind
    /// ([`MAX_TENSOR_BYTES`] by default): a larger one, or a table of more
    /// than [`MAX_TABLE_ROWS`] rows, is used in row chunks, its products
    /// (logits) per chunk. 0: no bound and no chunks (the module then
    /// compiles for CPU targets only).
    pub max_tensor_bytes: u64,
}

impl DecoderConfig {
    /// The default bound on the bytes of one tensor of kiln's graphs:
    /// 2^27, the storage-buffer range (`maxStorageBufferRange`) that the
    /// Android baseline Vulkan profile guarantees and lavapipe reports. A
    /// Vulkan dispatch silently misreads a binding past it, so kiln's graphs
    /// use an embedding or LM head over it in row chunks (`spec/vulkan-limits.md`).
    pub const MAX_TENSOR_BYTES: u64 = MAX_TENSOR_BYTES;

    /// The most rows an LM-head product may have: 65535, the minimum
    /// `maxComputeWorkGroupCount` per dimension every Vulkan device guarantees.
    /// The pinned IREE's SPIR-V code for a skinny product (a few positions
    /// against the vocabulary) launches about one workgroup per row, and past
    /// 65535 the rest are never computed: lavapipe silently loses every logit
    /// after column 65535. A larger vocabulary is used in row chunks.
    pub const MAX_TABLE_ROWS: usize = MAX_TABLE_ROWS;
}

/// The token embedding table's HF name, in every family.
pub(crate) const EMBEDDING: &str = "model.embed_tokens.weight";

/// The HF name of an untied LM head.
pub(crate) const LM_HEAD: &str = "lm_head.weight";

/// One block's weights, widened to f32 values in the graph; matrices
/// whole or in row chunks.
pub(crate) struct Layer {
    norm_in: Value,
    /// `Qkv::Separate(q, k, v)` or the fused matrix.
    qkv: Qkv,
    /// q/k/v biases.
    bias: Option<(Value, Value, Value)>,
    /// q/k head norms (Qwen3).
    qk_norm: Option<(Value, Value)>,
    o: Table,
    /// Llama: the pre-MLP norm. Sandwich: the post-attention norm.
    norm_post: Value,
    /// Sandwich norms: (pre-MLP, post-MLP).
    sandwich: Option<(Value, Value)>,
    /// `(gate, up)` or the fused matrix.
    gate_up: GateUp,
    down: Table,
}

enum Qkv {
    Separate(Table, Table, Table),
    Fused(Table),
}

enum GateUp {
    Separate(Table, Table),
    Fused(Table),
}

/// The RoPE (cos, sin) tables of a graph: one pair, or one for the
/// sliding-window layers and one for the others ([`super::config::Arch::sliding_rope`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ropes {
    global: (Value, Value),
    sliding: Option<(Value, Value)>,
}

impl Ropes {
    /// The tables layer `l` uses.
    pub(crate) fn layer(&self, cfg: &DecoderConfig, l: usize) -> (Value, Value) {
        match self.sliding {
            Some(s) if cfg.is_sliding_layer(l) => s,
            _ => self.global,
        }
    }

    /// Both pairs through `f` (e.g. gathering one row of each).
    pub(crate) fn map<E>(
        self,
        mut f: impl FnMut((Value, Value)) -> Result<(Value, Value), E>,
    ) -> Result<Ropes, E> {
        Ok(Ropes {
            global: f(self.global)?,
            sliding: self.sliding.map(&mut f).transpose()?,
        })
    }
}

/// A graph under construction plus the model it is built for.
pub(crate) struct Decoder<'a> {
    /// The function being built.
    pub(crate) g: Graph,
    /// The model.
    pub(crate) cfg: &'a DecoderConfig,
    weights: WeightPlan,
    /// The tensor bound ([`GraphOptions::max_tensor_bytes`]).
    limit: u64,
}

impl<'a> Decoder<'a> {
    /// An empty function `function` for `cfg`, weights stored as
    /// `weights` says, tables chunked past `limit` bytes.
    pub(crate) fn new(
        cfg: &'a DecoderConfig,
        weights: &WeightPlan,
        function: &str,
        limit: u64,
    ) -> Decoder<'a> {
        Decoder {
            g: Graph::new(function),
            cfg,
            weights: weights.clone(),
            limit,
        }
    }

    /// Table `key` (`[V, hidden]`), whole or in row chunks, for an LM head
    /// over `head_rows` rows.
    fn table(&mut self, key: &str, head_rows: usize) -> Result<Table, ModelError> {
        let (v, h) = (self.cfg.vocab_size, self.cfg.hidden_size);
        self.matrix(key, v, h, head_rows)
    }

    /// Matrix `key` (`[v, h]`), whole or in row chunks ([`row_chunks`]) for
    /// products with `m` rows.
    fn matrix(&mut self, key: &str, v: usize, h: usize, m: usize) -> Result<Table, ModelError> {
        let storage = self.weights.storage(key);
        let Some(parts) = storage.parts(h) else {
            let d = match storage {
                Storage::Plain(d) => d,
                _ => unreachable!("only plain storage has no parts"),
            };
            return match row_chunks(v, h, m, &[(d.size() * h) as u64], self.limit)? {
                None => Ok(Table::Whole(self.g.weight(key, d, &[v, h])?)),
                Some(ranges) => {
                    let mut rows = Vec::with_capacity(ranges.len());
                    for r in ranges {
                        let start = r.start;
                        rows.push((start, self.g.weight_rows(key, d, &[h], r)?));
                    }
                    Ok(Table::Rows(rows))
                }
            };
        };
        let row_bytes: Vec<u64> = parts.iter().map(|p| p.1.bytes(p.2) as u64).collect();
        let ranges = row_chunks(v, h, m, &row_bytes, self.limit)?
            .unwrap_or_else(|| std::iter::once(0..v).collect());
        let whole = ranges.len() == 1;
        let (mut blocks, mut int8, mut int4) = (Vec::new(), Vec::new(), Vec::new());
        for r in ranges {
            let start = r.start;
            let vals = self.declare_parts(key, &parts, r, whole)?;
            match storage {
                Storage::Blocks(form) => blocks.push((start, self.block_weight(&form, vals)?)),
                Storage::Int8Rows(_) => int8.push((
                    start,
                    I8Chunk {
                        q: vals[0],
                        s: vals[1],
                        rest: vals.get(2).copied(),
                    },
                )),
                Storage::Int4Blocks(form) => int4.push((
                    start,
                    I4Chunk {
                        q: vals[0],
                        scale: vals[1],
                        min: vals.get(2).copied(),
                        supers: form.super_blocks.then(|| (vals[3], vals[4])),
                    },
                )),
                Storage::Plain(_) => unreachable!("plain storage has no parts"),
            }
        }
        Ok(match storage {
            Storage::Blocks(_) => Table::Blocks(blocks),
            Storage::Int8Rows(form) => Table::Int8(form, int8),
            Storage::Int4Blocks(form) => Table::Int4(form, int4),
            Storage::Plain(_) => unreachable!("plain storage has no parts"),
        })
    }

    /// Rows `rows` of every part `(suffix, dtype, columns)` of stored
    /// matrix `key` as graph values: each part whole (`whole`) or the slice
    /// of its entry that holds the rows.
    fn declare_parts(
        &mut self,
        key: &str,
        parts: &[(&str, DType, usize)],
        rows: std::ops::Range<usize>,
        whole: bool,
    ) -> Result<Vec<Value>, ModelError> {
        let mut vals = Vec::with_capacity(parts.len());
        for &(suffix, dtype, cols) in parts {
            let k = part_key(key, suffix);
            let ty = TensorType::new(dtype, &[rows.len(), cols]);
            vals.push(if whole {
                self.g.parameter(&k, ty)?
            } else {
                let offset = dtype.bytes(rows.start * cols) as u64;
                self.g.parameter_part(&k, ty, offset)?
            });
        }
        Ok(vals)
    }

    /// The parts of a `form` matrix (in [`BlockForm::parts`] order) as a
    /// [`BlockWeight`].
    fn block_weight(
        &mut self,
        form: &BlockForm,
        vals: Vec<Value>,
    ) -> Result<BlockWeight, ModelError> {
        let mut it = vals.into_iter();
        let qs = it.next().expect("every form has codes");
        let qh = (form.high_bits > 0).then(|| (it.next().expect("a .qh part"), form.high_bits));
        // f16 scales widen at once, so a gather takes f32 rows (and the
        // Vulkan lowering sees each f16 parameter feed one convert).
        let mut f32_of = |v: Value| -> Result<Value, ModelError> {
            Ok(match self.g.ty(v).dtype {
                DType::F32 => v,
                _ => self.g.convert(v, DType::F32)?,
            })
        };
        let scale = f32_of(it.next().expect("a .scale part"))?;
        let min = it.next().map(&mut f32_of).transpose()?;
        Ok(BlockWeight {
            qs,
            low_bits: form.low_bits,
            qh,
            scale,
            min,
            group: form.group,
            zero: form.zero,
        })
    }

    /// `t` with block-quantized chunks widened to f32 (plain tables as
    /// they are).
    fn dense(&mut self, t: &Table) -> Result<Table, ModelError> {
        let mut rows = Vec::new();
        match t {
            Table::Whole(_) | Table::Rows(_) => return Ok(t.clone()),
            Table::Blocks(chunks) => {
                for (start, bw) in chunks {
                    rows.push((*start, self.g.dequantize_blocks(bw)?));
                }
            }
            Table::Int8(form, chunks) => {
                for &(start, c) in chunks {
                    rows.push((start, widen_i8(&mut self.g, *form, c)?));
                }
            }
            Table::Int4(form, chunks) => {
                for &(start, c) in chunks {
                    rows.push((start, c.widen(&mut self.g, *form)?));
                }
            }
        }
        Ok(match rows.len() {
            1 => Table::Whole(rows[0].1),
            _ => Table::Rows(rows),
        })
    }

    /// Vector (or other non-matrix) weight `key` of `shape` as f32;
    /// matrices are declared by [`Decoder::matrix`].
    fn w(&mut self, key: &str, shape: &[usize]) -> Result<Value, ModelError> {
        match self.weights.storage(key) {
            Storage::Plain(d) => Ok(self.g.weight(key, d, shape)?),
            Storage::Blocks(f) => Err(ModelError::TensorForm {
                name: key.to_string(),
                shape: shape.to_vec(),
                form: format!("in {} blocks", f.ggml),
            }),
            Storage::Int8Rows(_) => Err(ModelError::TensorForm {
                name: key.to_string(),
                shape: shape.to_vec(),
                form: "as i8 rows".into(),
            }),
            Storage::Int4Blocks(_) => Err(ModelError::TensorForm {
                name: key.to_string(),
                shape: shape.to_vec(),
                form: "as i4 blocks".into(),
            }),
        }
    }

    /// The token embedding table `[V, hidden]` (also the tied LM head, over
    /// `head_rows` rows).
    pub(crate) fn embedding(&mut self, head_rows: usize) -> Result<Table, ModelError> {
        self.table(EMBEDDING, head_rows)
    }

    /// Rows of the embedding for `ids` (i32 `[S]`) → `[S, hidden]`. From
    /// row chunks, each chunk's gather (its index clamped into it, as a
    /// whole-table gather clamps) is selected where the id is in or past
    /// it: the same rows as one gather.
    pub(crate) fn embed(&mut self, table: &Table, ids: Value) -> Result<Value, ModelError> {
        let g = &mut self.g;
        // Each chunk's first row, row count and what gathers its rows.
        let chunks: Vec<(usize, usize, Rows)> = match table {
            Table::Whole(t) => vec![(0, g.ty(*t).shape[0], Rows::Plain(*t))],
            Table::Rows(chunks) => chunks
                .iter()
                .map(|&(start, c)| (start, g.ty(c).shape[0], Rows::Plain(c)))
                .collect(),
            Table::Blocks(chunks) => chunks
                .iter()
                .map(|&(start, bw)| (start, g.ty(bw.qs).shape[0], Rows::Blocks(bw)))
                .collect(),
            Table::Int8(form, chunks) => chunks
                .iter()
                .map(|&(start, c)| (start, g.ty(c.q).shape[0], Rows::Int8(*form, c)))
                .collect(),
            Table::Int4(form, chunks) => chunks
                .iter()
                .map(|&(start, c)| (start, g.ty(c.q).shape[0], Rows::Int4(*form, c)))
                .collect(),
        };
        let rows = match &chunks[..] {
            [(0, _, rows)] => rows.gather(g, ids)?,
            _ => {
                let h = self.cfg.hidden_size;
                let s = g.ty(ids).shape.to_vec();
                let mut wide = s.clone();
                wide.push(h);
                let keep: Vec<usize> = (0..s.len()).collect();
                let mut acc: Option<Value> = None;
                for (start, n, rows) in &chunks {
                    let (start, n) = (*start, *n);
                    let first = g.splat_like(ids, start as f64)?;
                    let last = g.splat_like(ids, (start + n - 1) as f64)?;
                    let local = g.max(ids, first)?;
                    let local = g.min(local, last)?;
                    let local = g.sub(local, first)?;
                    let part = rows.gather(g, local)?;
                    acc = Some(match acc {
                        None => part,
                        Some(prev) => {
                            let inside = g.compare(CompareDir::Ge, ids, first)?;
                            let inside = g.broadcast_in_dim(inside, &wide, &keep)?;
                            g.select(inside, part, prev)?
                        }
                    });
                }
                acc.expect("a chunked table has chunks")
            }
        };
        // A barrier keeps IREE from fusing the gather into the first RMSNorm's
        // reduction, which its Vulkan codegen for Mali (`valhall`) cannot
        // legalize (`memref.alloc … memref<1xindex, Workgroup>`).
        let x = g.optimization_barrier(rows)?;
        if !self.cfg.arch.scale_embeddings {
            return Ok(x);
        }
        // Gemma: × √hidden, rounded to f32 as transformers does.
        let s = g.splat_like(x, (self.cfg.hidden_size as f64).sqrt() as f32 as f64)?;
        Ok(g.mul(x, s)?)
    }

    /// Declares block `l`'s weights (each matrix over the tensor bound in
    /// row chunks); their order is the checkpoint's ([`expected_tensors`]).
    pub(crate) fn layer(&mut self, l: usize) -> Result<Layer, ModelError> {
        let cfg = self.cfg;
        let a = &cfg.arch;
        let (h, i, d) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim);
        let (q, kv) = (cfg.num_heads * d, cfg.num_kv_heads * d);
        let key = |rest: &str| format!("model.layers.{l}.{rest}");
        let norm_in = self.w(&key("input_layernorm.weight"), &[h])?;
        let qkv = if a.fused_qkv {
            Qkv::Fused(self.matrix(&key("self_attn.qkv_proj.weight"), q + 2 * kv, h, 1)?)
        } else {
            Qkv::Separate(
                self.matrix(&key("self_attn.q_proj.weight"), q, h, 1)?,
                self.matrix(&key("self_attn.k_proj.weight"), kv, h, 1)?,
                self.matrix(&key("self_attn.v_proj.weight"), kv, h, 1)?,
            )
        };
        let bias = match a.qkv_bias {
            true => Some((
                self.w(&key("self_attn.q_proj.bias"), &[q])?,
                self.w(&key("self_attn.k_proj.bias"), &[kv])?,
                self.w(&key("self_attn.v_proj.bias"), &[kv])?,
            )),
            false => None,
        };
        let qk_norm = match a.qk_norm {
            true => Some((
                self.w(&key("self_attn.q_norm.weight"), &[d])?,
                self.w(&key("self_attn.k_norm.weight"), &[d])?,
            )),
            false => None,
        };
        let o = self.matrix(&key("self_attn.o_proj.weight"), h, q, 1)?;
        let norm_post = self.w(&key("post_attention_layernorm.weight"), &[h])?;
        let sandwich = match a.sandwich_norms {
            true => Some((
                self.w(&key("pre_feedforward_layernorm.weight"), &[h])?,
                self.w(&key("post_feedforward_layernorm.weight"), &[h])?,
            )),
            false => None,
        };
        let gate_up = if a.fused_gate_up {
            GateUp::Fused(self.matrix(&key("mlp.gate_up_proj.weight"), 2 * i, h, 1)?)
        } else {
            GateUp::Separate(
                self.matrix(&key("mlp.gate_proj.weight"), i, h, 1)?,
                self.matrix(&key("mlp.up_proj.weight"), i, h, 1)?,
            )
        };
        let down = self.matrix(&key("mlp.down_proj.weight"), h, i, 1)?;
        Ok(Layer {
            norm_in,
            qkv,
            bias,
            qk_norm,
            o,
            norm_post,
            sandwich,
            gate_up,
            down,
        })
    }

    /// RMSNorm with the family's weight convention (`w` or `1 + w`).
    pub(crate) fn norm(&mut self, x: Value, w: Value) -> Result<Value, ModelError> {
        let g = &mut self.g;
        let w = if self.cfg.arch.norm_plus_one {
            let one = g.splat_like(w, 1.0)?;
            g.add(w, one)?
        } else {
            w
        };
        Ok(g.rms_norm(x, w, self.cfg.rms_norm_eps as f32)?)
    }

    /// The block's input norm and q/k/v projections of `x: [S, hidden]`,
    /// as heads: `q: [H, S, D]`, `k, v: [KV, S, D]` (before RoPE).
    pub(crate) fn qkv(
        &mut self,
        lw: &Layer,
        x: Value,
    ) -> Result<(Value, Value, Value), ModelError> {
        let cfg = self.cfg;
        let (h, kv, d) = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
        let s = self.g.ty(x).shape[0];
        let hn = self.norm(x, lw.norm_in)?;
        let ys = match &lw.qkv {
            Qkv::Fused(w) => {
                let all = self.linear(hn, w)?;
                let g = &mut self.g;
                [
                    g.slice_dim(all, 1, 0, h * d)?,
                    g.slice_dim(all, 1, h * d, (h + kv) * d)?,
                    g.slice_dim(all, 1, (h + kv) * d, (h + 2 * kv) * d)?,
                ]
            }
            Qkv::Separate(q, k, v) => [
                self.linear(hn, q)?,
                self.linear(hn, k)?,
                self.linear(hn, v)?,
            ],
        };
        let g = &mut self.g;
        let proj = |g: &mut Graph, i: usize, n: usize| -> Result<Value, ModelError> {
            let y = ys[i];
            let y = match lw.bias {
                Some(b) => {
                    let b = [b.0, b.1, b.2][i];
                    let bb = g.broadcast_in_dim(b, &[s, n * d], &[1])?;
                    g.add(y, bb)?
                }
                None => y,
            };
            let y = g.reshape(y, &[s, n, d])?;
            Ok(g.transpose(y, &[1, 0, 2])?)
        };
        let q = proj(g, 0, h)?;
        let k = proj(g, 1, kv)?;
        let v = proj(g, 2, kv)?;
        let (q, k) = match lw.qk_norm {
            // Qwen3: RMSNorm over each head's dims, before RoPE.
            Some((qn, kn)) => (self.norm(q, qn)?, self.norm(k, kn)?),
            None => (q, k),
        };
        Ok((q, k, v))
    }

    /// The RoPE tables for positions `0..n` as constants `[n, rotary_dim]`
    /// (LongRoPE picks its factors by the context `n`; the KV functions
    /// gather their rows from the tables of N).
    pub(crate) fn rope_constants(&mut self, n: usize) -> Result<Ropes, ModelError> {
        let cfg = self.cfg;
        let mut table = |c: &DecoderConfig| -> Result<(Value, Value), ModelError> {
            let (cos, sin) = c.rope_tables(n);
            let rd = c.rotary_dim();
            let cos = self.g.dense(DType::F32, &[n, rd], cos)?;
            let sin = self.g.dense(DType::F32, &[n, rd], sin)?;
            Ok((cos, sin))
        };
        let global = table(cfg)?;
        // The sliding layers' own tables, when their RoPE differs.
        let sliding = match (0..cfg.num_layers).find(|&l| cfg.is_sliding_layer(l)) {
            Some(l) if cfg.arch.sliding_rope.is_some() => Some(table(&cfg.rope_config_of(l))?),
            _ => None,
        };
        Ok(Ropes { global, sliding })
    }

    /// Rotate-half RoPE on the leading `rotary_dim` dims of each head of
    /// `x: [n, S, D]`; `cos`, `sin`: `[S, rotary_dim]`.
    pub(crate) fn rope(&mut self, x: Value, cos: Value, sin: Value) -> Result<Value, ModelError> {
        let (rd, d) = (self.cfg.rotary_dim(), self.cfg.head_dim);
        let g = &mut self.g;
        if rd == d {
            return Ok(g.rope(x, cos, sin)?);
        }
        let rot = g.slice_dim(x, 2, 0, rd)?;
        let pass = g.slice_dim(x, 2, rd, d)?;
        let rot = g.rope(rot, cos, sin)?;
        Ok(g.concatenate(&[rot, pass], 2)?)
    }

    /// Grouped-query attention of `q: [H, S, D]` over `k, v: [KV, N, D]`
    /// → `[S, H·D]`. Query heads are grouped by their KV head
    /// (`[KV, G·S, D]`), which is the repeat-KV of transformers without
    /// materializing the copies.
    pub(crate) fn attention(
        &mut self,
        q: Value,
        k: Value,
        v: Value,
        mask: Mask,
    ) -> Result<Value, ModelError> {
        let cfg = self.cfg;
        let (h, kv, d) = (cfg.num_heads, cfg.num_kv_heads, cfg.head_dim);
        let s = self.g.ty(q).shape[1];
        let n = self.g.ty(k).shape[1];
        let grp = h / kv;
        let g = &mut self.g;
        let qg = g.reshape(q, &[kv, grp * s, d])?;
        // One query row (a decode step): both products as a multiply and
        // a sum over the cache's own layout, which IREE runs as one
        // reduction dispatch each, where `dot_general` packs the whole
        // cache into tiles on every call (5 dispatches fewer per layer;
        // decode at N 1024 5–9 % faster;
        // docs/journal/2026-12-05-fast-exact-and-small.md, "Decode on an
        // AVX2 host").
        let one_row = s == 1;
        let scores = if one_row {
            let qb = g.broadcast_in_dim(qg, &[kv, grp, n, d], &[0, 1, 3])?;
            let kb = g.broadcast_in_dim(k, &[kv, grp, n, d], &[0, 2, 3])?;
            let qk = g.mul(qb, kb)?;
            g.reduce_sum(qk, &[3])?
        } else {
            g.dot_general(
                qg,
                k,
                DotDims {
                    lhs_batch: vec![0],
                    rhs_batch: vec![0],
                    lhs_contract: vec![2],
                    rhs_contract: vec![2],
                },
            )?
        };
        let denom = cfg.arch.query_pre_attn_scalar.unwrap_or(d as f64);
        let scale = g.splat_like(scores, (1.0 / denom.sqrt()) as f32 as f64)?;
        let mut scores = g.mul(scores, scale)?;
        if let Some(c) = cfg.arch.attn_logit_softcapping {
            scores = softcap(g, scores, c)?;
        }
        let scores = g.reshape(scores, &[kv, grp, s, n])?;
        let scores = match mask {
            Mask::Causal => g.causal_mask(scores)?,
            Mask::Keep(keep) => {
                let keep = g.broadcast_in_dim(keep, &[kv, grp, s, n], &[2, 3])?;
                let ninf = g.splat_like(scores, f64::NEG_INFINITY)?;
                g.select(keep, scores, ninf)?
            }
        };
        let probs = g.softmax(scores, 3)?;
        let probs = g.reshape(probs, &[kv, grp * s, n])?;
        let out = if one_row {
            let pb = g.broadcast_in_dim(probs, &[kv, grp, n, d], &[0, 1, 2])?;
            let vb = g.broadcast_in_dim(v, &[kv, grp, n, d], &[0, 2, 3])?;
            let pv = g.mul(pb, vb)?;
            g.reduce_sum(pv, &[2])?
        } else {
            g.dot_general(
                probs,
                v,
                DotDims {
                    lhs_batch: vec![0],
                    rhs_batch: vec![0],
                    lhs_contract: vec![2],
                    rhs_contract: vec![1],
                },
            )?
        };
        let out = g.reshape(out, &[h, s, d])?;
        let out = g.transpose(out, &[1, 0, 2])?;
        Ok(g.reshape(out, &[s, h * d])?)
    }

    /// Block `l` over all positions of `x: [S, hidden]` with causal
    /// (windowed) attention: the block's output.
    pub(crate) fn causal_block(
        &mut self,
        l: usize,
        x: Value,
        (cos, sin): (Value, Value),
        masks: &mut CausalMasks,
    ) -> Result<Value, ModelError> {
        let mask = masks.layer(&mut self.g, self.cfg, l)?;
        let lw = self.layer(l)?;
        let (q, k, v) = self.qkv(&lw, x)?;
        let q = self.rope(q, cos, sin)?;
        let k = self.rope(k, cos, sin)?;
        let a = self.attention(q, k, v, mask)?;
        self.finish_block(&lw, x, a)
    }

    /// The rest of a block after attention: o_proj, residual, MLP, residual.
    /// `x` is the block's input `[S, hidden]`, `a` the attention `[S, H·D]`.
    pub(crate) fn finish_block(
        &mut self,
        lw: &Layer,
        x: Value,
        a: Value,
    ) -> Result<Value, ModelError> {
        let o = self.linear(a, &lw.o)?;
        let (o, mlp_norm) = match lw.sandwich {
            Some((pre, _)) => (self.norm(o, lw.norm_post)?, pre),
            None => (o, lw.norm_post),
        };
        let x = self.g.add(x, o)?;
        let hn = self.norm(x, mlp_norm)?;
        let (gate, up) = match &lw.gate_up {
            GateUp::Separate(wg, wu) => (self.linear(hn, wg)?, self.linear(hn, wu)?),
            GateUp::Fused(w) => {
                let i = self.cfg.intermediate_size;
                let gu = self.linear(hn, w)?;
                let g = &mut self.g;
                (g.slice_dim(gu, 1, 0, i)?, g.slice_dim(gu, 1, i, 2 * i)?)
            }
        };
        let g = &mut self.g;
        let act = match self.cfg.arch.activation {
            Activation::Silu => g.silu(gate)?,
            Activation::GeluTanh => g.gelu_tanh(gate)?,
        };
        let m = g.mul(act, up)?;
        let down = self.linear(m, &lw.down)?;
        let down = match lw.sandwich {
            Some((_, post)) => self.norm(down, post)?,
            None => down,
        };
        Ok(self.g.add(x, down)?)
    }

    /// `x · Wᵀ` for `w` whole or in row chunks (each chunk's columns of the
    /// result, joined).
    fn linear(&mut self, x: Value, w: &Table) -> Result<Value, ModelError> {
        let parts: Vec<Value> = self.products(x, w)?.into_iter().map(|p| p.1).collect();
        match parts[..] {
            [one] => Ok(one),
            _ => {
                let last = self.g.ty(x).rank() - 1;
                Ok(self.g.concatenate(&parts, last)?)
            }
        }
    }

    /// `x · Wᵀ` per row chunk of `w` (one for a whole matrix): `(first
    /// row, the chunk's columns of the product)`. A `--weights w8a8` or
    /// `w8a16` matrix takes `x` rounded to i8 ([`Graph::linear_w8a8`],
    /// [`Graph::linear_w8a16`]); the others widen to f32.
    fn products(&mut self, x: Value, w: &Table) -> Result<Vec<(usize, Value)>, ModelError> {
        if let Table::Int8(form, chunks) = w {
            return chunks
                .iter()
                .map(|&(start, I8Chunk { q, s, .. })| {
                    // A w8a16e table's rest serves its gathers only.
                    let y = match form {
                        Int8Form::W8A8 => self.g.linear_w8a8(x, q, s)?,
                        Int8Form::W8A16 | Int8Form::W8A16E => self.g.linear_w8a16(x, q, s)?,
                        Int8Form::W16A16 => self.g.linear_w16a16(x, q, s)?,
                    };
                    Ok((start, y))
                })
                .collect();
        }
        if let Table::Int4(form, chunks) = w {
            return chunks
                .iter()
                .map(|&(start, c)| Ok((start, c.linear(&mut self.g, *form, x)?)))
                .collect();
        }
        let widened = matches!(w, Table::Blocks(_));
        let chunks = match self.dense(w)? {
            Table::Whole(w) => vec![(0, w)],
            Table::Rows(chunks) => chunks,
            Table::Blocks(_) | Table::Int8(..) | Table::Int4(..) => {
                unreachable!("dense tables are f32")
            }
        };
        chunks
            .into_iter()
            .map(|(start, w)| {
                let y = if widened {
                    self.g.linear_weight_first(x, w)?
                } else {
                    self.g.linear(x, w)?
                };
                Ok((start, y))
            })
            .collect()
    }

    /// The head's logits (a chunk's product of the normed rows with the
    /// head), soft-capped where the family does.
    fn logits(&mut self, logits: Value) -> Result<Value, ModelError> {
        match self.cfg.arch.final_logit_softcapping {
            Some(c) => softcap(&mut self.g, logits, c),
            None => Ok(logits),
        }
    }

    /// Final norm, LM head and argmax of `x: [S, hidden]` → i32 `[S]`.
    /// `embedding` is the table, reused as the head when tied.
    pub(crate) fn head_argmax(&mut self, x: Value, embedding: &Table) -> Result<Value, ModelError> {
        Ok(self.head(x, embedding, None)?.0)
    }

    /// Final norm, LM head and argmax of `x: [S, hidden]` → i32 `[S]`,
    /// plus, with `top_k = Some(k)` (`S` = 1), the `k` largest logits and
    /// their ids ([`Graph::top_k`]). `embedding` is the table, reused as the
    /// head when tied.
    ///
    /// A chunked head computes each chunk's logits, their maximum and its
    /// first index, and keeps a later chunk's only where its maximum is
    /// strictly greater: the lowest index among equal maxima, as one argmax.
    /// Its top-K runs over the chunks' logits joined (one row of logits is
    /// far below any tensor bound).
    pub(crate) fn head(
        &mut self,
        x: Value,
        embedding: &Table,
        top_k: Option<usize>,
    ) -> Result<(Value, Option<(Value, Value)>), ModelError> {
        let (h, v) = (self.cfg.hidden_size, self.cfg.vocab_size);
        let rows = self.g.ty(x).shape[0];
        if top_k.is_some() && rows != 1 {
            return Err(ModelError::OutOfRange {
                what: "top-K logits".into(),
                requirement: "are taken of one row".into(),
                value: rows.to_string(),
            });
        }
        let wn = self.w("model.norm.weight", &[h])?;
        let x = self.norm(x, wn)?;
        let head = if self.cfg.tie_word_embeddings {
            embedding.clone()
        } else {
            self.table(LM_HEAD, rows)?
        };
        let chunks = self.products(x, &head)?;
        if let [(_, p)] = chunks[..] {
            let logits = self.logits(p)?;
            let id = self.g.argmax_two_pass(logits, 1)?;
            let top = self.top_k(logits, top_k, v)?;
            return Ok((id, top));
        }
        let mut best: Option<(Value, Value)> = None;
        let mut all = Vec::with_capacity(chunks.len());
        for (start, p) in chunks {
            let logits = self.logits(p)?;
            all.push(logits);
            let (m, i) = self.g.max_argmax(logits, 1)?;
            let g = &mut self.g;
            let i = if start == 0 {
                i
            } else {
                let off = g.splat_like(i, start as f64)?;
                g.add(i, off)?
            };
            best = Some(match best {
                None => (m, i),
                Some((bm, bi)) => {
                    let take = g.compare(CompareDir::Gt, m, bm)?;
                    (g.select(take, m, bm)?, g.select(take, i, bi)?)
                }
            });
        }
        let top = match top_k {
            Some(_) => {
                let logits = self.g.concatenate(&all, 1)?;
                self.top_k(logits, top_k, v)?
            }
            None => None,
        };
        Ok((best.expect("a table has rows").1, top))
    }

    /// The `k` largest of one row of `[1, v]` logits and their ids.
    fn top_k(
        &mut self,
        logits: Value,
        k: Option<usize>,
        v: usize,
    ) -> Result<Option<(Value, Value)>, ModelError> {
        let Some(k) = k else { return Ok(None) };
        if k == 0 || k > v {
            return Err(ModelError::OutOfRange {
                what: "top-K sampling's K".into(),
                requirement: format!("must be at least 1 and at most the vocabulary ({v})"),
                value: k.to_string(),
            });
        }
        let row = self.g.reshape(logits, &[v])?;
        Ok(Some(self.g.top_k(row, k)?))
    }
}

/// `c · tanh(x / c)` (Gemma 2's soft-capping).
fn softcap(g: &mut Graph, x: Value, c: f64) -> Result<Value, ModelError> {
    let inv = g.splat_like(x, (1.0 / c) as f32 as f64)?;
    let cap = g.splat_like(x, c as f32 as f64)?;
    let y = g.mul(x, inv)?;
    let y = g.tanh(y)?;
    Ok(g.mul(y, cap)?)
}

/// Checks SEQ-like lengths against the model: positive and within
/// `max_position_embeddings`.
pub(crate) fn check_positions(cfg: &DecoderConfig, what: &str, n: usize) -> Result<(), ModelError> {
    let requirement = if n == 0 {
        "must be at least 1".to_string()
    } else if n > cfg.max_position_embeddings {
        format!(
            "must be at most the model's max_position_embeddings ({})",
            cfg.max_position_embeddings
        )
    } else {
        return Ok(());
    };
    Err(ModelError::OutOfRange {
        what: what.to_string(),
        requirement,
        value: n.to_string(),
    })
}

/// Builds the redecode forward graph `tensor<1xSEQxi32> -> tensor<SEQxi32>`.
pub fn build_graph(cfg: &DecoderConfig, opts: &GraphOptions) -> Result<Graph, ModelError> {
    cfg.validate()?;
    let seq = opts.seq;
    // Sliding windows narrower than SEQ are masked below.
    check_positions(cfg, "SEQ", seq)?;
    let mut b = Decoder::new(cfg, &opts.weights, &opts.function, opts.max_tensor_bytes);
    let ids = b.g.input(TensorType::new(DType::I32, &[1, seq]));
    let ids = b.g.reshape(ids, &[seq])?;
    let emb = b.embedding(seq)?;
    let mut x = b.embed(&emb, ids)?;
    let ropes = b.rope_constants(seq)?;
    let mut masks = CausalMasks::new(seq);
    for l in 0..cfg.num_layers {
        x = b.causal_block(l, x, ropes.layer(cfg, l), &mut masks)?;
    }
    let out = b.head_argmax(x, &emb)?;
    b.g.set_outputs(&[out]);
    Ok(b.g)
}
