//! Criterion benches of the hot paths kiln owns, so a regression shows up in
//! `cargo bench --bench hot_paths` (GGUF dequantization has its own bench,
//! `cargo bench --bench dequant`):
//!
//! - `print_module/smollm2`: printing a SmolLM2-135M-shaped module (30
//!   layers, bf16 weights as i32 pairs, SEQ 64) as StableHLO text;
//! - `irpa_write/…`: streaming SmolLM2's 30 blocks of bf16 weights (≈ 200 MiB,
//!   no embedding) into an `.irpa` file in a temporary directory, through
//!   [`TensorWriter`] as `kiln export` and `kiln params convert` do;
//! - `interp_dot_general/…`: the interpreter's `dot_general` on SmolLM2's
//!   matmul shapes at SEQ 64 (one graph with one op, run by `interp::run`).

#[path = "common/smollm2.rs"]
mod smollm2;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln::graph::{DType, DotDims, Graph, TensorType};
use kiln::interp::{run, Tensor};
use kiln::params::irpa::{EntrySpec, IrpaWriter};
use kiln::params::TensorWriter;
use kiln::stablehlo::PrintOptions;
use smollm2::{smollm2_shaped, DIM, FFN, KV_HEADS, LAYERS, SEQ};
use std::collections::HashMap;

fn bench_print(c: &mut Criterion) {
    let m = smollm2_shaped();
    let text = m.print(&PrintOptions::default(), None).unwrap();
    let mut g = c.benchmark_group("print_module");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.sample_size(20);
    g.bench_function("smollm2", |b| {
        b.iter(|| m.print(&PrintOptions::default(), None).unwrap())
    });
    g.finish();
}

/// SmolLM2's per-block bf16 matrices and norms (name, byte length).
fn block_tensors() -> Vec<(String, usize)> {
    let kv = KV_HEADS * (DIM / 9);
    let mut v = Vec::new();
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}");
        for (n, elems) in [
            ("input_layernorm.weight", DIM),
            ("self_attn.q_proj.weight", DIM * DIM),
            ("self_attn.k_proj.weight", kv * DIM),
            ("self_attn.v_proj.weight", kv * DIM),
            ("self_attn.o_proj.weight", DIM * DIM),
            ("post_attention_layernorm.weight", DIM),
            ("mlp.gate_proj.weight", FFN * DIM),
            ("mlp.up_proj.weight", FFN * DIM),
            ("mlp.down_proj.weight", DIM * FFN),
        ] {
            v.push((format!("{p}.{n}"), elems * 2));
        }
    }
    v
}

fn bench_irpa(c: &mut Criterion) {
    let tensors = block_tensors();
    let total: usize = tensors.iter().map(|t| t.1).sum();
    let max = tensors.iter().map(|t| t.1).max().unwrap();
    let bytes: Vec<u8> = (0..max).map(|i| (i * 31 % 251) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.irpa");
    let mut g = c.benchmark_group("irpa_write");
    g.throughput(Throughput::Bytes(total as u64));
    g.sample_size(10);
    for hashed in [false, true] {
        let id = if hashed {
            "smollm2_blocks_sha256"
        } else {
            "smollm2_blocks"
        };
        g.bench_function(id, |b| {
            b.iter(|| {
                let specs = tensors
                    .iter()
                    .map(|(n, len)| EntrySpec::data(n.clone(), *len as u64))
                    .collect();
                let mut w = if hashed {
                    IrpaWriter::new_hashed(&out, specs).unwrap()
                } else {
                    IrpaWriter::new(&out, specs).unwrap()
                };
                for (n, len) in &tensors {
                    w.write_tensor(n, &bytes[..*len]).unwrap();
                }
                w.finish().unwrap()
            })
        });
    }
    g.finish();
}

fn bench_dot(c: &mut Criterion) {
    let mut g = c.benchmark_group("interp_dot_general");
    g.sample_size(10);
    // (name, rows of the weight, contraction): x[SEQ, k] · w[n, k]ᵀ, as `linear`.
    for (name, n, k) in [
        ("q_proj_64x576x576", DIM, DIM),
        ("gate_proj_64x1536x576", FFN, DIM),
        ("down_proj_64x576x1536", DIM, FFN),
    ] {
        let mut gr = Graph::new("dot");
        let x = gr.input(TensorType::new(DType::F32, &[SEQ, k]));
        let w = gr.input(TensorType::new(DType::F32, &[n, k]));
        let y = gr
            .dot_general(
                x,
                w,
                DotDims {
                    lhs_batch: vec![],
                    rhs_batch: vec![],
                    lhs_contract: vec![1],
                    rhs_contract: vec![1],
                },
            )
            .unwrap();
        gr.set_outputs(&[y]);
        let xs = Tensor::f32(
            &[SEQ, k],
            (0..SEQ * k).map(|i| (i % 7) as f32 * 0.1).collect(),
        );
        let ws = Tensor::f32(&[n, k], (0..n * k).map(|i| (i % 5) as f32 * 0.1).collect());
        let params: HashMap<String, Tensor> = HashMap::new();
        g.throughput(Throughput::Elements((2 * SEQ * n * k) as u64));
        g.bench_with_input(
            BenchmarkId::from_parameter(name),
            &(xs, ws),
            |b, (xs, ws)| b.iter(|| run(&gr, &[xs.clone(), ws.clone()], &params).unwrap()),
        );
    }
    g.finish();
}

criterion_group!(benches, bench_print, bench_irpa, bench_dot);
criterion_main!(benches);
