//! The pinned IREE flag presets and host tensors (no tools needed).

use kiln::iree::{Device, HostTensor, Target};

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
    assert_eq!(kiln::iree::Toolchain::IREE_VERSION, "3.13.0");
    assert_eq!(
        Target::Arm64.compile_flags(),
        [
            "--iree-input-type=stablehlo",
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            "--iree-opt-data-tiling=false",
            "--iree-global-opt-data-tiling",
            "--iree-opt-const-expr-max-size-increase-threshold=1099511627776",
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
