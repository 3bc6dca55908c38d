//! The C ABI of kiln's runtime library (`runtime/include/kiln_runtime.h`):
//! `runtime/c/kiln_check.c`, a C11 program, compiled and linked against
//! `libkiln_runtime.so` (`-L DIR -lkiln_runtime -Wl,-rpath,DIR`), on the
//! tiny KV package of tests/java_library.rs (`kiln package
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
//! does.

use crate::common;
use crate::java_library::{ids_of, kiln_generate_json, s, tiny_package};
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The stripped aarch64 `libkiln_runtime.so` may not grow past this (an
/// app ships one per ABI).
const AARCH64_LIBRARY_MAX_BYTES: u64 = 12 * 1024 * 1024;

/// One run of kiln_check.
struct Run {
    code: Option<i32>,
    /// stdout's lines.
    lines: Vec<String>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(out: std::process::Output) -> Run {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        Run {
            code: out.status.code(),
            lines: stdout.lines().map(str::to_string).collect(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Everything the program printed, for assertion messages.
    fn show(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// Asserts exit 0 (the process survived whatever failed), and returns
    /// the lines.
    fn ok(&self) -> &[String] {
        assert_eq!(self.code, Some(0), "{}", self.show());
        &self.lines
    }
}

/// How long one kiln_check run may take (a tiny model: well under a
/// second on the host, under qemu too) before it is killed as hung.
const RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// `cmd`'s output, or a panic with what it printed when it runs past
/// `timeout` (then it is killed).
fn output_within(mut cmd: Command, timeout: std::time::Duration) -> Run {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            r.read_to_end(&mut v).ok();
            v
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > timeout {
            child.kill().ok();
            child.wait().ok();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let run = Run::of(std::process::Output {
        status: status.unwrap_or_default(),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    });
    assert!(
        status.is_some(),
        "{cmd:?}: still running after {timeout:?}, killed: {}",
        run.show()
    );
    run
}

/// kiln_check compiled for one machine, and how to run it.
struct Check {
    /// The program (in a temporary folder that lives as long as this).
    exe: PathBuf,
    _dir: tempfile::TempDir,
    /// qemu and its `-L` for an aarch64 program; `None` on the host.
    qemu: Option<QemuAarch64>,
}

/// Compiles kiln_check with `compiler` (C11, every warning an error)
/// against the `libkiln_runtime.so` in `lib`; a file named with cargo's
/// hash is copied as `libkiln_runtime.so` first (`-lkiln_runtime` looks
/// for exactly that name).
fn build(compiler: &Path, lib: &Path, qemu: Option<QemuAarch64>) -> Check {
    let dir = tmpdir();
    let lib_dir = if lib.file_name().is_some_and(|n| n == "libkiln_runtime.so") {
        lib.parent().unwrap().to_path_buf()
    } else {
        let d = dir.path().join("lib");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(lib, d.join("libkiln_runtime.so")).unwrap();
        d
    };
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

impl Check {
    /// `kiln_check PACKAGE DEVICE WORKERS COMMANDS…` (under qemu for
    /// aarch64).
    fn run(&self, package: &Path, device: &str, workers: u32, commands: &[String]) -> Run {
        let mut cmd = match &self.qemu {
            Some(q) => {
                let mut c = Command::new(&q.qemu);
                if let Some(prefix) = &q.ld_prefix {
                    c.arg("-L").arg(prefix);
                }
                c.arg(&self.exe);
                c
            }
            None => Command::new(&self.exe),
        };
        cmd.arg(package)
            .arg(device)
            .arg(workers.to_string())
            .args(commands);
        output_within(cmd, RUN_TIMEOUT)
    }
}

/// The prompts of the ids checks: within P = 4 (one prefill), and past it
/// (two chunks), 9 and 14 tokens in all, past SEQ 8.
const CASES: [(&str, usize); 2] = [("5,17,3", 6), ("5,17,3,9,11,2", 8)];

fn ids_command((prompt, n): &(&str, usize)) -> String {
    format!("ids:{n}:{prompt}")
}

/// `kiln generate --kv-cache`'s ids for [`CASES`] with `kv_host`.
fn kiln_ids(kv_host: &Path) -> Vec<Vec<i32>> {
    let want: Vec<Vec<i32>> = CASES
        .iter()
        .map(|(prompt, n)| {
            let n = n.to_string();
            let j = kiln_generate_json(&[
                s(kv_host),
                "--kv-cache",
                "--tokens",
                prompt,
                "--max-new-tokens",
                &n,
            ]);
            serde_json::from_value(j["ids"].clone()).unwrap()
        })
        .collect();
    assert!(want.iter().all(|ids| !ids.is_empty()), "{want:?}");
    want
}

#[test]
fn generate_ids_through_the_c_abi_equal_kiln_generate() {
    let Some(tc) = toolchain() else { return };
    let Some(check) = host_check() else { return };
    let dir = tmpdir();
    let (r, assets) = tiny_package(&tc, dir.path());
    let want = kiln_ids(&r.mlir.with_file_name("tiny-kv-host.vmfb"));
    // The same ids again: each call starts a new sequence; then close (and
    // close NULL), and a call on the closed model, which is an error.
    let mut commands: Vec<String> = CASES.iter().map(ids_command).collect();
    commands.push(ids_command(&CASES[0]));
    commands.extend(["close".into(), "use-after-close".into()]);
    let run = check.run(&assets, "local-task", 2, &commands);
    let lines = run.ok();
    assert_eq!(lines.len(), 6, "{}", run.show());
    assert_eq!(lines[0], "opened", "{}", run.show());
    for (line, want) in lines[1..4].iter().zip([&want[0], &want[1], &want[0]]) {
        assert_eq!(&ids_of(line), want, "{}", run.show());
    }
    assert_eq!(lines[4], "closed", "{}", run.show());
    assert!(
        lines[5].starts_with("illegal-state ") && lines[5].contains("NULL"),
        "a call after close: {}",
        run.show()
    );
    // local-sync, IREE's detection of the workers: the same ids; then a
    // prompt past the context N = 16 is an error, and the program exits 0.
    let long: Vec<String> = (1..=17).map(|i| i.to_string()).collect();
    let commands = [ids_command(&CASES[1]), format!("ids:2:{}", long.join(","))];
    let run = check.run(&assets, "local-sync", 0, &commands);
    let lines = run.ok();
    assert_eq!(lines.len(), 3, "{}", run.show());
    assert_eq!(ids_of(&lines[1]), want[1], "{}", run.show());
    assert!(lines[2].starts_with("error "), "{}", run.show());
}

#[test]
fn a_damaged_package_is_an_error_line_and_exit_0() {
    let Some(tc) = toolchain() else { return };
    let Some(check) = host_check() else { return };
    let dir = tmpdir();
    let (_, assets) = tiny_package(&tc, dir.path());
    // The error line of a run whose first step must fail, naming `needle`.
    let fails = |package: &Path, device: &str, command: &str, needle: &str| {
        let run = check.run(package, device, 0, &[command.to_string()]);
        let lines = run.ok();
        let error = lines.iter().find(|l| l.starts_with("error "));
        assert!(
            error.is_some_and(|l| l.contains(needle)) && lines.last() == error,
            "{needle}: {}",
            run.show()
        );
        eprintln!("c_library: {}", error.unwrap());
    };
    let ids = "ids:2:5,17,3";
    // An unknown device, on an intact package.
    fails(&assets, "cuda", ids, "cuda");
    // A folder that does not exist.
    fails(
        &dir.path().join("no-such-package"),
        "local-task",
        ids,
        "no-such-package",
    );
    // Text without a tokenizer (the package has none).
    fails(&assets, "local-task", "generate:2:Hello", "tokenizer");
    // The host KV module with one byte in its middle flipped: same size,
    // so the size check passes; the module's sha256 (checked at open, the
    // archive's is `kiln verify`'s) does not.
    let module = assets.join("tiny-kv-host.vmfb");
    let intact = std::fs::read(&module).unwrap();
    let mut bytes = intact.clone();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&module, &bytes).unwrap();
    fails(&assets, "local-task", ids, "tiny-kv-host.vmfb: sha256");
    std::fs::write(&module, &intact).unwrap();
    // The archive cut in half.
    let irpa = assets.join("tiny.irpa");
    let bytes = std::fs::read(&irpa).unwrap();
    std::fs::write(&irpa, &bytes[..bytes.len() / 2]).unwrap();
    fails(&assets, "local-task", ids, "tiny.irpa");
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
    let want = kiln_ids(&r.mlir.with_file_name("tiny-kv-host.vmfb"));
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
    let lines = run.ok();
    assert_eq!(lines.len(), 4, "{}", run.show());
    assert_eq!(lines[0], "opened", "{}", run.show());
    for (line, want) in lines[1..3].iter().zip(&want) {
        assert_eq!(&ids_of(line), want, "{}", run.show());
    }
    assert_eq!(lines[3], "closed", "{}", run.show());
}
