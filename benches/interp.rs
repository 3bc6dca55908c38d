//! One SmolLM2-135M-shaped forward at SEQ 64 through kiln's interpreter,
//! versus the same module compiled for the host by IREE
//! (`iree-benchmark-module`), on the same machine. Weights are random bf16
//! values of SmolLM2's shapes (timing does not depend on their values).
//!
//! `cargo bench --bench interp` (set `KILN_IREE_VENV` to use another IREE).

use kiln::graph::{DType, DotDims, Graph, Module, TensorType, Value};
use kiln::interp::{run, Tensor};
use kiln::stablehlo::{print_module, PrintOptions};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const VOCAB: usize = 49152;
const DIM: usize = 576;
const LAYERS: usize = 30;
const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const FFN: usize = 1536;
const SEQ: usize = 64;

fn rope_tables(g: &mut Graph, hd: usize) -> (Value, Value) {
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for p in 0..SEQ {
        for i in 0..hd {
            let f = 1.0 / 100000f64.powf((2 * (i % (hd / 2))) as f64 / hd as f64);
            cos.push(((p as f64 * f).cos() as f32) as f64);
            sin.push(((p as f64 * f).sin() as f32) as f64);
        }
    }
    (
        g.dense(DType::F32, &[SEQ, hd], cos).unwrap(),
        g.dense(DType::F32, &[SEQ, hd], sin).unwrap(),
    )
}

/// A llama forward with SmolLM2-135M's shapes: `[1, SEQ]` ids → `[SEQ]` next ids.
fn smollm2_shaped() -> Module {
    let hd = DIM / HEADS;
    let mut g = Graph::new("forward");
    let ids = g.input(TensorType::new(DType::I32, &[1, SEQ]));
    let w = |g: &mut Graph, k: &str, s: &[usize]| g.weight(k, DType::BF16, s).unwrap();
    let emb = w(&mut g, "model.embed_tokens.weight", &[VOCAB, DIM]);
    let flat = g.reshape(ids, &[SEQ]).unwrap();
    let mut x = g.gather_rows(emb, flat).unwrap();
    let (cos, sin) = rope_tables(&mut g, hd);
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}");
        let n1 = w(&mut g, &format!("{p}.input_layernorm.weight"), &[DIM]);
        let xn = g.rms_norm(x, n1, 1e-5).unwrap();
        let wq = w(&mut g, &format!("{p}.self_attn.q_proj.weight"), &[DIM, DIM]);
        let wk = w(
            &mut g,
            &format!("{p}.self_attn.k_proj.weight"),
            &[KV_HEADS * hd, DIM],
        );
        let wv = w(
            &mut g,
            &format!("{p}.self_attn.v_proj.weight"),
            &[KV_HEADS * hd, DIM],
        );
        let wo = w(&mut g, &format!("{p}.self_attn.o_proj.weight"), &[DIM, DIM]);
        let q = g.linear(xn, wq).unwrap();
        let k = g.linear(xn, wk).unwrap();
        let v = g.linear(xn, wv).unwrap();
        let q = g.reshape(q, &[SEQ, HEADS, hd]).unwrap();
        let q = g.transpose(q, &[1, 0, 2]).unwrap();
        let expand = |g: &mut Graph, t: Value| {
            let r = g.reshape(t, &[SEQ, KV_HEADS, 1, hd]).unwrap();
            let b = g
                .broadcast_in_dim(r, &[SEQ, KV_HEADS, HEADS / KV_HEADS, hd], &[0, 1, 2, 3])
                .unwrap();
            let r = g.reshape(b, &[SEQ, HEADS, hd]).unwrap();
            g.transpose(r, &[1, 0, 2]).unwrap()
        };
        let k = expand(&mut g, k);
        let v = expand(&mut g, v);
        let q = g.rope(q, cos, sin).unwrap();
        let k = g.rope(k, cos, sin).unwrap();
        let batch = |lc: usize, rc: usize| DotDims {
            lhs_batch: vec![0],
            rhs_batch: vec![0],
            lhs_contract: vec![lc],
            rhs_contract: vec![rc],
        };
        let sc = g.dot_general(q, k, batch(2, 2)).unwrap();
        let scale = g
            .splat(
                DType::F32,
                &[HEADS, SEQ, SEQ],
                (1.0 / (hd as f64).sqrt()) as f32 as f64,
            )
            .unwrap();
        let sc = g.mul(sc, scale).unwrap();
        let sc = g.causal_mask(sc).unwrap();
        let pr = g.softmax(sc, 2).unwrap();
        let att = g.dot_general(pr, v, batch(2, 1)).unwrap();
        let att = g.transpose(att, &[1, 0, 2]).unwrap();
        let att = g.reshape(att, &[SEQ, DIM]).unwrap();
        let o = g.linear(att, wo).unwrap();
        x = g.add(x, o).unwrap();
        let n2 = w(
            &mut g,
            &format!("{p}.post_attention_layernorm.weight"),
            &[DIM],
        );
        let xn = g.rms_norm(x, n2, 1e-5).unwrap();
        let wg = w(&mut g, &format!("{p}.mlp.gate_proj.weight"), &[FFN, DIM]);
        let wu = w(&mut g, &format!("{p}.mlp.up_proj.weight"), &[FFN, DIM]);
        let wd = w(&mut g, &format!("{p}.mlp.down_proj.weight"), &[DIM, FFN]);
        let gt = g.linear(xn, wg).unwrap();
        let gt = g.silu(gt).unwrap();
        let up = g.linear(xn, wu).unwrap();
        let hm = g.mul(gt, up).unwrap();
        let dn = g.linear(hm, wd).unwrap();
        x = g.add(x, dn).unwrap();
    }
    let nf = w(&mut g, "model.norm.weight", &[DIM]);
    let x = g.rms_norm(x, nf, 1e-5).unwrap();
    let logits = g.linear(x, emb).unwrap();
    let out = g.argmax(logits, 1).unwrap();
    g.set_outputs(&[out]);
    let mut m = Module::new("smollm2");
    m.functions.push(g);
    m
}

/// Random bf16 weights (as bit patterns) for every parameter.
fn weights(m: &Module) -> Vec<(String, Vec<usize>, Vec<u16>)> {
    let mut state = 0x2545F4914F6CDD1Du64;
    m.parameters()
        .unwrap()
        .into_iter()
        .map(|(k, t)| {
            let n = t.numel();
            let v: Vec<u16> = (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let x = ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
                    half::bf16::from_f32(x).to_bits()
                })
                .collect();
            (k, t.shape.to_vec(), v)
        })
        .collect()
}

/// A minimal safetensors file for IREE's `--parameters=model=FILE`.
fn write_safetensors(path: &Path, ws: &[(String, Vec<usize>, Vec<u16>)]) {
    let mut header = serde_json::Map::new();
    let mut off = 0usize;
    for (k, s, v) in ws {
        header.insert(
            k.clone(),
            serde_json::json!({"dtype": "BF16", "shape": s, "data_offsets": [off, off + 2 * v.len()]}),
        );
        off += 2 * v.len();
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&(h.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&h).unwrap();
    for (_, _, v) in ws {
        let bytes: Vec<u8> = v.iter().flat_map(|b| b.to_le_bytes()).collect();
        f.write_all(&bytes).unwrap();
    }
}

fn iree_tool(rel: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("KILN_IREE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| kiln::util::cache_dir().join("iree-3.13.0"));
    let p = venv.join("lib/python3.11/site-packages/iree").join(rel);
    p.exists().then_some(p)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let m = smollm2_shaped();
    let ws = weights(&m);
    let params: HashMap<String, Tensor> = ws
        .iter()
        .map(|(k, s, v)| {
            let data = v
                .iter()
                .map(|&b| half::bf16::from_bits(b).to_f32())
                .collect();
            (k.clone(), Tensor::f32(s, data))
        })
        .collect();
    let ids: Vec<i32> = (0..SEQ as i32).map(|i| (i * 7919) % VOCAB as i32).collect();
    let input = Tensor::i32(&[1, SEQ], ids.clone());
    let t0 = Instant::now();
    let out = run(&m.functions[0], &[input], &params).unwrap();
    let interp_s = t0.elapsed().as_secs_f64();
    println!("kiln interp: SmolLM2-shaped forward, SEQ {SEQ}: {interp_s:.3} s");
    drop(params);
    if std::env::var_os("KILN_BENCH_NO_IREE").is_some() {
        return;
    }

    let (Some(compile), Some(bench)) = (
        iree_tool("compiler/_mlir_libs/iree-compile"),
        iree_tool("_runtime_libs/iree-benchmark-module"),
    ) else {
        println!("IREE tools not found; skipping the IREE comparison");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mlir = dir.path().join("smollm2.mlir");
    let vmfb = dir.path().join("smollm2.vmfb");
    let st = dir.path().join("smollm2.safetensors");
    std::fs::write(
        &mlir,
        print_module(&m, &PrintOptions::default(), None).unwrap(),
    )
    .unwrap();
    write_safetensors(&st, &ws);
    let c = Command::new(compile)
        .args([
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            "--iree-llvmcpu-target-cpu=host",
            "-o",
        ])
        .arg(&vmfb)
        .arg(&mlir)
        .status()
        .unwrap();
    assert!(c.success(), "iree-compile failed");
    let ids_text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    let out_b = Command::new(bench)
        .arg("--device=local-task")
        .arg(format!("--module={}", vmfb.display()))
        .arg(format!("--parameters=model={}", st.display()))
        .arg("--function=forward")
        .arg(format!("--input=1x{SEQ}xi32={}", ids_text.join(",")))
        .arg("--benchmark_repetitions=1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out_b.stdout);
    println!("{text}");
    // Google-benchmark lines: name, wall time, unit, CPU time, unit, iterations.
    let iree_s = text.lines().find(|l| l.starts_with("BM_")).and_then(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let v: f64 = f.get(1)?.parse().ok()?;
        let scale = match *f.get(2)? {
            "ns" => 1e-9,
            "us" => 1e-6,
            "ms" => 1e-3,
            _ => 1.0,
        };
        Some(v * scale)
    });
    if let Some(s) = iree_s {
        println!(
            "IREE host: {s:.3} s; interpreter / IREE = {:.2}x",
            interp_s / s
        );
    }
    let _ = out;
}
