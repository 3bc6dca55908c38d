//! The command line's surface: shell completions, closed sets of values
//! as clap value enums (listed in help, refused with the possible values),
//! and environment variables shown in help.

use crate::common;
use common::{kiln, VERBS};

#[test]
fn completions_name_every_verb_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, out, err) = kiln(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        for verb in VERBS {
            assert!(out.contains(verb), "{shell}: no {verb}");
        }
        // Flags of a verb, and the values of a value enum.
        assert!(out.contains("weights-for"), "{shell}");
        assert!(
            out.contains("w8a8") && out.contains("local-task"),
            "{shell}"
        );
    }
    let (code, out, err) = kiln(&["completions", "tcsh"]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(
        err.contains("invalid value 'tcsh'") && err.contains("bash"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn value_enums_and_environment_variables_show_in_help() {
    for verb in ["run", "generate", "chat"] {
        let (code, out, err) = kiln(&[verb, "--help"]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("[env: KILN_TASK_GROUPS=") && out.contains("local-sync"),
            "{verb}: {out}"
        );
    }
    let (_, out, _) = kiln(&["export", "--help"]);
    for form in ["keep", "q8_0", "q4_0", "w8a8"] {
        assert!(out.contains(form), "{form}: {out}");
    }
    let (code, _, err) = kiln(&["export", "x.gguf", "--kv-cache", "--kv-dtype", "f16"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid value 'f16' for '--kv-dtype") && err.contains("bf16"),
        "{err}"
    );
    // A bad value from the environment is refused like a bad flag.
    let out = common::kiln_command()
        .args(["run", "m.vmfb", "--tokens", "1"])
        .env("KILN_TASK_GROUPS", "two")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("'two'") && err.contains("--task-groups"),
        "{err}"
    );
}

/// One JSON document on stdout, nothing on stderr.
fn json_of(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = kiln(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    assert!(
        err.is_empty(),
        "{args:?} printed on stderr under --json: {err}"
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
}

#[test]
fn json_reports_and_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let d = |p: &str| dir.path().join(p).to_str().unwrap().to_string();
    let ckpt = common::root().join("tests/fixtures/hf/tiny-llama-tied-gqa");
    let ckpt = ckpt.to_str().unwrap();
    // --quiet: no status lines.
    let (code, out, err) = kiln(&["-q", "export", ckpt, "--seq", "8", "--out", &d("q")]);
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
    let e = json_of(&["export", ckpt, "--seq", "8", "--out", &d("e"), "--json"]);
    assert_eq!(
        e["manifest"]["format"],
        kiln::manifest::ExportManifest::FORMAT
    );
    assert_eq!(e["manifest"]["seq"], 8);
    let mlir = e["mlir"].as_str().unwrap().to_string();
    assert!(std::path::Path::new(&mlir).is_file());
    let Some(_tc) = common::toolchain() else {
        return;
    };
    let c = json_of(&["compile", &mlir, "--target", "host,arm64", "--json"]);
    let modules = c["modules"].as_array().unwrap();
    assert_eq!(modules.len(), 2);
    assert_eq!(modules[0]["target"], "host");
    let host = modules[0]["path"].as_str().unwrap().to_string();
    let r = json_of(&["run", &host, "--tokens", "3,1,4", "--json"]);
    assert_eq!(r["ids"].as_array().unwrap().len(), 8);
    assert_eq!(r["device"], "local-task");
    let p = json_of(&[
        "package",
        e["manifest_path"].as_str().unwrap(),
        "--no-tokenizer",
        "-o",
        &d("assets"),
        "--json",
    ]);
    assert_eq!(
        p["manifest"]["format"],
        kiln::manifest::AssetsManifest::FORMAT
    );
    assert!(p["manifest"]["modules"]["arm64-v8a"].is_object(), "{p}");
    assert!(p["written"].as_array().unwrap().len() >= 3);
}
