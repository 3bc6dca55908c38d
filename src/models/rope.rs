//! RoPE: inverse frequencies (with the scaling a config names) and the
//! cos/sin tables the graphs embed as constants.

use super::config::{DecoderConfig, RopeScaling};

/// RoPE inverse frequencies (length `rotary_dim / 2`) of a table of
/// `positions` rows, as transformers computes them, scaling included.
/// `positions` matters only for LongRoPE, which uses its long factors when
/// the table is longer than `original_max_position_embeddings` (as
/// transformers does when the longest position of a forward exceeds it).
pub fn inv_freq(cfg: &DecoderConfig, positions: usize) -> Vec<f64> {
    let d = cfg.rotary_dim();
    // transformers computes these in f32: base ** (arange(0, d, 2) / d).
    let pow = |i: usize| (cfg.rope_theta as f32).powf((2 * i) as f32 / d as f32);
    let base: Vec<f64> = (0..d / 2).map(|i| (1.0f32 / pow(i)) as f64).collect();
    match &cfg.rope_scaling {
        RopeScaling::Default => base,
        RopeScaling::Linear { .. } => base,
        // llama.cpp: theta / freq_factor, in f32.
        RopeScaling::Factors { factors } => base
            .iter()
            .zip(factors)
            .map(|(&f, &k)| (f as f32 / k as f32) as f64)
            .collect(),
        RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position_embeddings: old,
            ..
        } => {
            let ext = if positions as f64 > *old {
                long_factor
            } else {
                short_factor
            };
            // 1 / (ext * base ** (arange(0, d, 2) / d)), in f32.
            (0..d / 2)
                .map(|i| (1.0f32 / (ext[i] as f32 * pow(i))) as f64)
                .collect()
        }
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: old,
        } => {
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    let scaled = if wavelen > low_wavelen { f / factor } else { f };
                    // Neither high- nor low-frequency (wavelengths are finite and positive).
                    let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                    if medium {
                        let smooth = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * scaled / factor + smooth * scaled
                    } else {
                        scaled
                    }
                })
                .map(|x| x as f32 as f64)
                .collect()
        }
    }
}

impl DecoderConfig {
    /// The factor LongRoPE multiplies cos and sin by (1 for the other
    /// scalings): the config's `attention_factor`, else
    /// `√(1 + ln factor / ln original_max_position_embeddings)` when
    /// `factor = max_position_embeddings / original_max_position_embeddings`
    /// (or the config's `factor`) exceeds 1.
    pub fn attention_factor(&self) -> f64 {
        let cfg = self;
        match &cfg.rope_scaling {
            RopeScaling::LongRope {
                original_max_position_embeddings: old,
                factor,
                attention_factor,
                ..
            } => {
                let factor = factor.unwrap_or(cfg.max_position_embeddings as f64 / old);
                match attention_factor {
                    Some(a) => *a,
                    None if factor <= 1.0 => 1.0,
                    None => (1.0 + factor.ln() / old.ln()).sqrt(),
                }
            }
            _ => 1.0,
        }
    }

    /// The cos and sin tables `[positions, rotary_dim]` (row-major, f32-exact
    /// values) for rotate-half RoPE: `emb = concat(freqs, freqs)`. Row `p` is
    /// position `p`.
    pub fn rope_tables(&self, positions: usize) -> (Vec<f64>, Vec<f64>) {
        let cfg = self;
        let f = inv_freq(cfg, positions);
        let scale = cfg.attention_factor() as f32;
        let pos_scale = match cfg.rope_scaling {
            RopeScaling::Linear { factor } => 1.0 / factor,
            _ => 1.0,
        };
        let d = cfg.rotary_dim();
        let mut cos = Vec::with_capacity(positions * d);
        let mut sin = Vec::with_capacity(positions * d);
        for p in 0..positions {
            let pos = (p as f64 * pos_scale) as f32;
            for j in 0..d {
                let ang = pos * f[j % (d / 2)] as f32;
                let (c, s) = ((ang as f64).cos() as f32, (ang as f64).sin() as f32);
                if scale == 1.0 {
                    cos.push(c as f64);
                    sin.push(s as f64);
                } else {
                    cos.push((c * scale) as f64);
                    sin.push((s * scale) as f64);
                }
            }
        }
        (cos, sin)
    }
}
