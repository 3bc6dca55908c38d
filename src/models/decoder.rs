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
use super::rope::rope_tables;
use super::ModelError;
use crate::graph::{CompareDir, DType, DotDims, Graph, TensorType, Value};

/// Every weight a checkpoint must provide, as (HF name, shape), in the
/// order the graph uses them. A tied model has no `lm_head.weight`.
pub fn expected_tensors(cfg: &DecoderConfig) -> Vec<(String, Vec<usize>)> {
    let (h, v) = (cfg.hidden_size, cfg.vocab_size);
    let mut out = vec![("model.embed_tokens.weight".to_string(), vec![v, h])];
    for l in 0..cfg.num_layers {
        out.extend(LayerKeys::new(cfg, l).all());
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings {
        out.push(("lm_head.weight".to_string(), vec![v, h]));
    }
    out
}

/// The checkpoint names and shapes of one block's tensors.
struct LayerKeys {
    p: String,
    h: usize,
    /// Head dim.
    d: usize,
    q: usize,
    kv: usize,
    i: usize,
    arch: super::Arch,
}

impl LayerKeys {
    fn new(cfg: &DecoderConfig, l: usize) -> LayerKeys {
        LayerKeys {
            p: format!("model.layers.{l}"),
            h: cfg.hidden_size,
            d: cfg.head_dim,
            q: cfg.num_heads * cfg.head_dim,
            kv: cfg.num_kv_heads * cfg.head_dim,
            i: cfg.intermediate_size,
            arch: cfg.arch.clone(),
        }
    }

    fn key(&self, rest: &str) -> String {
        format!("{}.{rest}", self.p)
    }

    /// (name, shape) of every tensor, in the order [`Decoder::layer`]
    /// declares them.
    fn all(&self) -> Vec<(String, Vec<usize>)> {
        let (h, q, kv, i) = (self.h, self.q, self.kv, self.i);
        let a = &self.arch;
        let mut out = vec![(self.key("input_layernorm.weight"), vec![h])];
        if a.fused_qkv {
            out.push((self.key("self_attn.qkv_proj.weight"), vec![q + 2 * kv, h]));
        } else {
            out.push((self.key("self_attn.q_proj.weight"), vec![q, h]));
            out.push((self.key("self_attn.k_proj.weight"), vec![kv, h]));
            out.push((self.key("self_attn.v_proj.weight"), vec![kv, h]));
        }
        if a.qkv_bias {
            out.push((self.key("self_attn.q_proj.bias"), vec![q]));
            out.push((self.key("self_attn.k_proj.bias"), vec![kv]));
            out.push((self.key("self_attn.v_proj.bias"), vec![kv]));
        }
        if a.qk_norm {
            out.push((self.key("self_attn.q_norm.weight"), vec![self.d]));
            out.push((self.key("self_attn.k_norm.weight"), vec![self.d]));
        }
        out.push((self.key("self_attn.o_proj.weight"), vec![h, q]));
        out.push((self.key("post_attention_layernorm.weight"), vec![h]));
        if a.sandwich_norms {
            out.push((self.key("pre_feedforward_layernorm.weight"), vec![h]));
            out.push((self.key("post_feedforward_layernorm.weight"), vec![h]));
        }
        if a.fused_gate_up {
            out.push((self.key("mlp.gate_up_proj.weight"), vec![2 * i, h]));
        } else {
            out.push((self.key("mlp.gate_proj.weight"), vec![i, h]));
            out.push((self.key("mlp.up_proj.weight"), vec![i, h]));
        }
        out.push((self.key("mlp.down_proj.weight"), vec![h, i]));
        out
    }
}

/// Options of the redecode forward graph.
#[derive(Debug, Clone)]
pub struct GraphOptions {
    /// Fixed sequence length.
    pub seq: usize,
    /// Dtype the weights are stored in (bf16 by default; f16 or f32).
    pub weight_dtype: DType,
    /// Exported function name.
    pub function: String,
}

/// One block's weights, widened to f32 values in the graph.
pub(crate) struct Layer {
    norm_in: Value,
    /// `Qkv::Separate(q, k, v)` or the fused matrix.
    qkv: Qkv,
    /// q/k/v biases.
    bias: Option<(Value, Value, Value)>,
    /// q/k head norms (Qwen3).
    qk_norm: Option<(Value, Value)>,
    o: Value,
    /// Llama: the pre-MLP norm. Sandwich: the post-attention norm.
    norm_post: Value,
    /// Sandwich norms: (pre-MLP, post-MLP).
    sandwich: Option<(Value, Value)>,
    /// `(gate, up)` or the fused matrix.
    gate_up: GateUp,
    down: Value,
}

enum Qkv {
    Separate(Value, Value, Value),
    Fused(Value),
}

enum GateUp {
    Separate(Value, Value),
    Fused(Value),
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

/// Which keys each query may attend to.
pub(crate) enum Mask {
    /// Queries and keys are the same positions; key ≤ query.
    Causal,
    /// An i1 `[S, N]` tensor: true where query s may see key n.
    Keep(Value),
}

/// A graph under construction plus the model it is built for.
pub(crate) struct Decoder<'a> {
    /// The function being built.
    pub(crate) g: Graph,
    /// The model.
    pub(crate) cfg: &'a DecoderConfig,
    wd: DType,
}

impl<'a> Decoder<'a> {
    /// An empty function `function` for `cfg`, weights stored as `wd`.
    pub(crate) fn new(cfg: &'a DecoderConfig, wd: DType, function: &str) -> Decoder<'a> {
        Decoder {
            g: Graph::new(function),
            cfg,
            wd,
        }
    }

    fn w(&mut self, key: &str, shape: &[usize]) -> Result<Value, ModelError> {
        Ok(self.g.weight(key, self.wd, shape)?)
    }

    /// The token embedding table `[V, hidden]` (also the tied LM head).
    pub(crate) fn embedding(&mut self) -> Result<Value, ModelError> {
        let (v, h) = (self.cfg.vocab_size, self.cfg.hidden_size);
        self.w("model.embed_tokens.weight", &[v, h])
    }

    /// Rows of the embedding for `ids` (i32 `[S]`) → `[S, hidden]`.
    pub(crate) fn embed(&mut self, table: Value, ids: Value) -> Result<Value, ModelError> {
        let g = &mut self.g;
        let rows = g.gather_rows(table, ids)?;
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

    /// Declares block `l`'s weights (in [`expected_tensors`] order).
    pub(crate) fn layer(&mut self, l: usize) -> Result<Layer, ModelError> {
        let keys = LayerKeys::new(self.cfg, l);
        let mut vals = Vec::new();
        for (k, s) in keys.all() {
            vals.push(self.w(&k, &s)?);
        }
        let a = &self.cfg.arch;
        let mut it = vals.into_iter();
        let mut next = || it.next().expect("LayerKeys::all lists every weight");
        let norm_in = next();
        let qkv = if a.fused_qkv {
            Qkv::Fused(next())
        } else {
            Qkv::Separate(next(), next(), next())
        };
        let bias = a.qkv_bias.then(|| (next(), next(), next()));
        let qk_norm = a.qk_norm.then(|| (next(), next()));
        let o = next();
        let norm_post = next();
        let sandwich = a.sandwich_norms.then(|| (next(), next()));
        let gate_up = if a.fused_gate_up {
            GateUp::Fused(next())
        } else {
            GateUp::Separate(next(), next())
        };
        let down = next();
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
        let g = &mut self.g;
        let fused = match lw.qkv {
            Qkv::Fused(w) => Some(g.linear(hn, w)?),
            Qkv::Separate(..) => None,
        };
        let proj = |g: &mut Graph, i: usize, n: usize| -> Result<Value, ModelError> {
            let y = match (&lw.qkv, fused) {
                (Qkv::Separate(q, k, v), _) => g.linear(hn, [*q, *k, *v][i])?,
                (Qkv::Fused(_), Some(all)) => {
                    let start = [0, h * d, (h + kv) * d][i];
                    g.slice_dim(all, 1, start, start + n * d)?
                }
                (Qkv::Fused(_), None) => unreachable!("fused projection computed above"),
            };
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

    /// The RoPE tables for positions `0..n` as constants `[n, rotary_dim]`.
    pub(crate) fn rope_constants(&mut self, n: usize) -> Result<Ropes, ModelError> {
        self.rope_constants_within(n, n)
    }

    /// The RoPE tables for positions `0..rows` of a graph whose context is
    /// `context` positions (LongRoPE picks its factors by the context, so
    /// a prefill over P positions of an N-position KV cache uses the
    /// decode's factors).
    pub(crate) fn rope_constants_within(
        &mut self,
        rows: usize,
        context: usize,
    ) -> Result<Ropes, ModelError> {
        let cfg = self.cfg;
        let mut table = |c: &DecoderConfig| -> Result<(Value, Value), ModelError> {
            let (mut cos, mut sin) = rope_tables(c, context.max(rows));
            let rd = c.rotary_dim();
            cos.truncate(rows * rd);
            sin.truncate(rows * rd);
            let cos = self.g.dense(DType::F32, &[rows, rd], cos)?;
            let sin = self.g.dense(DType::F32, &[rows, rd], sin)?;
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
        let scores = g.dot_general(
            qg,
            k,
            DotDims {
                lhs_batch: vec![0],
                rhs_batch: vec![0],
                lhs_contract: vec![2],
                rhs_contract: vec![2],
            },
        )?;
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
        let out = g.dot_general(
            probs,
            v,
            DotDims {
                lhs_batch: vec![0],
                rhs_batch: vec![0],
                lhs_contract: vec![2],
                rhs_contract: vec![1],
            },
        )?;
        let out = g.reshape(out, &[h, s, d])?;
        let out = g.transpose(out, &[1, 0, 2])?;
        Ok(g.reshape(out, &[s, h * d])?)
    }

    /// Block `l` over all positions of `x: [S, hidden]` with causal
    /// (windowed) attention: the block's output, and its keys (after RoPE)
    /// and values `[KV, S, D]` for a cache.
    pub(crate) fn causal_block(
        &mut self,
        l: usize,
        x: Value,
        (cos, sin): (Value, Value),
        masks: &mut CausalMasks,
    ) -> Result<(Value, Value, Value), ModelError> {
        let mask = masks.layer(&mut self.g, self.cfg, l)?;
        let lw = self.layer(l)?;
        let (q, k, v) = self.qkv(&lw, x)?;
        let q = self.rope(q, cos, sin)?;
        let k = self.rope(k, cos, sin)?;
        let a = self.attention(q, k, v, mask)?;
        Ok((self.finish_block(&lw, x, a)?, k, v))
    }

    /// The rest of a block after attention: o_proj, residual, MLP, residual.
    /// `x` is the block's input `[S, hidden]`, `a` the attention `[S, H·D]`.
    pub(crate) fn finish_block(
        &mut self,
        lw: &Layer,
        x: Value,
        a: Value,
    ) -> Result<Value, ModelError> {
        let o = self.g.linear(a, lw.o)?;
        let (o, mlp_norm) = match lw.sandwich {
            Some((pre, _)) => (self.norm(o, lw.norm_post)?, pre),
            None => (o, lw.norm_post),
        };
        let x = self.g.add(x, o)?;
        let hn = self.norm(x, mlp_norm)?;
        let g = &mut self.g;
        let (gate, up) = match lw.gate_up {
            GateUp::Separate(wg, wu) => (g.linear(hn, wg)?, g.linear(hn, wu)?),
            GateUp::Fused(w) => {
                let i = self.cfg.intermediate_size;
                let gu = g.linear(hn, w)?;
                (g.slice_dim(gu, 1, 0, i)?, g.slice_dim(gu, 1, i, 2 * i)?)
            }
        };
        let act = match self.cfg.arch.activation {
            Activation::Silu => g.silu(gate)?,
            Activation::GeluTanh => g.gelu_tanh(gate)?,
        };
        let m = g.mul(act, up)?;
        let down = g.linear(m, lw.down)?;
        let down = match lw.sandwich {
            Some((_, post)) => self.norm(down, post)?,
            None => down,
        };
        Ok(self.g.add(x, down)?)
    }

    /// Final norm, LM head and argmax of `x: [S, hidden]` → i32 `[S]`.
    /// `embedding` is the table, reused as the head when tied.
    pub(crate) fn head_argmax(&mut self, x: Value, embedding: Value) -> Result<Value, ModelError> {
        let (h, v) = (self.cfg.hidden_size, self.cfg.vocab_size);
        let wn = self.w("model.norm.weight", &[h])?;
        let x = self.norm(x, wn)?;
        let head = if self.cfg.tie_word_embeddings {
            embedding
        } else {
            self.w("lm_head.weight", &[v, h])?
        };
        let mut logits = self.g.linear(x, head)?;
        if let Some(c) = self.cfg.arch.final_logit_softcapping {
            logits = softcap(&mut self.g, logits, c)?;
        }
        Ok(self.g.argmax_two_pass(logits, 1)?)
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
    if n == 0 {
        return Err(ModelError(format!("{what} must be at least 1")));
    }
    if n > cfg.max_position_embeddings {
        return Err(ModelError(format!(
            "{what} {n} exceeds the model's max_position_embeddings ({})",
            cfg.max_position_embeddings
        )));
    }
    Ok(())
}

/// The attention masks of a graph over `n` query and key positions, one
/// per distinct sliding window narrower than `n` (Mistral, Gemma 2's local
/// layers), built once and reused by every layer that has that window.
pub(crate) struct CausalMasks {
    n: usize,
    windows: Vec<(usize, Value)>,
}

impl CausalMasks {
    /// No masks built yet, for `n` positions.
    pub(crate) fn new(n: usize) -> CausalMasks {
        CausalMasks {
            n,
            windows: Vec::new(),
        }
    }

    /// Layer `l`'s mask: causal, or causal within its window.
    pub(crate) fn layer(
        &mut self,
        g: &mut Graph,
        cfg: &DecoderConfig,
        l: usize,
    ) -> Result<Mask, ModelError> {
        Ok(match cfg.layer_window(l) {
            Some(w) if w < self.n => match self.windows.iter().find(|(x, _)| *x == w) {
                Some(&(_, keep)) => Mask::Keep(keep),
                None => {
                    let keep = sliding_keep(g, self.n, w)?;
                    self.windows.push((w, keep));
                    Mask::Keep(keep)
                }
            },
            _ => Mask::Causal,
        })
    }
}

/// The sliding-window mask of `n` positions: i1 `[n, n]`, true where key
/// `k` ≤ query `q` and `q − k < window` (transformers'
/// `sliding_window_overlay` on the causal mask).
fn sliding_keep(g: &mut Graph, n: usize, window: usize) -> Result<Value, ModelError> {
    let qi = g.iota(DType::I32, &[n, n], 0)?;
    let ki = g.iota(DType::I32, &[n, n], 1)?;
    let causal = g.compare(CompareDir::Ge, qi, ki)?;
    let dist = g.sub(qi, ki)?;
    let w = g.splat_like(dist, window as f64)?;
    // Non-causal entries get distance `window`: outside the window.
    let dist = g.select(causal, dist, w)?;
    Ok(g.compare(CompareDir::Lt, dist, w)?)
}

/// Builds the redecode forward graph `tensor<1xSEQxi32> -> tensor<SEQxi32>`.
pub fn build_graph(cfg: &DecoderConfig, opts: &GraphOptions) -> Result<Graph, ModelError> {
    cfg.validate()?;
    let seq = opts.seq;
    // Sliding windows narrower than SEQ are masked below.
    check_positions(cfg, "SEQ", seq)?;
    let mut b = Decoder::new(cfg, opts.weight_dtype, &opts.function);
    let ids = b.g.input(TensorType::new(DType::I32, &[1, seq]));
    let ids = b.g.reshape(ids, &[seq])?;
    let emb = b.embedding()?;
    let mut x = b.embed(emb, ids)?;
    let ropes = b.rope_constants(seq)?;
    let mut masks = CausalMasks::new(seq);
    for l in 0..cfg.num_layers {
        x = b.causal_block(l, x, ropes.layer(cfg, l), &mut masks)?.0;
    }
    let out = b.head_argmax(x, emb)?;
    b.g.set_outputs(&[out]);
    Ok(b.g)
}
