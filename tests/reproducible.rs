//! Same inputs, same bytes (issue 30): two exports and compiles of one
//! checkpoint, in different folders, from different working directories
//! and under different file names, give byte-identical MLIR, archives,
//! manifests and modules for every target.

use crate::common;
use std::path::Path;

/// `kiln ARGS` run in `cwd`; panics unless it exits 0.
fn kiln_in(cwd: &Path, args: &[&str]) {
    let out = common::kiln_command()
        .current_dir(cwd)
        .args(args)
        .arg("-q")
        .output()
        .expect("run kiln");
    assert!(
        out.status.success(),
        "kiln {args:?} in {}: {}",
        cwd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn exports_and_modules_are_byte_identical_whatever_the_folder() {
    if common::toolchain().is_none() {
        return;
    }
    let ckpt = common::fixture("hf/tiny-llama-tied-gqa");
    let ckpt = ckpt.to_str().expect("a UTF-8 path");
    let root = common::tmpdir();
    let a = root.path().join("a");
    let b = root.path().join("b/c/d");
    std::fs::create_dir_all(&b).expect("mkdir");
    let export = ["export", ckpt, "--seq", "8", "--name", "t", "--kv-cache"];
    // One export by an absolute folder, one by a relative folder elsewhere.
    kiln_in(
        root.path(),
        &[&export[..], &["--out", a.to_str().unwrap()]].concat(),
    );
    kiln_in(&b, &[&export[..], &["--out", "."]].concat());
    for file in [
        "t-gen.mlir",
        "t-kv-gen.mlir",
        "t.irpa",
        "t.safetensors",
        "t.json",
    ] {
        assert!(
            bytes(&a.join(file)) == bytes(&b.join(file)),
            "{file} differs between two folders"
        );
    }
    // The same module compiled by a relative path from the root, by a bare
    // name from its own folder, and (host) under another file name from a
    // third folder: the bytes are equal.
    let targets = "host,arm64,arm32,vulkan";
    kiln_in(root.path(), &["compile", "a/t-gen.mlir", "-t", targets]);
    kiln_in(&b, &["compile", "t-gen.mlir", "-t", targets]);
    let other = root.path().join("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::copy(b.join("t-gen.mlir"), other.join("renamed.mlir")).expect("copy");
    kiln_in(
        &b,
        &[
            "compile",
            "../../../other/renamed.mlir",
            "-t",
            "host",
            "-o",
            ".",
        ],
    );
    for t in ["host", "arm64", "arm32", "vulkan"] {
        let first = bytes(&a.join(format!("t-{t}.vmfb")));
        assert!(
            first == bytes(&b.join(format!("t-{t}.vmfb"))),
            "{t}: the module's bytes depend on the folder"
        );
    }
    assert!(
        bytes(&a.join("t-host.vmfb")) == bytes(&b.join("renamed-host.vmfb")),
        "host: the module's bytes depend on the file's name"
    );
}
