//! The Llama-family forward pass written with the graph DSL: one fixed
//! sequence length, no KV cache, argmax in the graph.
//!
//! `tensor<1xSEQxi32>` ids → embedding gather → N × [RMSNorm → q/k/v →
//! rotate-half RoPE → grouped-query causal attention (dot_general + mask +
//! softmax) → o_proj → residual → RMSNorm → SwiGLU → residual] → RMSNorm →
//! LM head → argmax → `tensor<SEQxi32>`.

use super::config::{LlamaConfig, RopeScaling};
use super::ModelError;
use crate::graph::{DType, DotDims, Graph, TensorType, Value};

/// Every weight a Llama checkpoint must provide, as (HF name, shape), in
/// the order the graph uses them. A tied model has no `lm_head.weight`.
pub fn expected_tensors(cfg: &LlamaConfig) -> Vec<(String, Vec<usize>)> {
    let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let (q, kv) = (
        cfg.num_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
    );
    let mut out = vec![("model.embed_tokens.weight".to_string(), vec![v, h])];
    for l in 0..cfg.num_layers {
        let p = format!("model.layers.{l}");
        out.push((format!("{p}.input_layernorm.weight"), vec![h]));
        out.push((format!("{p}.self_attn.q_proj.weight"), vec![q, h]));
        out.push((format!("{p}.self_attn.k_proj.weight"), vec![kv, h]));
        out.push((format!("{p}.self_attn.v_proj.weight"), vec![kv, h]));
        out.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
        out.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        out.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
        out.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
        out.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings {
        out.push(("lm_head.weight".to_string(), vec![v, h]));
    }
    out
}

/// RoPE inverse frequencies (length `head_dim / 2`), as transformers
/// computes them, scaling included.
pub fn inv_freq(cfg: &LlamaConfig) -> Vec<f64> {
    let d = cfg.head_dim;
    // transformers computes these in f32: base ** (arange(0, d, 2) / d).
    let base: Vec<f64> = (0..d / 2)
        .map(|i| {
            let e = (2 * i) as f32 / d as f32;
            (1.0f32 / (cfg.rope_theta as f32).powf(e)) as f64
        })
        .collect();
    match &cfg.rope_scaling {
        RopeScaling::Default => base,
        RopeScaling::Linear { .. } => base,
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: old,
        } => {
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    let scaled = if wavelen > low_wavelen { f / factor } else { f };
                    // Neither high- nor low-frequency (wavelengths are finite and positive).
                    let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                    if medium {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * scaled / factor + smooth * scaled
                    } else {
                        scaled
                    }
                })
                .map(|x| x as f32 as f64)
                .collect()
        }
    }
}

/// The cos and sin tables `[seq, head_dim]` (row-major, f32-exact values)
/// for rotate-half RoPE: `emb = concat(freqs, freqs)`.
pub fn rope_tables(cfg: &LlamaConfig, seq: usize) -> (Vec<f64>, Vec<f64>) {
    let f = inv_freq(cfg);
    let pos_scale = match cfg.rope_scaling {
        RopeScaling::Linear { factor } => 1.0 / factor,
        _ => 1.0,
    };
    let d = cfg.head_dim;
    let mut cos = Vec::with_capacity(seq * d);
    let mut sin = Vec::with_capacity(seq * d);
    for p in 0..seq {
        let pos = (p as f64 * pos_scale) as f32;
        for j in 0..d {
            let ang = pos * f[j % (d / 2)] as f32;
            cos.push((ang as f64).cos() as f32 as f64);
            sin.push((ang as f64).sin() as f32 as f64);
        }
    }
    (cos, sin)
}

/// Options of the forward graph.
#[derive(Debug, Clone)]
pub struct GraphOptions {
    /// Fixed sequence length.
    pub seq: usize,
    /// Dtype the weights are stored in (bf16 by default; f16 or f32).
    pub weight_dtype: DType,
    /// Exported function name.
    pub function: String,
}

struct Builder<'a> {
    g: Graph,
    cfg: &'a LlamaConfig,
    wd: DType,
    seq: usize,
}

impl Builder<'_> {
    fn w(&mut self, key: &str, shape: &[usize]) -> Result<Value, ModelError> {
        Ok(self.g.weight(key, self.wd, shape)?)
    }

    /// Grouped-query causal attention. `q: [H, S, D]`, `k, v: [KV, S, D]`.
    /// Query heads are grouped by their KV head (`[KV, G·S, D]`), which is
    /// the repeat-KV of transformers without materializing the copies.
    fn attention(&mut self, q: Value, k: Value, v: Value) -> Result<Value, ModelError> {
        let (h, kv, d, s) = (
            self.cfg.num_heads,
            self.cfg.num_kv_heads,
            self.cfg.head_dim,
            self.seq,
        );
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
        let scale = g.splat_like(scores, (1.0 / (d as f64).sqrt()) as f32 as f64)?;
        let scores = g.mul(scores, scale)?;
        let scores = g.reshape(scores, &[kv, grp, s, s])?;
        let scores = g.causal_mask(scores)?;
        let probs = g.softmax(scores, 3)?;
        let probs = g.reshape(probs, &[kv, grp * s, s])?;
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
        Ok(g.reshape(out, &[h, s, d])?)
    }

    fn block(&mut self, l: usize, x: Value, cos: Value, sin: Value) -> Result<Value, ModelError> {
        let cfg = self.cfg;
        let (hid, s, d) = (cfg.hidden_size, self.seq, cfg.head_dim);
        let (h, kv, inter) = (cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size);
        let eps = cfg.rms_norm_eps as f32;
        let p = format!("model.layers.{l}");
        let wn = self.w(&format!("{p}.input_layernorm.weight"), &[hid])?;
        let wq = self.w(&format!("{p}.self_attn.q_proj.weight"), &[h * d, hid])?;
        let wk = self.w(&format!("{p}.self_attn.k_proj.weight"), &[kv * d, hid])?;
        let wv = self.w(&format!("{p}.self_attn.v_proj.weight"), &[kv * d, hid])?;
        let wo = self.w(&format!("{p}.self_attn.o_proj.weight"), &[hid, h * d])?;
        let wpn = self.w(&format!("{p}.post_attention_layernorm.weight"), &[hid])?;
        let wg = self.w(&format!("{p}.mlp.gate_proj.weight"), &[inter, hid])?;
        let wu = self.w(&format!("{p}.mlp.up_proj.weight"), &[inter, hid])?;
        let wdn = self.w(&format!("{p}.mlp.down_proj.weight"), &[hid, inter])?;
        let g = &mut self.g;

        let hn = g.rms_norm(x, wn, eps)?;
        let heads = |g: &mut Graph, w: Value, n: usize| -> Result<Value, ModelError> {
            let y = g.linear(hn, w)?;
            let y = g.reshape(y, &[s, n, d])?;
            Ok(g.transpose(y, &[1, 0, 2])?)
        };
        let q = heads(g, wq, h)?;
        let k = heads(g, wk, kv)?;
        let v = heads(g, wv, kv)?;
        let q = g.rope(q, cos, sin)?;
        let k = g.rope(k, cos, sin)?;
        let a = self.attention(q, k, v)?;
        let g = &mut self.g;
        let a = g.transpose(a, &[1, 0, 2])?;
        let a = g.reshape(a, &[s, h * d])?;
        let o = g.linear(a, wo)?;
        let x = g.add(x, o)?;

        let hn = g.rms_norm(x, wpn, eps)?;
        let gate = g.linear(hn, wg)?;
        let up = g.linear(hn, wu)?;
        let act = g.silu(gate)?;
        let m = g.mul(act, up)?;
        let down = g.linear(m, wdn)?;
        Ok(g.add(x, down)?)
    }
}

/// Builds the forward graph `tensor<1xSEQxi32> -> tensor<SEQxi32>`.
pub fn build_graph(cfg: &LlamaConfig, opts: &GraphOptions) -> Result<Graph, ModelError> {
    cfg.validate()?;
    let seq = opts.seq;
    if seq == 0 {
        return Err(ModelError("SEQ must be at least 1".into()));
    }
    if seq > cfg.max_position_embeddings {
        return Err(ModelError(format!(
            "SEQ {seq} exceeds the model's max_position_embeddings ({})",
            cfg.max_position_embeddings
        )));
    }
    if let Some(w) = cfg.sliding_window {
        if w < seq {
            return Err(ModelError(format!(
                "sliding_window {w} is narrower than SEQ {seq}: sliding-window attention is not supported (use SEQ <= {w})"
            )));
        }
    }
    let (hid, v) = (cfg.hidden_size, cfg.vocab_size);
    let mut b = Builder {
        g: Graph::new(opts.function.clone()),
        cfg,
        wd: opts.weight_dtype,
        seq,
    };
    let ids = b.g.input(TensorType::new(DType::I32, &[1, seq]));
    let ids = b.g.reshape(ids, &[seq])?;
    let emb = b.w("model.embed_tokens.weight", &[v, hid])?;
    let rows = b.g.gather_rows(emb, ids)?;
    // A barrier keeps IREE from fusing the gather into the first RMSNorm's
    // reduction, which its Vulkan codegen for Mali (`valhall`) cannot
    // legalize (`memref.alloc … memref<1xindex, Workgroup>`).
    let mut x = b.g.optimization_barrier(rows)?;
    let (cos, sin) = rope_tables(cfg, seq);
    let cos = b.g.dense(DType::F32, &[seq, cfg.head_dim], cos)?;
    let sin = b.g.dense(DType::F32, &[seq, cfg.head_dim], sin)?;
    for l in 0..cfg.num_layers {
        x = b.block(l, x, cos, sin)?;
    }
    let wn = b.w("model.norm.weight", &[hid])?;
    let x = b.g.rms_norm(x, wn, cfg.rms_norm_eps as f32)?;
    let head = if cfg.tie_word_embeddings {
        emb
    } else {
        b.w("lm_head.weight", &[v, hid])?
    };
    let logits = b.g.linear(x, head)?;
    let out = b.g.argmax(logits, 1)?;
    b.g.set_outputs(&[out]);
    Ok(b.g)
}
