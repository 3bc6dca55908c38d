//! The modules of an export: the forward module and the KV-cache pair,
//! built from the checkpoint's graph and printed as StableHLO (weights
//! that are printed inline read from the checkpoint as stored).

use super::error::Result;
use super::layout::Artifact;
use super::options::{ExportOptions, KvCacheOptions};
use super::plan::{cols_of, tensor_bytes};
use super::Names;
use crate::graph::{DType, Module};
use crate::models::decoder::{build_graph, GraphOptions};
use crate::models::kv::{build_functions, KvOptions};
use crate::models::{Checkpoint, DecoderConfig, WeightPlan};
use crate::params::convert::bytes_to_f64;
use crate::stablehlo::{print_module, PrintError, PrintOptions, WeightSource};

/// The printed modules of an export.
pub(super) struct Graphs {
    /// The forward module's MLIR.
    pub(super) text: String,
    /// The KV-cache pair's shapes and MLIR, when asked for.
    pub(super) kv: Option<(KvOptions, String)>,
    /// The row chunks the modules read as parameter slices: (key, offset,
    /// length in bytes), sorted.
    pub(super) chunks: Vec<(String, u64, u64)>,
}

/// The parameter slices `module` reads (key, offset, length in bytes).
fn chunks_of(module: &Module, into: &mut std::collections::BTreeSet<(String, u64, u64)>) {
    for f in &module.functions {
        for n in f.nodes() {
            if let crate::graph::Op::Parameter {
                key,
                offset: Some(o),
            } = &n.op
            {
                into.insert((key.clone(), *o, n.ty.byte_size() as u64));
            }
        }
    }
}

/// Builds and prints the forward module and, with `opts.kv`, the KV-cache
/// pair.
pub(super) fn print_graphs(
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
        &identifier(names.layout.name()),
        &names.function,
        opts.max_tensor_bytes,
    )?;
    let text = print(&module)?;
    let mut chunks = std::collections::BTreeSet::new();
    chunks_of(&module, &mut chunks);
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
            let m = build_kv_module(
                ckpt,
                &ko,
                &format!("{}_kv", identifier(names.layout.name())),
            )?;
            let kv_text = print(&m)?;
            chunks_of(&m, &mut chunks);
            Some((ko, kv_text))
        }
        None => None,
    };
    Ok(Graphs {
        text,
        kv,
        chunks: chunks.into_iter().collect(),
    })
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
        spans: kv
            .spans
            .clone()
            .unwrap_or_else(|| KvCacheOptions::default_spans(p, n)),
    }
}

/// Builds the KV-cache module: prefill and decode over the same
/// parameters, for each attention span and then for all N positions.
pub fn build_kv_module(ckpt: &Checkpoint, opts: &KvOptions, module_name: &str) -> Result<Module> {
    let mut m = Module::new(module_name);
    m.functions = build_functions(&ckpt.config, opts)?;
    Ok(m)
}

/// Makes `name` a valid MLIR identifier: characters outside
/// `[A-Za-z0-9_]` become `_`; a leading digit gets an `m_` prefix.
pub fn identifier(name: &str) -> String {
    crate::stablehlo::sanitize_identifier(name, "m_")
}

/// Inline weights for the printer: values read from the checkpoint and
/// rounded to the stored dtype.
struct CheckpointWeights<'a>(&'a Checkpoint, &'a WeightPlan);

impl WeightSource for CheckpointWeights<'_> {
    fn values(&self, key: &str, ty: &crate::graph::TensorType) -> Result<Vec<f64>, PrintError> {
        self.read(key, ty).map_err(|e| PrintError::weights(key, e))
    }
}

impl CheckpointWeights<'_> {
    /// [`WeightSource::values`] with the checkpoint's own errors.
    fn read(&self, key: &str, ty: &crate::graph::TensorType) -> Result<Vec<f64>> {
        if let Some((tensor, suffix)) = key.rsplit_once('.') {
            let shape = self.0.tensors().iter().find(|(n, _)| n == tensor);
            let storage = self.1.storage(tensor);
            if let Some(parts) = shape.and_then(|(_, s)| storage.parts(cols_of(s))) {
                // A part of a block-quantized or i8 weight.
                if let Some(i) = parts.iter().position(|p| p.0 == suffix) {
                    let bytes = tensor_bytes(self.0, tensor, storage)?.swap_remove(i);
                    return Ok(bytes_to_f64(ty.dtype.into(), &bytes));
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

/// The first thing past a Vulkan device limit in each module, prefixed
/// with the module's file name ([`ExportReport::vulkan_issues`]).
pub(super) fn vulkan_issues(names: &Names, graphs: &Graphs) -> Vec<String> {
    let file = |a| names.layout.file(a);
    let texts = std::iter::once((file(Artifact::Mlir), &graphs.text))
        .chain(graphs.kv.as_ref().map(|(_, t)| (file(Artifact::KvMlir), t)));
    texts
        .filter_map(|(file, t)| {
            Some(format!(
                "{file} {}",
                crate::iree::limits::first_vulkan_problem(t)?
            ))
        })
        .collect()
}
