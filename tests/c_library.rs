//! The C ABI of kiln's runtime library (`runtime/include/kiln_runtime.h`):
//! `runtime/c/kiln_check.c`, a C11 program, compiled and linked against
//! `libkiln_runtime.so` (`-L DIR -lkiln_runtime -Wl,-rpath,DIR`), on the
//! tiny KV package of tests/common/line_driver.rs (`kiln package
//! --include-host`, its host and arm64-v8a modules):
//!
//! - on the host (`cc`, the library of this build): `generate_ids` gives
//!   `kiln generate --kv-cache`'s ids on local-task and local-sync, a
//!   closed (NULL) model is an error, a prompt past the context is an
//!   error;
//! - on aarch64 Linux under qemu (`aarch64-linux-gnu-gcc`, the stripped
//!   aarch64 library of `scripts/install-deps.sh` step h, dynamically
//!   linked against Debian's cross glibc): the arm64-v8a KV module gives
//!   the host's ids; the library is at most 12 MB;
//! - a damaged package (a truncated `.irpa`, a module with one byte
//!   flipped), a missing folder, an unknown device, text generation
//!   without a tokenizer: an `error` line and exit status 0.
//!
//! kiln_check prints one line per step (`opened`, `ids 1 2 3`, `text
//! "<json>"`, `error <message>`), as runtime/java/test/KilnModelCheck.java
//! does: tests/common/line_driver.rs runs it and holds the checks the two
//! files share; this file builds kiln_check and says how to start it.

use crate::common;
use common::line_driver::*;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The stripped aarch64 `libkiln_runtime.so` may not grow past this (an
/// app ships one per ABI).
const AARCH64_LIBRARY_MAX_BYTES: u64 = 12 * 1024 * 1024;

/// kiln_check compiled for one machine, and how to run it.
struct Check {
    /// The program (in a temporary folder that lives as long as this).
    exe: PathBuf,
    _dir: tempfile::TempDir,
    /// qemu and its `-L` for an aarch64 program; `None` on the host.
    qemu: Option<QemuAarch64>,
}

/// Compiles kiln_check with `compiler` (C11, every warning an error)
/// against the `libkiln_runtime.so` in `lib` (its folder, or a copy:
/// [`library_dir`]).
fn build(compiler: &Path, lib: &Path, qemu: Option<QemuAarch64>) -> Check {
    let dir = tmpdir();
    let lib_dir = library_dir(lib, dir.path());
    let exe = dir.path().join("kiln_check");
    let out = Command::new(compiler)
        .args([
            "-std=c11",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
        ])
        .arg("-I")
        .arg(root().join("runtime/include"))
        .arg(root().join("runtime/c/kiln_check.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib_dir.display()))
        .arg("-lkiln_runtime")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}{}",
        compiler.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("c_library: {} with {}", compiler.display(), lib.display());
    Check {
        exe,
        _dir: dir,
        qemu,
    }
}

/// kiln_check for the host, against this build's `libkiln_runtime.so`,
/// or `None` (a skip, or a failure under CI / `KILN_REQUIRE_IREE=1`).
fn host_check() -> Option<Check> {
    let cc = c_compiler()?;
    let lib = kiln_runtime_library()?;
    Some(build(&cc, &lib, None))
}

impl LineProgram for Check {
    fn name(&self) -> &'static str {
        "c_library"
    }

    /// `kiln_check`, under qemu for aarch64.
    fn command(&self) -> Command {
        match &self.qemu {
            Some(q) => {
                let mut c = Command::new(&q.qemu);
                if let Some(prefix) = &q.ld_prefix {
                    c.arg("-L").arg(prefix);
                }
                c.arg(&self.exe);
                c
            }
            None => Command::new(&self.exe),
        }
    }
}

#[test]
fn generate_ids_through_the_c_abi_equal_kiln_generate() {
    let Some(tc) = toolchain() else { return };
    let Some(check) = host_check() else { return };
    // kiln_model_generate_ids on a closed model is a call with NULL.
    check_generate_ids(&check, &tc, Some("NULL"));
}

#[test]
fn a_damaged_package_is_an_error_line_and_exit_0() {
    let Some(tc) = toolchain() else { return };
    let Some(check) = host_check() else { return };
    check_damaged_package(&check, &tc, |assets| {
        // Text without a tokenizer (the package has none): opened, then
        // the error.
        check.fails(assets, "local-task", "generate:2:Hello", "tokenizer");
        // The host KV module with one byte in its middle flipped: same
        // size, so the size check passes; the module's sha256 (checked at
        // open, the archive's is `kiln verify`'s) does not.
        let module = assets.join("tiny-kv-host.vmfb");
        let intact = std::fs::read(&module).unwrap();
        let mut bytes = intact.clone();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&module, &bytes).unwrap();
        check.fails_at_open(assets, "local-task", "tiny-kv-host.vmfb: sha256");
        std::fs::write(&module, &intact).unwrap();
    });
}

#[test]
fn the_aarch64_library_is_at_most_12_mb() {
    let Some(lib) = aarch64_kiln_runtime_library() else {
        return;
    };
    let bytes = std::fs::metadata(&lib).unwrap().len();
    eprintln!(
        "c_library: {}: {bytes} bytes ({:.2} MiB)",
        lib.display(),
        bytes as f64 / (1024.0 * 1024.0)
    );
    assert!(
        bytes <= AARCH64_LIBRARY_MAX_BYTES,
        "{}: {bytes} bytes, over {AARCH64_LIBRARY_MAX_BYTES}",
        lib.display()
    );
}

#[test]
fn aarch64_under_qemu_generate_ids_equal_the_hosts() {
    let Some(tc) = toolchain() else { return };
    let Some(gcc) = aarch64_c_compiler() else {
        return;
    };
    let Some(lib) = aarch64_kiln_runtime_library() else {
        return;
    };
    let Some(qemu) = qemu_aarch64(&tc) else {
        return;
    };
    let check = build(&gcc, &lib, Some(qemu));
    let dir = tmpdir();
    let (r, assets) = tiny_package(&tc, dir.path());
    let want = kiln_ids(&r);
    // The package's arm64-v8a KV module (the library on aarch64 picks it).
    let packaged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(assets.join("tiny.manifest.json")).unwrap())
            .unwrap();
    assert!(
        packaged["kv"]["modules"]["arm64-v8a"].is_object(),
        "no arm64-v8a KV module: {packaged}"
    );
    let mut commands: Vec<String> = CASES.iter().map(ids_command).collect();
    commands.push("close".into());
    let run = check.run(&assets, "local-task", 2, &commands);
    run.opened_ids_closed(&[&want[0], &want[1]], 0);
}
