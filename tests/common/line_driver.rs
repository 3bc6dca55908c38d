//! The line protocol shared by the programs that drive kiln's runtime
//! library from outside Rust, and the checks tests/c_library.rs and
//! tests/java_library.rs both make with it.
//!
//! Such a program (`runtime/c/kiln_check.c` over the C ABI,
//! `runtime/java/test/KilnModelCheck.java` over JNI) is run as `PROGRAM
//! PACKAGE DEVICE WORKERS COMMANDS…`: it opens the package (`opened`),
//! carries out each command in turn and prints one line per step (`ids 1
//! 2 3`, `text "<json>"`, `closed`, `reset`, `illegal-state <message>`,
//! `error <message>`), stops at the first error, and exits 0 whatever
//! failed. A test file says how to build and start its program (a
//! [`LineProgram`]); this module runs it under a timeout ([`Run`]), reads
//! its lines ([`ids_of`], [`text_of`]), makes the tiny KV package both
//! use ([`tiny_package`]) and `kiln generate`'s ids for it ([`kiln_ids`]),
//! and holds the checks both files make: [`check_generate_ids`] and
//! [`check_damaged_package`].

use super::*;
use kiln::export::ExportReport;
use kiln::iree::{Target, Toolchain};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long one run of a program may take before it is killed as hung:
/// the tiny model answers well under a second (under qemu too), SmolLM2's
/// few short generations in seconds.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// A program that speaks the line protocol: how to start it, and what its
/// output must never hold.
pub trait LineProgram {
    /// The name for log lines (`c_library`, `java_library`).
    fn name(&self) -> &'static str;

    /// The command that starts the program, before its arguments `PACKAGE
    /// DEVICE WORKERS COMMANDS…` (an emulator or a JVM with its options,
    /// then the program).
    fn command(&self) -> Command;

    /// Text that must not occur in a run's stdout or stderr, even one that
    /// exits 0 (the JVM's `-Xcheck:jni` messages), with what it means.
    fn forbidden(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// `PROGRAM PACKAGE DEVICE WORKERS COMMANDS…`, killed (a panic) when
    /// it runs past [`RUN_TIMEOUT`].
    fn run(&self, package: &Path, device: &str, workers: u32, commands: &[String]) -> Run {
        let mut cmd = self.command();
        cmd.arg(package)
            .arg(device)
            .arg(workers.to_string())
            .args(commands);
        let mut run = output_within(cmd, RUN_TIMEOUT);
        run.forbidden = self.forbidden();
        run
    }

    /// Asserts that one run of `command` on `package` prints an `error`
    /// line naming `needle` as its last line (exit 0), and logs it.
    fn fails(&self, package: &Path, device: &str, command: &str, needle: &str) {
        let run = self.run(package, device, 0, &[command.to_string()]);
        let lines = run.ok();
        let error = lines.iter().find(|l| l.starts_with("error "));
        assert!(
            error.is_some_and(|l| l.contains(needle)) && lines.last() == error,
            "{needle}: {}",
            run.show()
        );
        eprintln!("{}: {}", self.name(), error.unwrap());
    }

    /// Asserts that opening `package` on `device` fails: a run with one
    /// ids command prints one line only, an `error` naming `needle` (exit
    /// 0), and logs it.
    fn fails_at_open(&self, package: &Path, device: &str, needle: &str) {
        let run = self.run(package, device, 0, &["ids:2:5,17,3".to_string()]);
        let lines = run.ok();
        assert_eq!(lines.len(), 1, "{}", run.show());
        assert!(
            lines[0].starts_with("error ") && lines[0].contains(needle),
            "{needle}: {}",
            run.show()
        );
        eprintln!("{}: {}", self.name(), lines[0]);
    }
}

/// One finished run of a [`LineProgram`].
pub struct Run {
    pub code: Option<i32>,
    /// stdout's lines.
    pub lines: Vec<String>,
    pub stdout: String,
    pub stderr: String,
    /// The program's [`LineProgram::forbidden`] text, checked by
    /// [`Run::ok`].
    forbidden: &'static [(&'static str, &'static str)],
}

impl Run {
    /// Everything the program printed, for assertion messages.
    pub fn show(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// Asserts exit 0 (the process survived whatever failed) and none of
    /// the program's forbidden text, and returns the lines.
    pub fn ok(&self) -> &[String] {
        assert_eq!(self.code, Some(0), "{}", self.show());
        for (bad, what) in self.forbidden {
            assert!(
                !self.stdout.contains(bad) && !self.stderr.contains(bad),
                "{what}: {}",
                self.show()
            );
        }
        &self.lines
    }

    /// Asserts exit 0 and that the lines are `opened`, one `ids` line per
    /// `want` (equal to it), `closed`, then `more` lines, and returns
    /// those `more` lines.
    pub fn opened_ids_closed(&self, want: &[&Vec<i32>], more: usize) -> &[String] {
        let lines = self.ok();
        let n = want.len();
        assert_eq!(lines.len(), n + 2 + more, "{}", self.show());
        assert_eq!(lines[0], "opened", "{}", self.show());
        for (line, want) in lines[1..=n].iter().zip(want) {
            assert_eq!(&ids_of(line), *want, "{}", self.show());
        }
        assert_eq!(lines[n + 1], "closed", "{}", self.show());
        &lines[n + 2..]
    }
}

/// `cmd`'s output (no stdin), or a panic with what it printed when it runs
/// past `timeout` (then it is killed).
pub fn output_within(mut cmd: Command, timeout: Duration) -> Run {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
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
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = String::from_utf8_lossy(&stdout.join().unwrap()).into_owned();
    let run = Run {
        code: status.and_then(|s| s.code()),
        lines: stdout.lines().map(str::to_string).collect(),
        stdout,
        stderr: String::from_utf8_lossy(&stderr.join().unwrap()).into_owned(),
        forbidden: &[],
    };
    assert!(
        status.is_some(),
        "{cmd:?}: still running after {timeout:?}, killed: {}",
        run.show()
    );
    run
}

/// The folder to load `lib` (a `libkiln_runtime.so` from
/// [`kiln_runtime_library`] or [`aarch64_kiln_runtime_library`]) from:
/// its own folder, or, for a file named with cargo's hash, `scratch/lib`
/// with a copy named `libkiln_runtime.so` (`-lkiln_runtime` and
/// `System.loadLibrary("kiln_runtime")` look for exactly that name).
pub fn library_dir(lib: &Path, scratch: &Path) -> PathBuf {
    if lib.file_name().is_some_and(|n| n == "libkiln_runtime.so") {
        lib.parent().unwrap().to_path_buf()
    } else {
        let d = scratch.join("lib");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(lib, d.join("libkiln_runtime.so")).unwrap();
        d
    }
}

/// The ids of an `ids 1 2 3` line.
pub fn ids_of(line: &str) -> Vec<i32> {
    let rest = line
        .strip_prefix("ids")
        .unwrap_or_else(|| panic!("not an ids line: {line}"));
    rest.split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

/// The text of a `text "<json>"` line.
pub fn text_of(line: &str) -> String {
    let json = line
        .strip_prefix("text ")
        .unwrap_or_else(|| panic!("not a text line: {line}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// `kiln generate ARGS --json`'s report.
pub fn kiln_generate_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["generate"];
    all.extend(args);
    all.push("--json");
    let (code, out, err) = kiln(&all);
    assert_eq!(code, 0, "{all:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{all:?}: {e}: {out}"))
}

/// `kiln package MANIFEST --out OUT --include-host EXTRA…`, which must
/// succeed.
pub fn package(manifest: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec!["package", s(manifest), "--out", s(out), "--include-host"];
    args.extend(extra);
    let (code, _, err) = kiln(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
}

/// The tiny checkpoint exported with its KV pair (SEQ 8, P 4, N 16: the
/// export of tests/android.rs, so the compiled modules are shared), its
/// forward and KV modules compiled for the host and arm64 (`kiln package`
/// wants one Android module) and packaged with the host's, no tokenizer,
/// in `dir/assets`. Returns the export and the assets folder.
pub fn tiny_package(tc: &Toolchain, dir: &Path) -> (ExportReport, PathBuf) {
    let r = tiny_kv_modules(tc, dir, &[Target::Host, Target::Arm64]);
    let assets = dir.join("assets");
    package(&r.manifest_path, &assets, &["--no-tokenizer"]);
    (r, assets)
}

/// The prompts and token counts of the ids checks on [`tiny_package`]:
/// within P = 4 (one prefill), and past it (prefilled in two chunks); 9
/// and 14 tokens in all, past SEQ 8, so only the KV pair holds them.
pub const CASES: [(&str, usize); 2] = [("5,17,3", 6), ("5,17,3,9,11,2", 8)];

/// The `ids:N:PROMPT` command of one of [`CASES`].
pub fn ids_command((prompt, n): &(&str, usize)) -> String {
    format!("ids:{n}:{prompt}")
}

/// `kiln generate --kv-cache`'s ids for each of [`CASES`] with the
/// [`tiny_package`] export `r`'s host KV module (none empty).
pub fn kiln_ids(r: &ExportReport) -> Vec<Vec<i32>> {
    let kv_host = r.mlir.with_file_name("tiny-kv-host.vmfb");
    let want: Vec<Vec<i32>> = CASES
        .iter()
        .map(|(prompt, n)| {
            let n = n.to_string();
            let j = kiln_generate_json(&[
                s(&kv_host),
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

/// The ids check on [`tiny_package`]: on local-task with 2 workers,
/// [`CASES`] and the first again (each call starts a new sequence) give
/// `kiln generate --kv-cache`'s ids, then `close`, and a call after it
/// prints `illegal-state` (naming `after_close` when given); on
/// local-sync, IREE's detection of the workers (what armeabi-v7a packages
/// name), the second case gives the same ids, then a prompt past the
/// context N = 16 is an `error` line, and the program exits 0.
pub fn check_generate_ids(p: &impl LineProgram, tc: &Toolchain, after_close: Option<&str>) {
    let dir = tmpdir();
    let (r, assets) = tiny_package(tc, dir.path());
    let want = kiln_ids(&r);
    let mut commands: Vec<String> = CASES.iter().map(ids_command).collect();
    commands.push(ids_command(&CASES[0]));
    commands.extend(["close".into(), "use-after-close".into()]);
    let run = p.run(&assets, "local-task", 2, &commands);
    let rest = run.opened_ids_closed(&[&want[0], &want[1], &want[0]], 1);
    assert!(
        rest[0].starts_with("illegal-state ") && after_close.is_none_or(|n| rest[0].contains(n)),
        "a call after close: {}",
        run.show()
    );
    let long: Vec<String> = (1..=17).map(|i| i.to_string()).collect();
    let commands = [ids_command(&CASES[1]), format!("ids:2:{}", long.join(","))];
    let run = p.run(&assets, "local-sync", 0, &commands);
    let lines = run.ok();
    assert_eq!(lines.len(), 3, "{}", run.show());
    assert_eq!(ids_of(&lines[1]), want[1], "{}", run.show());
    assert!(lines[2].starts_with("error "), "{}", run.show());
}

/// The damaged-package check on [`tiny_package`]: opening it on an
/// unknown device (`cuda`), opening a folder that does not exist, then
/// `more` (the program's own failures, given the intact assets folder;
/// it must leave the folder intact), then opening it with its `.irpa` cut
/// in half: each an `error` line naming the culprit, and exit 0.
pub fn check_damaged_package<P: LineProgram>(p: &P, tc: &Toolchain, more: impl FnOnce(&Path)) {
    let dir = tmpdir();
    let (_, assets) = tiny_package(tc, dir.path());
    p.fails_at_open(&assets, "cuda", "cuda");
    p.fails_at_open(
        &dir.path().join("no-such-package"),
        "local-task",
        "no-such-package",
    );
    more(&assets);
    let irpa = assets.join("tiny.irpa");
    let bytes = std::fs::read(&irpa).unwrap();
    std::fs::write(&irpa, &bytes[..bytes.len() / 2]).unwrap();
    p.fails_at_open(&assets, "local-task", "tiny.irpa");
}
