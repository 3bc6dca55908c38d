//! The compile records of an export: `kiln compile` notes in `NAME.json`
//! how each module it wrote beside the manifest was compiled from the
//! export's MLIR (target, every flag, the compiler's version, the module's
//! sha256), so `kiln package` can carry it into the assets and `kiln
//! verify --rebuild` can compile again.

use super::error::Result;
use super::layout::{Artifact, Layout};
use crate::iree::flags::Target;
use crate::iree::Toolchain;
use crate::manifest::{CompileInfo, CompiledModule, ExportManifest};
use crate::util::IoError;
use std::path::{Path, PathBuf};

impl ExportManifest {
    /// Records in the export manifest beside `mlir` (`NAME.json` of
    /// `NAME-gen.mlir` or `NAME-kv-gen.mlir`) how each of `modules` (target,
    /// output path) was compiled from it with `extra` flags after kiln's
    /// preset. Only modules written beside the manifest are recorded, and only
    /// when `mlir` is the file the manifest lists, unchanged; an earlier record
    /// of the same file is replaced. The manifest is rewritten atomically.
    ///
    /// Returns the manifest's path, or `None` when nothing was recorded: no
    /// export manifest beside the MLIR, an MLIR the manifest does not list
    /// or that changed since the export, or modules written to another
    /// folder.
    pub fn record_compiles(
        tc: &Toolchain,
        mlir: &Path,
        modules: &[(Target, PathBuf)],
        extra: &[String],
    ) -> Result<Option<PathBuf>> {
        let layout = Layout::of_module(mlir).layout;
        let manifest_path = layout.path(Artifact::Manifest);
        if !manifest_path.is_file() {
            // Not recorded: no export manifest beside the module.
            return Ok(None);
        }
        let text =
            std::fs::read_to_string(&manifest_path).map_err(|e| IoError::new(&manifest_path, e))?;
        let Ok(mut manifest) = serde_json::from_str::<ExportManifest>(&text) else {
            // Not recorded: the manifest beside the module is not an export manifest.
            return Ok(None);
        };
        let Some(file) = mlir.file_name().and_then(|f| f.to_str()) else {
            // Not recorded: the module has no file name.
            return Ok(None);
        };
        let Some(source) = manifest.files.values().find(|r| r.path == file).cloned() else {
            // Not recorded: the export manifest does not list this module.
            return Ok(None);
        };
        // Read once: hashed, and scanned for the flags the module adds.
        let module_bytes = std::fs::read(mlir).map_err(|e| IoError::new(mlir, e))?;
        let mlir_sha256 = crate::util::sha256_hex(&module_bytes);
        let module_text = String::from_utf8_lossy(&module_bytes);
        if mlir_sha256 != source.sha256 {
            // Not recorded: the module changed since the export.
            return Ok(None);
        }
        let dir = canonical(layout.dir());
        let beside: Vec<&(Target, PathBuf)> = modules
            .iter()
            .filter(|(_, out)| out.parent().map(canonical) == Some(dir.clone()))
            .collect();
        if beside.is_empty() {
            // Not recorded: the modules were written to another folder.
            return Ok(None);
        }
        let iree_compile = tc.compiler_version()?;
        for (target, out) in beside {
            let name = out
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            let bytes = std::fs::metadata(out)
                .map_err(|e| IoError::new(out, e))?
                .len();
            // `kiln compile --pack` left its packed archive beside the
            // module (a compile without it removes a stale one).
            let packed_path = crate::iree::pack::packed_archive(out);
            let packed = match packed_path.is_file() {
                false => None,
                true => Some(crate::manifest::FileRecord {
                    path: packed_path
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    bytes: std::fs::metadata(&packed_path)
                        .map_err(|e| IoError::new(&packed_path, e))?
                        .len(),
                    sha256: crate::util::sha256_file(&packed_path)?,
                }),
            };
            let record = CompiledModule {
                compile: CompileInfo {
                    mlir: source.path.clone(),
                    mlir_sha256: mlir_sha256.clone(),
                    target: target.clone(),
                    flags: {
                        let mut f = target.compile_flags();
                        f.extend(crate::iree::compile::module_flags(target, &module_text));
                        f.extend(extra.iter().cloned());
                        f
                    },
                    iree_compile: iree_compile.clone(),
                    pack: packed.is_some(),
                },
                bytes,
                sha256: crate::util::sha256_file(out)?,
                packed,
            };
            manifest.modules.insert(name, record);
        }
        crate::util::write_atomic(&manifest_path, manifest.to_json().as_bytes())?;
        Ok(Some(manifest_path))
    }
}

/// `path` made absolute and resolved, or as it is when it cannot be.
fn canonical(path: &Path) -> PathBuf {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}
