//! Gemma (`model_type: gemma`) and Gemma 2 (`gemma2`): embeddings scaled by
//! √hidden, RMSNorm by `1 + w`, GeGLU (tanh-approximated GELU), `head_dim`
//! independent of hidden/heads, tied head. Gemma 2 adds the sandwich norms
//! (post-attention, pre- and post-MLP), `query_pre_attn_scalar` as the
//! attention scale, soft-capping of attention scores and final logits, and
//! alternating sliding-window (local) / global layers. No GGUF input yet
//! (llama.cpp stores Gemma's norm weights with the 1 added).

use super::{sliding_layers, Family};
use crate::models::config::{Activation, DecoderConfig, RawConfig};
use crate::models::ModelError;
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
    cfg.arch.activation = Activation::GeluTanh;
    cfg.arch.norm_plus_one = true;
    cfg.arch.scale_embeddings = true;
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
