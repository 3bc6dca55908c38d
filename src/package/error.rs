//! What [`package`](super::package) refuses ([`PackageError`]) and what it
//! notes without failing ([`PackageWarning`]).

use crate::iree::flags::Target;
use crate::tokenizer::TokenizerError;
use serde::Serialize;
use std::path::PathBuf;

/// What [`package`](super::package) refuses: a tokenizer it cannot find or read, an
/// archive that changed since the export, no module to ship.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackageError {
    /// The export's source checkpoint, where the tokenizer would come
    /// from, is gone.
    #[error(
        "the export's source {source_path:?} no longer exists, so its tokenizer cannot be read"
    )]
    NoSource {
        /// The source the export manifest records.
        source_path: String,
    },
    /// A GGUF file whose tokenizer metadata does not make a tokenizer.json.
    #[error("{}: cannot build a tokenizer.json: {source}", path.display())]
    TokenizerBuild {
        /// The GGUF file.
        path: PathBuf,
        /// Why not.
        source: Box<TokenizerError>,
    },
    /// A folder without a tokenizer.json.
    #[error("{}: no tokenizer.json in this folder", dir.display())]
    NoTokenizerJson {
        /// The folder.
        dir: PathBuf,
    },
    /// A tokenizer file that is not JSON.
    #[error("{}: not a tokenizer.json: {source}", path.display())]
    NotTokenizerJson {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A JSON file without a tokenizer `model`.
    #[error("{}: not a tokenizer.json (no \"model\")", path.display())]
    NoTokenizerModel {
        /// The file.
        path: PathBuf,
    },
    /// A tokenizer config that is not a JSON object.
    #[error("{}: not a JSON object: {source}", path.display())]
    ConfigNotObject {
        /// The config file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The assets directory is the export's own.
    #[error("{} is the export's own directory: choose a separate assets directory", out.display())]
    OutIsExportDir {
        /// The assets directory.
        out: PathBuf,
    },
    /// The parameter archive has another size than the export recorded.
    #[error(
        "{}: {found} bytes, but the export manifest {} records {recorded}: the archive changed since it was exported",
        irpa.display(),
        manifest.display()
    )]
    IrpaSize {
        /// The archive.
        irpa: PathBuf,
        /// The export manifest.
        manifest: PathBuf,
        /// Its size now.
        found: u64,
        /// The size recorded.
        recorded: u64,
    },
    /// The parameter archive has another sha256 than the export recorded.
    #[error(
        "{}: sha256 {found} does not match the export manifest's {recorded}: the archive changed since it was exported",
        irpa.display()
    )]
    IrpaSha {
        /// The archive.
        irpa: PathBuf,
        /// Its sha256 now.
        found: String,
        /// The sha256 recorded.
        recorded: String,
    },
    /// The host module, asked for, is not there.
    #[error("{}: host module not found", path.display())]
    NoHostModule {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// No module for Android was compiled.
    #[error(
        "no compiled modules for {name} in {} (looked for {})",
        dir.display(),
        looked.join(", ")
    )]
    NoModules {
        /// The model's name.
        name: String,
        /// The export's folder.
        dir: PathBuf,
        /// The module files looked for.
        looked: Vec<String>,
        /// The module they are compiled from.
        mlir: PathBuf,
    },
    /// A JSON document could not be written.
    #[error(transparent)]
    Json(serde_json::Error),
    /// The export manifest, or a manifest in the output folder, cannot be
    /// read as one.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    /// A file could not be read, copied or written.
    #[error(transparent)]
    Io(#[from] crate::util::IoError),
    /// The IREE toolchain's version could not be read.
    #[error(transparent)]
    Iree(#[from] crate::iree::IreeError),
    /// The parameter archive or the GGUF source cannot be read.
    #[error(transparent)]
    Params(#[from] crate::params::ParamsError),
    /// The export's KV-cache pair cannot be one.
    #[error(transparent)]
    Step(#[from] crate::step::StepError),
}

/// Something [`package`](super::package) notes without failing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PackageWarning {
    /// kiln cannot read the packaged tokenizer, so the manifest records no
    /// chat template.
    NoChatTemplate {
        /// Why it cannot.
        reason: String,
    },
    /// The chat template does not compile; it is recorded without affixes.
    TemplateDoesNotCompile {
        /// Why not.
        reason: String,
    },
    /// kiln's own tokenizer cannot read a tokenizer.json that is packaged
    /// anyway (the app may bring its own tokenizer library).
    TokenizerUnreadable {
        /// The tokenizer.json.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// A module older than the MLIR it is compiled from.
    Stale {
        /// The module.
        module: PathBuf,
        /// The MLIR.
        mlir: PathBuf,
    },
    /// A module for one ABI or the GPU that was not compiled.
    MissingModule {
        /// The module looked for.
        path: PathBuf,
        /// Its key in the assets (`armeabi-v7a`, `vulkan`, …).
        key: &'static str,
    },
    /// The KV-cache module for a packaged target that was not compiled.
    MissingKvModule {
        /// The module looked for.
        path: PathBuf,
        /// Its key in the assets.
        key: &'static str,
        /// The KV-cache MLIR it is compiled from.
        kv_mlir: PathBuf,
        /// The target it is compiled for.
        target: Target,
    },
}

impl std::fmt::Display for PackageWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PackageWarning::NoChatTemplate { reason } => {
                write!(f, "no chat template in the manifest: {reason}")
            }
            PackageWarning::TemplateDoesNotCompile { reason } => write!(
                f,
                "the chat template does not compile ({reason}); recorded without affixes"
            ),
            PackageWarning::TokenizerUnreadable { path, reason } => write!(
                f,
                "kiln's own tokenizer cannot read {} ({reason}); packaged anyway",
                path.display()
            ),
            PackageWarning::Stale { module, mlir } => write!(
                f,
                "{} is older than {}: it may be stale",
                module.display(),
                mlir.display()
            ),
            PackageWarning::MissingModule { path, key } => {
                write!(f, "{} not found: no {key} module packaged", path.display())
            }
            PackageWarning::MissingKvModule { path, key, .. } => write!(
                f,
                "{} not found: no KV-cache {key} module packaged",
                path.display()
            ),
        }
    }
}

/// A warning is reported (`kiln package --json`) as its text.
impl Serialize for PackageWarning {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
