//! Qwen3 (`model_type: qwen3`, GGUF `qwen3`): Qwen2's block without the
//! q/k/v biases and with a per-head RMSNorm on queries and keys before RoPE
//! (`self_attn.{q,k}_norm.weight`, `[head_dim]`); `head_dim` is read (128 in
//! the released models, ≠ hidden/heads). Sliding windows as Qwen2 (only
//! with `use_sliding_window`, on the `layer_types` layers). llama.cpp stores
//! Q/K unpermuted and the head norms as `blk.N.attn_{q,k}_norm.weight`.

use super::{standard_block_tensor, Family, Undo};
use crate::models::config::{DecoderConfig, RawConfig};
use crate::models::ModelError;
use crate::params::gguf::GgufFile;

pub(super) fn hf_config(raw: &RawConfig) -> Result<DecoderConfig, ModelError> {
    // Qwen3's attention_bias would put biases on q, k, v and o: not supported.
    raw.reject_biases()?;
    raw.expect_activation("silu")?;
    let mut cfg = raw.common(Family::Qwen3)?;
    cfg.arch.qk_norm = true;
    super::qwen2::qwen_windows(raw, &mut cfg)?;
    Ok(cfg)
}

pub(super) fn gguf_config(
    mut common: DecoderConfig,
    _file: &GgufFile,
) -> Result<DecoderConfig, ModelError> {
    common.arch.qk_norm = true;
    Ok(common)
}

pub(super) fn gguf_block_tensor(part: &str) -> Option<(&'static str, Undo)> {
    let hf = match part {
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        p if p.ends_with(".bias") => return None,
        p => standard_block_tensor(p)?,
    };
    Some((hf, Undo::None))
}
