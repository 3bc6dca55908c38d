//! How the binary prints what the library reports. kiln's errors and
//! warnings state facts (what is wrong, where, what is supported); what to
//! type about it (a flag, a `kiln` verb, an install script) is the command
//! line's to say, so it is added here, matched on the variant: [`render`]
//! for an error, [`warning`] for a package warning, [`stop`] for why a
//! generation stopped.
//!
//! Most hints follow the library's message ([`hint`]); a few messages whose
//! subject is a setting are said in the flag's words instead ([`message`]).

use kiln::export::ExportError;
use kiln::generate::{GenerateError, Stop};
use kiln::interp::InterpError;
use kiln::iree::IreeError;
use kiln::manifest::ManifestError;
use kiln::models::ModelError;
use kiln::package::{PackageError, PackageWarning};
use kiln::params::ParamsError;
use kiln::step::StepError;
use kiln::Error;

/// What to run when the IREE toolchain is missing.
const INSTALL: &str = "run `kiln toolchain install` (or scripts/install-deps.sh)";

/// Export with a larger max context N.
const LARGER_N: &str = " (export with a larger --max-context)";

/// Where a package's tokenizer can come from instead.
const TOKENIZER: &str =
    "pass --tokenizer FILE (a GGUF, a tokenizer.json or an HF folder) or --no-tokenizer";

/// The line `kiln` prints for `e` (after `kiln: error: `): its message,
/// in the flags' words where it names a setting, then what to do about it.
pub fn render(e: &Error) -> String {
    let text = message(e).unwrap_or_else(|| e.to_string());
    format!("{text}{}", hint(e).unwrap_or_default())
}

/// `w` as `kiln package` prints it (after `kiln: warning: `, or in the
/// `--json` report's `warnings`).
pub fn warning(w: &PackageWarning) -> String {
    let hint = match w {
        PackageWarning::Stale { .. } => "; recompile with `kiln compile`".to_string(),
        PackageWarning::MissingKvModule {
            kv_mlir, target, ..
        } => format!(
            " (`kiln compile {} --target {}`)",
            kv_mlir.display(),
            target.suffix()
        ),
        _ => String::new(),
    };
    format!("{w}{hint}")
}

/// Why a generation stopped, as `kiln generate` and `kiln chat` say it.
pub fn stop(stop: Stop) -> String {
    match stop {
        Stop::MaxNewTokens => "--max-new-tokens reached".into(),
        other => other.to_string(),
    }
}

/// The message of `e` in the command line's words, when its subject is a
/// setting the binary takes as a flag (the library names the option or
/// field); `None` for every other error.
pub fn message(e: &Error) -> Option<String> {
    Some(match e {
        Error::Iree(IreeError::BadToolPath { what, path })
            if what == kiln::iree::Toolchain::EXPLICIT_DIR =>
        {
            format!(
                "--iree-dir points to {}, which is not an executable",
                path.display()
            )
        }
        Error::Export(ExportError::BadName { name }) => {
            format!("--name \"{name}\" must be a plain file name")
        }
        Error::Export(e @ ExportError::NoTensorMatches { pattern, .. }) => {
            format!("--weights-for {pattern}=…: {e}")
        }
        Error::Export(ExportError::WeightDtype { dtype }) => {
            format!("--weights must be bf16, f16, f32, keep, q8_0, q4_0, w8a8, w8a16, w8a16e or w16a16, not {dtype}")
        }
        Error::Export(ExportError::QuantizeType { ty }) => {
            format!("--weights quantizes to q8_0 or q4_0, not {ty}")
        }
        Error::Export(ExportError::PartialBlocks {
            checkpoint,
            tensor,
            shape,
            block,
            weights,
        }) => format!(
            "{}: tensor \"{tensor}\" {shape:?}: rows of {} are not whole {block}-element blocks, \
             so --weights {weights} cannot store it (use bf16)",
            checkpoint.display(),
            shape.get(1).copied().unwrap_or(0)
        ),
        Error::Export(ExportError::Unkeepable {
            checkpoint,
            tensor,
            ty,
        }) => format!(
            "{}: tensor \"{tensor}\" is {ty}, which --weights keep cannot store (it keeps {} matrices)",
            checkpoint.display(),
            ExportError::KEPT_TYPES,
        ),
        Error::Export(ExportError::KeepNeedsGguf {
            checkpoint,
            weights,
        }) => format!(
            "--weights {weights} keeps a GGUF file's quantization; {} is not a GGUF file",
            checkpoint.display()
        ),
        Error::Generate(GenerateError::OutOfRange {
            param,
            value,
            range,
        }) => format!("--{} {value}: must be {range}", param.replace('_', "-")),
        Error::Generate(GenerateError::NoCandidates) => {
            "sampling (--temperature > 0 or --repeat-penalty) needs the top-K candidates: \
             export with --kv-cache --sampling topk=K and generate with --kv-cache"
                .into()
        }
        Error::Generate(GenerateError::TooFewCandidates { top_k, k }) => {
            format!("--top-k {top_k}: the module returns only K = {k} candidates")
        }
        Error::Manifest(ManifestError::NotExport { path, source }) => format!(
            "{}: not a kiln export manifest (NAME.json written by `kiln export`): {source}",
            path.display()
        ),
        Error::Package(e @ PackageError::OutIsExportDir { .. }) => format!("--out {e}"),
        Error::Package(PackageError::NoHostModule { path }) => {
            format!("{}: --include-host: host module not found", path.display())
        }
        _ => return None,
    })
}

/// What the command line adds to `e`'s message: the flag, verb or script
/// that fixes it, with its leading separator (`; `, ` (…)`, a new line).
pub fn hint(e: &Error) -> Option<String> {
    match e {
        Error::Iree(e) => iree(e),
        Error::Step(StepError::PastContext { .. }) => Some(LARGER_N.into()),
        Error::Generate(e) => generate(e),
        Error::Export(e) => export(e),
        Error::Model(e) => model(e),
        Error::Package(e) => package(e),
        Error::Params(e) | Error::Interp(InterpError::Params(e)) => params(e),
        _ => None,
    }
}

/// Hints for the IREE driver's errors.
fn iree(e: &IreeError) -> Option<String> {
    Some(match e {
        IreeError::NotFound { .. } => format!("; {INSTALL}"),
        IreeError::BadToolPath { .. } => format!("; fix it or {INSTALL}"),
        IreeError::NoVenv { .. } => ": run `kiln toolchain install` first".into(),
        IreeError::EmulatorMissing(_) => "; run scripts/install-deps.sh (or `kiln toolchain install --emulators` for the aarch64 runtime)".into(),
        IreeError::I8Weights { .. } => {
            "; export with --weights keep, q8_0 or q4_0 for Vulkan".into()
        }
        IreeError::VulkanWorkgroups { .. } => format!(
            "\nhint: kiln export uses an LM head over a larger vocabulary in row chunks of at most {} rows",
            kiln::DecoderConfig::MAX_TABLE_ROWS
        ),
        IreeError::VulkanStorageBuffer { .. } => {
            "\nhint: kiln export keeps its tables, weight matrices and KV caches under the range (row chunks over \
             the same archive entry, caches in groups of layers; --max-tensor-bytes, default 2^27); for what \
             remains (attention scores at a long --seq or --prompt-len) export with a shorter --seq or a smaller \
             --prompt-len, or use the KV pair"
                .into()
        }
        _ => return None,
    })
}

/// Hints for generate's errors.
fn generate(e: &GenerateError) -> Option<String> {
    Some(match e {
        GenerateError::PromptOverSeq { .. } => " (export with a larger --seq)".into(),
        GenerateError::PromptOverContext { .. } => LARGER_N.into(),
        GenerateError::ConversationFull { .. } => " (start a new conversation from a shorter history, or export with a larger --max-context)".into(),
        GenerateError::CacheThroughFiles { .. } => ": export with --kv-dtype f32".into(),
        GenerateError::SamplingNeedsKv => {
            ": export with --kv-cache --sampling topk=K and generate with --kv-cache".into()
        }
        GenerateError::TooFewCandidates { top_k, .. } => {
            format!(" (export with --sampling topk={top_k})")
        }
        _ => return None,
    })
}

/// Hints for the export's errors.
fn export(e: &ExportError) -> Option<String> {
    Some(match e {
        ExportError::KeepNeedsGguf { .. } => {
            " (use --weights bf16, f16, f32, q8_0, q4_0 or w8a16)".into()
        }
        ExportError::Unkeepable { .. } => "; use --weights bf16".into(),
        _ => return None,
    })
}

/// Hints for the model loaders' errors (also when they name their file).
fn model(e: &ModelError) -> Option<String> {
    match e {
        ModelError::KvLayerOverBound { .. } => Some(": export with a smaller --max-context".into()),
        ModelError::TableRowOverBound { .. } => {
            Some(": export with a larger --max-tensor-bytes or a smaller --seq".into())
        }
        ModelError::InFile { source, .. } => model(source),
        _ => None,
    }
}

/// Hints for the package's errors.
fn package(e: &PackageError) -> Option<String> {
    Some(match e {
        PackageError::NoSource { .. } => format!(": {TOKENIZER}"),
        PackageError::TokenizerBuild { .. } | PackageError::NoTokenizerJson { .. } => {
            format!("; {TOKENIZER}")
        }
        PackageError::IrpaSize { .. } | PackageError::IrpaSha { .. } => "; re-export".into(),
        PackageError::NoModules { mlir, .. } => format!(
            ": run `kiln compile {} --target arm64,arm32,vulkan`",
            mlir.display()
        ),
        _ => return None,
    })
}

/// Hints for the parameter files' errors (also when the interpreter
/// reports them).
fn params(e: &ParamsError) -> Option<String> {
    match e {
        ParamsError::Undescribed { .. } => Some(" (write it with --describe)".into()),
        _ => None,
    }
}
