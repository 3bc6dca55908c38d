//! A llama forward with SmolLM2-135M's shapes (30 layers, dim 576, 9 heads /
//! 3 KV heads, FFN 1536, vocab 49152, bf16 weights), built with the graph DSL
//! only, and random weights for it. Shared by the benches (`#[path]` module).
#![allow(dead_code)]

use kiln::graph::{DType, DotDims, Graph, Module, TensorType, Value};
use std::io::Write;
use std::path::Path;

pub const VOCAB: usize = 49152;
pub const DIM: usize = 576;
pub const LAYERS: usize = 30;
pub const HEADS: usize = 9;
pub const KV_HEADS: usize = 3;
pub const FFN: usize = 1536;
pub const SEQ: usize = 64;

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
pub fn smollm2_shaped() -> Module {
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
pub fn weights(m: &Module) -> Vec<(String, Vec<usize>, Vec<u16>)> {
    let mut state = 0x2545F4914F6CDD1Du64;
    m.parameters()
        .unwrap()
        .into_iter()
        .map(|d| {
            let (k, t) = (d.key, d.ty);
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
pub fn write_safetensors(path: &Path, ws: &[(String, Vec<usize>, Vec<u16>)]) {
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
