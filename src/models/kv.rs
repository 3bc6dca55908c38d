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
//! - `prefill(tokens: [1, P] i32, start: [] i32, length: [] i32, K, V)
//!   -> (next: [] i32, K', V')`: a chunk of the conversation at positions
//!   `start..start + P`, its first `length` ids real and the rest padding;
//!   each layer's keys/values for the P positions are written at `start`
//!   and the chunk attends over keys `0..=position` of the updated caches
//!   (earlier chunks and turns included); `next` is the argmax at position
//!   `start + length - 1`. A prompt of any length ≤ N is fed in ⌈len/P⌉
//!   calls; a new turn continues from the current position. Rows past
//!   `start + length` hold padding until a later call overwrites them,
//!   before anything attends to them. The caller keeps `start + P ≤ N`
//!   (`dynamic_update_slice` would clamp the start otherwise) and starts a
//!   conversation with zeroed caches.
//! - `decode(token: [1] i32, position: [] i32, K, V) -> (next: [] i32, K', V')`:
//!   `token` sits at `position`; each layer's key/value row is written
//!   there by a row `scatter` (the position clamped to `0..N`, the index
//!   computed on the device, so IREE records the call's command buffer
//!   once) and attention sees keys `0..=position`. K and V are updated in place: the
//!   K'/V' results are stored in the K/V argument buffers
//!   ([`Graph::store_output_in_input`](crate::graph::Graph::store_output_in_input)),
//!   as are prefill's.
//! - Attention spans (`KvOptions::spans`): for each span B below N, a
//!   second prefill and decode (`NAME_prefill_B`, `NAME_decode_B`) with the
//!   same signature and the same caches attend to the first B positions
//!   only, so a call whose last position is below B costs what a pair of
//!   max context B would. They write the same rows and return the same
//!   results as the functions over N for such calls (the masked keys past
//!   the last position weigh zero); a key at or past B is not seen, so the
//!   caller picks the smallest span above the call's last position.
//! - With sampling (`KvOptions::top_k = Some(K)`) both functions return two
//!   more results, `values: [K] f32` and `ids: [K] i32`: the K largest
//!   logits of the predicted position, largest first (the lower id first
//!   among equal logits, so `ids[0] == next`).
//!
//! See `spec/kv-cache.md`.

use super::config::DecoderConfig;
use super::decoder::{check_positions, Decoder};
use super::masks::CausalMasks;
use super::tables::Table;
use super::ModelError;
use crate::graph::{DType, TensorType, Value};

/// Shapes and names of the KV-cache pair.
#[derive(Debug, Clone)]
pub struct KvOptions {
    /// Prompt bucket P (prefill's token count).
    pub prompt_len: usize,
    /// Max context N (cache length): prompt plus generated tokens.
    pub max_context: usize,
    /// How the weights are stored.
    pub weights: super::WeightPlan,
    /// Dtype of the caches: f32 or bf16.
    pub cache_dtype: DType,
    /// Name of the prefill function.
    pub prefill: String,
    /// Name of the decode function.
    pub decode: String,
    /// The tensor bound ([`super::decoder::GraphOptions::max_tensor_bytes`]).
    pub max_tensor_bytes: u64,
    /// `Some(K)`: both functions also return the K largest logits of the
    /// predicted position and their ids, for sampling on the host.
    pub top_k: Option<usize>,
    /// Attention spans below N, ascending, each at least P: every span B
    /// adds a prefill and a decode ([`KvOptions::names`]) over the same
    /// caches that attend to the first B positions only, for calls whose
    /// last position is below B (see the module docs). Empty: the pair
    /// over N alone.
    pub spans: Vec<usize>,
}

impl KvOptions {
    /// The type of each cache tensor, `[layers per tensor, KV, N, D]`
    /// (all L layers in one tensor unless [`KvOptions::cache_count`] > 1).
    pub fn cache_type(&self, cfg: &DecoderConfig) -> TensorType {
        let per = cfg.num_layers / self.cache_count(cfg);
        TensorType::new(
            self.cache_dtype,
            &[per, cfg.num_kv_heads, self.max_context, cfg.head_dim],
        )
    }

    /// How many tensors each of K and V is split into: 1 (`[L, KV, N, D]`)
    /// unless the stacked cache passes the tensor bound; then the fewest
    /// equal groups of layers that each fit (a whole number of layers per
    /// tensor: L divided by the count). See the module docs.
    pub fn cache_count(&self, cfg: &DecoderConfig) -> usize {
        let layer = (cfg.num_kv_heads * self.max_context * cfg.head_dim) as u64;
        // The stored bytes, and the f32 view of a layer the blocks read.
        let bytes =
            |layers: usize| (layers as u64 * layer * self.cache_dtype.size() as u64).max(layer * 4);
        let l = cfg.num_layers;
        if self.max_tensor_bytes == 0 || bytes(l) <= self.max_tensor_bytes {
            return 1;
        }
        (1..=l)
            .filter(|c| l % c == 0)
            .find(|&c| bytes(l / c) <= self.max_tensor_bytes)
            .unwrap_or(l)
    }

    /// Every attention span the functions are built for: [`KvOptions::spans`],
    /// then N.
    pub fn all_spans(&self) -> Vec<usize> {
        let mut all = self.spans.clone();
        all.push(self.max_context);
        all
    }

    /// The (prefill, decode) function names of attention span `span`: the
    /// plain names for N, `NAME_<span>` below it.
    pub fn names(&self, span: usize) -> (String, String) {
        if span == self.max_context {
            (self.prefill.clone(), self.decode.clone())
        } else {
            (
                format!("{}_{span}", self.prefill),
                format!("{}_{span}", self.decode),
            )
        }
    }

    fn check(&self, cfg: &DecoderConfig) -> Result<(), ModelError> {
        cfg.validate()?;
        check_positions(cfg, "the prompt length P", self.prompt_len)?;
        check_positions(cfg, "the max context N", self.max_context)?;
        if self.max_context <= self.prompt_len {
            return Err(ModelError::OutOfRange {
                what: "the max context N".into(),
                requirement: format!(
                    "must exceed the prompt length P ({}) to leave room for new tokens",
                    self.prompt_len
                ),
                value: self.max_context.to_string(),
            });
        }
        if !matches!(self.cache_dtype, DType::F32 | DType::BF16) {
            return Err(ModelError::unsupported(
                format!("KV cache dtype {}", self.cache_dtype),
                "f32, bf16",
            ));
        }
        let mut below = self.prompt_len;
        for &span in &self.spans {
            if span < below || span >= self.max_context {
                return Err(ModelError::OutOfRange {
                    what: "attention spans".into(),
                    requirement: format!(
                        "must ascend from the prompt length P ({}) and stay below the max context N ({})",
                        self.prompt_len, self.max_context
                    ),
                    value: format!("{:?}", self.spans),
                });
            }
            below = span + 1;
        }
        let layer = (cfg.num_kv_heads * self.max_context * cfg.head_dim * 4) as u64;
        if self.max_tensor_bytes != 0 && layer > self.max_tensor_bytes {
            return Err(ModelError::KvLayerOverBound {
                max_context: self.max_context,
                bytes: layer,
                kv_heads: cfg.num_kv_heads,
                head_dim: cfg.head_dim,
                bound: self.max_tensor_bytes,
            });
        }
        Ok(())
    }
}

/// The K and V cache tensors of a function: its inputs, then (after the
/// blocks) the updated values, each `G` tensors of consecutive layers.
#[derive(Clone)]
struct Caches {
    k: Vec<Value>,
    v: Vec<Value>,
}

impl Caches {
    /// Declares the inputs `K_0..K_{G-1}, V_0..V_{G-1}`.
    fn inputs(b: &mut Decoder<'_>, opts: &KvOptions) -> Caches {
        let (ty, count) = (opts.cache_type(b.cfg), opts.cache_count(b.cfg));
        let k = (0..count).map(|_| b.g.input(ty.clone())).collect();
        let v = (0..count).map(|_| b.g.input(ty.clone())).collect();
        Caches { k, v }
    }
}

/// The head of `x: [1, hidden]` and the outputs `(next, K_0'…, V_0'…[,
/// values, ids])`: the argmax as an i32 scalar, the caches (each stored in
/// the buffer the caller passed for it), then with `top_k` the K largest
/// logits (`[K]` f32) and their ids (`[K]` i32).
fn finish(
    b: &mut Decoder<'_>,
    (x, emb): (Value, &Table),
    top_k: Option<usize>,
    out: Caches,
    inputs: &Caches,
) -> Result<(), ModelError> {
    let (id, top) = b.head(x, emb, top_k)?;
    let mut outs = vec![b.g.reshape(id, &[])?];
    outs.extend(out.k.iter().chain(&out.v));
    if let Some((values, ids)) = top {
        outs.extend([values, ids]);
    }
    b.g.set_outputs(&outs);
    for (i, &input) in inputs.k.iter().chain(&inputs.v).enumerate() {
        b.g.store_output_in_input(1 + i, input)?;
    }
    Ok(())
}

/// Where [`write_rows`] puts a call's rows.
#[derive(Clone, Copy)]
enum RowsAt {
    /// S rows at positions `start..start + S` of every head, by
    /// `dynamic_update_slice` (the start clamped to `0..=N - S`).
    Start(Value),
    /// One row per head at one position, by a row `scatter` whose indices
    /// are (layer, head, position): this is `[KV, 3]` i32 rows of
    /// (0, 0, position), the position clamped to `0..N`. Its index stays
    /// on the device, so IREE can record a decode call's command buffer
    /// once; `dynamic_update_slice` makes it read the position to the host
    /// on every call (`spec/kv-cache.md`).
    Row(Value),
}

impl RowsAt {
    /// The decode's form for position `pos` (an i32 scalar) in caches of
    /// `kv` heads and `n` positions: `broadcast(clamped) × (0, 0, 1)`.
    fn row(
        g: &mut crate::graph::Graph,
        pos: Value,
        kv: usize,
        n: usize,
    ) -> Result<Self, ModelError> {
        let zero = g.scalar(DType::I32, 0.0)?;
        let last = g.scalar(DType::I32, (n - 1) as f64)?;
        let clamped = g.max(pos, zero)?;
        let clamped = g.min(clamped, last)?;
        let at = g.broadcast_in_dim(clamped, &[kv, 3], &[])?;
        let third = g.dense(DType::I32, &[kv, 3], [0.0, 0.0, 1.0].repeat(kv))?;
        Ok(RowsAt::Row(g.mul(at, third)?))
    }
}

/// Writes `new` (`[KV, S, D]` f32) into layer `l` of the stacked cache
/// `all` in place, where `at` says; returns the updated cache and the
/// layer's `[KV, span, D]` f32 view of its first `span` positions.
fn write_rows(
    b: &mut Decoder<'_>,
    all: Value,
    new: Value,
    (l, span): (usize, usize),
    at: RowsAt,
) -> Result<(Value, Value), ModelError> {
    let t = b.g.ty(all).clone();
    let (kvh, d) = (t.shape[1], t.shape[3]);
    let s = b.g.ty(new).shape[1];
    let g = &mut b.g;
    let to_cache = |g: &mut crate::graph::Graph, x: Value| {
        if t.dtype == DType::F32 {
            Ok(x)
        } else {
            g.convert(x, t.dtype)
        }
    };
    let all = match at {
        RowsAt::Start(pos) => {
            let rows = g.reshape(new, &[1, kvh, s, d])?;
            let rows = to_cache(g, rows)?;
            let layer = g.scalar(DType::I32, l as f64)?;
            let zero = g.scalar(DType::I32, 0.0)?;
            g.dynamic_update_slice(all, rows, &[layer, zero, pos, zero])?
        }
        RowsAt::Row(at) => {
            let rows = g.reshape(new, &[kvh * s, d])?;
            let rows = to_cache(g, rows)?;
            // (layer, head, 0) as a literal, plus the position: a constant
            // expression in the indices (a concatenation with a constant,
            // a splat, an iota) is hoisted by IREE, and `kiln compile
            // --pack` exports each layer's into the packed archive.
            let lh = (0..kvh).flat_map(|h| [l as f64, h as f64, 0.0]).collect();
            let lh = g.dense(DType::I32, &[kvh, 3], lh)?;
            let indices = g.add(lh, at)?;
            g.scatter_rows(all, indices, rows)?
        }
    };
    let c = g.slice(all, &[l, 0, 0, 0], &[l + 1, kvh, span, d], &[1, 1, 1, 1])?;
    let c = g.reshape(c, &[kvh, span, d])?;
    let c = if t.dtype == DType::F32 {
        c
    } else {
        g.convert(c, DType::F32)?
    };
    Ok((all, c))
}

/// The blocks of the KV functions: `x: [S, hidden]` at `positions` (i32
/// `[S]`, the first at `pos`) through every layer, each writing its keys
/// and values at `pos..pos + S` of the caches (in place) and attending
/// over keys `0..=position` of the updated cache, read from its first
/// `span` positions. Returns (x, the updated caches).
fn cached_blocks(
    b: &mut Decoder<'_>,
    (mut x, positions, pos): (Value, Value, Value),
    span: usize,
    mut caches: Caches,
) -> Result<(Value, Caches), ModelError> {
    let cfg = b.cfg;
    let (per, kv, n) = {
        let t = b.g.ty(caches.k[0]);
        (t.shape[0], t.shape[1], t.shape[2])
    };
    // One new row per head (the decode) goes in by `scatter`, a chunk
    // by `dynamic_update_slice`.
    let at = if b.g.ty(positions).shape[0] == 1 {
        RowsAt::row(&mut b.g, pos, kv, n)?
    } else {
        RowsAt::Start(pos)
    };
    // RoPE rows for these positions, gathered from the [N, rd] tables
    // (LongRoPE: the factors of an N-position context).
    let tables = b.rope_constants(n)?;
    let ropes = tables.map(|(cos_t, sin_t)| {
        Ok::<_, ModelError>((
            b.g.gather_rows(cos_t, positions)?,
            b.g.gather_rows(sin_t, positions)?,
        ))
    })?;
    let mut masks = CausalMasks::at(&mut b.g, positions, span)?;
    for l in 0..cfg.num_layers {
        let lw = b.layer(l)?;
        let (q, k, v) = b.qkv(&lw, x)?;
        let (cos, sin) = ropes.layer(cfg, l);
        let q = b.rope(q, cos, sin)?;
        let k = b.rope(k, cos, sin)?;
        let (t, local) = (l / per, l % per);
        let (kt, k) = write_rows(b, caches.k[t], k, (local, span), at)?;
        let (vt, v) = write_rows(b, caches.v[t], v, (local, span), at)?;
        (caches.k[t], caches.v[t]) = (kt, vt);
        let mask = masks.layer(&mut b.g, cfg, l)?;
        let a = b.attention(q, k, v, mask)?;
        x = b.finish_block(&lw, x, a)?;
    }
    Ok((x, caches))
}

/// Every function of the pair: for each span of [`KvOptions::all_spans`]
/// its prefill, then its decode.
pub fn build_functions(
    cfg: &DecoderConfig,
    opts: &KvOptions,
) -> Result<Vec<crate::graph::Graph>, ModelError> {
    let mut out = Vec::new();
    for span in opts.all_spans() {
        out.push(build_prefill_span(cfg, opts, span)?);
        out.push(build_decode_span(cfg, opts, span)?);
    }
    Ok(out)
}

fn check_span(opts: &KvOptions, span: usize) -> Result<(), ModelError> {
    if span == opts.max_context || opts.spans.contains(&span) {
        return Ok(());
    }
    Err(ModelError::OutOfRange {
        what: "the attention span".into(),
        requirement: format!(
            "must be the max context N ({}) or one of the spans {:?}",
            opts.max_context, opts.spans
        ),
        value: span.to_string(),
    })
}

/// Builds the prefill function of attention span `span`: the same
/// signature and caches as the prefill over N, attending to the first
/// `span` positions only (for chunks whose real tokens end within them,
/// `start + length ≤ span`; the padding rows are written wherever they
/// fall and overwritten before anything reads them).
pub fn build_prefill_span(
    cfg: &DecoderConfig,
    opts: &KvOptions,
    span: usize,
) -> Result<crate::graph::Graph, ModelError> {
    opts.check(cfg)?;
    check_span(opts, span)?;
    let p = opts.prompt_len;
    let name = opts.names(span).0;
    let mut b = Decoder::new(cfg, &opts.weights, &name, opts.max_tensor_bytes);
    let tokens = b.g.input(TensorType::new(DType::I32, &[1, p]));
    let start = b.g.input(TensorType::new(DType::I32, &[]));
    let length = b.g.input(TensorType::new(DType::I32, &[]));
    let inputs = Caches::inputs(&mut b, opts);
    let ids = b.g.reshape(tokens, &[p])?;
    // The LM head runs on one row in both functions.
    let emb = b.embedding(1)?;
    let x = b.embed(&emb, ids)?;
    let offsets = b.g.iota(DType::I32, &[p], 0)?;
    let start_b = b.g.broadcast_in_dim(start, &[p], &[])?;
    let positions = b.g.add(offsets, start_b)?;
    let (x, caches) = cached_blocks(&mut b, (x, positions, start), span, inputs.clone())?;
    // The hidden state of the chunk's last real token only: the LM head
    // runs on one row.
    let one = b.g.scalar(DType::I32, 1.0)?;
    let last = b.g.sub(length, one)?;
    let last = b.g.reshape(last, &[1])?;
    let xl = b.g.gather_rows(x, last)?;
    finish(&mut b, (xl, &emb), opts.top_k, caches, &inputs)?;
    Ok(b.g)
}

/// Builds the decode function of attention span `span`: the same
/// signature and caches as the decode over N, attending to the first `span`
/// positions only (for positions below `span`).
pub fn build_decode_span(
    cfg: &DecoderConfig,
    opts: &KvOptions,
    span: usize,
) -> Result<crate::graph::Graph, ModelError> {
    opts.check(cfg)?;
    check_span(opts, span)?;
    let name = opts.names(span).1;
    let mut b = Decoder::new(cfg, &opts.weights, &name, opts.max_tensor_bytes);
    let token = b.g.input(TensorType::new(DType::I32, &[1]));
    let pos = b.g.input(TensorType::new(DType::I32, &[]));
    let inputs = Caches::inputs(&mut b, opts);
    let emb = b.embedding(1)?;
    let x = b.embed(&emb, token)?;
    // Keys 0..=position are visible (within the layer's window, if any);
    // the new key/value go to `position`.
    let pos1 = b.g.reshape(pos, &[1])?;
    let (x, caches) = cached_blocks(&mut b, (x, pos1, pos), span, inputs.clone())?;
    finish(&mut b, (x, &emb), opts.top_k, caches, &inputs)?;
    Ok(b.g)
}
