//! Qwen2 / Qwen2.5 (`model_type: qwen2`, GGUF `qwen2`): the Llama block
//! plus q/k/v projection biases (`self_attn.{q,k,v}_proj.bias`, external
//! parameters like every weight); SwiGLU, no o_proj bias; sliding-window
//! attention only when `use_sliding_window` is set, on the layers
//! `layer_types` marks. llama.cpp stores Qwen2's Q/K unpermuted (NEOX RoPE) and the biases
//! as `blk.N.attn_{q,k,v}.bias`.

use super::{sliding_layers, standard_block_tensor, Family, Undo};
use crate::models::config::{DecoderConfig, RawConfig};
use crate::models::ModelError;
use crate::params::gguf::GgufFile;
use serde_json::Value as Json;

pub(super) fn hf_config(raw: &RawConfig) -> Result<DecoderConfig, ModelError> {
    raw.expect_activation("silu")?;
    if raw.mlp_bias == Some(true) {
        return Err(ModelError::unsupported(
            "mlp_bias = true for qwen2",
            "MLP without biases",
        ));
    }
    let mut cfg = raw.common(Family::Qwen2)?;
    cfg.arch.qkv_bias = true;
    qwen_windows(raw, &mut cfg)?;
    Ok(cfg)
}

/// Qwen2's and Qwen3's sliding windows, as transformers reads them: the
/// window applies only with `use_sliding_window`, and only to the layers
/// `layer_types` marks "sliding_attention" (by default those at index ≥
/// `max_window_layers`).
pub(super) fn qwen_windows(raw: &RawConfig, cfg: &mut DecoderConfig) -> Result<(), ModelError> {
    let use_sliding = raw
        .extra
        .get("use_sliding_window")
        .and_then(Json::as_bool)
        .unwrap_or(false);
    let first = raw.extra_f64("max_window_layers").unwrap_or(28.0);
    cfg.arch.sliding_layers = Some(sliding_layers(raw, cfg.num_layers, |l| l as f64 >= first)?);
    cfg.sliding_window = if use_sliding {
        raw.sliding_window
    } else {
        None
    };
    Ok(())
}

pub(super) fn gguf_config(
    mut common: DecoderConfig,
    _file: &GgufFile,
) -> Result<DecoderConfig, ModelError> {
    common.arch.qkv_bias = true;
    Ok(common)
}

pub(super) fn gguf_block_tensor(part: &str) -> Option<(&'static str, Undo)> {
    Some((standard_block_tensor(part)?, Undo::None))
}
