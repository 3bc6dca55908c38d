//! The Java binding of kiln's runtime library: `runtime/java`'s
//! `dev.kiln.KilnModel`, compiled with `javac`, run in a JVM that loads
//! `libkiln_runtime.so` (kiln-runtime's cdylib) from the target directory
//! (tests/common's `jdk()` and `kiln_runtime_library()` find both), on
//! folders written by `kiln package --include-host`:
//!
//! - a tiny checkpoint's KV pair: `generateIds` gives `kiln generate
//!   --kv-cache`'s ids (a prompt within P and one prefilled in chunks),
//!   on local-task and local-sync; `close` is idempotent and a call after
//!   it is an IllegalStateException; a prompt past the context is a
//!   KilnException;
//! - SmolLM2: `generate` (plain and chat) gives `kiln generate`'s text,
//!   and `chat` holds a conversation over two turns (`reset` starts over);
//! - a truncated `.irpa`, a missing folder and an unknown device: the
//!   KilnException's message is printed and the JVM exits 0.
//!
//! `runtime/java/test/KilnModelCheck.java` drives the model and prints one
//! line per step (`opened`, `ids 1 2 3`, `text "<json>"`, `error <message>`).
//! The JVM runs with `-Xcheck:jni`: a misuse of JNI by the native side is
//! a failure.

use crate::common;
use common::*;
use kiln::export::ExportReport;
use kiln::iree::{Target, Toolchain};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The compiled Java classes and the folder to load `libkiln_runtime.so`
/// from, for one test.
struct Java {
    jdk: Jdk,
    /// `dev/kiln/*.class` and `KilnModelCheck.class`.
    classes: tempfile::TempDir,
    /// The folder holding `libkiln_runtime.so` (`-Djava.library.path`).
    lib_dir: PathBuf,
}

/// One run of KilnModelCheck.
struct Run {
    code: Option<i32>,
    /// stdout's lines.
    lines: Vec<String>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Everything the JVM printed, for assertion messages.
    fn show(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// Asserts exit 0 and no JNI check message, and returns the lines.
    fn ok(&self) -> &[String] {
        assert_eq!(self.code, Some(0), "{}", self.show());
        for bad in ["WARNING in native method", "FATAL ERROR in native method"] {
            assert!(
                !self.stdout.contains(bad) && !self.stderr.contains(bad),
                "-Xcheck:jni: {}",
                self.show()
            );
        }
        &self.lines
    }
}

/// The JDK and the library (or `None`: a skip, or a failure under CI /
/// `KILN_REQUIRE_IREE=1`), with the Java sources compiled (`javac
/// --release 17`, every lint an error).
fn java() -> Option<Java> {
    let jdk = jdk()?;
    let lib = kiln_runtime_library()?;
    let classes = tmpdir();
    let src = root().join("runtime/java");
    let out = Command::new(&jdk.javac)
        .args(["--release", "17", "-Xlint:all", "-Werror", "-d"])
        .arg(classes.path())
        .arg(src.join("dev/kiln/KilnModel.java"))
        .arg(src.join("dev/kiln/KilnException.java"))
        .arg(src.join("test/KilnModelCheck.java"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "javac: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // System.loadLibrary("kiln_runtime") looks for exactly this name; a
    // copy in deps/ may carry cargo's hash.
    let lib_dir = if lib.file_name().is_some_and(|n| n == "libkiln_runtime.so") {
        lib.parent().unwrap().to_path_buf()
    } else {
        let d = classes.path().join("lib");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(&lib, d.join("libkiln_runtime.so")).unwrap();
        d
    };
    eprintln!(
        "java_library: {} with {}",
        jdk.java.display(),
        lib.display()
    );
    Some(Java {
        jdk,
        classes,
        lib_dir,
    })
}

impl Java {
    /// `KilnModelCheck PACKAGE DEVICE WORKERS COMMANDS…` in a JVM.
    fn run(&self, package: &Path, device: &str, workers: u32, commands: &[String]) -> Run {
        let out = Command::new(&self.jdk.java)
            .arg("-Xcheck:jni")
            .arg(format!("-Djava.library.path={}", self.lib_dir.display()))
            .arg("-cp")
            .arg(self.classes.path())
            .arg("KilnModelCheck")
            .arg(package)
            .arg(device)
            .arg(workers.to_string())
            .args(commands)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        Run {
            code: out.status.code(),
            lines: stdout.lines().map(str::to_string).collect(),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The ids of an `ids 1 2 3` line.
pub(crate) fn ids_of(line: &str) -> Vec<i32> {
    let rest = line
        .strip_prefix("ids")
        .unwrap_or_else(|| panic!("not an ids line: {line}"));
    rest.split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

/// The text of a `text "<json>"` line.
fn text_of(line: &str) -> String {
    let json = line
        .strip_prefix("text ")
        .unwrap_or_else(|| panic!("not a text line: {line}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{line}: {e}"))
}

pub(crate) fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `kiln generate ARGS --json`'s report.
pub(crate) fn kiln_generate_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["generate"];
    all.extend(args);
    all.push("--json");
    let (code, out, err) = kiln(&all);
    assert_eq!(code, 0, "{all:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{all:?}: {e}: {out}"))
}

/// `kiln package MANIFEST --out OUT --include-host EXTRA…`, which must
/// succeed.
pub(crate) fn package(manifest: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec!["package", s(manifest), "--out", s(out), "--include-host"];
    args.extend(extra);
    let (code, _, err) = kiln(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
}

/// The tiny checkpoint exported with its KV pair (SEQ 8, P 4, N 16: the
/// export of tests/android.rs, so the compiled modules are shared), its
/// forward and KV modules compiled for the host and arm64 (`kiln package`
/// wants one Android module) and packaged with the host's, no tokenizer,
/// in `dir/assets`. Returns the export and the assets folder. (Also
/// tests/c_library.rs's package.)
pub(crate) fn tiny_package(tc: &Toolchain, dir: &Path) -> (ExportReport, PathBuf) {
    let r = tiny_kv_modules(tc, dir, &[Target::Host, Target::Arm64]);
    let assets = dir.join("assets");
    package(&r.manifest_path, &assets, &["--no-tokenizer"]);
    (r, assets)
}

#[test]
fn generate_ids_on_a_packaged_kv_pair_equal_kiln_generate() {
    let Some(tc) = toolchain() else { return };
    let Some(java) = java() else { return };
    let dir = tmpdir();
    let (r, assets) = tiny_package(&tc, dir.path());
    let kv_host = r.mlir.with_file_name("tiny-kv-host.vmfb");
    // Within P (one prefill), and past it (prefilled in two chunks); 9 and
    // 14 tokens in all: past SEQ 8, so only the KV pair holds them.
    let cases = [("5,17,3", 6), ("5,17,3,9,11,2", 8)];
    let want: Vec<Vec<i32>> = cases
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
    let ids_cmd = |(prompt, n): &(&str, usize)| format!("ids:{n}:{prompt}");
    // The same ids again: each call starts a new sequence.
    let mut commands: Vec<String> = cases.iter().map(ids_cmd).collect();
    commands.push(ids_cmd(&cases[0]));
    commands.extend(["close".into(), "use-after-close".into()]);
    let run = java.run(&assets, "local-task", 2, &commands);
    let lines = run.ok();
    assert_eq!(lines.len(), 6, "{}", run.show());
    assert_eq!(lines[0], "opened", "{}", run.show());
    for (line, want) in lines[1..4].iter().zip([&want[0], &want[1], &want[0]]) {
        assert_eq!(&ids_of(line), want, "{}", run.show());
    }
    assert_eq!(lines[4], "closed", "{}", run.show());
    assert!(
        lines[5].starts_with("illegal-state "),
        "a call after close: {}",
        run.show()
    );
    // local-sync (what armeabi-v7a packages name), IREE's detection of the
    // workers: the same ids; then a prompt past the context N = 16 is a
    // KilnException, and the JVM exits 0.
    let long: Vec<String> = (1..=17).map(|i| i.to_string()).collect();
    let commands = [ids_cmd(&cases[1]), format!("ids:2:{}", long.join(","))];
    let run = java.run(&assets, "local-sync", 0, &commands);
    let lines = run.ok();
    assert_eq!(lines.len(), 3, "{}", run.show());
    assert_eq!(ids_of(&lines[1]), want[1], "{}", run.show());
    assert!(lines[2].starts_with("error "), "{}", run.show());
}

/// The SmolLM2 export's own files (manifest, archives, MLIR), hard-linked into
/// `dir` beside this test's modules: the shared export's folder is only
/// read (other tests run modules there).
fn smollm2_export_copy(tc: &Toolchain, e: &SmolExport, dir: &Path) -> PathBuf {
    let r = &e.report;
    let from = r.manifest_path.parent().unwrap();
    let mut files: Vec<PathBuf> = vec![r.manifest_path.clone()];
    files.extend(r.manifest.files.values().map(|f| from.join(&f.path)));
    for f in files {
        // Hard links (a copy across file systems): `kiln package` refuses a
        // symbolic link that leaves the export's folder.
        let to = dir.join(f.file_name().unwrap());
        if std::fs::hard_link(&f, &to).is_err() {
            std::fs::copy(&f, &to).unwrap();
        }
    }
    // The modules tests/smollm2.rs compiles too (shared by common::compiled).
    let kv_mlir = r.kv_mlir.as_ref().unwrap();
    for (mlir, target, file) in [
        (&r.mlir, Target::Host, "smollm2-host.vmfb"),
        (&r.mlir, Target::Arm64, "smollm2-arm64.vmfb"),
        (kv_mlir, Target::Host, "smollm2-kv-host.vmfb"),
    ] {
        common::compiled::compile(tc, mlir, &target, &dir.join(file), &[]).unwrap();
    }
    dir.join("smollm2.json")
}

#[test]
fn smollm2_package_generates_kiln_generates_text_and_chats() {
    let Some(tc) = toolchain() else { return };
    let Some(e) = smollm2_export() else { return };
    let Some(java) = java() else { return };
    let dir = tmpdir();
    let exp = dir.path().join("exp");
    std::fs::create_dir_all(&exp).unwrap();
    let manifest = smollm2_export_copy(&tc, e, &exp);
    let assets = dir.path().join("assets");
    package(&manifest, &assets, &[]);
    let kv_host = exp.join("smollm2-kv-host.vmfb");
    let smol = smol_expected();
    let p = &smol.prompts[0];
    let n = p.generate.max_new_tokens.to_string();
    let question = "What is the capital of France?";
    let kiln_text = |chat: bool, prompt: &str| -> String {
        let mut args = vec![
            s(&kv_host),
            "--kv-cache",
            "--prompt",
            prompt,
            "--max-new-tokens",
            &n,
        ];
        if chat {
            args.push("--chat");
        }
        let j = kiln_generate_json(&args);
        j["text"].as_str().unwrap().to_string()
    };
    let plain = kiln_text(false, &p.text);
    let chat = kiln_text(true, question);
    let commands = [
        format!("generate:{n}:{}", p.text),
        format!("generate-chat:{n}:{question}"),
        format!("chat:{n}:{question}"),
        format!("chat:{n}:And of Germany?"),
        "reset".into(),
        format!("chat:{n}:{question}"),
    ];
    let run = java.run(&assets, "local-task", 0, &commands);
    let lines = run.ok();
    assert_eq!(lines.len(), 7, "{}", run.show());
    assert_eq!(lines[0], "opened", "{}", run.show());
    assert_eq!(text_of(&lines[1]), plain, "generate: {}", run.show());
    assert_eq!(text_of(&lines[2]), chat, "generate, chat: {}", run.show());
    // The first turn is the chat prompt's answer; the second, kept after
    // it in the caches, answers the follow-up (as `kiln chat` does,
    // tests/smollm2.rs); after a reset the first turn again.
    assert_eq!(text_of(&lines[3]), chat, "chat turn 1: {}", run.show());
    assert!(
        text_of(&lines[4]).contains("Berlin"),
        "chat turn 2: {}",
        run.show()
    );
    assert_eq!(lines[5], "reset", "{}", run.show());
    assert_eq!(text_of(&lines[6]), chat, "chat after reset: {}", run.show());
}

#[test]
fn a_damaged_package_is_a_kiln_exception_and_the_jvm_exits_0() {
    let Some(tc) = toolchain() else { return };
    let Some(java) = java() else { return };
    let dir = tmpdir();
    let (_, assets) = tiny_package(&tc, dir.path());
    let ids = ["ids:2:5,17,3".to_string()];
    // The error line of one run that must fail at open, naming `needle`.
    let fails = |package: &Path, device: &str, needle: &str| {
        let run = java.run(package, device, 0, &ids);
        let lines = run.ok();
        assert_eq!(lines.len(), 1, "{}", run.show());
        assert!(
            lines[0].starts_with("error ") && lines[0].contains(needle),
            "{needle}: {}",
            run.show()
        );
    };
    // An unknown device, on an intact package.
    fails(&assets, "cuda", "cuda");
    // A folder that does not exist.
    fails(
        &dir.path().join("no-such-package"),
        "local-task",
        "no-such-package",
    );
    // The archive cut in half.
    let irpa = assets.join("tiny.irpa");
    let bytes = std::fs::read(&irpa).unwrap();
    std::fs::write(&irpa, &bytes[..bytes.len() / 2]).unwrap();
    fails(&assets, "local-task", "tiny.irpa");
}
