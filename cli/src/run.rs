//! `kiln run`: run a compiled module on token ids, print the predicted ids.

use crate::error::Error;
use kiln::export::{Artifact, Layout};
use kiln::iree::{
    run_module, Device, Emulation, HostTensor, IreeError, RunOptions, SessionSpec, TensorData,
    Toolchain,
};
use kiln::manifest::RunManifest;
use kiln::step::SignatureError;
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
    #[arg(long, value_parser = crate::values::device(), default_value_t = Device::LocalTask, value_name = "DEVICE")]
    pub device: Device,
    /// Fix the number of local-task worker groups (default: IREE's detection).
    #[arg(long, value_name = "N", env = "KILN_TASK_GROUPS")]
    pub task_groups: Option<usize>,
    /// Run the runtime under qemu: `arm64` for arm64 modules, `arm32`
    /// (armv7) for arm32 modules.
    #[arg(long, value_parser = crate::values::emulation(), value_name = "ARCH")]
    pub emulate: Option<Emulation>,
    /// Parameter scope (default: `scope` in NAME.json, else `model`).
    #[arg(long, value_name = "SCOPE")]
    pub scope: Option<String>,
    /// Use the IREE venv (or tool directory) at DIR.
    #[arg(long, value_name = "DIR")]
    pub iree_dir: Option<PathBuf>,
    /// Print a JSON report on stdout instead of text (and no status lines).
    #[arg(long)]
    pub json: bool,
}

/// Parses `1,2,3` (spaces allowed) into token ids; an empty item between
/// commas (`1,,2`, a trailing `,`) is an error.
pub fn parse_tokens(s: &str) -> crate::error::Result<Vec<i32>> {
    if s.contains(',') && s.split(',').any(|t| t.trim().is_empty()) {
        return Err(Error::Usage(format!(
            "--tokens: {s:?} has an empty item between commas"
        )));
    }
    let ids: Vec<i32> = s
        .split([',', ' ', '\t', '\n'])
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
        .collect::<crate::error::Result<_>>()?;
    if ids.is_empty() {
        return Err(Error::Usage("--tokens: no token ids given".into()));
    }
    Ok(ids)
}

/// Refuses ids past the vocabulary of the export manifest beside the
/// module (`kiln::generate::check_ids`); a hand-written manifest of run
/// defaults records no vocabulary.
pub fn check_vocab(manifest: &RunManifest, ids: &[i32]) -> crate::error::Result<()> {
    match manifest.vocab_size() {
        Some(n) => Ok(kiln::generate::check_ids(ids, n)?),
        None => Ok(()),
    }
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
    pub manifest: RunManifest,
    /// The module is an export's KV-cache pair (`NAME-kv-<target>.vmfb`,
    /// `NAME-kv-gen.mlir`), not its redecode forward.
    pub kv_module: bool,
}

/// The error for calling a KV-cache module as a redecode forward.
pub fn kv_module_error(module: &Path, verb: &str) -> Error {
    Error::Usage(format!(
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
) -> crate::error::Result<Resolved> {
    if !module.is_file() {
        return Err(Error::io(
            module,
            std::io::Error::new(std::io::ErrorKind::NotFound, "module not found"),
        ));
    }
    let of = Layout::of_module(module);
    let manifest_path = of.manifest();
    let manifest = RunManifest::read(&manifest_path)?;
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
        None => default_params(&of.layout, d.irpa.as_deref())?,
    };
    // Read the file's index with kiln's own reader first: a truncated or
    // corrupt archive is then kiln's error naming the file and what is
    // wrong, not the runtime's (`irpa_parser.c:298: OUT_OF_RANGE …`).
    <dyn kiln::params::ParamSource>::open(&params)?;
    Ok(Resolved {
        seq,
        function,
        scope,
        params,
        manifest: m,
        kv_module: of.kv,
    })
}

/// The parameter file when no `--params` is given: the manifest's
/// `irpa`, else `NAME.irpa`, in the export's folder; it must exist.
fn default_params(export: &Layout, irpa: Option<&str>) -> crate::error::Result<PathBuf> {
    let cand = match irpa {
        Some(f) => export.dir().join(f),
        None => export.path(Artifact::Irpa),
    };
    if !cand.is_file() {
        return Err(Error::Usage(format!(
            "no parameter file given and {} does not exist: pass --params FILE",
            cand.display()
        )));
    }
    Ok(cand)
}

/// Runs `kiln run`.
pub fn run(args: Args) -> crate::error::Result<i32> {
    if args.json {
        super::set_quiet();
    }
    let explicit_function = args.function.is_some();
    let Resolved {
        seq,
        function,
        scope,
        params,
        kv_module,
        manifest,
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
    check_vocab(&manifest, &ids)?;
    if ids.len() > seq {
        return Err(Error::Usage(format!(
            "--tokens has {} ids but the module takes SEQ = {seq}",
            ids.len()
        )));
    }
    ids.resize(seq, 0);
    let task_groups = args.task_groups;
    let opts = RunOptions::default()
        .device(args.device)
        .function(function)
        .params(vec![(scope, params)])
        .task_groups(task_groups)
        .emulate(args.emulate);
    let start = std::time::Instant::now();
    let outs = match args.emulate {
        // On this machine the module runs in-process, through kiln's own
        // runtime: no IREE tool.
        None => run_in_process(&args.module, &opts, &ids, seq)?,
        Some(_) => {
            let tc = Toolchain::locate(args.iree_dir.as_deref())?;
            let input = HostTensor::i32(vec![1, seq], ids)?;
            run_module(&tc, &args.module, &opts, &[input])?
        }
    };
    let elapsed = start.elapsed();
    let ids = predicted_ids(&args.module, &outs, seq)?;
    if args.json {
        super::print_json(&serde_json::json!({
            "module": args.module,
            "function": opts.function,
            "device": opts.device.name(),
            "seq": seq,
            "ids": ids,
            "seconds": elapsed.as_secs_f64(),
        }));
    } else {
        let line: Vec<String> = ids.iter().map(|v| v.to_string()).collect();
        println!("{}", line.join(" "));
    }
    crate::status!(
        "kiln: {} on {} in {:.3} s",
        opts.function,
        opts.device.name(),
        elapsed.as_secs_f64()
    );
    Ok(0)
}

/// One call of `opts.function` on `[1, SEQ]` `ids`, the module loaded
/// in-process over `opts`' archive ([`SessionSpec::open`]); its results as
/// host tensors.
fn run_in_process(
    module: &Path,
    opts: &RunOptions,
    ids: &[i32],
    seq: usize,
) -> crate::error::Result<Vec<HostTensor>> {
    let (scope, params) = opts.params.first().cloned().unwrap_or_default();
    let spec = SessionSpec::new(module, params)
        .scope(scope)
        .device(opts.device)
        .task_groups(opts.task_groups);
    let mut session = spec.open()?;
    let runtime = |e: kiln_runtime::Error| kiln::Error::from(IreeError::from(e));
    let function = session.function(&opts.function).map_err(runtime)?;
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    let input = session
        .tensor(kiln_runtime::ElementType::I32, &[1, seq], &bytes)
        .map_err(runtime)?;
    let outs = session.call(&function, &[&input]).map_err(runtime)?;
    outs.iter()
        .map(|t| {
            let bytes = session.read(t).map_err(runtime)?;
            let data = t
                .element_type()
                .and_then(|e| kiln::graph::DType::from_mlir(e.name()))
                .and_then(|d| TensorData::from_le_bytes(d, &bytes))
                .ok_or_else(|| {
                    IreeError::BadInput(format!(
                        "@{}: a result of an element type kiln does not read",
                        opts.function
                    ))
                })?;
            Ok(HostTensor::new(t.shape(), data)?)
        })
        .collect()
}

/// The ids `module` predicted: its one result, a `tensor<SEQxi32>`.
fn predicted_ids<'o>(
    module: &Path,
    outs: &'o [HostTensor],
    seq: usize,
) -> crate::error::Result<&'o [i32]> {
    let out = match outs {
        [one] => one,
        _ => {
            return Err(SignatureError::ResultCount {
                module: module.to_path_buf(),
                count: outs.len(),
                seq,
            }
            .into())
        }
    };
    match (out.as_i32(), out.shape.as_slice()) {
        (Some(v), [n]) if *n == seq => Ok(v),
        _ => Err(SignatureError::ResultType {
            module: module.to_path_buf(),
            found: out.type_string(),
            seq,
        }
        .into()),
    }
}
