//! `kiln package`: lay out the files an Android app ships.

use crate::error::Error;
use kiln::package::{package, PackageOptions, TokenizerChoice};
use std::path::PathBuf;

/// Arguments of `kiln package`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The export manifest (`NAME.json`, written by `kiln export`); the
    /// modules `NAME-{arm64,arm32,vulkan}.vmfb` are read from beside it.
    pub manifest: PathBuf,
    /// The assets directory to write (created when missing).
    #[arg(long, short = 'o', value_name = "ASSETS_DIR")]
    pub out: PathBuf,
    /// Tokenizer source: a GGUF file, a tokenizer.json or an HF folder
    /// (default: the export's source checkpoint).
    #[arg(long, value_name = "PATH", conflicts_with = "no_tokenizer")]
    pub tokenizer: Option<PathBuf>,
    /// Package no tokenizer.
    #[arg(long)]
    pub no_tokenizer: bool,
    /// Also package `NAME-host.vmfb` (to try the assets on this machine).
    #[arg(long)]
    pub include_host: bool,
    /// Print a JSON report on stdout instead of text (and no status lines).
    #[arg(long)]
    pub json: bool,
}

/// Runs `kiln package`: prints every written file on stdout, notes on stderr.
pub fn run(args: Args) -> crate::error::Result<i32> {
    if args.json {
        super::set_quiet();
    }
    let tokenizer = match (args.tokenizer, args.no_tokenizer) {
        (Some(p), false) => TokenizerChoice::Path(p),
        (None, true) => TokenizerChoice::None,
        (None, false) => TokenizerChoice::FromSource,
        (Some(_), true) => {
            return Err(Error::Usage(
                "--tokenizer and --no-tokenizer exclude each other".into(),
            ))
        }
    };
    let report = package(
        &args.manifest,
        &PackageOptions {
            out_dir: args.out,
            tokenizer,
            include_host: args.include_host,
            progress: super::progress::bars(),
        },
    )?;
    // Each warning with what the command line says to do about it.
    let warnings: Vec<String> = report.warnings.iter().map(super::hint::warning).collect();
    if !args.json {
        // Under --json they are the report's "warnings".
        for w in &warnings {
            eprintln!("kiln: warning: {w}");
        }
    }
    if args.json {
        let mut json = serde_json::to_value(&report).expect("kiln's reports serialize");
        json["warnings"] = warnings.into();
        super::print_json(&json);
    } else {
        for p in &report.written {
            println!("{}", p.display());
        }
    }
    let m = &report.manifest;
    let total: u64 = m.files.iter().map(|f| f.bytes).sum();
    crate::status!(
        "kiln: packaged {} ({}) into {}: {} files, {:.1} MB",
        m.name,
        m.modules.keys().cloned().collect::<Vec<_>>().join(", "),
        report
            .manifest_path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        m.files.len() + 1,
        total as f64 / 1e6
    );
    Ok(0)
}
