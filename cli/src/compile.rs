//! `kiln compile`: run iree-compile for one or more targets.

use crate::error::Error;
use kiln::export::Layout;
use kiln::iree::{Target, Toolchain};
use kiln::manifest::ExportManifest;
use std::path::PathBuf;

/// Arguments of `kiln compile`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The StableHLO module (`NAME-gen.mlir` or `NAME.mlir`).
    pub module: PathBuf,
    /// Targets: host, arm64, arm32, vulkan or vulkan:NAME (comma-separated or repeated).
    #[arg(
        long,
        short = 't',
        value_delimiter = ',',
        required = true,
        value_name = "LIST",
        value_parser = Target::parse
    )]
    pub target: Vec<Target>,
    /// Vulkan target for `--iree-vulkan-target` of a plain `vulkan` in --target (default vp_android_baseline_2022, any Android GPU; valhall, adreno: tuned)
    #[arg(long, value_name = "NAME")]
    pub vulkan_target: Option<String>,
    /// Output directory (default: the module's directory). Files are `NAME-<target>.vmfb`.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Compile at most N targets at once (default: number of CPUs).
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
    /// CPU targets without data tiling: the weights stay in the archive's
    /// layout instead of a packed copy made at load, so about half the
    /// resident memory of a forward module (SmolLM2: 302 vs 564 MB), for a
    /// slower forward (181 vs 117 ms at SEQ 64 on the host). A KV module
    /// gains nothing from it (spec/iree.md). A `--weights keep` module
    /// widens its matrices on every call instead of once at load (a
    /// fraction of the memory, several times the decode time;
    /// spec/quantized-weights.md). No effect on Vulkan.
    #[arg(long)]
    pub low_memory: bool,
    /// CPU targets: pack the weights of the matrix products while
    /// compiling, into `NAME-<target>.packed.irpa` beside the module (each
    /// packed tensor stored once), instead of at every load: for a KV
    /// module 55-65 % of the resident memory at the same speed (SmolLM2
    /// --weights fast: 196 vs 319 MB; spec/iree.md). Reads the export's
    /// `NAME.irpa`.
    #[arg(long, conflicts_with = "low_memory")]
    pub pack: bool,
    /// Use the IREE venv (or tool directory) at DIR.
    #[arg(long, value_name = "DIR")]
    pub iree_dir: Option<PathBuf>,
    /// Extra flags passed to iree-compile unchanged (after `--`).
    #[arg(last = true, value_name = "IREE FLAGS")]
    pub extra: Vec<String>,
    /// Print a JSON report on stdout instead of text (and no status lines).
    #[arg(long)]
    pub json: bool,
}

/// Runs `kiln compile`.
pub fn run(args: Args) -> crate::error::Result<i32> {
    if args.json {
        super::set_quiet();
    }
    let targets = Target::resolve_list(args.target, args.vulkan_target.as_deref())?;
    if args.vulkan_target.is_some() && !targets.iter().any(|t| matches!(t, Target::Vulkan { .. })) {
        return Err(Error::Usage(
            "--vulkan-target given but no vulkan target in --target".into(),
        ));
    }
    if args.pack && targets.iter().any(|t| matches!(t, Target::Vulkan { .. })) {
        return Err(Error::Usage(
            "--pack packs weights for the CPU kernels: give it host, arm64 or arm32 targets, and compile vulkan without it".into(),
        ));
    }
    if !args.module.is_file() {
        return Err(Error::io(
            &args.module,
            std::io::Error::new(std::io::ErrorKind::NotFound, "module not found"),
        ));
    }
    let name = Layout::compiled_stem(&args.module).ok_or_else(|| {
        Error::Usage(format!("{}: not a module file name", args.module.display()))
    })?;
    let out_dir = match args.out {
        Some(d) => d,
        None => match args.module.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    if args.jobs == Some(0) {
        return Err(Error::Usage("--jobs must be at least 1".into()));
    }
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let tc = Toolchain::locate(args.iree_dir.as_deref())?;
    let start = std::time::Instant::now();
    crate::status!(
        "kiln: compiling {} for {} ({} at a time)",
        args.module.display(),
        targets
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        jobs.min(targets.len())
    );
    // After the preset, before the user's flags (a later flag wins).
    let low_memory: &[&str] = if args.low_memory {
        &kiln::iree::CompileOptions::NO_DATA_TILING_FLAGS
    } else {
        &[]
    };
    let extra: Vec<String> = low_memory
        .iter()
        .map(|s| s.to_string())
        .chain(args.extra.iter().cloned())
        .collect();
    // The export's archive beside the module: packing reads it, and the
    // module reads its row-chunk entries.
    let archive = Layout::of_module(&args.module)
        .layout
        .path(kiln::export::Artifact::Irpa);
    let archive = (args.pack || archive.is_file()).then_some(archive);
    let opts = kiln::iree::CompileOptions::default()
        .archive(archive)
        .pack(args.pack)
        .jobs(jobs)
        .extra(extra)
        .progress(super::progress::bars());
    // A folder this run creates goes again when the compile fails (only
    // while it is empty: nothing else is ever removed).
    let created: Vec<PathBuf> = out_dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .map(PathBuf::from)
        .collect();
    let outs = match tc.compile_many(&args.module, &targets, &out_dir, &name, &opts) {
        Ok(outs) => outs,
        Err(e) => {
            for d in &created {
                let _ = std::fs::remove_dir(d);
            }
            return Err(e.into());
        }
    };
    if args.pack {
        // A module none of whose whole parameters reach a product (only
        // sliced or elementwise ones) has nothing to pack at compile time;
        // say so rather than leave it unremarked.
        for (t, o) in targets.iter().zip(&outs) {
            if !matches!(t, Target::Vulkan { .. }) && !kiln::iree::pack::packed_archive(o).is_file()
            {
                eprintln!(
                    "kiln: note: {}: no weight could be packed while compiling (only whole parameters that reach a matrix product through conversions, reshapes and block widenings can); it is compiled as without --pack",
                    o.display()
                );
            }
        }
    }
    let compiled: Vec<(Target, PathBuf)> = targets.iter().cloned().zip(outs.clone()).collect();
    let recorded = ExportManifest::record_compiles(&tc, &args.module, &compiled, &opts.extra)?;
    if let Some(manifest) = &recorded {
        crate::status!(
            "kiln: recorded how they were compiled in {}",
            manifest.display()
        );
    }
    if args.json {
        let modules: Vec<serde_json::Value> = targets
            .iter()
            .zip(&outs)
            .map(|(t, o)| serde_json::json!({ "target": t.to_string(), "path": o }))
            .collect();
        super::print_json(&serde_json::json!({
            "module": args.module,
            "modules": modules,
            "recorded_in": recorded,
            "seconds": start.elapsed().as_secs_f64(),
        }));
    } else {
        for o in &outs {
            println!("{}", o.display());
        }
    }
    crate::status!(
        "kiln: compiled {} module(s) in {:.1} s",
        outs.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(0)
}
