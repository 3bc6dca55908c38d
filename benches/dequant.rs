//! Throughput of the GGML dequantization kernels (GB/s of f32 output).
//! Run: `cargo bench --bench dequant`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln::params::GgmlType;

/// Offsets of the f16 scale fields in one block, set to small finite values.
fn scale_offsets(t: GgmlType) -> &'static [usize] {
    match t {
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
        _ => &[],
    }
}

fn blocks(t: GgmlType, n_elems: usize) -> Vec<u8> {
    let (bs, ts) = (t.block_size() as usize, t.type_size() as usize);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut v: Vec<u8> = (0..n_elems / bs * ts)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for b in v.chunks_exact_mut(ts) {
        for &o in scale_offsets(t) {
            b[o..o + 2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        }
    }
    if matches!(t, GgmlType::F16 | GgmlType::BF16) {
        for c in v.chunks_exact_mut(2) {
            c[1] &= 0x3f; // finite values
        }
    }
    v
}

fn bench(c: &mut Criterion) {
    let n = 1 << 22; // 4 Mi elements: 16 MiB of f32 output
    let mut g = c.benchmark_group("dequantize");
    g.throughput(Throughput::Bytes((n * 4) as u64));
    g.sample_size(20);
    // The plain 16-bit types and every block type kiln keeps (KEPT in
    // src/params/blocks.rs).
    use GgmlType::*;
    for t in [F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K] {
        let src = blocks(t, n);
        let mut dst = vec![0f32; n];
        g.bench_with_input(BenchmarkId::from_parameter(t), &src, |b, src| {
            b.iter(|| t.dequantize(src, &mut dst).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
