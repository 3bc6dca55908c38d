//! `kiln verify DIR`: checks a folder of packaged assets or an export
//! folder against its manifests (sizes, sha256, the modules' functions and
//! parameters, and with `--rebuild` the bytes of a fresh export and
//! compile); exit 1 on any mismatch, naming the file and the fault.

use kiln::iree::Toolchain;
use kiln::verify::{verify, VerifyOptions};
use std::path::PathBuf;

/// Arguments of `kiln verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The folder: `kiln package`'s assets (NAME.manifest.json) or `kiln
    /// export`'s output (NAME.json and the modules compiled beside it).
    pub dir: PathBuf,
    /// Also export and compile again from the manifest's recipe and
    /// compare the bytes (needs the checkpoint and the recorded iree-compile).
    #[arg(long)]
    pub rebuild: bool,
    /// The checkpoint to rebuild from, when it is not where the manifest
    /// says (it must have the recorded sha256).
    #[arg(long, value_name = "PATH", requires = "rebuild")]
    pub checkpoint: Option<PathBuf>,
    /// Use the IREE venv (or tool directory) at DIR.
    #[arg(long, value_name = "DIR")]
    pub iree_dir: Option<PathBuf>,
    /// Print a JSON report on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `kiln verify`: 0 when every check passed, 1 when one did not.
pub fn run(args: Args) -> crate::error::Result<i32> {
    if args.json {
        super::set_quiet();
    }
    let tc = Toolchain::locate(args.iree_dir.as_deref())?;
    crate::status!("kiln: verifying {}", args.dir.display());
    let opts = VerifyOptions::default()
        .rebuild(args.rebuild)
        .checkpoint(args.checkpoint);
    let report = verify(&args.dir, &tc, &opts)?;
    let code = if report.passed() { 0 } else { 1 };
    if args.json {
        super::print_json(&serde_json::json!({
            "dir": report.dir,
            "passed": report.passed(),
            "models": report.models,
        }));
        return Ok(code);
    }
    for m in &report.models {
        for f in &m.faults {
            println!("{}: {}", f.file, f.fault);
        }
        for n in &m.not_rebuilt {
            eprintln!("kiln: note: not rebuilt: {n}");
        }
        let rebuilt = match m.rebuilt.len() {
            0 => String::new(),
            n => format!(", {n} rebuilt byte for byte"),
        };
        let verdict = match m.faults.len() {
            0 => "passed".to_string(),
            n => format!("{n} fault(s)"),
        };
        crate::status!(
            "kiln: {} ({}): {} files, {} modules checked{rebuilt}: {verdict}",
            m.manifest,
            m.kind,
            m.files,
            m.modules
        );
    }
    Ok(code)
}
