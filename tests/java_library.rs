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
//! line per step (`opened`, `ids 1 2 3`, `text "<json>"`, `error <message>`):
//! tests/common/line_driver.rs runs it and holds the checks this file shares
//! with tests/c_library.rs; this file compiles the classes and starts the
//! JVM. The JVM runs with `-Xcheck:jni`: a misuse of JNI by the native side
//! is a failure.

use crate::common;
use common::line_driver::*;
use common::*;
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
    let lib_dir = library_dir(&lib, classes.path());
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

impl LineProgram for Java {
    fn name(&self) -> &'static str {
        "java_library"
    }

    /// `KilnModelCheck` in a JVM with `-Xcheck:jni`.
    fn command(&self) -> Command {
        let mut c = Command::new(&self.jdk.java);
        c.arg("-Xcheck:jni")
            .arg(format!("-Djava.library.path={}", self.lib_dir.display()))
            .arg("-cp")
            .arg(self.classes.path())
            .arg("KilnModelCheck");
        c
    }

    /// `-Xcheck:jni`'s messages: a misuse of JNI by the native side.
    fn forbidden(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("WARNING in native method", "-Xcheck:jni"),
            ("FATAL ERROR in native method", "-Xcheck:jni"),
        ]
    }
}

#[test]
fn generate_ids_on_a_packaged_kv_pair_equal_kiln_generate() {
    let Some(tc) = toolchain() else { return };
    let Some(java) = java() else { return };
    check_generate_ids(&java, &tc, None);
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
    check_damaged_package(&java, &tc, |_| {});
}
