//! The interpreter drops each intermediate after its last use: a chain of
//! 40 ops over an 8 MB tensor peaks near a few tensors, not 40.

use kiln::graph::{DType, Graph, TensorType};
use kiln::interp::{run, Tensor};
use std::collections::HashMap;

#[cfg(target_os = "linux")]
fn peak_rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

#[cfg(target_os = "linux")]
#[test]
fn intermediates_are_released() {
    let n = 2 << 20; // 2M floats = 8 MB per tensor
    let mut g = Graph::new("chain");
    let x = g.input(TensorType::new(DType::F32, &[n]));
    let mut v = x;
    for i in 0..40 {
        let c = g.splat(DType::F32, &[n], 1.0).unwrap();
        v = if i % 2 == 0 {
            g.add(v, c).unwrap()
        } else {
            g.tanh(v).unwrap()
        };
    }
    let s = g.reduce_sum(v, &[0]).unwrap();
    g.set_outputs(&[s]);
    let before = peak_rss_mb();
    let params: HashMap<String, Tensor> = HashMap::new();
    let out = run(&g, &[Tensor::f32(&[n], vec![0.0; n])], &params).unwrap();
    assert_eq!(out[0].shape(), &[] as &[usize]);
    let grew = peak_rss_mb() - before;
    // Keeping every intermediate would need 40 × 8 MB (plus the splats).
    assert!(grew < 120.0, "peak RSS grew by {grew:.0} MB");
}
