//! clap parsers for the library's value types (the library has no clap):
//! each lists the possible values, with their help, for `--help`, errors
//! and shell completions.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use kiln::iree::{Device, Emulation};

/// `--device`: `local-task`, `local-sync` or `vulkan`.
pub fn device() -> impl TypedValueParser<Value = Device> {
    PossibleValuesParser::new([
        PossibleValue::new(Device::LocalTask.name())
            .help("Multi-threaded CPU (the phone's default)"),
        PossibleValue::new(Device::LocalSync.name()).help("Single-threaded CPU"),
        PossibleValue::new(Device::Vulkan.name())
            .help("Vulkan GPU (lavapipe on a machine without a GPU)"),
    ])
    .map(|s| Device::parse(&s).expect("a listed device parses"))
}

/// `--emulate`: `arm64` (also `aarch64`) or `arm32` (also `armv7`).
pub fn emulation() -> impl TypedValueParser<Value = Emulation> {
    PossibleValuesParser::new([
        PossibleValue::new("arm64").alias("aarch64").help(
            "Run the aarch64 runtime under qemu-aarch64-static (for a whole \
             generation, kiln's runtime program built for aarch64)",
        ),
        PossibleValue::new("arm32").alias("armv7").help(
            "Run the armv7 runtime under qemu-arm-static on local-sync (for a \
             whole generation, kiln's runtime program built for armv7)",
        ),
    ])
    .map(|s| Emulation::parse(&s).expect("a listed architecture parses"))
}
