//! `kiln verify`: checks a folder of packaged assets (`NAME.manifest.json`)
//! or an export folder (`NAME.json`) against what its manifests say, and
//! names every file that does not match and how:
//!
//! - every listed file's size and sha256;
//! - each module's exported functions and their tensor signatures, read
//!   from the `.vmfb` with IREE's `iree-dump-module`, against the manifest's
//!   contract (SEQ) and KV pair (P, the caches' shapes, top-K);
//! - every parameter range a module's initializer loads against the
//!   archive's entries (kiln's own IRPA reader): the scope, the key, the
//!   bytes;
//! - with [`VerifyOptions::rebuild`], the export and each recorded compile
//!   run again from the manifest's recipe (when the checkpoint is at hand
//!   and the compiler is the recorded one), and the bytes compared.
//!
//! A mismatch is a [`Fault`] in the report, not an error: [`verify`] fails
//! only when it cannot check at all (no manifest in the folder, no
//! iree-dump-module).

mod recipe;
mod signatures;
mod vocab;

use crate::export::{Artifact, Layout};
use crate::iree::flags::{Device, Target};
use crate::iree::inspect::{inspect_module, FunctionSignature, ModuleInfo};
use crate::iree::Toolchain;
use crate::manifest::{
    AssetsManifest, CompileInfo, Contract, ExportManifest, ExportRecipe, FileRecord, KvPair,
};
use crate::params::irpa::IrpaReader;
use crate::util::IoError;
use recipe::rebuild_export;
use signatures::{executable_format, kv_signatures, same_kind, signature_text};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How [`verify`] runs: `default()` and the setters.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct VerifyOptions {
    /// Also run the export and the recorded compiles again and compare
    /// the bytes.
    pub rebuild: bool,
    /// The checkpoint to rebuild from (default: the path the manifest
    /// records); it must hash to the recorded sha256.
    pub checkpoint: Option<PathBuf>,
}

impl VerifyOptions {
    /// Sets whether to rebuild and compare.
    pub fn rebuild(mut self, rebuild: bool) -> Self {
        self.rebuild = rebuild;
        self
    }

    /// Sets the checkpoint to rebuild from.
    pub fn checkpoint(mut self, checkpoint: impl Into<Option<PathBuf>>) -> Self {
        self.checkpoint = checkpoint.into();
        self
    }
}

/// One mismatch: the file at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Fault {
    /// The file, relative to the folder.
    pub file: String,
    /// What does not match.
    pub fault: String,
}

/// What [`verify`] found for one manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ModelReport {
    /// The manifest's file name.
    pub manifest: String,
    /// `assets` (`kiln package`) or `export` (`kiln export`).
    pub kind: &'static str,
    /// Files whose size and sha256 were checked.
    pub files: usize,
    /// Modules whose functions and parameters were checked.
    pub modules: usize,
    /// Files rebuilt and compared byte for byte (with `rebuild`).
    pub rebuilt: Vec<String>,
    /// What was not rebuilt, and why (with `rebuild`).
    pub not_rebuilt: Vec<String>,
    /// Every mismatch found.
    pub faults: Vec<Fault>,
}

/// What [`verify`] found in a folder.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct VerifyReport {
    /// The folder checked.
    pub dir: PathBuf,
    /// One report per manifest, in file-name order.
    pub models: Vec<ModelReport>,
}

impl VerifyReport {
    /// Whether nothing was found wrong.
    pub fn passed(&self) -> bool {
        self.models.iter().all(|m| m.faults.is_empty())
    }

    /// Every fault, in order.
    pub fn faults(&self) -> impl Iterator<Item = &Fault> {
        self.models.iter().flat_map(|m| &m.faults)
    }
}

/// Why [`verify`] could not check a folder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The folder holds no manifest kiln wrote.
    #[error("{}: no assets manifest (NAME.manifest.json) or export manifest (NAME.json) in this folder", dir.display())]
    NoManifest {
        /// The folder.
        dir: PathBuf,
    },
    /// A recipe names a form, policy or dtype this kiln does not know.
    #[error("the recipe's {what} is not one this kiln knows")]
    Recipe {
        /// The field and its value.
        what: String,
    },
    /// The folder is not one, or cannot be listed.
    #[error(transparent)]
    Io(#[from] IoError),
}

/// Checks every manifest in `dir` (see the module docs).
pub fn verify(
    dir: &Path,
    tc: &Toolchain,
    opts: &VerifyOptions,
) -> Result<VerifyReport, VerifyError> {
    let io = |e| IoError::new(dir, e);
    if !dir.is_dir() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "not a folder",
        ))
        .into());
    }
    let mut entries: Vec<String> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    let mut models = Vec::new();
    // What the folder's manifests list, and the JSON files that are no
    // manifest (a broken one unless a manifest lists it).
    let mut listed: Vec<String> = Vec::new();
    let mut broken: Vec<(String, String)> = Vec::new();
    let mut assets = false;
    for name in &entries {
        let path = dir.join(name);
        if !name.ends_with(".json") || !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file())
        {
            continue;
        }
        let value = match std::fs::read(&path) {
            Err(e) => {
                broken.push((name.clone(), format!("cannot be read: {e}")));
                continue;
            }
            Ok(bytes) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(v) => v,
                Err(e) => {
                    broken.push((name.clone(), format!("not valid JSON: {e}")));
                    continue;
                }
            },
        };
        let format = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
        let mut check = Check::new(dir, tc, name);
        listed.push(name.clone());
        if format.starts_with("kiln-android-assets/") {
            assets = true;
            match serde_json::from_value::<AssetsManifest>(value) {
                Ok(m) => {
                    listed.extend(m.file_names().into_iter().map(str::to_string));
                    check.assets(&m, opts)
                }
                Err(e) => check.fault(name, format!("not a valid assets manifest: {e}")),
            }
            models.push(check.report("assets"));
        } else if value.get("kiln_version").is_some() && !name.ends_with(".manifest.json") {
            match serde_json::from_value::<ExportManifest>(value) {
                Ok(m) => {
                    listed.extend(m.file_names().into_iter().map(str::to_string));
                    listed.extend(check.export(&m, opts));
                }
                Err(e) => check.fault(name, format!("not a valid export manifest: {e}")),
            }
            models.push(check.report("export"));
        } else if name.ends_with(".manifest.json") {
            assets = true;
            check.fault(
                name,
                "not an assets manifest (no \"format\": \"kiln-android-assets/…\")",
            );
            models.push(check.report("assets"));
        } else {
            listed.pop();
        }
    }
    // A JSON file no manifest lists and that does not parse: a broken
    // manifest, named with where parsing failed.
    let mut unreadable = false;
    for (name, what) in broken {
        if !listed.contains(&name) {
            unreadable = true;
            let kind = if name.ends_with(".manifest.json") {
                assets = true;
                "assets"
            } else {
                "export"
            };
            let mut check = Check::new(dir, tc, &name);
            check.fault(&name, what);
            models.push(check.report(kind));
        }
    }
    if models.is_empty() {
        // No manifest, but a model's files: its manifest is missing.
        if let Some(m) = missing_manifest(dir, tc, &entries) {
            models.push(m);
        }
    }
    if models.is_empty() {
        return Err(VerifyError::NoManifest {
            dir: dir.to_path_buf(),
        });
    }
    // An assets folder holds what its manifests list and nothing else
    // (unknowable when one of them cannot be read: that is the fault).
    if assets && !unreadable {
        let extra: Vec<&String> = entries.iter().filter(|e| !listed.contains(e)).collect();
        let report = models
            .iter_mut()
            .find(|m| m.kind == "assets")
            .expect("an assets report");
        for e in extra {
            report.faults.push(Fault {
                file: e.clone(),
                fault: "not listed by any manifest in this folder".into(),
            });
        }
    }
    Ok(VerifyReport {
        dir: dir.to_path_buf(),
        models,
    })
}

/// A fault for the missing manifest of a folder without one that holds a
/// model's files: `NAME.irpa` beside packaged modules (`NAME.manifest.json`
/// missing) or beside an export's (`NAME.json`).
fn missing_manifest(dir: &Path, tc: &Toolchain, entries: &[String]) -> Option<ModelReport> {
    // The model's archive, not a module's packed one.
    let stem = entries
        .iter()
        .filter(|e| !e.ends_with(".packed.irpa"))
        .find_map(|e| e.strip_suffix(".irpa"))?;
    let packaged = crate::package::android_modules()
        .iter()
        .any(|k| entries.contains(&format!("{stem}-{}.vmfb", k.key)));
    let layout = Layout::new(dir, stem);
    let (file, kind) = match packaged {
        true => (layout.file(Artifact::AssetsManifest), "assets"),
        false => (layout.file(Artifact::Manifest), "export"),
    };
    let mut check = Check::new(dir, tc, &file);
    let what = format!("missing: the folder holds {stem}.irpa but no manifest");
    check.fault(&file, what);
    Some(check.report(kind))
}

/// The checks of one manifest, and what they found.
struct Check<'a> {
    dir: &'a Path,
    tc: &'a Toolchain,
    manifest: String,
    files: usize,
    modules: usize,
    rebuilt: Vec<String>,
    not_rebuilt: Vec<String>,
    faults: Vec<Fault>,
    /// File names already refused by the name check (each faulted once).
    refused: Vec<String>,
}

/// A module to check: its file and what it was compiled from.
struct ModuleToCheck<'m> {
    file: String,
    /// The slot it fills: the assets manifest's key (`arm64-v8a`, …) or,
    /// in an export folder, the target its file name ends in.
    slot: String,
    /// The target that slot holds modules of.
    target: Option<Target>,
    kv: bool,
    /// Compiled for Vulkan: bf16 KV caches are i32 words of two values
    /// there (`TensorType::lowered_for_vulkan`).
    vulkan: bool,
    compiled: Option<&'m CompileInfo>,
    /// The sha256 the manifest records for it.
    sha256: Option<&'m str>,
    /// Its packed archive (`kiln compile --pack`), read under scope
    /// `packed`.
    packed: Option<String>,
    /// The sha256 the manifest records for the packed archive.
    packed_sha256: Option<&'m str>,
}

impl<'a> Check<'a> {
    fn new(dir: &'a Path, tc: &'a Toolchain, manifest: &str) -> Self {
        Check {
            dir,
            tc,
            manifest: manifest.to_string(),
            files: 0,
            modules: 0,
            rebuilt: Vec::new(),
            not_rebuilt: Vec::new(),
            faults: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// The path of the manifest's file `name` in the folder, or `None`
    /// (and a fault, once) when it is not a plain file name there
    /// ([`crate::names::file_in_folder`]): no file is opened under a name
    /// before this check.
    fn path(&mut self, name: &str) -> Option<PathBuf> {
        match crate::names::file_in_folder(self.dir, name) {
            Ok(p) => Some(p),
            Err(e) => {
                if !self.refused.iter().any(|r| r == name) {
                    self.refused.push(name.to_string());
                    let manifest = self.manifest.clone();
                    self.fault(&manifest, format!("lists file {name:?}, which {e}"));
                }
                None
            }
        }
    }

    /// The manifest's model name and file names, checked before any file
    /// is opened (every refused name is one fault).
    fn names(&mut self, name: &str, files: &[&str]) {
        if !crate::manifest::plain_stem(name) {
            let manifest = self.manifest.clone();
            let what = format!("its name {name:?} is not a plain file name stem");
            self.fault(&manifest, what);
        }
        for f in files {
            self.path(f);
        }
    }

    fn report(self, kind: &'static str) -> ModelReport {
        ModelReport {
            manifest: self.manifest,
            kind,
            files: self.files,
            modules: self.modules,
            rebuilt: self.rebuilt,
            not_rebuilt: self.not_rebuilt,
            faults: self.faults,
        }
    }

    fn fault(&mut self, file: &str, fault: impl Into<String>) {
        self.faults.push(Fault {
            file: file.to_string(),
            fault: fault.into(),
        });
    }

    /// A packaged assets folder.
    fn assets(&mut self, m: &AssetsManifest, opts: &VerifyOptions) {
        self.names(&m.name, &m.file_names());
        for rec in &m.files {
            self.file(rec);
        }
        let sha = |path: &str| {
            m.files
                .iter()
                .find(|r| r.path == path)
                .map(|r| r.sha256.as_str())
        };
        let slot = |key: &str| {
            let mut kinds = Vec::from(crate::package::android_modules());
            kinds.push(crate::package::host_module());
            kinds.into_iter().find(|k| k.key == key).map(|k| k.target)
        };
        let mut modules: Vec<ModuleToCheck<'_>> = m
            .modules
            .iter()
            .map(|(key, e)| ModuleToCheck {
                file: e.path.clone(),
                slot: key.clone(),
                target: slot(key),
                kv: false,
                vulkan: e.device == Device::Vulkan,
                compiled: e.compiled.as_ref(),
                sha256: sha(&e.path),
                packed: e.packed.clone(),
                packed_sha256: e.packed.as_deref().and_then(sha),
            })
            .collect();
        if let Some(kv) = &m.kv {
            modules.extend(kv.modules.iter().map(|(key, e)| ModuleToCheck {
                file: e.path.clone(),
                slot: key.clone(),
                target: slot(key),
                kv: true,
                vulkan: e.device == Device::Vulkan,
                compiled: e.compiled.as_ref(),
                sha256: sha(&e.path),
                packed: e.packed.clone(),
                packed_sha256: e.packed.as_deref().and_then(sha),
            }));
        }
        let packed = modules.iter().filter_map(|x| x.packed.as_ref());
        for listed in modules
            .iter()
            .map(|x| &x.file)
            .chain(packed)
            .chain([&m.parameters])
        {
            if !m.files.iter().any(|r| &r.path == listed) {
                let what = format!("listed by {} but not among its files", self.manifest);
                self.fault(listed, what);
            }
        }
        let entries = m
            .modules
            .iter()
            .chain(m.kv.iter().flat_map(|k| k.modules.iter()));
        for (key, e) in entries {
            match slot(key) {
                None => self.fault(
                    &e.path,
                    format!("fills slot {key:?}, which is no ABI kiln packages"),
                ),
                Some(t) if !same_kind(&t, &e.target) => self.fault(
                    &e.path,
                    format!(
                        "fills slot {key:?} (target {t}), but the manifest says target {}",
                        e.target
                    ),
                ),
                _ => {}
            }
        }
        let kv = m.kv.as_ref().map(|k| &k.pair);
        let weights_for = m
            .provenance
            .as_ref()
            .map(|p| p.recipe.weights_for.clone())
            .unwrap_or_default();
        self.modules_and_archive(&m.contract, kv, &m.parameters, &modules);
        self.vocabulary(&m.contract, &m.parameters, &weights_for);
        if opts.rebuild {
            match &m.provenance {
                Some(p) => {
                    let irpa = m.files.iter().find(|r| r.path == m.parameters);
                    let targets = Rebuild {
                        source: &p.source,
                        recipe: &p.recipe,
                        files: irpa
                            .map(|r| vec![(Artifact::Irpa, r.clone())])
                            .unwrap_or_default(),
                        modules: &modules,
                    };
                    self.rebuild(targets, opts);
                }
                None => self.not_rebuilt.push(format!(
                    "{}: no provenance (packaged by a kiln without it)",
                    self.manifest
                )),
            }
        }
    }

    /// An export folder.
    /// Returns the unrecorded modules it found beside the manifest.
    fn export(&mut self, m: &ExportManifest, opts: &VerifyOptions) -> Vec<String> {
        self.names(&m.name, &m.file_names());
        for rec in m.files.values() {
            self.file(rec);
        }
        for (file, rec) in &m.modules {
            self.file(&FileRecord {
                path: file.clone(),
                bytes: rec.bytes,
                sha256: rec.sha256.clone(),
            });
            if let Some(packed) = &rec.packed {
                self.file(packed);
            }
        }
        // Recorded modules, and any other module kiln compile named after
        // this export (compiled without a record).
        let layout = Layout::new(self.dir, &m.name);
        let kv_mlir = m.files.get("kv_mlir").map(|r| r.path.as_str());
        let mut modules: Vec<ModuleToCheck<'_>> = m
            .modules
            .iter()
            .map(|(file, rec)| ModuleToCheck {
                file: file.clone(),
                slot: Layout::of_module(Path::new(file))
                    .target
                    .map_or_else(|| "none".to_string(), |t| t.to_string()),
                target: Layout::of_module(Path::new(file)).target,
                kv: Some(rec.compile.mlir.as_str()) == kv_mlir,
                vulkan: matches!(rec.compile.target, Target::Vulkan { .. }),
                compiled: Some(&rec.compile),
                sha256: Some(rec.sha256.as_str()),
                packed: rec.packed.as_ref().map(|p| p.path.clone()),
                packed_sha256: rec.packed.as_ref().map(|p| p.sha256.as_str()),
            })
            .collect();
        let mut unrecorded = Vec::new();
        // Only beside a manifest whose name is a plain stem.
        let targets = match crate::manifest::plain_stem(&m.name) {
            true => crate::iree::flags::TARGET_NAMES,
            false => &[],
        };
        for target in targets {
            let Ok(t) = Target::parse(target) else {
                continue;
            };
            for (artifact, kv) in [
                (Artifact::Module(&t), false),
                (Artifact::KvModule(&t), true),
            ] {
                let file = layout.file(artifact);
                if layout.path(artifact).is_file() && !m.modules.contains_key(&file) {
                    let packed = crate::iree::pack::packed_archive(Path::new(&file));
                    let packed = packed.to_string_lossy().into_owned();
                    let packed = self.dir.join(&packed).is_file().then_some(packed);
                    unrecorded.push(file.clone());
                    unrecorded.extend(packed.clone());
                    modules.push(ModuleToCheck {
                        packed,
                        slot: target.to_string(),
                        target: Some(t.clone()),
                        file,
                        kv,
                        vulkan: matches!(t, Target::Vulkan { .. }),
                        compiled: None,
                        sha256: None,
                        packed_sha256: None,
                    });
                }
            }
        }
        let irpa = m.files.get("irpa").map(|r| r.path.clone());
        let irpa = irpa.unwrap_or_else(|| layout.file(Artifact::Irpa));
        let kv = m.kv.as_ref().map(|k| &k.pair);
        let contract = m.contract.with_model(());
        if contract.vocab_size != m.config.vocab_size {
            let manifest = self.manifest.clone();
            let what = format!(
                "its vocab_size {} is not its config's {}",
                contract.vocab_size, m.config.vocab_size
            );
            self.fault(&manifest, what);
        }
        self.modules_and_archive(&contract, kv, &irpa, &modules);
        let weights_for = m
            .recipe
            .as_ref()
            .map(|r| r.weights_for.clone())
            .unwrap_or_default();
        self.vocabulary(&contract, &irpa, &weights_for);
        if opts.rebuild {
            match &m.recipe {
                Some(recipe) => {
                    let mut files = Vec::new();
                    for (key, artifact) in [
                        ("mlir", Artifact::Mlir),
                        ("kv_mlir", Artifact::KvMlir),
                        ("irpa", Artifact::Irpa),
                        ("safetensors", Artifact::Safetensors),
                    ] {
                        if let Some(r) = m.files.get(key) {
                            files.push((artifact, r.clone()));
                        }
                    }
                    self.rebuild(
                        Rebuild {
                            source: &m.source,
                            recipe,
                            files,
                            modules: &modules,
                        },
                        opts,
                    );
                }
                None => self.not_rebuilt.push(format!(
                    "{}: no recipe (exported by a kiln without it)",
                    self.manifest
                )),
            }
        }
        unrecorded
    }

    /// Size and sha256 of one listed file.
    fn file(&mut self, rec: &FileRecord) {
        self.files += 1;
        let Some(path) = self.path(&rec.path) else {
            return;
        };
        let Ok(meta) = std::fs::metadata(&path) else {
            return self.fault(&rec.path, "missing");
        };
        if meta.len() != rec.bytes {
            let what = format!("{} bytes, the manifest says {}", meta.len(), rec.bytes);
            return self.fault(&rec.path, what);
        }
        match crate::util::sha256_file(&path) {
            Ok(sha) if sha == rec.sha256 => {}
            Ok(sha) => {
                let what = format!("sha256 {sha}, the manifest says {}", rec.sha256);
                self.fault(&rec.path, what);
            }
            Err(e) => self.fault(&rec.path, format!("cannot be read: {e}")),
        }
    }

    /// Each module's functions against the contract and the KV pair, and
    /// its parameter reads against the archive.
    fn modules_and_archive(
        &mut self,
        contract: &Contract,
        kv: Option<&KvPair>,
        irpa: &str,
        modules: &[ModuleToCheck<'_>],
    ) {
        let (input, output) = crate::manifest::io_types(contract.seq);
        if contract.input != input || contract.output != output {
            let what = format!(
                "its input {} and output {} are not those of SEQ {} ({input}, {output})",
                contract.input, contract.output, contract.seq
            );
            let manifest = self.manifest.clone();
            self.fault(&manifest, what);
        }
        let archive = self.entries(irpa);
        for module in modules {
            self.modules += 1;
            let Some(path) = self.path(&module.file) else {
                continue;
            };
            if !path.is_file() {
                // Already a fault of the file checks when it is listed.
                continue;
            }
            let info = match inspect_module(self.tc, &path) {
                Ok(info) => info,
                Err(e) => {
                    self.fault(&module.file, format!("not a module IREE can read: {e}"));
                    continue;
                }
            };
            let expected = match (module.kv, kv) {
                (false, _) => vec![FunctionSignature::new(
                    &contract.function,
                    vec![input.clone()],
                    vec![output.clone()],
                )],
                (true, Some(pair)) => match kv_signatures(pair, module.vulkan) {
                    Ok(s) => s,
                    Err(e) => {
                        let manifest = self.manifest.clone();
                        self.fault(&manifest, e);
                        continue;
                    }
                },
                (true, None) => {
                    let what = "a KV-cache module, but the manifest has no KV pair";
                    self.fault(&module.file, what);
                    continue;
                }
            };
            self.functions(&module.file, &info, &expected);
            self.slot(module, &info);
            let packed = module.packed.as_ref().and_then(|p| {
                let entries = self.entries(p)?;
                Some((p.as_str(), entries))
            });
            if let Some(archive) = &archive {
                let packed = packed.as_ref().map(|(p, e)| (*p, e));
                self.parameters(
                    &module.file,
                    &info,
                    &contract.scope,
                    (irpa, archive),
                    packed,
                );
            }
        }
    }

    /// The module's executable formats against its slot's target and its
    /// compile record's.
    fn slot(&mut self, module: &ModuleToCheck<'_>, info: &ModuleInfo) {
        if let (Some(c), Some(t)) = (module.compiled, &module.target) {
            if !same_kind(&c.target, t) {
                let what = format!(
                    "fills slot {} (target {t}), but its compile record says target {}",
                    module.slot, c.target
                );
                self.fault(&module.file, what);
            }
        }
        let Some(want) = module.target.as_ref().map(executable_format) else {
            return;
        };
        if let Some(bad) = info.formats.iter().find(|f| f.as_str() != want) {
            let what = format!(
                "holds executables of format {bad}, slot {} needs {want}",
                module.slot
            );
            self.fault(&module.file, what);
        }
    }

    /// The module's functions against the expected signatures.
    fn functions(&mut self, file: &str, info: &ModuleInfo, expected: &[FunctionSignature]) {
        for want in expected {
            match info.function(&want.name) {
                None => {
                    let have: Vec<&str> = info.functions.iter().map(|f| f.name.as_str()).collect();
                    let what = format!(
                        "exports no function @{} (it exports {})",
                        want.name,
                        have.join(", ")
                    );
                    self.fault(file, what);
                }
                Some(got) if got != want => {
                    let what = format!(
                        "@{} is {}, the manifest says {}",
                        want.name,
                        signature_text(got),
                        signature_text(want)
                    );
                    self.fault(file, what);
                }
                Some(_) => {}
            }
        }
    }

    /// The entries of the archive `irpa` and their byte counts; `None`
    /// (and a fault) when it cannot be read.
    fn entries(&mut self, irpa: &str) -> Option<BTreeMap<String, u64>> {
        match IrpaReader::open(self.path(irpa)?) {
            Ok(r) => Some(
                r.entries()
                    .iter()
                    .map(|e| (e.name.clone(), e.len()))
                    .collect::<BTreeMap<String, u64>>(),
            ),
            Err(e) => {
                self.fault(irpa, format!("not a readable parameter archive: {e}"));
                None
            }
        }
    }

    /// The module's parameter reads against the archive's entries, and the
    /// reads of scope `packed` against its packed archive's.
    fn parameters(
        &mut self,
        file: &str,
        info: &ModuleInfo,
        scope: &str,
        (irpa, archive): (&str, &BTreeMap<String, u64>),
        packed: Option<(&str, &BTreeMap<String, u64>)>,
    ) {
        for read in &info.parameters {
            let (irpa, archive) = match packed {
                Some(p) if read.scope == crate::iree::pack::PACKED_SCOPE => p,
                _ => (irpa, archive),
            };
            let what = if read.scope != scope && read.scope != crate::iree::pack::PACKED_SCOPE {
                format!(
                    "reads parameter {:?} of scope {:?}, the manifest's scope is {scope:?}",
                    read.key, read.scope
                )
            } else if read.scope == crate::iree::pack::PACKED_SCOPE && packed.is_none() {
                format!(
                    "reads parameter {:?} of scope \"packed\" (packed at compile time), but no packed archive is recorded for it",
                    read.key
                )
            } else {
                match archive.get(&read.key) {
                    None => format!("reads parameter {:?}, which {irpa} does not hold", read.key),
                    Some(&len) if read.end() > len => format!(
                        "reads bytes {}..{} of parameter {:?}, which has {len} bytes in {irpa}",
                        read.offset,
                        read.end(),
                        read.key
                    ),
                    Some(_) => continue,
                }
            };
            self.fault(file, what);
        }
    }

    /// Runs the export and the recorded compiles again, and compares.
    fn rebuild(&mut self, r: Rebuild<'_>, opts: &VerifyOptions) {
        let manifest = self.manifest.clone();
        let source = opts
            .checkpoint
            .clone()
            .unwrap_or_else(|| PathBuf::from(r.source));
        let Some(want) = &r.recipe.checkpoint else {
            self.not_rebuilt
                .push(format!("{manifest}: the recipe has no checkpoint hash"));
            return;
        };
        if !source.exists() {
            self.not_rebuilt.push(format!(
                "{manifest}: the checkpoint {} is not here (give its path)",
                source.display()
            ));
            return;
        }
        match crate::export::checkpoint_record(&source) {
            Ok(Some(got)) if got.sha256 == want.sha256 => {}
            Ok(got) => {
                let got = got.map_or("nothing".to_string(), |g| g.sha256);
                let what = format!(
                    "the checkpoint {} hashes to {got}, the recipe says {}",
                    source.display(),
                    want.sha256
                );
                return self.fault(&manifest, what);
            }
            Err(e) => return self.fault(&manifest, format!("cannot hash the checkpoint: {e}")),
        }
        let tmp = match tempfile::Builder::new().prefix(".kiln-verify-").tempdir() {
            Ok(t) => t,
            Err(e) => return self.fault(&manifest, format!("no temporary folder: {e}")),
        };
        let rebuilt = match rebuild_export(&source, r.recipe, tmp.path()) {
            Ok(layout) => layout,
            Err(e) => return self.fault(&manifest, format!("the export failed again: {e}")),
        };
        for (artifact, rec) in &r.files {
            self.compare(&rec.path, &rec.sha256, &rebuilt.path(*artifact));
        }
        let here = match self.tc.compiler_version() {
            Ok(v) => v,
            Err(e) => return self.fault(&manifest, format!("no iree-compile version: {e}")),
        };
        for module in r.modules {
            let (Some(c), Some(sha)) = (module.compiled, module.sha256) else {
                self.not_rebuilt
                    .push(format!("{}: no compile record", module.file));
                continue;
            };
            if c.iree_compile != here {
                self.not_rebuilt.push(format!(
                    "{}: compiled by {:?}, this machine has {here:?}",
                    module.file, c.iree_compile
                ));
                continue;
            }
            let preset = c.target.compile_flags();
            let Some(extra) = c.flags.strip_prefix(preset.as_slice()) else {
                self.not_rebuilt.push(format!(
                    "{}: its flags do not start with this kiln's preset for {}",
                    module.file, c.target
                ));
                continue;
            };
            let mlir = if module.kv {
                Artifact::KvMlir
            } else {
                Artifact::Mlir
            };
            let out = tmp.path().join(&module.file);
            match crate::iree::compile::compile_with(
                self.tc,
                &rebuilt.path(mlir),
                &c.target,
                &out,
                extra,
                Some(&rebuilt.path(Artifact::Irpa)),
                c.pack,
            ) {
                Ok(()) => {
                    self.compare(&module.file, sha, &out);
                    if let (Some(p), Some(psha)) = (&module.packed, module.packed_sha256) {
                        self.compare(p, psha, &crate::iree::pack::packed_archive(&out));
                    }
                }
                Err(e) => self.fault(&module.file, format!("the compile failed again: {e}")),
            }
        }
    }

    /// The rebuilt file at `path` against the recorded `sha256` of `file`.
    fn compare(&mut self, file: &str, sha256: &str, path: &Path) {
        match crate::util::sha256_file(path) {
            Ok(sha) if sha == sha256 => self.rebuilt.push(file.to_string()),
            Ok(sha) => {
                let what = format!(
                    "rebuilt from the recipe it hashes to {sha}, the manifest says {sha256}"
                );
                self.fault(file, what);
            }
            Err(e) => self.fault(file, format!("was not rebuilt: {e}")),
        }
    }
}

/// What a rebuild makes again: the export from `recipe` (the checkpoint at
/// `source`), then `modules`; `files` are the export's files to compare.
struct Rebuild<'m> {
    source: &'m str,
    recipe: &'m ExportRecipe,
    files: Vec<(Artifact<'static>, FileRecord)>,
    modules: &'m [ModuleToCheck<'m>],
}
