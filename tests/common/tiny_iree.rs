//! A tiny StableHLO "redecode" module and a hand-written safetensors file
//! for the IREE driver tests.

use std::path::{Path, PathBuf};

/// Vocabulary size and embedding width of the tiny model.
pub const VOCAB: usize = 16;
/// Embedding width.
pub const DIM: usize = 4;
/// Sequence length.
pub const SEQ: usize = 8;

/// A tiny redecode-style module: ids `tensor<1x8xi32>` -> gather rows of the
/// externalized `emb` table -> logits against the same table (tied head) ->
/// argmax per position `tensor<8xi32>`. `@logits` returns the f32 logits.
pub const TINY_MLIR: &str = r#"module @tiny {
  util.global private @emb = #flow.parameter.named<"model"::"emb"> : tensor<16x4xf32>
  func.func @logits(%ids: tensor<1x8xi32>) -> tensor<8x16xf32> {
    %emb = util.global.load @emb : tensor<16x4xf32>
    %flat = stablehlo.reshape %ids : (tensor<1x8xi32>) -> tensor<8xi32>
    %rows = "stablehlo.gather"(%emb, %flat) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 4>, indices_are_sorted = false} : (tensor<16x4xf32>, tensor<8xi32>) -> tensor<8x4xf32>
    %l = stablehlo.dot_general %rows, %emb, contracting_dims = [1] x [1] : (tensor<8x4xf32>, tensor<16x4xf32>) -> tensor<8x16xf32>
    return %l : tensor<8x16xf32>
  }
  func.func @tiny(%ids: tensor<1x8xi32>) -> tensor<8xi32> {
    %l = func.call @logits(%ids) : (tensor<1x8xi32>) -> tensor<8x16xf32>
    %iota = stablehlo.iota dim = 1 : tensor<8x16xi32>
    %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %zero = stablehlo.constant dense<0> : tensor<i32>
    %r:2 = "stablehlo.reduce"(%l, %iota, %ninf, %zero) ({
    ^bb0(%a: tensor<f32>, %b: tensor<i32>, %c: tensor<f32>, %d: tensor<i32>):
      %gt = stablehlo.compare GT, %a, %c : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %eq = stablehlo.compare EQ, %a, %c : (tensor<f32>, tensor<f32>) -> tensor<i1>
      %lt = stablehlo.compare LT, %b, %d : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %tie = stablehlo.and %eq, %lt : tensor<i1>
      %pick = stablehlo.or %gt, %tie : tensor<i1>
      %v = stablehlo.select %pick, %a, %c : tensor<i1>, tensor<f32>
      %i = stablehlo.select %pick, %b, %d : tensor<i1>, tensor<i32>
      stablehlo.return %v, %i : tensor<f32>, tensor<i32>
    }) {dimensions = array<i64: 1>} : (tensor<8x16xf32>, tensor<8x16xi32>, tensor<f32>, tensor<i32>) -> (tensor<8xf32>, tensor<8xi32>)
    return %r#1 : tensor<8xi32>
  }
}
"#;

/// The `emb` table: small integers (exact in f32), deterministic.
pub fn emb() -> Vec<f32> {
    let mut s: u32 = 12345;
    (0..VOCAB * DIM)
        .map(|_| {
            s = s.wrapping_mul(1_103_515_245).wrapping_add(12345);
            ((s >> 16) % 7) as f32 - 3.0
        })
        .collect()
}

/// Expected logits `[SEQ, VOCAB]` for padded ids.
pub fn expected_logits(ids: &[i32]) -> Vec<f32> {
    let e = emb();
    let mut out = Vec::new();
    for &id in ids {
        let row = &e[id as usize * DIM..(id as usize + 1) * DIM];
        for v in 0..VOCAB {
            let col = &e[v * DIM..(v + 1) * DIM];
            out.push(row.iter().zip(col).map(|(a, b)| a * b).sum());
        }
    }
    out
}

/// Expected argmax ids (first maximum wins) for padded ids.
pub fn expected_ids(ids: &[i32]) -> Vec<i32> {
    expected_logits(ids)
        .chunks(VOCAB)
        .map(|row| {
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = i;
                }
            }
            best as i32
        })
        .collect()
}

/// A safetensors file written by hand: 8-byte LE header length, JSON
/// header (padded with spaces to 8 bytes), then the data.
pub fn safetensors_bytes(name: &str, shape: &[usize], data: &[f32]) -> Vec<u8> {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let shape_s: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut header = format!(
        "{{\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[0,{}]}}}}",
        shape_s.join(","),
        bytes.len()
    );
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&bytes);
    out
}

/// Writes `tiny-gen.mlir`, `tiny.safetensors` and `tiny.json` into `dir`.
pub fn write_tiny(dir: &Path) -> (PathBuf, PathBuf) {
    let mlir = dir.join("tiny-gen.mlir");
    std::fs::write(&mlir, TINY_MLIR).unwrap();
    let st = dir.join("tiny.safetensors");
    std::fs::write(&st, safetensors_bytes("emb", &[VOCAB, DIM], &emb())).unwrap();
    std::fs::write(
        dir.join("tiny.json"),
        r#"{"seq": 8, "function": "tiny", "scope": "model"}"#,
    )
    .unwrap();
    (mlir, st)
}

/// The padded test prompt.
pub fn prompt() -> Vec<i32> {
    let mut ids = vec![3, 1, 4, 1, 5, 9, 2];
    ids.resize(SEQ, 0);
    ids
}
