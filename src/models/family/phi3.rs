//! Phi-3 / Phi-3.5 / Phi-4-mini (`model_type: phi3`): one fused
//! `self_attn.qkv_proj.weight` (`[(H + 2·KV)·D, hidden]`, rows q then k then
//! v) and one fused `mlp.gate_up_proj.weight` (`[2·I, hidden]`, gate rows
//! first), both kept as one parameter each and split in-graph with slices;
//! RoPE on the leading `partial_rotary_factor · head_dim` dims of each head;
//! LongRoPE (`longrope`, formerly `su`) scaling. No GGUF input yet.

use super::Family;
use crate::models::config::{DecoderConfig, RawConfig};
use crate::models::ModelError;
use serde_json::Value as Json;

pub(super) fn hf_config(raw: &RawConfig) -> Result<DecoderConfig, ModelError> {
    raw.reject_biases()?;
    raw.expect_activation("silu")?;
    let mut cfg = raw.common(Family::Phi3)?;
    cfg.arch.fused_qkv = true;
    cfg.arch.fused_gate_up = true;
    // transformers 5.x: rope_parameters.partial_rotary_factor; 4.x: top level.
    let factor = match &raw.rope_parameters {
        Some(Json::Object(p)) if p.contains_key("partial_rotary_factor") => {
            p.get("partial_rotary_factor").and_then(Json::as_f64)
        }
        _ => raw.extra_f64("partial_rotary_factor"),
    }
    .unwrap_or(1.0);
    if !(factor > 0.0 && factor <= 1.0) {
        return Err(ModelError(format!(
            "config.json: partial_rotary_factor must be in (0, 1], found {factor}"
        )));
    }
    // transformers: dim = int(head_dim * partial_rotary_factor).
    let dim = (cfg.head_dim as f64 * factor) as usize;
    if dim != cfg.head_dim {
        cfg.arch.rotary_dim = Some(dim);
    }
    Ok(cfg)
}
