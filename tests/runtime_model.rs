//! `kiln_runtime::Model`, the app's entry point, called from Rust on
//! folders written by `kiln package` (the JNI and C layers over it are
//! tests/java_library.rs and tests/c_library.rs):
//!
//! - a tiny KV pair packaged with its host, arm64 and Vulkan modules: the
//!   Vulkan module on lavapipe generates the host module's ids, and a
//!   chat needs a tokenizer; `kiln generate` and `kiln run` give the same
//!   ids with the IREE toolchain pointed at nothing (in-process, no tool);
//! - the same package without the host module: `open` on this CPU names
//!   the ABI it looked for and the modules there are;
//! - a package whose manifest was edited: a file of another size, a name
//!   outside the folder, another format: each refused before IREE maps a
//!   file.

use crate::common;
use common::*;
use kiln::export::ExportReport;
use kiln::iree::Target;
use kiln_runtime::{Device, Model, ModelError};
use std::path::{Path, PathBuf};

fn package(r: &ExportReport, out: &Path, extra: &[&str]) -> PathBuf {
    let m = r.manifest_path.to_str().unwrap();
    let mut args = vec![
        "package",
        m,
        "--out",
        out.to_str().unwrap(),
        "--no-tokenizer",
    ];
    args.extend(extra);
    let (code, _, err) = kiln(&args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out.to_path_buf()
}

fn open_err(dir: &Path, device: Device) -> String {
    match Model::open(dir, device, None) {
        Ok(_) => panic!("{} opened", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_packaged_kv_pair_runs_on_the_host_and_on_lavapipe_with_the_same_ids() {
    let Some(tc) = toolchain() else { return };
    let dir = tmpdir();
    let r = tiny_kv_modules(
        &tc,
        dir.path(),
        &[
            Target::Host,
            Target::Arm64,
            Target::parse("vulkan").unwrap(),
        ],
    );
    let assets = package(&r, &dir.path().join("assets"), &["--include-host"]);
    let prompt = [5, 17, 3, 9, 11, 2];
    let mut host = Model::open(&assets, Device::LocalTask, Some(2)).unwrap();
    let want = host.generate_ids(&prompt, 8).unwrap();
    assert_eq!(want.len(), 8, "{want:?}");
    // Again: each call is a fresh sequence.
    assert_eq!(host.generate_ids(&prompt, 8).unwrap(), want);
    // A chat needs a tokenizer; an id past the vocabulary is refused.
    assert!(matches!(
        host.chat("hi", 4),
        Err(ModelError::NoTokenizer { .. })
    ));
    let e = host.generate_ids(&[5, 4096], 4).unwrap_err().to_string();
    assert!(e.contains("4096") && e.contains("vocabulary"), "{e}");
    let e = host.generate_ids(&[1; 17], 4).unwrap_err().to_string();
    assert!(e.contains("max context N is 16"), "{e}");
    drop(host);
    // kiln generate and kiln run on this machine need no IREE tool: with
    // the toolchain pointed at nothing they run in-process all the same.
    let exp = r.mlir.parent().unwrap();
    let no_tools = |args: &[&str]| {
        let out = kiln_command()
            .args(args)
            .env("KILN_IREE_DIR", exp.join("no-iree-here"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let kv_host = exp.join("tiny-kv-host.vmfb");
    let kv_host = kv_host.to_str().unwrap();
    let j = no_tools(&[
        "generate",
        kv_host,
        "--kv-cache",
        "--tokens",
        "5,17,3,9,11,2",
        "--max-new-tokens",
        "8",
        "--json",
    ]);
    assert_eq!(j["ids"], serde_json::json!(want), "kiln generate");
    let host = exp.join("tiny-host.vmfb");
    let j = no_tools(&[
        "run",
        host.to_str().unwrap(),
        "--tokens",
        "5,17,3",
        "--json",
    ]);
    assert_eq!(j["ids"].as_array().map(Vec::len), Some(8), "kiln run: {j}");
    if lavapipe_present() {
        let mut gpu = Model::open(&assets, Device::Vulkan, None).unwrap();
        assert_eq!(gpu.generate_ids(&prompt, 8).unwrap(), want, "lavapipe");
    }
    // Without the host's module, this CPU has none.
    let android = package(&r, &dir.path().join("android"), &[]);
    let e = open_err(&android, Device::LocalTask);
    assert!(
        e.contains("no module for host") && e.contains("arm64-v8a"),
        "{e}"
    );
}

#[test]
fn an_edited_package_is_refused_before_a_file_is_mapped() {
    let Some(tc) = toolchain() else { return };
    let dir = tmpdir();
    let r = tiny_kv_modules(&tc, dir.path(), &[Target::Host, Target::Arm64]);
    let assets = package(&r, &dir.path().join("assets"), &["--include-host"]);
    let manifest = assets.join("tiny.manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let edit = |from: &str, to: &str| {
        let d = tmpdir();
        for f in std::fs::read_dir(&assets).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, d.path().join(f.file_name().unwrap())).unwrap();
        }
        assert!(text.contains(from), "{from}");
        let edited = text.replacen(from, to, 1);
        std::fs::write(d.path().join("tiny.manifest.json"), edited).unwrap();
        d
    };
    // The archive one byte short of its record.
    let d = edit("", "");
    let irpa = d.path().join("tiny.irpa");
    let len = std::fs::metadata(&irpa).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&irpa)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let e = open_err(d.path(), Device::LocalTask);
    assert!(e.contains("tiny.irpa") && e.contains("bytes"), "{e}");
    // A module path outside the folder.
    let d = edit(
        "\"path\": \"tiny-kv-host.vmfb\"",
        "\"path\": \"../tiny-kv-host.vmfb\"",
    );
    let e = open_err(d.path(), Device::LocalTask);
    assert!(e.contains("../tiny-kv-host.vmfb"), "{e}");
    // Another format.
    let d = edit("kiln-android-assets/1", "kiln-android-assets/9");
    let e = open_err(d.path(), Device::LocalTask);
    assert!(e.contains("kiln-android-assets/9"), "{e}");
    // Not a package.
    let e = open_err(&r.mlir.parent().unwrap().join("nope"), Device::LocalTask);
    assert!(e.contains("nope"), "{e}");
}
