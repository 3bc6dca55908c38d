//! Bad input to the IREE driver: every case gives a clear error, and none
//! leaves a partial `.vmfb` behind.

use crate::common;
use common::tiny_iree::*;
use common::{kiln_command as kiln, toolchain};

use kiln::iree::{compile, IreeError, Target, Toolchain};
use kiln::params::TensorWriter;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `kiln run VMFB --params PARAMS`, to be given the rest of its arguments.
fn kiln_run(vmfb: &Path, params: &Path) -> Command {
    let mut c = kiln();
    c.arg("run").arg(vmfb).arg("--params").arg(params);
    c
}

/// The stderr of a run that failed with exit code `code` (2 bad input,
/// 3 a failing or missing external tool).
fn failed(out: &std::process::Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "expected exit {code}; stdout: {}; stderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fake iree-compile that records being called (to prove validation
/// happens before the tool runs).
fn fake_tool(dir: &Path, name: &str, marker: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn fake_toolchain(dir: &Path, marker: &Path) -> Toolchain {
    Toolchain {
        compile: fake_tool(dir, "iree-compile", marker),
        run_module: fake_tool(dir, "iree-run-module", marker),
        benchmark_module: None,
        convert_parameters: None,
        dump_parameters: None,
        create_parameters: None,
        dump_module: None,
        root: None,
        source: "test".into(),
        qemu_aarch64: None,
        aarch64_run_module: None,
        aarch64_kiln_runtime: None,
        qemu_arm: None,
        armv7_run_module: None,
        armv7_kiln_runtime: None,
    }
}

fn vmfbs(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".vmfb") || n.starts_with(".kiln-tmp"))
        .collect();
    v.sort();
    v
}

#[test]
fn unknown_target_is_rejected() {
    let e = Target::parse("x86").unwrap_err();
    assert!(matches!(e, IreeError::UnknownTarget(_)));
    assert!(
        e.to_string().contains("host, arm64, arm32 or vulkan"),
        "{e}"
    );
    let dir = tempfile::tempdir().unwrap();
    let (mlir, _) = write_tiny(dir.path());
    let out = kiln()
        .arg("compile")
        .arg(&mlir)
        .args(["--target", "host,x86"])
        .output()
        .unwrap();
    let err = failed(&out, 2);
    assert!(err.contains("unknown target 'x86'"), "{err}");
    assert!(vmfbs(dir.path()).is_empty());
}

#[test]
fn unknown_vulkan_name_is_rejected_before_iree_compile_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("called");
    let tc = fake_toolchain(dir.path(), &marker);
    let (mlir, _) = write_tiny(dir.path());
    // Constructing the target already fails…
    let e = Target::vulkan("valhall5").unwrap_err();
    assert!(
        e.to_string().contains("unknown Vulkan target 'valhall5'"),
        "{e}"
    );
    // …and a hand-built one is caught by compile() before the tool starts.
    let bad = Target::Vulkan {
        target: "lavapipe".into(),
    };
    let e = compile(&tc, &mlir, &bad, &dir.path().join("x.vmfb"), &[]).unwrap_err();
    assert!(
        e.to_string().contains("unknown Vulkan target 'lavapipe'"),
        "{e}"
    );
    let e = tc
        .compile_many(
            &mlir,
            &[Target::Host, bad],
            dir.path(),
            "tiny",
            &kiln::iree::CompileOptions::default().jobs(2),
        )
        .unwrap_err();
    assert!(e.to_string().contains("lavapipe"), "{e}");
    assert!(!marker.exists(), "iree-compile was called");
    // The CLI, with the fake tool forced through the environment.
    let out = kiln()
        .arg("compile")
        .arg(&mlir)
        .args(["--target", "vulkan", "--vulkan-target", "mali-g52"])
        .env("KILN_IREE_COMPILE", &tc.compile)
        .env("KILN_IREE_RUN_MODULE", &tc.run_module)
        .output()
        .unwrap();
    let err = failed(&out, 2);
    assert!(err.contains("unknown Vulkan target 'mali-g52'"), "{err}");
    assert!(!marker.exists(), "iree-compile was called");
    assert!(vmfbs(dir.path()).is_empty());
}

#[test]
fn known_vulkan_names() {
    for ok in [
        "valhall",
        "valhall4",
        "mali-g78",
        "adreno",
        "adreno-740",
        "adreno-610l",
        "vp_android_baseline_2022",
        "rdna3",
        "ampere",
    ] {
        assert!(Target::vulkan(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "valhall5",
        "mali-g52",
        "adreno-74",
        "adreno-7400",
        "adreno-abc",
        "hopper",
        "lavapipe",
        "Valhall",
    ] {
        assert!(Target::vulkan(bad).is_err(), "{bad}");
    }
}

#[test]
fn failing_compile_leaves_no_vmfb_and_carries_stderr() {
    let Some(tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mlir = dir.path().join("broken-gen.mlir");
    std::fs::write(&mlir, "module {\n  func.func @f(%a: tensor<4xf32>) -> tensor<4xi32> {\n    return %a : tensor<4xf32>\n  }\n}\n").unwrap();
    let out = dir.path().join("broken-host.vmfb");
    let e = compile(&tc, &mlir, &Target::Host, &out, &[]).unwrap_err();
    match &e {
        IreeError::CompileFailed { stderr, target, .. } => {
            assert_eq!(target, "host");
            assert!(stderr.contains("error"), "{stderr}");
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(vmfbs(dir.path()).is_empty(), "{:?}", vmfbs(dir.path()));
    // A previous good output is not clobbered by a failed compile.
    std::fs::write(&out, b"old").unwrap();
    assert!(compile(&tc, &mlir, &Target::Host, &out, &[]).is_err());
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
    // Through the CLI: exit 2, iree-compile's message on stderr.
    std::fs::remove_file(&out).unwrap();
    let o = kiln()
        .arg("compile")
        .arg(&mlir)
        .args(["--target", "host,arm64"])
        .output()
        .unwrap();
    let err = failed(&o, 3);
    assert!(err.contains("iree-compile failed for target"), "{err}");
    assert!(vmfbs(dir.path()).is_empty(), "{:?}", vmfbs(dir.path()));
    // The output folders a failed compile created go again.
    let o = kiln()
        .arg("compile")
        .arg(&mlir)
        .args(["--target", "host", "-o"])
        .arg(dir.path().join("newdir/sub"))
        .output()
        .unwrap();
    failed(&o, 3);
    assert!(!dir.path().join("newdir").exists(), "newdir left behind");
}

#[test]
fn extra_flags_reach_iree_compile() {
    let Some(_tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mlir, _) = write_tiny(dir.path());
    let o = kiln()
        .arg("compile")
        .arg(&mlir)
        .args(["--target", "host", "--", "--no-such-iree-flag"])
        .output()
        .unwrap();
    let err = failed(&o, 3);
    assert!(err.contains("no-such-iree-flag"), "{err}");
    assert!(vmfbs(dir.path()).is_empty());
}

#[test]
fn missing_toolchain_says_what_to_run() {
    let empty = tempfile::tempdir().unwrap();
    let out = kiln()
        .arg("toolchain")
        .env("PATH", empty.path())
        .env("KILN_CACHE_DIR", empty.path())
        .env_remove("KILN_IREE_DIR")
        .env_remove("KILN_IREE_COMPILE")
        .env_remove("KILN_IREE_RUN_MODULE")
        .output()
        .unwrap();
    let err = failed(&out, 3);
    assert!(err.contains("kiln toolchain install"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // A bad KILN_IREE_DIR is named.
    let out = kiln()
        .arg("toolchain")
        .env("KILN_IREE_DIR", empty.path().join("nope"))
        .output()
        .unwrap();
    let err = failed(&out, 2);
    assert!(
        err.contains("KILN_IREE_DIR") && err.contains("nope"),
        "{err}"
    );
}

#[test]
fn run_argument_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (_, st) = write_tiny(dir.path());
    let vmfb = dir.path().join("tiny-host.vmfb");
    std::fs::write(&vmfb, b"not really a module").unwrap();
    // Too many tokens for SEQ (8, from tiny.json).
    let out = kiln_run(&vmfb, &st)
        .args(["--tokens", "1,2,3,4,5,6,7,8,9"])
        .output()
        .unwrap();
    let err = failed(&out, 2);
    assert!(err.contains("9 ids") && err.contains("SEQ = 8"), "{err}");
    // Bad token text.
    let out = kiln_run(&vmfb, &st)
        .args(["--tokens", "1,x"])
        .output()
        .unwrap();
    assert!(failed(&out, 2).contains("'x'"));
    // No manifest and no --seq.
    std::fs::remove_file(dir.path().join("tiny.json")).unwrap();
    let out = kiln_run(&vmfb, &st)
        .args(["--tokens", "1"])
        .output()
        .unwrap();
    let err = failed(&out, 2);
    assert!(err.contains("tiny.json") && err.contains("--seq"), "{err}");
    // Manifest with a bad seq.
    std::fs::write(
        dir.path().join("tiny.json"),
        r#"{"seq": "eight", "function": "tiny"}"#,
    )
    .unwrap();
    let out = kiln_run(&vmfb, &st)
        .args(["--tokens", "1"])
        .output()
        .unwrap();
    assert!(failed(&out, 2).contains("\"seq\""));
    // Unknown device / emulation.
    std::fs::write(
        dir.path().join("tiny.json"),
        r#"{"seq": 8, "function": "tiny"}"#,
    )
    .unwrap();
    let out = kiln_run(&vmfb, &st)
        .args(["--tokens", "1", "--device", "gpu"])
        .output()
        .unwrap();
    let err = failed(&out, 2);
    assert!(
        err.contains("invalid value 'gpu' for '--device")
            && err.contains("local-task, local-sync, vulkan"),
        "{err}"
    );
    let out = kiln_run(&vmfb, &st)
        .args(["--tokens", "1", "--emulate", "riscv"])
        .output()
        .unwrap();
    let err = failed(&out, 2);
    assert!(
        err.contains("invalid value 'riscv' for '--emulate") && err.contains("arm64"),
        "{err}"
    );
    // Missing params file.
    let out = kiln()
        .arg("run")
        .arg(&vmfb)
        .args(["--tokens", "1"])
        .output()
        .unwrap();
    assert!(failed(&out, 2).contains("--params"));
    // A truncated archive: kiln's reader names the file and the problem
    // before the runtime sees it.
    let bytes = std::fs::read(&st).unwrap();
    let cut = dir.path().join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = kiln_run(&vmfb, &cut)
        .args(["--tokens", "1"])
        .output()
        .unwrap();
    let err = failed(&out, 2);
    assert!(err.contains("cut.safetensors"), "{err}");
    let archive = dir.path().join("bad.irpa");
    let spec = kiln::params::irpa::EntrySpec::data("w", 100_000);
    let mut irpa = kiln::params::irpa::IrpaWriter::new(&archive, vec![spec]).unwrap();
    irpa.write_tensor("w", &[7u8; 100_000]).unwrap();
    irpa.finish().unwrap();
    let bytes = std::fs::read(&archive).unwrap();
    std::fs::write(&archive, &bytes[..bytes.len() / 2]).unwrap();
    let out = kiln_run(&vmfb, &archive)
        .args(["--tokens", "1"])
        .output()
        .unwrap();
    let err = failed(&out, 2);
    assert!(
        err.contains("bad.irpa") && !err.contains("irpa_parser.c"),
        "{err}"
    );
    // generate and chat read the archive through the same check.
    for verb in ["generate", "chat"] {
        let out = kiln()
            .arg(verb)
            .arg(&vmfb)
            .arg("--params")
            .arg(&archive)
            .args(if verb == "generate" {
                &["--tokens", "1"][..]
            } else {
                &[][..]
            })
            .output()
            .unwrap();
        let err = failed(&out, 2);
        assert!(
            err.contains("bad.irpa") && !err.contains("irpa_parser.c"),
            "{verb}: {err}"
        );
    }
}

#[test]
fn missing_emulator_says_what_to_run() {
    let Some(_tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_, st) = write_tiny(dir.path());
    let vmfb = dir.path().join("tiny-arm64.vmfb");
    std::fs::write(&vmfb, b"x").unwrap();
    let out = kiln_run(&vmfb, &st)
        .args(["--tokens", "1", "--emulate", "arm64"])
        .env("KILN_QEMU_AARCH64", dir.path().join("no-qemu"))
        .output()
        .unwrap();
    let err = failed(&out, 3);
    assert!(err.contains("scripts/install-deps.sh"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let out = kiln_run(&vmfb, &st)
        .args(["--tokens", "1", "--emulate", "arm64"])
        .env("KILN_IREE_AARCH64_DIR", dir.path().join("nothing"))
        .output()
        .unwrap();
    let err = failed(&out, 3);
    assert!(
        err.contains("aarch64 iree-run-module") && err.contains("install"),
        "{err}"
    );
}

#[test]
fn missing_vulkan_driver_names_the_fix() {
    let Some(tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mlir, st) = write_tiny(dir.path());
    let vmfb = dir.path().join("tiny-vulkan.vmfb");
    compile(&tc, &mlir, &Target::parse("vulkan").unwrap(), &vmfb, &[]).unwrap();
    let out = kiln_run(&vmfb, &st)
        .args(["--tokens", "1", "--device", "vulkan"])
        .env("VK_ICD_FILENAMES", dir.path().join("none.json"))
        .env("VK_DRIVER_FILES", dir.path().join("none.json"))
        .output()
        .unwrap();
    let err = failed(&out, 3);
    assert!(err.contains("mesa-vulkan-drivers"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn f16_parameters_compile_for_vulkan_as_i32_pairs() {
    // IREE 3.13 cannot lower f16 buffers feeding a matmul on Vulkan
    // (`vector.bitcast … vector<4xf16>`); kiln's Vulkan lowering re-declares
    // them as i32 pairs widened by their bits, so the module compiles.
    let Some(tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mlir = dir.path().join("f16-gen.mlir");
    std::fs::write(
        &mlir,
        r#"module @f16 {
  util.global private @w = #flow.parameter.named<"model"::"w"> : tensor<16x16xf16>
  func.func @f16(%arg0: tensor<4x16xf32>) -> tensor<4x16xf32> {
    %0 = util.global.load @w : tensor<16x16xf16>
    %1 = stablehlo.convert %0 : (tensor<16x16xf16>) -> tensor<16x16xf32>
    %2 = stablehlo.dot_general %arg0, %1, contracting_dims = [1] x [1] : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    return %2 : tensor<4x16xf32>
  }
}
"#,
    )
    .unwrap();
    let vmfb = dir.path().join("f16-vulkan.vmfb");
    compile(&tc, &mlir, &Target::parse("vulkan").unwrap(), &vmfb, &[]).unwrap();
    assert!(vmfb.exists());
}

/// scripts/install-deps.sh pins the runtime's Python dependencies as `kiln
/// toolchain install` does: one venv layout, two installers (spec/iree.md,
/// "Installing").
#[test]
fn install_deps_pins_what_kiln_toolchain_install_pins() {
    let script =
        std::fs::read_to_string(crate::common::root().join("scripts/install-deps.sh")).unwrap();
    for (name, version) in kiln::iree::Toolchain::RUNTIME_PINS {
        let var = name.to_uppercase();
        assert!(
            script
                .lines()
                .any(|l| l == format!("{var}_VERSION={version}")),
            "install-deps.sh does not pin {name} {version}"
        );
        assert!(
            script.contains(&format!("\"{name}==${var}_VERSION\"")),
            "install-deps.sh does not install {name} pinned"
        );
        assert!(
            script.contains(&format!("site-packages/{name}-${var}_VERSION.dist-info")),
            "install-deps.sh does not check {name}'s version"
        );
    }
}
