//! `kiln params`: inspect, convert and compare parameter files
//! (safetensors, irpa, gguf). The format of an input is chosen by its magic
//! bytes, never its extension; the output format by the output's extension.

use clap::{Subcommand, ValueEnum};
use kiln::params::gguf::{GgufFile, GgufValue};
use kiln::params::irpa::{self, EntrySpec, IrpaWriter};
use kiln::params::safetensors::{SafetensorsWriter, TensorSpec};
use kiln::params::source::detect;
use kiln::params::TensorWriter;
use kiln::params::{
    convert, open_any, DType, Format, ParamSource, ParamsError, SourceDType, StorageKind,
};
use kiln::{Error, Result};
use std::collections::{HashMap, HashSet};
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

fn gguf_json(v: &GgufValue) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        GgufValue::String(s) => J::from(s.as_str()),
        GgufValue::Bool(b) => J::from(*b),
        GgufValue::F32(f) => serde_json::Number::from_f64(*f as f64).map_or(J::Null, J::Number),
        GgufValue::F64(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
        GgufValue::Array(_, items) => J::Array(items.iter().map(gguf_json).collect()),
        other => match other.as_i64() {
            Some(i) => J::from(i),
            None => J::from(other.as_u64().unwrap_or(0)),
        },
    }
}

/// The model family a parameter file belongs to, when it says: a GGUF's
/// `general.architecture`, or the `model_type` of the `config.json` beside
/// a safetensors file (an HF checkpoint folder).
fn model_family(path: &Path, gguf: Option<&GgufFile>) -> Option<String> {
    if let Some(g) = gguf {
        return g
            .get_metadata("general.architecture")
            .and_then(GgufValue::as_str)
            .map(str::to_string);
    }
    let cfg = path.parent()?.join("config.json");
    let text = std::fs::read_to_string(cfg).ok()?;
    let j: serde_json::Value = serde_json::from_str(&text).ok()?;
    j.get("model_type")?.as_str().map(str::to_string)
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

/// What `kiln params inspect` reports about one parameter file.
struct Inspection<'p> {
    path: &'p Path,
    src: Box<dyn ParamSource>,
    gguf: Option<GgufFile>,
    family: Option<String>,
    /// Bytes of all tensors.
    total: u64,
    /// IRPA entry kinds and their counts, in first-seen order.
    kinds: Vec<(StorageKind, usize)>,
    blocks: Vec<kiln::params::blocks::Recognized>,
    int8: Vec<(String, [u64; 2], u64)>,
}

impl<'p> Inspection<'p> {
    /// Opens `path` and gathers everything `inspect` prints.
    fn open(path: &'p Path) -> Result<Inspection<'p>> {
        let src = open_any(path)?;
        let gguf = if src.format() == Format::Gguf {
            Some(GgufFile::open(path)?)
        } else {
            None
        };
        let family = model_family(path, gguf.as_ref());
        let tensors = src.tensors();
        let total: u64 = tensors.iter().map(|t| t.nbytes).sum();
        let mut kinds: Vec<(StorageKind, usize)> = Vec::new();
        for kind in tensors.iter().filter_map(|t| t.kind) {
            match kinds.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => kinds.push((kind, 1)),
            }
        }
        let blocks = blocks_of(&*src);
        let int8 = int8_rows_of(tensors);
        Ok(Inspection {
            path,
            src,
            gguf,
            family,
            total,
            kinds,
            blocks,
            int8,
        })
    }

    /// The file's tensors.
    fn tensors(&self) -> &[kiln::params::TensorMeta] {
        self.src.tensors()
    }
}

/// Runs `kiln params inspect`.
fn inspect(path: &Path, json: bool) -> Result<i32> {
    let i = Inspection::open(path)?;
    if json {
        let out = inspect_json(&i);
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(0);
    }
    print_inspect_header(&i);
    let name_w = print_tensor_table(&i);
    print_quantized(&i, name_w);
    Ok(0)
}

/// The `--json` report of `params inspect`.
fn inspect_json(i: &Inspection) -> serde_json::Value {
    let tensors = i.tensors();
    let ts: Vec<serde_json::Value> = tensors
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.name,
                "dtype": t.dtype.to_string(),
                "shape": t.shape,
                "nbytes": t.nbytes,
                "offset": t.offset,
                "kind": t.kind.map(StorageKind::name),
            })
        })
        .collect();
    let mut out = serde_json::json!({
        "file": i.path.display().to_string(),
        "format": i.src.format().to_string(),
        "tensor_count": tensors.len(),
        "total_bytes": i.total,
        "tensors": ts,
    });
    if let Some(g) = &i.gguf {
        let meta: serde_json::Map<String, serde_json::Value> = g
            .metadata()
            .iter()
            .map(|(k, v)| (k.clone(), gguf_json(v)))
            .collect();
        out["version"] = g.version().into();
        out["alignment"] = g.alignment().into();
        out["metadata"] = meta.into();
    }
    if let Some(f) = &i.family {
        out["model_family"] = family_json(f);
    }
    if !i.int8.is_empty() {
        out["int8_rows"] = i
            .int8
            .iter()
            .map(|(name, shape, bytes)| {
                serde_json::json!({ "name": name, "shape": shape, "bytes": bytes })
            })
            .collect::<Vec<_>>()
            .into();
    }
    if !i.blocks.is_empty() {
        out["blocks"] = i.blocks.iter().map(block_json).collect::<Vec<_>>().into();
    }
    if !i.kinds.is_empty() {
        let k: serde_json::Map<String, serde_json::Value> = i
            .kinds
            .iter()
            .map(|(k, n)| (k.to_string(), (*n).into()))
            .collect();
        out["entry_kinds"] = k.into();
    }
    out
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

/// One block-quantized matrix in `params inspect --json`.
fn block_json(b: &kiln::params::blocks::Recognized) -> serde_json::Value {
    serde_json::json!({
        "name": b.name,
        "type": b.form.ggml.to_string(),
        "shape": b.shape,
        "elements": b.elements,
        "group": b.form.group,
        "bytes": b.bytes,
        "parts": b.parts,
    })
}

/// The first lines of `params inspect`: the file, its format and counts,
/// the model family and a GGUF's metadata.
fn print_inspect_header(i: &Inspection) {
    let tensors = i.tensors();
    match &i.gguf {
        Some(g) => println!(
            "{}: gguf v{}, {} tensors, {} metadata keys, alignment {}",
            i.path.display(),
            g.version(),
            tensors.len(),
            g.metadata().len(),
            g.alignment()
        ),
        None => println!(
            "{}: {}, {} tensors",
            i.path.display(),
            i.src.format(),
            tensors.len()
        ),
    }
    if let Some(f) = &i.family {
        println!("{}", family_note(f));
    }
    if let Some(g) = &i.gguf {
        for (k, v) in g.metadata() {
            println!("  {k} = {v}");
        }
    }
}

/// The tensor table of `params inspect`, then the totals and entry kinds;
/// returns the width of the name column.
fn print_tensor_table(i: &Inspection) -> usize {
    let (tensors, kinds) = (i.tensors(), &i.kinds);
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
    let numel: u64 = tensors
        .iter()
        .map(|t| t.shape.iter().product::<u64>())
        .sum();
    println!(
        "total: {} tensors, {numel} elements, {} bytes",
        tensors.len(),
        i.total
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
    if !i.int8.is_empty() {
        println!(
            "i8 matrices, one f32 scale per row (kiln export --weights w8a8): {}",
            i.int8.len()
        );
        for (name, [r, k], bytes) in &i.int8 {
            println!("  {name:<name_w$}  [{r}, {k}]  {bytes:>10} bytes  (q8, scale)");
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

/// The block-quantized matrices of a parameter file (`--weights keep`,
/// `q8_0`, `q4_0` exports), by their parts.
fn blocks_of(src: &dyn ParamSource) -> Vec<kiln::params::blocks::Recognized> {
    kiln::params::blocks::recognize(
        &src.tensors()
            .iter()
            .map(|t| (t.name.clone(), graph_dtype(t.dtype), t.shape.clone()))
            .collect::<Vec<_>>(),
    )
}

/// The `--weights w8a8` matrices among `tensors`: every `NAME.q8` (i8
/// `[rows, K]`, or an IRPA entry of rows·K bytes) with a `NAME.scale` of
/// one f32 per row; `(NAME, [rows, K], bytes of both parts)`.
fn int8_rows_of(tensors: &[kiln::params::TensorMeta]) -> Vec<(String, [u64; 2], u64)> {
    let [(codes, ..), (scale, ..)] = kiln::models::weights::int8_parts(0);
    let find = |n: &str| tensors.iter().find(|t| t.name == n);
    tensors
        .iter()
        .filter_map(|q| {
            let base = q.name.strip_suffix(codes)?.strip_suffix('.')?;
            let s = find(&kiln::params::blocks::part_key(base, scale))?;
            let rows = s.nbytes / 4;
            let ok = rows > 0
                && q.nbytes % rows == 0
                && match (q.dtype.plain(), s.dtype.plain()) {
                    // An IRPA entry is only bytes.
                    (None, None) => true,
                    (Some(DType::I8), Some(DType::F32)) => {
                        q.shape.len() == 2 && s.shape == [rows, 1]
                    }
                    _ => false,
                };
            ok.then(|| {
                (
                    base.to_string(),
                    [rows, q.nbytes / rows],
                    q.nbytes + s.nbytes,
                )
            })
        })
        .collect()
}

/// One block-quantized matrix for `diff`: type, shape, group and bytes.
fn describe_block(b: &kiln::params::blocks::Recognized) -> String {
    let shape = match b.shape {
        Some([r, k]) => format!("[{r}, {k}]"),
        None => format!("{} elements", b.elements),
    };
    format!(
        "{} {shape}, groups of {}, {} bytes",
        b.form.ggml, b.form.group, b.bytes
    )
}

/// The graph dtype of a stored element type, where there is one.
fn graph_dtype(d: kiln::params::source::SourceDType) -> Option<kiln::graph::DType> {
    use kiln::graph::DType as G;
    use kiln::params::DType as P;
    Some(match d.plain()? {
        P::F32 => G::F32,
        P::F16 => G::F16,
        P::BF16 => G::BF16,
        P::I32 => G::I32,
        _ => return None,
    })
}

/// One tensor of the output.
struct Item {
    src: usize,
    src_name: String,
    name: String,
    shape: Vec<u64>,
    in_dtype: SourceDType,
    /// None: raw bytes copied (undescribed IRPA entry).
    out_dtype: Option<DType>,
    nbytes: u64,
}

impl Item {
    /// Tensor `t` of input `src`, written as `name` with float dtype `want`.
    fn new(src: usize, t: &kiln::params::TensorMeta, name: String, want: OutDType) -> Item {
        let out_dtype = target_dtype(t.dtype, want);
        let nbytes = match out_dtype {
            None => t.nbytes,
            Some(d) => t.shape.iter().product::<u64>() * d.size() as u64,
        };
        Item {
            src,
            src_name: t.name.clone(),
            name,
            shape: t.shape.clone(),
            in_dtype: t.dtype,
            out_dtype,
            nbytes,
        }
    }
}

fn target_dtype(d: SourceDType, want: OutDType) -> Option<DType> {
    let plain = match d {
        SourceDType::Plain(p) => p,
        SourceDType::Ggml(g) => g.plain().unwrap_or(DType::F32),
        SourceDType::Raw => return None,
    };
    if !plain.is_float() {
        return Some(plain);
    }
    Some(match want {
        OutDType::Keep => plain,
        OutDType::F32 => DType::F32,
        OutDType::Bf16 => DType::BF16,
        OutDType::F16 => DType::F16,
    })
}

/// Whether `item`'s output bytes are its stored bytes unchanged.
fn is_copy(item: &Item) -> bool {
    match item.out_dtype {
        None => true,
        Some(d) => item.in_dtype.plain() == Some(d),
    }
}

/// Open input files for kernel copies, by path.
#[derive(Default)]
struct Files(HashMap<PathBuf, std::fs::File>);

impl Files {
    fn get(&mut self, p: &Path) -> std::result::Result<&std::fs::File, ParamsError> {
        if !self.0.contains_key(p) {
            let f = std::fs::File::open(p).map_err(|e| ParamsError::io(p, e))?;
            self.0.insert(p.to_path_buf(), f);
        }
        Ok(&self.0[p])
    }
}

/// Streams every item's bytes into `w` (a kernel copy where they are the
/// source's bytes unchanged), skipping the `splats` (IRPA entries with no
/// data), then finishes the file.
fn write_items<W: TensorWriter>(
    mut w: W,
    items: &[Item],
    sources: &[Box<dyn ParamSource>],
    splats: &HashSet<String>,
    bar: &indicatif::ProgressBar,
) -> std::result::Result<(), ParamsError> {
    let mut files = Files::default();
    for it in items {
        bar.set_message(it.name.clone());
        if splats.contains(&it.name) {
            bar.inc(it.nbytes);
            continue;
        }
        w.begin_tensor(&it.name)?;
        let src = sources[it.src].as_ref();
        if let Some((p, off)) = src.file_range(&it.src_name).filter(|_| is_copy(it)) {
            w.copy_chunk_from(files.get(p)?, p, off, it.nbytes)?;
            bar.inc(it.nbytes);
        } else {
            produce(src, it, &mut |bytes| {
                bar.inc(bytes.len() as u64);
                w.write_chunk(bytes)
            })?;
        }
        w.end_tensor()?;
    }
    w.finish()?;
    Ok(())
}

/// Streams one tensor's output bytes to `sink` in chunks.
fn produce(
    src: &dyn ParamSource,
    item: &Item,
    sink: &mut dyn FnMut(&[u8]) -> std::result::Result<(), ParamsError>,
) -> std::result::Result<(), ParamsError> {
    let stored = item.in_dtype.plain();
    match (stored, item.out_dtype) {
        (_, None) => sink(&src.raw(&item.src_name)?),
        (Some(a), Some(b)) if a == b => sink(&src.raw(&item.src_name)?),
        (Some(a), Some(b)) if !matches!(item.in_dtype, SourceDType::Ggml(g) if g.plain().is_none()) =>
        {
            // Plain → plain conversion, a chunk at a time.
            let raw = src.raw(&item.src_name)?;
            let chunk = (1 << 20) * a.size();
            let (mut f, mut out) = (Vec::new(), Vec::new());
            for c in raw.chunks(chunk) {
                convert::bytes_to_f32(a, c, &mut f);
                out.clear();
                convert::f32_to_bytes(b, &f, &mut out);
                sink(&out)?;
            }
            Ok(())
        }
        (_, Some(b)) => {
            let f = src.to_f32(&item.src_name)?;
            let mut out = Vec::with_capacity(f.len() * b.size());
            convert::f32_to_bytes(b, &f, &mut out);
            sink(&out)
        }
    }
}

/// Runs `kiln params convert`.
fn convert_cmd(a: ConvertArgs) -> Result<i32> {
    let to_irpa = output_is_irpa(&a)?;
    let renames = parse_renames(&a.rename)?;
    let sources: Vec<Box<dyn ParamSource>> = a
        .inputs
        .iter()
        .map(open_any)
        .collect::<std::result::Result<_, _>>()?;
    let items = plan_items(&sources, &renames, &a.exclude, a.dtype)?;
    let total: u64 = items.iter().map(|i| i.nbytes).sum();
    let bar = convert_bar(a.quiet, total);
    if to_irpa {
        write_irpa(&a, &items, &sources, &bar)?;
    } else {
        let specs: Vec<TensorSpec> = items
            .iter()
            .map(|it| match it.out_dtype {
                Some(d) => TensorSpec::new(&it.name, d, &it.shape),
                None => TensorSpec::new(&it.name, DType::U8, &[it.nbytes]),
            })
            .collect();
        let w = SafetensorsWriter::new(&a.output, &specs, &[])?;
        write_items(w, &items, &sources, &HashSet::new(), &bar)?;
    }
    bar.finish_and_clear();
    Ok(0)
}

/// Whether `-o` names an .irpa (else a .safetensors) file; `--describe`
/// and `--splat` are checked against it.
fn output_is_irpa(a: &ConvertArgs) -> Result<bool> {
    let ext = a
        .output
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let to_irpa = match ext.as_str() {
        "irpa" => true,
        "safetensors" => false,
        _ => {
            return Err(Error::Usage(format!(
                "-o {}: the output must end in .irpa or .safetensors",
                a.output.display()
            )))
        }
    };
    if !to_irpa && (a.describe || a.splat) {
        return Err(Error::Usage(
            "--describe and --splat only apply to .irpa output".into(),
        ));
    }
    Ok(to_irpa)
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

/// The output's tensors, in input order: renamed, excluded and retyped
/// as asked; every `--exclude` and `--rename` must name an input tensor.
fn plan_items(
    sources: &[Box<dyn ParamSource>],
    renames: &HashMap<String, String>,
    exclude: &[String],
    dtype: OutDType,
) -> Result<Vec<Item>> {
    let excludes: HashSet<&str> = exclude.iter().map(String::as_str).collect();
    let mut items = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let (mut used_r, mut used_x) = (HashSet::new(), HashSet::new());
    for (si, src) in sources.iter().enumerate() {
        for t in src.tensors() {
            if excludes.contains(t.name.as_str()) {
                used_x.insert(t.name.clone());
                continue;
            }
            let name = match renames.get(&t.name) {
                Some(n) => {
                    used_r.insert(t.name.clone());
                    n.clone()
                }
                None => t.name.clone(),
            };
            if !seen.insert(name.clone()) {
                return Err(ParamsError::DuplicateName {
                    file: src.path().to_path_buf(),
                    tensor: name,
                }
                .into());
            }
            items.push(Item::new(si, t, name, dtype));
        }
    }
    if let Some(x) = exclude.iter().find(|x| !used_x.contains(*x)) {
        return Err(Error::Usage(format!(
            "--exclude {x}: no input has that tensor"
        )));
    }
    if let Some(r) = renames.keys().find(|r| !used_r.contains(*r)) {
        return Err(Error::Usage(format!(
            "--rename {r}=…: no input has that tensor"
        )));
    }
    Ok(items)
}

/// The progress bar of `params convert`: hidden when quiet, not on a
/// terminal, or under 64 MiB.
fn convert_bar(quiet: bool, total: u64) -> indicatif::ProgressBar {
    if quiet || !std::io::stderr().is_terminal() || total < (64 << 20) {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
    ) {
        b.set_style(style);
    }
    b
}

/// Writes `items` as the IRPA archive `a.output` (with `--splat` and
/// `--describe` applied).
fn write_irpa(
    a: &ConvertArgs,
    items: &[Item],
    sources: &[Box<dyn ParamSource>],
    bar: &indicatif::ProgressBar,
) -> Result<()> {
    let mut specs = Vec::with_capacity(items.len());
    for it in items {
        let src = sources[it.src].as_ref();
        let mut spec = match splat_of(src, it, a.splat)? {
            Some(p) => EntrySpec::splat(&it.name, &p, it.nbytes),
            None => EntrySpec::data(&it.name, it.nbytes),
        };
        if a.describe {
            if let Some(d) = it.out_dtype {
                spec = spec.with_metadata(irpa::describe(d, &it.shape));
            }
        }
        specs.push(spec);
    }
    let splats: HashSet<String> = specs
        .iter()
        .filter(|s| s.splat.is_some())
        .map(|s| s.name.clone())
        .collect();
    write_items(
        IrpaWriter::new(&a.output, specs)?,
        items,
        sources,
        &splats,
        bar,
    )?;
    Ok(())
}

/// With `--splat`, the pattern `item`'s bytes repeat when they are one
/// element repeated (then it becomes a SPLAT entry).
fn splat_of(
    src: &dyn ParamSource,
    it: &Item,
    splat: bool,
) -> std::result::Result<Option<Vec<u8>>, ParamsError> {
    if !splat || it.nbytes == 0 {
        return Ok(None);
    }
    let elem = it.out_dtype.map_or(1, DType::size);
    let mut pattern: Option<Option<Vec<u8>>> = None;
    produce(src, it, &mut |bytes| {
        let p = irpa::splat_pattern(bytes, elem);
        pattern = Some(match (pattern.take(), p) {
            (None, p) => p,
            (Some(Some(prev)), Some(p)) if prev == p => Some(p),
            _ => None,
        });
        Ok(())
    })?;
    Ok(pattern.flatten())
}

/// Largest |a − b| over two equally long vectors (NaN vs NaN counts as equal,
/// NaN vs a number as infinite).
fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            if x.is_nan() && y.is_nan() || x == y {
                0.0
            } else {
                let d = (x as f64 - y as f64).abs();
                if d.is_nan() {
                    f64::INFINITY
                } else {
                    d
                }
            }
        })
        .fold(0.0, f64::max)
}

/// Runs `kiln params diff`: exit 1 when the files differ.
fn diff(pa: &Path, pb: &Path, tolerance: f64) -> Result<i32> {
    let (a, b) = (open_any(pa)?, open_any(pb)?);
    println!(
        "A = {} ({}), B = {} ({})",
        pa.display(),
        detect_name(pa),
        pb.display(),
        detect_name(pb)
    );
    let mut differ = 0usize;
    let mut same = 0usize;
    for ta in a.tensors() {
        let Some(tb) = b.meta(&ta.name) else {
            println!("{}: only in A", ta.name);
            differ += 1;
            continue;
        };
        if tensors_differ(&*a, &*b, ta, tb, tolerance)? {
            differ += 1;
        } else {
            same += 1;
        }
    }
    for tb in b.tensors() {
        if a.meta(&tb.name).is_none() {
            println!("{}: only in B", tb.name);
            differ += 1;
        }
    }
    // The entries above are parts; name the quantized matrices they make.
    print_block_diff(&blocks_of(&*a), &blocks_of(&*b));
    println!("{same} tensors equal, {differ} differ");
    Ok(if differ == 0 { 0 } else { 1 })
}

/// Compares the tensor `ta` of `a` with its namesake `tb` of `b`, printing
/// a line when they differ or only their dtypes do; whether they differ.
fn tensors_differ(
    a: &dyn ParamSource,
    b: &dyn ParamSource,
    ta: &kiln::params::TensorMeta,
    tb: &kiln::params::TensorMeta,
    tolerance: f64,
) -> Result<bool> {
    let mut notes = Vec::new();
    let mut bad = false;
    if ta.dtype != tb.dtype {
        notes.push(format!("dtype {} vs {}", ta.dtype, tb.dtype));
    }
    let raw_side = ta.dtype == SourceDType::Raw || tb.dtype == SourceDType::Raw;
    if !raw_side && ta.shape != tb.shape {
        notes.push(format!("shape {:?} vs {:?}", ta.shape, tb.shape));
        bad = true;
    } else if raw_side {
        if a.raw(&ta.name)? == b.raw(&tb.name)? {
            notes.push("bytes identical".into());
        } else {
            notes.push("bytes differ".into());
            bad = true;
        }
    } else {
        let d = max_abs_diff(&a.to_f32(&ta.name)?, &b.to_f32(&tb.name)?);
        notes.push(format!("max abs diff {d:e}"));
        bad |= d > tolerance;
    }
    if bad || ta.dtype != tb.dtype {
        println!("{}: {}", ta.name, notes.join(", "));
    }
    Ok(bad)
}

/// The block-quantized matrices of `params diff`'s two files, where they
/// have any: counts, then each matrix that differs or is on one side only.
fn print_block_diff(
    qa: &[kiln::params::blocks::Recognized],
    qb: &[kiln::params::blocks::Recognized],
) {
    if qa.is_empty() && qb.is_empty() {
        return;
    }
    println!(
        "block-quantized matrices: {} in A, {} in B",
        qa.len(),
        qb.len()
    );
    for x in qa {
        match qb.iter().find(|y| y.name == x.name) {
            Some(y) if (y.form, y.elements, y.bytes) == (x.form, x.elements, x.bytes) => {}
            Some(y) => println!(
                "  {}: {} in A, {} in B",
                x.name,
                describe_block(x),
                describe_block(y)
            ),
            None => println!("  {}: {} in A only", x.name, describe_block(x)),
        }
    }
    for y in qb.iter().filter(|y| !qa.iter().any(|x| x.name == y.name)) {
        println!("  {}: {} in B only", y.name, describe_block(y));
    }
}

fn detect_name(p: &Path) -> String {
    if p.is_dir() {
        return "safetensors checkpoint".into();
    }
    detect(p).map_or_else(|_| "?".into(), |f| f.to_string())
}
