//! The export manifest, `NAME.json`: what the export was, and the
//! records of the files it wrote.

use super::error::Result;
use super::graphs::Graphs;
use super::layout::Artifact;
use super::options::ExportOptions;
use super::write::WeightFiles;
use super::Names;
use crate::manifest::{
    io_types, CheckpointRecord, Contract, ExportManifest, ExportRecipe, FileRecord, KvManifest,
    KvPair, KvRecipe, KvSpanRecord, ModelInfo,
};
use crate::models::kv::KvOptions;
use crate::models::Checkpoint;
use crate::params::Written;
use crate::stablehlo::ConstantPolicy;
use crate::util::IoError;

/// The export manifest: the files' records (the writers hashed every byte
/// as they wrote it, so no second pass) and what the export was.
pub(super) fn export_manifest(
    ckpt: &Checkpoint,
    opts: &ExportOptions,
    names: &Names,
    graphs: &Graphs,
    parameter_tensors: usize,
    weights: WeightFiles,
    checkpoint: Option<CheckpointRecord>,
) -> ExportManifest {
    let file = |a| names.layout.file(a);
    let mut files = std::collections::BTreeMap::new();
    files.insert(
        "mlir".to_string(),
        text_record(&file(Artifact::Mlir), &graphs.text),
    );
    files.insert("safetensors".to_string(), record(weights.safetensors));
    files.insert("irpa".to_string(), record(weights.irpa));
    let kv = graphs.kv.as_ref().map(|(ko, kv_text)| {
        let kv_mlir = file(Artifact::KvMlir);
        files.insert("kv_mlir".to_string(), text_record(&kv_mlir, kv_text));
        kv_manifest(ckpt, ko, &kv_mlir)
    });
    let (input, output) = io_types(opts.seq);
    let contract = Contract {
        name: names.layout.name().to_string(),
        function: names.function.clone(),
        seq: opts.seq,
        scope: policy_scope(&opts.constants),
        input,
        output,
        model: ModelInfo {
            architecture: ckpt.config.family.name().to_string(),
            config: ckpt.config.clone(),
        },
        vocab_size: ckpt.config.vocab_size,
        bos_token_id: ckpt.config.bos_token_id,
        eos_token_ids: ckpt.config.eos_token_ids.clone(),
        weights_dtype: opts.weights.to_string(),
    };
    ExportManifest {
        format: ExportManifest::FORMAT.to_string(),
        kiln_version: crate::VERSION.to_string(),
        contract,
        constants: policy_name(&opts.constants),
        parameter_tensors,
        parameter_count: weights.count,
        parameter_bytes: weights.bytes,
        source: ckpt.path.display().to_string(),
        files,
        kv,
        recipe: Some(recipe(opts, names, graphs, checkpoint)),
        modules: Default::default(),
    }
}

/// How the export was made (the checkpoint's record computed by the caller).
fn recipe(
    opts: &ExportOptions,
    names: &Names,
    graphs: &Graphs,
    checkpoint: Option<CheckpointRecord>,
) -> ExportRecipe {
    ExportRecipe {
        checkpoint,
        seq: opts.seq,
        name: names.layout.name().to_string(),
        function: names.function.clone(),
        weights: opts.weights.to_string(),
        weights_for: opts
            .weights_for
            .iter()
            .map(|(pattern, form)| format!("{pattern}={form}"))
            .collect(),
        constants: policy_name(&opts.constants),
        scope: policy_scope(&opts.constants),
        max_tensor_bytes: opts.max_tensor_bytes,
        kv: graphs.kv.as_ref().map(|(ko, _)| KvRecipe {
            prompt_len: ko.prompt_len,
            max_context: ko.max_context,
            cache_dtype: ko.cache_dtype.to_string(),
            top_k: ko.top_k,
            spans: ko.spans.clone(),
        }),
    }
}

/// The identity of the checkpoint at `path` ([`CheckpointRecord`]): a
/// file's size and sha256, or an HF folder's regular files and one sha256
/// over their lines `<sha256>  <name>\n` in name order. `None` for a
/// checkpoint that is not on disk (a synthetic one).
pub(crate) fn checkpoint_record(path: &std::path::Path) -> Result<Option<CheckpointRecord>> {
    use crate::util::sha256_file;
    if path.is_file() {
        let bytes = std::fs::metadata(path)
            .map_err(|e| IoError::new(path, e))?
            .len();
        return Ok(Some(CheckpointRecord {
            bytes,
            sha256: sha256_file(path)?,
            files: Vec::new(),
        }));
    }
    if !path.is_dir() {
        return Ok(None);
    }
    let entries = std::fs::read_dir(path).map_err(|e| IoError::new(path, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| IoError::new(path, e))?;
        if entry
            .file_type()
            .map_err(|e| IoError::new(entry.path(), e))?
            .is_file()
        {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    let files = names
        .into_iter()
        .map(|name| {
            let file = path.join(&name);
            let bytes = std::fs::metadata(&file)
                .map_err(|e| IoError::new(&file, e))?
                .len();
            Ok(FileRecord {
                sha256: sha256_file(&file)?,
                path: name,
                bytes,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let listing: String = files
        .iter()
        .map(|f| format!("{}  {}\n", f.sha256, f.path))
        .collect();
    Ok(Some(CheckpointRecord {
        bytes: files.iter().map(|f| f.bytes).sum(),
        sha256: crate::util::sha256_hex(listing.as_bytes()),
        files,
    }))
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
            spans: ko
                .spans
                .iter()
                .map(|&b| {
                    let (prefill, decode) = ko.names(b);
                    KvSpanRecord::new(b, prefill, decode)
                })
                .collect(),
        },
    }
}

/// The file record of a module written from `text` as `file`.
fn text_record(file: &str, text: &str) -> FileRecord {
    FileRecord {
        path: file.to_string(),
        bytes: text.len() as u64,
        sha256: crate::util::sha256_hex(text.as_bytes()),
    }
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
