//! The export manifest, `NAME.json`: what the export was, and the
//! records of the files it wrote.

use super::graphs::Graphs;
use super::layout::Artifact;
use super::options::ExportOptions;
use super::write::WeightFiles;
use super::Names;
use crate::manifest::{
    io_types, Contract, ExportManifest, FileRecord, KvManifest, KvPair, KvSpanRecord, ModelInfo,
    EXPORT_FORMAT,
};
use crate::models::kv::KvOptions;
use crate::models::Checkpoint;
use crate::params::Written;
use crate::stablehlo::ConstantPolicy;

/// The export manifest: the files' records (the writers hashed every byte
/// as they wrote it, so no second pass) and what the export was.
pub(super) fn export_manifest(
    ckpt: &Checkpoint,
    opts: &ExportOptions,
    names: &Names,
    graphs: &Graphs,
    parameter_tensors: usize,
    weights: WeightFiles,
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
        format: EXPORT_FORMAT.to_string(),
        kiln_version: crate::VERSION.to_string(),
        contract,
        constants: policy_name(&opts.constants),
        parameter_tensors,
        parameter_count: weights.count,
        parameter_bytes: weights.bytes,
        source: ckpt.path.display().to_string(),
        files,
        kv,
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
