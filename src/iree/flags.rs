//! Every IREE flag kiln passes lives in this file, pinned to one IREE
//! release. IREE renames flags between releases (`--iree-llvm-*` became
//! `--iree-llvmcpu-*`), so a version bump is one edit here plus a test run.

use super::IreeError;
use std::fmt;
use std::path::Path;

/// The IREE release kiln drives (`iree-base-compiler` / `iree-base-runtime` on PyPI).
pub(crate) const IREE_VERSION: &str = "3.13.0";

/// Input dialect flag passed to every `iree-compile` call.
pub const INPUT_TYPE_FLAG: &str = "--iree-input-type=stablehlo";

/// [`CompileOptions::NO_DATA_TILING_FLAGS`](super::CompileOptions::NO_DATA_TILING_FLAGS).
pub(crate) const NO_DATA_TILING_FLAGS: [&str; 3] = [
    "--iree-opt-data-tiling=false",
    "--iree-global-opt-data-tiling=false",
    CONST_EXPR_DEFAULT_GROWTH_FLAG,
];

/// The CPU preset's bound on how much larger than its roots a value IREE
/// computes once at load may be: none (2^40 bytes), so a `--weights keep`
/// matrix widened by one `linalg.generic` is widened once at load, not on
/// every call (IREE's default, 1 MiB, refuses anything 6–8× its codes).
/// Only kiln's `keep` widenings grow that much from parameters alone; other
/// modules compile to the same bytes with or without it
/// (`docs/journal/2026-12-05-fast-exact-and-small.md`, "Why `keep` was
/// slow").
pub(crate) const CONST_EXPR_GROWTH_FLAG: &str =
    "--iree-opt-const-expr-max-size-increase-threshold=1099511627776";

/// No growth at all: only what is no larger than its roots (a transposed
/// or data-tiled copy) is computed at load. For modules with i4 weights
/// ([`super::compile::module_flags`]).
pub(crate) const NO_CONST_EXPR_GROWTH_FLAG: &str =
    "--iree-opt-const-expr-max-size-increase-threshold=0";

/// IREE's default for [`CONST_EXPR_GROWTH_FLAG`] (1 MiB), which `kiln
/// compile --low-memory` restores: every matrix widened on every call.
pub(crate) const CONST_EXPR_DEFAULT_GROWTH_FLAG: &str =
    "--iree-opt-const-expr-max-size-increase-threshold=1048576";

/// True when `name` is a Vulkan target iree-compile 3.13.0 accepts: one of
/// [`Target::VULKAN_TARGETS`], or `adreno-` followed by three digits and an optional `l`.
pub fn is_known_vulkan_target(name: &str) -> bool {
    if Target::VULKAN_TARGETS.contains(&name) {
        return true;
    }
    if let Some(rest) = name.strip_prefix("adreno-") {
        let digits = rest.strip_suffix('l').unwrap_or(rest);
        return digits.len() == 3 && digits.bytes().all(|b| b.is_ascii_digit());
    }
    false
}

/// Checks a Vulkan target name before it reaches iree-compile.
pub fn validate_vulkan_target(name: &str) -> Result<(), IreeError> {
    if is_known_vulkan_target(name) {
        Ok(())
    } else {
        Err(IreeError::UnknownVulkanTarget(name.to_string()))
    }
}

/// A compilation target: what `kiln compile --target` names and what the
/// `-<suffix>.vmfb` file name records.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The machine running kiln (llvm-cpu, `--iree-llvmcpu-target-cpu=host`).
    Host,
    /// Android arm64-v8a: `aarch64-linux-android29`, cortex-a76, `+dotprod`.
    Arm64,
    /// Android armeabi-v7a: `armv7a-linux-androideabi29`, cortex-a55, `+neon`.
    Arm32,
    /// A phone GPU through Vulkan/SPIR-V.
    Vulkan {
        /// The `--iree-vulkan-target` name (validated, see [`Target::VULKAN_TARGETS`]).
        target: String,
    },
}

/// Target names accepted by [`Target::parse`].
pub const TARGET_NAMES: &[&str] = &["host", "arm64", "arm32", "vulkan"];

impl Target {
    /// Vulkan target used when none is named: the Android Vulkan baseline
    /// profile (Vulkan 1.1, 32-bit storage, no subgroup operations). Its
    /// kernels make no assumption about the GPU's subgroup size, so the same
    /// `.vmfb` runs on any Android GPU and gives the host's ids on lavapipe.
    /// `valhall` (Mali) and `adreno` (Qualcomm) builds are faster on their
    /// GPUs but bake in a subgroup size (16, 64): on a device whose subgroups
    /// are narrower (lavapipe runs 8 here) their reductions are wrong, so they
    /// cannot be verified without that GPU (`spec/iree.md`).
    pub const DEFAULT_VULKAN_TARGET: &'static str = "vp_android_baseline_2022";

    /// Vulkan target names `iree-compile` 3.13.0 accepts for `--iree-vulkan-target`
    /// (each one checked against the real compiler). `adreno-NNN` and
    /// `adreno-NNNl` product names are accepted as well (see [`Target::vulkan`]).
    /// An unknown name makes iree-compile 3.13.0 print `Unknown Vulkan target`
    /// and crash, so kiln rejects it first.
    pub const VULKAN_TARGETS: &'static [&'static str] = &[
        // Arm Mali (phones)
        "valhall",
        "valhall1",
        "valhall2",
        "valhall3",
        "valhall4",
        "mali-g57",
        "mali-g77",
        "mali-g78",
        "mali-g310",
        "mali-g510",
        "mali-g615",
        "mali-g710",
        "mali-g715",
        "mali-g720",
        "mali-g725",
        "mali-g1",
        // Qualcomm Adreno (phones)
        "adreno",
        // Khronos Android baseline profile (any Vulkan 1.1 Android phone)
        "vp_android_baseline_2022",
        // Mesa's CPU Vulkan driver
        "llvmpipe",
        // NVIDIA
        "pascal",
        "volta",
        "turing",
        "ampere",
        "ada",
        "sm_60",
        "sm_61",
        "sm_62",
        "sm_70",
        "sm_72",
        "sm_75",
        "sm_80",
        "sm_86",
        "sm_87",
        "sm_89",
        "a100",
        "rtx3070",
        "rtx3070ti",
        "rtx3080",
        "rtx3080ti",
        "rtx3090",
        "rtx3090ti",
        "rtx4060",
        "rtx4070",
        "rtx4080",
        "rtx4090",
        // AMD
        "rdna1",
        "rdna2",
        "rdna3",
        "rdna4",
        "cdna1",
        "cdna2",
        "cdna3",
        "cdna4",
        "gfx908",
        "gfx90a",
        "gfx942",
        "gfx950",
        "gfx1010",
        "gfx1030",
        "gfx1100",
        "gfx1101",
        "gfx1102",
        "gfx1103",
        "gfx1150",
        "gfx1151",
        "gfx1200",
        "gfx1201",
        "gfx1250",
        "mi100",
        "mi210",
        "mi250",
        "mi250x",
        "mi300a",
        "mi300x",
        "mi308x",
        "mi325x",
        "mi350x",
        "mi355x",
        "mi455x",
        "rx7700xt",
        "rx7800xt",
        "rx7900xt",
        "rx7900xtx",
        "rx9060xt",
        "rx9070",
        "rx9070xt",
        "r9700",
        "v710",
        "w7700",
        "w7800",
        "w7900",
        "phoenix",
        "strix-point",
        "strix-halo",
    ];

    /// Parses `host`, `arm64`, `arm32` or `vulkan` (with [`Target::DEFAULT_VULKAN_TARGET`]).
    /// `vulkan:NAME` selects another Vulkan target.
    pub fn parse(s: &str) -> Result<Target, IreeError> {
        match s.trim() {
            "host" => Ok(Target::Host),
            "arm64" => Ok(Target::Arm64),
            "arm32" => Ok(Target::Arm32),
            "vulkan" => Target::vulkan(Target::DEFAULT_VULKAN_TARGET),
            other => match other.strip_prefix("vulkan:") {
                Some(name) => Target::vulkan(name),
                None => Err(IreeError::UnknownTarget(other.to_string())),
            },
        }
    }

    /// A Vulkan target with the given `--iree-vulkan-target` name, validated.
    pub fn vulkan(name: &str) -> Result<Target, IreeError> {
        validate_vulkan_target(name)?;
        Ok(Target::Vulkan {
            target: name.to_string(),
        })
    }

    /// Parses a comma-separated list (`host,arm64`); `vulkan_target`
    /// replaces the default Vulkan target name. Duplicates are dropped.
    pub fn parse_list(list: &str, vulkan_target: Option<&str>) -> Result<Vec<Target>, IreeError> {
        let items = list.split(',').map(str::trim).filter(|s| !s.is_empty());
        let out = Target::resolve_list(
            items.map(Target::parse).collect::<Result<Vec<_>, _>>()?,
            vulkan_target,
        )?;
        if out.is_empty() {
            return Err(IreeError::UnknownTarget(list.to_string()));
        }
        Ok(out)
    }

    /// `targets` in order, each once, a Vulkan target of the default name
    /// ([`Target::DEFAULT_VULKAN_TARGET`]) given `vulkan_target`'s name instead
    /// (validated) when there is one: what `kiln compile --target LIST
    /// --vulkan-target NAME` compiles.
    pub fn resolve_list(
        targets: impl IntoIterator<Item = Target>,
        vulkan_target: Option<&str>,
    ) -> Result<Vec<Target>, IreeError> {
        let mut out: Vec<Target> = Vec::new();
        for t in targets {
            let t = match (&t, vulkan_target) {
                (Target::Vulkan { target }, Some(name))
                    if target == Target::DEFAULT_VULKAN_TARGET =>
                {
                    Target::vulkan(name)?
                }
                _ => t,
            };
            if !out.contains(&t) {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// The file-name suffix: `host`, `arm64`, `arm32` or `vulkan`.
    pub fn suffix(&self) -> &'static str {
        match self {
            Target::Host => "host",
            Target::Arm64 => "arm64",
            Target::Arm32 => "arm32",
            Target::Vulkan { .. } => "vulkan",
        }
    }

    /// Validates the target (the Vulkan name) without building flags.
    pub fn validate(&self) -> Result<(), IreeError> {
        match self {
            Target::Vulkan { target } => validate_vulkan_target(target),
            _ => Ok(()),
        }
    }

    /// The `iree-compile` flags for this target, `--iree-input-type=stablehlo`
    /// first.
    pub fn compile_flags(&self) -> Vec<String> {
        // Data tiling on the global-optimization path: matmul operands are
        // packed into the tiles the CPU kernels want, the weights at load,
        // into hoisted globals (one packed copy per function); the
        // dispatch-creation path (`--iree-opt-data-tiling=true`) holds about
        // twice those bytes at the same ids. Measured in
        // docs/journal/2026-12-03-data-tiling-path.md. `kiln compile
        // --low-memory` appends NO_DATA_TILING_FLAGS
        // (the last flag wins).
        const LOCAL: [&str; 5] = [
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            "--iree-opt-data-tiling=false",
            "--iree-global-opt-data-tiling",
            CONST_EXPR_GROWTH_FLAG,
        ];
        let mut f: Vec<String> = vec![INPUT_TYPE_FLAG.to_string()];
        match self {
            Target::Host => {
                f.extend(LOCAL.iter().map(|s| s.to_string()));
                f.push("--iree-llvmcpu-target-cpu=host".into());
            }
            Target::Arm64 => {
                f.extend(LOCAL.iter().map(|s| s.to_string()));
                f.push("--iree-llvmcpu-target-triple=aarch64-linux-android29".into());
                f.push("--iree-llvmcpu-target-cpu=cortex-a76".into());
                f.push("--iree-llvmcpu-target-cpu-features=+dotprod".into());
            }
            Target::Arm32 => {
                f.extend(LOCAL.iter().map(|s| s.to_string()));
                f.push("--iree-llvmcpu-target-triple=armv7a-linux-androideabi29".into());
                f.push("--iree-llvmcpu-target-cpu=cortex-a55".into());
                f.push("--iree-llvmcpu-target-cpu-features=+neon".into());
                // Without it every executable carries ARM EHABI unwind tables
                // that import `__aeabi_unwind_cpp_pr0`, and IREE's embedded
                // ELF loader refuses any import ("imports are not supported
                // in the platform-agnostic loader"): no arm32 module loaded.
                f.push("--iree-llvmcpu-debug-symbols=false".into());
            }
            Target::Vulkan { target } => {
                f.push("--iree-hal-target-device=vulkan".into());
                f.push(format!("--iree-vulkan-target={target}"));
            }
        }
        f
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Vulkan { target } if target != Target::DEFAULT_VULKAN_TARGET => {
                write!(f, "vulkan:{target}")
            }
            _ => f.write_str(self.suffix()),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = IreeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Target::parse(s)
    }
}

/// Serde and JSON Schema impls for `$ty`, written as its text form (its
/// `Display`) and read back with its `FromStr`; `$schema` is the JSON
/// Schema of that string (inlined where the type is used).
macro_rules! serde_as_text {
    ($ty:ident, $schema:expr) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        impl schemars::JsonSchema for $ty {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($ty).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                $schema
            }
        }
    };
}

// `host`, `arm64`, `arm32`, `vulkan`, or `vulkan:NAME` for another Vulkan
// target: any string (the Vulkan names are open-ended).
serde_as_text!(Target, schemars::json_schema!({ "type": "string" }));

/// A runtime HAL device for `iree-run-module --device=` (and the
/// `--device` value of `kiln run`, `generate` and `chat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// Multi-threaded CPU (the phone's default).
    #[default]
    LocalTask,
    /// Single-threaded CPU.
    LocalSync,
    /// Vulkan GPU (lavapipe on a machine without a GPU).
    Vulkan,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Device {
    /// Every device, in the order `--help` lists them.
    pub const ALL: [Device; 3] = [Device::LocalTask, Device::LocalSync, Device::Vulkan];

    /// Parses `local-task`, `local-sync` or `vulkan`.
    pub fn parse(s: &str) -> Result<Device, IreeError> {
        match s {
            "local-task" => Ok(Device::LocalTask),
            "local-sync" => Ok(Device::LocalSync),
            "vulkan" => Ok(Device::Vulkan),
            other => Err(IreeError::UnknownDevice(other.to_string())),
        }
    }

    /// The IREE device name.
    pub fn name(self) -> &'static str {
        match self {
            Device::LocalTask => "local-task",
            Device::LocalSync => "local-sync",
            Device::Vulkan => "vulkan",
        }
    }

    /// The `--device=` flag.
    pub fn flag(self) -> String {
        format!("--device={}", self.name())
    }
}

impl std::str::FromStr for Device {
    type Err = IreeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Device::parse(s)
    }
}

// `local-task`, `local-sync` or `vulkan`.
serde_as_text!(Device, {
    let names: Vec<&str> = Device::ALL.iter().map(|d| d.name()).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
});

/// `iree-run-module` flag fixing the number of local-task worker groups
/// (3.13.0 accepts it; 0 means IREE's own topology detection).
pub fn task_groups_flag(n: usize) -> String {
    format!("--task_topology_group_count={n}")
}

/// `iree-run-module` flag binding a parameter file to a scope.
pub fn parameters_flag(scope: &str, path: &std::path::Path) -> String {
    format!("--parameters={scope}={}", path.display())
}

/// `iree-run-module` flag lifting the 1024-element print limit so every
/// output element appears on stdout.
pub const OUTPUT_MAX_ELEMENTS_FLAG: &str = "--output_max_element_count=2147483647";

/// Emulator binary kiln uses to run the aarch64 `iree-run-module` on x86.
pub const QEMU_AARCH64: &str = "qemu-aarch64-static";
/// The qemu-user binary for `--emulate arm32`.
pub const QEMU_ARM: &str = "qemu-arm-static";

/// pip platform tag of the aarch64 runtime wheel used under qemu.
pub const AARCH64_WHEEL_PLATFORM: &str = "manylinux_2_28_aarch64";

/// Python version tag of the aarch64 runtime wheel used under qemu.
pub const AARCH64_WHEEL_PYTHON: &str = "3.11";

/// The iree-compile flags that pack `keys` of `archives` (scope `scope`)
/// at compile time into `export`: the keys are imported into the compile
/// (nothing else), and every packed constant goes to `export` under
/// [`PACKED_SCOPE`](super::pack::PACKED_SCOPE).
pub(crate) fn pack_flags(
    archives: &[&Path],
    scope: &str,
    keys: &[String],
    export: &Path,
) -> Vec<String> {
    let mut flags: Vec<String> = archives
        .iter()
        .map(|a| format!("--iree-parameter-import={scope}={}", a.display()))
        .collect();
    // 0: no import by size; only the keys below.
    flags.push("--iree-parameter-import-maximum-size=0".to_string());
    flags.extend(
        keys.iter()
            .map(|k| format!("--iree-parameter-import-keys={k}")),
    );
    flags.push(format!(
        "--iree-parameter-export={}={}",
        super::pack::PACKED_SCOPE,
        export.display()
    ));
    flags.push("--iree-parameter-export-minimum-size=0".to_string());
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_devices_serialize_as_their_names() {
        let valhall = Target::vulkan("valhall").unwrap();
        let cases = [
            (Target::Host, "\"host\""),
            (Target::Arm64, "\"arm64\""),
            (Target::Arm32, "\"arm32\""),
            (Target::parse("vulkan").unwrap(), "\"vulkan\""),
            (valhall, "\"vulkan:valhall\""),
        ];
        for (t, json) in cases {
            assert_eq!(serde_json::to_string(&t).unwrap(), json);
            assert_eq!(serde_json::from_str::<Target>(json).unwrap(), t);
        }
        for d in [Device::LocalTask, Device::LocalSync, Device::Vulkan] {
            let json = format!("\"{}\"", d.name());
            assert_eq!(serde_json::to_string(&d).unwrap(), json);
            assert_eq!(serde_json::from_str::<Device>(&json).unwrap(), d);
        }
        let e = serde_json::from_str::<Device>("\"cuda\"").unwrap_err();
        assert!(e.to_string().contains("unknown device 'cuda'"), "{e}");
        assert!(serde_json::from_str::<Target>("\"vulkan:nope\"").is_err());
    }

    #[test]
    fn install_script_pins_the_same_version() {
        let script = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/install-deps.sh"
        ))
        .unwrap();
        assert!(
            script.contains(&format!("IREE_VERSION={}", IREE_VERSION)),
            "scripts/install-deps.sh must pin IREE {}",
            IREE_VERSION
        );
        assert!(script.contains(AARCH64_WHEEL_PLATFORM));
        assert!(script.contains(&format!("--python-version {}", AARCH64_WHEEL_PYTHON)));
    }
}
