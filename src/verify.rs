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

use crate::export::{export, Artifact, ExportOptions, KvCacheOptions, Layout, Weights};
use crate::graph::{DType, TensorType};
use crate::iree::flags::{Device, Target};
use crate::iree::inspect::{inspect_module, FunctionSignature, ModuleInfo};
use crate::iree::Toolchain;
use crate::manifest::{
    AssetsManifest, CompileInfo, Contract, ExportManifest, ExportRecipe, FileRecord, KvPair,
};
use crate::models::Checkpoint;
use crate::params::irpa::IrpaReader;
use crate::stablehlo::ConstantPolicy;
use crate::util::IoError;
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
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    let mut models = Vec::new();
    for name in names {
        let path = dir.join(&name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let format = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
        let mut check = Check::new(dir, tc, &name);
        if format.starts_with("kiln-android-assets/") {
            match serde_json::from_value::<AssetsManifest>(value) {
                Ok(m) => check.assets(&m, opts),
                Err(e) => check.fault(&name, format!("not a valid assets manifest: {e}")),
            }
            models.push(check.report("assets"));
        } else if value.get("kiln_version").is_some() && !name.ends_with(".manifest.json") {
            match serde_json::from_value::<ExportManifest>(value) {
                Ok(m) => check.export(&m, opts),
                Err(e) => check.fault(&name, format!("not a valid export manifest: {e}")),
            }
            models.push(check.report("export"));
        }
    }
    if models.is_empty() {
        return Err(VerifyError::NoManifest {
            dir: dir.to_path_buf(),
        });
    }
    Ok(VerifyReport {
        dir: dir.to_path_buf(),
        models,
    })
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
}

/// A module to check: its file and what it was compiled from.
struct ModuleToCheck<'m> {
    file: String,
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
        for rec in &m.files {
            self.file(rec);
        }
        let sha = |path: &str| {
            m.files
                .iter()
                .find(|r| r.path == path)
                .map(|r| r.sha256.as_str())
        };
        let mut modules: Vec<ModuleToCheck<'_>> = m
            .modules
            .values()
            .map(|e| ModuleToCheck {
                file: e.path.clone(),
                kv: false,
                vulkan: e.device == Device::Vulkan,
                compiled: e.compiled.as_ref(),
                sha256: sha(&e.path),
                packed: e.packed.clone(),
                packed_sha256: e.packed.as_deref().and_then(sha),
            })
            .collect();
        if let Some(kv) = &m.kv {
            modules.extend(kv.modules.values().map(|e| ModuleToCheck {
                file: e.path.clone(),
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
        let kv = m.kv.as_ref().map(|k| &k.pair);
        self.modules_and_archive(&m.contract, kv, &m.parameters, &modules);
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
    fn export(&mut self, m: &ExportManifest, opts: &VerifyOptions) {
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
                kv: Some(rec.compile.mlir.as_str()) == kv_mlir,
                vulkan: matches!(rec.compile.target, Target::Vulkan { .. }),
                compiled: Some(&rec.compile),
                sha256: Some(rec.sha256.as_str()),
                packed: rec.packed.as_ref().map(|p| p.path.clone()),
                packed_sha256: rec.packed.as_ref().map(|p| p.sha256.as_str()),
            })
            .collect();
        for target in crate::iree::flags::TARGET_NAMES {
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
                    modules.push(ModuleToCheck {
                        packed: self.dir.join(&packed).is_file().then_some(packed),
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
        self.modules_and_archive(&contract, kv, &irpa, &modules);
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
    }

    /// Size and sha256 of one listed file.
    fn file(&mut self, rec: &FileRecord) {
        self.files += 1;
        let path = self.dir.join(&rec.path);
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
            let path = self.dir.join(&module.file);
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
        match IrpaReader::open(self.dir.join(irpa)) {
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

/// Exports the checkpoint at `source` again with `recipe`'s options into
/// `dir`; returns the layout of what it wrote. The error is only shown (a
/// fault's text), so any stage's will do.
fn rebuild_export(
    source: &Path,
    recipe: &ExportRecipe,
    dir: &Path,
) -> Result<Layout, Box<dyn std::error::Error>> {
    let ckpt = Checkpoint::open(source)?;
    let opts = export_options(recipe, dir)?;
    export(&ckpt, &opts)?;
    Ok(Layout::new(dir, &recipe.name))
}

/// The export options a recipe records, writing into `dir`.
fn export_options(recipe: &ExportRecipe, dir: &Path) -> Result<ExportOptions, VerifyError> {
    let bad = |what: String| VerifyError::Recipe { what };
    let weights = |s: &str| -> Result<Weights, VerifyError> {
        s.parse().map_err(|_| bad(format!("weights form {s:?}")))
    };
    let mut weights_for = Vec::new();
    for w in &recipe.weights_for {
        let (pattern, form) = w
            .rsplit_once('=')
            .ok_or_else(|| bad(format!("weights exception {w:?}")))?;
        weights_for.push((pattern.to_string(), weights(form)?));
    }
    let scope = recipe.scope.clone();
    let constants = match recipe.constants.as_str() {
        "external" => ConstantPolicy::ExternalAlways { scope },
        "inline" => ConstantPolicy::InlineAlways,
        other => match other.strip_prefix("threshold=").map(str::parse) {
            Some(Ok(bytes)) => ConstantPolicy::SizeThreshold { bytes, scope },
            _ => return Err(bad(format!("constant policy {other:?}"))),
        },
    };
    let kv = match &recipe.kv {
        None => None,
        Some(kv) => {
            let dtype = DType::from_mlir(&kv.cache_dtype)
                .ok_or_else(|| bad(format!("cache dtype {:?}", kv.cache_dtype)))?;
            let mut o = KvCacheOptions::default()
                .prompt_len(kv.prompt_len)
                .max_context(kv.max_context)
                .cache_dtype(dtype)
                .spans(kv.spans.clone());
            o.top_k = kv.top_k;
            Some(o)
        }
    };
    Ok(ExportOptions::new(recipe.seq, dir)
        .name(recipe.name.clone())
        .function(recipe.function.clone())
        .weights(weights(&recipe.weights)?)
        .weights_for(weights_for)
        .constants(constants)
        .kv(kv)
        .max_tensor_bytes(recipe.max_tensor_bytes))
}

/// The KV pair's functions as IREE declares them: prefill `(tokens
/// [1, P] i32, start, length, K…, V…) -> (next, K…, V… [, values, ids])`
/// and decode `(token [1] i32, position, K…, V…) -> (the same)`, then
/// each attention span's prefill and decode with the same signatures. In
/// a module for Vulkan (`vulkan`), bf16 caches are i32 words of two.
fn kv_signatures(pair: &KvPair, vulkan: bool) -> Result<Vec<FunctionSignature>, String> {
    let cache = pair.cache_type().map_err(|e| e.to_string())?;
    let cache = match vulkan {
        true => cache
            .lowered_for_vulkan()
            .ok_or_else(|| format!("KV caches {cache} with an odd head dim have no Vulkan form"))?,
        false => cache,
    }
    .to_string();
    let i32s = |shape: &[usize]| TensorType::new(DType::I32, shape).to_string();
    let caches = vec![cache; 2 * pair.cache_count];
    let mut outputs = vec![i32s(&[])];
    outputs.extend(caches.iter().cloned());
    if let Some(k) = pair.top_k {
        outputs.push(TensorType::new(DType::F32, &[k]).to_string());
        outputs.push(i32s(&[k]));
    }
    let mut prefill = vec![i32s(&[1, pair.prompt_len]), i32s(&[]), i32s(&[])];
    prefill.extend(caches.iter().cloned());
    let mut decode = vec![i32s(&[1]), i32s(&[])];
    decode.extend(caches);
    let mut pairs = vec![(pair.prefill.as_str(), pair.decode.as_str())];
    pairs.extend(
        pair.spans
            .iter()
            .map(|s| (s.prefill.as_str(), s.decode.as_str())),
    );
    Ok(pairs
        .into_iter()
        .flat_map(|(p, d)| {
            [
                FunctionSignature::new(p, prefill.clone(), outputs.clone()),
                FunctionSignature::new(d, decode.clone(), outputs.clone()),
            ]
        })
        .collect())
}

/// `(T, …) -> (T, …)`.
fn signature_text(f: &FunctionSignature) -> String {
    format!("({}) -> ({})", f.inputs.join(", "), f.outputs.join(", "))
}
