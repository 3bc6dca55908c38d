//! Gemma (`model_type: gemma`) and Gemma 2 (`gemma2`): embeddings scaled by
//! √hidden, RMSNorm by `1 + w`, GeGLU (tanh-approximated GELU), `head_dim`
//! independent of hidden/heads, tied head. Gemma 2 adds the sandwich norms
//! (post-attention, pre- and post-MLP), `query_pre_attn_scalar` as the
//! attention scale, soft-capping of attention scores and final logits, and
//! alternating sliding-window (local) / global layers.
//!
//! GGUF (llama.cpp's converter, architectures `gemma` and `gemma2`): every
//! norm weight is stored with the 1 added (llama.cpp's RMSNorm scales by
//! the weight), so kiln subtracts it; Q/K are not permuted (NEOX RoPE); the
//! head is always tied (the converter drops `lm_head.weight`, llama.cpp's
//! Gemma reuses `token_embd`). Gemma 2's sandwich norms are
//! `post_attention_norm`, `ffn_norm` (pre-MLP) and `post_ffw_norm`; its
//! soft-capping and window are metadata (llama.cpp's defaults 50, 30 and
//! 4096 when absent), even layers local. GGUF has no
//! `query_pre_attn_scalar`: llama.cpp scales by `1/√head_dim`, except for
//! the 46-layer Gemma 2 27B (`1/√(hidden/heads)`); kiln does the same.

use super::{sliding_layers, Family, Undo};
use crate::models::config::{Activation, DecoderConfig, RawConfig};
use crate::models::ModelError;
use crate::params::gguf::{GgufFile, GgufValue};
use serde_json::Value as Json;

/// An optional number with transformers' default when the key is absent
/// (`null` = off).
fn opt_f64(raw: &RawConfig, key: &str, default: Option<f64>) -> Result<Option<f64>, ModelError> {
    match raw.extra.get(key) {
        None => Ok(default),
        Some(Json::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| ModelError(format!("config.json: \"{key}\" must be a number or null"))),
    }
}

pub(super) fn hf_config(family: Family, raw: &RawConfig) -> Result<DecoderConfig, ModelError> {
    let ty = family.name();
    raw.reject_biases()?;
    if raw.extra.get("use_bidirectional_attention") == Some(&Json::Bool(true)) {
        return Err(ModelError(format!(
            "config.json: use_bidirectional_attention = true is not supported for {ty} (supported: causal attention)"
        )));
    }
    // Gemma reads hidden_act (transformers maps the legacy "gelu" of the
    // original releases to the tanh approximation); Gemma 2 reads
    // hidden_activation.
    let (key, act) = match family {
        Family::Gemma2 => ("hidden_activation", raw.extra_str("hidden_activation")),
        _ => ("hidden_act", raw.hidden_act.as_deref()),
    };
    let act = act.unwrap_or("gelu_pytorch_tanh");
    let tanh_gelu = act == "gelu_pytorch_tanh" || (family == Family::Gemma && act == "gelu");
    if !tanh_gelu {
        return Err(ModelError(format!(
            "config.json: {key} \"{act}\" is not supported for {ty} (supported: gelu_pytorch_tanh{})",
            if family == Family::Gemma { ", gelu" } else { "" }
        )));
    }
    let mut cfg = raw.common(family)?;
    // transformers' Gemma defaults differ from Llama's: head_dim 256 (not
    // hidden/heads) and a tied head.
    if raw.head_dim.is_none() {
        cfg.head_dim = 256;
    }
    cfg.tie_word_embeddings = raw.tie_word_embeddings.unwrap_or(true);
    gemma_arch(&mut cfg);
    if family == Family::Gemma2 {
        cfg.arch.sandwich_norms = true;
        cfg.arch.query_pre_attn_scalar = opt_f64(raw, "query_pre_attn_scalar", Some(256.0))?;
        cfg.arch.attn_logit_softcapping = opt_f64(raw, "attn_logit_softcapping", Some(50.0))?;
        cfg.arch.final_logit_softcapping = opt_f64(raw, "final_logit_softcapping", Some(30.0))?;
        // Layers marked "sliding_attention" (by default the even ones) see
        // only the last sliding_window keys.
        cfg.arch.sliding_layers = Some(sliding_layers(raw, cfg.num_layers, |l| (l + 1) % 2 == 1)?);
    } else {
        cfg.sliding_window = None;
    }
    Ok(cfg)
}

/// What Gemma and Gemma 2 set beside the common decoder, from either source.
fn gemma_arch(cfg: &mut DecoderConfig) {
    cfg.arch.activation = Activation::GeluTanh;
    cfg.arch.norm_plus_one = true;
    cfg.arch.scale_embeddings = true;
}

pub(super) fn gguf_config(
    family: Family,
    mut cfg: DecoderConfig,
    file: &GgufFile,
) -> Result<DecoderConfig, ModelError> {
    let a = family.name();
    let meta_f = |k: &str| {
        file.get_metadata(&format!("{a}.{k}"))
            .and_then(GgufValue::as_f64)
    };
    if !cfg.tie_word_embeddings {
        return Err(ModelError(format!(
            "tensor \"output.weight\" in a {a} GGUF: llama.cpp's {a} ties the head to token_embd and ignores it, so kiln cannot tell which one the file means"
        )));
    }
    gemma_arch(&mut cfg);
    if family == Family::Gemma2 {
        cfg.arch.sandwich_norms = true;
        cfg.arch.attn_logit_softcapping = Some(meta_f("attn_logit_softcapping").unwrap_or(50.0));
        cfg.arch.final_logit_softcapping = Some(meta_f("final_logit_softcapping").unwrap_or(30.0));
        cfg.sliding_window = Some(
            file.get_metadata("gemma2.attention.sliding_window")
                .and_then(GgufValue::as_u64)
                .map_or(4096, |w| w as usize),
        );
        cfg.arch.sliding_layers = Some((0..cfg.num_layers).map(|l| l % 2 == 0).collect());
        let scalar = if cfg.num_layers == 46 {
            cfg.hidden_size / cfg.num_heads.max(1)
        } else {
            cfg.head_dim
        };
        cfg.arch.query_pre_attn_scalar = Some(scalar as f64);
    } else {
        cfg.sliding_window = None;
    }
    Ok(cfg)
}

pub(super) fn gguf_block_tensor(family: Family, part: &str) -> Option<(&'static str, Undo)> {
    let hf = match (family, part) {
        (_, "attn_norm.weight") => "input_layernorm.weight",
        (_, "attn_q.weight") => "self_attn.q_proj.weight",
        (_, "attn_k.weight") => "self_attn.k_proj.weight",
        (_, "attn_v.weight") => "self_attn.v_proj.weight",
        (_, "attn_output.weight") => "self_attn.o_proj.weight",
        (_, "ffn_gate.weight") => "mlp.gate_proj.weight",
        (_, "ffn_up.weight") => "mlp.up_proj.weight",
        (_, "ffn_down.weight") => "mlp.down_proj.weight",
        (Family::Gemma2, "post_attention_norm.weight") => "post_attention_layernorm.weight",
        (Family::Gemma2, "ffn_norm.weight") => "pre_feedforward_layernorm.weight",
        (Family::Gemma2, "post_ffw_norm.weight") => "post_feedforward_layernorm.weight",
        (_, "ffn_norm.weight") => "post_attention_layernorm.weight",
        _ => return None,
    };
    let undo = if hf.ends_with("norm.weight") {
        Undo::PlusOne
    } else {
        Undo::None
    };
    Some((hf, undo))
}
