//! The Android path on a tiny checkpoint: the phone's redecode loop gives
//! the same ids on the host (the in-process session), on the arm64 module
//! under qemu (one `iree-run-module` per step, and kiln's own runtime
//! program built for aarch64 serving a whole generation, redecode and KV
//! pair) and in kiln's interpreter; and bad input to `kiln generate` /
//! `kiln run` is a one-line error saying what to do.

use crate::common;
use common::*;
use kiln::export::{export, ExportOptions};
use kiln::generate::{generate, Interpreter, Redecode, RunModule};
use kiln::generate::{Driver, DriverLoop, DriverOptions};
use kiln::iree::{
    Device, Emulation, ForwardSession, KvSession, RemoteKvSession, RemoteSession, RunOptions,
    SessionSpec, Target,
};
use kiln::models::Checkpoint;
use kiln::step::{KvSpec, KvStep};

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
    let mut session = ForwardSession::new(
        SessionSpec::new(&outs[0], &r.irpa)
            .device(Device::LocalTask)
            .open()
            .unwrap(),
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

/// kiln's runtime program, cross-built for aarch64 (static) and run under
/// qemu, serves the redecode forward and the KV pair of the arm64 modules
/// in one process each, with the host's ids; `kiln generate --emulate
/// arm64` (a `Driver` with emulation) uses it.
#[test]
fn kiln_runtime_under_qemu_serves_a_whole_generation_with_the_hosts_ids() {
    let Some(tc) = toolchain() else { return };
    let Some(runtime) = arm64_kiln_runtime(&tc) else {
        return;
    };
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-tied-gqa")).unwrap();
    let dir = tmpdir();
    let r = export(
        &ckpt,
        &ExportOptions::new(8, dir.path())
            .name("tiny")
            .kv(kiln::export::KvCacheOptions::default()
                .prompt_len(4)
                .max_context(16)),
    )
    .unwrap();
    let targets = [Target::Host, Target::Arm64];
    let fwd =
        common::compiled::compile_many(&tc, &r.mlir, &targets, dir.path(), "tiny", 2).unwrap();
    let kv_mlir = r.kv_mlir.as_ref().unwrap();
    let kv =
        common::compiled::compile_many(&tc, kv_mlir, &targets, dir.path(), "tiny-kv", 2).unwrap();
    let prompt = [5, 17, 3];
    let spec = |vmfb: &std::path::Path| SessionSpec::new(vmfb, &r.irpa);
    let mut host = ForwardSession::new(spec(&fwd[0]).open().unwrap(), "tiny", 8).unwrap();
    let want = generate(&mut host, &prompt, 4, &[], |_| true).unwrap();
    let mut remote = RemoteSession::start(&runtime, &spec(&fwd[1]), "tiny", 8).unwrap();
    assert_eq!(
        generate(&mut remote, &prompt, 4, &[], |_| true).unwrap(),
        want
    );
    let pair = r.manifest.kv.clone().unwrap().pair;
    let kv_spec = KvSpec::try_from(&pair).unwrap();
    let steps = |s: &mut dyn KvStep| {
        s.reset().unwrap();
        let mut ids = vec![s.prefill(&[5, 17, 3, 0], 0, 3).unwrap().id];
        for pos in 3..8 {
            ids.push(s.decode(*ids.last().unwrap(), pos).unwrap().id);
        }
        ids
    };
    let want = steps(&mut KvSession::new(spec(&kv[0]).open().unwrap(), &kv_spec).unwrap());
    let mut remote = RemoteKvSession::start(&runtime, &spec(&kv[1]), &kv_spec).unwrap();
    assert_eq!(steps(&mut remote), want, "KV pair under qemu");
    // A driver with emulation opens the same program.
    let o = DriverOptions::new(&kv[1], &r.irpa, &r.manifest.function, 8)
        .kv(pair.clone())
        .emulate(Emulation::Arm64);
    let DriverLoop::Kv(mut d) = Driver::open(&o).unwrap().model else {
        unreachable!("a KV pair")
    };
    assert_eq!(steps(d.as_mut()), want, "the driver under qemu");
    // A failing request (a decode before any reset) is the runtime's
    // error, and the process goes on.
    let mut fresh = RemoteKvSession::start(&runtime, &spec(&kv[1]), &kv_spec).unwrap();
    let err = fresh.decode(1, 0).unwrap_err().to_string();
    assert!(err.contains("before the caches were reset"), "{err}");
    assert_eq!(steps(&mut fresh), want, "after an error");
}

/// The arm32 module (armv7-a, NEON) runs under qemu-arm with the host's
/// ids: `kiln run --emulate arm32` (an armv7 iree-run-module built from
/// IREE's sources) and `kiln generate --emulate arm32` (kiln's runtime
/// program built for armv7, when install-deps built it).
#[test]
fn arm32_module_runs_under_qemu_with_the_hosts_ids() {
    let Some(tc) = toolchain() else { return };
    if !arm32_emulation(&tc) {
        return;
    }
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-tied-gqa")).unwrap();
    let dir = tmpdir();
    let r = export(&ckpt, &ExportOptions::new(8, dir.path()).name("tiny")).unwrap();
    let targets = [Target::Host, Target::Arm32];
    let outs =
        common::compiled::compile_many(&tc, &r.mlir, &targets, dir.path(), "tiny", 2).unwrap();
    for verb in [
        vec!["run", "--tokens", "5,17,3,9,1,0,0,0"],
        vec!["generate", "--tokens", "5,17,3", "--max-new-tokens", "3"],
    ] {
        let run = |module: &std::path::Path, emulate: bool| {
            let mut args: Vec<&str> = vec![verb[0], module.to_str().unwrap()];
            args.extend(&verb[1..]);
            if emulate {
                args.extend(["--emulate", "arm32"]);
            }
            let (code, out, err) = kiln(&args);
            assert_eq!(code, 0, "{args:?}: {err}");
            out
        };
        assert_eq!(run(&outs[1], true), run(&outs[0], false), "{}", verb[0]);
    }
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
