//! Export of a checkpoint: `<name>-gen.mlir` (StableHLO, weights external),
//! `<name>.safetensors` and `<name>.irpa` (the same tensors, keyed by their
//! HF names) and `<name>.json` (the manifest).
//!
//! Weights are streamed one tensor at a time (read → convert → written to
//! both files), so memory stays near one tensor's size. Everything is
//! written into a staging directory inside the output directory and only
//! renamed into place once all four files are complete: a failed export
//! leaves no partial output.

use crate::graph::{DType, Module};
use crate::manifest::{ExportManifest, FileRecord, KvManifest, KvPair, EXPORT_FORMAT};
use crate::models::checkpoint::file_rows;
use crate::models::decoder::{build_graph, GraphOptions};
use crate::models::kv::{build_decode, build_prefill, KvOptions};
use crate::models::{Checkpoint, DecoderConfig, Storage, WeightPlan};
use crate::params::blocks::{self, part_key, BlockForm};
use crate::params::convert::{f32_to_bf16_bits, f32_to_f16_bits};
use crate::params::gguf::GgmlType;
use crate::params::irpa::{EntrySpec, IrpaWriter};
use crate::params::safetensors::{SafetensorsWriter, TensorSpec};
use crate::params::TensorWriter;
use crate::params::{DType as StDType, Written};
use crate::progress::Progress;
use crate::stablehlo::{print_module, ConstantPolicy, PrintOptions, WeightSource};
use crate::util::Staging;
use crate::{Error, Result};

use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::time::Instant;

/// Options of [`export`]: [`ExportOptions::new`] (or `default()`) and the
/// setters, or assign the `pub` fields of a `let mut` value.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExportOptions {
    /// Fixed sequence length.
    pub seq: usize,
    /// Output directory (created when missing).
    pub out_dir: PathBuf,
    /// Base name of the files; default: the checkpoint's name.
    pub name: Option<String>,
    /// Exported function name; default: the name, made a valid identifier.
    pub function: Option<String>,
    /// How the weights are stored: one dtype, or `keep` (a GGUF's own
    /// types, block-quantized matrices in kiln's block form).
    pub weights: Weights,
    /// Per-tensor exceptions to `weights`: (PATTERN, form) for every tensor
    /// whose HF name contains PATTERN, the last match winning
    /// (`--weights-for`).
    pub weights_for: Vec<(String, Weights)>,
    /// Constant materialization policy (carries the parameter scope).
    pub constants: ConstantPolicy,
    /// Receives one [`Unit::Tensors`](crate::progress::Unit) step,
    /// `writing weights` (nothing is reported when `None`).
    pub progress: Option<crate::progress::SharedProgress>,
    /// Also write the KV-cache pair `<name>-kv-gen.mlir` (prefill +
    /// decode over the same parameters).
    pub kv: Option<KvCacheOptions>,
    /// The largest tensor the graphs may bind, in bytes
    /// ([`crate::models::MAX_TENSOR_BYTES`], Vulkan's storage-buffer range,
    /// by default): a larger embedding or LM head is used in row chunks.
    pub max_tensor_bytes: u64,
}

/// How [`export`] stores the weights (`kiln export --weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weights {
    /// Every weight widened and stored in this dtype: bf16, f16 or f32.
    Dtype(DType),
    /// Every matrix of any checkpoint quantized to Q8_0 or Q4_0 with
    /// llama.cpp's reference rounding (bit for bit `gguf.quants.quantize`)
    /// and stored in kiln's block form; vectors (norms, biases) as bf16.
    Quantize(GgmlType),
    /// Every tensor of a GGUF checkpoint in its own type: block-quantized
    /// matrices (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) repacked
    /// exactly into kiln's block form (`spec/quantized-weights.md`) and
    /// widened in the graph; f32, f16 and bf16 tensors as they are.
    Keep,
    /// Every matrix as i8 codes with one f32 scale per row, and every
    /// product with such a matrix taken in i8 × i8 → i32 after rounding
    /// its activations to i8, one scale per row of the activations
    /// ([`crate::graph::Graph::linear_w8a8`]); vectors as bf16. Lossy
    /// twice, and the fastest form on CPUs (IREE's i8 matmul kernels);
    /// CPU targets only (`spec/quantized-weights.md`).
    W8A8,
}

impl From<DType> for Weights {
    fn from(d: DType) -> Weights {
        Weights::Dtype(d)
    }
}

impl std::fmt::Display for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Weights::Dtype(d) => write!(f, "{d}"),
            Weights::Keep => f.write_str("keep"),
            Weights::W8A8 => f.write_str("w8a8"),
            Weights::Quantize(t) => write!(f, "{}", t.to_string().to_lowercase()),
        }
    }
}

/// How each weight of `ckpt` is stored under `weights`, with
/// `overrides` (`--weights-for PATTERN=FORM`: every tensor whose HF name
/// contains PATTERN; the last matching one wins). `keep` needs a GGUF
/// checkpoint whose tensors have types kiln can keep; `q8_0`/`q4_0` need
/// rows of whole 32-element blocks.
pub fn weight_plan(
    ckpt: &Checkpoint,
    weights: Weights,
    overrides: &[(String, Weights)],
) -> Result<WeightPlan> {
    let mut plan = WeightPlan::from(match weights {
        Weights::Dtype(d) => d,
        _ => DType::BF16,
    });
    for (pattern, _) in overrides {
        if !ckpt
            .tensors()
            .iter()
            .any(|(n, _)| n.contains(pattern.as_str()))
        {
            return Err(Error::Input(format!(
                "--weights-for {pattern}=…: no tensor of {} has \"{pattern}\" in its name",
                ckpt.path.display()
            )));
        }
    }
    for (name, shape) in ckpt.tensors() {
        let w = overrides
            .iter()
            .rev()
            .find(|(p, _)| name.contains(p.as_str()))
            .map_or(weights, |(_, w)| *w);
        let storage = storage_for(ckpt, name, shape, w)?;
        if storage != Storage::Plain(plan.dtype) {
            plan.overrides.insert(name.clone(), storage);
        }
    }
    Ok(plan)
}

/// How tensor `name` of `shape` is stored under `w`.
fn storage_for(ckpt: &Checkpoint, name: &str, shape: &[usize], w: Weights) -> Result<Storage> {
    let whole_blocks = |form: &BlockForm, what: &str| -> Result<Storage> {
        if shape[1] % form.block() != 0 {
            return Err(Error::Input(format!(
                "{}: tensor \"{name}\" {shape:?}: rows of {} are not whole {}-element blocks, \
                 so {what} cannot store it (use bf16)",
                ckpt.path.display(),
                shape[1],
                form.block()
            )));
        }
        Ok(Storage::Blocks(*form))
    };
    match w {
        Weights::Dtype(d @ (DType::BF16 | DType::F16 | DType::F32)) => Ok(Storage::Plain(d)),
        Weights::Dtype(d) => Err(Error::Input(format!(
            "--weights must be bf16, f16, f32, keep, q8_0, q4_0 or w8a8, not {d}"
        ))),
        Weights::W8A8 if shape.len() == 2 => Ok(Storage::Int8Rows),
        Weights::W8A8 => Ok(Storage::Plain(DType::BF16)),
        Weights::Quantize(ty) => {
            let form = BlockForm::of(ty)
                .filter(|_| matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0))
                .ok_or_else(|| {
                    Error::Input(format!("--weights quantizes to q8_0 or q4_0, not {ty}"))
                })?;
            if shape.len() != 2 {
                return Ok(Storage::Plain(DType::BF16));
            }
            whole_blocks(&form, &format!("--weights {w}"))
        }
        Weights::Keep => {
            let Some(ty) = ckpt.ggml_type(name) else {
                return Err(Error::Input(format!(
                    "--weights keep keeps a GGUF file's quantization; {} is not a GGUF file \
                     (use --weights bf16, f16, f32, q8_0 or q4_0)",
                    ckpt.path.display()
                )));
            };
            match (ty.plain(), BlockForm::of(ty)) {
                (Some(crate::params::DType::F16), _) => Ok(Storage::Plain(DType::F16)),
                (Some(crate::params::DType::BF16), _) => Ok(Storage::Plain(DType::BF16)),
                (Some(crate::params::DType::F32), _) => Ok(Storage::Plain(DType::F32)),
                (None, Some(form)) if shape.len() == 2 => whole_blocks(&form, "--weights keep"),
                _ => Err(unkeepable(ckpt, name, ty)),
            }
        }
    }
}

/// The error for tensor `name` of a type `--weights keep` cannot store.
fn unkeepable(ckpt: &Checkpoint, name: &str, ty: GgmlType) -> Error {
    Error::Input(format!(
        "{}: tensor \"{name}\" is {ty}, which --weights keep cannot store \
         (it keeps F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K matrices); \
         use --weights bf16",
        ckpt.path.display()
    ))
}

/// One archive entry of an export: a whole tensor, or one part of a
/// block-quantized one.
struct Entry {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
}

/// The archive entries of `ckpt` stored as `plan` says, in graph order.
fn entries(ckpt: &Checkpoint, plan: &WeightPlan) -> Vec<Entry> {
    let mut out = Vec::new();
    for (n, s) in ckpt.tensors() {
        let storage = plan.storage(n);
        match (storage, storage.parts(cols_of(s))) {
            (_, Some(parts)) => {
                for (suffix, dtype, cols) in parts {
                    out.push(Entry {
                        name: part_key(n, suffix),
                        dtype,
                        shape: vec![s[0] as u64, cols as u64],
                    });
                }
            }
            (Storage::Plain(d), None) => out.push(Entry {
                name: n.clone(),
                dtype: d,
                shape: s.iter().map(|&d| d as u64).collect(),
            }),
            (_, None) => unreachable!("only plain tensors have no parts"),
        }
    }
    out
}

/// The last dim of `shape` (a matrix's columns), 1 for a scalar.
fn cols_of(shape: &[usize]) -> usize {
    shape.last().copied().unwrap_or(1)
}

/// The stored bytes of `tensor` as `storage` says: one vector, or one per
/// part (in [`Storage::parts`] order).
fn tensor_bytes(ckpt: &Checkpoint, tensor: &str, storage: Storage) -> Result<Vec<Vec<u8>>> {
    let shape = ckpt.shape(tensor)?;
    tensor_rows_bytes(ckpt, tensor, &shape, storage, 0..rows_of(&shape))
}

/// Rows of `shape` for the row-chunked conversion: a matrix's rows, or 1.
fn rows_of(shape: &[usize]) -> usize {
    match shape {
        [rows, _] => *rows,
        _ => 1,
    }
}

/// [`tensor_bytes`] of rows `rows` of `tensor` (`shape`) only: every part
/// of those rows. Each row is converted on its own, so the chunks of a
/// tensor joined are the whole tensor's bytes.
fn tensor_rows_bytes(
    ckpt: &Checkpoint,
    tensor: &str,
    shape: &[usize],
    storage: Storage,
    rows: std::ops::Range<usize>,
) -> Result<Vec<Vec<u8>>> {
    let named =
        |e: String| Error::Input(format!("{}: tensor \"{tensor}\": {e}", ckpt.path.display()));
    let cols = cols_of(shape);
    match storage {
        Storage::Plain(d) => Ok(vec![encode_weights(&ckpt.read_f32_rows(tensor, rows)?, d)?]),
        Storage::Blocks(form) => {
            let n = rows.len();
            match ckpt.ggml_rows(tensor).filter(|r| r.ty == form.ggml) {
                // Kept: the file's own blocks, repacked.
                Some(r) => {
                    let bytes = file_rows(r.bytes, r.shape[0], r.order.as_deref(), rows);
                    blocks::repack(&form, &bytes, n, r.shape[1], None).map_err(named)
                }
                // Quantized here from the values (`--weights q8_0|q4_0`).
                None => {
                    let values = ckpt.read_f32_rows(tensor, rows)?;
                    let raw = blocks::quantize(form.ggml, &values).map_err(named)?;
                    blocks::repack(&form, &raw, n, cols, None).map_err(named)
                }
            }
        }
        Storage::Int8Rows => {
            let (codes, scales) = quantize_rows_i8(&ckpt.read_f32_rows(tensor, rows)?, cols);
            let scales = scales.iter().flat_map(|x| x.to_le_bytes()).collect();
            Ok(vec![codes.iter().map(|&q| q as u8).collect(), scales])
        }
    }
}

/// Rounds each row of `cols` values to i8 codes with one f32 scale per
/// row, `max|w|/127` (0 for an all-zero row): `w ≈ code · scale`, the
/// codes `round_ties_even(w / scale)`.
pub fn quantize_rows_i8(values: &[f32], cols: usize) -> (Vec<i8>, Vec<f32>) {
    let mut codes = Vec::with_capacity(values.len());
    let mut scales = Vec::with_capacity(values.len() / cols.max(1));
    for row in values.chunks(cols.max(1)) {
        let amax = row.iter().fold(0f32, |m, &x| m.max(x.abs()));
        let scale = amax / 127.0;
        scales.push(scale);
        codes.extend(row.iter().map(|&x| {
            if scale == 0.0 {
                0
            } else {
                (x / scale).round_ties_even().clamp(-127.0, 127.0) as i8
            }
        }));
    }
    (codes, scales)
}

/// Shapes of the KV-cache export (`kiln export --kv-cache`): `default()`
/// (P = SEQ, N = 2·P, f32 caches, no top-K) and the setters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KvCacheOptions {
    /// Prompt bucket P (default: SEQ).
    pub prompt_len: Option<usize>,
    /// Max context N (default: 2·P, capped at the model's max positions).
    pub max_context: Option<usize>,
    /// Cache dtype: f32 or bf16.
    pub cache_dtype: DType,
    /// `Some(K)`: prefill and decode also return the K largest logits and
    /// their ids (`kiln export --sampling topk=K`).
    pub top_k: Option<usize>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            seq: 64,
            out_dir: PathBuf::from("."),
            name: None,
            function: None,
            weights: Weights::Dtype(DType::BF16),
            weights_for: Vec::new(),
            constants: ConstantPolicy::default(),
            progress: None,
            kv: None,
            max_tensor_bytes: crate::models::MAX_TENSOR_BYTES,
        }
    }
}

impl ExportOptions {
    /// The defaults with sequence length `seq` and output directory `out_dir`.
    pub fn new(seq: usize, out_dir: impl Into<PathBuf>) -> Self {
        ExportOptions {
            seq,
            out_dir: out_dir.into(),
            ..Default::default()
        }
    }

    /// Sets the fixed sequence length.
    pub fn seq(mut self, seq: usize) -> Self {
        self.seq = seq;
        self
    }

    /// Sets the output directory.
    pub fn out_dir(mut self, out_dir: impl Into<PathBuf>) -> Self {
        self.out_dir = out_dir.into();
        self
    }

    /// Sets the base name of the files (default: the checkpoint's name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the exported function name (default: from the name).
    pub fn function(mut self, function: impl Into<String>) -> Self {
        self.function = Some(function.into());
        self
    }

    /// Sets how the weights are stored (a [`Weights`] or a [`DType`]).
    pub fn weights(mut self, weights: impl Into<Weights>) -> Self {
        self.weights = weights.into();
        self
    }

    /// Sets the per-tensor exceptions to the weights' form.
    pub fn weights_for(mut self, weights_for: Vec<(String, Weights)>) -> Self {
        self.weights_for = weights_for;
        self
    }

    /// Sets the constant materialization policy.
    pub fn constants(mut self, constants: ConstantPolicy) -> Self {
        self.constants = constants;
        self
    }

    /// Sets the progress receiver (`None`: nothing is reported).
    pub fn progress(
        mut self,
        progress: impl Into<Option<crate::progress::SharedProgress>>,
    ) -> Self {
        self.progress = progress.into();
        self
    }

    /// Sets the KV-cache pair to write too (`None`: no pair).
    pub fn kv(mut self, kv: impl Into<Option<KvCacheOptions>>) -> Self {
        self.kv = kv.into();
        self
    }

    /// Sets the largest tensor the graphs may bind, in bytes.
    pub fn max_tensor_bytes(mut self, max_tensor_bytes: u64) -> Self {
        self.max_tensor_bytes = max_tensor_bytes;
        self
    }
}

impl Default for KvCacheOptions {
    /// P = SEQ, N = 2·P (capped), f32 caches, no top-K outputs.
    fn default() -> Self {
        KvCacheOptions {
            prompt_len: None,
            max_context: None,
            cache_dtype: DType::F32,
            top_k: None,
        }
    }
}

impl KvCacheOptions {
    /// Sets the prompt bucket P (`None`: SEQ).
    pub fn prompt_len(mut self, prompt_len: impl Into<Option<usize>>) -> Self {
        self.prompt_len = prompt_len.into();
        self
    }

    /// Sets the max context N (`None`: 2·P, capped).
    pub fn max_context(mut self, max_context: impl Into<Option<usize>>) -> Self {
        self.max_context = max_context.into();
        self
    }

    /// Sets the cache dtype (f32 or bf16).
    pub fn cache_dtype(mut self, cache_dtype: DType) -> Self {
        self.cache_dtype = cache_dtype;
        self
    }

    /// Sets K of the top-K outputs (`None`: no top-K outputs).
    pub fn top_k(mut self, top_k: impl Into<Option<usize>>) -> Self {
        self.top_k = top_k.into();
        self
    }
}

/// What [`export`] wrote, with timings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExportReport {
    /// The manifest (also written to disk).
    pub manifest: ExportManifest,
    /// Path of the manifest.
    pub manifest_path: PathBuf,
    /// Paths of the MLIR, safetensors and irpa files.
    pub mlir: PathBuf,
    /// Safetensors path.
    pub safetensors: PathBuf,
    /// IRPA path.
    pub irpa: PathBuf,
    /// The KV-cache module, when exported.
    pub kv_mlir: Option<PathBuf>,
    /// Seconds spent building and printing the graph.
    pub graph_seconds: f64,
    /// Seconds spent converting and writing weights.
    pub weights_seconds: f64,
    /// Why a module will not compile for Vulkan, when one will not: the
    /// first thing in it past a device limit that kiln does not split (a
    /// KV cache at a large N, attention scores at a long SEQ, a weight
    /// matrix over 2^27 bytes as f32, any table with `--max-tensor-bytes
    /// 0`), as `kiln compile --target vulkan` would refuse it
    /// ([`crate::iree::limits::first_vulkan_problem`]). CPU targets are fine.
    pub vulkan_issues: Vec<String>,
}

/// Makes `name` a valid MLIR identifier: characters outside
/// `[A-Za-z0-9_]` become `_`; a leading digit gets an `m_` prefix.
pub fn identifier(name: &str) -> String {
    crate::stablehlo::sanitize_identifier(name, "m_")
}

/// Converts f32 values to the stored little-endian bytes of `dtype`.
pub fn encode_weights(values: &[f32], dtype: DType) -> Result<Vec<u8>> {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 16;
    match dtype {
        DType::F32 => Ok(values.iter().flat_map(|x| x.to_le_bytes()).collect()),
        DType::BF16 | DType::F16 => {
            // One pass straight into the little-endian bytes.
            let one: fn(f32) -> u16 = if dtype == DType::BF16 {
                f32_to_bf16_bits
            } else {
                f32_to_f16_bits
            };
            let mut out = vec![0u8; values.len() * 2];
            out.par_chunks_mut(CHUNK * 2)
                .zip(values.par_chunks(CHUNK))
                .for_each(|(o, s)| {
                    for (d, &x) in o.chunks_exact_mut(2).zip(s) {
                        d.copy_from_slice(&one(x).to_le_bytes());
                    }
                });
            Ok(out)
        }
        other => Err(Error::Input(format!("weights cannot be stored as {other}"))),
    }
}

/// Little-endian stored values of an i32, f16 or f32 part as f64.
fn bytes_to_f64(d: DType, b: &[u8]) -> Vec<f64> {
    match d {
        DType::I32 => b
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        DType::F16 => b
            .chunks_exact(2)
            .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64())
            .collect(),
        _ => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
    }
}

/// The safetensors dtype of a stored dtype (f32 for any other).
fn st_dtype(d: DType) -> StDType {
    match d {
        DType::BF16 => StDType::BF16,
        DType::F16 => StDType::F16,
        DType::I32 => StDType::I32,
        DType::I8 => StDType::I8,
        _ => StDType::F32,
    }
}

/// Inline weights for the printer: values read from the checkpoint and
/// rounded to the stored dtype.
struct CheckpointWeights<'a>(&'a Checkpoint, &'a WeightPlan);

impl WeightSource for CheckpointWeights<'_> {
    fn values(&self, key: &str, ty: &crate::graph::TensorType) -> Result<Vec<f64>> {
        if let Some((tensor, suffix)) = key.rsplit_once('.') {
            let shape = self.0.tensors().iter().find(|(n, _)| n == tensor);
            let storage = self.1.storage(tensor);
            if let Some(parts) = shape.and_then(|(_, s)| storage.parts(cols_of(s))) {
                // A part of a block-quantized or i8 weight.
                if let Some(i) = parts.iter().position(|p| p.0 == suffix) {
                    let bytes = tensor_bytes(self.0, tensor, storage)?.swap_remove(i);
                    return Ok(bytes_to_f64(ty.dtype, &bytes));
                }
            }
        }
        let v = self.0.read_f32(key)?;
        if ty.dtype == DType::I32 && v.len() == 2 * ty.numel() {
            // bf16 pairs (`Graph::weight`): element 2i low, 2i+1 high.
            let bits = |x: f32| half::bf16::from_f32(x).to_bits() as u32;
            return Ok(v
                .chunks_exact(2)
                .map(|p| (bits(p[0]) | (bits(p[1]) << 16)) as i32 as f64)
                .collect());
        }
        Ok(v.iter()
            .map(|&x| match ty.dtype {
                DType::BF16 => half::bf16::from_f32(x).to_f64(),
                DType::F16 => half::f16::from_f32(x).to_f64(),
                // bf16 weights are declared by their bits (`Graph::weight`).
                DType::I16 => half::bf16::from_f32(x).to_bits() as i16 as f64,
                _ => x as f64,
            })
            .collect())
    }
}

/// The manifest's name of constant policy `p`.
fn policy_name(p: &ConstantPolicy) -> String {
    match p {
        ConstantPolicy::ExternalAlways { .. } => "external".into(),
        ConstantPolicy::InlineAlways => "inline".into(),
        ConstantPolicy::SizeThreshold { bytes, .. } => format!("threshold={bytes}"),
    }
}

/// The parameter scope of constant policy `p` (`model` when inline).
fn policy_scope(p: &ConstantPolicy) -> String {
    match p {
        ConstantPolicy::ExternalAlways { scope } | ConstantPolicy::SizeThreshold { scope, .. } => {
            scope.clone()
        }
        ConstantPolicy::InlineAlways => "model".into(),
    }
}

/// Builds the forward module of `ckpt` (one function, argmax in the graph).
pub fn build_module(
    ckpt: &Checkpoint,
    seq: usize,
    weights: &WeightPlan,
    module_name: &str,
    function: &str,
    max_tensor_bytes: u64,
) -> Result<Module> {
    let g = build_graph(
        &ckpt.config,
        &GraphOptions {
            seq,
            weights: weights.clone(),
            function: function.to_string(),
            max_tensor_bytes,
        },
    )?;
    let mut m = Module::new(module_name);
    m.set_schedule(&[("batch", 0), ("position", 1)]);
    m.functions.push(g);
    Ok(m)
}

/// Resolves the KV-cache shapes and names for a model exported as `function`.
pub fn kv_options(
    cfg: &DecoderConfig,
    seq: usize,
    weights: &WeightPlan,
    function: &str,
    kv: &KvCacheOptions,
    max_tensor_bytes: u64,
) -> KvOptions {
    let p = kv.prompt_len.unwrap_or(seq);
    let n = kv
        .max_context
        .unwrap_or_else(|| (2 * p).min(cfg.max_position_embeddings.max(p + 1)));
    KvOptions {
        prompt_len: p,
        max_context: n,
        weights: weights.clone(),
        cache_dtype: kv.cache_dtype,
        prefill: format!("{function}_prefill"),
        decode: format!("{function}_decode"),
        max_tensor_bytes,
        top_k: kv.top_k,
        spans: Vec::new(),
    }
}

/// Builds the KV-cache module: prefill and decode over the same parameters.
pub fn build_kv_module(ckpt: &Checkpoint, opts: &KvOptions, module_name: &str) -> Result<Module> {
    let mut m = Module::new(module_name);
    m.functions.push(build_prefill(&ckpt.config, opts)?);
    m.functions.push(build_decode(&ckpt.config, opts)?);
    Ok(m)
}

/// The manifest record of written file `w`, by file name.
fn record(w: Written) -> FileRecord {
    FileRecord {
        path: w
            .path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        bytes: w.bytes,
        sha256: w.sha256.unwrap_or_default(),
    }
}

/// What the converting thread sends each writer thread: an entry begins,
/// its next converted rows (shared by both writers), or it ends.
enum Piece<'a> {
    Begin(&'a str),
    Rows(std::sync::Arc<Vec<u8>>),
    End,
}

/// A writer thread's body: writes every entry that arrives on `rx` (in
/// order, chunk by chunk), then finishes the file.
fn drain<W: TensorWriter>(mut w: W, rx: std::sync::mpsc::Receiver<Piece<'_>>) -> Result<Written> {
    for piece in rx {
        match piece {
            Piece::Begin(name) => w.begin_tensor(name)?,
            Piece::Rows(bytes) => w.write_chunk(&bytes)?,
            Piece::End => w.end_tensor()?,
        }
    }
    Ok(w.finish_written()?)
}

/// Sends `piece` to both writers; false when one has stopped (on an
/// error, which its join reports).
fn send_both<'a>(
    a: &std::sync::mpsc::SyncSender<Piece<'a>>,
    b: &std::sync::mpsc::SyncSender<Piece<'a>>,
    piece: &dyn Fn() -> Piece<'a>,
) -> bool {
    a.send(piece()).is_ok() && b.send(piece()).is_ok()
}

/// Values converted per chunk: 4 MiB of f32, whatever the tensor's size.
const CHUNK_VALUES: usize = 1 << 20;

/// The progress step of the weight-writing pipeline.
const WRITING: &str = "writing weights";

/// The names an export is written under: its base name, the exported
/// function and the file names, each `NAME` plus a suffix.
struct Names {
    name: String,
    function: String,
    mlir: String,
    kv_mlir: String,
    safetensors: String,
    irpa: String,
    manifest: String,
}

impl Names {
    /// The names of `opts` (default: the checkpoint's); the base name must
    /// be a plain file name.
    fn resolve(ckpt: &Checkpoint, opts: &ExportOptions) -> Result<Names> {
        let name = opts.name.clone().unwrap_or_else(|| ckpt.name.clone());
        if name.is_empty() || name.contains(['/', '\\']) {
            return Err(Error::Input(format!(
                "--name \"{name}\" must be a plain file name"
            )));
        }
        Ok(Names {
            function: opts.function.clone().unwrap_or_else(|| identifier(&name)),
            mlir: format!("{name}-gen.mlir"),
            kv_mlir: format!("{name}-kv-gen.mlir"),
            safetensors: format!("{name}.safetensors"),
            irpa: format!("{name}.irpa"),
            manifest: format!("{name}.json"),
            name,
        })
    }
}

/// The printed modules of an export.
struct Graphs {
    /// The forward module's MLIR.
    text: String,
    /// The KV-cache pair's shapes and MLIR, when asked for.
    kv: Option<(KvOptions, String)>,
}

/// Builds and prints the forward module and, with `opts.kv`, the KV-cache
/// pair.
fn print_graphs(
    ckpt: &Checkpoint,
    opts: &ExportOptions,
    plan: &WeightPlan,
    names: &Names,
) -> Result<Graphs> {
    let print = |m: &Module| {
        print_module(
            m,
            &PrintOptions {
                constants: opts.constants.clone(),
            },
            Some(&CheckpointWeights(ckpt, plan)),
        )
    };
    let module = build_module(
        ckpt,
        opts.seq,
        plan,
        &identifier(&names.name),
        &names.function,
        opts.max_tensor_bytes,
    )?;
    let text = print(&module)?;
    let kv = match &opts.kv {
        Some(kv) => {
            let ko = kv_options(
                &ckpt.config,
                opts.seq,
                plan,
                &names.function,
                kv,
                opts.max_tensor_bytes,
            );
            let m = build_kv_module(ckpt, &ko, &format!("{}_kv", identifier(&names.name)))?;
            let kv_text = print(&m)?;
            Some((ko, kv_text))
        }
        None => None,
    };
    Ok(Graphs { text, kv })
}

/// What the weight-writing pipeline wrote: both archives, the parameter
/// count and the stored bytes.
struct WeightFiles {
    safetensors: Written,
    irpa: Written,
    count: u64,
    bytes: u64,
}

/// Creates the safetensors and irpa writers (hashing as they write) for
/// the `stored` entries.
fn open_archives(
    stored: &[Entry],
    st_path: &Path,
    irpa_path: &Path,
) -> Result<(SafetensorsWriter, IrpaWriter)> {
    let specs: Vec<TensorSpec> = stored
        .iter()
        .map(|e| TensorSpec::new(e.name.clone(), st_dtype(e.dtype), &e.shape))
        .collect();
    let entries: Vec<EntrySpec> = stored
        .iter()
        .map(|e| {
            EntrySpec::data(
                e.name.clone(),
                e.shape.iter().product::<u64>() * e.dtype.size() as u64,
            )
        })
        .collect();
    let meta = vec![("format".to_string(), "pt".to_string())];
    let st = SafetensorsWriter::new_hashed(st_path, &specs, &meta)?;
    let irpa = IrpaWriter::new_hashed(irpa_path, entries)?;
    Ok((st, irpa))
}

/// Writes the `stored` entries of `ckpt` to both archives in `staging`.
///
/// This thread reads and converts each entry in row chunks; two writer
/// threads each write (and hash) one file. Rendezvous channels bound what
/// is in memory to the chunk being converted plus the one being written,
/// whatever the tensor's size. An entry that is one part of several (block
/// forms, i8 rows) converts each chunk's rows again per part.
fn write_weights(
    ckpt: &Checkpoint,
    plan: &WeightPlan,
    stored: &[Entry],
    staging: &Staging,
    names: &Names,
    progress: &dyn Progress,
) -> Result<WeightFiles> {
    let (st, irpa) = open_archives(
        stored,
        &staging.path(&names.safetensors),
        &staging.path(&names.irpa),
    )?;
    progress.start(
        WRITING,
        ckpt.tensors().len() as u64,
        crate::progress::Unit::Tensors,
    );
    let written = std::thread::scope(|scope| -> Result<_> {
        let (st_tx, st_rx) = std::sync::mpsc::sync_channel::<Piece<'_>>(0);
        let (irpa_tx, irpa_rx) = std::sync::mpsc::sync_channel::<Piece<'_>>(0);
        let st_thread = scope.spawn(move || drain(st, st_rx));
        let irpa_thread = scope.spawn(move || drain(irpa, irpa_rx));
        let sent = send_entries(ckpt, plan, stored, (&st_tx, &irpa_tx), progress);
        drop((st_tx, irpa_tx));
        let join = |h: std::thread::ScopedJoinHandle<'_, Result<Written>>| {
            h.join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        };
        let (st_w, irpa_w) = (join(st_thread), join(irpa_thread));
        let (count, bytes) = sent?;
        Ok(WeightFiles {
            safetensors: st_w?,
            irpa: irpa_w?,
            count,
            bytes,
        })
    });
    progress.finish(WRITING, written.is_ok());
    written
}

/// The converting side of [`write_weights`]: reads every entry of
/// `stored` in row chunks and sends it to both writers. Stops early when a
/// writer has stopped (its join reports why). Returns the parameter count
/// and the bytes sent, or the first read error.
fn send_entries<'a>(
    ckpt: &Checkpoint,
    plan: &WeightPlan,
    stored: &'a [Entry],
    (st, irpa): (&SyncSender<Piece<'a>>, &SyncSender<Piece<'a>>),
    progress: &dyn Progress,
) -> Result<(u64, u64)> {
    let mut count = 0u64;
    let mut bytes_total = 0u64;
    let mut names = stored.iter().map(|e| e.name.as_str());
    for (n, s) in ckpt.tensors() {
        let storage = plan.storage(n);
        let parts = storage.parts(cols_of(s)).map_or(1, |p| p.len());
        let rows = rows_of(s);
        let step = (CHUNK_VALUES / (s.iter().product::<usize>() / rows).max(1)).max(1);
        for part in 0..parts {
            let name = names.next().expect("one entry per stored part");
            if !send_both(st, irpa, &|| Piece::Begin(name)) {
                return Ok((count, bytes_total));
            }
            for start in (0..rows).step_by(step) {
                let chunk = start..(start + step).min(rows);
                let mut b = tensor_rows_bytes(ckpt, n, s, storage, chunk)?;
                let bytes = std::sync::Arc::new(b.swap_remove(part));
                bytes_total += bytes.len() as u64;
                if !send_both(st, irpa, &|| Piece::Rows(bytes.clone())) {
                    return Ok((count, bytes_total));
                }
            }
            if !send_both(st, irpa, &|| Piece::End) {
                return Ok((count, bytes_total));
            }
        }
        count += s.iter().product::<usize>() as u64;
        progress.advance(WRITING, 1);
    }
    Ok((count, bytes_total))
}

/// The file record of a module written from `text` as `file`.
fn text_record(file: &str, text: &str) -> FileRecord {
    FileRecord {
        path: file.to_string(),
        bytes: text.len() as u64,
        sha256: crate::util::sha256_hex(text.as_bytes()),
    }
}

/// The manifest's entry for the KV-cache pair `ko`, printed as `mlir`.
fn kv_manifest(ckpt: &Checkpoint, ko: &KvOptions, mlir: &str) -> KvManifest {
    KvManifest {
        mlir: mlir.to_string(),
        pair: KvPair {
            prefill: ko.prefill.clone(),
            decode: ko.decode.clone(),
            prompt_len: ko.prompt_len,
            max_context: ko.max_context,
            cache_dtype: ko.cache_dtype.to_string(),
            cache_shape: ko.cache_type(&ckpt.config).shape.to_vec(),
            cache_count: ko.cache_count(&ckpt.config),
            top_k: ko.top_k,
        },
    }
}

/// The export manifest: the files' records (the writers hashed every byte
/// as they wrote it, so no second pass) and what the export was.
fn export_manifest(
    ckpt: &Checkpoint,
    opts: &ExportOptions,
    names: &Names,
    graphs: &Graphs,
    parameter_tensors: usize,
    weights: WeightFiles,
) -> ExportManifest {
    let mut files = std::collections::BTreeMap::new();
    files.insert("mlir".to_string(), text_record(&names.mlir, &graphs.text));
    files.insert("safetensors".to_string(), record(weights.safetensors));
    files.insert("irpa".to_string(), record(weights.irpa));
    let kv = graphs.kv.as_ref().map(|(ko, kv_text)| {
        files.insert("kv_mlir".to_string(), text_record(&names.kv_mlir, kv_text));
        kv_manifest(ckpt, ko, &names.kv_mlir)
    });
    let seq = opts.seq;
    ExportManifest {
        format: EXPORT_FORMAT.to_string(),
        kiln_version: crate::VERSION.to_string(),
        name: names.name.clone(),
        function: names.function.clone(),
        seq,
        scope: policy_scope(&opts.constants),
        input: format!("tensor<1x{seq}xi32>"),
        output: format!("tensor<{seq}xi32>"),
        architecture: ckpt.config.family.name().to_string(),
        config: ckpt.config.clone(),
        vocab_size: ckpt.config.vocab_size,
        bos_token_id: ckpt.config.bos_token_id,
        eos_token_ids: ckpt.config.eos_token_ids.clone(),
        weights_dtype: opts.weights.to_string(),
        constants: policy_name(&opts.constants),
        parameter_tensors,
        parameter_count: weights.count,
        parameter_bytes: weights.bytes,
        source: ckpt.path.display().to_string(),
        files,
        kv,
    }
}

/// Writes `manifest` into `staging`, then moves every file into place, the
/// manifest last.
fn commit(
    staging: Staging,
    names: &Names,
    graphs: &Graphs,
    manifest: &ExportManifest,
) -> Result<()> {
    let json = serde_json::to_string_pretty(manifest).expect("a manifest serializes") + "\n";
    crate::util::write_atomic(staging.path(&names.manifest), json.as_bytes())?;
    let mut done = vec![&names.mlir, &names.safetensors, &names.irpa];
    if graphs.kv.is_some() {
        done.insert(1, &names.kv_mlir);
    }
    staging.commit(&done, &names.manifest)?;
    Ok(())
}

/// The first thing past a Vulkan device limit in each module, prefixed
/// with the module's file name ([`ExportReport::vulkan_issues`]).
fn vulkan_issues(names: &Names, graphs: &Graphs) -> Vec<String> {
    let texts = std::iter::once((&names.mlir, &graphs.text))
        .chain(graphs.kv.as_ref().map(|(_, t)| (&names.kv_mlir, t)));
    texts
        .filter_map(|(file, t)| {
            Some(format!(
                "{file} {}",
                crate::iree::limits::first_vulkan_problem(t)?
            ))
        })
        .collect()
}

/// Exports `ckpt`: see the module docs.
pub fn export(ckpt: &Checkpoint, opts: &ExportOptions) -> Result<ExportReport> {
    let plan = weight_plan(ckpt, opts.weights, &opts.weights_for)?;
    let names = Names::resolve(ckpt, opts)?;
    let t0 = Instant::now();
    let graphs = print_graphs(ckpt, opts, &plan, &names)?;
    let graph_seconds = t0.elapsed().as_secs_f64();

    let staging = Staging::create(&opts.out_dir, ".kiln-export-", "output directory")?;
    crate::util::write_atomic(staging.path(&names.mlir), graphs.text.as_bytes())?;
    if let Some((_, kv_text)) = &graphs.kv {
        crate::util::write_atomic(staging.path(&names.kv_mlir), kv_text.as_bytes())?;
    }

    let t1 = Instant::now();
    let stored = entries(ckpt, &plan);
    let progress = crate::progress::or_silent(&opts.progress);
    let weights = write_weights(ckpt, &plan, &stored, &staging, &names, progress)?;
    let weights_seconds = t1.elapsed().as_secs_f64();

    let manifest = export_manifest(ckpt, opts, &names, &graphs, stored.len(), weights);
    commit(staging, &names, &graphs, &manifest)?;
    let out = |file: &str| opts.out_dir.join(file);
    Ok(ExportReport {
        manifest_path: out(&names.manifest),
        mlir: out(&names.mlir),
        safetensors: out(&names.safetensors),
        irpa: out(&names.irpa),
        kv_mlir: graphs.kv.is_some().then(|| out(&names.kv_mlir)),
        graph_seconds,
        weights_seconds,
        vulkan_issues: vulkan_issues(&names, &graphs),
        manifest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chunked encoder gives each element's own rounding, in order,
    /// across chunk boundaries and a ragged tail.
    #[test]
    fn encode_weights_matches_per_element_rounding() {
        let n = (1 << 16) * 2 + 1500; // two full chunks and a ragged tail
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut values: Vec<f32> = (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                f32::from_bits(state as u32)
            })
            .collect();
        values[..6].copy_from_slice(&[
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NAN,
            1.0 + f32::EPSILON,
            65520.0,
        ]);
        for (dtype, one) in [
            (DType::BF16, f32_to_bf16_bits as fn(f32) -> u16),
            (DType::F16, f32_to_f16_bits as fn(f32) -> u16),
        ] {
            let bytes = encode_weights(&values, dtype).unwrap();
            assert_eq!(bytes.len(), 2 * n);
            for (i, (b, &v)) in bytes.chunks_exact(2).zip(&values).enumerate() {
                assert_eq!(
                    u16::from_le_bytes([b[0], b[1]]),
                    one(v),
                    "{dtype} element {i} ({v})"
                );
            }
        }
        let f32_bytes = encode_weights(&values[..3], DType::F32).unwrap();
        assert_eq!(
            f32_bytes,
            [0.0f32, -0.0, f32::INFINITY]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<_>>()
        );
    }
}
