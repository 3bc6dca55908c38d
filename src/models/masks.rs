//! The attention masks the decoder's graphs use: causal, causal within a
//! sliding window (Mistral, Gemma 2's local layers), for queries at the
//! same positions as the keys (the forward, the prefill) or at positions
//! given in the graph (the KV decode).

use super::config::DecoderConfig;
use super::ModelError;
use crate::graph::{CompareDir, DType, Graph, Value};

/// Which keys each query may attend to.
pub(crate) enum Mask {
    /// Queries and keys are the same positions; key ≤ query.
    Causal,
    /// An i1 `[S, N]` tensor: true where query s may see key n.
    Keep(Value),
}

/// The attention masks of a graph, one per distinct sliding window
/// narrower than the keys (Mistral, Gemma 2's local layers), built once
/// and reused by every layer that has that window. Queries are either the
/// same `n` positions as the keys ([`CausalMasks::new`], the forward and
/// the prefill) or sit at positions given in the graph
/// ([`CausalMasks::at`], the KV decode).
pub(crate) struct CausalMasks {
    n: usize,
    /// For queries at given positions: (query positions, key indices,
    /// key ≤ query), each i1/i32 `[Q, n]`.
    at: Option<(Value, Value, Value)>,
    windows: Vec<(usize, Value)>,
}

impl CausalMasks {
    /// No masks built yet, for `n` positions.
    pub(crate) fn new(n: usize) -> CausalMasks {
        CausalMasks {
            n,
            at: None,
            windows: Vec::new(),
        }
    }

    /// Masks of queries at `positions` (i32 `[Q]`) over keys `0..n`: key
    /// `k` is visible to a query at `p` when `k ≤ p` (and `p − k` is
    /// within the layer's window).
    pub(crate) fn at(g: &mut Graph, positions: Value, n: usize) -> Result<CausalMasks, ModelError> {
        let q = g.ty(positions).shape[0];
        let ki = g.iota(DType::I32, &[q, n], 1)?;
        let qi = g.broadcast_in_dim(positions, &[q, n], &[0])?;
        let causal = g.compare(CompareDir::Le, ki, qi)?;
        Ok(CausalMasks {
            n,
            at: Some((qi, ki, causal)),
            windows: Vec::new(),
        })
    }

    /// Layer `l`'s mask: causal, or causal within its window.
    pub(crate) fn layer(
        &mut self,
        g: &mut Graph,
        cfg: &DecoderConfig,
        l: usize,
    ) -> Result<Mask, ModelError> {
        let window = cfg.layer_window(l).filter(|&w| w < self.n);
        let Some(w) = window else {
            return Ok(match self.at {
                None => Mask::Causal,
                Some((_, _, causal)) => Mask::Keep(causal),
            });
        };
        if let Some(&(_, keep)) = self.windows.iter().find(|(x, _)| *x == w) {
            return Ok(Mask::Keep(keep));
        }
        let keep = match self.at {
            None => sliding_keep(g, self.n, w)?,
            Some((qi, ki, causal)) => {
                let dist = g.sub(qi, ki)?;
                let wv = g.splat_like(dist, w as f64)?;
                let near = g.compare(CompareDir::Lt, dist, wv)?;
                // causal && near
                g.select(causal, near, causal)?
            }
        };
        self.windows.push((w, keep));
        Ok(Mask::Keep(keep))
    }
}

/// The sliding-window mask of `n` positions: i1 `[n, n]`, true where key
/// `k` ≤ query `q` and `q − k < window` (transformers'
/// `sliding_window_overlay` on the causal mask).
fn sliding_keep(g: &mut Graph, n: usize, window: usize) -> Result<Value, ModelError> {
    let qi = g.iota(DType::I32, &[n, n], 0)?;
    let ki = g.iota(DType::I32, &[n, n], 1)?;
    let causal = g.compare(CompareDir::Ge, qi, ki)?;
    let dist = g.sub(qi, ki)?;
    let w = g.splat_like(dist, window as f64)?;
    // Non-causal entries get distance `window`: outside the window.
    let dist = g.select(causal, dist, w)?;
    Ok(g.compare(CompareDir::Lt, dist, w)?)
}
