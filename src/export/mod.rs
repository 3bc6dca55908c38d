//! Export of a checkpoint: `<name>-gen.mlir` (StableHLO, weights external),
//! `<name>.safetensors` and `<name>.irpa` (the same tensors, keyed by their
//! HF names) and `<name>.json` (the manifest).
//!
//! Weights are streamed one tensor at a time (read → convert → written to
//! both files), so memory stays near one tensor's size. Everything is
//! written into a staging directory inside the output directory and only
//! renamed into place once all four files are complete: a failed export
//! leaves no partial output.
//!
//! | file | job |
//! |---|---|
//! | `options` | what is asked for: [`ExportOptions`], [`Weights`], [`KvCacheOptions`] |
//! | `plan` | how each weight is stored (`weight_plan`) and its stored bytes |
//! | `graphs` | the forward module and the KV-cache pair, built and printed |
//! | `write` | the weights streamed into both archives; the commit |
//! | `manifest` | the export manifest `NAME.json` |
//! | `layout` | every file name, both ways ([`Layout`]) |

mod compiled;
mod error;
mod graphs;
mod layout;
mod manifest;
mod options;
mod plan;
mod write;

pub use error::ExportError;
pub use layout::{Artifact, Layout, ModuleFile};
pub(crate) use manifest::checkpoint_record;
pub use options::{ExportOptions, KvCacheOptions, Weights};

use graphs::identifier;
use plan::weight_plan;

use crate::manifest::ExportManifest;
use crate::models::Checkpoint;
use crate::util::Staging;
use error::Result;
use std::path::PathBuf;
use std::time::Instant;

/// The names an export is written under: its files (in the output
/// directory) and the exported function.
struct Names {
    layout: Layout,
    function: String,
}

impl Names {
    /// The names of `opts` (default: the checkpoint's); the base name must
    /// be a plain file name.
    fn resolve(ckpt: &Checkpoint, opts: &ExportOptions) -> Result<Names> {
        let name = opts.name.clone().unwrap_or_else(|| ckpt.name.clone());
        if name.is_empty() || name.contains(['/', '\\']) {
            return Err(ExportError::BadName { name });
        }
        Ok(Names {
            function: opts.function.clone().unwrap_or_else(|| identifier(&name)),
            layout: Layout::new(&opts.out_dir, name),
        })
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
    /// (`iree::limits::first_vulkan_problem`). CPU targets are fine.
    pub vulkan_issues: Vec<String>,
}

/// Exports `ckpt`: see the module docs.
pub fn export(ckpt: &Checkpoint, opts: &ExportOptions) -> Result<ExportReport> {
    let plan = weight_plan(ckpt, opts.weights, &opts.weights_for)?;
    let names = Names::resolve(ckpt, opts)?;
    let t0 = Instant::now();
    let graphs = graphs::print_graphs(ckpt, opts, &plan, &names)?;
    let graph_seconds = t0.elapsed().as_secs_f64();

    let staging = Staging::create(&opts.out_dir, ".kiln-export-", "output directory")?;
    let file = |a| names.layout.file(a);
    crate::util::write_atomic(staging.path(&file(Artifact::Mlir)), graphs.text.as_bytes())?;
    if let Some((_, kv_text)) = &graphs.kv {
        crate::util::write_atomic(staging.path(&file(Artifact::KvMlir)), kv_text.as_bytes())?;
    }

    let t1 = Instant::now();
    let stored = plan::entries(ckpt, &plan);
    let progress = crate::progress::or_silent(&opts.progress);
    let weights = write::write_weights(
        ckpt,
        &plan,
        &stored,
        &graphs.chunks,
        &staging,
        &names,
        progress,
    )?;
    let weights_seconds = t1.elapsed().as_secs_f64();

    let checkpoint = manifest::checkpoint_record(&ckpt.path)?;
    let manifest = manifest::export_manifest(
        ckpt,
        opts,
        &names,
        &graphs,
        stored.len(),
        weights,
        checkpoint,
    );
    write::commit(staging, &names, &graphs, &manifest)?;
    let path = |a| names.layout.path(a);
    Ok(ExportReport {
        manifest_path: path(Artifact::Manifest),
        mlir: path(Artifact::Mlir),
        safetensors: path(Artifact::Safetensors),
        irpa: path(Artifact::Irpa),
        kv_mlir: graphs.kv.is_some().then(|| path(Artifact::KvMlir)),
        graph_seconds,
        weights_seconds,
        vulkan_issues: graphs::vulkan_issues(&names, &graphs),
        manifest,
    })
}
