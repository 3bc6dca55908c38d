//! How the binary prints a library error. kiln's errors state facts (what
//! is wrong, where, what is supported); what to type about it (a flag, a
//! `kiln` verb, an install script) is the command line's to say, so it is
//! added here, matched on the error's variant.

use kiln::iree::limits::VulkanLimit;
use kiln::iree::IreeError;
use kiln::Error;

/// What to run when the IREE toolchain is missing.
const INSTALL: &str = "run `kiln toolchain install` (or scripts/install-deps.sh)";

/// The line `kiln` prints for `e` (after `kiln: error: `): the error's own
/// message in the command line's terms, then what to do about it.
pub fn render(e: &Error) -> String {
    let message = match e {
        Error::Iree(IreeError::BadToolPath { what, path })
            if what == kiln::iree::toolchain::EXPLICIT_DIR =>
        {
            format!(
                "--iree-dir points to {}, which is not an executable",
                path.display()
            )
        }
        _ => e.to_string(),
    };
    format!("{message}{}", hint(e).unwrap_or_default())
}

/// What the command line adds to `e`'s message: the flag, verb or script
/// that fixes it, with its leading separator (`; `, ` (…)`, a new line).
pub fn hint(e: &Error) -> Option<String> {
    match e {
        Error::Iree(e) => iree(e),
        _ => None,
    }
}

/// Hints for the IREE driver's errors.
fn iree(e: &IreeError) -> Option<String> {
    Some(match e {
        IreeError::NotFound { .. } => format!("; {INSTALL}"),
        IreeError::BadToolPath { .. } => format!("; fix it or {INSTALL}"),
        IreeError::NoVenv { .. } => ": run `kiln toolchain install` first".into(),
        IreeError::NoSessionVenv { .. } => " (run `kiln toolchain install`)".into(),
        IreeError::EmulatorMissing(_) => "; run scripts/install-deps.sh (or `kiln toolchain install --emulators` for the aarch64 runtime)".into(),
        IreeError::Bf16Function { .. } => ": re-export with --kv-dtype f32 for Vulkan".into(),
        IreeError::I8Weights { .. } => {
            "; export with --weights keep, q8_0 or q4_0 for Vulkan".into()
        }
        IreeError::VulkanLimit(VulkanLimit::Workgroups { .. }) => format!(
            "\nhint: kiln export uses an LM head over a larger vocabulary in row chunks of at most {} rows",
            kiln::models::MAX_TABLE_ROWS
        ),
        IreeError::VulkanLimit(VulkanLimit::StorageBuffer { .. }) => {
            "\nhint: kiln export keeps its tables, weight matrices and KV caches under the range (row chunks over \
             the same archive entry, caches in groups of layers; --max-tensor-bytes, default 2^27); for what \
             remains (attention scores at a long --seq or --prompt-len) export with a shorter --seq or a smaller \
             --prompt-len, or use the KV pair"
                .into()
        }
        _ => return None,
    })
}
