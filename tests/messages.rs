//! The library's messages state facts; the command line adds the flags:
//! no string literal in the library's sources (`src/`) spells a
//! command-line flag (`--seq`) or a `kiln` verb (`` `kiln compile` ``).
//! The hints a user sees live in the binary's crate, `cli/src/hint.rs`.
//! (`kiln-runtime`'s messages reach an app with no command line between:
//! they may name the `kiln` step that makes what is missing.)
//!
//! The sources are read as Rust tokens (`proc-macro2`), so comments and doc
//! comments (`#[doc = …]`) are not messages, and neither are `#[cfg(test)]`
//! items; every other string literal is, `#[error(…)]` texts included.
//! The exceptions are flags of the external tools kiln runs, passed to
//! them as arguments, listed by file in [`TOOL_ARGUMENTS`].

use crate::common::VERBS;
use proc_macro2::{Delimiter, TokenStream, TokenTree};
use std::path::{Path, PathBuf};

/// Flags of other programs, passed to them as arguments (never shown as
/// advice): each file's allowed spellings (a flag matches one when it
/// starts with it).
const TOOL_ARGUMENTS: &[(&str, &[&str])] = &[
    // iree-compile's and iree-run-module's flags, built in one place.
    (
        "src/iree/flags.rs",
        &[
            "--iree-",
            "--device=",
            "--task_topology_group_count=",
            "--parameters=",
            "--output_max_element_count=",
        ],
    ),
    // iree-run-module's module, function, inputs and outputs.
    (
        "src/iree/run.rs",
        &["--module=", "--function=", "--input=", "--output="],
    ),
    // `kiln-runtime serve`'s arguments (the runtime program under qemu).
    (
        "src/iree/remote.rs",
        &[
            "--param",
            "--device",
            "--task-groups",
            "--function",
            "--kv",
            "--cache",
        ],
    ),
    // iree-dump-module's views of a module.
    ("src/iree/inspect.rs", &["--output=", "--function="]),
    // `iree-compile --version`, and pip installing the pinned wheels.
    (
        "src/iree/toolchain.rs",
        &[
            "--version",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=",
            "--platform",
            "--python-version",
        ],
    ),
];

/// The library's `.rs` files, relative to the repository root.
fn library_sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = crate::common::root();
    let mut all = Vec::new();
    walk(&root.join("src"), &mut all);
    let mut lib: Vec<PathBuf> = all
        .into_iter()
        .map(|p| p.strip_prefix(&root).unwrap().to_path_buf())
        .collect();
    lib.sort();
    lib
}

/// Every string literal in `tokens` (as written, quotes and escapes
/// included), outside doc attributes and `#[cfg(test)]` items.
fn literals(tokens: TokenStream, out: &mut Vec<String>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        // An attribute: `#` (`!`) `[…]`.
        if let TokenTree::Punct(p) = &tokens[i] {
            if p.as_char() == '#' {
                let mut j = i + 1;
                if matches!(&tokens.get(j), Some(TokenTree::Punct(b)) if b.as_char() == '!') {
                    j += 1;
                }
                if let Some(TokenTree::Group(g)) = tokens.get(j) {
                    if g.delimiter() == Delimiter::Bracket {
                        let text = g.stream().to_string();
                        if text.starts_with("doc") {
                            i = j + 1;
                            continue;
                        }
                        if text.replace(' ', "") == "cfg(test)" {
                            // Skip the item: up to its body or its `;`.
                            i = j + 1;
                            while i < tokens.len() {
                                match &tokens[i] {
                                    TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => {
                                        break
                                    }
                                    TokenTree::Punct(p) if p.as_char() == ';' => break,
                                    _ => i += 1,
                                }
                            }
                            i += 1;
                            continue;
                        }
                    }
                }
            }
        }
        match &tokens[i] {
            TokenTree::Group(g) => literals(g.stream(), out),
            TokenTree::Literal(l) => {
                let s = l.to_string();
                let body = s.trim_start_matches(['b', 'c', 'r', '#']);
                if body.starts_with('"') {
                    out.push(s);
                }
            }
            _ => {}
        }
        i += 1;
    }
}

/// The flags (`--name`) and `kiln VERB` commands `text` spells.
fn spellings(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let b = text.as_bytes();
    for (i, _) in text.match_indices("--") {
        let before_ok = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-');
        let next = b.get(i + 2).copied().unwrap_or(b' ');
        if before_ok && next.is_ascii_lowercase() {
            let end = text[i + 2..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || "-_=".contains(c)))
                .map_or(text.len(), |e| i + 2 + e);
            found.push(text[i..end].to_string());
        }
    }
    for (i, _) in text.match_indices("kiln ") {
        let rest = &text[i + "kiln ".len()..];
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase())
            .collect();
        // "a kiln export manifest" names a file, not a command.
        let noun = rest.starts_with("export manifest");
        if VERBS.contains(&word.as_str()) && !noun {
            found.push(format!("kiln {word}"));
        }
    }
    found
}

#[test]
fn the_scanner_finds_flags_and_verbs_and_skips_comments_and_tests() {
    assert_eq!(
        spellings("export with a larger --max-context; run `kiln toolchain install`"),
        ["--max-context", "kiln toolchain"]
    );
    assert!(spellings("a kiln export manifest; 2--3; a -- b; kiln's own").is_empty());
    let src = r##"
        //! `kiln export --seq 8`
        /// Use --seq.
        fn f() -> String { format!("{} (pass --tokenizer FILE)", r#"--raw"#) }
        #[error("SEQ is {seq}: export with --seq")]
        struct E;
        #[cfg(test)]
        mod tests { const X: &str = "--in-a-test"; }
    "##;
    let mut found = Vec::new();
    literals(src.parse().unwrap(), &mut found);
    let flags: Vec<String> = found.iter().flat_map(|l| spellings(l)).collect();
    assert_eq!(flags, ["--tokenizer", "--raw", "--seq"]);
}

#[test]
fn library_messages_spell_no_flag_and_no_kiln_command() {
    let root = crate::common::root();
    let files = library_sources();
    assert!(files.len() > 50, "{files:?}");
    let mut offences = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let tokens: TokenStream = text
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e:?}", file.display()));
        let mut found = Vec::new();
        literals(tokens, &mut found);
        let allowed = TOOL_ARGUMENTS
            .iter()
            .find(|(f, _)| Path::new(f) == file)
            .map_or(&[][..], |(_, a)| *a);
        for lit in &found {
            for s in spellings(lit) {
                if !allowed.iter().any(|a| s.starts_with(a)) {
                    offences.push(format!("{}: {s} in {lit}", file.display()));
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "library messages that spell a flag or a kiln command (say it in cli/src/hint.rs):\n{}",
        offences.join("\n")
    );
}

/// Every exception is still needed: an allowed spelling no literal of its
/// file uses any more is dropped from [`TOOL_ARGUMENTS`].
#[test]
fn every_tool_argument_exception_is_used() {
    let root = crate::common::root();
    for (file, allowed) in TOOL_ARGUMENTS {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let mut found = Vec::new();
        literals(text.parse().unwrap(), &mut found);
        let used: Vec<String> = found.iter().flat_map(|l| spellings(l)).collect();
        for a in *allowed {
            assert!(
                used.iter().any(|s| s.starts_with(a)),
                "{file}: no literal spells {a} any more"
            );
        }
    }
}

// What a user sees: the command line's messages name the file, the tensor
// and the flag, and exit 2; the library's errors for the same faults state
// the facts without the flags.

use crate::common::{files_in, fixture, kiln, tmpdir};

/// `kiln ARGS` fails with exit 2 and one `kiln: error:` line holding every
/// one of `wants`.
fn refused<S: AsRef<str>>(args: &[S], wants: &[&str]) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let (code, out, err) = kiln(&args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(out.is_empty(), "{args:?}: {out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line expected: {err}");
    assert!(lines[0].starts_with("kiln: error: "), "{err}");
    for w in wants {
        assert!(lines[0].contains(w), "{args:?}: {w:?} not in {err}");
    }
}

/// A library error's message: no flag, no `kiln` verb.
fn states_facts(e: &kiln::Error) -> String {
    let text = e.to_string();
    assert!(
        spellings(&text).is_empty(),
        "a library error names a flag or a command: {text}"
    );
    assert_eq!(e.exit_code(), 2, "{text}");
    text
}

#[test]
fn export_errors_name_the_file_the_tensor_and_the_flag() {
    let dir = tmpdir();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let hf = fixture("hf/tiny-qwen2");
    let hf = hf.to_str().unwrap();
    let gguf = fixture("gguf/quant/tiny-llama-quant-mix.gguf");
    let gguf = gguf.to_str().unwrap();
    let export = |extra: &[&'static str]| -> Vec<String> {
        let mut a: Vec<String> = ["export", hf, "--seq", "8", "-o", out]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    refused(
        &export(&["--name", "a/b"]),
        &["--name \"a/b\" must be a plain file name"],
    );
    refused(
        &export(&["--weights", "keep"]),
        &[
            &format!("--weights keep keeps a GGUF file's quantization; {hf} is not a GGUF file"),
            "(use --weights bf16, f16, f32, q8_0, q4_0 or w8a16)",
        ],
    );
    refused(
        &export(&["--weights", "q4_0"]),
        &[
            hf,
            "tensor \"",
            "rows of 48 are not whole 32-element blocks, so --weights q4_0 cannot store it",
        ],
    );
    refused(
        &[
            "export",
            gguf,
            "--seq",
            "8",
            "-o",
            out,
            "--weights-for",
            "no_such=bf16",
        ],
        &[&format!(
            "--weights-for no_such=…: no tensor of {gguf} has \"no_such\" in its name"
        )],
    );
    assert!(!dir.path().join("out").exists() || files_in(&dir.path().join("out")).is_empty());

    // The library says the same without the flags.
    use kiln::export::{export as export_lib, ExportOptions, Weights};
    let ckpt = kiln::models::Checkpoint::open(fixture("hf/tiny-qwen2")).unwrap();
    let e =
        kiln::Error::from(export_lib(&ckpt, &ExportOptions::new(8, out).name("a/b")).unwrap_err());
    assert!(
        states_facts(&e).contains("name \"a/b\" must be a plain file name"),
        "{e}"
    );
    let e = kiln::Error::from(
        export_lib(&ckpt, &ExportOptions::new(8, out).weights(Weights::Keep)).unwrap_err(),
    );
    assert!(states_facts(&e).contains("is not a GGUF file"), "{e}");
    let q4 = Weights::Quantize(kiln::params::GgmlType::Q4_0);
    let e =
        kiln::Error::from(export_lib(&ckpt, &ExportOptions::new(8, out).weights(q4)).unwrap_err());
    assert!(
        states_facts(&e).contains("so q4_0 weights cannot store it"),
        "{e}"
    );
}

#[test]
fn sampling_errors_name_the_flag_in_the_cli_and_the_field_in_the_library() {
    refused(
        &[
            "generate",
            "no-such.vmfb",
            "--prompt",
            "hi",
            "--temperature",
            "-1",
        ],
        &["--temperature -1: must be ≥ 0 (0 is greedy)"],
    );
    refused(
        &[
            "generate",
            "no-such.vmfb",
            "--prompt",
            "hi",
            "--repeat-penalty",
            "0",
        ],
        &["--repeat-penalty 0: must be > 0 (1 is off)"],
    );
    let p = kiln::generate::SamplingParams::default().temperature(-1.0);
    let e: kiln::Error = p.validate().unwrap_err().into();
    assert_eq!(
        states_facts(&e),
        "temperature -1: must be ≥ 0 (0 is greedy)"
    );
}

#[test]
fn package_errors_name_the_file_and_the_flag() {
    let dir = tmpdir();
    let exp = dir.path().join("exp");
    let (code, _, err) = kiln(&[
        "export",
        fixture("hf/tiny-qwen2").to_str().unwrap(),
        "--seq",
        "8",
        "-o",
        exp.to_str().unwrap(),
        "--name",
        "t",
    ]);
    assert_eq!(code, 0, "{err}");
    let manifest = exp.join("t.json");
    let m = manifest.to_str().unwrap();
    let e = exp.to_str().unwrap();
    let assets = dir.path().join("assets");
    let a = assets.to_str().unwrap();
    refused(
        &["package", m, "--out", a],
        &[
            &format!("no compiled modules for t in {e}"),
            "run `kiln compile ",
            "--target arm64,arm32,vulkan`",
        ],
    );
    // A module stands in for a compiled one: the checks go on.
    std::fs::write(exp.join("t-arm64.vmfb"), b"module").unwrap();
    let hf = fixture("hf/tiny-qwen2");
    refused(
        &["package", m, "--out", a],
        &[
            &format!("{}: no tokenizer.json in this folder", hf.display()),
            "; pass --tokenizer FILE (a GGUF, a tokenizer.json or an HF folder) or --no-tokenizer",
        ],
    );
    refused(
        &["package", m, "--no-tokenizer", "--out", e],
        &[&format!("--out {e} is the export's own directory")],
    );
    let opts = kiln::package::PackageOptions {
        out_dir: exp.clone(),
        tokenizer: kiln::package::TokenizerChoice::None,
        ..Default::default()
    };
    let err = kiln::Error::from(kiln::package::package(&manifest, &opts).unwrap_err());
    assert!(
        states_facts(&err).contains("is the export's own directory"),
        "{err}"
    );
    let irpa = exp.join("t.irpa");
    let bytes = std::fs::read(&irpa).unwrap();
    std::fs::write(&irpa, &bytes[..100]).unwrap();
    refused(
        &["package", m, "--no-tokenizer", "--out", a],
        &[irpa.to_str().unwrap(), "100 bytes", "; re-export"],
    );
    assert!(!assets.exists());

    // The library's: the facts, no flag.
    let opts = kiln::package::PackageOptions {
        out_dir: assets.clone(),
        tokenizer: kiln::package::TokenizerChoice::None,
        ..Default::default()
    };
    let e = kiln::Error::from(kiln::package::package(&manifest, &opts).unwrap_err());
    assert!(
        states_facts(&e).contains("the archive changed since it was exported"),
        "{e}"
    );
}
