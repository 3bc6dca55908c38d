//! `kiln verify` (issue 30): a fresh package passes; each tamper (a byte
//! flipped in a module, a truncated archive, a module swapped in from
//! another export, a manifest edited to another SEQ) fails with exit 1 and
//! names the file and the fault; `--rebuild` makes the package's archive
//! and modules again from the recorded recipe, byte for byte.

use crate::common;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `kiln ARGS`: exit code, stdout, stderr.
fn kiln(args: &[&str]) -> (i32, String, String) {
    common::kiln(args)
}

/// An export of a tiny checkpoint at SEQ 8 with the KV pair, its forward
/// and KV modules compiled for arm64 by `kiln compile` (which records how),
/// packaged without a tokenizer; and the arm64 forward module of the same
/// checkpoint exported at SEQ 16. Made once for the tests of this file.
struct Fixture {
    _dir: tempfile::TempDir,
    export: PathBuf,
    assets: PathBuf,
    seq16_module: PathBuf,
    /// The SEQ 16 export's host module.
    host_module: PathBuf,
}

fn fixture() -> Option<&'static Fixture> {
    static F: OnceLock<Option<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        common::toolchain()?;
        let dir = common::tmpdir();
        let ckpt = common::fixture("hf/tiny-llama-tied-gqa");
        let ckpt = ckpt.to_str().expect("UTF-8");
        let export = dir.path().join("export");
        let other = dir.path().join("other");
        let assets = dir.path().join("assets");
        let s = |p: &Path| p.to_str().expect("UTF-8").to_string();
        let run = |args: &[&str]| {
            let (code, _, err) = kiln(args);
            assert_eq!(code, 0, "kiln {args:?}: {err}");
        };
        run(&[
            "export",
            ckpt,
            "--seq",
            "8",
            "--name",
            "t",
            "--kv-cache",
            // An attention span: its functions are checked and rebuilt too.
            "--kv-spans",
            "12",
            "-o",
            &s(&export),
            "-q",
        ]);
        let mlir = s(&export.join("t-gen.mlir"));
        let kv_mlir = s(&export.join("t-kv-gen.mlir"));
        run(&["compile", &mlir, "-t", "arm64", "-q"]);
        // Packed at compile time: its packed archive is packaged, checked
        // and rebuilt too.
        run(&["compile", &kv_mlir, "-t", "arm64", "--pack", "-q"]);
        run(&[
            "package",
            &s(&export.join("t.json")),
            "-o",
            &s(&assets),
            "--no-tokenizer",
            "-q",
        ]);
        run(&[
            "export",
            ckpt,
            "--seq",
            "16",
            "--name",
            "t",
            "-o",
            &s(&other),
            "-q",
        ]);
        run(&[
            "compile",
            &s(&other.join("t-gen.mlir")),
            "-t",
            "arm64,host",
            "-q",
        ]);
        Some(Fixture {
            export,
            assets,
            seq16_module: other.join("t-arm64.vmfb"),
            host_module: other.join("t-host.vmfb"),
            _dir: dir,
        })
    })
    .as_ref()
}

/// A copy of the assets folder in a fresh temporary folder.
fn copy_of_assets(f: &Fixture) -> tempfile::TempDir {
    let dir = common::tmpdir();
    for entry in std::fs::read_dir(&f.assets).expect("read assets") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).expect("copy");
    }
    dir
}

/// `kiln verify DIR` on a tampered folder: exit 1, every expected fault on
/// stdout (`FILE: FAULT`).
fn fails_with(dir: &Path, expected: &[(&str, &str)]) {
    let (code, out, err) = kiln(&["verify", dir.to_str().unwrap()]);
    assert_eq!(code, 1, "stdout: {out}\nstderr: {err}");
    for (file, fault) in expected {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{file}: ")) && l.contains(fault)),
            "no fault of {file} saying {fault:?} in:\n{out}"
        );
    }
}

#[test]
fn fresh_package_and_export_pass() {
    let Some(f) = fixture() else { return };
    for dir in [&f.assets, &f.export] {
        let (code, out, err) = kiln(&["verify", dir.to_str().unwrap()]);
        assert_eq!(code, 0, "{}: {out}{err}", dir.display());
        assert!(out.is_empty(), "{out}");
        assert!(err.contains("passed"), "{err}");
    }
    let (code, out, _) = kiln(&["verify", f.assets.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0);
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(report["passed"], true);
    assert_eq!(report["models"][0]["kind"], "assets");
    // The forward and the KV module, the archive and the KV module's
    // packed archive, the manifest lists.
    assert_eq!(report["models"][0]["modules"], 2);
    assert_eq!(report["models"][0]["files"], 4);
}

#[test]
fn a_flipped_byte_in_a_module_is_named() {
    let Some(f) = fixture() else { return };
    let dir = copy_of_assets(f);
    let module = dir.path().join("t-kv-arm64-v8a.vmfb");
    let mut bytes = std::fs::read(&module).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&module, bytes).expect("write");
    fails_with(dir.path(), &[("t-kv-arm64-v8a.vmfb", "sha256")]);
}

#[test]
fn a_truncated_archive_is_named() {
    let Some(f) = fixture() else { return };
    let dir = copy_of_assets(f);
    let irpa = dir.path().join("t.irpa");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&irpa)
        .expect("open");
    file.set_len(4096).expect("truncate");
    fails_with(
        dir.path(),
        &[
            ("t.irpa", "4096 bytes, the manifest says"),
            ("t.irpa", "not a readable parameter archive"),
        ],
    );
}

#[test]
fn a_module_of_another_export_is_named() {
    let Some(f) = fixture() else { return };
    let dir = copy_of_assets(f);
    std::fs::copy(&f.seq16_module, dir.path().join("t-arm64-v8a.vmfb")).expect("copy");
    fails_with(
        dir.path(),
        &[
            ("t-arm64-v8a.vmfb", "the manifest says"),
            (
                "t-arm64-v8a.vmfb",
                "@t is (tensor<1x16xi32>) -> (tensor<16xi32>), the manifest says (tensor<1x8xi32>) -> (tensor<8xi32>)",
            ),
        ],
    );
}

#[test]
fn a_manifest_edited_to_another_seq_is_named() {
    let Some(f) = fixture() else { return };
    let dir = copy_of_assets(f);
    let manifest = dir.path().join("t.manifest.json");
    let text = std::fs::read_to_string(&manifest).expect("read");
    assert!(text.contains("\"seq\": 8,"));
    std::fs::write(&manifest, text.replace("\"seq\": 8,", "\"seq\": 16,")).expect("write");
    fails_with(
        dir.path(),
        &[
            ("t.manifest.json", "are not those of SEQ 16"),
            (
                "t-arm64-v8a.vmfb",
                "@t is (tensor<1x8xi32>) -> (tensor<8xi32>), the manifest says (tensor<1x16xi32>) -> (tensor<16xi32>)",
            ),
        ],
    );
}

#[test]
fn rebuild_reproduces_the_package_byte_for_byte() {
    let Some(f) = fixture() else { return };
    let (code, out, err) = kiln(&["verify", f.assets.to_str().unwrap(), "--rebuild", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    let rebuilt: Vec<&str> = report["models"][0]["rebuilt"]
        .as_array()
        .expect("rebuilt")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for file in [
        "t.irpa",
        "t-arm64-v8a.vmfb",
        "t-kv-arm64-v8a.vmfb",
        "t-kv-arm64-v8a.packed.irpa",
    ] {
        assert!(rebuilt.contains(&file), "{file} not rebuilt: {out}");
    }
    assert_eq!(report["models"][0]["not_rebuilt"], serde_json::json!([]));
}

/// tests/attacks/packages/cases.json: each attack on a copy of the package
/// (its `ops`, described in the file's `_doc`) fails with exit 1 and every
/// fault it expects; nothing outside the copy is read under a refused name.
#[test]
fn package_attacks_are_named() {
    let Some(f) = fixture() else { return };
    let corpus = crate::common::root().join("tests/attacks/packages/cases.json");
    let cases: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&corpus).expect("read corpus")).expect("JSON");
    let cases = cases.as_object().expect("an object");
    assert!(cases.len() >= 20, "at least 20 package attacks");
    for (name, case) in cases.iter().filter(|(k, _)| !k.starts_with('_')) {
        // The package in `parent/pkg`, so `../` names stay in the test's
        // own temporary folder.
        let parent = common::tmpdir();
        let dir = parent.path().join("pkg");
        std::fs::create_dir(&dir).expect("mkdir");
        for entry in std::fs::read_dir(&f.assets).expect("read assets") {
            let entry = entry.expect("entry");
            std::fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy");
        }
        for op in case["ops"].as_array().expect("ops") {
            apply(&dir, f, op.as_array().expect("an op is a list"));
        }
        let (code, out, err) = kiln(&["verify", dir.to_str().unwrap()]);
        assert_eq!(code, 1, "{name}: stdout: {out}\nstderr: {err}");
        for e in case["expect"].as_array().expect("expect") {
            let (file, fault) = (e[0].as_str().unwrap(), e[1].as_str().unwrap());
            assert!(
                out.lines()
                    .any(|l| l.starts_with(&format!("{file}: ")) && l.contains(fault)),
                "{name}: no fault of {file} saying {fault:?} in:\n{out}{err}"
            );
        }
    }
}

/// Applies one op of the package corpus to the package in `dir`.
fn apply(dir: &Path, f: &Fixture, op: &[serde_json::Value]) {
    let manifest = dir.join("t.manifest.json");
    let arg = |i: usize| op[i].as_str().expect("a string argument").to_string();
    let edit = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
        change(&mut m);
        std::fs::write(&manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    };
    let record = |name: &str| {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).expect("the recorded file");
        let sha = {
            use sha2::Digest;
            let h = sha2::Sha256::digest(&bytes);
            h.iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        (bytes.len(), sha)
    };
    match op[0].as_str().expect("an op name") {
        "record" => {
            let name = arg(1);
            let (len, sha) = record(&name);
            edit(&|m| {
                let r = serde_json::json!({"path": name, "bytes": len, "sha256": sha});
                m["files"].as_array_mut().unwrap().push(r);
            });
        }
        "set" => {
            let (pointer, value) = (arg(1), op[2].clone());
            edit(&|m| {
                let (parent, key) = pointer.rsplit_once('/').unwrap();
                let parent = m.pointer_mut(parent).expect("the pointer's parent");
                match parent {
                    serde_json::Value::Array(a) => a[key.parse::<usize>().unwrap()] = value.clone(),
                    p => p[key] = value.clone(),
                }
            });
        }
        "write" => std::fs::write(dir.join(arg(1)), arg(2)).expect("write"),
        "copy" => {
            let (from, to) = (arg(1), arg(2));
            let from = match from.as_str() {
                "$HOST" => f.host_module.clone(),
                other => dir.join(other),
            };
            std::fs::copy(from, dir.join(&to)).expect("copy");
            let (len, sha) = record(&to);
            edit(&|m| {
                for r in m["files"].as_array_mut().unwrap() {
                    if r["path"] == to.as_str() {
                        r["bytes"] = len.into();
                        r["sha256"] = sha.clone().into();
                    }
                }
            });
        }
        "symlink" => {
            #[cfg(unix)]
            std::os::unix::fs::symlink(arg(1), dir.join(arg(2))).expect("symlink");
        }
        "remove" => std::fs::remove_file(dir.join(arg(1))).expect("remove"),
        "truncate" => {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join(arg(1)))
                .expect("open");
            file.set_len(op[2].as_u64().unwrap()).expect("truncate");
        }
        "flip" => {
            let path = dir.join(arg(1));
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[op[2].as_u64().unwrap() as usize] ^= 0x40;
            std::fs::write(&path, bytes).unwrap();
        }
        other => panic!("unknown op {other}"),
    }
}

/// `vocab_size` is checked against the rows of a matrix stored in parts
/// too: the i8 rows of `w8a8` (one f32 scale per row) and the GGML blocks
/// of `keep` (the elements their parts hold, at the final norm's width).
/// Exports only: no IREE tool runs.
#[test]
fn vocab_size_is_checked_against_i8_rows_and_ggml_blocks() {
    for (ckpt, weights) in [
        ("hf/tiny-llama-untied-mha", "w8a8"),
        ("gguf/quant/tiny-llama-quant-mix.gguf", "keep"),
    ] {
        let dir = common::tmpdir();
        let out = dir.path().join("e");
        let ckpt = common::fixture(ckpt);
        let (code, _, err) = kiln(&[
            "export",
            ckpt.to_str().unwrap(),
            "--seq",
            "8",
            "--name",
            "t",
            "--weights",
            weights,
            "--out",
            out.to_str().unwrap(),
            "-q",
        ]);
        assert_eq!(code, 0, "{weights}: {err}");
        let (code, out_text, err) = kiln(&["verify", out.to_str().unwrap()]);
        assert_eq!(code, 0, "{weights}: {out_text}{err}");
        let path = out.join("t.json");
        let mut m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let half = m["vocab_size"].as_u64().unwrap() / 2;
        m["vocab_size"] = half.into();
        m["config"]["vocab_size"] = half.into();
        std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
        fails_with(
            &out,
            &[(
                "t.json",
                &format!("its vocab_size {half} does not fit model.embed_tokens.weight's parts"),
            )],
        );
    }
}
