//! Model families: one file each, mapping a family's `config.json` keys,
//! GGUF metadata and tensor names onto the shared decoder
//! (`models/decoder.rs`, configured by [`Arch`](super::Arch)).
//!
//! Adding a family (see `spec/models.md`): a variant here, one line in each
//! `match` below, and a file with `hf_config` (and, for GGUF input,
//! `gguf_config` and `gguf_block_tensor`).

mod gemma;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;

use super::config::{DecoderConfig, RawConfig};
use super::ModelError;
use crate::params::gguf::GgufFile;
use serde::{Deserialize, Serialize};

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

    /// The hyperparameters of an HF `config.json` of this family.
    pub(crate) fn hf_config(self, raw: &RawConfig) -> Result<DecoderConfig, ModelError> {
        match self {
            Family::Llama | Family::Mistral => llama::hf_config(self, raw),
            Family::Qwen2 => qwen2::hf_config(raw),
            Family::Qwen3 => qwen3::hf_config(raw),
            Family::Phi3 => phi3::hf_config(raw),
            Family::Gemma | Family::Gemma2 | Family::Gemma3 => gemma::hf_config(self, raw),
        }
    }

    /// Adjusts the hyperparameters read from GGUF metadata (`common`, read
    /// the same way for every family) for this family.
    pub(crate) fn gguf_config(
        self,
        common: DecoderConfig,
        file: &GgufFile,
    ) -> Result<DecoderConfig, ModelError> {
        match self {
            Family::Llama | Family::Mistral => llama::gguf_config(common, file),
            Family::Qwen2 => qwen2::gguf_config(common, file),
            Family::Qwen3 => qwen3::gguf_config(common, file),
            Family::Phi3 => phi3::gguf_config(common, file),
            Family::Gemma | Family::Gemma2 | Family::Gemma3 => {
                gemma::gguf_config(self, common, file)
            }
        }
    }

    /// Maps the per-block part of a GGUF tensor name (`attn_q.weight` of
    /// `blk.N.attn_q.weight`) to the HF one (`self_attn.q_proj.weight`),
    /// with the row permutation to undo.
    pub(crate) fn gguf_block_tensor(
        self,
        part: &str,
        cfg: &DecoderConfig,
    ) -> Option<(&'static str, Undo)> {
        match self {
            Family::Llama | Family::Mistral => llama::gguf_block_tensor(part, cfg),
            Family::Qwen2 => qwen2::gguf_block_tensor(part),
            Family::Qwen3 => qwen3::gguf_block_tensor(part),
            Family::Phi3 => phi3::gguf_block_tensor(part),
            Family::Gemma | Family::Gemma2 | Family::Gemma3 => gemma::gguf_block_tensor(self, part),
        }
    }
}

/// Whether GGUF tensor `name` is read into the config rather than being a
/// weight (Phi-3's LongRoPE factors, llama.cpp's RoPE frequency factors).
pub(crate) fn config_tensor(name: &str, cfg: &DecoderConfig) -> bool {
    let phi3 = cfg.family == Family::Phi3
        && [phi3::ROPE_FACTORS_SHORT, phi3::ROPE_FACTORS_LONG].contains(&name);
    let freqs = name == super::checkpoint::ROPE_FREQS
        && matches!(cfg.rope_scaling, super::config::RopeScaling::Factors { .. });
    phi3 || freqs
}

/// Which layers are local (sliding-window) attention, from `layer_types`
/// (`"sliding_attention"` / `"full_attention"`), or `default(l)` when the
/// config has no such list.
pub(crate) fn sliding_layers(
    raw: &RawConfig,
    num_layers: usize,
    default: impl Fn(usize) -> bool,
) -> Result<Vec<bool>, ModelError> {
    let Some(types) = raw.extra.get("layer_types").filter(|v| !v.is_null()) else {
        return Ok((0..num_layers).map(default).collect());
    };
    let bad = || {
        ModelError::Invalid(
            "config.json: \"layer_types\" must be a list of \"sliding_attention\" / \"full_attention\""
                .into(),
        )
    };
    types
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|t| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(bad()),
        })
        .collect()
}

/// What llama.cpp's converter did to a tensor that kiln undoes on reading
/// a GGUF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undo {
    /// Stored as in HF.
    None,
    /// Q/K rows permuted for llama.cpp's interleaved RoPE, with this many
    /// heads (see [`super::checkpoint::unpermute_rows`]).
    RopeHeads(usize),
    /// Stored with 1 added: the norm weights of a family whose RMSNorm
    /// scales by `1 + w` (Gemma), since llama.cpp's scales by the weight.
    PlusOne,
}

/// The block tensors every llama.cpp conversion names the same way, as
/// (GGUF part, HF part), Q and K first.
pub(crate) const GGUF_BLOCK_NAMES: &[(&str, &str)] = &[
    ("attn_q.weight", "self_attn.q_proj.weight"),
    ("attn_k.weight", "self_attn.k_proj.weight"),
    ("attn_v.weight", "self_attn.v_proj.weight"),
    ("attn_q.bias", "self_attn.q_proj.bias"),
    ("attn_k.bias", "self_attn.k_proj.bias"),
    ("attn_v.bias", "self_attn.v_proj.bias"),
    ("attn_norm.weight", "input_layernorm.weight"),
    ("attn_output.weight", "self_attn.o_proj.weight"),
    ("ffn_norm.weight", "post_attention_layernorm.weight"),
    ("ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn_down.weight", "mlp.down_proj.weight"),
];

/// The HF part of a standard GGUF block tensor part.
pub(crate) fn standard_block_tensor(part: &str) -> Option<&'static str> {
    GGUF_BLOCK_NAMES
        .iter()
        .find(|(g, _)| *g == part)
        .map(|(_, h)| *h)
}
