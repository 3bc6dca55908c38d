//! Graphs shared by the parser and interpreter tests: one module that uses
//! every op and composite, and a tiny random transformer.

use kiln::graph::{BlockCodes, CompareDir, DType, DotDims, Graph, Module, TensorType, Value};
use kiln::interp::Tensor;
use std::collections::HashMap;

/// Deterministic values in [-1, 1), exact in `dtype`.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407))
    }
    pub fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f64 / (1u64 << 24) as f64) * 2.0 - 1.0
    }
    pub fn values(&mut self, n: usize, dtype: DType, scale: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let x = self.next() * scale;
                match dtype {
                    DType::BF16 => half::bf16::from_f64(x).to_f64(),
                    DType::F16 => half::f16::from_f64(x).to_f64(),
                    DType::I32 => (x * 100.0).round(),
                    // i16 parameters hold bf16 weights by their bits.
                    DType::I16 => half::bf16::from_f64(x).to_bits() as i16 as f64,
                    DType::I8 => (x.clamp(-1.0, 1.0) * 127.0).round(),
                    DType::I4 => (x.clamp(-1.0, 1.0) * 7.5 - 0.5).round(),
                    DType::I1 => (x > 0.0) as u8 as f64,
                    DType::F32 => (x as f32) as f64,
                }
            })
            .collect()
    }
}

/// Weights for every parameter of `module`, random but deterministic.
pub fn random_weights(module: &Module, seed: u64) -> HashMap<String, Vec<f64>> {
    let mut rng = Rng::new(seed);
    module
        .parameters()
        .unwrap()
        .into_iter()
        .map(|d| {
            let (k, t) = (d.key, d.ty);
            let v = match t.dtype {
                // The test modules' i32 parameters are bf16 weights declared
                // as pairs (`Graph::weight`): two bf16 bit patterns each.
                DType::I32 => pack_bf16_pairs(&rng.values(2 * t.numel(), DType::BF16, 0.5)),
                d => rng.values(t.numel(), d, 0.5),
            };
            (k, v)
        })
        .collect()
}

/// Packs bf16 values two per i32 (element 2i in the low half), as
/// `Graph::weight` declares bf16 weights.
pub fn pack_bf16_pairs(v: &[f64]) -> Vec<f64> {
    let b = |x: f64| half::bf16::from_f64(x).to_bits() as u32;
    v.chunks_exact(2)
        .map(|p| (b(p[0]) | b(p[1]) << 16) as i32 as f64)
        .collect()
}

/// The same weights as interpreter tensors (floats upcast to f32).
pub fn as_tensors(module: &Module, w: &HashMap<String, Vec<f64>>) -> HashMap<String, Tensor> {
    module
        .parameters()
        .unwrap()
        .into_iter()
        .map(|d| {
            let (k, t) = (d.key, d.ty);
            let v = &w[&k];
            let shape: Vec<usize> = t.shape.to_vec();
            let tensor = match t.dtype {
                DType::I32 | DType::I16 => {
                    Tensor::i32(&shape, v.iter().map(|&x| x as i32).collect())
                }
                DType::I1 => Tensor::i1(&shape, v.iter().map(|&x| x != 0.0).collect()),
                _ => Tensor::f32(&shape, v.iter().map(|&x| x as f32).collect()),
            };
            (k, tensor)
        })
        .collect()
}

fn f32t(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape)
}

/// A function using every primitive op and every composite.
pub fn all_ops_graph(name: &str) -> Graph {
    let mut g = Graph::new(name);
    let x = g.input(f32t(&[2, 3]));
    let ids = g.input(TensorType::new(DType::I32, &[4]));
    let w = g.parameter("layer.0/w", f32t(&[4, 3])).unwrap();
    let emb = g.weight("emb.weight", DType::BF16, &[5, 3]).unwrap();
    let h = g.weight("half.weight", DType::F16, &[3]).unwrap();
    // Constants of every dtype, splat and dense.
    let c1 = g.splat(DType::F32, &[2, 3], 0.1f32 as f64).unwrap();
    let c2 = g
        .dense(
            DType::F32,
            &[2, 3],
            vec![1.0, -2.5, 3.25, 1e-7f32 as f64, -0.0, 65504.0],
        )
        .unwrap();
    let _c3 = g.splat(DType::BF16, &[2], 1.5).unwrap();
    let _c4 = g.dense(DType::F16, &[2], vec![0.5, -2.0]).unwrap();
    let _c5 = g
        .dense(DType::I32, &[3], vec![-7.0, 0.0, 2147483647.0])
        .unwrap();
    let _c6 = g.dense(DType::I1, &[2], vec![1.0, 0.0]).unwrap();
    let _c7 = g.splat(DType::F32, &[], f64::INFINITY).unwrap();
    let _c8 = g.splat(DType::F32, &[2], f64::NAN).unwrap();
    let mut acc = g.add(x, c1).unwrap();
    for b in kiln::graph::BinaryOp::ALL {
        acc = g.binary(b, acc, c2).unwrap();
    }
    for u in kiln::graph::UnaryOp::ALL {
        acc = g.unary(u, acc).unwrap();
    }
    let mut pred = g.compare(CompareDir::Eq, x, c2).unwrap();
    for d in CompareDir::ALL {
        let p = g.compare(d, x, acc).unwrap();
        pred = g.select(p, p, pred).unwrap();
    }
    let s = g.select(pred, x, acc).unwrap();
    let b = g.broadcast_in_dim(s, &[4, 2, 3], &[1, 2]).unwrap();
    let r = g.reshape(b, &[8, 3]).unwrap();
    let t = g.transpose(r, &[1, 0]).unwrap();
    let sl = g.slice(t, &[0, 1], &[3, 8], &[2, 3]).unwrap();
    let cat = g.concatenate(&[sl, sl, sl], 1).unwrap();
    let _io = g.iota(DType::F32, &[2, 3], 1).unwrap();
    let lin = g.linear(x, w).unwrap();
    let bat = g
        .dot_general(
            b,
            b,
            DotDims {
                lhs_batch: vec![0],
                rhs_batch: vec![0],
                lhs_contract: vec![2],
                rhs_contract: vec![2],
            },
        )
        .unwrap();
    let rs = g.reduce_sum(bat, &[0, 2]).unwrap();
    let rm = g.reduce_max(lin, &[1]).unwrap();
    let rn = g.reduce_min(cat, &[0]).unwrap();
    let ii = g.iota(DType::I32, &[3, 4], 0).unwrap();
    let _ri = g.reduce_sum(ii, &[1]).unwrap();
    let _rim = g.reduce_max(ii, &[0]).unwrap();
    let ci = g.convert(ids, DType::F32).unwrap();
    let _cb = g.convert(pred, DType::I32).unwrap();
    let e = g.gather_rows(emb, ids).unwrap();
    let nw = g.rms_norm(e, h, 1e-5).unwrap();
    let si = g.silu(nw).unwrap();
    let sm = g.softmax(si, 1).unwrap();
    let sq = g.reshape(sm, &[4, 3]).unwrap();
    let scores = g
        .dot_general(
            sq,
            sq,
            DotDims {
                lhs_contract: vec![1],
                rhs_contract: vec![1],
                ..Default::default()
            },
        )
        .unwrap();
    let masked = g.causal_mask(scores).unwrap();
    let cs = g.splat(DType::F32, &[4, 4], 0.5).unwrap();
    let sn = g.splat(DType::F32, &[4, 4], -0.25).unwrap();
    let ro = g.rope(masked, cs, sn).unwrap();
    let am = g.argmax(ro, 1).unwrap();
    // A row written at start indices taken from the ids (4 and 0: the
    // first is clamped to 3 so the row fits).
    let i0 = g.slice(ids, &[0], &[1], &[1]).unwrap();
    let i0 = g.reshape(i0, &[]).unwrap();
    let i1 = g.slice(ids, &[1], &[2], &[1]).unwrap();
    let i1 = g.reshape(i1, &[]).unwrap();
    let row = g.slice(ro, &[0, 0], &[1, 4], &[1, 1]).unwrap();
    let du = g.dynamic_update_slice(ro, row, &[i0, i1]).unwrap();
    g.set_outputs(&[am, rs, rm, rn, ci, du]);
    g
}

/// A module with two functions sharing parameters, plus attributes.
pub fn all_ops_module() -> Module {
    let mut m = Module::new("all_ops");
    m.attributes.push(("kiln.source".into(), "\"test\"".into()));
    m.set_schedule(&[("batch", 0), ("position", 1)]);
    m.functions.push(all_ops_graph("main"));
    let mut g = Graph::new("second");
    let x = g.input(f32t(&[1, 3]));
    let w = g.parameter("layer.0/w", f32t(&[4, 3])).unwrap();
    let y = g.linear(x, w).unwrap();
    let z = g.tanh(y).unwrap();
    g.set_outputs(&[z, y]);
    m.functions.push(g);
    // A cache updated in place: result 0 is stored in argument 0.
    let mut g = Graph::new("cache_write");
    let cache = g.input(f32t(&[2, 4, 3]));
    let row = g.input(f32t(&[1, 1, 3]));
    let pos = g.input(TensorType::new(DType::I32, &[]));
    let one = g.scalar(DType::I32, 1.0).unwrap();
    let zero = g.scalar(DType::I32, 0.0).unwrap();
    let c = g
        .dynamic_update_slice(cache, row, &[one, pos, zero])
        .unwrap();
    let s = g.reduce_sum(c, &[0, 1, 2]).unwrap();
    g.set_outputs(&[s, c]);
    g.store_output_in_input(1, cache).unwrap();
    m.functions.push(g);
    // Block-quantized codes widened in one op (a linalg.generic): 4 low and
    // 2 high bits per code, zero 32, a minimum, groups of 16.
    let mut g = Graph::new("dequantize");
    let x = g.input(f32t(&[1, 16]));
    let lo = g
        .parameter("q.qs", TensorType::new(DType::I32, &[2, 2]))
        .unwrap();
    let hi = g
        .parameter("q.qh", TensorType::new(DType::I32, &[2, 1]))
        .unwrap();
    let scale = g.parameter("q.scale", f32t(&[2, 1])).unwrap();
    let min = g.parameter("q.min", f32t(&[2, 1])).unwrap();
    let form = BlockCodes {
        low_bits: 4,
        high_bits: 2,
        group: 16,
        zero: 32,
        has_min: true,
    };
    let w = g.dequantize_blocks_op(form, &[lo, hi, scale, min]).unwrap();
    let y = g.linear(x, w).unwrap();
    g.set_outputs(&[y]);
    m.functions.push(g);
    m
}

/// Tiny llama-like model config.
pub struct Tiny {
    pub vocab: usize,
    pub dim: usize,
    pub heads: usize,
    pub layers: usize,
    pub ffn: usize,
    pub seq: usize,
    pub stored: DType,
}

impl Tiny {
    pub fn new(seq: usize, stored: DType) -> Self {
        Tiny {
            vocab: 64,
            dim: 32,
            heads: 2,
            layers: 2,
            ffn: 48,
            seq,
            stored,
        }
    }
}

fn rope_tables(g: &mut Graph, seq: usize, hd: usize) -> (Value, Value) {
    let mut cos = Vec::new();
    let mut sin = Vec::new();
    for p in 0..seq {
        for i in 0..hd {
            let f = 1.0 / 10000f64.powf((2 * (i % (hd / 2))) as f64 / hd as f64);
            let a = p as f64 * f;
            cos.push((a.cos() as f32) as f64);
            sin.push((a.sin() as f32) as f64);
        }
    }
    (
        g.dense(DType::F32, &[seq, hd], cos).unwrap(),
        g.dense(DType::F32, &[seq, hd], sin).unwrap(),
    )
}

/// A tiny transformer `[1, SEQ] i32 -> [SEQ] i32` (greedy next ids).
pub fn tiny_model(cfg: &Tiny) -> Module {
    let (s, d, h) = (cfg.seq, cfg.dim, cfg.heads);
    let hd = d / h;
    let mut g = Graph::new("forward");
    let ids = g.input(TensorType::new(DType::I32, &[1, cfg.seq]));
    let w = |g: &mut Graph, k: &str, shape: &[usize]| g.weight(k, cfg.stored, shape).unwrap();
    let emb = w(&mut g, "model.embed_tokens.weight", &[cfg.vocab, d]);
    let flat = g.reshape(ids, &[s]).unwrap();
    let mut x = g.gather_rows(emb, flat).unwrap();
    let (cos, sin) = rope_tables(&mut g, s, hd);
    for l in 0..cfg.layers {
        let p = format!("model.layers.{l}");
        let n1 = w(&mut g, &format!("{p}.input_layernorm.weight"), &[d]);
        let xn = g.rms_norm(x, n1, 1e-5).unwrap();
        let heads = |g: &mut Graph, v: Value| {
            let r = g.reshape(v, &[s, h, hd]).unwrap();
            g.transpose(r, &[1, 0, 2]).unwrap()
        };
        let wq = w(&mut g, &format!("{p}.self_attn.q_proj.weight"), &[d, d]);
        let wk = w(&mut g, &format!("{p}.self_attn.k_proj.weight"), &[d, d]);
        let wv = w(&mut g, &format!("{p}.self_attn.v_proj.weight"), &[d, d]);
        let wo = w(&mut g, &format!("{p}.self_attn.o_proj.weight"), &[d, d]);
        let q = g.linear(xn, wq).unwrap();
        let k = g.linear(xn, wk).unwrap();
        let v = g.linear(xn, wv).unwrap();
        let (q, k, v) = (heads(&mut g, q), heads(&mut g, k), heads(&mut g, v));
        let q = g.rope(q, cos, sin).unwrap();
        let k = g.rope(k, cos, sin).unwrap();
        let sc = g
            .dot_general(
                q,
                k,
                DotDims {
                    lhs_batch: vec![0],
                    rhs_batch: vec![0],
                    lhs_contract: vec![2],
                    rhs_contract: vec![2],
                },
            )
            .unwrap();
        let scale = g
            .splat(
                DType::F32,
                &[h, s, s],
                (1.0 / (hd as f64).sqrt()) as f32 as f64,
            )
            .unwrap();
        let sc = g.mul(sc, scale).unwrap();
        let sc = g.causal_mask(sc).unwrap();
        let pr = g.softmax(sc, 2).unwrap();
        let att = g
            .dot_general(
                pr,
                v,
                DotDims {
                    lhs_batch: vec![0],
                    rhs_batch: vec![0],
                    lhs_contract: vec![2],
                    rhs_contract: vec![1],
                },
            )
            .unwrap();
        let att = g.transpose(att, &[1, 0, 2]).unwrap();
        let att = g.reshape(att, &[s, d]).unwrap();
        let o = g.linear(att, wo).unwrap();
        x = g.add(x, o).unwrap();
        let n2 = w(
            &mut g,
            &format!("{p}.post_attention_layernorm.weight"),
            &[d],
        );
        let xn = g.rms_norm(x, n2, 1e-5).unwrap();
        let wg = w(&mut g, &format!("{p}.mlp.gate_proj.weight"), &[cfg.ffn, d]);
        let wu = w(&mut g, &format!("{p}.mlp.up_proj.weight"), &[cfg.ffn, d]);
        let wd = w(&mut g, &format!("{p}.mlp.down_proj.weight"), &[d, cfg.ffn]);
        let gt = g.linear(xn, wg).unwrap();
        let gt = g.silu(gt).unwrap();
        let up = g.linear(xn, wu).unwrap();
        let hm = g.mul(gt, up).unwrap();
        let dn = g.linear(hm, wd).unwrap();
        x = g.add(x, dn).unwrap();
    }
    let nf = w(&mut g, "model.norm.weight", &[d]);
    let x = g.rms_norm(x, nf, 1e-5).unwrap();
    let logits = g.linear(x, emb).unwrap();
    let out = g.argmax(logits, 1).unwrap();
    g.set_outputs(&[out]);
    let mut m = Module::new("tiny");
    m.functions.push(g);
    m
}

/// A minimal safetensors writer (test data only).
pub fn write_safetensors(path: &std::path::Path, m: &Module, w: &HashMap<String, Vec<f64>>) {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for d in m.parameters().unwrap() {
        let (k, t) = (d.key, d.ty);
        let start = data.len();
        let mut shape = t.shape.to_vec();
        for &x in &w[&k] {
            match t.dtype {
                DType::BF16 => data.extend(half::bf16::from_f64(x).to_bits().to_le_bytes()),
                DType::F16 => data.extend(half::f16::from_f64(x).to_bits().to_le_bytes()),
                // bf16 weights declared by their bits: stored as BF16.
                DType::I16 => data.extend((x as i16).to_le_bytes()),
                // bf16 weights declared as i32 pairs: the same bytes, BF16
                // with the last dim doubled.
                DType::I32 => data.extend((x as i32).to_le_bytes()),
                _ => data.extend((x as f32).to_le_bytes()),
            }
        }
        if t.dtype == DType::I32 {
            if let Some(last) = shape.last_mut() {
                *last *= 2;
            }
        }
        let dt = match t.dtype {
            DType::BF16 | DType::I16 | DType::I32 => "BF16",
            DType::F16 => "F16",
            _ => "F32",
        };
        header.insert(
            k,
            serde_json::json!({"dtype": dt, "shape": shape, "data_offsets": [start, data.len()]}),
        );
    }
    let mut h = serde_json::to_vec(&header).unwrap();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut f = std::fs::File::create(path).unwrap();
    use std::io::Write;
    f.write_all(&(h.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&h).unwrap();
    f.write_all(&data).unwrap();
}
