//! The Android path on a tiny checkpoint: the phone's redecode loop gives
//! the same ids on the host (loaded IREE session), on the arm64 module
//! under qemu (`--emulate arm64`, one runtime process per step) and in
//! kiln's interpreter; and bad input to `kiln generate` / `kiln run` is a
//! one-line error saying what to do.

use crate::common;
use common::*;
use kiln::export::{export, ExportOptions};
use kiln::generate::{generate, Interpreter, Redecode, RunModule};
use kiln::iree::{Device, Emulation, RunOptions, Session, SessionSpec, Target};
use kiln::models::Checkpoint;

#[test]
fn redecode_on_host_emulated_arm64_and_interpreter_agree() {
    let Some(tc) = toolchain() else { return };
    if !common::arm64_emulation(&tc) {
        return;
    }
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-tied-gqa")).unwrap();
    let dir = tmpdir();
    let r = export(&ckpt, &ExportOptions::new(8, dir.path()).name("tiny")).unwrap();
    let outs = common::compiled::compile_many(
        &tc,
        &r.mlir,
        &[Target::Host, Target::Arm64],
        dir.path(),
        "tiny",
        2,
    )
    .unwrap();
    let prompt = [5, 17, 3];
    let mut session = Session::start(
        &SessionSpec::new(&outs[0], &r.irpa).device(Device::LocalTask),
        "tiny",
        8,
    )
    .unwrap();
    let host = generate(&mut session, &prompt, 10, &[], |_| true).unwrap();
    assert_eq!(
        host.ids.len(),
        5,
        "SEQ 8 leaves room for 5 new tokens after a 3-token prompt"
    );
    let mut emulated = Redecode::new(
        RunModule {
            toolchain: tc,
            vmfb: outs[1].clone(),
            options: RunOptions::default()
                .params(vec![("model".into(), r.irpa.clone())])
                .emulate(Emulation::Arm64),
        },
        "tiny",
        8,
    );
    let arm = generate(&mut emulated, &prompt, 10, &[], |_| true).unwrap();
    let mut interp = Redecode::<Interpreter>::open(&r.mlir, &r.irpa, "tiny").unwrap();
    let rust = generate(&mut interp, &prompt, 10, &[], |_| true).unwrap();
    assert_eq!(arm, host);
    assert_eq!(rust, host);
    // The first new token is the fixture's prediction at the last prompt position.
    let (code, out, err) = kiln(&[
        "generate",
        outs[1].to_str().unwrap(),
        "--tokens",
        "5,17,3",
        "--emulate",
        "arm64",
        "--max-new-tokens",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    let want: Vec<String> = host.ids[..2].iter().map(|x| x.to_string()).collect();
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), want, "{err}");
}

#[test]
fn generate_and_run_bad_input_are_one_line_errors() {
    let Some(tc) = toolchain() else { return };
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-tied-gqa")).unwrap();
    let dir = tmpdir();
    let r = export(&ckpt, &ExportOptions::new(8, dir.path()).name("tiny")).unwrap();
    let host = dir.path().join("tiny-host.vmfb");
    common::compiled::compile(&tc, &r.mlir, &Target::Host, &host, &[]).unwrap();
    let h = host.to_str().unwrap();
    let qwen_gguf = fixture("gguf/tiny-qwen2.gguf")
        .to_str()
        .unwrap()
        .to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["generate", h, "--tokens", "1,2,3,4,5,6,7,8"],
            "must be at most 7 tokens",
        ),
        (
            vec!["generate", h, "--prompt", "hello"],
            "--prompt needs a tokenizer: pass --tokenizer FILE",
        ),
        (
            vec!["generate", h, "--tokens", "1", "--device", "cuda"],
            "cuda",
        ),
        // A GGUF's dummy vocabulary (`<tN>` tokens, no bytes) has no token
        // for plain text.
        (
            vec![
                "generate",
                h,
                "--prompt",
                "hello",
                "--tokenizer",
                &qwen_gguf,
            ],
            "--prompt encodes to no tokens with",
        ),
        (
            vec!["run", h, "--tokens", "1,2,3,4,5,6,7,8,9"],
            "9 ids but the module takes SEQ = 8",
        ),
    ];
    for (args, want) in cases {
        let (code, _, err) = kiln(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains(want),
            "{args:?}: `{err}` should contain `{want}`"
        );
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    // Parameters that do not fit the module: another model's archive.
    let other = Checkpoint::open(fixture("hf/tiny-llama-untied-mha")).unwrap();
    let odir = tmpdir();
    let o = export(&other, &ExportOptions::new(8, odir.path())).unwrap();
    let (code, _, err) = kiln(&[
        "run",
        h,
        "--params",
        o.irpa.to_str().unwrap(),
        "--tokens",
        "1,2",
    ]);
    // iree-run-module is what finds the mismatch: a failing external tool
    // (exit 3), its message on one line.
    assert_eq!(code, 3, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("model.embed_tokens.weight")
            || err.contains("out of bounds")
            || err.contains("not found"),
        "{err}"
    );
}
