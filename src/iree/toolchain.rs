//! Finding (and installing) the pinned IREE tools.
//!
//! Lookup order, first hit wins:
//! 1. an explicit directory (a CLI flag) or `$KILN_IREE_DIR` — a venv root,
//!    a prefix with `lib/python3*/site-packages/iree`, or a directory that
//!    holds the native tools themselves;
//! 2. the pinned venv `util::cache_dir()/iree-3.13.0` (what
//!    `kiln toolchain install` and `scripts/install-deps.sh` create);
//! 3. `iree-compile` / `iree-run-module` on `PATH`; a Python console-script
//!    wrapper there is resolved to the native executable in its venv.
//!
//! `$KILN_IREE_COMPILE` and `$KILN_IREE_RUN_MODULE` then override single tools.
//! kiln always runs the native executables inside the wheels
//! (`site-packages/iree/compiler/_mlir_libs/iree-compile`,
//! `site-packages/iree/_runtime_libs/iree-run-module`), never the Python
//! wrappers, so no Python starts per call.

use super::flags::{self, IREE_VERSION};
use super::{IreeError, Result};
use crate::util;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where each IREE tool kiln uses was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// Native `iree-compile`.
    pub compile: PathBuf,
    /// Native `iree-run-module`.
    pub run_module: PathBuf,
    /// Native `iree-benchmark-module`, when present.
    pub benchmark_module: Option<PathBuf>,
    /// Native `iree-convert-parameters`, when present.
    pub convert_parameters: Option<PathBuf>,
    /// Native `iree-dump-parameters`, when present.
    pub dump_parameters: Option<PathBuf>,
    /// Native `iree-create-parameters`, when present.
    pub create_parameters: Option<PathBuf>,
    /// Native `iree-dump-module`, when present.
    pub dump_module: Option<PathBuf>,
    /// The venv or prefix the tools came from, when known.
    pub root: Option<PathBuf>,
    /// How the tools were found (`KILN_IREE_DIR`, `pinned venv`, `PATH`, …).
    pub source: String,
    /// `qemu-aarch64-static` (or `qemu-aarch64`), for `--emulate arm64`.
    pub qemu_aarch64: Option<PathBuf>,
    /// The aarch64 `iree-run-module` from the manylinux aarch64 runtime wheel.
    pub aarch64_run_module: Option<PathBuf>,
    /// kiln's own runtime program (`kiln-runtime`, the workspace crate)
    /// built for aarch64 Linux, static: `kiln generate --emulate arm64`
    /// runs a whole generation in one process of it under qemu.
    pub aarch64_kiln_runtime: Option<PathBuf>,
    /// `qemu-arm-static` (or `qemu-arm`), for `--emulate arm32`.
    pub qemu_arm: Option<PathBuf>,
    /// An armv7 `iree-run-module` (static), for `--emulate arm32` with
    /// `--per-step` (or without [`Toolchain::armv7_kiln_runtime`]).
    pub armv7_run_module: Option<PathBuf>,
    /// kiln's own runtime program built for armv7 Linux (static,
    /// local-sync only): `kiln generate --emulate arm32` runs a whole
    /// generation in one process of it under qemu-arm.
    pub armv7_kiln_runtime: Option<PathBuf>,
}

/// [`Toolchain::EXPLICIT_DIR`].
pub(crate) const EXPLICIT_DIR: &str = "the given IREE directory";

/// The pinned venv directory: `util::cache_dir()/iree-3.13.0`.
pub fn pinned_venv_dir() -> PathBuf {
    util::cache_dir().join(format!("iree-{IREE_VERSION}"))
}

/// Where the aarch64 runtime wheel is unpacked: `util::cache_dir()/iree-3.13.0-aarch64`.
pub fn aarch64_runtime_dir() -> PathBuf {
    util::cache_dir().join(format!("iree-{IREE_VERSION}-aarch64"))
}

/// Where `scripts/install-deps.sh` puts IREE's `iree-run-module` built for
/// armv7: `util::cache_dir()/iree-run-module-armv7`.
pub fn armv7_runtime_dir() -> PathBuf {
    util::cache_dir().join("iree-run-module-armv7")
}

/// The armv7 `iree-run-module`: `KILN_IREE_ARMV7_RUN_MODULE`, else the one
/// in [`armv7_runtime_dir`].
fn find_armv7_run_module() -> Option<PathBuf> {
    let p = std::env::var_os("KILN_IREE_ARMV7_RUN_MODULE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| armv7_runtime_dir().join("iree-run-module"));
    is_executable(&p).then_some(p)
}

/// Where `scripts/install-deps.sh` puts `kiln-runtime` cross-built for
/// `arch` (`aarch64`, `armv7`): `util::cache_dir()/kiln-runtime-ARCH`.
pub fn kiln_runtime_dir(arch: &str) -> PathBuf {
    util::cache_dir().join(format!("kiln-runtime-{arch}"))
}

/// `kiln-runtime` for `arch`: `KILN_RUNTIME_AARCH64` / `KILN_RUNTIME_ARMV7`,
/// else the one in [`kiln_runtime_dir`].
fn find_kiln_runtime(arch: &str) -> Option<PathBuf> {
    let var = format!("KILN_RUNTIME_{}", arch.to_uppercase());
    match std::env::var_os(var).filter(|v| !v.is_empty()) {
        Some(p) => Some(PathBuf::from(p)),
        None => Some(kiln_runtime_dir(arch).join("kiln-runtime")),
    }
    .filter(|p| is_executable(p))
}

/// Where downloaded wheels are kept: `util::cache_dir()/wheels`.
pub fn wheel_dir() -> PathBuf {
    util::cache_dir().join("wheels")
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        match std::fs::metadata(p) {
            Ok(m) => m.is_file() && m.permissions().mode() & 0o111 != 0,
            Err(_) => false,
        }
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// Looks a program up on `PATH`.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// True when `p` is a script starting with a `#!…python…` line (a pip console script).
fn is_python_wrapper(p: &Path) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 256];
    let n = match std::fs::File::open(p).and_then(|mut f| f.read(&mut buf)) {
        Ok(n) => n,
        Err(_) => return false,
    };
    let head = &buf[..n];
    if !head.starts_with(b"#!") {
        return false;
    }
    let first = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    String::from_utf8_lossy(first).contains("python")
}

/// `site-packages` directories under a venv or prefix, sorted (deterministic).
fn site_packages(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(rd) = std::fs::read_dir(root.join(lib)) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out
}

/// Optional runtime tools found in one directory.
fn runtime_tool(dir: &Path, name: &str) -> Option<PathBuf> {
    let p = dir.join(name);
    is_executable(&p).then_some(p)
}

impl Toolchain {
    /// The IREE release kiln drives (`iree-base-compiler` /
    /// `iree-base-runtime` on PyPI).
    pub const IREE_VERSION: &'static str = IREE_VERSION;

    /// The runtime wheel's Python dependencies pinned in the venv kiln
    /// installs, `(package, version)`.
    pub const RUNTIME_PINS: [(&'static str, &'static str); 2] = RUNTIME_PINS;

    /// What names the directory given to [`Toolchain::locate`], in
    /// [`IreeError::BadToolPath`] and [`Toolchain::source`].
    pub const EXPLICIT_DIR: &'static str = EXPLICIT_DIR;

    /// True when the aarch64 dynamic loader is available to qemu.
    pub fn arm64_libc_present() -> bool {
        Path::new("/lib/ld-linux-aarch64.so.1").exists() || qemu_ld_prefix().is_some()
    }

    fn with_tools(
        compile: PathBuf,
        run_module: PathBuf,
        root: Option<PathBuf>,
        source: &str,
    ) -> Self {
        let rt_dir = run_module
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let (qemu_aarch64, aarch64_run_module) = find_emulators();
        Toolchain {
            benchmark_module: runtime_tool(&rt_dir, "iree-benchmark-module"),
            convert_parameters: runtime_tool(&rt_dir, "iree-convert-parameters"),
            dump_parameters: runtime_tool(&rt_dir, "iree-dump-parameters"),
            create_parameters: runtime_tool(&rt_dir, "iree-create-parameters"),
            dump_module: runtime_tool(&rt_dir, "iree-dump-module"),
            compile,
            run_module,
            root,
            source: source.to_string(),
            qemu_aarch64,
            aarch64_run_module,
            aarch64_kiln_runtime: find_kiln_runtime("aarch64"),
            qemu_arm: which(flags::QEMU_ARM).or_else(|| which("qemu-arm")),
            armv7_run_module: find_armv7_run_module(),
            armv7_kiln_runtime: find_kiln_runtime("armv7"),
        }
    }

    /// The toolchain inside a venv/prefix `root` or a directory of native
    /// tools; `None` when `root` holds neither.
    pub fn from_dir(root: &Path, source: &str) -> Option<Toolchain> {
        for sp in site_packages(root) {
            let c = sp.join("iree/compiler/_mlir_libs/iree-compile");
            let r = sp.join("iree/_runtime_libs/iree-run-module");
            if is_executable(&c) && is_executable(&r) {
                return Some(Self::with_tools(c, r, Some(root.to_path_buf()), source));
            }
        }
        // A directory holding the native tools (e.g. an IREE build's bin/).
        for dir in [root.to_path_buf(), root.join("bin")] {
            let c = dir.join("iree-compile");
            let r = dir.join("iree-run-module");
            if is_executable(&c)
                && is_executable(&r)
                && !is_python_wrapper(&c)
                && !is_python_wrapper(&r)
            {
                return Some(Self::with_tools(c, r, Some(root.to_path_buf()), source));
            }
        }
        None
    }

    /// Looks the tools up on `PATH`, resolving pip wrappers to their venv.
    fn from_path() -> Option<Toolchain> {
        let c = which("iree-compile")?;
        if is_python_wrapper(&c) {
            // venv/bin/iree-compile -> venv
            let root = c.parent()?.parent()?;
            return Self::from_dir(root, "PATH");
        }
        let r = which("iree-run-module")?;
        if is_python_wrapper(&r) {
            let root = r.parent()?.parent()?;
            let tc = Self::from_dir(root, "PATH")?;
            return Some(Self::with_tools(c, tc.run_module, tc.root, "PATH"));
        }
        Some(Self::with_tools(c, r, None, "PATH"))
    }

    /// Finds the toolchain: `explicit` directory (a CLI flag) first, then
    /// `$KILN_IREE_DIR`, the pinned venv, and `PATH`; `$KILN_IREE_COMPILE`
    /// and `$KILN_IREE_RUN_MODULE` override single tools.
    pub fn locate(explicit: Option<&Path>) -> Result<Toolchain> {
        let mut looked: Vec<String> = Vec::new();
        let mut found: Option<Toolchain> = None;
        if let Some(dir) = explicit {
            found =
                Some(
                    Self::from_dir(dir, EXPLICIT_DIR).ok_or_else(|| IreeError::BadToolPath {
                        what: EXPLICIT_DIR.into(),
                        path: dir.to_path_buf(),
                    })?,
                );
        } else if let Some(dir) = std::env::var_os("KILN_IREE_DIR").filter(|d| !d.is_empty()) {
            let dir = PathBuf::from(dir);
            found = Some(Self::from_dir(&dir, "KILN_IREE_DIR").ok_or_else(|| {
                IreeError::BadToolPath {
                    what: "KILN_IREE_DIR".into(),
                    path: dir.clone(),
                }
            })?);
        }
        if found.is_none() {
            let pinned = pinned_venv_dir();
            found = Self::from_dir(&pinned, "pinned venv");
            looked.push(pinned.display().to_string());
        }
        if found.is_none() {
            found = Self::from_path();
            looked.push("PATH".into());
        }
        let env_tool = |var: &str| -> Result<Option<PathBuf>> {
            match std::env::var_os(var).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(p) => {
                    let p = PathBuf::from(p);
                    if is_executable(&p) {
                        Ok(Some(p))
                    } else {
                        Err(IreeError::BadToolPath {
                            what: var.into(),
                            path: p,
                        })
                    }
                }
            }
        };
        let compile_env = env_tool("KILN_IREE_COMPILE")?;
        let run_env = env_tool("KILN_IREE_RUN_MODULE")?;
        match (found, compile_env, run_env) {
            (Some(mut tc), c, r) => {
                if let Some(c) = c {
                    tc.compile = c;
                    tc.source.push_str(" + KILN_IREE_COMPILE");
                }
                if let Some(r) = r {
                    tc = Self {
                        source: format!("{} + KILN_IREE_RUN_MODULE", tc.source),
                        ..Self::with_tools(tc.compile, r, tc.root, "")
                    };
                }
                Ok(tc)
            }
            (None, Some(c), Some(r)) => Ok(Self::with_tools(
                c,
                r,
                None,
                "KILN_IREE_COMPILE/KILN_IREE_RUN_MODULE",
            )),
            (None, _, _) => Err(IreeError::NotFound {
                looked: looked.join(", "),
            }),
        }
    }

    /// [`Toolchain::locate`] without an explicit directory.
    pub fn find() -> Result<Toolchain> {
        Self::locate(None)
    }

    /// Finds the toolchain, installing the pinned venv when nothing is found.
    pub fn find_or_install(progress: bool) -> Result<Toolchain> {
        match Self::find() {
            Err(IreeError::NotFound { .. }) => Self::install(progress),
            other => other,
        }
    }

    /// The first version line of `iree-compile --version`.
    pub fn compiler_version(&self) -> Result<String> {
        let out = Command::new(&self.compile)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|source| IreeError::Spawn {
                tool: self.compile.clone(),
                source,
            })?;
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text
            .lines()
            .map(str::trim)
            .find(|l| l.contains("version"))
            .unwrap_or_else(|| text.trim())
            .to_string())
    }

    /// The runtime package version (iree-run-module 3.13 has no
    /// `--version`), `unknown` when it cannot be read.
    pub fn runtime_version(&self) -> String {
        runtime_version(&self.run_module).unwrap_or_else(|| "unknown".into())
    }

    /// Installs the pinned IREE into its venv (`iree-3.13.0` under
    /// [`crate::cache_dir`]; `python3 -m venv`,
    /// then `pip install iree-base-compiler==3.13.0 iree-base-runtime==3.13.0`
    /// and the [`Toolchain::RUNTIME_PINS`]), streaming pip's output to stderr when
    /// `progress` is set. Skips everything when that venv already holds
    /// both packages at 3.13.0 and the pinned versions.
    /// `$KILN_PYTHON` picks the interpreter (default `python3`).
    pub fn install(progress: bool) -> Result<Toolchain> {
        let dir = pinned_venv_dir();
        if venv_complete(&dir) && runtime_pins_installed(&dir) {
            if progress {
                eprintln!(
                    "kiln: IREE {IREE_VERSION} already installed in {}",
                    dir.display()
                );
            }
            return Self::from_dir(&dir, "pinned venv")
                .ok_or_else(|| IreeError::Install(format!("{} is incomplete", dir.display())));
        }
        std::fs::create_dir_all(util::cache_dir()).map_err(|source| IreeError::Io {
            path: util::cache_dir(),
            source,
        })?;
        let py = dir.join("bin/python");
        if !is_executable(&py) {
            let python = std::env::var_os("KILN_PYTHON").unwrap_or_else(|| "python3".into());
            if progress {
                eprintln!("kiln: creating venv {}", dir.display());
            }
            let mut cmd = Command::new(&python);
            cmd.arg("-m").arg("venv").arg(&dir);
            run_install_step(
                cmd,
                progress,
                &format!("{} -m venv", python.to_string_lossy()),
            )
            .map_err(|e| {
                IreeError::Install(format!(
                    "{e}; is python3-venv installed? (apt-get install python3-venv)"
                ))
            })?;
        }
        if progress {
            eprintln!(
                "kiln: pip install iree-base-compiler=={v} iree-base-runtime=={v} (about 580 MB)",
                v = IREE_VERSION
            );
        }
        let mut cmd = Command::new(&py);
        cmd.args(["-m", "pip", "install", "--disable-pip-version-check"])
            .arg(format!("iree-base-compiler=={IREE_VERSION}"))
            .arg(format!("iree-base-runtime=={IREE_VERSION}"))
            .args(RUNTIME_PINS.iter().map(|(name, v)| format!("{name}=={v}")));
        run_install_step(cmd, progress, "pip install").map_err(IreeError::Install)?;
        if !venv_complete(&dir) {
            return Err(IreeError::Install(format!(
                "pip finished but {} lacks the native IREE tools",
                dir.display()
            )));
        }
        Self::from_dir(&dir, "pinned venv")
            .ok_or_else(|| IreeError::Install(format!("{} is incomplete", dir.display())))
    }

    /// Downloads the manylinux aarch64 `iree-base-runtime==3.13.0` wheel and
    /// unpacks it into `iree-3.13.0-aarch64` under [`crate::cache_dir`], for
    /// `--emulate arm64`.
    /// Needs the pinned venv (for pip). Returns the aarch64 `iree-run-module`.
    /// qemu and the arm64 libc come from apt (`scripts/install-deps.sh`).
    pub fn install_emulators(progress: bool) -> Result<PathBuf> {
        let dest = aarch64_runtime_dir();
        let run = dest.join("iree/_runtime_libs/iree-run-module");
        if is_executable(&run) {
            if progress {
                eprintln!("kiln: aarch64 IREE runtime already in {}", dest.display());
            }
            return Ok(run);
        }
        let venv = pinned_venv_dir();
        let py = venv.join("bin/python");
        if !is_executable(&py) {
            return Err(IreeError::NoVenv { python: py });
        }
        let wheels = wheel_dir();
        std::fs::create_dir_all(&wheels).map_err(|source| IreeError::Io {
            path: wheels.clone(),
            source,
        })?;
        let wheel = match find_aarch64_wheel(&wheels)? {
            Some(w) => w,
            None => {
                if progress {
                    eprintln!(
                        "kiln: pip download iree-base-runtime=={IREE_VERSION} ({})",
                        flags::AARCH64_WHEEL_PLATFORM
                    );
                }
                let mut cmd = Command::new(&py);
                cmd.args([
                    "-m",
                    "pip",
                    "download",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--only-binary=:all:",
                ])
                .args(["--platform", flags::AARCH64_WHEEL_PLATFORM])
                .args(["--python-version", flags::AARCH64_WHEEL_PYTHON])
                .arg("-d")
                .arg(&wheels)
                .arg(format!("iree-base-runtime=={IREE_VERSION}"));
                run_install_step(cmd, progress, "pip download").map_err(IreeError::Install)?;
                find_aarch64_wheel(&wheels)?.ok_or_else(|| {
                    IreeError::Install(format!(
                        "no aarch64 wheel in {} after pip download",
                        wheels.display()
                    ))
                })?
            }
        };
        if progress {
            eprintln!("kiln: unpacking {}", wheel.display());
        }
        let mut cmd = Command::new(&py);
        cmd.arg("-c").arg(UNPACK_WHEEL_PY).arg(&wheel).arg(&dest);
        run_install_step(cmd, progress, "unpacking the wheel").map_err(IreeError::Install)?;
        if !is_executable(&run) {
            return Err(IreeError::Install(format!(
                "{} missing after unpacking",
                run.display()
            )));
        }
        Ok(run)
    }
}

/// Unpacks a wheel (argv[1]) into a directory (argv[2]) keeping exec bits,
/// via a `.partial` directory renamed at the end. Same code as in
/// scripts/install-deps.sh, so both produce one layout.
const UNPACK_WHEEL_PY: &str = r#"
import os, shutil, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
tmp = dest + ".partial"
shutil.rmtree(tmp, ignore_errors=True)
with zipfile.ZipFile(whl) as z:
    for info in z.infolist():
        z.extract(info, tmp)
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(os.path.join(tmp, info.filename), mode)
rt = os.path.join(tmp, "iree", "_runtime_libs")
if os.path.isdir(rt):
    for n in os.listdir(rt):
        if n.startswith("iree-"):
            p = os.path.join(rt, n)
            os.chmod(p, os.stat(p).st_mode | 0o755)
shutil.rmtree(dest, ignore_errors=True)
os.rename(tmp, dest)
"#;

fn find_aarch64_wheel(dir: &Path) -> Result<Option<PathBuf>> {
    let rd = std::fs::read_dir(dir).map_err(|source| IreeError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let prefix = format!("iree_base_runtime-{IREE_VERSION}-");
    let mut hits: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            n.starts_with(&prefix) && n.contains("aarch64") && n.ends_with(".whl")
        })
        .collect();
    hits.sort();
    Ok(hits.into_iter().next())
}

/// Runs one install command; with `progress` its stdout and stderr go to our stderr.
fn run_install_step(
    mut cmd: Command,
    progress: bool,
    what: &str,
) -> std::result::Result<(), String> {
    cmd.stdin(Stdio::null());
    if progress {
        cmd.stdout(Stdio::from(std::io::stderr()))
            .stderr(Stdio::inherit());
        let status = cmd
            .status()
            .map_err(|e| format!("{what}: cannot start: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{what} failed ({})", super::status_text(&status)))
        }
    } else {
        let out = cmd
            .output()
            .map_err(|e| format!("{what}: cannot start: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed ({}): {}",
                super::status_text(&out.status),
                super::trim_log(&String::from_utf8_lossy(&out.stderr), 20)
            ))
        }
    }
}

/// The runtime wheel's Python dependencies, pinned in the venv kiln
/// installs (pip would take the newest). `import iree.runtime` imports
/// ml_dtypes; ml_dtypes 0.7.0 under numpy 2.4.6 took 0.87 s of CPU to
/// import (registering its ufunc loops), 0.5.4 takes 0.12–0.15 s, so every
/// `kiln generate` and `kiln chat` session started 0.7 s sooner (SmolLM2:
/// loaded in 0.86 → 0.15 s; spec/iree.md, "Installing").
/// `scripts/install-deps.sh` pins the same.
const RUNTIME_PINS: [(&str, &str); 2] = [("numpy", "2.4.6"), ("ml_dtypes", "0.5.4")];

/// True when the venv `dir` holds the [`RUNTIME_PINS`] versions.
fn runtime_pins_installed(dir: &Path) -> bool {
    site_packages(dir).iter().any(|sp| {
        RUNTIME_PINS
            .iter()
            .all(|(name, v)| sp.join(format!("{name}-{v}.dist-info")).is_dir())
    })
}

/// True when `dir` is a venv holding iree-base-compiler and iree-base-runtime
/// at [`IREE_VERSION`] with their native tools.
pub fn venv_complete(dir: &Path) -> bool {
    site_packages(dir).iter().any(|sp| {
        sp.join(format!("iree_base_compiler-{IREE_VERSION}.dist-info"))
            .is_dir()
            && sp
                .join(format!("iree_base_runtime-{IREE_VERSION}.dist-info"))
                .is_dir()
            && is_executable(&sp.join("iree/compiler/_mlir_libs/iree-compile"))
            && is_executable(&sp.join("iree/_runtime_libs/iree-run-module"))
    })
}

/// The runtime wheel's version from `_runtime_libs/version.py` beside iree-run-module.
fn runtime_version(run_module: &Path) -> Option<String> {
    let text = std::fs::read_to_string(run_module.parent()?.join("version.py")).ok()?;
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("VERSION"))?;
    let v = line
        .split('=')
        .nth(1)?
        .trim()
        .trim_matches('"')
        .trim_matches('\'');
    Some(format!("iree-base-runtime {v}"))
}

/// Finds qemu-aarch64 and the aarch64 iree-run-module.
/// `$KILN_QEMU_AARCH64` and `$KILN_IREE_AARCH64_DIR` override the defaults
/// (`qemu-aarch64-static` on PATH, [`aarch64_runtime_dir`]).
fn find_emulators() -> (Option<PathBuf>, Option<PathBuf>) {
    let qemu = match std::env::var_os("KILN_QEMU_AARCH64").filter(|v| !v.is_empty()) {
        Some(p) => Some(PathBuf::from(p)).filter(|p| is_executable(p)),
        None => which(flags::QEMU_AARCH64).or_else(|| which("qemu-aarch64")),
    };
    let dir = std::env::var_os("KILN_IREE_AARCH64_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(aarch64_runtime_dir);
    let run = [
        dir.join("iree/_runtime_libs/iree-run-module"),
        dir.join("iree-run-module"),
    ]
    .into_iter()
    .find(|p| is_executable(p));
    (qemu, run)
}

/// The directory qemu should treat as the aarch64 root (`QEMU_LD_PREFIX`),
/// when the arm64 loader is not installed multiarch-style in `/lib`.
pub fn qemu_ld_prefix() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("QEMU_LD_PREFIX").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    if Path::new("/lib/ld-linux-aarch64.so.1").exists() {
        return None;
    }
    let cross = PathBuf::from("/usr/aarch64-linux-gnu");
    cross
        .join("lib/ld-linux-aarch64.so.1")
        .exists()
        .then_some(cross)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A venv root whose site-packages holds `dist_infos`.
    fn venv_with(dist_infos: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let sp = root.path().join("lib/python3.11/site-packages");
        for d in dist_infos {
            std::fs::create_dir_all(sp.join(d)).unwrap();
        }
        root
    }

    #[test]
    fn the_runtime_pins_must_all_be_installed_at_their_versions() {
        let pinned: Vec<String> = RUNTIME_PINS
            .iter()
            .map(|(n, v)| format!("{n}-{v}.dist-info"))
            .collect();
        let all: Vec<&str> = pinned.iter().map(String::as_str).collect();
        assert!(runtime_pins_installed(venv_with(&all).path()));
        assert!(!runtime_pins_installed(venv_with(&all[..1]).path()));
        assert!(!runtime_pins_installed(
            venv_with(&[all[0], "ml_dtypes-0.7.0.dist-info"]).path()
        ));
        assert!(!runtime_pins_installed(venv_with(&[]).path()));
    }
}
