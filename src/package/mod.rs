//! `kiln package`: lays out the files an Android app ships, from an export
//! manifest (`NAME.json`, written by `kiln export`) and the modules
//! `kiln compile` wrote beside it.
//!
//! The layout is flat, every file prefixed with the model name, so one
//! assets directory can hold several models and an app copies files by
//! name without walking folders:
//!
//! ```text
//! ASSETS/NAME.manifest.json          what follows, with sizes and sha256
//! ASSETS/NAME.irpa                   the weights (one archive for every ABI and the GPU)
//! ASSETS/NAME-arm64-v8a.vmfb         from NAME-arm64.vmfb
//! ASSETS/NAME-armeabi-v7a.vmfb       from NAME-arm32.vmfb
//! ASSETS/NAME-vulkan.vmfb            from NAME-vulkan.vmfb
//! ASSETS/NAME-kv-<key>.vmfb          the KV-cache pair, from NAME-kv-<target>.vmfb (when exported)
//! ASSETS/NAME.tokenizer.json         HF tokenizer.json
//! ASSETS/NAME.tokenizer_config.json  bos/eos tokens and the chat template
//! ```
//!
//! Modules that were not compiled are left out (at least one of arm64,
//! arm32 and vulkan must exist). The `.irpa` is checked against the export
//! manifest's sha256 while it is copied. Everything is written into a
//! staging directory inside `ASSETS` and renamed into place only once all
//! files are complete, the manifest last: a failed run leaves no partial
//! output. Files an earlier package of the same model listed in its
//! manifest and this one does not have are then removed.

use crate::export::{Artifact, Layout};
use crate::iree::flags::{Device, Target};
use crate::manifest::{
    AssetsChat, AssetsKv, AssetsManifest, AssetsProvenance, ExportManifest, FileRecord,
    ManifestError, ModuleEntry,
};
use crate::params::gguf::GgufFile;
use crate::progress::Progress;
use crate::tokenizer::{Tokenizer, TokenizerFiles};
use crate::util::IoError;
use crate::util::Staging;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

mod error;
pub use error::{PackageError, PackageWarning};

/// `Result` of packaging.
type Result<T, E = PackageError> = std::result::Result<T, E>;

/// One module an app may ship: its key in the assets manifest (an Android
/// ABI, or `vulkan`/`host`), the `kiln compile` target it comes from, and
/// the IREE runtime device that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModuleKind {
    /// Key in [`AssetsManifest::modules`] and the file-name suffix.
    pub key: &'static str,
    /// `kiln compile` target whose `NAME-<suffix>.vmfb` is packaged.
    pub target: Target,
    /// IREE runtime device for this module.
    pub device: Device,
}

/// The modules for Android, in the order they are looked for: arm64-v8a,
/// armeabi-v7a and vulkan (the default Vulkan target: the file name does
/// not say which one a `NAME-vulkan.vmfb` was compiled for).
pub(crate) fn android_modules() -> [ModuleKind; 3] {
    [
        ModuleKind {
            key: "arm64-v8a",
            target: Target::Arm64,
            device: Device::LocalTask,
        },
        // local-sync: IREE 3.13's local-task command blocks assume 64-bit
        // pointers and do not build for armv7 (spec/iree.md, "arm32 modules
        // and the embedded loader").
        ModuleKind {
            key: "armeabi-v7a",
            target: Target::Arm32,
            device: Device::LocalSync,
        },
        ModuleKind {
            key: "vulkan",
            target: Target::Vulkan {
                target: Target::DEFAULT_VULKAN_TARGET.to_string(),
            },
            device: Device::Vulkan,
        },
    ]
}

/// The host module, packaged only on request (for testing the assets on
/// the build machine).
pub(crate) fn host_module() -> ModuleKind {
    ModuleKind {
        key: "host",
        target: Target::Host,
        device: Device::LocalTask,
    }
}

/// The chat template of the packaged tokenizer at `tokenizer_json`, or
/// `None` (with a warning when kiln cannot read the tokenizer).
fn packaged_chat(tokenizer_json: &Path, warnings: &mut Vec<PackageWarning>) -> Option<AssetsChat> {
    let tok = match Tokenizer::from_tokenizer_json(tokenizer_json) {
        Ok(t) => t,
        Err(e) => {
            warnings.push(PackageWarning::NoChatTemplate {
                reason: e.to_string(),
            });
            return None;
        }
    };
    match tok.template() {
        Ok(Some(t)) => Some(AssetsChat {
            template: tok.chat_template().unwrap_or_default().to_string(),
            affixes: t.affixes(),
        }),
        Ok(None) => None,
        Err(e) => {
            warnings.push(PackageWarning::TemplateDoesNotCompile {
                reason: e.to_string(),
            });
            tok.chat_template().map(|t| AssetsChat {
                template: t.to_string(),
                affixes: Default::default(),
            })
        }
    }
}

/// Where the tokenizer comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TokenizerChoice {
    /// The export manifest's `source` (a GGUF file, or an HF folder with
    /// `tokenizer.json`); an error when it has none.
    #[default]
    FromSource,
    /// A GGUF file, an HF `tokenizer.json`, or a folder holding one.
    Path(PathBuf),
    /// Package no tokenizer.
    None,
}

/// Options of [`package`].
#[derive(Debug, Clone, Default)]
pub struct PackageOptions {
    /// The assets directory (created when missing).
    pub out_dir: PathBuf,
    /// Where the tokenizer comes from.
    pub tokenizer: TokenizerChoice,
    /// Also package `NAME-host.vmfb` (as `NAME-host.vmfb`).
    pub include_host: bool,
    /// Receives one [`Unit::Bytes`](crate::progress::Unit) step per copied
    /// file, `copy FILE` (the copy is hashed as it goes).
    pub progress: Option<crate::progress::SharedProgress>,
}

/// What [`package`] wrote.
#[derive(Debug, Clone, Serialize)]
pub struct PackageReport {
    /// The manifest (also written to disk).
    pub manifest: AssetsManifest,
    /// Path of `NAME.manifest.json`.
    pub manifest_path: PathBuf,
    /// Every written file, the manifest last.
    pub written: Vec<PathBuf>,
    /// Notes for the user (modules not found, possibly stale modules).
    pub warnings: Vec<PackageWarning>,
}

/// A not-found I/O error for `path`, saying `what`.
fn not_found(path: &Path, what: &str) -> IoError {
    IoError::new(
        path,
        std::io::Error::new(std::io::ErrorKind::NotFound, what.to_string()),
    )
}

/// Reads an export manifest ([`crate::manifest::ExportManifest`], `NAME.json`)
/// and checks that its name is a plain file name and its function and seq
/// are set.
pub(crate) fn read_export_manifest(path: &Path) -> Result<ExportManifest> {
    if !path.is_file() {
        return Err(not_found(path, "export manifest not found").into());
    }
    let text = std::fs::read_to_string(path).map_err(|e| IoError::new(path, e))?;
    let m: ExportManifest =
        serde_json::from_str(&text).map_err(|source| ManifestError::NotExport {
            path: path.to_path_buf(),
            source,
        })?;
    // The name and every file name, before any file is opened under one.
    m.check_names(path)?;
    if m.function.is_empty() || m.seq == 0 {
        return Err(ManifestError::Incomplete {
            path: path.to_path_buf(),
        }
        .into());
    }
    Ok(m)
}

/// A file name from a manifest, checked to stay inside its directory.
fn plain_file(rec: &FileRecord, manifest: &Path) -> Result<String> {
    let dir = match manifest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match crate::names::file_in_folder(dir, &rec.path) {
        Ok(_) => Ok(rec.path.clone()),
        Err(fault) => Err(ManifestError::BadFile {
            path: manifest.to_path_buf(),
            file: rec.path.clone(),
            fault,
        }
        .into()),
    }
}

/// The modification time of `path`, when it can be read.
fn mtime(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Copies `src` to `dest` (an [`AtomicFile`](crate::util::AtomicFile)),
/// streamed, returning its size and sha256; reports a `copy FILE` step.
fn copy_hashed(src: &Path, dest: &Path, progress: &dyn Progress) -> Result<(u64, String)> {
    let label = format!(
        "copy {}",
        dest.file_name().unwrap_or_default().to_string_lossy()
    );
    let size = std::fs::metadata(src).map_or(0, |m| m.len());
    progress.start(&label, size, crate::progress::Unit::Bytes);
    let r = copy_hashed_quietly(src, dest, &|n| progress.advance(&label, n));
    progress.finish(&label, r.is_ok());
    r
}

/// [`copy_hashed`] without progress steps: calls `done` per chunk copied.
fn copy_hashed_quietly(src: &Path, dest: &Path, done: &dyn Fn(u64)) -> Result<(u64, String)> {
    let mut r = std::fs::File::open(src).map_err(|e| IoError::new(src, e))?;
    let mut out = crate::util::AtomicFile::create(dest)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf).map_err(|e| IoError::new(src, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| IoError::new(dest, e))?;
        total += n as u64;
        done(n as u64);
    }
    out.commit()?;
    Ok((total, crate::util::hex(&h.finalize())))
}

/// Where the tokenizer will come from, resolved before anything is written.
enum TokenizerPlan {
    /// Built from GGUF metadata.
    Built(TokenizerFiles),
    /// Copied from an HF folder: `tokenizer.json`, and the config (with the
    /// `.jinja` chat template folded in, when there is one).
    Copied {
        json: PathBuf,
        config: Option<Vec<u8>>,
    },
    None,
}

/// Whether `path` starts with the GGUF magic.
fn is_gguf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"GGUF"
}

/// Resolves a possibly relative `source` path: as given (relative to the
/// working directory), else relative to the manifest's directory.
fn resolve_source(source: &str, base: &Path) -> Option<PathBuf> {
    let p = PathBuf::from(source);
    if p.exists() {
        return Some(p);
    }
    if p.is_relative() {
        let q = base.join(&p);
        if q.exists() {
            return Some(q);
        }
    }
    None
}

/// Resolves where the tokenizer comes from and checks it, before anything
/// is written.
fn plan_tokenizer(
    choice: &TokenizerChoice,
    m: &ExportManifest,
    base: &Path,
    warnings: &mut Vec<PackageWarning>,
) -> Result<TokenizerPlan> {
    let path = match choice {
        TokenizerChoice::None => return Ok(TokenizerPlan::None),
        TokenizerChoice::Path(p) => {
            if !p.exists() {
                return Err(not_found(p, "tokenizer not found").into());
            }
            p.clone()
        }
        TokenizerChoice::FromSource => {
            resolve_source(&m.source, base).ok_or_else(|| PackageError::NoSource {
                source_path: m.source.clone(),
            })?
        }
    };
    if path.is_file() && is_gguf(&path) {
        let gguf = GgufFile::open(&path)?;
        let files =
            TokenizerFiles::from_gguf(&gguf).map_err(|source| PackageError::TokenizerBuild {
                path: path.clone(),
                source: Box::new(source),
            })?;
        return Ok(TokenizerPlan::Built(files));
    }
    let json = if path.is_dir() {
        let j = path.join("tokenizer.json");
        if !j.is_file() {
            return Err(PackageError::NoTokenizerJson { dir: path.clone() });
        }
        j
    } else {
        path.clone()
    };
    check_tokenizer_json(&json, warnings)?;
    let config = tokenizer_config(&json)?;
    Ok(TokenizerPlan::Copied { json, config })
}

/// Checks that `json` is a tokenizer.json; kiln's own reader supporting it
/// is only advisory (a warning), as the app may bring its own tokenizer
/// library.
fn check_tokenizer_json(json: &Path, warnings: &mut Vec<PackageWarning>) -> Result<()> {
    let text = std::fs::read_to_string(json).map_err(|e| IoError::new(json, e))?;
    let parsed: Value =
        serde_json::from_str(&text).map_err(|source| PackageError::NotTokenizerJson {
            path: json.to_path_buf(),
            source,
        })?;
    if parsed.get("model").is_none() {
        return Err(PackageError::NoTokenizerModel {
            path: json.to_path_buf(),
        });
    }
    if let Err(e) = Tokenizer::from_tokenizer_json(json) {
        warnings.push(PackageWarning::TokenizerUnreadable {
            path: json.to_path_buf(),
            reason: e.to_string(),
        });
    }
    Ok(())
}

/// The tokenizer config to package beside `json`: `tokenizer_config.json`
/// (or `STEM.tokenizer_config.json` beside `STEM.tokenizer.json`), with the
/// `.jinja` chat template folded in when there is one; `None` when there
/// is neither.
fn tokenizer_config(json: &Path) -> Result<Option<Vec<u8>>> {
    let (config_path, jinja_path) = match Layout::of_tokenizer(json) {
        Some(l) => (
            l.path(Artifact::TokenizerConfig),
            l.path(Artifact::ChatTemplate),
        ),
        // An HF folder's own names.
        None => {
            let dir = json.parent().unwrap_or(Path::new("."));
            (
                dir.join("tokenizer_config.json"),
                dir.join("chat_template.jinja"),
            )
        }
    };
    if jinja_path.is_file() {
        // transformers 5 keeps the template in chat_template.jinja; fold it
        // into the config so one file carries it.
        let mut cfg: Map<String, Value> = if config_path.is_file() {
            let t =
                std::fs::read_to_string(&config_path).map_err(|e| IoError::new(&config_path, e))?;
            serde_json::from_str(&t).map_err(|source| PackageError::ConfigNotObject {
                path: config_path.clone(),
                source,
            })?
        } else {
            Map::new()
        };
        let template =
            std::fs::read_to_string(&jinja_path).map_err(|e| IoError::new(&jinja_path, e))?;
        cfg.insert("chat_template".into(), Value::String(template));
        Ok(Some(json_bytes(&Value::Object(cfg))?))
    } else if config_path.is_file() {
        let bytes = std::fs::read(&config_path).map_err(|e| IoError::new(&config_path, e))?;
        serde_json::from_slice::<Map<String, Value>>(&bytes).map_err(|source| {
            PackageError::ConfigNotObject {
                path: config_path.clone(),
                source,
            }
        })?;
        Ok(Some(bytes))
    } else {
        Ok(None)
    }
}

/// `v` as pretty JSON with a trailing newline.
fn json_bytes(v: &impl Serialize) -> Result<Vec<u8>> {
    let mut s = serde_json::to_string_pretty(v).map_err(PackageError::Json)?;
    s.push('\n');
    Ok(s.into_bytes())
}

/// Packages the export described by `manifest_path`: see the module docs.
pub fn package(manifest_path: &Path, opts: &PackageOptions) -> Result<PackageReport> {
    let m = read_export_manifest(manifest_path)?;
    let base = match manifest_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut warnings = Vec::new();
    let sources = gather(&m, manifest_path, &base, opts, &mut warnings)?;

    // Everything checked: write into a staging directory.
    let out = &opts.out_dir;
    if let (Ok(a), Ok(b)) = (out.canonicalize(), base.canonicalize()) {
        if a == b {
            return Err(PackageError::OutIsExportDir { out: out.clone() });
        }
    }
    let created = !out.exists();
    let result = Staging::create(out, ".kiln-package-", "assets directory")
        .map_err(PackageError::from)
        .and_then(|staging| {
            let progress = crate::progress::or_silent(&opts.progress);
            let manifest = stage_files(&staging, &m, sources, progress, &mut warnings)?;
            commit(staging, out, manifest)
        });
    if result.is_err() && created {
        // Only removes the directory when it is still empty.
        let _ = std::fs::remove_dir(out);
    }
    let (manifest, manifest_path_out, written) = result?;
    Ok(PackageReport {
        manifest,
        manifest_path: manifest_path_out,
        written,
        warnings,
    })
}

type Staged = (AssetsManifest, PathBuf, Vec<PathBuf>);

/// A compiled module found beside the export.
type Found = (ModuleKind, PathBuf);

/// Everything [`package`] copies, found and checked before anything is
/// written.
struct Sources<'m> {
    /// The parameter archive, and the export manifest's record of it.
    irpa: (PathBuf, &'m FileRecord),
    modules: Vec<Found>,
    kv_modules: Vec<Found>,
    tokenizer: TokenizerPlan,
}

/// Finds and checks the files of export `m` (whose manifest is
/// `manifest_path`, in `base`) that `opts` packages.
fn gather<'m>(
    m: &'m ExportManifest,
    manifest_path: &Path,
    base: &Path,
    opts: &PackageOptions,
    warnings: &mut Vec<PackageWarning>,
) -> Result<Sources<'m>> {
    let irpa = check_irpa(m, base, manifest_path)?;
    let modules = find_modules(m, base, opts.include_host, warnings)?;
    let kv_modules = find_kv_modules(m, base, &modules, warnings);
    let tokenizer = plan_tokenizer(&opts.tokenizer, m, base, warnings)?;
    Ok(Sources {
        irpa,
        modules,
        kv_modules,
        tokenizer,
    })
}

/// The parameter archive: present, and the size the export recorded (the
/// hash is checked while copying).
fn check_irpa<'m>(
    m: &'m ExportManifest,
    base: &Path,
    manifest_path: &Path,
) -> Result<(PathBuf, &'m FileRecord)> {
    let irpa_rec = m.files.get("irpa").ok_or_else(|| ManifestError::NoIrpa {
        path: manifest_path.to_path_buf(),
    })?;
    let irpa_src = base.join(plain_file(irpa_rec, manifest_path)?);
    let irpa_len = std::fs::metadata(&irpa_src)
        .map_err(|e| IoError::new(&irpa_src, e))?
        .len();
    if irpa_len != irpa_rec.bytes {
        return Err(PackageError::IrpaSize {
            irpa: irpa_src,
            manifest: manifest_path.to_path_buf(),
            found: irpa_len,
            recorded: irpa_rec.bytes,
        });
    }
    // kiln's own reader reads the index: a damaged archive is named with
    // what is wrong before anything is copied.
    <dyn crate::params::ParamSource>::open(&irpa_src)?;
    Ok((irpa_src, irpa_rec))
}

/// Warns when the module `vmfb` is older than the `mlir` it is compiled
/// from.
fn warn_if_stale(vmfb: &Path, mlir: &Path, warnings: &mut Vec<PackageWarning>) {
    if let (Some(a), Some(b)) = (mtime(vmfb), mtime(mlir)) {
        if a < b {
            warnings.push(PackageWarning::Stale {
                module: vmfb.to_path_buf(),
                mlir: mlir.to_path_buf(),
            });
        }
    }
}

/// The compiled modules of export `m` in `base` (the host module too with
/// `include_host`, which must then exist); at least one for Android.
fn find_modules(
    m: &ExportManifest,
    base: &Path,
    include_host: bool,
    warnings: &mut Vec<PackageWarning>,
) -> Result<Vec<Found>> {
    let layout = Layout::new(base, &m.name);
    let mlir = m
        .files
        .get("mlir")
        .map(|r| base.join(&r.path))
        .unwrap_or_else(|| layout.path(Artifact::Mlir));
    let mut kinds = Vec::from(android_modules());
    if include_host {
        kinds.push(host_module());
    }
    let mut modules: Vec<Found> = Vec::new();
    for k in kinds {
        let p = layout.path(Artifact::Module(&k.target));
        if p.is_file() {
            warn_if_stale(&p, &mlir, warnings);
            modules.push((k, p));
        } else if k.target == Target::Host {
            return Err(PackageError::NoHostModule { path: p });
        } else {
            warnings.push(PackageWarning::MissingModule {
                path: p,
                key: k.key,
            });
        }
    }
    if modules.iter().all(|(k, _)| k.target == Target::Host) {
        let looked: Vec<String> = android_modules()
            .iter()
            .map(|k| layout.file(Artifact::Module(&k.target)))
            .collect();
        return Err(PackageError::NoModules {
            name: m.name.clone(),
            dir: base.to_path_buf(),
            looked,
            mlir,
        });
    }
    Ok(modules)
}

/// The KV-cache modules for the targets of `modules`, when export `m` has
/// the pair; a missing one is a warning.
fn find_kv_modules(
    m: &ExportManifest,
    base: &Path,
    modules: &[Found],
    warnings: &mut Vec<PackageWarning>,
) -> Vec<Found> {
    let mut kv_modules: Vec<Found> = Vec::new();
    let Some(kv) = &m.kv else {
        return kv_modules;
    };
    let kv_mlir = base.join(&kv.mlir);
    let layout = Layout::new(base, &m.name);
    for (k, _) in modules {
        let p = layout.path(Artifact::KvModule(&k.target));
        if !p.is_file() {
            warnings.push(PackageWarning::MissingKvModule {
                path: p,
                key: k.key,
                kv_mlir: kv_mlir.clone(),
                target: k.target.clone(),
            });
            continue;
        }
        warn_if_stale(&p, &kv_mlir, warnings);
        kv_modules.push((k.clone(), p));
    }
    kv_modules
}

/// Copies the parameter archive `src` into `staging` as `file`, checked
/// against the export manifest's record `rec`.
fn copy_irpa(
    (src, rec): (PathBuf, &FileRecord),
    staging: &Staging,
    file: &str,
    progress: &dyn Progress,
) -> Result<FileRecord> {
    let (bytes, sha) = copy_hashed(&src, &staging.path(file), progress)?;
    if sha != rec.sha256 || bytes != rec.bytes {
        return Err(PackageError::IrpaSha {
            irpa: src,
            found: sha,
            recorded: rec.sha256.clone(),
        });
    }
    Ok(FileRecord {
        path: file.to_string(),
        bytes,
        sha256: sha,
    })
}

/// Copies the modules `list` into `staging` as `NAME-<key>.vmfb` (the
/// KV-cache pair's, with `kv`, as `NAME-kv-<key>.vmfb`), recording each in
/// `files`; returns their manifest entries by key.
fn copy_modules(
    staging: &Staging,
    (layout, m): (&Layout, &ExportManifest),
    list: &[Found],
    kv: bool,
    progress: &dyn Progress,
    files: &mut Vec<FileRecord>,
) -> Result<BTreeMap<String, ModuleEntry>> {
    let mut entries = BTreeMap::new();
    for (k, src) in list {
        let file = layout.file(match kv {
            true => Artifact::AssetKvModule(k.key),
            false => Artifact::AssetModule(k.key),
        });
        let (bytes, sha256) = copy_hashed(src, &staging.path(&file), progress)?;
        // A module compiled with `--pack` takes its packed archive along,
        // named after the module's asset name.
        let packed_src = crate::iree::pack::packed_archive(src);
        let packed = match packed_src.is_file() {
            false => None,
            true => {
                let name = crate::iree::pack::packed_archive(Path::new(&file))
                    .to_string_lossy()
                    .into_owned();
                let (bytes, sha256) = copy_hashed(&packed_src, &staging.path(&name), progress)?;
                files.push(FileRecord {
                    path: name.clone(),
                    bytes,
                    sha256,
                });
                Some(name)
            }
        };
        entries.insert(
            k.key.to_string(),
            ModuleEntry {
                path: file.clone(),
                target: k.target.clone(),
                device: k.device,
                cache_dtype: None,
                cache_shape: None,
                compiled: compile_record(m, src, &sha256),
                packed,
            },
        );
        files.push(FileRecord {
            path: file,
            bytes,
            sha256,
        });
    }
    Ok(entries)
}

/// The KV modules' entries, each Vulkan module's marked with the form its
/// caches take there when it differs from the pair's (bf16 caches are
/// i32 words of two values on Vulkan: `TensorType::lowered_for_vulkan`).
fn with_cache_forms(
    mut entries: BTreeMap<String, ModuleEntry>,
    pair: &crate::manifest::KvPair,
) -> Result<BTreeMap<String, ModuleEntry>> {
    let cache = pair.cache_type()?;
    for e in entries.values_mut().filter(|e| e.device == Device::Vulkan) {
        let lowered =
            cache
                .lowered_for_vulkan()
                .ok_or_else(|| crate::step::StepError::OddPairs {
                    cache: cache.clone(),
                })?;
        if lowered != cache {
            e.cache_dtype = Some(lowered.dtype.to_string());
            e.cache_shape = Some(lowered.shape.to_vec());
        }
    }
    Ok(entries)
}

/// How the module at `src` (whose contents hash to `sha256`) was compiled,
/// as `kiln compile` recorded it in export manifest `m`: `None` when it
/// recorded nothing for that file, or for other contents.
fn compile_record(
    m: &ExportManifest,
    src: &Path,
    sha256: &str,
) -> Option<crate::manifest::CompileInfo> {
    let name = src.file_name()?.to_str()?;
    m.modules
        .get(name)
        .filter(|r| r.sha256 == sha256)
        .map(|r| r.compile.clone())
}

/// What the assets were made from: export manifest `m`'s recipe, with the
/// compiler of the packaged modules when they all name the same one.
fn provenance<'a>(
    m: &ExportManifest,
    modules: impl Iterator<Item = &'a ModuleEntry>,
) -> Option<AssetsProvenance> {
    let recipe = m.recipe.clone()?;
    let mut compilers = modules.filter_map(|e| e.compiled.as_ref().map(|c| c.iree_compile.clone()));
    let first = compilers.next();
    let iree_compile = first.filter(|c| compilers.all(|o| &o == c));
    Some(AssetsProvenance {
        source: m.source.clone(),
        recipe,
        iree_compile,
        iree_runtime: crate::iree::flags::IREE_VERSION.to_string(),
    })
}

/// Writes the tokenizer of `plan` into `staging` as
/// `NAME.tokenizer.json` and `NAME.tokenizer_config.json`; returns the
/// names of those it wrote.
fn stage_tokenizer(
    plan: TokenizerPlan,
    staging: &Staging,
    layout: &Layout,
    progress: &dyn Progress,
) -> Result<(Option<String>, Option<String>)> {
    let tok_name = layout.file(Artifact::Tokenizer);
    let cfg_name = layout.file(Artifact::TokenizerConfig);
    match plan {
        TokenizerPlan::None => Ok((None, None)),
        TokenizerPlan::Built(t) => {
            crate::util::write_atomic(staging.path(&tok_name), t.tokenizer_json.as_bytes())?;
            crate::util::write_atomic(staging.path(&cfg_name), t.tokenizer_config_json.as_bytes())?;
            Ok((Some(tok_name), Some(cfg_name)))
        }
        TokenizerPlan::Copied { json, config } => {
            copy_hashed(&json, &staging.path(&tok_name), progress)?;
            let cfg = match config {
                Some(bytes) => {
                    crate::util::write_atomic(staging.path(&cfg_name), &bytes)?;
                    Some(cfg_name)
                }
                None => None,
            };
            Ok((Some(tok_name), cfg))
        }
    }
}

/// The file record of the staged file `file`, hashed from disk.
fn staged_record(staging: &Staging, file: &str) -> Result<FileRecord> {
    let p = staging.path(file);
    let bytes = std::fs::metadata(&p)
        .map_err(|e| IoError::new(&p, e))?
        .len();
    Ok(FileRecord {
        path: file.to_string(),
        bytes,
        sha256: crate::util::sha256_file(&p)?,
    })
}

/// Copies or writes every file of `src` into `staging` and returns the
/// assets manifest that lists them.
fn stage_files(
    staging: &Staging,
    m: &ExportManifest,
    src: Sources<'_>,
    progress: &dyn Progress,
    warnings: &mut Vec<PackageWarning>,
) -> Result<AssetsManifest> {
    // File names only: the files are staged, then moved into the assets.
    let layout = Layout::new("", &m.name);
    let irpa_name = layout.file(Artifact::Irpa);
    let mut files = vec![copy_irpa(src.irpa, staging, &irpa_name, progress)?];
    let modules = copy_modules(
        staging,
        (&layout, m),
        &src.modules,
        false,
        progress,
        &mut files,
    )?;
    let kv_entries = copy_modules(
        staging,
        (&layout, m),
        &src.kv_modules,
        true,
        progress,
        &mut files,
    )?;
    let kv = match &m.kv {
        Some(kv) if !kv_entries.is_empty() => Some(AssetsKv {
            pair: kv.pair.clone(),
            modules: with_cache_forms(kv_entries, &kv.pair)?,
        }),
        _ => None,
    };
    let (tok, cfg) = stage_tokenizer(src.tokenizer, staging, &layout, progress)?;
    let chat = tok
        .as_ref()
        .and_then(|t| packaged_chat(&staging.path(t), warnings));
    for f in tok.iter().chain(cfg.iter()) {
        files.push(staged_record(staging, f)?);
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let kv_modules = kv.iter().flat_map(|kv| kv.modules.values());
    let provenance = provenance(m, modules.values().chain(kv_modules));
    Ok(AssetsManifest {
        format: AssetsManifest::FORMAT.to_string(),
        kiln_version: crate::VERSION.to_string(),
        iree_version: crate::iree::flags::IREE_VERSION.to_string(),
        contract: m.contract.with_model(()),
        parameters: irpa_name,
        modules,
        kv,
        tokenizer: tok,
        tokenizer_config: cfg,
        chat,
        files,
        provenance,
    })
}

/// The files the assets manifest at `path` lists (none when there is no
/// readable one).
fn previous_files(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<AssetsManifest>(&t).ok())
        .map(|m| m.files.into_iter().map(|f| f.path).collect())
        .unwrap_or_default()
}

/// Writes `manifest` into `staging` and moves every file into `out`, the
/// manifest last; then removes the files of an earlier package of this
/// model that this one does not have.
fn commit(staging: Staging, out: &Path, manifest: AssetsManifest) -> Result<Staged> {
    let name = &manifest.contract.name;
    let manifest_name = Layout::new(out, name).file(Artifact::AssetsManifest);
    crate::util::write_atomic(staging.path(&manifest_name), &json_bytes(&manifest)?)?;
    // The files an earlier package of this model listed (read before its
    // manifest is replaced).
    let previous = previous_files(&out.join(&manifest_name));
    let files: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    let written = staging.commit(&files, &manifest_name)?;
    for f in previous {
        let plain = crate::names::plain_name(&f).is_ok() && f.starts_with(name.as_str());
        if plain && !manifest.files.iter().any(|r| r.path == f) {
            let p = out.join(&f);
            if p.is_file() {
                std::fs::remove_file(&p).map_err(|e| IoError::new(&p, e))?;
            }
        }
    }
    Ok((manifest, out.join(manifest_name), written))
}
