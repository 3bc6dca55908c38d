//! Model families: one file each, mapping a family's `config.json` keys,
//! GGUF metadata and tensor names onto the shared decoder
//! (`models/decoder.rs`, configured by [`Arch`](super::Arch)), and
//! [`DecoderConfig::from_hf_json`], which hands a `config.json` to its
//! family's file.
//!
//! Adding a family (see `spec/models.md`): a [`Family`] variant (in
//! `models/config.rs`), one line in each `match` below, and a file with
//! `hf_config` (and, for GGUF input, `gguf_config` and `gguf_block_tensor`).

mod gemma;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;

use super::config::{required, DecoderConfig, Family, RawConfig};
use super::ModelError;
use crate::params::gguf::GgufFile;
use std::path::Path;

impl Family {
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

impl DecoderConfig {
    /// Reads an HF `config.json`.
    pub fn from_hf_json_file(path: &Path) -> Result<DecoderConfig, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| crate::util::IoError::new(path, e))?;
        Self::from_hf_json(&text).map_err(|e| e.in_file(path))
    }

    /// Parses the text of an HF `config.json`.
    pub fn from_hf_json(text: &str) -> Result<DecoderConfig, ModelError> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|source| ModelError::ConfigJson { source })?;
        let family = Family::parse(&required(raw.model_type.clone(), "model_type")?)?;
        let cfg = family.hf_config(&raw)?;
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Whether GGUF tensor `name` is read into the config rather than being a
/// weight (Phi-3's LongRoPE factors, llama.cpp's RoPE frequency factors).
pub(crate) fn config_tensor(name: &str, cfg: &DecoderConfig) -> bool {
    let phi3 = cfg.family == Family::Phi3
        && [phi3::ROPE_FACTORS_SHORT, phi3::ROPE_FACTORS_LONG].contains(&name);
    let freqs = name == ROPE_FREQS
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
    let bad = || ModelError::ConfigType {
        file: "config.json",
        key: "layer_types".into(),
        expected: "a list of \"sliding_attention\" / \"full_attention\"",
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

/// llama.cpp's RoPE frequency factors (read into the config, not a weight).
pub(crate) const ROPE_FREQS: &str = "rope_freqs.weight";

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
