//! `kiln run`: run a compiled module on token ids, print the predicted ids.

use kiln::iree::flags::Device;
use kiln::iree::run::{run_module, Emulation, HostTensor, RunOptions};
use kiln::iree::Toolchain;
use kiln::{export, Error};
use std::path::{Path, PathBuf};

/// Arguments of `kiln run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The compiled module (`NAME-<target>.vmfb`).
    pub module: PathBuf,
    /// Parameter file (.irpa, .safetensors or .gguf) opened under the scope
    /// (default: the manifest's `irpa`, else NAME.irpa beside the module).
    #[arg(long, short = 'p', value_name = "FILE")]
    pub params: Option<PathBuf>,
    /// Token ids, comma-separated (padded with 0 up to SEQ).
    #[arg(long, value_name = "IDS", required = true, allow_hyphen_values = true)]
    pub tokens: String,
    /// Sequence length SEQ (default: `seq` in NAME.json beside the module).
    #[arg(long, value_name = "N")]
    pub seq: Option<usize>,
    /// Function to call (default: `function` in NAME.json).
    #[arg(long, value_name = "NAME")]
    pub function: Option<String>,
    /// Runtime device.
    #[arg(long, value_enum, default_value_t = Device::LocalTask, value_name = "DEVICE")]
    pub device: Device,
    /// Fix the number of local-task worker groups (default: IREE's detection).
    #[arg(long, value_name = "N", env = "KILN_TASK_GROUPS")]
    pub task_groups: Option<usize>,
    /// Run the aarch64 runtime under qemu (`arm64`), for arm64 modules.
    #[arg(long, value_enum, value_name = "ARCH")]
    pub emulate: Option<Emulation>,
    /// Parameter scope (default: `scope` in NAME.json, else `model`).
    #[arg(long, value_name = "SCOPE")]
    pub scope: Option<String>,
    /// Use the IREE venv (or tool directory) at DIR.
    #[arg(long, value_name = "DIR")]
    pub iree_dir: Option<PathBuf>,
}

/// `NAME.json` beside a module, as `kiln run` and `kiln generate` read it.
///
/// Normally it is the manifest `kiln export` wrote, read as
/// [`export::Manifest`] (the one declaration of its fields). `kiln run`
/// also runs modules compiled from MLIR that `kiln export` did not write
/// (spec/iree.md; the hand-written tiny module of the IREE tests); their
/// `NAME.json` only supplies run defaults: `seq`, `function`, `scope` and
/// `irpa` ([`RunDefaults`]). A file with a `kiln_version` key is taken as
/// an export manifest and must read as one, so a damaged export manifest
/// is an error rather than a silent loss of its EOS ids and source.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Manifest {
    /// SEQ, function, scope and parameter archive (from either form).
    pub defaults: RunDefaults,
    /// The export manifest, when `NAME.json` is one.
    pub export: Option<export::Manifest>,
}

/// The keys `kiln run` takes its defaults from.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
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

impl From<&export::Manifest> for RunDefaults {
    fn from(m: &export::Manifest) -> Self {
        RunDefaults {
            seq: Some(m.seq),
            function: Some(m.function.clone()),
            scope: Some(m.scope.clone()),
            irpa: m.files.get("irpa").map(|f| f.path.clone()),
        }
    }
}

impl Manifest {
    /// The end-of-sequence ids of an export manifest (none otherwise).
    pub fn eos(&self) -> Vec<i32> {
        self.export
            .as_ref()
            .map(|m| m.eos_token_ids.iter().map(|&x| x as i32).collect())
            .unwrap_or_default()
    }

    /// The end-of-sequence ids of the manifest and of `tokenizer`, each once.
    pub fn eos_with(&self, tokenizer: Option<&kiln::tokenizer::Tokenizer>) -> Vec<i32> {
        let mut eos = self.eos();
        if let Some(e) = tokenizer.and_then(kiln::tokenizer::Tokenizer::eos) {
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
    pub fn kv_pair(&self) -> Option<export::KvPair> {
        self.export.as_ref()?.kv.as_ref().map(|k| k.pair.clone())
    }
}

/// Strips a `-host`/`-arm64`/`-arm32`/`-vulkan` suffix from a vmfb stem.
pub fn model_name(vmfb: &Path) -> String {
    let stem = vmfb
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    for t in kiln::iree::flags::TARGET_NAMES {
        if let Some(n) = stem.strip_suffix(&format!("-{t}")) {
            return n.to_string();
        }
    }
    stem
}

/// Reads `NAME.json` beside the module; `Ok(None)` when there is none.
///
/// A manifest written by `kiln export` (it has `kiln_version`) is read as
/// [`export::Manifest`]; any other JSON object as hand-written
/// [`RunDefaults`] (see [`Manifest`]).
pub fn read_manifest(path: &Path) -> kiln::Result<Option<Manifest>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::Module(format!("{}: not valid JSON: {e}", path.display())))?;
    let bad = |k: &str, want: &str| {
        Error::Module(format!("{}: key \"{k}\" must be {want}", path.display()))
    };
    if v.get("kiln_version").is_some() {
        let m: export::Manifest = serde_json::from_value(v).map_err(|e| {
            Error::Module(format!(
                "{}: not a kiln export manifest (NAME.json written by `kiln export`): {e}",
                path.display()
            ))
        })?;
        if m.seq == 0 {
            return Err(bad("seq", "a positive integer"));
        }
        return Ok(Some(Manifest {
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
    let string = |k: &str| -> kiln::Result<Option<String>> {
        match v.get(k) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(s) => Ok(Some(
                s.as_str().ok_or_else(|| bad(k, "a string"))?.to_string(),
            )),
        }
    };
    Ok(Some(Manifest {
        defaults: RunDefaults {
            seq,
            function: string("function")?,
            scope: string("scope")?,
            irpa: string("irpa")?,
        },
        export: None,
    }))
}

/// Parses `1,2,3` (spaces allowed) into token ids.
pub fn parse_tokens(s: &str) -> kiln::Result<Vec<i32>> {
    let ids: Vec<i32> = s
        .split([',', ' '])
        .filter(|t| !t.trim().is_empty())
        .map(|t| {
            t.trim()
                .parse::<i32>()
                .ok()
                .filter(|&v| v >= 0)
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "--tokens: '{t}' is not a token id (non-negative integer)"
                    ))
                })
        })
        .collect::<kiln::Result<_>>()?;
    if ids.is_empty() {
        return Err(Error::Usage("--tokens: no token ids given".into()));
    }
    Ok(ids)
}

/// A module with everything needed to call it, resolved from flags and
/// the manifest beside it.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// SEQ.
    pub seq: usize,
    /// Function to call.
    pub function: String,
    /// Parameter scope.
    pub scope: String,
    /// Parameter file.
    pub params: PathBuf,
    /// The manifest, when there is one.
    pub manifest: Manifest,
    /// The module is an export's KV-cache pair (`NAME-kv-<target>.vmfb`,
    /// `NAME-kv-gen.mlir`), not its redecode forward.
    pub kv_module: bool,
}

/// The error for calling a KV-cache module as a redecode forward.
pub fn kv_module_error(module: &Path, verb: &str) -> Error {
    Error::Module(format!(
        "{} is a KV-cache module (a prefill and a decode function, not the SEQ-token forward `kiln {verb}` calls): generate with `kiln generate {} --kv-cache`, or {verb} the redecode module",
        module.display(),
        module.display()
    ))
}

/// Resolves SEQ, function, scope and parameter file of `module`: flags
/// first, then `NAME.json` beside the module.
pub fn resolve(
    module: &Path,
    seq: Option<usize>,
    function: Option<String>,
    scope: Option<String>,
    params: Option<PathBuf>,
) -> kiln::Result<Resolved> {
    if !module.is_file() {
        return Err(Error::io(
            module,
            std::io::Error::new(std::io::ErrorKind::NotFound, "module not found"),
        ));
    }
    let dir = match module.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut name = model_name(module);
    if module.extension().is_some_and(|e| e == "mlir") {
        name = name.strip_suffix("-gen").unwrap_or(&name).to_string();
    }
    // A KV-cache module (`NAME-kv-<target>.vmfb`, `NAME-kv-gen.mlir`)
    // shares its export's `NAME.json`.
    let mut kv_module = false;
    if let Some(base) = name.strip_suffix("-kv") {
        if !dir.join(format!("{name}.json")).is_file() {
            name = base.to_string();
            kv_module = true;
        }
    }
    let manifest_path = dir.join(format!("{name}.json"));
    let manifest = read_manifest(&manifest_path)?;
    let m = manifest.clone().unwrap_or_default();
    let missing = |what: &str, flag: &str| {
        Error::Usage(if manifest.is_some() {
            format!("{} has no \"{what}\": pass {flag}", manifest_path.display())
        } else {
            format!(
                "no manifest {} beside the module: pass {flag}",
                manifest_path.display()
            )
        })
    };
    let d = &m.defaults;
    let seq = seq.or(d.seq).ok_or_else(|| missing("seq", "--seq N"))?;
    if seq == 0 {
        return Err(Error::Usage("--seq must be at least 1".into()));
    }
    let function = function
        .or(d.function.clone())
        .ok_or_else(|| missing("function", "--function NAME"))?;
    let scope = scope.or(d.scope.clone()).unwrap_or_else(|| "model".into());
    let params = match params {
        Some(p) => p,
        None => {
            let cand = match &d.irpa {
                Some(f) => dir.join(f),
                None => dir.join(format!("{name}.irpa")),
            };
            if !cand.is_file() {
                return Err(Error::Usage(format!(
                    "no parameter file given and {} does not exist: pass --params FILE",
                    cand.display()
                )));
            }
            cand
        }
    };
    // Read the file's index with kiln's own reader first: a truncated or
    // corrupt archive is then kiln's error naming the file and what is
    // wrong, not the runtime's (`irpa_parser.c:298: OUT_OF_RANGE …`).
    kiln::params::open_any(&params)?;
    Ok(Resolved {
        seq,
        function,
        scope,
        params,
        manifest: m,
        kv_module,
    })
}

/// Runs `kiln run`.
pub fn run(args: Args) -> kiln::Result<i32> {
    let explicit_function = args.function.is_some();
    let Resolved {
        seq,
        function,
        scope,
        params,
        kv_module,
        ..
    } = resolve(
        &args.module,
        args.seq,
        args.function,
        args.scope,
        args.params,
    )?;
    if kv_module && !explicit_function {
        return Err(kv_module_error(&args.module, "run"));
    }
    let mut ids = parse_tokens(&args.tokens)?;
    if ids.len() > seq {
        return Err(Error::Usage(format!(
            "--tokens has {} ids but the module takes SEQ = {seq}",
            ids.len()
        )));
    }
    ids.resize(seq, 0);
    let task_groups = args.task_groups;
    let opts = RunOptions {
        device: args.device,
        function,
        params: vec![(scope, params)],
        task_groups,
        emulate: args.emulate,
        exact_outputs: None,
    };
    let tc = Toolchain::locate(args.iree_dir.as_deref())?;
    let input = HostTensor::i32(vec![1, seq], ids)?;
    let start = std::time::Instant::now();
    let outs = run_module(&tc, &args.module, &opts, &[input])?;
    let elapsed = start.elapsed();
    let out = match outs.as_slice() {
        [one] => one,
        _ => {
            return Err(Error::Module(format!(
                "{} returned {} results; kiln run expects one tensor<{seq}xi32>",
                args.module.display(),
                outs.len()
            )))
        }
    };
    let ids = match (out.as_i32(), out.shape.as_slice()) {
        (Some(v), [n]) if *n == seq => v,
        _ => {
            return Err(Error::Module(format!(
                "{} returned tensor<{}>, expected tensor<{seq}xi32>",
                args.module.display(),
                out.type_string()
            )))
        }
    };
    let line: Vec<String> = ids.iter().map(|v| v.to_string()).collect();
    println!("{}", line.join(" "));
    eprintln!(
        "kiln: {} on {} in {:.3} s",
        opts.function,
        opts.device.name(),
        elapsed.as_secs_f64()
    );
    Ok(0)
}
