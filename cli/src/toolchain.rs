//! `kiln toolchain`: show where the IREE tools are, or install them.

use kiln::iree::Toolchain;
use std::path::PathBuf;

/// Arguments of `kiln toolchain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Use the IREE venv (or tool directory) at DIR instead of the usual lookup.
    #[arg(long, value_name = "DIR", global = true)]
    pub iree_dir: Option<PathBuf>,
    /// What to do (default: show the toolchain).
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

/// `kiln toolchain` sub-verbs.
#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// Install the pinned IREE (iree-base-compiler/runtime 3.13.0) into kiln's cache.
    Install(InstallArgs),
}

/// Arguments of `kiln toolchain install`.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// Also fetch the aarch64 runtime wheel used by `kiln run --emulate arm64`
    /// (qemu and arm64 libc come from scripts/install-deps.sh).
    #[arg(long)]
    pub emulators: bool,
}

/// Runs `kiln toolchain`.
pub fn run(args: Args) -> crate::error::Result<i32> {
    match args.command {
        Some(Cmd::Install(a)) => {
            let tc = Toolchain::install(true)?;
            if a.emulators {
                let run = Toolchain::install_emulators(true)?;
                eprintln!("kiln: aarch64 iree-run-module: {}", run.display());
                if tc.qemu_aarch64.is_none() || !Toolchain::arm64_libc_present() {
                    eprintln!(
                        "kiln: note: qemu-aarch64-static or arm64 libc is missing; run scripts/install-deps.sh (apt) to finish the emulator setup"
                    );
                }
            }
            show(&Toolchain::locate(args.iree_dir.as_deref())?)?;
            Ok(0)
        }
        None => {
            show(&Toolchain::locate(args.iree_dir.as_deref())?)?;
            Ok(0)
        }
    }
}

fn opt(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "(not found)".into())
}

fn show(tc: &Toolchain) -> crate::error::Result<()> {
    let (compile_version, runtime_version) = (tc.compiler_version()?, tc.runtime_version());
    let root = tc
        .root
        .as_ref()
        .map(|r| format!(" ({})", r.display()))
        .unwrap_or_default();
    // The directory given to `Toolchain::locate` is this verb's --iree-dir.
    let source = tc.source.replace(Toolchain::EXPLICIT_DIR, "--iree-dir");
    println!("found via:               {source}{root}");
    println!("iree-compile:            {}", tc.compile.display());
    println!("  version:               {compile_version}");
    println!("iree-run-module:         {}", tc.run_module.display());
    println!("  version:               {runtime_version}");
    println!("iree-benchmark-module:   {}", opt(&tc.benchmark_module));
    println!("iree-convert-parameters: {}", opt(&tc.convert_parameters));
    println!("iree-dump-parameters:    {}", opt(&tc.dump_parameters));
    println!("emulation (arm64):");
    println!("  qemu:                  {}", opt(&tc.qemu_aarch64));
    println!("  aarch64 runtime:       {}", opt(&tc.aarch64_run_module));
    println!("  aarch64 kiln-runtime:  {}", opt(&tc.aarch64_kiln_runtime));
    println!("  qemu (arm32):          {}", opt(&tc.qemu_arm));
    println!("  armv7 runtime:         {}", opt(&tc.armv7_run_module));
    println!("  armv7 kiln-runtime:    {}", opt(&tc.armv7_kiln_runtime));
    println!(
        "  arm64 libc:            {}",
        if Toolchain::arm64_libc_present() {
            "present"
        } else {
            "(not found)"
        }
    );
    if !compile_version.contains(Toolchain::IREE_VERSION) {
        eprintln!(
            "kiln: warning: kiln is pinned to IREE {} but found '{}'; flags may differ (run `kiln toolchain install`)",
            Toolchain::IREE_VERSION,
            compile_version
        );
    }
    Ok(())
}
