//! The two-graph KV-cache export: a prefill function over a fixed prompt
//! bucket P and a one-token decode function, both over the same external
//! parameters as the redecode forward (one archive serves all three), built
//! from the shared decoder pieces so every family gets them.
//!
//! Caches are two stacked tensors, `K` and `V`, each `[L, KV, N, D]`
//! (layers, KV heads, max context N, head dim), f32 or bf16, holding keys
//! after RoPE. Shapes are fixed: positions past the current length are
//! masked, never sliced, so nothing is dynamic and no i64 appears.
//!
//! - `prefill(tokens: [1, P] i32, length: [] i32) -> (next: [] i32, K, V)`:
//!   the prompt padded with 0 to P; `next` is the argmax at position
//!   `length - 1`; K/V hold positions `0..P` (those ≥ `length` are
//!   overwritten by decode before they are ever attended to) and zeros up
//!   to N.
//! - `decode(token: [1] i32, position: [] i32, K, V) -> (next: [] i32, K', V')`:
//!   `token` sits at `position`; each layer's key/value row is written
//!   there by `dynamic_update_slice` (only the start index is dynamic) and
//!   attention sees keys `0..=position`. K and V are updated in place: the
//!   K'/V' results are stored in the K/V argument buffers
//!   ([`Graph::store_output_in_input`](crate::graph::Graph::store_output_in_input)).
//!
//! See `spec/kv-cache.md`.

use super::config::DecoderConfig;
use super::decoder::{check_positions, CausalMasks, Decoder, Mask, Table};
use super::ModelError;
use crate::graph::{CompareDir, DType, TensorType, Value};

/// Shapes and names of the KV-cache pair.
#[derive(Debug, Clone)]
pub struct KvOptions {
    /// Prompt bucket P (prefill's token count).
    pub prompt_len: usize,
    /// Max context N (cache length): prompt plus generated tokens.
    pub max_context: usize,
    /// Dtype the weights are stored in.
    pub weight_dtype: DType,
    /// Dtype of the caches: f32 or bf16.
    pub cache_dtype: DType,
    /// Name of the prefill function.
    pub prefill: String,
    /// Name of the decode function.
    pub decode: String,
    /// The tensor bound ([`super::GraphOptions::max_tensor_bytes`]).
    pub max_tensor_bytes: u64,
}

impl KvOptions {
    /// The type of each cache tensor, `[L, KV, N, D]`.
    pub fn cache_type(&self, cfg: &DecoderConfig) -> TensorType {
        TensorType::new(
            self.cache_dtype,
            &[
                cfg.num_layers,
                cfg.num_kv_heads,
                self.max_context,
                cfg.head_dim,
            ],
        )
    }

    fn check(&self, cfg: &DecoderConfig) -> Result<(), ModelError> {
        cfg.validate()?;
        check_positions(cfg, "the prompt length P", self.prompt_len)?;
        check_positions(cfg, "the max context N", self.max_context)?;
        if self.max_context <= self.prompt_len {
            return Err(ModelError(format!(
                "the max context N ({}) must exceed the prompt length P ({}) to leave room for new tokens",
                self.max_context, self.prompt_len
            )));
        }
        if !matches!(self.cache_dtype, DType::F32 | DType::BF16) {
            return Err(ModelError(format!(
                "KV caches must be f32 or bf16, not {}",
                self.cache_dtype
            )));
        }
        Ok(())
    }
}

/// Stacks per-layer `[KV, N, D]` f32 caches into `[L, KV, N, D]` of the
/// cache dtype.
fn stack(b: &mut Decoder<'_>, layers: &[Value], dtype: DType) -> Result<Value, ModelError> {
    let mut parts = Vec::with_capacity(layers.len());
    for &c in layers {
        let mut shape = vec![1];
        shape.extend_from_slice(&b.g.ty(c).shape);
        let c = b.g.reshape(c, &shape)?;
        parts.push(if dtype == DType::F32 {
            c
        } else {
            b.g.convert(c, dtype)?
        });
    }
    Ok(b.g.concatenate(&parts, 0)?)
}

/// The argmax of `[1, hidden]` as an i32 scalar.
fn next_id(b: &mut Decoder<'_>, x: Value, emb: &Table) -> Result<Value, ModelError> {
    let id = b.head_argmax(x, emb)?;
    Ok(b.g.reshape(id, &[])?)
}

/// The decode mask of a layer with a sliding window `w`: keys `k` with
/// `k ≤ position` (`causal`) and `position − k < w`.
fn window_keep(
    b: &mut Decoder<'_>,
    key_idx: Value,
    pos_b: Value,
    causal: Value,
    w: usize,
) -> Result<Value, ModelError> {
    let g = &mut b.g;
    let dist = g.sub(pos_b, key_idx)?;
    let wv = g.splat_like(dist, w as f64)?;
    let near = g.compare(CompareDir::Lt, dist, wv)?;
    // causal && near
    Ok(g.select(causal, near, causal)?)
}

/// Builds the prefill function (see the module docs).
pub fn build_prefill(
    cfg: &DecoderConfig,
    opts: &KvOptions,
) -> Result<crate::graph::Graph, ModelError> {
    opts.check(cfg)?;
    let (p, n, d) = (opts.prompt_len, opts.max_context, cfg.head_dim);
    let kvh = cfg.num_kv_heads;
    let mut b = Decoder::new(cfg, opts.weight_dtype, &opts.prefill, opts.max_tensor_bytes);
    let tokens = b.g.input(TensorType::new(DType::I32, &[1, p]));
    let length = b.g.input(TensorType::new(DType::I32, &[]));
    let ids = b.g.reshape(tokens, &[p])?;
    // The LM head runs on one row in both functions.
    let emb = b.embedding(1)?;
    let mut x = b.embed(&emb, ids)?;
    let ropes = b.rope_constants_within(p, n)?;
    let mut masks = CausalMasks::new(p);
    let (mut ks, mut vs) = (Vec::new(), Vec::new());
    for l in 0..cfg.num_layers {
        let (y, k, v) = b.causal_block(l, x, ropes.layer(cfg, l), &mut masks)?;
        x = y;
        let zeros = b.g.splat(DType::F32, &[kvh, n - p, d], 0.0)?;
        ks.push(b.g.concatenate(&[k, zeros], 1)?);
        vs.push(b.g.concatenate(&[v, zeros], 1)?);
    }
    // The hidden state at position length - 1 only: the LM head runs on
    // one row.
    let one = b.g.scalar(DType::I32, 1.0)?;
    let last = b.g.sub(length, one)?;
    let last = b.g.reshape(last, &[1])?;
    let xl = b.g.gather_rows(x, last)?;
    let next = next_id(&mut b, xl, &emb)?;
    let kc = stack(&mut b, &ks, opts.cache_dtype)?;
    let vc = stack(&mut b, &vs, opts.cache_dtype)?;
    b.g.set_outputs(&[next, kc, vc]);
    Ok(b.g)
}

/// Builds the decode function (see the module docs).
pub fn build_decode(
    cfg: &DecoderConfig,
    opts: &KvOptions,
) -> Result<crate::graph::Graph, ModelError> {
    opts.check(cfg)?;
    let (n, d, kvh) = (opts.max_context, cfg.head_dim, cfg.num_kv_heads);
    let cache = opts.cache_type(cfg);
    let mut b = Decoder::new(cfg, opts.weight_dtype, &opts.decode, opts.max_tensor_bytes);
    let token = b.g.input(TensorType::new(DType::I32, &[1]));
    let pos = b.g.input(TensorType::new(DType::I32, &[]));
    let kc_in = b.g.input(cache.clone());
    let vc_in = b.g.input(cache);
    let emb = b.embedding(1)?;
    let mut x = b.embed(&emb, token)?;
    // RoPE rows for this position, gathered from the [N, rd] tables.
    let pos1 = b.g.reshape(pos, &[1])?;
    let tables = b.rope_constants(n)?;
    let ropes = tables.map(|(cos_t, sin_t)| {
        Ok::<_, ModelError>((b.g.gather_rows(cos_t, pos1)?, b.g.gather_rows(sin_t, pos1)?))
    })?;
    // Keys 0..=position are visible (within the layer's window, if any);
    // the new key/value go to `position`.
    let key_idx = b.g.iota(DType::I32, &[1, n], 1)?;
    let pos_b = b.g.broadcast_in_dim(pos, &[1, n], &[])?;
    let keep = b.g.compare(CompareDir::Le, key_idx, pos_b)?;
    let mut windows: Vec<(usize, Value)> = Vec::new();
    let zero = b.g.scalar(DType::I32, 0.0)?;
    let (mut kc, mut vc) = (kc_in, vc_in);
    for l in 0..cfg.num_layers {
        let lw = b.layer(l)?;
        let (q, k, v) = b.qkv(&lw, x)?;
        let (cos, sin) = ropes.layer(cfg, l);
        let q = b.rope(q, cos, sin)?;
        let k = b.rope(k, cos, sin)?;
        let layer = b.g.scalar(DType::I32, l as f64)?;
        // Writes the new `[KV, 1, D]` row at (l, ·, position, ·) of the
        // stacked cache, in place, and returns the updated cache and the
        // layer's `[KV, N, D]` view of it (f32).
        let write = |b: &mut Decoder<'_>, all: Value, new: Value| {
            let dtype = b.g.ty(all).dtype;
            let row = b.g.reshape(new, &[1, kvh, 1, d])?;
            let row = if dtype == DType::F32 {
                row
            } else {
                b.g.convert(row, dtype)?
            };
            let all =
                b.g.dynamic_update_slice(all, row, &[layer, zero, pos, zero])?;
            let c =
                b.g.slice(all, &[l, 0, 0, 0], &[l + 1, kvh, n, d], &[1, 1, 1, 1])?;
            let c = b.g.reshape(c, &[kvh, n, d])?;
            let c = if dtype == DType::F32 {
                c
            } else {
                b.g.convert(c, DType::F32)?
            };
            Ok::<_, ModelError>((all, c))
        };
        let (kc2, k) = write(&mut b, kc, k)?;
        let (vc2, v) = write(&mut b, vc, v)?;
        (kc, vc) = (kc2, vc2);
        let keep = match cfg.layer_window(l) {
            Some(w) if w < n => match windows.iter().find(|(x, _)| *x == w) {
                Some(&(_, m)) => m,
                None => {
                    let m = window_keep(&mut b, key_idx, pos_b, keep, w)?;
                    windows.push((w, m));
                    m
                }
            },
            _ => keep,
        };
        let a = b.attention(q, k, v, Mask::Keep(keep))?;
        x = b.finish_block(&lw, x, a)?;
    }
    let next = next_id(&mut b, x, &emb)?;
    b.g.set_outputs(&[next, kc, vc]);
    // The updated caches are written into the buffers the caller passed.
    b.g.store_output_in_input(1, kc_in)?;
    b.g.store_output_in_input(2, vc_in)?;
    Ok(b.g)
}
