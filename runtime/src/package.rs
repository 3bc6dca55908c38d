//! A folder from `kiln package`, as the runtime reads it: the assets
//! manifest `NAME.manifest.json` (format `kiln-android-assets/1`; its
//! full declaration, with the compile records and the provenance, is the
//! compiler's `kiln::manifest::AssetsManifest`), checked against the
//! files before IREE maps any of them.
//!
//! [`Package::open`] refuses a folder whose manifest does not parse, names
//! a file outside the folder ([`crate::names`]), or lists a file that is
//! missing or of another size than recorded; [`Package::module_for`]
//! picks the module for the CPU the process runs on.

use crate::names::file_in_folder;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A package that cannot be opened as one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackageError {
    /// No `NAME.manifest.json` in the folder, or more than one.
    #[error("{}: {message}", dir.display())]
    Folder {
        /// The folder.
        dir: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The manifest is not one.
    #[error("{}: {message}", path.display())]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// Where parsing failed, or what does not hold.
        message: String,
    },
    /// A file the manifest lists is missing, or not as recorded.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The package has no module for this CPU (or for Vulkan).
    #[error("{}: no module for {abi} (the package has {have})", dir.display())]
    NoModule {
        /// The package.
        dir: PathBuf,
        /// The ABI key looked for (`arm64-v8a`, `armeabi-v7a`, `host`, `vulkan`).
        abi: String,
        /// The keys it has.
        have: String,
    },
}

/// One module in the package.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct PackagedModule {
    /// Its file name.
    pub path: String,
    /// The IREE device `kiln package` gives it (`local-task`,
    /// `local-sync`, `vulkan`).
    pub device: String,
    /// A KV module whose caches differ from the pair's: their element type.
    #[serde(default)]
    pub cache_dtype: Option<String>,
    /// With `cache_dtype`: the shape of each cache tensor.
    #[serde(default)]
    pub cache_shape: Option<Vec<usize>>,
    /// The packed archive it reads under scope `packed` (`kiln compile
    /// --pack`).
    #[serde(default)]
    pub packed: Option<String>,
}

/// One attention span of the KV pair.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct PackagedSpan {
    /// Positions its functions attend to: `0..span`.
    pub span: usize,
    /// Its prefill function.
    pub prefill: String,
    /// Its decode function.
    pub decode: String,
}

/// The KV-cache pair of the package (`spec/kv-cache.md`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct PackagedKv {
    /// The prefill function.
    pub prefill: String,
    /// The decode function.
    pub decode: String,
    /// Prompt bucket P.
    pub prompt_len: usize,
    /// Max context N.
    pub max_context: usize,
    /// Cache element type (`f32` or `bf16`).
    pub cache_dtype: String,
    /// Shape of each cache tensor, `[layers, kv_heads, N, head_dim]`.
    pub cache_shape: Vec<usize>,
    /// Tensors each of K and V is split into.
    #[serde(default = "one")]
    pub cache_count: usize,
    /// `Some(K)`: the functions also return the top-K logits and ids.
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Attention spans below N, ascending.
    #[serde(default)]
    pub spans: Vec<PackagedSpan>,
    /// KV modules by ABI key.
    pub modules: BTreeMap<String, PackagedModule>,
}

fn one() -> usize {
    1
}

/// A file's recorded size and hash.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct PackagedFile {
    /// File name.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Lower-case hex sha256.
    pub sha256: String,
}

/// What the runtime reads of `NAME.manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct PackageManifest {
    /// `kiln-android-assets/1`.
    pub format: String,
    /// The model's name: the prefix of every file.
    pub name: String,
    /// The redecode forward function.
    pub function: String,
    /// Its window SEQ.
    pub seq: usize,
    /// The parameter scope of the archive.
    pub scope: String,
    /// Vocabulary size: every id is below it.
    pub vocab_size: usize,
    /// End-of-sequence ids.
    pub eos_token_ids: Vec<u32>,
    /// The IREE version the modules were compiled for.
    pub iree_version: String,
    /// The parameter archive's file name.
    pub parameters: String,
    /// Redecode modules by ABI key.
    pub modules: BTreeMap<String, PackagedModule>,
    /// The KV-cache pair, when packaged.
    #[serde(default)]
    pub kv: Option<PackagedKv>,
    /// The HF `tokenizer.json`, when packaged.
    #[serde(default)]
    pub tokenizer: Option<String>,
    /// Every file with its size and sha256.
    pub files: Vec<PackagedFile>,
}

/// The format this runtime reads.
pub const FORMAT: &str = "kiln-android-assets/1";

/// An opened package: its folder and manifest, checked.
#[derive(Debug, Clone)]
pub struct Package {
    /// The folder.
    pub dir: PathBuf,
    /// The manifest.
    pub manifest: PackageManifest,
}

/// The ABI key of the CPU this process runs on: `host` on x86-64 (the
/// machine the package was made on), `arm64-v8a`, `armeabi-v7a`.
pub fn host_abi() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "arm64-v8a"
    } else if cfg!(target_arch = "arm") {
        "armeabi-v7a"
    } else {
        "host"
    }
}

impl Package {
    /// Opens the package in `dir`: its one `NAME.manifest.json`, parsed,
    /// every file name in it plain, every file it lists present with its
    /// recorded size (the archive's sha256 is `kiln verify`'s to check:
    /// hashing a gigabyte at every start would cost seconds; the module a
    /// model loads is checked by [`Package::check_sha256`]).
    pub fn open(dir: &Path) -> Result<Package, PackageError> {
        let folder = |message: String| PackageError::Folder {
            dir: dir.to_path_buf(),
            message,
        };
        let entries = std::fs::read_dir(dir).map_err(|e| folder(format!("not a folder: {e}")))?;
        let mut manifests: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(".manifest.json"))
            })
            .collect();
        manifests.sort();
        let path = match manifests.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(folder(
                    "no NAME.manifest.json: not a `kiln package` folder".into(),
                ))
            }
            many => {
                return Err(folder(format!(
                    "{} manifests ({}): open one model's folder",
                    many.len(),
                    many.iter()
                        .filter_map(|p| p.file_name()?.to_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        let bad = |message: String| PackageError::Manifest {
            path: path.clone(),
            message,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
        let manifest: PackageManifest =
            serde_json::from_str(&text).map_err(|e| bad(format!("not a package manifest: {e}")))?;
        if manifest.format != FORMAT {
            return Err(bad(format!(
                "format \"{}\": this runtime reads \"{FORMAT}\"",
                manifest.format
            )));
        }
        let package = Package {
            dir: dir.to_path_buf(),
            manifest,
        };
        package.check_files(&path)?;
        Ok(package)
    }

    /// Every name plain, every listed file present with its size.
    fn check_files(&self, manifest: &Path) -> Result<(), PackageError> {
        let m = &self.manifest;
        let mut names = vec![m.parameters.as_str()];
        let kv = m.kv.iter().flat_map(|k| k.modules.values());
        for e in m.modules.values().chain(kv) {
            names.push(&e.path);
            names.extend(e.packed.as_deref());
        }
        names.extend(m.tokenizer.as_deref());
        for name in names
            .iter()
            .copied()
            .chain(m.files.iter().map(|f| f.path.as_str()))
        {
            file_in_folder(&self.dir, name).map_err(|fault| PackageError::Manifest {
                path: manifest.to_path_buf(),
                message: format!("file name \"{name}\" {fault}"),
            })?;
        }
        for f in &m.files {
            let path = self.dir.join(&f.path);
            let meta = std::fs::metadata(&path).map_err(|e| PackageError::File {
                path: path.clone(),
                message: e.to_string(),
            })?;
            if meta.len() != f.bytes {
                return Err(PackageError::File {
                    path,
                    message: format!(
                        "{} bytes, but the manifest records {} (a damaged or partial copy)",
                        meta.len(),
                        f.bytes
                    ),
                });
            }
        }
        for name in names {
            if !m.files.iter().any(|f| f.path == name) {
                let path = self.dir.join(name);
                if !path.is_file() {
                    return Err(PackageError::File {
                        path,
                        message: "missing".into(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Checks the file `name` against the sha256 `files` records for it
    /// (what `open` does for the module it loads: a module is megabytes,
    /// and IREE loads a damaged one without a word).
    pub fn check_sha256(&self, name: &str) -> Result<(), PackageError> {
        use sha2::Digest;
        let path = self.dir.join(name);
        let Some(rec) = self.manifest.files.iter().find(|f| f.path == name) else {
            return Err(PackageError::File {
                path,
                message: "not in the manifest's files".into(),
            });
        };
        let bytes = std::fs::read(&path).map_err(|e| PackageError::File {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let got: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if got != rec.sha256 {
            return Err(PackageError::File {
                path,
                message: format!(
                    "sha256 {got}, but the manifest records {} (a damaged copy)",
                    rec.sha256
                ),
            });
        }
        Ok(())
    }

    /// A file of the package.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The module for `abi` (see [`host_abi`]; `vulkan` for the GPU):
    /// the KV pair's when the package has one, else the redecode
    /// forward's.
    pub fn module_for(&self, abi: &str) -> Result<&PackagedModule, PackageError> {
        let m = &self.manifest;
        let modules = match &m.kv {
            Some(kv) => &kv.modules,
            None => &m.modules,
        };
        modules.get(abi).ok_or_else(|| PackageError::NoModule {
            dir: self.dir.clone(),
            abi: abi.to_string(),
            have: if modules.is_empty() {
                "none".into()
            } else {
                modules.keys().cloned().collect::<Vec<_>>().join(", ")
            },
        })
    }
}
