//! iree-compile once per module for the whole test binary.
//!
//! Several files compile the same module: an HF fixture and the GGUF file
//! written from it export the same MLIR, and the same SmolLM2 export is
//! compiled for the host by more than one test. [`compile`] and
//! [`compile_many`] call kiln's own functions, keyed by the module's text,
//! the target and the extra flags; a second request for the same key gets a
//! copy of the first module. The cache is this process's folder under
//! cargo's test scratch directory (`target/tmp`), so every run compiles
//! everything once; the next run removes it.

use kiln::iree::{CompileOptions, Target, Toolchain};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

type Slot = Arc<Mutex<Option<PathBuf>>>;

/// This process's cache directory, `compiled-modules-<pid>` in cargo's
/// test scratch directory; made on first use, when the folders of test
/// processes that have ended are removed.
fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let proc = Path::new("/proc/self").exists(); // else: no way to tell, keep all
        for e in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("compiled-modules-") {
                if proc && !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let d = tmp.join(format!("compiled-modules-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

/// A hash of the module's text, read once per request.
fn module_hash(mlir: &Path) -> u64 {
    let mut h = DefaultHasher::new();
    std::fs::read(mlir)
        .unwrap_or_else(|e| panic!("{}: {e}", mlir.display()))
        .hash(&mut h);
    h.finish()
}

/// The key of (module, target, flags) and its slot (the cached vmfb once
/// compiled).
fn slot(module: u64, target: &Target, extra: &[String]) -> (u64, Slot) {
    let mut h = DefaultHasher::new();
    module.hash(&mut h);
    format!("{target:?}").hash(&mut h);
    extra.hash(&mut h);
    let key = h.finish();
    static SLOTS: OnceLock<Mutex<HashMap<u64, Slot>>> = OnceLock::new();
    let slots = SLOTS.get_or_init(Default::default);
    let s = slots.lock().unwrap().entry(key).or_default().clone();
    (key, s)
}

/// With `KILN_TEST_COMPILE_LOG=FILE`, appends one line per request:
/// `compiled` (with its seconds) or `reused`, the targets, the module file
/// and the test.
fn log(what: &str, targets: &str, mlir: &Path, secs: Option<f64>) {
    if let Ok(p) = std::env::var("KILN_TEST_COMPILE_LOG") {
        let secs = secs.map_or(String::new(), |s| format!("{s:.1}s"));
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let line = format!("{what}\t{targets}\t{}\t{secs}\t{test}", mlir.display());
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }
}

fn place(cached: &Path, out: &Path) {
    if let Some(p) = out.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::copy(cached, out)
        .unwrap_or_else(|e| panic!("{} -> {}: {e}", cached.display(), out.display()));
}

/// [`kiln::iree::compile`], once per module text, target and flags.
pub fn compile(
    tc: &Toolchain,
    mlir: &Path,
    target: &Target,
    out: &Path,
    extra: &[String],
) -> kiln::Result<()> {
    let (key, s) = slot(module_hash(mlir), target, extra);
    let mut got = s.lock().unwrap();
    if got.is_none() {
        let cached = dir().join(format!("{key:016x}.vmfb"));
        let t0 = std::time::Instant::now();
        kiln::iree::compile(tc, mlir, target, &cached, extra)?;
        log(
            "compiled",
            target.suffix(),
            mlir,
            Some(t0.elapsed().as_secs_f64()),
        );
        *got = Some(cached);
    } else {
        log("reused", target.suffix(), mlir, None);
    }
    place(got.as_ref().unwrap(), out);
    Ok(())
}

/// [`kiln::iree::Toolchain::compile_many`] (`NAME-<target>.vmfb` in `out_dir`),
/// compiling only the targets not compiled before, `jobs` at a time.
pub fn compile_many(
    tc: &Toolchain,
    mlir: &Path,
    targets: &[Target],
    out_dir: &Path,
    name: &str,
    jobs: usize,
) -> kiln::Result<Vec<PathBuf>> {
    let module = module_hash(mlir);
    let keyed: Vec<(u64, Slot, &Target)> = targets
        .iter()
        .map(|t| {
            let (k, s) = slot(module, t, &[]);
            (k, s, t)
        })
        .collect();
    // Locks in key order, so two callers never wait on each other in a cycle.
    let mut order: Vec<usize> = (0..keyed.len()).collect();
    order.sort_by_key(|&i| keyed[i].0);
    let mut guards: Vec<_> = order
        .iter()
        .map(|&i| (i, keyed[i].1.lock().unwrap()))
        .collect();
    guards.sort_by_key(|g| g.0);
    let missing: Vec<Target> = guards
        .iter()
        .filter(|g| g.1.is_none())
        .map(|g| keyed[g.0].2.clone())
        .collect();
    if !missing.is_empty() {
        let scratch = tempfile::tempdir_in(dir()).unwrap();
        let t0 = std::time::Instant::now();
        let outs = tc.compile_many(
            mlir,
            &missing,
            scratch.path(),
            name,
            &CompileOptions::default().jobs(jobs),
        )?;
        let names: Vec<&str> = missing.iter().map(Target::suffix).collect();
        log(
            "compiled",
            &names.join(","),
            mlir,
            Some(t0.elapsed().as_secs_f64()),
        );
        let mut made = outs.into_iter();
        for g in guards.iter_mut().filter(|g| g.1.is_none()) {
            let cached = dir().join(format!("{:016x}.vmfb", keyed[g.0].0));
            std::fs::rename(made.next().unwrap(), &cached).unwrap();
            *g.1 = Some(cached);
        }
    }
    let reused: Vec<&str> = guards
        .iter()
        .filter(|g| !missing.contains(keyed[g.0].2))
        .map(|g| keyed[g.0].2.suffix())
        .collect();
    if !reused.is_empty() {
        log("reused", &reused.join(","), mlir, None);
    }
    let outs: Vec<PathBuf> = targets
        .iter()
        .map(|t| kiln::export::Layout::new(out_dir, name).path(kiln::export::Artifact::Module(t)))
        .collect();
    for (g, out) in guards.iter().zip(&outs) {
        place(g.1.as_ref().unwrap(), out);
    }
    Ok(outs)
}

/// Whether a compiled module widens a `shape` (`"1536x576"`) matrix of
/// block-quantized words at load: an initializer dispatch, which IREE
/// names `…_initializer_N_dispatch_0_generic_<shape>_i32x…` after its op,
/// shape and operand types (the module holds its executables' names).
pub fn widens_at_load(vmfb: &Path, shape: &str) -> bool {
    let bytes = std::fs::read(vmfb).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let op = format!("_generic_{shape}_i32x");
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| w.contains("_initializer_") && w.contains(&op))
}
