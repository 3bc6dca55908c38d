//! Where an export's files live, in both directions: a model's name and
//! folder give the path of every file `kiln export`, `kiln compile` and
//! `kiln package` write for it ([`Layout`], [`Artifact`]), and a module's
//! path gives the export it belongs to ([`ModuleFile`]).
//!
//! ```text
//! NAME-gen.mlir  NAME-kv-gen.mlir  NAME.safetensors  NAME.irpa  NAME.json   kiln export
//! NAME-<target>.vmfb  NAME-kv-<target>.vmfb                                 kiln compile
//! NAME.manifest.json  NAME.irpa  NAME-<key>.vmfb  NAME-kv-<key>.vmfb
//! NAME.tokenizer.json  NAME.tokenizer_config.json                           kiln package
//! ```

use crate::iree::flags::{Target, TARGET_NAMES};
use std::path::{Path, PathBuf};

/// The infix of the KV-cache pair's files: `NAME-kv-gen.mlir`,
/// `NAME-kv-<target>.vmfb`.
const KV: &str = "-kv";

/// One file of an export, of its compiled modules or of its packaged
/// assets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact<'a> {
    /// `NAME-gen.mlir`: the forward module.
    Mlir,
    /// `NAME-kv-gen.mlir`: the KV-cache pair (`kiln export --kv-cache`).
    KvMlir,
    /// `NAME.safetensors`: the weights.
    Safetensors,
    /// `NAME.irpa`: the weights as an IREE parameter archive (the same
    /// name in the assets).
    Irpa,
    /// `NAME.json`: the export manifest.
    Manifest,
    /// `NAME-<target>.vmfb`: the forward module as `kiln compile` names
    /// it for a target.
    Module(&'a Target),
    /// `NAME-kv-<target>.vmfb`: the KV-cache pair compiled for a target.
    KvModule(&'a Target),
    /// `NAME-<key>.vmfb`: a packaged module, by its key in the assets
    /// (`arm64-v8a`, `armeabi-v7a`, `vulkan`, `host`).
    AssetModule(&'a str),
    /// `NAME-kv-<key>.vmfb`: a packaged KV-cache module.
    AssetKvModule(&'a str),
    /// `NAME.tokenizer.json`: the packaged HF tokenizer.
    Tokenizer,
    /// `NAME.tokenizer_config.json`: its config (special tokens, chat
    /// template).
    TokenizerConfig,
    /// `NAME.chat_template.jinja`: a chat template beside
    /// `NAME.tokenizer.json`, which `kiln package` folds into the config.
    ChatTemplate,
    /// `NAME.manifest.json`: the assets manifest (`kiln package`).
    AssetsManifest,
}

/// The files of one model in one folder: an export's output directory,
/// or an assets directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    dir: PathBuf,
    name: String,
}

impl Layout {
    /// The files of model `name` (a plain file name) in `dir`.
    pub fn new(dir: impl Into<PathBuf>, name: impl Into<String>) -> Layout {
        Layout {
            dir: dir.into(),
            name: name.into(),
        }
    }

    /// The model's name, the prefix of every file.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The same model's files in another folder (an export's, packaged).
    pub fn in_dir(&self, dir: impl Into<PathBuf>) -> Layout {
        Layout::new(dir, self.name.clone())
    }

    /// The file name of `artifact`.
    pub fn file(&self, artifact: Artifact<'_>) -> String {
        let name = &self.name;
        match artifact {
            Artifact::Mlir | Artifact::KvMlir => {
                format!("{}-gen.mlir", self.stem(artifact == Artifact::KvMlir))
            }
            Artifact::Safetensors => format!("{name}.safetensors"),
            Artifact::Irpa => format!("{name}.irpa"),
            Artifact::Manifest => format!("{name}.json"),
            Artifact::Module(_) | Artifact::KvModule(_) => self
                .path(artifact)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Artifact::AssetModule(key) => format!("{name}-{key}.vmfb"),
            Artifact::AssetKvModule(key) => format!("{}-{key}.vmfb", self.stem(true)),
            Artifact::Tokenizer => format!("{name}.tokenizer.json"),
            Artifact::TokenizerConfig => format!("{name}.tokenizer_config.json"),
            Artifact::ChatTemplate => format!("{name}.chat_template.jinja"),
            Artifact::AssetsManifest => format!("{name}.manifest.json"),
        }
    }

    /// The path of `artifact` in the folder.
    pub fn path(&self, artifact: Artifact<'_>) -> PathBuf {
        match artifact {
            // The compiled modules are named as `kiln compile` names them.
            Artifact::Module(t) => crate::iree::compile::output_path(&self.dir, &self.name, t),
            Artifact::KvModule(t) => {
                crate::iree::compile::output_path(&self.dir, &self.stem(true), t)
            }
            _ => self.dir.join(self.file(artifact)),
        }
    }

    /// `NAME`, or `NAME-kv` for the KV-cache pair's files.
    fn stem(&self, kv: bool) -> String {
        match kv {
            true => format!("{}{KV}", self.name),
            false => self.name.clone(),
        }
    }

    /// The model whose packaged tokenizer `json` is (`NAME.tokenizer.json`,
    /// [`Artifact::Tokenizer`]), in its folder; `None` for another name
    /// (an HF folder's own `tokenizer.json`).
    pub fn of_tokenizer(json: &Path) -> Option<Layout> {
        let name = json
            .file_name()?
            .to_str()?
            .strip_suffix(".tokenizer.json")?;
        Some(Layout::new(json.parent().unwrap_or(Path::new(".")), name))
    }

    /// The stem `kiln compile` names the modules compiled from `mlir` by
    /// (`STEM-<target>.vmfb`): its file name without the extension and a
    /// `-gen` (`NAME-gen.mlir` → `NAME`, `NAME-kv-gen.mlir` → `NAME-kv`, the
    /// names [`Artifact::Module`] and [`Artifact::KvModule`] read back);
    /// `None` when the path has no file name.
    pub fn compiled_stem(mlir: &Path) -> Option<String> {
        let stem = mlir
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .filter(|s| !s.is_empty())?;
        Some(stem.strip_suffix("-gen").unwrap_or(&stem).to_string())
    }

    /// What the path of a module (`NAME-<target>.vmfb`, `NAME-gen.mlir`,
    /// or either of the KV-cache pair) says about the export it belongs to.
    pub fn of_module(module: &Path) -> ModuleFile {
        let dir = parent_dir(module);
        let stem = module
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let target = TARGET_NAMES.iter().find_map(|t| {
            let name = stem.strip_suffix(t)?.strip_suffix('-')?;
            Some((name.to_string(), Target::parse(t).ok()?))
        });
        let (mut name, target) = match target {
            Some((name, t)) => (name, Some(t)),
            None => (stem, None),
        };
        if module.extension().is_some_and(|e| e == "mlir") {
            name = name.strip_suffix("-gen").unwrap_or(&name).to_string();
        }
        // A KV-cache module shares its export's `NAME.json`, unless an
        // export is itself named `NAME-kv`.
        let mut kv = false;
        if let Some(base) = name.strip_suffix(KV) {
            if !Layout::new(&dir, &name).path(Artifact::Manifest).is_file() {
                name = base.to_string();
                kv = true;
            }
        }
        ModuleFile {
            layout: Layout::new(dir, name),
            kv,
            target,
        }
    }
}

/// The folder of `path`: its parent, `.` for a bare file name.
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// What a module's path says about the export it belongs to
/// ([`Layout::of_module`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModuleFile {
    /// The export: the module's folder and the model's name.
    pub layout: Layout,
    /// The module is the export's KV-cache pair (`NAME-kv-gen.mlir`,
    /// `NAME-kv-<target>.vmfb`), not its forward module.
    pub kv: bool,
    /// The target the file name ends in (`-host`, `-arm64`, `-arm32`,
    /// `-vulkan`: the default Vulkan target, as the name does not say
    /// which).
    pub target: Option<Target>,
}

impl ModuleFile {
    /// The export's manifest, `NAME.json` beside the module.
    pub fn manifest(&self) -> PathBuf {
        self.layout.path(Artifact::Manifest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file name, and the module names read back.
    #[test]
    fn names_every_file_and_reads_modules_back() {
        let l = Layout::new("out", "m");
        let files = [
            (Artifact::Mlir, "m-gen.mlir"),
            (Artifact::KvMlir, "m-kv-gen.mlir"),
            (Artifact::Safetensors, "m.safetensors"),
            (Artifact::Irpa, "m.irpa"),
            (Artifact::Manifest, "m.json"),
            (Artifact::Module(&Target::Arm64), "m-arm64.vmfb"),
            (Artifact::KvModule(&Target::Host), "m-kv-host.vmfb"),
            (Artifact::AssetModule("armeabi-v7a"), "m-armeabi-v7a.vmfb"),
            (Artifact::AssetKvModule("vulkan"), "m-kv-vulkan.vmfb"),
            (Artifact::Tokenizer, "m.tokenizer.json"),
            (Artifact::TokenizerConfig, "m.tokenizer_config.json"),
            (Artifact::ChatTemplate, "m.chat_template.jinja"),
            (Artifact::AssetsManifest, "m.manifest.json"),
        ];
        for (a, f) in files {
            assert_eq!(l.file(a), f);
            assert_eq!(l.path(a), Path::new("out").join(f));
        }
        let vulkan = Target::parse("vulkan").unwrap();
        for (path, kv, target) in [
            ("out/m-gen.mlir", false, None),
            ("out/m-kv-gen.mlir", true, None),
            ("out/m-arm64.vmfb", false, Some(Target::Arm64)),
            ("out/m-kv-vulkan.vmfb", true, Some(vulkan)),
        ] {
            let m = Layout::of_module(Path::new(path));
            assert_eq!((&m.layout, m.kv, &m.target), (&l, kv, &target), "{path}");
            assert_eq!(m.manifest(), Path::new("out/m.json"));
        }
        let bare = Layout::of_module(Path::new("m-host.vmfb"));
        assert_eq!(bare.layout, Layout::new(".", "m"));
        assert_eq!(
            Layout::of_tokenizer(Path::new("a/m.tokenizer.json")),
            Some(Layout::new("a", "m"))
        );
        assert_eq!(Layout::of_tokenizer(Path::new("a/tokenizer.json")), None);
        assert_eq!(
            Layout::compiled_stem(Path::new("d/m-kv-gen.mlir")).as_deref(),
            Some("m-kv")
        );
        assert_eq!(
            Layout::compiled_stem(Path::new("d/x.mlir")).as_deref(),
            Some("x")
        );
    }
}
