//! `kiln params`: inspect, convert and compare parameter files
//! (safetensors, irpa, gguf). The format of an input is chosen by its magic
//! bytes, never its extension; the output format by the output's extension.

use crate::error::{Error, Result};
use clap::{Subcommand, ValueEnum};
use kiln::params::{
    BlockChange, BlockDiff, Conversion, ConvertError, ConvertOptions, DType, Diff, Inspection,
    Outcome, Recognized, StorageKind, TensorDiff,
};
use kiln::progress::{Progress, Unit};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Arguments of `kiln params`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// `kiln params` subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// List every tensor (name, dtype, shape, bytes, offset), totals, GGUF
    /// metadata, IRPA entry kinds, and the model family (a GGUF's
    /// `general.architecture`, or the `model_type` of the config.json beside
    /// the file) with whether `kiln export` supports it.
    Inspect {
        /// A .safetensors, .irpa or .gguf file, or a sharded checkpoint.
        file: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Convert and merge parameter files into one .irpa or .safetensors.
    Convert(ConvertArgs),
    /// Compare two files tensor by tensor (exit 1 when they differ).
    Diff {
        /// First file.
        a: PathBuf,
        /// Second file.
        b: PathBuf,
        /// Largest absolute difference still counted as equal.
        #[arg(long, default_value_t = 0.0)]
        tolerance: f64,
    },
}

/// Output element type of `kiln params convert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutDType {
    /// Keep each tensor's dtype (GGUF quantized tensors become f32).
    Keep,
    /// Float tensors become f32.
    F32,
    /// Float tensors become bf16 (round to nearest even).
    Bf16,
    /// Float tensors become f16 (round to nearest even).
    F16,
}

/// Arguments of `kiln params convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// Input files (any format; several are merged, duplicate names are an error).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Output: OUT.irpa or OUT.safetensors.
    #[arg(short, long, visible_alias = "out", value_name = "FILE")]
    pub output: PathBuf,
    /// Element type of float tensors in the output.
    #[arg(long, value_enum, default_value_t = OutDType::Keep)]
    pub dtype: OutDType,
    /// Rename a tensor: OLD=NEW (repeatable).
    #[arg(long, value_name = "OLD=NEW")]
    pub rename: Vec<String>,
    /// Leave a tensor out (repeatable).
    #[arg(long, value_name = "NAME")]
    pub exclude: Vec<String>,
    /// IRPA only: store each tensor's dtype and shape as entry metadata.
    #[arg(long)]
    pub describe: bool,
    /// IRPA only: write constant-valued tensors as SPLAT entries.
    #[arg(long)]
    pub splat: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `kiln params`.
pub fn run(args: Args) -> Result<i32> {
    match args.command {
        Cmd::Inspect { file, json } => inspect(&file, json),
        Cmd::Convert(a) => convert_cmd(a),
        Cmd::Diff { a, b, tolerance } => diff(&a, &b, tolerance),
    }
}

/// One line on whether `kiln export` builds a graph for `family`.
fn family_note(family: &str) -> String {
    use kiln::models::Family;
    match Family::parse(family) {
        Ok(_) => format!("model family: {family} (supported by kiln export)"),
        Err(_) => format!(
            "model family: {family} is not supported by kiln export (supported: {})",
            Family::supported()
        ),
    }
}

/// The `model_family` object of `params inspect --json`.
fn family_json(f: &str) -> serde_json::Value {
    serde_json::json!({
        "name": f,
        "supported": kiln::models::Family::parse(f).is_ok(),
        "supported_families": kiln::models::Family::ALL
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>(),
        "note": family_note(f),
    })
}

/// Runs `kiln params inspect`.
fn inspect(path: &Path, json: bool) -> Result<i32> {
    let i = Inspection::open(path)?;
    if json {
        let out = i.to_json(i.family.as_deref().map(family_json));
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(0);
    }
    print_inspect_header(&i);
    let name_w = print_tensor_table(&i);
    print_quantized(&i, name_w);
    Ok(0)
}

/// The first lines of `params inspect`: the file, its format and counts,
/// the model family and a GGUF's metadata.
fn print_inspect_header(i: &Inspection) {
    let tensors = &i.tensors;
    match &i.gguf {
        Some(g) => println!(
            "{}: gguf v{}, {} tensors, {} metadata keys, alignment {}",
            i.path.display(),
            g.version,
            tensors.len(),
            g.metadata.len(),
            g.alignment
        ),
        None => println!(
            "{}: {}, {} tensors",
            i.path.display(),
            i.format,
            tensors.len()
        ),
    }
    if let Some(f) = &i.family {
        println!("{}", family_note(f));
    }
    if let Some(g) = &i.gguf {
        for (k, v) in &g.metadata {
            println!("  {k} = {v}");
        }
    }
}

/// The tensor table of `params inspect`, then the totals and entry kinds;
/// returns the width of the name column.
fn print_tensor_table(i: &Inspection) -> usize {
    let (tensors, kinds) = (&i.tensors, &i.entry_kinds);
    let name_w = tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<name_w$}  {:<6}  {:<20}  {:>12}  {:>12}{}",
        "name",
        "dtype",
        "shape",
        "bytes",
        "offset",
        if kinds.is_empty() { "" } else { "  kind" }
    );
    for t in tensors {
        let shape = format!(
            "[{}]",
            t.shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        let off = t.offset.map_or("-".to_string(), |o| o.to_string());
        let kind = if kinds.is_empty() {
            String::new()
        } else {
            format!("  {}", t.kind.map_or("", StorageKind::name))
        };
        println!(
            "{:<name_w$}  {:<6}  {:<20}  {:>12}  {:>12}{kind}",
            t.name,
            t.dtype.to_string(),
            shape,
            t.nbytes,
            off
        );
    }
    println!(
        "total: {} tensors, {} elements, {} bytes",
        tensors.len(),
        i.total_elements(),
        i.total_bytes
    );
    if !kinds.is_empty() {
        let k: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        println!("entries: {}", k.join(", "));
    }
    name_w
}

/// The quantized matrices `params inspect` recognizes: `--weights w8a8`
/// rows, then block-quantized matrices.
fn print_quantized(i: &Inspection, name_w: usize) {
    if !i.int8_rows.is_empty() {
        println!(
            "i8 matrices, one f32 scale per row (kiln export --weights w8a8, w8a16, w8a16e or w16a16): {}",
            i.int8_rows.len()
        );
        for r in &i.int8_rows {
            let ([rows, k], bytes) = (r.shape, r.bytes);
            println!(
                "  {:<name_w$}  [{rows}, {k}]  {bytes:>10} bytes  ({})",
                r.name,
                r.parts.join(", ")
            );
        }
    }
    if !i.blocks.is_empty() {
        println!(
            "block-quantized matrices (kiln export --weights keep, spec/quantized-weights.md): {}",
            i.blocks.len()
        );
        for b in &i.blocks {
            println!(
                "  {:<name_w$}  {:<5}  {:<14}  groups of {:<2}  {:>10} bytes  ({})",
                b.name,
                b.form.ggml.to_string(),
                match b.shape {
                    Some([r, k]) => format!("[{r}, {k}]"),
                    None => format!("{} elements", b.elements),
                },
                b.form.group,
                b.bytes,
                b.parts.join(", ")
            );
        }
    }
}

/// One block-quantized matrix for `diff`: type, shape, group and bytes.
fn describe_block(b: &Recognized) -> String {
    let shape = match b.shape {
        Some([r, k]) => format!("[{r}, {k}]"),
        None => format!("{} elements", b.elements),
    };
    format!(
        "{} {shape}, groups of {}, {} bytes",
        b.form.ggml, b.form.group, b.bytes
    )
}

/// The progress bar of `params convert`, over every tensor's bytes, with
/// the tensor being written as its message.
struct ConvertBar(indicatif::ProgressBar);

impl ConvertBar {
    /// Hidden when quiet, not on a terminal, or under 64 MiB.
    fn new(quiet: bool, total: u64) -> ConvertBar {
        if quiet || !std::io::stderr().is_terminal() || total < (64 << 20) {
            return ConvertBar(indicatif::ProgressBar::hidden());
        }
        let b = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
        ) {
            b.set_style(style);
        }
        ConvertBar(b)
    }
}

impl Progress for ConvertBar {
    fn start(&self, label: &str, _total: u64, _unit: Unit) {
        self.0.set_message(label.to_string());
    }

    fn advance(&self, _label: &str, n: u64) {
        self.0.inc(n);
    }
}

/// Runs `kiln params convert`.
fn convert_cmd(a: ConvertArgs) -> Result<i32> {
    let mut opts = ConvertOptions::default();
    opts.dtype = match a.dtype {
        OutDType::Keep => None,
        OutDType::F32 => Some(DType::F32),
        OutDType::Bf16 => Some(DType::BF16),
        OutDType::F16 => Some(DType::F16),
    };
    opts.describe = a.describe;
    opts.splat = a.splat;
    // The output's name is checked before the other flags.
    opts.check_output(&a.output)
        .map_err(|e| convert_error(e, &a))?;
    opts.renames = parse_renames(&a.rename)?;
    opts.exclude = a.exclude.clone();
    let conversion =
        Conversion::plan(&a.inputs, &a.output, &opts).map_err(|e| convert_error(e, &a))?;
    let bar = ConvertBar::new(a.quiet, conversion.total_bytes());
    conversion.write(&bar)?;
    bar.0.finish_and_clear();
    Ok(0)
}

/// A refused conversion, in terms of the flags of `a`.
fn convert_error(e: ConvertError, a: &ConvertArgs) -> Error {
    match e {
        ConvertError::OutputFormat(_) => Error::Usage(format!(
            "-o {}: the output must end in .irpa or .safetensors",
            a.output.display()
        )),
        ConvertError::IrpaOnly => {
            Error::Usage("--describe and --splat only apply to .irpa output".into())
        }
        ConvertError::NoExcluded(x) => {
            Error::Usage(format!("--exclude {x}: no input has that tensor"))
        }
        ConvertError::NoRenamed(r) => {
            Error::Usage(format!("--rename {r}=…: no input has that tensor"))
        }
        ConvertError::Params(e) => e.into(),
        other => Error::Usage(other.to_string()),
    }
}

/// Parses the `--rename OLD=NEW` flags (each OLD at most once).
fn parse_renames(flags: &[String]) -> Result<HashMap<String, String>> {
    let mut renames: HashMap<String, String> = HashMap::new();
    for r in flags {
        let Some((old, new)) = r
            .split_once('=')
            .filter(|(o, n)| !o.is_empty() && !n.is_empty())
        else {
            return Err(Error::Usage(format!("--rename {r}: expected OLD=NEW")));
        };
        if renames.insert(old.to_string(), new.to_string()).is_some() {
            return Err(Error::Usage(format!("--rename {old}=…: given twice")));
        }
    }
    Ok(renames)
}

/// Runs `kiln params diff`: exit 1 when the files differ.
fn diff(pa: &Path, pb: &Path, tolerance: f64) -> Result<i32> {
    let d = Diff::open(pa, pb, tolerance)?;
    println!(
        "A = {} ({}), B = {} ({})",
        pa.display(),
        kiln::params::Format::name_of(pa),
        pb.display(),
        kiln::params::Format::name_of(pb)
    );
    let (mut same, mut differ) = (0usize, 0usize);
    for t in d.tensors() {
        let t = t?;
        print_tensor_diff(&t);
        match t.differs() {
            true => differ += 1,
            false => same += 1,
        }
    }
    // The entries above are parts; name the quantized matrices they make.
    print_block_diff(&d.blocks());
    println!("{same} tensors equal, {differ} differ");
    Ok(if differ == 0 { 0 } else { 1 })
}

/// The line of one compared tensor, when it differs or only its dtypes do.
fn print_tensor_diff(t: &TensorDiff) {
    let (name, (da, db), outcome, differs) = match t {
        TensorDiff::OnlyInA(n) => return println!("{n}: only in A"),
        TensorDiff::OnlyInB(n) => return println!("{n}: only in B"),
        TensorDiff::Compared {
            name,
            dtypes,
            outcome,
            differs,
        } => (name, dtypes, outcome, *differs),
    };
    let mut notes = Vec::new();
    if da != db {
        notes.push(format!("dtype {da} vs {db}"));
    }
    notes.push(match outcome {
        Outcome::Shapes(a, b) => format!("shape {a:?} vs {b:?}"),
        Outcome::Bytes { identical: true } => "bytes identical".into(),
        Outcome::Bytes { identical: false } => "bytes differ".into(),
        Outcome::Values { max_abs_diff } => format!("max abs diff {max_abs_diff:e}"),
    });
    if differs || da != db {
        println!("{name}: {}", notes.join(", "));
    }
}

/// The block-quantized matrices of `params diff`'s two files, where they
/// have any: counts, then each matrix that differs or is on one side only.
fn print_block_diff(blocks: &BlockDiff) {
    if blocks.a.is_empty() && blocks.b.is_empty() {
        return;
    }
    println!(
        "block-quantized matrices: {} in A, {} in B",
        blocks.a.len(),
        blocks.b.len()
    );
    for change in blocks.changes() {
        match change {
            BlockChange::Differs(x, y) => println!(
                "  {}: {} in A, {} in B",
                x.name,
                describe_block(x),
                describe_block(y)
            ),
            BlockChange::OnlyInA(x) => println!("  {}: {} in A only", x.name, describe_block(x)),
            BlockChange::OnlyInB(y) => println!("  {}: {} in B only", y.name, describe_block(y)),
        }
    }
}
