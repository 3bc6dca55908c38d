//! The `kiln` binary: the command line over the kiln library, one file per
//! verb, each with a clap `Args` struct and a `run` function returning the
//! process exit code. What only the command line needs lives here: the
//! clap parsers, usage errors ([`Error::Usage`]) and indicatif's bars.
//!
//! Exit codes: 0 success, 1 a check failed (e.g. `demo` printed FAIL,
//! `params diff` found differences), 2 bad input (a flag, a file, a
//! checkpoint, a module; the error is printed on one line), 3 an external
//! tool failed or is missing ([`error::Error::exit_code`]).

pub mod chat;
pub mod compile;
pub mod demo;
pub mod error;
pub mod export;
pub mod gen_common;
pub mod generate;
pub mod hint;
pub mod interp;
pub mod package;
pub mod params;
pub mod progress;
pub mod run;
pub mod stop;
pub mod toolchain;
pub mod values;
pub mod verify;

use clap::{Parser, Subcommand};

/// Set by `--quiet`.
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `--quiet` was given: no status lines and no progress bars on
/// stderr (errors, warnings and notes still print).
pub fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

/// Turns status lines and bars off (`--quiet`, and `--json`, whose stdout
/// is one JSON document).
pub fn set_quiet() {
    QUIET.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Prints `value` as one pretty JSON document on stdout (`--json`).
pub fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("kiln's reports serialize")
    );
}

/// `eprintln!` for status lines, silent under `--quiet`.
#[macro_export]
macro_rules! status {
    ($($arg:tt)*) => {
        if !$crate::quiet() {
            eprintln!($($arg)*);
        }
    };
}

/// kiln: LLM checkpoint → StableHLO + parameter archive → IREE modules for Android.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about, propagate_version = true)]
pub struct Cli {
    /// Print no status lines or progress bars on stderr (results still go
    /// to stdout; errors, warnings and notes still print).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// The verb to run.
    #[command(subcommand)]
    pub command: Command,
}

/// kiln's verbs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build a small model in-process, export, compile, run and check it.
    Demo(demo::Args),
    /// Show or install the pinned IREE toolchain.
    Toolchain(toolchain::Args),
    /// Inspect, convert and compare parameter files (safetensors, irpa, gguf).
    Params(params::Args),
    /// Export a checkpoint to MLIR + safetensors + irpa + manifest.
    Export(export::Args),
    /// Compile an exported module with iree-compile for one or more targets.
    Compile(compile::Args),
    /// Run a compiled module on token ids and print the predicted ids.
    Run(run::Args),
    /// Run an exported MLIR module with kiln's own interpreter.
    Interp(interp::Args),
    /// Generate text with the phone's redecode loop.
    Generate(generate::Args),
    /// Chat with a KV-cache module: multi-turn, the caches kept across turns.
    Chat(chat::Args),
    /// Lay out the files an Android app ships.
    Package(package::Args),
    /// Check a folder of assets or an export against its manifests.
    Verify(verify::Args),
    /// Print a shell completion script for kiln (bash, zsh, fish, elvish,
    /// powershell) to stdout.
    #[command(
        after_help = "Example:\n  kiln completions bash > ~/.local/share/bash-completion/completions/kiln"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Writes the completion script of `shell` for the whole command line.
fn completions(shell: clap_complete::Shell) -> crate::error::Result<i32> {
    use clap::CommandFactory;
    clap_complete::generate(shell, &mut Cli::command(), "kiln", &mut std::io::stdout());
    Ok(0)
}

/// A clap error on one line, as kiln's own errors are: its message and
/// notes (e.g. the possible values) without the usage and `--help` lines.
fn one_line(rendered: &str) -> String {
    rendered
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .map(|l| l.strip_prefix("error: ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Parses the process arguments, runs the verb, returns the exit code.
fn run_cli() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                e.exit()
            }
            eprintln!("kiln: error: {}", one_line(&e.render().to_string()));
            return 2;
        }
    };
    if cli.quiet {
        set_quiet();
    }
    let result = match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Toolchain(a) => toolchain::run(a),
        Command::Params(a) => params::run(a),
        Command::Export(a) => export::run(a),
        Command::Compile(a) => compile::run(a),
        Command::Run(a) => run::run(a),
        Command::Interp(a) => interp::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Chat(a) => chat::run(a),
        Command::Package(a) => package::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Completions { shell } => completions(shell),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let line = match &e {
                error::Error::Kiln(e) => hint::render(e),
                error::Error::Usage(m) => m.clone(),
            };
            eprintln!("kiln: error: {line}");
            e.exit_code()
        }
    }
}

fn main() {
    std::process::exit(run_cli());
}
