//! Parameter files converted and merged into one `.irpa` or
//! `.safetensors` (`kiln params convert`): tensors renamed, left out or
//! retyped, streamed (a kernel copy where the bytes stay the same), IRPA
//! entries described or written as splats.
//!
//! [`Conversion::plan`] opens the inputs and checks everything before a
//! byte is written; [`Conversion::write`] writes the output.

use super::irpa::{self, EntrySpec, IrpaWriter};
use super::safetensors::{SafetensorsWriter, TensorSpec};
use super::{convert, DType, ParamSource, ParamsError, SourceDType, TensorMeta, TensorWriter};
use crate::progress::{Progress, Unit};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The output's format, by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutputFormat {
    /// `.irpa`.
    Irpa,
    /// `.safetensors`.
    Safetensors,
}

impl OutputFormat {
    /// The format of an output named `path` (its extension, in any case).
    fn of(path: &Path) -> Option<OutputFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "irpa" => Some(OutputFormat::Irpa),
            "safetensors" => Some(OutputFormat::Safetensors),
            _ => None,
        }
    }
}

/// What [`Conversion::plan`] does with the inputs' tensors.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ConvertOptions {
    /// The element type float tensors get: f32, bf16 or f16 (rounded to
    /// nearest even); `None` keeps each tensor's own (GGUF quantized
    /// tensors become f32).
    pub dtype: Option<DType>,
    /// Tensors written under another name: old → new.
    pub renames: HashMap<String, String>,
    /// Tensors left out.
    pub exclude: Vec<String>,
    /// IRPA only: store each tensor's dtype and shape as entry metadata.
    pub describe: bool,
    /// IRPA only: write constant-valued tensors as SPLAT entries.
    pub splat: bool,
}

impl ConvertOptions {
    /// Checks the output's name: it ends in `.irpa` or `.safetensors`, and
    /// only `.irpa` takes the IRPA-only options ([`Conversion::plan`]
    /// makes the same check before it opens the inputs).
    pub fn check_output(&self, path: &Path) -> Result<(), ConvertError> {
        self.output_format(path).map(|_| ())
    }

    /// The format of the output `path`, checked against the IRPA-only
    /// options.
    fn output_format(&self, path: &Path) -> Result<OutputFormat, ConvertError> {
        if let Some(d) = self.dtype.filter(|d| !d.is_float()) {
            return Err(ConvertError::NotFloat(d));
        }
        let format =
            OutputFormat::of(path).ok_or_else(|| ConvertError::OutputFormat(path.to_path_buf()))?;
        if format != OutputFormat::Irpa && (self.describe || self.splat) {
            return Err(ConvertError::IrpaOnly);
        }
        Ok(format)
    }
}

/// Why a conversion is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// The output's name ends in neither `.irpa` nor `.safetensors`.
    #[error("{}: the output must end in .irpa or .safetensors", .0.display())]
    OutputFormat(PathBuf),
    /// The element type asked for float tensors is not a float type.
    #[error("float tensors can be converted to F32, BF16 or F16, not {0}")]
    NotFloat(DType),
    /// Entry descriptions or splats asked for another output than IRPA.
    #[error("entry descriptions and splats only apply to .irpa output")]
    IrpaOnly,
    /// A tensor to leave out is in no input.
    #[error("no input has a tensor \"{0}\" to exclude")]
    NoExcluded(String),
    /// A tensor to rename is in no input.
    #[error("no input has a tensor \"{0}\" to rename")]
    NoRenamed(String),
    /// An input cannot be read, or the output written.
    #[error(transparent)]
    Params(#[from] ParamsError),
}

/// A planned conversion: the inputs, open, and every output tensor.
pub struct Conversion {
    sources: Vec<Box<dyn ParamSource>>,
    items: Vec<Item>,
    output: PathBuf,
    format: OutputFormat,
    describe: bool,
    splat: bool,
}

impl std::fmt::Debug for Conversion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversion")
            .field("output", &self.output)
            .field("format", &self.format)
            .field("tensors", &self.items.len())
            .finish()
    }
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
    fn new(src: usize, t: &TensorMeta, name: String, want: Option<DType>) -> Item {
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

    /// Whether the output bytes are the stored bytes unchanged.
    fn is_copy(&self) -> bool {
        match self.out_dtype {
            None => true,
            Some(d) => self.in_dtype.plain() == Some(d),
        }
    }
}

/// The output dtype of a tensor stored as `d` (`None`: raw bytes).
fn target_dtype(d: SourceDType, want: Option<DType>) -> Option<DType> {
    let plain = match d {
        SourceDType::Plain(p) => p,
        SourceDType::Ggml(g) => g.plain().unwrap_or(DType::F32),
        SourceDType::Raw => return None,
    };
    if !plain.is_float() {
        return Some(plain);
    }
    Some(want.unwrap_or(plain))
}

impl Conversion {
    /// Opens `inputs` (any formats; duplicate names are an error) and
    /// plans the output `output` as `opts` asks; every tensor to exclude
    /// or rename must be in an input.
    pub fn plan(
        inputs: &[PathBuf],
        output: &Path,
        opts: &ConvertOptions,
    ) -> Result<Conversion, ConvertError> {
        let format = opts.output_format(output)?;
        let sources: Vec<Box<dyn ParamSource>> = inputs
            .iter()
            .map(<dyn ParamSource>::open)
            .collect::<Result<_, ParamsError>>()?;
        let items = plan_items(&sources, opts)?;
        Ok(Conversion {
            sources,
            items,
            output: output.to_path_buf(),
            format,
            describe: opts.describe,
            splat: opts.splat,
        })
    }

    /// Bytes the output's tensors will hold.
    pub fn total_bytes(&self) -> u64 {
        self.items.iter().map(|i| i.nbytes).sum()
    }

    /// Writes the output (atomically: renamed into place once complete).
    /// Each tensor is a [`Unit::Bytes`] step of `progress`, labelled with
    /// its output name.
    pub fn write(&self, progress: &dyn Progress) -> Result<(), ParamsError> {
        match self.format {
            OutputFormat::Irpa => self.write_irpa(progress),
            OutputFormat::Safetensors => {
                let specs: Vec<TensorSpec> = self
                    .items
                    .iter()
                    .map(|it| match it.out_dtype {
                        Some(d) => TensorSpec::new(&it.name, d, &it.shape),
                        None => TensorSpec::new(&it.name, DType::U8, &[it.nbytes]),
                    })
                    .collect();
                let w = SafetensorsWriter::new(&self.output, &specs, &[])?;
                self.write_items(w, &HashSet::new(), progress)
            }
        }
    }

    /// Writes the items as an IRPA archive (entries described and splats
    /// found as asked).
    fn write_irpa(&self, progress: &dyn Progress) -> Result<(), ParamsError> {
        let mut specs = Vec::with_capacity(self.items.len());
        for it in &self.items {
            let src = self.sources[it.src].as_ref();
            let mut spec = match splat_of(src, it, self.splat)? {
                Some(p) => EntrySpec::splat(&it.name, &p, it.nbytes),
                None => EntrySpec::data(&it.name, it.nbytes),
            };
            if self.describe {
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
        self.write_items(IrpaWriter::new(&self.output, specs)?, &splats, progress)
    }

    /// Streams every item's bytes into `w` (a kernel copy where they are
    /// the source's bytes unchanged), skipping the `splats` (IRPA entries
    /// with no data), then finishes the file.
    fn write_items<W: TensorWriter>(
        &self,
        mut w: W,
        splats: &HashSet<String>,
        progress: &dyn Progress,
    ) -> Result<(), ParamsError> {
        let mut files = Files::default();
        for it in &self.items {
            progress.start(&it.name, it.nbytes, Unit::Bytes);
            if splats.contains(&it.name) {
                progress.advance(&it.name, it.nbytes);
                progress.finish(&it.name, true);
                continue;
            }
            w.begin_tensor(&it.name)?;
            let src = self.sources[it.src].as_ref();
            if let Some((p, off)) = src.file_range(&it.src_name).filter(|_| it.is_copy()) {
                w.copy_chunk_from(files.get(p)?, p, off, it.nbytes)?;
                progress.advance(&it.name, it.nbytes);
            } else {
                produce(src, it, &mut |bytes| {
                    progress.advance(&it.name, bytes.len() as u64);
                    w.write_chunk(bytes)
                })?;
            }
            w.end_tensor()?;
            progress.finish(&it.name, true);
        }
        w.finish()?;
        Ok(())
    }
}

/// The output's tensors, in input order: renamed, excluded and retyped
/// as `opts` asks; every tensor to exclude or rename must be in an input.
fn plan_items(
    sources: &[Box<dyn ParamSource>],
    opts: &ConvertOptions,
) -> Result<Vec<Item>, ConvertError> {
    let excludes: HashSet<&str> = opts.exclude.iter().map(String::as_str).collect();
    let mut items = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let (mut used_r, mut used_x) = (HashSet::new(), HashSet::new());
    for (si, src) in sources.iter().enumerate() {
        for t in src.tensors() {
            if excludes.contains(t.name.as_str()) {
                used_x.insert(t.name.clone());
                continue;
            }
            let name = match opts.renames.get(&t.name) {
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
            items.push(Item::new(si, t, name, opts.dtype));
        }
    }
    if let Some(x) = opts.exclude.iter().find(|x| !used_x.contains(*x)) {
        return Err(ConvertError::NoExcluded(x.clone()));
    }
    if let Some(r) = opts.renames.keys().find(|r| !used_r.contains(*r)) {
        return Err(ConvertError::NoRenamed(r.clone()));
    }
    Ok(items)
}

/// Open input files for kernel copies, by path.
#[derive(Default)]
struct Files(HashMap<PathBuf, std::fs::File>);

impl Files {
    fn get(&mut self, p: &Path) -> Result<&std::fs::File, ParamsError> {
        if !self.0.contains_key(p) {
            let f = std::fs::File::open(p).map_err(|e| ParamsError::io(p, e))?;
            self.0.insert(p.to_path_buf(), f);
        }
        Ok(&self.0[p])
    }
}

/// Streams one tensor's output bytes to `sink` in chunks.
fn produce(
    src: &dyn ParamSource,
    item: &Item,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), ParamsError>,
) -> Result<(), ParamsError> {
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

/// With `splat`, the pattern `it`'s bytes repeat when they are one
/// element repeated (then it becomes a SPLAT entry).
fn splat_of(src: &dyn ParamSource, it: &Item, splat: bool) -> Result<Option<Vec<u8>>, ParamsError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_dtype_is_a_float_type_and_integers_keep_theirs() {
        let mut opts = ConvertOptions::default();
        let out = Path::new("out.irpa");
        assert!(opts.check_output(out).is_ok());
        opts.dtype = Some(DType::BF16);
        assert!(opts.check_output(out).is_ok());
        opts.dtype = Some(DType::I32);
        let e = opts.check_output(out).unwrap_err();
        assert!(matches!(e, ConvertError::NotFloat(DType::I32)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "float tensors can be converted to F32, BF16 or F16, not I32"
        );
        let f32_in = SourceDType::Plain(DType::F32);
        assert_eq!(target_dtype(f32_in, None), Some(DType::F32));
        assert_eq!(target_dtype(f32_in, Some(DType::F16)), Some(DType::F16));
        let i32_in = SourceDType::Plain(DType::I32);
        assert_eq!(target_dtype(i32_in, Some(DType::F16)), Some(DType::I32));
        assert_eq!(target_dtype(SourceDType::Raw, Some(DType::F16)), None);
    }
}
