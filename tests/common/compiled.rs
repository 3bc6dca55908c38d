//! iree-compile once per module for the whole test binary.
//!
//! Several files compile the same module: an HF fixture and the GGUF file
//! written from it export the same MLIR, and the same SmolLM2 export is
//! compiled for the host by more than one test. [`compile`] and
//! [`compile_many`] call kiln's own functions, keyed by the module's text,
//! the target and the extra flags; a second request for the same key gets a
//! copy of the first module. The cache lives under cargo's test scratch
//! directory and is emptied when the binary first uses it, so every run
//! compiles everything once and nothing outlives a run's worth of use.

use kiln::iree::compile::CompileOptions;
use kiln::iree::{Target, Toolchain};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

type Slot = Arc<Mutex<Option<PathBuf>>>;

/// The cache directory (emptied on first use by this process).
fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compiled-modules");
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

/// The slot of one (module text, target, flags) key, and its file name.
fn slot(mlir: &Path, target: &Target, extra: &[String]) -> (u64, Slot) {
    let mut h = DefaultHasher::new();
    std::fs::read(mlir)
        .unwrap_or_else(|e| panic!("{}: {e}", mlir.display()))
        .hash(&mut h);
    format!("{target:?}").hash(&mut h);
    extra.hash(&mut h);
    let key = h.finish();
    static SLOTS: OnceLock<Mutex<HashMap<u64, Slot>>> = OnceLock::new();
    let slots = SLOTS.get_or_init(Default::default);
    let s = slots.lock().unwrap().entry(key).or_default().clone();
    (key, s)
}

fn place(cached: &Path, out: &Path) {
    if let Some(p) = out.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::copy(cached, out)
        .unwrap_or_else(|e| panic!("{} -> {}: {e}", cached.display(), out.display()));
}

/// [`kiln::iree::compile::compile`], once per module text, target and flags.
pub fn compile(
    tc: &Toolchain,
    mlir: &Path,
    target: &Target,
    out: &Path,
    extra: &[String],
) -> kiln::Result<()> {
    let (key, s) = slot(mlir, target, extra);
    let mut got = s.lock().unwrap();
    if got.is_none() {
        let cached = dir().join(format!("{key:016x}.vmfb"));
        kiln::iree::compile::compile(tc, mlir, target, &cached, extra)?;
        *got = Some(cached);
    }
    place(got.as_ref().unwrap(), out);
    Ok(())
}

/// [`kiln::iree::compile::compile_many`] (`NAME-<target>.vmfb` in `out_dir`),
/// compiling only the targets not compiled before, `jobs` at a time.
pub fn compile_many(
    tc: &Toolchain,
    mlir: &Path,
    targets: &[Target],
    out_dir: &Path,
    name: &str,
    jobs: usize,
) -> kiln::Result<Vec<PathBuf>> {
    let keyed: Vec<(u64, Slot, &Target)> = targets
        .iter()
        .map(|t| {
            let (k, s) = slot(mlir, t, &[]);
            (k, s, t)
        })
        .collect();
    // Locks in key order, so two callers never wait on each other in a cycle.
    let mut order: Vec<usize> = (0..keyed.len()).collect();
    order.sort_by_key(|&i| keyed[i].0);
    let slots: Vec<Slot> = keyed.iter().map(|k| k.1.clone()).collect();
    let mut guards: Vec<_> = order
        .iter()
        .map(|&i| (i, slots[i].lock().unwrap()))
        .collect();
    guards.sort_by_key(|g| g.0);
    let missing: Vec<Target> = guards
        .iter()
        .filter(|g| g.1.is_none())
        .map(|g| keyed[g.0].2.clone())
        .collect();
    if !missing.is_empty() {
        let scratch = tempfile::tempdir_in(dir()).unwrap();
        let outs = kiln::iree::compile::compile_many(
            tc,
            mlir,
            &missing,
            scratch.path(),
            name,
            &CompileOptions {
                jobs,
                ..Default::default()
            },
        )?;
        let mut made = outs.into_iter();
        for g in guards.iter_mut().filter(|g| g.1.is_none()) {
            let cached = dir().join(format!("{:016x}.vmfb", keyed[g.0].0));
            std::fs::rename(made.next().unwrap(), &cached).unwrap();
            *g.1 = Some(cached);
        }
    }
    let outs: Vec<PathBuf> = targets
        .iter()
        .map(|t| kiln::iree::compile::output_path(out_dir, name, t))
        .collect();
    for (g, out) in guards.iter().zip(&outs) {
        place(g.1.as_ref().unwrap(), out);
    }
    Ok(outs)
}
