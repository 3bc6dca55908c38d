//! Running `iree-compile`: one target, or several at once.

use super::flags::Target;
use super::toolchain::Toolchain;
use super::{IreeError, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The full `iree-compile` argument list for one compile (without the
/// tool): the module is read from standard input (`-`), so no path of the
/// caller's reaches the module's bytes (iree-compile embeds its input's
/// name in the module's locations; `spec/iree.md`, "Reproducible modules").
pub fn compile_args(target: &Target, out: &Path, extra: &[String]) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = compile_flags(target, extra)
        .into_iter()
        .map(Into::into)
        .collect();
    args.push("-".into());
    args.push("-o".into());
    args.push(out.as_os_str().to_owned());
    args
}

/// Every iree-compile flag of one compile: kiln's preset for `target`,
/// then `extra` (a later flag wins); the input and output aside.
pub fn compile_flags(target: &Target, extra: &[String]) -> Vec<String> {
    let mut flags = target.compile_flags();
    flags.extend(extra.iter().cloned());
    flags
}

/// The flags a module's own text adds to the preset (after it, before the
/// caller's): a CPU module that declares i4 weights (`--weights w4a16`)
/// lets IREE compute at load only what is no larger than its roots
/// ([`super::flags::NO_CONST_EXPR_GROWTH_FLAG`]). Its products scale each
/// block's sums by a broadcast of the block scales, a function of the
/// weights alone: hoisted, the prefill's broadcasts alone held 1.9 GB of
/// SmolLM2's resident memory (248 MB without, the same decode time).
pub fn module_flags(target: &Target, text: &str) -> Vec<String> {
    let i4_weights = text
        .lines()
        .any(|l| l.trim_start().starts_with("util.global") && l.contains("xi4>"));
    match target {
        Target::Vulkan { .. } => Vec::new(),
        _ if i4_weights => vec![super::flags::NO_CONST_EXPR_GROWTH_FLAG.to_string()],
        _ => Vec::new(),
    }
}

/// iree-compile's name for its standard input in diagnostics.
const STDIN_NAME: &str = "<stdin>";

/// Compiles `mlir` for `target` into `out` (a `.vmfb`).
///
/// The Vulkan target name is validated first (iree-compile crashes on
/// unknown names). iree-compile writes into a temporary file beside `out`,
/// renamed into place only on success, so a failed compile leaves no
/// `.vmfb`. On failure the error carries iree-compile's stderr; on success
/// its warnings are forwarded to stderr (in both, the module's path stands
/// where iree-compile names its input).
///
/// The module text goes to iree-compile on standard input, so the same
/// text and flags give the same bytes whatever the file's name, folder or
/// the working directory.
pub fn compile(
    tc: &Toolchain,
    mlir: &Path,
    target: &Target,
    out: &Path,
    extra: &[String],
) -> Result<()> {
    compile_with(tc, mlir, target, out, extra, None, false)
}

/// [`compile`], given the export's parameter archive `archive` (the module
/// reads it under its scope):
/// - every row-chunk slice the module reads is read through the archive's
///   entry over that chunk, where it has one
///   ([`super::pack::read_chunk_entries`]): the module then gives the
///   same bytes whether a runtime maps the archive or reads it (the mapped
///   mode of iree-base-runtime 3.13 reads a slice from its entry's start),
///   and a CPU session maps it;
/// - with `pack` (`kiln compile --pack`, CPU targets), the weights of the
///   matrix products are packed at compile time into
///   [`packed_archive`](super::pack::packed_archive)`(out)`, each distinct
///   packed tensor stored once ([`super::pack`]).
///
/// Without `pack`, a packed archive left beside `out` by an earlier
/// compile is removed, so a module never meets a stale one.
pub(crate) fn compile_with(
    tc: &Toolchain,
    mlir: &Path,
    target: &Target,
    out: &Path,
    extra: &[String],
    archive: Option<&Path>,
    pack: bool,
) -> Result<()> {
    target.validate()?;
    if !mlir.is_file() {
        return Err(io(
            mlir,
            std::io::Error::new(std::io::ErrorKind::NotFound, "MLIR module not found"),
        ));
    }
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    let tmp = tempfile::Builder::new()
        .prefix(".kiln-tmp-")
        .suffix(".vmfb")
        .tempfile_in(&dir)
        .map_err(|e| io(&dir, e))?;
    let text = std::fs::read_to_string(mlir).map_err(|e| io(mlir, e))?;
    let mut text = match target {
        Target::Vulkan { target: name } => lower_for_vulkan(text, mlir, name)?,
        _ => text,
    };
    let packed_out = super::pack::packed_archive(out);
    let pack = pack && !matches!(target, Target::Vulkan { .. });
    if pack && archive.is_none_or(|a| !a.is_file()) {
        let archive = archive.map_or_else(|| mlir.with_extension("irpa"), Path::to_path_buf);
        return Err(io(
            &archive,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the export's parameter archive, which packing at compile time reads, is not there",
            ),
        ));
    }
    // The module's flags, then the packing flags, go before the caller's
    // (a later flag wins).
    let mut flags = module_flags(target, &text);
    let mut export = None;
    // Without packing, only a module that reads a slice is rewritten (and
    // only then parsed).
    let slices = text.contains(crate::stablehlo::SLICE_OPENS);
    if let Some(archive) = archive.filter(|a| a.is_file() && (pack || slices)) {
        let parsed = crate::stablehlo::parse_module_full(&text).map_err(|e| e.with_file(mlir))?;
        let pack_error = |e| IreeError::Pack {
            module: out.to_path_buf(),
            source: Box::new(e),
        };
        let lowering = |source| IreeError::Lowering {
            mlir: mlir.to_path_buf(),
            source,
        };
        let reader = crate::params::irpa::IrpaReader::open(archive).map_err(pack_error)?;
        let has = |k: &str| reader.entry(k).is_some();
        if !pack {
            let chunked = super::pack::read_chunk_entries(&parsed.module, has).map_err(lowering)?;
            if let Some(module) = chunked {
                text = module.print(&parsed.print_options(), None)?;
            }
        } else {
            let scope = parsed.scope.as_deref().unwrap_or("model").to_string();
            let scratch = tempfile::Builder::new()
                .prefix(".kiln-tmp-")
                .tempdir_in(&dir)
                .map_err(|e| io(&dir, e))?;
            let mut archives = vec![archive.to_path_buf()];
            // A tied embedding's products, and the products of a row-chunk
            // slice, read it under a key of their own, imported from a
            // scratch archive of those bytes.
            let split = super::pack::split_products(&parsed.module, has).map_err(lowering)?;
            let module = match split {
                Some((module, keys)) => {
                    if !keys.is_empty() {
                        let extra_archive = scratch.path().join("products.irpa");
                        super::pack::write_split_archive(&reader, &keys, &extra_archive)
                            .map_err(pack_error)?;
                        archives.push(extra_archive);
                    }
                    text = module.print(&parsed.print_options(), None)?;
                    module
                }
                None => parsed.module,
            };
            let keys = super::pack::packable_keys(&module);
            if !keys.is_empty() {
                let path = scratch.path().join("packed.irpa");
                let archives: Vec<&Path> = archives.iter().map(PathBuf::as_path).collect();
                flags.extend(super::flags::pack_flags(&archives, &scope, &keys, &path));
                export = Some((scratch, path));
            }
        }
    }
    flags.extend(extra.iter().cloned());
    let output = run_with_stdin(&tc.compile, compile_args(target, tmp.path(), &flags), &text)?;
    let stderr =
        String::from_utf8_lossy(&output.stderr).replace(STDIN_NAME, &mlir.display().to_string());
    if !output.status.success() {
        let log = super::trim_log(&stderr, 60);
        // `tmp` is dropped here, removing the partial output.
        return Err(IreeError::CompileFailed {
            mlir: mlir.to_path_buf(),
            target: target.to_string(),
            status: super::status_text(&output.status),
            stderr: log,
        });
    }
    let size = std::fs::metadata(tmp.path()).map(|m| m.len()).unwrap_or(0);
    if size == 0 {
        return Err(IreeError::CompileFailed {
            mlir: mlir.to_path_buf(),
            target: target.to_string(),
            status: "empty output".into(),
            stderr: super::trim_log(&stderr, 60),
        });
    }
    // With packing, iree-compile 3.13 warns once per i4 parameter that it
    // cannot import it ("packed types are not yet supported"), whether or
    // not its key was asked for: said once here, as what it means.
    let i4_unimported =
        |l: &str| l.contains("WARNING: not importing parameter") && l.contains("xi4>");
    let mut unimported = 0;
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        if i4_unimported(line) {
            unimported += 1;
            continue;
        }
        eprintln!("iree-compile ({target}): {line}");
    }
    if unimported > 0 {
        eprintln!(
            "iree-compile ({target}): {unimported} i4 weight(s) are packed at load, not at \
             compile time: IREE 3.13 cannot import i4 parameters"
        );
    }
    // The packed archive goes into place before the module that reads it.
    match export {
        Some((_scratch, path)) if path.is_file() => {
            super::pack::share_duplicates(&path, &packed_out).map_err(|e| IreeError::Pack {
                module: out.to_path_buf(),
                source: Box::new(e),
            })?;
        }
        _ => match std::fs::remove_file(&packed_out) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&packed_out, e)),
            _ => {}
        },
    }
    // 0644 like every output, replacing an earlier module without the
    // rename-over flush.
    Ok(crate::util::persist(tmp, out)?)
}

/// [`IreeError::Io`] on `path`.
fn io(path: &Path, source: std::io::Error) -> IreeError {
    IreeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// For a Vulkan compile: the module as the pinned IREE's SPIR-V backend
/// can take it ([`crate::graph::Module::lower_for_vulkan`]: bf16 parameters
/// re-declared as 32-bit words, bf16 function arguments and results (the
/// KV caches of `--kv-dtype bf16`) held as i32 pairs, the two-reduction
/// argmax as one variadic reduce). MLIR outside the subset kiln parses is
/// compiled as it is unless it has bf16 globals or bf16 function
/// arguments or results (the Android baseline profile has no 16-bit
/// storage, and lavapipe returns wrong values for them); a tensor over the
/// device's storage-buffer range is an error
/// ([`super::limits::check_vulkan`]). `mlir` names the file in errors.
fn lower_for_vulkan(text: String, mlir: &Path, target: &str) -> Result<String> {
    super::limits::check_vulkan(&text, mlir, target)?;
    let parsed = match crate::stablehlo::parse_module_full(&text) {
        Ok(p) => p,
        // MLIR kiln did not write (outside the subset kiln parses) goes to
        // iree-compile as it is, unless it has bf16 tensors to lower.
        Err(e) => {
            let bf16 = text.lines().map(str::trim_start).any(|l| {
                (l.starts_with("util.global") || l.starts_with("func.func")) && l.contains("xbf16>")
            });
            if bf16 {
                return Err(e.with_file(mlir).into());
            }
            return Ok(text);
        }
    };
    if let Some((function, key, dtype)) = parsed.module.functions.iter().find_map(|f| {
        f.parameters()
            .find(|d| {
                matches!(
                    d.ty.dtype,
                    crate::graph::DType::I8 | crate::graph::DType::I4
                )
            })
            .map(|d| (f.name.clone(), d.key, d.ty.dtype))
    }) {
        return Err(IreeError::I8Weights {
            mlir: mlir.to_path_buf(),
            dtype,
            function,
            key,
        });
    }
    let lowered = parsed
        .module
        .lower_for_vulkan()
        .map_err(|source| IreeError::Lowering {
            mlir: mlir.to_path_buf(),
            source,
        })?;
    Ok(crate::stablehlo::print_module(
        &lowered,
        &parsed.print_options(),
        None,
    )?)
}

/// Runs `tool` with `args`, writing `input` to its standard input from a
/// second thread (so neither side can block on a full pipe), and collects
/// its exit status and output.
fn run_with_stdin(
    tool: &Path,
    args: Vec<std::ffi::OsString>,
    input: &str,
) -> Result<std::process::Output> {
    let spawn_err = |source| IreeError::Spawn {
        tool: tool.to_path_buf(),
        source,
    };
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_err)?;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    std::thread::scope(|s| {
        // A tool that exits early closes the pipe: its status and stderr
        // say why, so a failed write is not an error of its own.
        s.spawn(move || {
            let _ = std::io::Write::write_all(&mut stdin, input.as_bytes());
        });
        child.wait_with_output().map_err(spawn_err)
    })
}

/// The output path `kiln compile` uses: `out_dir/NAME-<suffix>.vmfb`.
pub(crate) fn output_path(out_dir: &Path, name: &str, target: &Target) -> PathBuf {
    out_dir.join(format!("{name}-{}.vmfb", target.suffix()))
}

/// How [`Toolchain::compile_many`] runs: `default()` and the setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CompileOptions {
    /// At most this many iree-compile processes at once (0 counts as 1).
    pub jobs: usize,
    /// Flags after kiln's preset, before nothing else (a later flag wins).
    pub extra: Vec<String>,
    /// Receives one [`Unit::None`](crate::progress::Unit) step per target,
    /// `compile TARGET`.
    pub progress: Option<crate::progress::SharedProgress>,
    /// The export's parameter archive, which the module reads: the module
    /// reads its row-chunk entries in place of slices (a runtime can then
    /// map it), and [`pack`](Self::pack) packs from it; `None`: the module
    /// as printed.
    pub archive: Option<PathBuf>,
    /// Packs the weights of the CPU targets' matrix products at compile
    /// time from [`archive`](Self::archive) (`kiln compile --pack`,
    /// [`super::pack`]); `false`: packed at load, as IREE does by default.
    pub pack: bool,
}

impl Default for CompileOptions {
    /// One job per core, no extra flags, no progress.
    fn default() -> Self {
        CompileOptions {
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            extra: Vec::new(),
            progress: None,
            archive: None,
            pack: false,
        }
    }
}

impl CompileOptions {
    /// What `kiln compile --low-memory` puts first in [`extra`](Self::extra):
    /// the CPU presets without data tiling on either path (no packed copy
    /// of the weights at load; slower matmuls), and with IREE's default
    /// bound on values computed at load (a `--weights keep` matrix is
    /// widened on every call instead of once).
    pub const NO_DATA_TILING_FLAGS: [&'static str; 3] = super::flags::NO_DATA_TILING_FLAGS;

    /// Sets the most iree-compile processes at once (0 counts as 1).
    pub fn jobs(mut self, jobs: usize) -> Self {
        self.jobs = jobs;
        self
    }

    /// Sets the flags after kiln's preset.
    pub fn extra(mut self, extra: Vec<String>) -> Self {
        self.extra = extra;
        self
    }

    /// Sets the export's parameter archive the module reads (`None`: the
    /// module as printed, reading slices of a chunked table).
    pub fn archive(mut self, archive: impl Into<Option<PathBuf>>) -> Self {
        self.archive = archive.into();
        self
    }

    /// Packs the CPU targets' weights at compile time from
    /// [`archive`](Self::archive) (`false`: at load).
    pub fn pack(mut self, pack: bool) -> Self {
        self.pack = pack;
        self
    }

    /// Sets the progress receiver (`None`: nothing is reported).
    pub fn progress(
        mut self,
        progress: impl Into<Option<crate::progress::SharedProgress>>,
    ) -> Self {
        self.progress = progress.into();
        self
    }
}

impl Toolchain {
    /// Compiles `mlir` with this toolchain for every target, at most
    /// `opts.jobs` at once (threads), into `out_dir/NAME-<suffix>.vmfb`. Every
    /// target is validated before any compile starts; all compiles run to the
    /// end, and the first failure (in `targets` order) is returned. Returns
    /// the outputs in `targets` order.
    pub fn compile_many(
        &self,
        mlir: &Path,
        targets: &[Target],
        out_dir: &Path,
        name: &str,
        opts: &CompileOptions,
    ) -> Result<Vec<PathBuf>> {
        for t in targets {
            t.validate()?;
        }
        let mut seen = std::collections::BTreeSet::new();
        for t in targets {
            if !seen.insert(t.suffix()) {
                return Err(IreeError::DuplicateTarget {
                    path: output_path(out_dir, name, t),
                });
            }
        }
        let outs: Vec<PathBuf> = targets
            .iter()
            .map(|t| output_path(out_dir, name, t))
            .collect();
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<Result<()>>>> =
            Mutex::new((0..targets.len()).map(|_| None).collect());
        let workers = opts.jobs.max(1).min(targets.len().max(1));
        let progress = crate::progress::or_silent(&opts.progress);
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= targets.len() {
                        break;
                    }
                    let label = format!("compile {}", targets[i]);
                    progress.start(&label, 0, crate::progress::Unit::None);
                    let r = compile_with(
                        self,
                        mlir,
                        &targets[i],
                        &outs[i],
                        &opts.extra,
                        opts.archive.as_deref(),
                        opts.pack,
                    );
                    progress.finish(&label, r.is_ok());
                    if let Ok(mut g) = results.lock() {
                        g[i] = Some(r);
                    }
                });
            }
        });
        // A panicking worker re-panics out of the scope above, so every slot
        // is filled here and the lock cannot be poisoned.
        let results = results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for r in results {
            r.expect("every target was compiled")?;
        }
        Ok(outs)
    }
}
