//! Llama 1/2/3.x, SmolLM/SmolLM2 and Mistral: the reference decoder
//! (`Arch::default()`), SwiGLU, no biases; llama.cpp permutes Q/K rows.

use super::{standard_block_tensor, Family, Undo};
use crate::models::config::{DecoderConfig, RawConfig};
use crate::models::ModelError;
use crate::params::gguf::GgufFile;

pub(super) fn hf_config(family: Family, raw: &RawConfig) -> Result<DecoderConfig, ModelError> {
    raw.reject_biases()?;
    raw.expect_activation("silu")?;
    raw.common(family)
}

pub(super) fn gguf_config(
    common: DecoderConfig,
    _file: &GgufFile,
) -> Result<DecoderConfig, ModelError> {
    Ok(common)
}

pub(super) fn gguf_block_tensor(part: &str, cfg: &DecoderConfig) -> Option<(&'static str, Undo)> {
    let perm = match part {
        "attn_q.weight" => Undo::RopeHeads(cfg.num_heads),
        "attn_k.weight" => Undo::RopeHeads(cfg.num_kv_heads),
        p if p.ends_with(".bias") => return None,
        _ => Undo::None,
    };
    Some((standard_block_tensor(part)?, perm))
}
