//! The model hyperparameters kiln builds graphs from ([`DecoderConfig`]),
//! and the family-independent part of reading an HF `config.json` (both the
//! transformers 4.x and 5.x spellings). What differs by family is decided
//! in `models/family/<name>.rs`.

use super::ModelError;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// Model families kiln builds a graph for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Llama 1/2/3 and SmolLM.
    Llama,
    /// Mistral (Llama graph with a sliding window on every layer).
    Mistral,
    /// Qwen2 / Qwen2.5 (q/k/v biases).
    Qwen2,
    /// Qwen3 (per-head q/k RMSNorm, no biases).
    Qwen3,
    /// Phi-3 (fused qkv and gate/up, partial RoPE, LongRoPE).
    Phi3,
    /// Gemma (√hidden embedding scale, `1 + w` norms, GeGLU).
    Gemma,
    /// Gemma 2 (Gemma plus sandwich norms, soft-capping, local/global layers).
    Gemma2,
    /// Gemma 3 text (Gemma 2's block plus q/k head norms, 5 local : 1 global
    /// layers with their own RoPE bases).
    Gemma3,
}

impl Family {
    /// Every family, in the order error messages list them.
    pub const ALL: &'static [Family] = &[
        Family::Llama,
        Family::Mistral,
        Family::Qwen2,
        Family::Qwen3,
        Family::Phi3,
        Family::Gemma,
        Family::Gemma2,
        Family::Gemma3,
    ];

    /// The `model_type` / `general.architecture` spelling.
    pub fn name(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Phi3 => "phi3",
            Family::Gemma => "gemma",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3",
        }
    }

    /// Families kiln supports, comma-separated, for error messages.
    pub fn supported() -> String {
        Family::ALL
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parses a `model_type` (or a GGUF `general.architecture`).
    pub fn parse(s: &str) -> Result<Family, ModelError> {
        // transformers' text-only Gemma 3 (GGUF says gemma3).
        let s = if s == "gemma3_text" { "gemma3" } else { s };
        Family::ALL
            .iter()
            .copied()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                ModelError::unsupported(format!("model_type \"{s}\""), Family::supported())
            })
    }
}

/// RoPE frequency scaling.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "rope_type", rename_all = "lowercase")]
pub enum RopeScaling {
    /// Plain RoPE.
    Default,
    /// Positions divided by `factor`.
    Linear {
        /// Scale factor.
        factor: f64,
    },
    /// Llama 3.x frequency-dependent scaling.
    Llama3 {
        /// Scale factor.
        factor: f64,
        /// Low-frequency factor.
        low_freq_factor: f64,
        /// High-frequency factor.
        high_freq_factor: f64,
        /// Context length the model was trained on.
        original_max_position_embeddings: f64,
    },
    /// Inverse frequencies divided by one factor each: llama.cpp's
    /// `rope_freqs.weight`, which its converter writes for Llama 3.x
    /// scaling (the factors transformers' `llama3` rule divides by).
    #[serde(rename = "factors")]
    Factors {
        /// One divisor per rotary frequency (rotary dims / 2).
        factors: Vec<f64>,
    },
    /// LongRoPE (Phi-3's `longrope`, formerly `su`): inverse frequencies
    /// divided by per-dimension factors — `short_factor` when the table
    /// covers at most `original_max_position_embeddings` positions,
    /// `long_factor` beyond — and cos/sin multiplied by an attention factor
    /// (transformers' `_compute_longrope_parameters`).
    #[serde(rename = "longrope")]
    LongRope {
        /// Factors (one per rotary frequency) for short contexts.
        short_factor: Vec<f64>,
        /// Factors (one per rotary frequency) for long contexts.
        long_factor: Vec<f64>,
        /// Context length the model was pretrained with.
        original_max_position_embeddings: f64,
        /// `factor`, when the config gives it; otherwise
        /// `max_position_embeddings / original_max_position_embeddings`.
        factor: Option<f64>,
        /// Scale of cos/sin, when the config gives it; otherwise
        /// `√(1 + ln factor / ln original_max_position_embeddings)` (1 when
        /// `factor ≤ 1`).
        attention_factor: Option<f64>,
    },
}

/// Activation of the gated MLP (`down(act(gate(x)) · up(x))`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// SiLU (SwiGLU): Llama, Mistral, Qwen2, Phi-3.
    #[default]
    Silu,
    /// tanh-approximated GELU (GeGLU): Gemma.
    GeluTanh,
}

/// How a family's decoder block differs from Llama's: the knobs the shared
/// decoder (`models/decoder.rs`) reads. `Arch::default()` is Llama.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct Arch {
    /// q/k/v projections carry biases `self_attn.{q,k,v}_proj.bias` (Qwen2).
    pub qkv_bias: bool,
    /// Each query and key head is RMSNorm-ed over its `head_dim` before
    /// RoPE, with weights `self_attn.{q,k}_norm.weight` `[head_dim]` (Qwen3,
    /// Gemma 3).
    pub qk_norm: bool,
    /// The RoPE of the sliding-window layers, when it differs from the
    /// others' (Gemma 3: base 10 000 there, 1 000 000 on the global layers).
    pub sliding_rope: Option<SlidingRope>,
    /// q, k and v are one `self_attn.qkv_proj.weight` `[(H+2·KV)·D, hidden]`,
    /// split in-graph (Phi-3).
    pub fused_qkv: bool,
    /// gate and up are one `mlp.gate_up_proj.weight` `[2·I, hidden]`, split
    /// in-graph (Phi-3).
    pub fused_gate_up: bool,
    /// MLP activation.
    pub activation: Activation,
    /// RMSNorm scales by `1 + w` instead of `w` (Gemma).
    pub norm_plus_one: bool,
    /// Token embeddings are multiplied by `√hidden` (Gemma).
    pub scale_embeddings: bool,
    /// Leading dims of each head that RoPE rotates; `None` = all of them
    /// (Phi-3's `partial_rotary_factor`).
    pub rotary_dim: Option<usize>,
    /// Attention scores are scaled by `1/√s` with this `s` instead of
    /// `head_dim` (Gemma 2's `query_pre_attn_scalar`).
    pub query_pre_attn_scalar: Option<f64>,
    /// Attention scores pass through `c·tanh(x/c)` (Gemma 2).
    pub attn_logit_softcapping: Option<f64>,
    /// Logits pass through `c·tanh(x/c)` (Gemma 2).
    pub final_logit_softcapping: Option<f64>,
    /// Extra norms: after attention (`post_attention_layernorm`, applied to
    /// the attention output), before and after the MLP
    /// (`pre_feedforward_layernorm`, `post_feedforward_layernorm`) (Gemma 2).
    pub sandwich_norms: bool,
    /// Which layers attend only to the last `sliding_window` keys (when
    /// the config has a window): `None` = every layer (Mistral); `Some(v)`:
    /// layer `l` iff `v[l]` (Gemma 2's alternating local/global layers,
    /// Qwen2's `layer_types`).
    pub sliding_layers: Option<Vec<bool>>,
}

/// RoPE settings of the sliding-window layers ([`Arch::sliding_rope`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlidingRope {
    /// RoPE base.
    pub theta: f64,
    /// RoPE scaling.
    pub scaling: RopeScaling,
}

/// Hyperparameters of a decoder-only transformer of any supported family.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize, schemars::JsonSchema)]
pub struct DecoderConfig {
    /// Model family.
    pub family: Family,
    /// Embedding width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Number of decoder blocks.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (equal to `num_heads` for MHA, 1 for MQA).
    pub num_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base.
    pub rope_theta: f64,
    /// RoPE scaling.
    pub rope_scaling: RopeScaling,
    /// Whether the LM head reuses the token embedding.
    pub tie_word_embeddings: bool,
    /// Longest sequence the model supports.
    pub max_position_embeddings: usize,
    /// Sliding attention window (Mistral), if any.
    pub sliding_window: Option<usize>,
    /// Beginning-of-sequence id.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence ids (HF allows a list).
    pub eos_token_ids: Vec<u32>,
    /// What the family changes in the decoder block.
    #[serde(default)]
    pub arch: Arch,
}

/// The most decoder layers a config may ask for.
pub const MAX_LAYERS: usize = 1 << 12;
/// The most attention heads (or KV heads) a config may ask for.
pub const MAX_HEADS: usize = 1 << 12;
/// The widest hidden, intermediate or head dimension a config may ask for.
pub const MAX_WIDTH: usize = 1 << 20;
/// The largest vocabulary a config may ask for.
pub const MAX_VOCAB: usize = 1 << 24;
/// The longest context (positions, sliding window) a config may ask for.
pub const MAX_CONTEXT: usize = 1 << 24;

impl DecoderConfig {
    /// The attention window of layer `l` (it sees only the last `w` keys,
    /// itself included), if it has one.
    pub fn layer_window(&self, l: usize) -> Option<usize> {
        let w = self.sliding_window?;
        match &self.arch.sliding_layers {
            None => Some(w),
            Some(v) => v.get(l).copied().unwrap_or(false).then_some(w),
        }
    }

    /// Whether layer `l` is one of the sliding-window (local) layers.
    pub fn is_sliding_layer(&self, l: usize) -> bool {
        match &self.arch.sliding_layers {
            None => self.sliding_window.is_some(),
            Some(v) => v.get(l).copied().unwrap_or(false),
        }
    }

    /// The config whose RoPE layer `l` uses: this one, or with the
    /// sliding layers' base and scaling ([`Arch::sliding_rope`]).
    pub fn rope_config_of(&self, l: usize) -> std::borrow::Cow<'_, DecoderConfig> {
        match &self.arch.sliding_rope {
            Some(r) if self.is_sliding_layer(l) => {
                let mut c = self.clone();
                c.rope_theta = r.theta;
                c.rope_scaling = r.scaling.clone();
                c.arch.sliding_rope = None;
                std::borrow::Cow::Owned(c)
            }
            _ => std::borrow::Cow::Borrowed(self),
        }
    }

    /// Dims of each head that RoPE rotates.
    pub fn rotary_dim(&self) -> usize {
        self.arch.rotary_dim.unwrap_or(self.head_dim)
    }

    /// Checks the hyperparameters agree with each other, and that each
    /// size is positive and at most its bound ([`MAX_LAYERS`], …).
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |key: &str, requirement: String, found: Option<String>| {
            Err(ModelError::ConfigValue {
                file: "config",
                key: key.into(),
                requirement,
                found,
            })
        };
        for (name, v) in [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_layers),
            ("num_attention_heads", self.num_heads),
            ("num_key_value_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("vocab_size", self.vocab_size),
        ] {
            if v == 0 {
                return bad(name, "must be positive".into(), None);
            }
        }
        // Every size is bounded before any work grows with it: far above
        // any model kiln exports, far below what would run without end.
        for (name, v, most) in [
            ("hidden_size", self.hidden_size, MAX_WIDTH),
            ("intermediate_size", self.intermediate_size, MAX_WIDTH),
            ("num_hidden_layers", self.num_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_heads, MAX_HEADS),
            ("num_key_value_heads", self.num_kv_heads, MAX_HEADS),
            ("head_dim", self.head_dim, MAX_WIDTH),
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                MAX_CONTEXT,
            ),
            (
                "sliding_window",
                self.sliding_window.unwrap_or(1),
                MAX_CONTEXT,
            ),
        ] {
            if v > most {
                return bad(name, format!("must be at most {most}"), Some(v.to_string()));
            }
        }
        if self.num_heads % self.num_kv_heads != 0 {
            return Err(ModelError::Mismatch {
                file: "config",
                key: "num_attention_heads".into(),
                value: self.num_heads,
                relation: "is not a multiple of",
                other_key: "num_key_value_heads".into(),
                other: self.num_kv_heads,
            });
        }
        if let Some(v) = &self.arch.sliding_layers {
            if v.len() != self.num_layers {
                return bad(
                    "layer_types",
                    format!(
                        "must list one type per layer (num_hidden_layers is {})",
                        self.num_layers
                    ),
                    Some(v.len().to_string()),
                );
            }
        }
        if self.sliding_window == Some(0) {
            return bad("sliding_window", "must be positive".into(), None);
        }
        let rd = self.rotary_dim();
        if rd % 2 != 0 || rd == 0 || rd > self.head_dim {
            return bad(
                "rotary dims",
                format!(
                    "must be even, positive and at most head_dim ({})",
                    self.head_dim
                ),
                Some(rd.to_string()),
            );
        }
        if let RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position_embeddings: old,
            ..
        } = &self.rope_scaling
        {
            for (key, f) in [("short_factor", short_factor), ("long_factor", long_factor)] {
                if f.len() != rd / 2 || f.iter().any(|&x| !x.is_finite() || x <= 0.0) {
                    return bad(
                        &format!("longrope {key}"),
                        format!("must hold {} positive numbers (rotary dims / 2)", rd / 2),
                        Some(format!("{f:?}")),
                    );
                }
            }
            if !old.is_finite() || *old < 1.0 {
                return bad(
                    "longrope original_max_position_embeddings",
                    "must be at least 1".into(),
                    Some(old.to_string()),
                );
            }
        }
        if let RopeScaling::Factors { factors } = &self.rope_scaling {
            if factors.len() != rd / 2 || factors.iter().any(|&x| !x.is_finite() || x <= 0.0) {
                return bad(
                    "RoPE frequency factors",
                    format!("must be {} positive numbers (rotary dims / 2)", rd / 2),
                    Some(factors.len().to_string()),
                );
            }
        }
        if self.vocab_size > i32::MAX as usize {
            return bad(
                "vocab_size",
                "must fit i32 ids".into(),
                Some(self.vocab_size.to_string()),
            );
        }
        Ok(())
    }
}

/// `config.json` as written by transformers, every key optional so that a
/// missing one is reported by name. The keys every family shares are
/// fields; family files read their own keys from `extra`.
#[derive(Debug, Deserialize)]
pub(crate) struct RawConfig {
    pub(crate) model_type: Option<String>,
    pub(crate) hidden_size: Option<usize>,
    pub(crate) intermediate_size: Option<usize>,
    pub(crate) num_hidden_layers: Option<usize>,
    pub(crate) num_attention_heads: Option<usize>,
    pub(crate) num_key_value_heads: Option<usize>,
    pub(crate) head_dim: Option<usize>,
    pub(crate) vocab_size: Option<usize>,
    pub(crate) rms_norm_eps: Option<f64>,
    pub(crate) rope_theta: Option<f64>,
    pub(crate) rope_scaling: Option<Json>,
    pub(crate) rope_parameters: Option<Json>,
    pub(crate) tie_word_embeddings: Option<bool>,
    pub(crate) max_position_embeddings: Option<usize>,
    pub(crate) sliding_window: Option<usize>,
    pub(crate) attention_bias: Option<bool>,
    pub(crate) mlp_bias: Option<bool>,
    pub(crate) hidden_act: Option<String>,
    pub(crate) bos_token_id: Option<Json>,
    pub(crate) eos_token_id: Option<Json>,
    /// Every other key, for the family files.
    #[serde(flatten)]
    pub(crate) extra: serde_json::Map<String, Json>,
}

pub(crate) fn required<T>(v: Option<T>, key: &str) -> Result<T, ModelError> {
    v.ok_or_else(|| ModelError::MissingKey {
        file: "config.json",
        key: key.to_string(),
    })
}

pub(crate) fn ids(v: &Option<Json>, key: &str) -> Result<Vec<u32>, ModelError> {
    let bad = || ModelError::ConfigType {
        file: "config.json",
        key: key.to_string(),
        expected: "an id or a list of ids",
    };
    match v {
        None | Some(Json::Null) => Ok(vec![]),
        Some(Json::Number(n)) => Ok(vec![n
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(bad)?]),
        Some(Json::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(bad)
            })
            .collect(),
        Some(_) => Err(bad()),
    }
}

fn num(obj: &serde_json::Map<String, Json>, key: &str, ctx: &str) -> Result<f64, ModelError> {
    let v = nested(obj, key, ctx)?;
    v.as_f64().ok_or_else(|| nested_type(key, ctx, "a number"))
}

/// The value of `key` in the object `ctx` of config.json (`null` counts
/// as absent).
fn nested<'a>(
    obj: &'a serde_json::Map<String, Json>,
    key: &str,
    ctx: &str,
) -> Result<&'a Json, ModelError> {
    obj.get(key)
        .filter(|v| !v.is_null())
        .ok_or_else(|| ModelError::MissingKey {
            file: "config.json",
            key: format!("{ctx}.{key}"),
        })
}

/// `key` of the object `ctx` is not of type `expected`.
fn nested_type(key: &str, ctx: &str, expected: &'static str) -> ModelError {
    ModelError::ConfigType {
        file: "config.json",
        key: format!("{ctx}.{key}"),
        expected,
    }
}

/// Reads RoPE scaling from a `rope_scaling` or `rope_parameters` object.
/// `omax` is the pretraining length LongRoPE uses when the object has no
/// `original_max_position_embeddings`.
pub(crate) fn parse_rope(
    obj: &serde_json::Map<String, Json>,
    ctx: &str,
    omax: Option<f64>,
) -> Result<RopeScaling, ModelError> {
    let ty = obj
        .get("rope_type")
        .or_else(|| obj.get("type"))
        .and_then(Json::as_str)
        .unwrap_or("default");
    match ty {
        "default" => Ok(RopeScaling::Default),
        "linear" => Ok(RopeScaling::Linear {
            factor: num(obj, "factor", ctx)?,
        }),
        "llama3" => Ok(RopeScaling::Llama3 {
            factor: num(obj, "factor", ctx)?,
            low_freq_factor: num(obj, "low_freq_factor", ctx)?,
            high_freq_factor: num(obj, "high_freq_factor", ctx)?,
            original_max_position_embeddings: num(obj, "original_max_position_embeddings", ctx)?,
        }),
        "longrope" | "su" => Ok(RopeScaling::LongRope {
            short_factor: factors(obj, "short_factor", ctx)?,
            long_factor: factors(obj, "long_factor", ctx)?,
            original_max_position_embeddings: match obj
                .get("original_max_position_embeddings")
                .and_then(Json::as_f64)
                .or(omax)
            {
                Some(n) => n,
                None => num(obj, "original_max_position_embeddings", ctx)?,
            },
            factor: obj.get("factor").and_then(Json::as_f64),
            attention_factor: obj.get("attention_factor").and_then(Json::as_f64),
        }),
        other => Err(ModelError::unsupported(
            format!("rope_type \"{other}\" in {ctx}"),
            "default, linear, llama3, longrope",
        )),
    }
}

fn factors(
    obj: &serde_json::Map<String, Json>,
    key: &str,
    ctx: &str,
) -> Result<Vec<f64>, ModelError> {
    nested(obj, key, ctx)?
        .as_array()
        .and_then(|a| a.iter().map(Json::as_f64).collect::<Option<Vec<f64>>>())
        .ok_or_else(|| nested_type(key, ctx, "a list of numbers"))
}

impl RawConfig {
    /// A number-valued extra key (`null` counts as absent).
    pub(crate) fn extra_f64(&self, key: &str) -> Option<f64> {
        self.extra.get(key).and_then(Json::as_f64)
    }

    /// A string-valued extra key (`null` counts as absent).
    pub(crate) fn extra_str(&self, key: &str) -> Option<&str> {
        self.extra.get(key).and_then(Json::as_str)
    }

    /// Errors unless the MLP activation (`hidden_act`), when present, is `want`.
    pub(crate) fn expect_activation(&self, want: &str) -> Result<(), ModelError> {
        if let Some(act) = &self.hidden_act {
            if act != want {
                return Err(ModelError::unsupported(
                    format!(
                        "hidden_act \"{act}\" for {}",
                        self.model_type.as_deref().unwrap_or("this model")
                    ),
                    want,
                ));
            }
        }
        Ok(())
    }

    /// Errors when `attention_bias` or `mlp_bias` is set: the family has no
    /// such biases in kiln's graph.
    pub(crate) fn reject_biases(&self) -> Result<(), ModelError> {
        let ty = self.model_type.as_deref().unwrap_or("this model");
        if self.attention_bias == Some(true) {
            return Err(ModelError::unsupported(
                format!("attention_bias = true for {ty}"),
                "attention without biases; qwen2 has q/k/v biases",
            ));
        }
        if self.mlp_bias == Some(true) {
            return Err(ModelError::unsupported(
                format!("mlp_bias = true for {ty}"),
                "MLP without biases",
            ));
        }
        Ok(())
    }

    /// The hyperparameters every family reads the same way, with
    /// `Arch::default()`; family files adjust the result.
    pub(crate) fn common(&self, family: Family) -> Result<DecoderConfig, ModelError> {
        let hidden = required(self.hidden_size, "hidden_size")?;
        let heads = required(self.num_attention_heads, "num_attention_heads")?;
        let head_dim = match self.head_dim {
            Some(d) => d,
            None if heads > 0 && hidden % heads == 0 => hidden / heads,
            None => {
                return Err(ModelError::ConfigValue {
                    file: "config.json",
                    key: "head_dim".into(),
                    requirement: format!(
                        "must be given when hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads})"
                    ),
                    found: None,
                })
            }
        };
        // transformers 5.x: rope_parameters {rope_theta, rope_type, ...};
        // older: top-level rope_theta and rope_scaling.
        let mut rope_theta = self.rope_theta;
        let mut scaling = RopeScaling::Default;
        // LongRoPE's pretraining length: a top-level
        // original_max_position_embeddings (Phi-3) wins over the one in the
        // RoPE object, which defaults to max_position_embeddings (as
        // transformers' standardize_rope_params).
        let top_omax = self.extra_f64("original_max_position_embeddings");
        let omax = top_omax.or(self.max_position_embeddings.map(|m| m as f64));
        if let Some(Json::Object(p)) = &self.rope_parameters {
            if let Some(t) = p.get("rope_theta").and_then(Json::as_f64) {
                rope_theta = Some(t);
            }
            scaling = parse_rope(p, "rope_parameters", omax)?;
        }
        if let Some(Json::Object(s)) = &self.rope_scaling {
            scaling = parse_rope(s, "rope_scaling", omax)?;
        }
        if let (
            RopeScaling::LongRope {
                original_max_position_embeddings: o,
                ..
            },
            Some(top),
        ) = (&mut scaling, top_omax)
        {
            *o = top;
        }
        let eos = ids(&self.eos_token_id, "eos_token_id")?;
        let bos = ids(&self.bos_token_id, "bos_token_id")?.first().copied();
        Ok(DecoderConfig {
            family,
            hidden_size: hidden,
            intermediate_size: required(self.intermediate_size, "intermediate_size")?,
            num_layers: required(self.num_hidden_layers, "num_hidden_layers")?,
            num_heads: heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(heads),
            head_dim,
            vocab_size: required(self.vocab_size, "vocab_size")?,
            rms_norm_eps: self.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: rope_theta.unwrap_or(10000.0),
            rope_scaling: scaling,
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(false),
            max_position_embeddings: self.max_position_embeddings.unwrap_or(2048),
            sliding_window: self.sliding_window,
            bos_token_id: bos,
            eos_token_ids: eos,
            arch: Arch::default(),
        })
    }
}
