//! The pinned IREE flag presets and the output parser (no tools needed).

use kiln::iree::flags::{self, Device, Target};
use kiln::iree::run::{parse_outputs, parse_tensor_line, HostTensor, RunOptions};

#[test]
fn compile_flag_presets() {
    let all: Vec<String> = [
        Target::Host,
        Target::Arm64,
        Target::Arm32,
        Target::parse("vulkan").unwrap(),
        Target::vulkan("adreno").unwrap(),
    ]
    .iter()
    .map(|t| {
        format!(
            "{} ({}):\n  {}",
            t,
            t.suffix(),
            t.compile_flags().join("\n  ")
        )
    })
    .collect();
    insta::with_settings!({snapshot_path => "../snapshots"}, {
        insta::assert_snapshot!("iree_compile_flags", all.join("\n"));
    });
}

#[test]
fn exact_presets() {
    assert_eq!(flags::IREE_VERSION, "3.13.0");
    assert_eq!(
        Target::Arm64.compile_flags(),
        [
            "--iree-input-type=stablehlo",
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            "--iree-opt-data-tiling=true",
            "--iree-llvmcpu-target-triple=aarch64-linux-android29",
            "--iree-llvmcpu-target-cpu=cortex-a76",
            "--iree-llvmcpu-target-cpu-features=+dotprod",
        ]
    );
    assert_eq!(
        Target::vulkan("valhall").unwrap().compile_flags(),
        [
            "--iree-input-type=stablehlo",
            "--iree-hal-target-device=vulkan",
            "--iree-vulkan-target=valhall",
        ]
    );
}

#[test]
fn target_lists() {
    let t = Target::parse_list("host, arm64,vulkan,host", Some("mali-g78")).unwrap();
    assert_eq!(
        t,
        [
            Target::Host,
            Target::Arm64,
            Target::Vulkan {
                target: "mali-g78".into()
            }
        ]
    );
    assert_eq!(t[2].suffix(), "vulkan");
    assert_eq!(
        Target::parse("vulkan:adreno-740").unwrap().to_string(),
        "vulkan:adreno-740"
    );
    assert!(Target::parse_list("", None).is_err());
    assert!(
        Target::parse_list("arm64", Some("bogus")).is_ok(),
        "vulkan name only matters for vulkan"
    );
    assert!(Target::parse_list("vulkan", Some("bogus")).is_err());
}

#[test]
fn devices() {
    assert_eq!(
        Device::parse("local-task").unwrap().flag(),
        "--device=local-task"
    );
    assert_eq!(Device::parse("vulkan").unwrap(), Device::Vulkan);
    assert!(Device::parse("cuda").is_err());
    let o = RunOptions::default()
        .task_groups(2)
        .params(vec![("model".into(), "w.irpa".into())]);
    let args = kiln::iree::run::run_args(std::path::Path::new("m.vmfb"), &o);
    assert!(
        args.contains(&"--task_topology_group_count=2".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--parameters=model=w.irpa".to_string()),
        "{args:?}"
    );
}

#[test]
fn parses_run_module_output() {
    let out = "EXEC @main\nresult[0]: hal.buffer_view\n8xi32=8 12 9 0 1 2 3 4\nresult[1]: hal.buffer_view\n2x3xf32=[1 2.5 -3][4 5 6]\n";
    let t = parse_outputs(out).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(
        t[0],
        HostTensor::i32(vec![8], vec![8, 12, 9, 0, 1, 2, 3, 4]).unwrap()
    );
    assert_eq!(
        t[1],
        HostTensor::f32(vec![2, 3], vec![1.0, 2.5, -3.0, 4.0, 5.0, 6.0]).unwrap()
    );
    // Older single-line form, and a scalar.
    let t = parse_outputs("result[0]: 4xi32=1 2 3 4\n").unwrap();
    assert_eq!(t[0].as_i32().unwrap(), &[1, 2, 3, 4]);
    assert_eq!(
        parse_tensor_line("i32=5").unwrap().shape,
        Vec::<usize>::new()
    );
    assert!(parse_tensor_line("4xi32=1 2 3").is_err());
    assert!(parse_tensor_line("4xi32=1 2 ...").is_err());
    assert!(parse_tensor_line("4xf16=1 2 3 4").is_err());
    assert!(parse_tensor_line("garbage").is_err());
}

#[test]
fn inline_input_and_npy() {
    let t = HostTensor::i32(vec![1, 4], vec![1, 2, 3, 0]).unwrap();
    assert_eq!(t.input_arg(), "1x4xi32=1,2,3,0");
    let npy = t.to_npy();
    assert_eq!(&npy[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([npy[8], npy[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0);
    let header = std::str::from_utf8(&npy[10..10 + hlen]).unwrap();
    assert!(
        header.contains("'descr': '<i4'") && header.contains("'shape': (1, 4)"),
        "{header}"
    );
    assert_eq!(npy.len(), 10 + hlen + 16);
    assert!(HostTensor::i32(vec![2, 2], vec![1]).is_err());
}

#[test]
fn install_script_pins_the_same_version() {
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/install-deps.sh"
    ))
    .unwrap();
    assert!(
        script.contains(&format!("IREE_VERSION={}", flags::IREE_VERSION)),
        "scripts/install-deps.sh must pin IREE {}",
        flags::IREE_VERSION
    );
    assert!(script.contains(flags::AARCH64_WHEEL_PLATFORM));
    assert!(script.contains(&format!("--python-version {}", flags::AARCH64_WHEEL_PYTHON)));
}
