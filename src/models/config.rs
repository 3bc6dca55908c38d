//! The model hyperparameters kiln builds graphs from, and their reading
//! from an HF `config.json` (both the transformers 4.x and 5.x spellings).

use super::ModelError;
use serde::Deserialize;
use serde_json::Value as Json;
use std::path::Path;

/// Model families kiln builds a graph for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Llama 1/2/3 and SmolLM.
    Llama,
    /// Mistral (Llama graph; sliding window must cover SEQ).
    Mistral,
}

impl Family {
    /// The `model_type` / `general.architecture` spelling.
    pub fn name(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Mistral => "mistral",
        }
    }

    /// Families kiln supports, for error messages.
    pub const SUPPORTED: &'static str = "llama, mistral";

    /// Parses a `model_type`.
    pub fn parse(s: &str) -> Result<Family, ModelError> {
        match s {
            "llama" => Ok(Family::Llama),
            "mistral" => Ok(Family::Mistral),
            other => Err(ModelError(format!(
                "unsupported model_type \"{other}\" (supported: {})",
                Family::SUPPORTED
            ))),
        }
    }
}

/// RoPE frequency scaling.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
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
}

/// Hyperparameters of a Llama-family decoder.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct LlamaConfig {
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
}

impl LlamaConfig {
    /// Checks the hyperparameters agree with each other.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError(m));
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
                return bad(format!("config: {name} must be positive"));
            }
        }
        if self.num_heads % self.num_kv_heads != 0 {
            return bad(format!(
                "config: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                self.num_heads, self.num_kv_heads
            ));
        }
        if self.head_dim % 2 != 0 {
            return bad(format!(
                "config: head_dim ({}) must be even for RoPE",
                self.head_dim
            ));
        }
        if self.vocab_size > i32::MAX as usize {
            return bad(format!(
                "config: vocab_size {} does not fit i32 ids",
                self.vocab_size
            ));
        }
        Ok(())
    }

    /// Reads an HF `config.json`.
    pub fn from_hf_json_file(path: &Path) -> Result<LlamaConfig, ModelError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ModelError(format!("{}: {e}", path.display())))?;
        Self::from_hf_json(&text).map_err(|e| ModelError(format!("{}: {}", path.display(), e.0)))
    }

    /// Parses the text of an HF `config.json`.
    pub fn from_hf_json(text: &str) -> Result<LlamaConfig, ModelError> {
        let raw: RawConfig = serde_json::from_str(text)
            .map_err(|e| ModelError(format!("invalid config.json: {e}")))?;
        raw.into_config()
    }
}

/// `config.json` as written by transformers, every key optional so that a
/// missing one is reported by name.
#[derive(Debug, Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    vocab_size: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_scaling: Option<Json>,
    rope_parameters: Option<Json>,
    tie_word_embeddings: Option<bool>,
    max_position_embeddings: Option<usize>,
    sliding_window: Option<usize>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    hidden_act: Option<String>,
    bos_token_id: Option<Json>,
    eos_token_id: Option<Json>,
}

fn required<T>(v: Option<T>, key: &str) -> Result<T, ModelError> {
    v.ok_or_else(|| ModelError(format!("config.json: missing required key \"{key}\"")))
}

fn ids(v: &Option<Json>, key: &str) -> Result<Vec<u32>, ModelError> {
    let bad = || {
        ModelError(format!(
            "config.json: \"{key}\" must be an id or a list of ids"
        ))
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
    obj.get(key)
        .and_then(Json::as_f64)
        .ok_or_else(|| ModelError(format!("config.json: {ctx} needs a number \"{key}\"")))
}

/// Reads RoPE scaling from a `rope_scaling` or `rope_parameters` object.
fn parse_rope(obj: &serde_json::Map<String, Json>, ctx: &str) -> Result<RopeScaling, ModelError> {
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
        other => Err(ModelError(format!(
            "config.json: unsupported rope_type \"{other}\" in {ctx} (supported: default, linear, llama3)"
        ))),
    }
}

impl RawConfig {
    fn into_config(self) -> Result<LlamaConfig, ModelError> {
        let family = Family::parse(&required(self.model_type.clone(), "model_type")?)?;
        if self.attention_bias == Some(true) {
            return Err(ModelError(
                "config.json: attention_bias = true is not supported yet (supported: attention without biases)".into(),
            ));
        }
        if self.mlp_bias == Some(true) {
            return Err(ModelError(
                "config.json: mlp_bias = true is not supported yet (supported: MLP without biases)"
                    .into(),
            ));
        }
        if let Some(act) = &self.hidden_act {
            if act != "silu" {
                return Err(ModelError(format!(
                    "config.json: hidden_act \"{act}\" is not supported (supported: silu)"
                )));
            }
        }
        let hidden = required(self.hidden_size, "hidden_size")?;
        let heads = required(self.num_attention_heads, "num_attention_heads")?;
        let head_dim = match self.head_dim {
            Some(d) => d,
            None if heads > 0 && hidden % heads == 0 => hidden / heads,
            None => {
                return Err(ModelError(format!(
                    "config.json: hidden_size {hidden} is not divisible by num_attention_heads {heads} and head_dim is absent"
                )))
            }
        };
        // transformers 5.x: rope_parameters {rope_theta, rope_type, ...};
        // older: top-level rope_theta and rope_scaling.
        let mut rope_theta = self.rope_theta;
        let mut scaling = RopeScaling::Default;
        if let Some(Json::Object(p)) = &self.rope_parameters {
            if let Some(t) = p.get("rope_theta").and_then(Json::as_f64) {
                rope_theta = Some(t);
            }
            scaling = parse_rope(p, "rope_parameters")?;
        }
        if let Some(Json::Object(s)) = &self.rope_scaling {
            scaling = parse_rope(s, "rope_scaling")?;
        }
        let eos = ids(&self.eos_token_id, "eos_token_id")?;
        let bos = ids(&self.bos_token_id, "bos_token_id")?.first().copied();
        let cfg = LlamaConfig {
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
        };
        cfg.validate()?;
        Ok(cfg)
    }
}
