//! Phi-3 / Phi-3.5 / Phi-4-mini (`model_type: phi3`): one fused
//! `self_attn.qkv_proj.weight` (`[(H + 2·KV)·D, hidden]`, rows q then k then
//! v) and one fused `mlp.gate_up_proj.weight` (`[2·I, hidden]`, gate rows
//! first), both kept as one parameter each and split in-graph with slices;
//! RoPE on the leading `partial_rotary_factor · head_dim` dims of each head;
//! LongRoPE (`longrope`, formerly `su`) scaling.
//!
//! GGUF (llama.cpp's converter, architecture `phi3`): the fused matrices
//! keep their HF layout as `blk.N.attn_qkv.weight` and `blk.N.ffn_up.weight`
//! (gate rows first), Q/K are not permuted, `phi3.rope.dimension_count` is
//! the rotated dims (no `key_length`: the head dim is hidden/heads),
//! `phi3.attention.sliding_window` is 0 for none, and LongRoPE is the
//! tensors `rope_factors_short.weight` / `rope_factors_long.weight` with
//! `phi3.rope.scaling.original_context_length` and
//! `phi3.rope.scaling.attn_factor`.

use super::{standard_block_tensor, Family, Undo};
use crate::models::config::{DecoderConfig, RawConfig, RopeScaling};
use crate::models::ModelError;
use crate::params::gguf::{GgufFile, GgufValue};
use serde_json::Value as Json;

pub(super) fn hf_config(raw: &RawConfig) -> Result<DecoderConfig, ModelError> {
    raw.reject_biases()?;
    raw.expect_activation("silu")?;
    let mut cfg = raw.common(Family::Phi3)?;
    cfg.arch.fused_qkv = true;
    cfg.arch.fused_gate_up = true;
    // transformers 5.x: rope_parameters.partial_rotary_factor; 4.x: top level.
    let (key, factor) = match &raw.rope_parameters {
        Some(Json::Object(p)) if p.contains_key("partial_rotary_factor") => (
            "rope_parameters.partial_rotary_factor",
            p.get("partial_rotary_factor").and_then(Json::as_f64),
        ),
        _ => (
            "partial_rotary_factor",
            raw.extra_f64("partial_rotary_factor"),
        ),
    };
    let factor = factor.unwrap_or(1.0);
    if !(factor > 0.0 && factor <= 1.0) {
        return Err(ModelError::ConfigValue {
            file: "config.json",
            key: key.into(),
            requirement: "must be in (0, 1]".into(),
            found: Some(factor.to_string()),
        });
    }
    // transformers: dim = int(head_dim * partial_rotary_factor).
    let dim = (cfg.head_dim as f64 * factor) as usize;
    if dim != cfg.head_dim {
        cfg.arch.rotary_dim = Some(dim);
    }
    Ok(cfg)
}

pub(super) fn gguf_config(
    mut cfg: DecoderConfig,
    file: &GgufFile,
) -> Result<DecoderConfig, ModelError> {
    let meta = |k: &str| file.get_metadata(&format!("phi3.{k}"));
    cfg.arch.fused_qkv = true;
    cfg.arch.fused_gate_up = true;
    if meta("attention.key_length").is_none() {
        cfg.head_dim = cfg.hidden_size.checked_div(cfg.num_heads).unwrap_or(0);
    }
    match meta("rope.dimension_count").and_then(GgufValue::as_u64) {
        Some(d) if d as usize != cfg.head_dim => cfg.arch.rotary_dim = Some(d as usize),
        _ => {}
    }
    cfg.sliding_window = meta("attention.sliding_window")
        .and_then(GgufValue::as_u64)
        .filter(|&w| w > 0)
        .map(|w| w as usize);
    let factors = |name: &str| -> Result<Option<Vec<f64>>, ModelError> {
        let Some(t) = file.tensor(name) else {
            return Ok(None);
        };
        let v = file.dequantize(t)?;
        Ok(Some(v.into_iter().map(f64::from).collect()))
    };
    match (factors(ROPE_FACTORS_SHORT)?, factors(ROPE_FACTORS_LONG)?) {
        (None, None) => {}
        (Some(short_factor), Some(long_factor)) => {
            let original = meta("rope.scaling.original_context_length")
                .and_then(GgufValue::as_u64)
                .ok_or_else(|| ModelError::MissingKey {
                    file: "GGUF metadata",
                    key: "phi3.rope.scaling.original_context_length".into(),
                })?;
            cfg.rope_scaling = RopeScaling::LongRope {
                short_factor,
                long_factor,
                original_max_position_embeddings: original as f64,
                factor: None,
                attention_factor: meta("rope.scaling.attn_factor").and_then(GgufValue::as_f64),
            };
        }
        (short, _) => {
            // LongRoPE needs both: name the one missing.
            let name = if short.is_none() {
                ROPE_FACTORS_SHORT
            } else {
                ROPE_FACTORS_LONG
            };
            return Err(ModelError::MissingTensor {
                name: name.into(),
                expected: None,
            });
        }
    }
    Ok(cfg)
}

/// llama.cpp's LongRoPE factor tensors (read into the config, not weights).
pub(crate) const ROPE_FACTORS_SHORT: &str = "rope_factors_short.weight";
/// See [`ROPE_FACTORS_SHORT`].
pub(crate) const ROPE_FACTORS_LONG: &str = "rope_factors_long.weight";

pub(super) fn gguf_block_tensor(part: &str) -> Option<(&'static str, Undo)> {
    let hf = match part {
        "attn_qkv.weight" => "self_attn.qkv_proj.weight",
        // llama.cpp names the fused gate/up matrix ffn_up.
        "ffn_up.weight" => "mlp.gate_up_proj.weight",
        "attn_q.weight" | "attn_k.weight" | "attn_v.weight" | "ffn_gate.weight" => return None,
        p if p.ends_with(".bias") => return None,
        p => standard_block_tensor(p)?,
    };
    Some((hf, Undo::None))
}
