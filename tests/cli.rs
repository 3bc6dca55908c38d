//! The command line's surface: shell completions, closed sets of values
//! as clap value enums (listed in help, refused with the possible values),
//! and environment variables shown in help.

use std::process::Command;

fn kiln(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const VERBS: [&str; 11] = [
    "demo",
    "toolchain",
    "params",
    "export",
    "compile",
    "run",
    "interp",
    "generate",
    "chat",
    "package",
    "completions",
];

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
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
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
