//! Criterion bench of loading a large vocabulary: `tokenizer_load/gemma3_262k`
//! builds the tokenizer of the real Gemma 3 270M GGUF (262,144 tokens, merges
//! derived from token positions) with `kiln::tokenizer::from_gguf`, as `kiln
//! generate` does before its first token (goal: ≤ 0.5 s). The GGUF comes from
//! kiln's cache (`scripts/fetch-gemma3.sh`); without it the bench says so and
//! measures nothing.

use criterion::{criterion_group, criterion_main, Criterion};

fn bench_load(c: &mut Criterion) {
    let gguf = kiln::cache_dir().join("gemma3/gemma-3-270m-q4_k_m.gguf");
    if !gguf.is_file() {
        eprintln!(
            "tokenizer_load: {} is missing (scripts/fetch-gemma3.sh); skipped",
            gguf.display()
        );
        return;
    }
    let mut g = c.benchmark_group("tokenizer_load");
    g.sample_size(10);
    g.bench_function("gemma3_262k", |b| {
        b.iter(|| kiln::tokenizer::from_gguf(&gguf).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench_load);
criterion_main!(benches);
