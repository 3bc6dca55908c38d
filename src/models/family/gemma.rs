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
use crate::models::config::{
    parse_rope, Activation, DecoderConfig, RawConfig, RopeScaling, SlidingRope,
};
use crate::models::ModelError;
use crate::params::gguf::{GgufFile, GgufValue};
use serde_json::Value as Json;

/// An optional number with transformers' default when the key is absent
/// (`null` = off).
fn opt_f64(raw: &RawConfig, key: &str, default: Option<f64>) -> Result<Option<f64>, ModelError> {
    match raw.extra.get(key) {
        None => Ok(default),
        Some(Json::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| ModelError::ConfigType {
            file: "config.json",
            key: key.to_string(),
            expected: "a number or null",
        }),
    }
}

pub(super) fn hf_config(family: Family, raw: &RawConfig) -> Result<DecoderConfig, ModelError> {
    let ty = family.name();
    raw.reject_biases()?;
    if raw.extra.get("use_bidirectional_attention") == Some(&Json::Bool(true)) {
        return Err(ModelError::unsupported(
            format!("use_bidirectional_attention = true for {ty}"),
            "causal attention",
        ));
    }
    if raw.extra.contains_key("text_config") {
        return Err(ModelError::unsupported(
            format!("multimodal {ty} checkpoint (text_config in config.json)"),
            "its text model alone, model_type gemma3_text",
        ));
    }
    // Gemma reads hidden_act (transformers maps the legacy "gelu" of the
    // original releases to the tanh approximation); Gemma 2 and 3 read
    // hidden_activation.
    let (key, act) = match family {
        Family::Gemma2 | Family::Gemma3 => {
            ("hidden_activation", raw.extra_str("hidden_activation"))
        }
        _ => ("hidden_act", raw.hidden_act.as_deref()),
    };
    let act = act.unwrap_or("gelu_pytorch_tanh");
    let tanh_gelu = act == "gelu_pytorch_tanh" || (family == Family::Gemma && act == "gelu");
    if !tanh_gelu {
        return Err(ModelError::unsupported(
            format!("{key} \"{act}\" for {ty}"),
            if family == Family::Gemma {
                "gelu_pytorch_tanh, gelu"
            } else {
                "gelu_pytorch_tanh"
            },
        ));
    }
    let mut cfg = raw.common(family)?;
    // transformers' Gemma defaults differ from Llama's: head_dim 256 (not
    // hidden/heads) and a tied head.
    if raw.head_dim.is_none() {
        cfg.head_dim = 256;
    }
    cfg.tie_word_embeddings = raw.tie_word_embeddings.unwrap_or(true);
    gemma_arch(&mut cfg);
    if family == Family::Gemma3 {
        gemma3_config(raw, &mut cfg)?;
    } else if family == Family::Gemma2 {
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

/// Gemma 3's knobs beside Gemma's: Gemma 2's sandwich norms and scalar,
/// q/k head norms, no soft-capping by default, every sixth layer global
/// (`layer_types`), and two RoPEs: `rope_parameters.full_attention` for
/// the global layers and `.sliding_attention` for the local ones
/// (transformers 5.x), or `rope_theta` / `rope_scaling` and
/// `rope_local_base_freq` (4.x).
fn gemma3_config(raw: &RawConfig, cfg: &mut DecoderConfig) -> Result<(), ModelError> {
    cfg.arch.sandwich_norms = true;
    cfg.arch.qk_norm = true;
    cfg.arch.query_pre_attn_scalar = opt_f64(raw, "query_pre_attn_scalar", Some(256.0))?;
    cfg.arch.attn_logit_softcapping = opt_f64(raw, "attn_logit_softcapping", None)?;
    cfg.arch.final_logit_softcapping = opt_f64(raw, "final_logit_softcapping", None)?;
    let pattern = raw
        .extra_f64("sliding_window_pattern")
        .unwrap_or(6.0)
        .max(1.0) as usize;
    cfg.arch.sliding_layers = Some(sliding_layers(raw, cfg.num_layers, |l| {
        (l + 1) % pattern != 0
    })?);
    if cfg.sliding_window.is_none() {
        cfg.sliding_window = Some(4096);
    }
    let omax = cfg.max_position_embeddings as f64;
    let nested = |kind: &str| match &raw.rope_parameters {
        Some(Json::Object(p)) => p.get(kind).and_then(Json::as_object),
        _ => None,
    };
    let theta_of = |o: &serde_json::Map<String, Json>, default: f64| {
        o.get("rope_theta")
            .and_then(Json::as_f64)
            .unwrap_or(default)
    };
    match (nested("full_attention"), nested("sliding_attention")) {
        (Some(full), Some(local)) => {
            cfg.rope_theta = theta_of(full, 1_000_000.0);
            cfg.rope_scaling = parse_rope(full, "rope_parameters.full_attention", Some(omax))?;
            cfg.arch.sliding_rope = Some(SlidingRope {
                theta: theta_of(local, 10_000.0),
                scaling: parse_rope(local, "rope_parameters.sliding_attention", Some(omax))?,
            });
        }
        (None, None) => {
            if raw.rope_theta.is_none() && raw.rope_parameters.is_none() {
                cfg.rope_theta = 1_000_000.0;
            }
            cfg.arch.sliding_rope = Some(SlidingRope {
                theta: raw.extra_f64("rope_local_base_freq").unwrap_or(10_000.0),
                scaling: RopeScaling::Default,
            });
        }
        (full, _) => {
            // One of the two without the other: name the one missing.
            let kind = if full.is_none() {
                "full_attention"
            } else {
                "sliding_attention"
            };
            let key = format!("rope_parameters.{kind}");
            let given = match &raw.rope_parameters {
                Some(Json::Object(p)) => p.get(kind).is_some_and(|v| !v.is_null()),
                _ => false,
            };
            return Err(if given {
                ModelError::ConfigType {
                    file: "config.json",
                    key,
                    expected: "an object",
                }
            } else {
                ModelError::MissingKey {
                    file: "config.json",
                    key,
                }
            });
        }
    }
    Ok(())
}

/// What every Gemma sets beside the common decoder, from either source.
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
        return Err(ModelError::unsupported(
            format!(
                "tensor \"output.weight\" in a {a} GGUF: llama.cpp's {a} ties the head to token_embd \
                 and ignores it, so kiln cannot tell which one the file means"
            ),
            format!("{a} GGUF files with the head tied to token_embd"),
        ));
    }
    gemma_arch(&mut cfg);
    if family == Family::Gemma {
        cfg.sliding_window = None;
        return Ok(cfg);
    }
    // Gemma 2 and 3: sandwich norms, local layers with a window, and
    // llama.cpp's attention scale 1/√head_dim, except for the 27B models
    // (46-layer Gemma 2, 62-layer Gemma 3), which scale by hidden/heads.
    cfg.arch.sandwich_norms = true;
    cfg.sliding_window = Some(
        file.get_metadata(&format!("{a}.attention.sliding_window"))
            .and_then(GgufValue::as_u64)
            .map_or(4096, |w| w as usize),
    );
    let layers_27b = if family == Family::Gemma3 { 62 } else { 46 };
    let scalar = if cfg.num_layers == layers_27b {
        cfg.hidden_size / cfg.num_heads.max(1)
    } else {
        cfg.head_dim
    };
    cfg.arch.query_pre_attn_scalar = Some(scalar as f64);
    if family == Family::Gemma3 {
        // llama.cpp: every sixth layer global, local layers at base 10 000
        // without scaling; soft-capping only when the file gives it.
        cfg.arch.qk_norm = true;
        cfg.arch.final_logit_softcapping = meta_f("final_logit_softcapping");
        cfg.arch.sliding_layers = Some((0..cfg.num_layers).map(|l| l % 6 < 5).collect());
        cfg.arch.sliding_rope = Some(SlidingRope {
            theta: 10_000.0,
            scaling: RopeScaling::Default,
        });
    } else {
        cfg.arch.attn_logit_softcapping = Some(meta_f("attn_logit_softcapping").unwrap_or(50.0));
        cfg.arch.final_logit_softcapping = Some(meta_f("final_logit_softcapping").unwrap_or(30.0));
        cfg.arch.sliding_layers = Some((0..cfg.num_layers).map(|l| l % 2 == 0).collect());
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
        (Family::Gemma2 | Family::Gemma3, "post_attention_norm.weight") => {
            "post_attention_layernorm.weight"
        }
        (Family::Gemma2 | Family::Gemma3, "ffn_norm.weight") => "pre_feedforward_layernorm.weight",
        (Family::Gemma2 | Family::Gemma3, "post_ffw_norm.weight") => {
            "post_feedforward_layernorm.weight"
        }
        (Family::Gemma3, "attn_q_norm.weight") => "self_attn.q_norm.weight",
        (Family::Gemma3, "attn_k_norm.weight") => "self_attn.k_norm.weight",
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
