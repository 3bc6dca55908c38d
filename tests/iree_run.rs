//! End-to-end: compile the tiny module for every target with the real
//! iree-compile, run it on the host, under qemu (arm64) and on lavapipe
//! (vulkan), and compare with the values computed here.

use crate::common;
use common::tiny_iree::*;
use common::{kiln_command as kiln, require, toolchain};

use kiln::iree::{
    compile, run_module, Device, Emulation, HostTensor, IreeError, RunOptions, Target, Toolchain,
};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Compiles once per test binary: (dir, mlir, safetensors, outputs by suffix).
struct Built {
    _dir: tempfile::TempDir,
    st: PathBuf,
    outs: Vec<PathBuf>,
}

fn built(tc: &Toolchain) -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (mlir, st) = write_tiny(dir.path());
        let targets = [
            Target::Host,
            Target::Arm64,
            Target::Arm32,
            Target::parse("vulkan").unwrap(),
        ];
        let outs = tc
            .compile_many(
                &mlir,
                &targets,
                dir.path(),
                "tiny",
                &kiln::iree::CompileOptions::default().jobs(2),
            )
            .unwrap();
        Built {
            _dir: dir,
            st,
            outs,
        }
    })
}

fn opts(b: &Built, device: Device, emulate: Option<Emulation>) -> RunOptions {
    RunOptions::default()
        .device(device)
        .function("tiny")
        .params(vec![("model".into(), b.st.clone())])
        .emulate(emulate)
}

fn input() -> HostTensor {
    HostTensor::i32(vec![1, SEQ], prompt()).unwrap()
}

fn ids_of(outs: &[HostTensor]) -> Vec<i32> {
    assert_eq!(outs.len(), 1, "one result expected: {outs:?}");
    assert_eq!(outs[0].shape, vec![SEQ]);
    outs[0].as_i32().expect("i32 result").to_vec()
}

#[test]
fn compile_many_writes_one_vmfb_per_target() {
    let Some(tc) = toolchain() else { return };
    let b = built(&tc);
    let names: Vec<String> = b
        .outs
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "tiny-host.vmfb",
            "tiny-arm64.vmfb",
            "tiny-arm32.vmfb",
            "tiny-vulkan.vmfb"
        ]
    );
    for p in &b.outs {
        let bytes = std::fs::read(p).unwrap();
        assert!(bytes.len() > 1000, "{} is too small", p.display());
    }
    // No temporary files left behind.
    let dir = b.outs[0].parent().unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".kiln-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn host_run_matches_reference() {
    let Some(tc) = toolchain() else { return };
    let b = built(&tc);
    let outs = run_module(
        &tc,
        &b.outs[0],
        &opts(b, Device::LocalTask, None),
        &[input()],
    )
    .unwrap();
    assert_eq!(ids_of(&outs), expected_ids(&prompt()));
}

#[test]
fn host_local_sync_and_task_groups_match() {
    let Some(tc) = toolchain() else { return };
    let b = built(&tc);
    let mut o = opts(b, Device::LocalSync, None);
    let a = run_module(&tc, &b.outs[0], &o, &[input()]).unwrap();
    o.device = Device::LocalTask;
    o.task_groups = Some(1);
    let c = run_module(&tc, &b.outs[0], &o, &[input()]).unwrap();
    assert_eq!(ids_of(&a), expected_ids(&prompt()));
    assert_eq!(a, c);
}

#[test]
fn f32_multi_dim_output_is_parsed() {
    let Some(tc) = toolchain() else { return };
    let b = built(&tc);
    let mut o = opts(b, Device::LocalTask, None);
    o.function = "logits".into();
    let outs = run_module(&tc, &b.outs[0], &o, &[input()]).unwrap();
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0].shape, vec![SEQ, VOCAB]);
    assert_eq!(
        outs[0].as_f32().unwrap(),
        expected_logits(&prompt()).as_slice()
    );
}

#[test]
fn large_input_goes_through_npy() {
    // 1x2048 ids exceed the inline limit; the module only takes 1x8, so use
    // the error path to prove the .npy was read: IREE reports the shape.
    let Some(tc) = toolchain() else { return };
    let b = built(&tc);
    let big = HostTensor::i32(vec![1, 2048], vec![0; 2048]).unwrap();
    let err = run_module(&tc, &b.outs[0], &opts(b, Device::LocalTask, None), &[big]).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("2048"), "{msg}");
}

#[test]
fn arm64_under_qemu_matches_host() {
    let Some(tc) = toolchain() else { return };
    if !common::arm64_emulation(&tc) {
        return;
    }
    let b = built(&tc);
    let host = run_module(
        &tc,
        &b.outs[0],
        &opts(b, Device::LocalTask, None),
        &[input()],
    )
    .unwrap();
    let arm = run_module(
        &tc,
        &b.outs[1],
        &opts(b, Device::LocalTask, Some(Emulation::Arm64)),
        &[input()],
    )
    .unwrap();
    assert_eq!(arm, host);
}

#[test]
fn vulkan_on_lavapipe_matches_host() {
    let Some(tc) = toolchain() else { return };
    let b = built(&tc);
    let host = run_module(
        &tc,
        &b.outs[0],
        &opts(b, Device::LocalTask, None),
        &[input()],
    )
    .unwrap();
    match run_module(&tc, &b.outs[3], &opts(b, Device::Vulkan, None), &[input()]) {
        Ok(v) => assert_eq!(v, host),
        Err(IreeError::VulkanUnavailable(m)) => {
            require(false, &format!("a Vulkan driver (lavapipe): {m}"));
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn other_vulkan_targets_compile_and_run() {
    // The tuned Android targets kiln documents besides the default: adreno
    // and valhall. This module's reductions (16 wide) fit in one lavapipe
    // subgroup, so they run right there too; wider ones do not (see
    // tests/vulkan.rs).
    let Some(tc) = toolchain() else { return };
    let b = built(&tc);
    let dir = tempfile::tempdir().unwrap();
    let mlir = dir.path().join("tiny-gen.mlir");
    std::fs::write(&mlir, TINY_MLIR).unwrap();
    for name in ["adreno", "valhall"] {
        let out = dir.path().join(format!("tiny-{name}.vmfb"));
        compile(&tc, &mlir, &Target::vulkan(name).unwrap(), &out, &[]).unwrap();
        match run_module(&tc, &out, &opts(b, Device::Vulkan, None), &[input()]) {
            Ok(v) => assert_eq!(ids_of(&v), expected_ids(&prompt()), "{name}"),
            Err(IreeError::VulkanUnavailable(m)) => {
                require(false, &format!("a Vulkan driver (lavapipe): {m}"));
                return;
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

fn stdout_of(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "kiln failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kiln run HOST --params ST --tokens <the tiny prompt>`, for callers to
/// add flags to.
fn run_tiny(host: &Path, st: &Path) -> std::process::Command {
    let mut cmd = kiln();
    cmd.arg("run")
        .arg(host)
        .arg("--params")
        .arg(st)
        .args(["--tokens", "3,1,4,1,5,9,2"]);
    cmd
}

/// What `kiln run` prints for the tiny prompt: the expected ids.
fn tiny_ids_line() -> String {
    let want: Vec<String> = expected_ids(&prompt())
        .iter()
        .map(|v| v.to_string())
        .collect();
    format!("{}\n", want.join(" "))
}

#[test]
fn cli_compile_and_run() {
    let Some(_tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mlir, st) = write_tiny(dir.path());
    let out_dir = dir.path().join("out");
    let out = kiln()
        .args(["compile"])
        .arg(&mlir)
        .args([
            "--target", "host", "--target", "vulkan", "--jobs", "2", "--out",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let printed = stdout_of(&out);
    let host = out_dir.join("tiny-host.vmfb");
    assert!(
        printed.contains("tiny-host.vmfb") && printed.contains("tiny-vulkan.vmfb"),
        "{printed}"
    );
    assert!(host.is_file());
    // The manifest sits beside the module: copy it into out/.
    std::fs::copy(dir.path().join("tiny.json"), out_dir.join("tiny.json")).unwrap();
    let out = run_tiny(&host, &st).output().unwrap();
    assert_eq!(stdout_of(&out), tiny_ids_line());
    // Explicit --seq/--function and KILN_TASK_GROUPS without a manifest.
    std::fs::remove_file(out_dir.join("tiny.json")).unwrap();
    let out = run_tiny(&host, &st)
        .args(["--seq", "8", "--function", "tiny", "--device", "local-sync"])
        .env("KILN_TASK_GROUPS", "1")
        .output()
        .unwrap();
    assert_eq!(stdout_of(&out), tiny_ids_line());
}

#[test]
fn cli_compile_low_memory() {
    // `--low-memory` builds another host module (no data tiling: the
    // weights are not packed into a copy at load) that gives the same ids.
    let Some(_tc) = toolchain() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mlir, st) = write_tiny(dir.path());
    let mut vmfbs = Vec::new();
    for (sub, low) in [("tiled", false), ("low", true)] {
        let out_dir = dir.path().join(sub);
        let mut cmd = kiln();
        cmd.arg("compile")
            .arg(&mlir)
            .args(["--target", "host", "--out"])
            .arg(&out_dir);
        if low {
            cmd.arg("--low-memory");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let host = out_dir.join("tiny-host.vmfb");
        let out = run_tiny(&host, &st)
            .args(["--seq", "8", "--function", "tiny"])
            .output()
            .unwrap();
        assert_eq!(stdout_of(&out), tiny_ids_line(), "{sub}");
        vmfbs.push(std::fs::read(host).unwrap());
    }
    assert_ne!(
        vmfbs[0], vmfbs[1],
        "--low-memory must change the compiled module"
    );
}

#[test]
fn cli_toolchain_lists_tools() {
    let Some(tc) = toolchain() else { return };
    let out = kiln().arg("toolchain").output().unwrap();
    let text = stdout_of(&out);
    assert!(text.contains(&tc.compile.display().to_string()), "{text}");
    assert!(text.contains("3.13.0"), "{text}");
}

#[test]
fn path_wrapper_resolves_to_native_tools() {
    // With only a venv's bin/ on PATH (Python wrappers there), kiln must pick
    // the native executables inside that venv's site-packages.
    let Some(tc) = toolchain() else { return };
    let Some(root) = tc.root.clone() else { return };
    if !root.join("bin/iree-compile").is_file() {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let out = kiln()
        .arg("toolchain")
        .env("PATH", root.join("bin"))
        .env("KILN_CACHE_DIR", empty.path())
        .env_remove("KILN_IREE_DIR")
        .env_remove("KILN_IREE_COMPILE")
        .env_remove("KILN_IREE_RUN_MODULE")
        .output()
        .unwrap();
    let text = stdout_of(&out);
    assert!(text.contains("found via:               PATH"), "{text}");
    assert!(text.contains("_mlir_libs/iree-compile"), "{text}");
    assert!(text.contains("_runtime_libs/iree-run-module"), "{text}");
}
