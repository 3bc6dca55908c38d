//! The manifests kiln writes and reads back, one declaration each:
//!
//! | file | written by | type | `format` |
//! |---|---|---|---|
//! | `NAME.json` beside the MLIR | `kiln export` | [`ExportManifest`] | [`ExportManifest::FORMAT`] |
//! | `NAME.manifest.json` in the assets | `kiln package` | [`AssetsManifest`] | [`AssetsManifest::FORMAT`] |
//!
//! `kiln run`, `generate` and `chat` read `NAME.json` as a
//! [`RunManifest`], which also accepts a hand-written file of run defaults.
//! The JSON Schemas of both written forms are in `docs/schema/`
//! (`kiln_export.schema.json`, `kiln_assets.schema.json`), generated from
//! these types by [`ExportManifest::schema`] and [`AssetsManifest::schema`]; a test keeps
//! them current. A change of layout bumps the `/N` of the format.
//!
//! Every type is `#[non_exhaustive]`: a new field is not a breaking change
//! for code that reads them; outside kiln they are made by deserializing.

use crate::graph::DType;
use crate::iree::flags::{Device, Target};
use crate::models::DecoderConfig;
use crate::util::IoError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A manifest that cannot be read as one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The file could not be read.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The file is not JSON.
    #[error("{}: not valid JSON: {source}", path.display())]
    Json {
        /// The manifest.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The file is JSON but not an export manifest (a key missing or of
    /// another type).
    #[error("{}: not a kiln export manifest (an export's NAME.json): {source}", path.display())]
    NotExport {
        /// The manifest.
        path: PathBuf,
        /// What does not fit.
        source: serde_json::Error,
    },
    /// A key of another type or value than the manifest's.
    #[error("{}: key \"{key}\" must be {want}", path.display())]
    Key {
        /// The manifest.
        path: PathBuf,
        /// The key.
        key: String,
        /// What it must be.
        want: &'static str,
    },
    /// An export name that is not a plain file name.
    #[error("{}: name {name:?} is not a plain file name", path.display())]
    BadName {
        /// The manifest.
        path: PathBuf,
        /// The name it records.
        name: String,
    },
    /// A file name in a manifest that is not a plain file name (it would
    /// leave the manifest's folder); refused before any file is opened.
    #[error("{}: file {file:?} {fault}: a manifest names only files in its own folder", path.display())]
    BadFile {
        /// The manifest.
        path: PathBuf,
        /// The file name it records.
        file: String,
        /// What is wrong with it.
        fault: crate::names::NameFault,
    },
    /// An export manifest that lists no parameter archive.
    #[error("{}: the export manifest lists no irpa file", path.display())]
    NoIrpa {
        /// The manifest.
        path: PathBuf,
    },
    /// An export manifest without a function or SEQ.
    #[error("{}: function and seq must be set", path.display())]
    Incomplete {
        /// The manifest.
        path: PathBuf,
    },
    /// A KV cache dtype other than f32 or bf16.
    #[error("the manifest's KV cache dtype \"{dtype}\" is neither f32 nor bf16 (re-export)")]
    CacheDtype {
        /// The dtype recorded.
        dtype: String,
    },
}

fn export_format() -> String {
    ExportManifest::FORMAT.to_string()
}

/// The export manifest, written as `<name>.json`.
///
/// The one declaration of its fields: `kiln package`
/// (`package::read_export_manifest`) and `kiln run` / `kiln
/// generate` ([`RunManifest::read`]) read it back with the same type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ExportManifest {
    /// [`ExportManifest::FORMAT`]: the layout of this file (absent in manifests of
    /// kiln 0.1 before the field existed, which have the same layout).
    #[serde(default = "export_format")]
    pub format: String,
    /// kiln's version.
    pub kiln_version: String,
    /// The function contract, with the model's family and hyperparameters
    /// ([`ModelInfo`]); flattened: its keys are this manifest's. The
    /// manifest derefs to it (`manifest.seq`, `manifest.config`).
    #[serde(flatten)]
    pub contract: Contract<ModelInfo>,
    /// Constant policy used for the MLIR.
    pub constants: String,
    /// Number of parameter tensors.
    pub parameter_tensors: usize,
    /// Number of scalar parameters.
    pub parameter_count: u64,
    /// Bytes of parameter data as stored.
    pub parameter_bytes: u64,
    /// Where the checkpoint came from.
    pub source: String,
    /// The written files: `mlir`, `safetensors`, `irpa` (and `kv_mlir`).
    pub files: std::collections::BTreeMap<String, FileRecord>,
    /// The KV-cache pair, when exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvManifest>,
    /// How the export was made: the checkpoint's hash and every option
    /// that shapes the files (absent in manifests of kiln before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<ExportRecipe>,
    /// The modules `kiln compile` wrote beside this manifest from its MLIR,
    /// by file name: how each was compiled, its size and sha256.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub modules: BTreeMap<String, CompiledModule>,
}

impl ExportManifest {
    /// The `format` of `kiln export`'s `NAME.json`.
    pub const FORMAT: &'static str = "kiln-export/1";

    /// The JSON Schema of this manifest (`docs/schema/kiln_export.schema.json`).
    pub fn schema() -> String {
        schema_text(schemars::schema_for!(ExportManifest))
    }

    /// The manifest as `kiln export` writes it: pretty JSON and a newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest serializes") + "\n"
    }

    /// Every file name this manifest records (its files, the KV MLIR, each
    /// module and packed archive), for [`bad_names`].
    pub fn file_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.files.values().map(|r| r.path.as_str()).collect();
        names.extend(self.kv.as_ref().map(|k| k.mlir.as_str()));
        for (file, rec) in &self.modules {
            names.push(file);
            names.extend(rec.packed.as_ref().map(|p| p.path.as_str()));
        }
        names
    }

    /// The first of its name and file names that is not plain
    /// ([`check_names`]).
    pub fn check_names(&self, path: &Path) -> Result<(), ManifestError> {
        check_names(path, &self.name, &self.file_names())
    }
}

/// Each of `files` that is not a plain file name
/// ([`crate::names::plain_name`]), with why, each once, in name order.
pub fn bad_names<'a>(files: &[&'a str]) -> Vec<(&'a str, crate::names::NameFault)> {
    let mut bad: Vec<(&str, crate::names::NameFault)> = Vec::new();
    for f in files {
        if let Err(e) = crate::names::plain_name(f) {
            if !bad.iter().any(|(b, _)| b == f) {
                bad.push((f, e));
            }
        }
    }
    bad.sort_by_key(|(f, _)| *f);
    bad
}

/// Whether the model's `name` is a plain stem: a plain file name
/// ([`crate::names::plain_name`]) that does not start with a dot.
pub fn plain_stem(name: &str) -> bool {
    crate::names::plain_name(name).is_ok() && !name.starts_with('.')
}

/// The manifest at `path` with model name `name` and file names `files`:
/// the first fault of [`plain_stem`] and [`bad_names`].
fn check_names(path: &Path, name: &str, files: &[&str]) -> Result<(), ManifestError> {
    if !plain_stem(name) {
        return Err(ManifestError::BadName {
            path: path.to_path_buf(),
            name: name.to_string(),
        });
    }
    match bad_names(files).first() {
        Some((file, fault)) => Err(ManifestError::BadFile {
            path: path.to_path_buf(),
            file: file.to_string(),
            fault: *fault,
        }),
        None => Ok(()),
    }
}

/// How an export was made: what `kiln verify --rebuild` runs again. The
/// checkpoint is the manifest's `source`, identified by its hash; the
/// options are those of `kiln export` (the output folder aside: it does
/// not change a byte).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ExportRecipe {
    /// The checkpoint's size and hash, when it was read from files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointRecord>,
    /// Fixed sequence length SEQ.
    pub seq: usize,
    /// Base name of the files.
    pub name: String,
    /// Exported function.
    pub function: String,
    /// How the weights are stored (`bf16`, `keep`, `w8a8`, …).
    pub weights: String,
    /// Per-tensor exceptions, `PATTERN=FORM`, in order.
    pub weights_for: Vec<String>,
    /// Constant policy: `external`, `inline` or `threshold=BYTES`.
    pub constants: String,
    /// Parameter scope.
    pub scope: String,
    /// The tensor bound in bytes (0: none).
    pub max_tensor_bytes: u64,
    /// The KV-cache pair's options, when one was exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvRecipe>,
}

/// The options of an exported KV-cache pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct KvRecipe {
    /// Prompt bucket P.
    pub prompt_len: usize,
    /// Max context N.
    pub max_context: usize,
    /// Cache element type.
    pub cache_dtype: String,
    /// Top-K of the sampling outputs, when exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// The attention spans below N the pair was exported with (absent:
    /// none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<usize>,
}

/// A checkpoint's identity: a GGUF file's size and sha256, or an HF
/// folder's files (each with size and sha256) and one sha256 over them:
/// of the lines `<sha256>  <file name>\n`, in file-name order (what
/// `sha256sum * | sha256sum` prints in the folder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct CheckpointRecord {
    /// Bytes: the file's, or the sum of the folder's files.
    pub bytes: u64,
    /// Lower-case hex sha256 (see above).
    pub sha256: String,
    /// An HF folder's files (empty for a file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileRecord>,
}

/// How a module was compiled: its source, target and every iree-compile
/// flag, by which compiler. `kiln compile` records it in the export
/// manifest; `kiln package` carries it into the assets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct CompileInfo {
    /// The MLIR file it was compiled from (`NAME-gen.mlir`, `NAME-kv-gen.mlir`).
    pub mlir: String,
    /// That file's sha256.
    pub mlir_sha256: String,
    /// The `kiln compile` target.
    pub target: Target,
    /// iree-compile's arguments, in order, but for the input and output
    /// (kiln's preset for the target, then any flags of the user's).
    pub flags: Vec<String>,
    /// The first version line of `iree-compile --version`.
    pub iree_compile: String,
    /// Compiled with `kiln compile --pack`: the weights of its products
    /// were packed from the export's archive into a packed archive beside
    /// the module, which it reads under scope `packed`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pack: bool,
}

/// A compiled module in the export manifest: how it was compiled and the
/// file that came out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct CompiledModule {
    /// How it was compiled (flattened).
    #[serde(flatten)]
    pub compile: CompileInfo,
    /// Size in bytes.
    pub bytes: u64,
    /// Lower-case hex sha256.
    pub sha256: String,
    /// The packed archive of a module compiled with `kiln compile --pack`
    /// (`NAME-<target>.packed.irpa`), read under scope `packed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed: Option<FileRecord>,
}

/// What the assets came from: the toolchain's versions, the checkpoint
/// and the export's recipe, so a second machine can make them again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct AssetsProvenance {
    /// Where the export read the checkpoint (the export manifest's `source`).
    pub source: String,
    /// How the export was made.
    pub recipe: ExportRecipe,
    /// The first version line of `iree-compile --version` of the modules
    /// (each module's own is in its `compiled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iree_compile: Option<String>,
    /// The IREE runtime version the modules were compiled for.
    pub iree_runtime: String,
}

/// The function contract: what a runtime needs to call the exported
/// function (its name, signature and parameter scope), to read its ids
/// (the vocabulary and special ids) and to tell how its weights are
/// stored. [`ExportManifest`] and [`AssetsManifest`] both hold it,
/// flattened: its keys sit beside theirs.
///
/// `M` is what a manifest records about the model between the signature
/// and the vocabulary, flattened in place so that the keys keep their
/// order: [`ModelInfo`] in the export manifest, nothing (`()`) in the
/// assets manifest. A contract derefs to it (`manifest.config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Contract<M = ()> {
    /// Model name: the prefix of every file.
    pub name: String,
    /// Exported function: the runtime calls `module.<function>`.
    pub function: String,
    /// Fixed sequence length SEQ.
    pub seq: usize,
    /// Parameter scope the runtime must open the `.irpa` under.
    pub scope: String,
    /// Input type: `tensor<1xSEQxi32>`.
    pub input: String,
    /// Output type: `tensor<SEQxi32>`, one predicted id per position.
    pub output: String,
    /// What the manifest records about the model here (see above).
    #[serde(flatten)]
    pub model: M,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// BOS id, when known.
    pub bos_token_id: Option<u32>,
    /// EOS ids: generation stops at any of them.
    pub eos_token_ids: Vec<u32>,
    /// Stored dtype of the weights.
    pub weights_dtype: String,
}

/// The model an export manifest describes, between its contract's
/// signature and vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ModelInfo {
    /// Model family.
    pub architecture: String,
    /// Hyperparameters.
    pub config: DecoderConfig,
}

/// The input and output types of the forward function at SEQ `seq`:
/// `tensor<1xSEQxi32>` and `tensor<SEQxi32>`.
pub(crate) fn io_types(seq: usize) -> (String, String) {
    (format!("tensor<1x{seq}xi32>"), format!("tensor<{seq}xi32>"))
}

impl<M> Contract<M> {
    /// This contract with `model` in the model slot, its input and output
    /// types written afresh from SEQ.
    pub fn with_model<N>(&self, model: N) -> Contract<N> {
        let (input, output) = io_types(self.seq);
        Contract {
            name: self.name.clone(),
            function: self.function.clone(),
            seq: self.seq,
            scope: self.scope.clone(),
            input,
            output,
            model,
            vocab_size: self.vocab_size,
            bos_token_id: self.bos_token_id,
            eos_token_ids: self.eos_token_ids.clone(),
            weights_dtype: self.weights_dtype.clone(),
        }
    }
}

impl<M> std::ops::Deref for Contract<M> {
    type Target = M;
    fn deref(&self) -> &M {
        &self.model
    }
}

impl<M> std::ops::DerefMut for Contract<M> {
    fn deref_mut(&mut self) -> &mut M {
        &mut self.model
    }
}

impl std::ops::Deref for ExportManifest {
    type Target = Contract<ModelInfo>;
    fn deref(&self) -> &Contract<ModelInfo> {
        &self.contract
    }
}

impl std::ops::DerefMut for ExportManifest {
    fn deref_mut(&mut self) -> &mut Contract<ModelInfo> {
        &mut self.contract
    }
}

/// Size and hash of one written file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[non_exhaustive]
pub struct FileRecord {
    /// File name, relative to the manifest's directory.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Lower-case hex sha256 of the contents.
    pub sha256: String,
}

/// The KV-cache module's record in the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct KvManifest {
    /// The module file (`<name>-kv-gen.mlir`).
    pub mlir: String,
    /// Its functions and shapes (flattened: the JSON keys sit beside `mlir`).
    #[serde(flatten)]
    pub pair: KvPair,
}

/// The KV-cache pair's functions and shapes: what a driver needs to call
/// them. Recorded in the export manifest ([`KvManifest`]) and in a
/// package's assets (`package::AssetsKv`), flattened into each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct KvPair {
    /// Prefill function: `(tokens: tensor<1xPxi32>, start: tensor<i32>,
    /// length: tensor<i32>, K, V) -> (tensor<i32>, K, V)`.
    pub prefill: String,
    /// Decode function: `(tensor<1xi32>, tensor<i32>, K, V) -> (tensor<i32>, K, V)`.
    pub decode: String,
    /// Prompt bucket P.
    pub prompt_len: usize,
    /// Max context N.
    pub max_context: usize,
    /// Cache element type (`f32` or `bf16`).
    pub cache_dtype: String,
    /// Shape of each cache tensor, `[layers, kv_heads, N, head_dim]`.
    pub cache_shape: Vec<usize>,
    /// How many tensors each of K and V is split into (consecutive groups
    /// of `cache_shape[0]` layers; 1, the whole stack, unless one tensor
    /// would pass the tensor bound). The functions take and return `K_0 …
    /// K_{count-1}, V_0 … V_{count-1}` where a single pair has K and V.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub cache_count: usize,
    /// `Some(K)`: both functions also return `(values: [K] f32, ids: [K]
    /// i32)`, the K largest logits of the predicted position, for sampling
    /// (`kiln export --sampling topk=K`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// Attention spans below N, ascending (`kiln export --kv-spans`):
    /// each a prefill and a decode with the signatures above, over the
    /// same caches, that attend to the first `span` positions only. A call
    /// runs the smallest span holding its positions (a prefill chunk's
    /// `start + length`, a decode's `position + 1`), else `prefill` /
    /// `decode` (`spec/kv-cache.md`). Absent: those two serve every call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<KvSpanRecord>,
}

/// One attention span of the KV pair ([`KvPair::spans`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct KvSpanRecord {
    /// Positions the functions attend to: `0..span`.
    pub span: usize,
    /// Its prefill function.
    pub prefill: String,
    /// Its decode function.
    pub decode: String,
}

impl KvSpanRecord {
    /// The span `span` served by `prefill` and `decode`.
    pub fn new(span: usize, prefill: impl Into<String>, decode: impl Into<String>) -> Self {
        KvSpanRecord {
            span,
            prefill: prefill.into(),
            decode: decode.into(),
        }
    }
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl KvPair {
    /// How many results each function returns: the id, every cache
    /// tensor, and the top-K values and ids when sampling.
    pub fn outputs(&self) -> usize {
        1 + 2 * self.cache_count + if self.top_k.is_some() { 2 } else { 0 }
    }

    /// The type of each cache (`cache_dtype` over `cache_shape`).
    pub fn cache_type(&self) -> Result<crate::graph::TensorType, ManifestError> {
        let dtype = match self.cache_dtype.as_str() {
            "f32" => DType::F32,
            "bf16" => DType::BF16,
            other => {
                return Err(ManifestError::CacheDtype {
                    dtype: other.to_string(),
                })
            }
        };
        Ok(crate::graph::TensorType::new(dtype, &self.cache_shape))
    }
}

/// `NAME.json` beside a module, as `kiln run` and `kiln generate` read it.
///
/// Normally it is the manifest `kiln export` wrote, read as
/// [`ExportManifest`] (the one declaration of its fields). `kiln run`
/// also runs modules compiled from MLIR that `kiln export` did not write
/// (spec/iree.md; the hand-written tiny module of the IREE tests); their
/// `NAME.json` only supplies run defaults: `seq`, `function`, `scope` and
/// `irpa` ([`RunDefaults`]). A file with a `kiln_version` key is taken as
/// an export manifest and must read as one, so a damaged export manifest
/// is an error rather than a silent loss of its EOS ids and source.
#[derive(Debug, Default, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunManifest {
    /// SEQ, function, scope and parameter archive (from either form).
    pub defaults: RunDefaults,
    /// The export manifest, when `NAME.json` is one.
    pub export: Option<ExportManifest>,
}

/// The keys `kiln run` takes its defaults from.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunDefaults {
    /// Sequence length.
    pub seq: Option<usize>,
    /// Exported function name.
    pub function: Option<String>,
    /// Parameter scope.
    pub scope: Option<String>,
    /// Parameter archive, relative to the manifest's directory.
    pub irpa: Option<String>,
}

impl From<&ExportManifest> for RunDefaults {
    fn from(m: &ExportManifest) -> Self {
        RunDefaults {
            seq: Some(m.seq),
            function: Some(m.function.clone()),
            scope: Some(m.scope.clone()),
            irpa: m.files.get("irpa").map(|f| f.path.clone()),
        }
    }
}

impl RunManifest {
    /// The vocabulary size of an export manifest (none for run defaults):
    /// what token ids are checked against (`generate::check_ids`,
    /// `DriverOptions::vocab_size`).
    pub fn vocab_size(&self) -> Option<usize> {
        self.export.as_ref().map(|m| m.vocab_size)
    }

    /// The end-of-sequence ids of an export manifest (none otherwise).
    pub fn eos(&self) -> Vec<i32> {
        self.export
            .as_ref()
            .map(|m| m.eos_token_ids.iter().map(|&x| x as i32).collect())
            .unwrap_or_default()
    }

    /// The end-of-sequence ids of the manifest and of `tokenizer`, each once.
    pub fn eos_with(&self, tokenizer: Option<&crate::tokenizer::Tokenizer>) -> Vec<i32> {
        let mut eos = self.eos();
        if let Some(e) = tokenizer.and_then(crate::tokenizer::Tokenizer::eos) {
            if !eos.contains(&(e as i32)) {
                eos.push(e as i32);
            }
        }
        eos
    }

    /// The checkpoint an export manifest came from (`source`).
    pub fn source(&self) -> Option<&str> {
        self.export.as_ref().map(|m| m.source.as_str())
    }

    /// The tokenizer beside the source checkpoint: the GGUF file itself,
    /// or an HF folder's tokenizer.json.
    pub fn source_tokenizer(&self) -> Option<PathBuf> {
        let src = Path::new(self.source()?);
        if src.is_dir() {
            let t = src.join("tokenizer.json");
            return t.is_file().then_some(t);
        }
        src.is_file().then(|| src.to_path_buf())
    }

    /// The KV-cache pair an export manifest records, if any.
    pub fn kv_pair(&self) -> Option<KvPair> {
        self.export.as_ref()?.kv.as_ref().map(|k| k.pair.clone())
    }

    /// Reads `NAME.json` beside the module; `Ok(None)` when there is none.
    ///
    /// A manifest written by `kiln export` (it has `kiln_version`) is read as
    /// [`ExportManifest`]; any other JSON object as hand-written
    /// [`RunDefaults`] (see [`RunManifest`]).
    pub fn read(path: &Path) -> Result<Option<RunManifest>, ManifestError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(IoError::new(path, e).into()),
        };
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|source| ManifestError::Json {
                path: path.to_path_buf(),
                source,
            })?;
        let bad = |key: &str, want: &'static str| ManifestError::Key {
            path: path.to_path_buf(),
            key: key.to_string(),
            want,
        };
        if v.get("kiln_version").is_some() {
            let m: ExportManifest =
                serde_json::from_value(v).map_err(|source| ManifestError::NotExport {
                    path: path.to_path_buf(),
                    source,
                })?;
            if m.seq == 0 {
                return Err(bad("seq", "a positive integer"));
            }
            m.check_names(path)?;
            return Ok(Some(RunManifest {
                defaults: RunDefaults::from(&m),
                export: Some(m),
            }));
        }
        let seq = match v.get("seq") {
            None => None,
            Some(s) => Some(
                s.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| bad("seq", "a positive integer"))?,
            ),
        };
        let string = |k: &str| -> Result<Option<String>, ManifestError> {
            match v.get(k) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(s) => Ok(Some(
                    s.as_str().ok_or_else(|| bad(k, "a string"))?.to_string(),
                )),
            }
        };
        let irpa = string("irpa")?;
        if let Some(file) = &irpa {
            if let Err(fault) = crate::names::plain_name(file) {
                return Err(ManifestError::BadFile {
                    path: path.to_path_buf(),
                    file: file.clone(),
                    fault,
                });
            }
        }
        Ok(Some(RunManifest {
            defaults: RunDefaults {
                seq,
                function: string("function")?,
                scope: string("scope")?,
                irpa,
            },
            export: None,
        }))
    }
}

/// `NAME.manifest.json`: everything an app needs to drive the assets and
/// to tell a changed model from a cached copy.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[non_exhaustive]
pub struct AssetsManifest {
    /// [`AssetsManifest::FORMAT`].
    pub format: String,
    /// kiln's version.
    pub kiln_version: String,
    /// The IREE version the modules were compiled for (the runtime must match).
    pub iree_version: String,
    /// The function contract, as in the export manifest; flattened: its
    /// keys are this manifest's. The manifest derefs to it
    /// (`manifest.seq`).
    #[serde(flatten)]
    pub contract: Contract,
    /// The parameter archive's file name.
    pub parameters: String,
    /// Modules by key (`arm64-v8a`, `armeabi-v7a`, `vulkan`, `host`).
    pub modules: BTreeMap<String, ModuleEntry>,
    /// The KV-cache pair, when the export has one and a KV module was
    /// compiled (`kiln export --kv-cache`; `spec/kv-cache.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<AssetsKv>,
    /// The HF `tokenizer.json`, when packaged.
    pub tokenizer: Option<String>,
    /// Its `tokenizer_config.json` (bos/eos tokens, chat template), when packaged.
    pub tokenizer_config: Option<String>,
    /// The model's chat template, when the tokenizer has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<AssetsChat>,
    /// Size and sha256 of every other file, sorted by path.
    pub files: Vec<FileRecord>,
    /// What the assets were made from, when the export recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<AssetsProvenance>,
}

impl std::ops::Deref for AssetsManifest {
    type Target = Contract;
    fn deref(&self) -> &Contract {
        &self.contract
    }
}

impl std::ops::DerefMut for AssetsManifest {
    fn deref_mut(&mut self) -> &mut Contract {
        &mut self.contract
    }
}

/// One packaged module.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ModuleEntry {
    /// File name in the assets directory.
    pub path: String,
    /// The `kiln compile` target it was compiled for, as `--target` names
    /// it. `kiln package` reads it from the file name, which does not say
    /// a Vulkan module's `--iree-vulkan-target`: it records `vulkan`.
    pub target: Target,
    /// The IREE runtime device that runs it.
    pub device: Device,
    /// A KV module whose caches differ from the pair's `cache_dtype`: their
    /// element type here (a Vulkan module holds bf16 caches as `i32` words
    /// of two values, the same bytes). Absent: the pair's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dtype: Option<String>,
    /// With `cache_dtype`: the shape of each cache tensor here
    /// (`[layers, kv_heads, N, head_dim / 2]` for i32 words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_shape: Option<Vec<usize>>,
    /// How it was compiled, when `kiln compile` recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiled: Option<CompileInfo>,
    /// File name of its packed archive (a module compiled with `kiln
    /// compile --pack`), which the app opens under scope `packed` beside
    /// the `parameters` archive, before the module. Also in `files`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packed: Option<String>,
}

/// The chat template in the assets: the Jinja source (as in the
/// tokenizer config) and, for apps without a Jinja engine, the text it
/// writes around each message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[non_exhaustive]
pub struct AssetsChat {
    /// The Jinja `chat_template`.
    pub template: String,
    /// The template pre-rendered.
    #[serde(flatten)]
    pub affixes: crate::tokenizer::ChatAffixes,
}

/// The KV-cache pair in the assets: the functions, their shapes, and the
/// packaged `NAME-kv-<key>.vmfb` modules (same keys as `modules`), over the
/// same `.irpa`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
#[non_exhaustive]
pub struct AssetsKv {
    /// The functions and shapes, as in the export manifest (flattened).
    #[serde(flatten)]
    pub pair: KvPair,
    /// KV modules by key.
    pub modules: BTreeMap<String, ModuleEntry>,
}

impl AssetsManifest {
    /// The `format` of `kiln package`'s `NAME.manifest.json`.
    pub const FORMAT: &'static str = "kiln-android-assets/1";

    /// The JSON Schema of this manifest (`docs/schema/kiln_assets.schema.json`).
    pub fn schema() -> String {
        schema_text(schemars::schema_for!(AssetsManifest))
    }

    /// Every file name this manifest records: the archive, the modules and
    /// their packed archives, the tokenizer files and `files`, for
    /// [`bad_names`].
    pub fn file_names(&self) -> Vec<&str> {
        let mut names = vec![self.parameters.as_str()];
        let kv = self.kv.iter().flat_map(|k| k.modules.values());
        for e in self.modules.values().chain(kv) {
            names.push(&e.path);
            names.extend(e.packed.as_deref());
        }
        names.extend(self.tokenizer.as_deref());
        names.extend(self.tokenizer_config.as_deref());
        names.extend(self.files.iter().map(|r| r.path.as_str()));
        names
    }

    /// The first of its name and file names that is not plain
    /// ([`check_names`]).
    pub fn check_names(&self, path: &Path) -> Result<(), ManifestError> {
        check_names(path, &self.name, &self.file_names())
    }
}

fn schema_text(schema: schemars::Schema) -> String {
    serde_json::to_string_pretty(&schema).expect("a schema serializes") + "\n"
}
