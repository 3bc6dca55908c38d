//! A format-agnostic view of a parameter file: list tensors, get their raw
//! bytes or their values as f32. Used by `kiln params` and the interpreter.

use super::dtype::SourceDType;
use super::gguf::GgufFile;
use super::irpa::{EntryKind, IrpaData, IrpaReader};
use super::safetensors::{open_checkpoint, Checkpoint};
use super::{ParamsError, Result};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A parameter file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// safetensors (one file or a sharded checkpoint).
    Safetensors,
    /// IREE parameter archive.
    Irpa,
    /// GGUF.
    Gguf,
}

impl Format {
    /// What `path` is, for a report: `safetensors checkpoint` for a folder,
    /// else its format by its magic, `?` when it has none kiln knows.
    pub fn name_of(path: &Path) -> String {
        if path.is_dir() {
            return "safetensors checkpoint".into();
        }
        detect(path).map_or_else(|_| "?".into(), |f| f.to_string())
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Safetensors => "safetensors",
            Format::Irpa => "irpa",
            Format::Gguf => "gguf",
        })
    }
}

/// How an IRPA entry stores its tensor, as IREE spells it (SKIP entries
/// are not listed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StorageKind {
    /// Bytes in the archive (`DATA`).
    Data,
    /// A repeated pattern (`SPLAT`).
    Splat,
}

impl StorageKind {
    /// `DATA` or `SPLAT`.
    pub fn name(self) -> &'static str {
        match self {
            StorageKind::Data => "DATA",
            StorageKind::Splat => "SPLAT",
        }
    }
}

impl fmt::Display for StorageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One tensor as listed by a [`ParamSource`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// Tensor name.
    pub name: String,
    /// Stored element type.
    pub dtype: SourceDType,
    /// Row-major shape, outermost first (GGUF dims are reversed; an
    /// undescribed IRPA entry is `[bytes]`).
    pub shape: Vec<u64>,
    /// Stored bytes (for a splat: bytes covered).
    pub nbytes: u64,
    /// File offset of the bytes (`None` for a splat).
    pub offset: Option<u64>,
    /// How an IRPA entry stores it (`None` for the other formats).
    pub kind: Option<StorageKind>,
}

/// A parameter file of any format.
pub trait ParamSource: Send + Sync {
    /// The path it was opened from.
    fn path(&self) -> &Path;
    /// Its format.
    fn format(&self) -> Format;
    /// Its tensors, in file order.
    fn tensors(&self) -> &[TensorMeta];
    /// The stored bytes of `name` (quantized blocks for GGUF; a splat expanded).
    fn raw(&self, name: &str) -> Result<Cow<'_, [u8]>>;
    /// The values of `name` as f32 (GGUF tensors are dequantized).
    fn to_f32(&self, name: &str) -> Result<Vec<f32>>;
    /// The file holding `name`'s stored bytes and their offset in it, when
    /// they are one contiguous range of one file (not for splats).
    fn file_range(&self, name: &str) -> Option<(&Path, u64)> {
        let _ = name;
        None
    }
    /// The meta of `name`.
    fn meta(&self, name: &str) -> Option<&TensorMeta> {
        self.tensors().iter().find(|t| t.name == name)
    }
}

/// Identifies a file's format from its first bytes (never its extension).
pub fn detect(path: &Path) -> Result<Format> {
    let mut head = [0u8; 9];
    let mut f = std::fs::File::open(path).map_err(|e| ParamsError::io(path, e))?;
    let mut n = 0;
    while n < head.len() {
        let k = f
            .read(&mut head[n..])
            .map_err(|e| ParamsError::io(path, e))?;
        if k == 0 {
            break;
        }
        n += k;
    }
    if n >= 4 && &head[..4] == b"IRPA" {
        return Ok(Format::Irpa);
    }
    if n >= 4 && &head[..4] == b"GGUF" {
        return Ok(Format::Gguf);
    }
    // safetensors has no magic: a u64 header length, then JSON starting
    // with `{`. A bad length is left for the reader to report.
    if n == 9 && head[8] == b'{' {
        return Ok(Format::Safetensors);
    }
    Err(ParamsError::UnknownFormat {
        file: path.to_path_buf(),
    })
}

impl dyn ParamSource {
    /// Opens any parameter file: a safetensors file, a sharded checkpoint
    /// (directory or `*.index.json`), an `.irpa` or a `.gguf`, chosen by magic
    /// (`<dyn ParamSource>::open(path)`).
    pub fn open(path: impl AsRef<Path>) -> Result<Box<dyn ParamSource>> {
        let path = path.as_ref();
        if path.is_dir() || path.to_string_lossy().ends_with(".index.json") {
            return Ok(Box::new(StSource::new(path, open_checkpoint(path)?)));
        }
        Ok(match detect(path)? {
            Format::Safetensors => Box::new(StSource::new(path, open_checkpoint(path)?)),
            Format::Irpa => Box::new(IrpaSource::new(IrpaReader::open(path)?)?),
            Format::Gguf => Box::new(GgufSource::new(GgufFile::open(path)?)),
        })
    }
}

fn not_found(path: &Path, name: &str) -> ParamsError {
    ParamsError::NotFound {
        file: path.to_path_buf(),
        tensor: name.to_string(),
    }
}

fn index_of(metas: &[TensorMeta]) -> HashMap<String, usize> {
    metas
        .iter()
        .enumerate()
        .map(|(i, m)| (m.name.clone(), i))
        .collect()
}

struct StSource {
    path: PathBuf,
    ck: Checkpoint,
    metas: Vec<TensorMeta>,
}

impl StSource {
    fn new(path: &Path, ck: Checkpoint) -> Self {
        let mut metas = Vec::new();
        for f in ck.files() {
            for info in f.infos() {
                metas.push(TensorMeta {
                    name: info.name.clone(),
                    dtype: SourceDType::Plain(info.dtype),
                    shape: info.shape.clone(),
                    nbytes: info.data_offsets.1 - info.data_offsets.0,
                    offset: Some(f.data_start() + info.data_offsets.0),
                    kind: None,
                });
            }
        }
        StSource {
            path: path.to_path_buf(),
            ck,
            metas,
        }
    }
}

impl ParamSource for StSource {
    fn path(&self) -> &Path {
        &self.path
    }
    fn format(&self) -> Format {
        Format::Safetensors
    }
    fn tensors(&self) -> &[TensorMeta] {
        &self.metas
    }
    fn file_range(&self, name: &str) -> Option<(&Path, u64)> {
        self.ck.locate(name)
    }
    fn raw(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let v = self
            .ck
            .get(name)
            .ok_or_else(|| not_found(&self.path, name))?;
        Ok(Cow::Borrowed(v.data))
    }
    fn to_f32(&self, name: &str) -> Result<Vec<f32>> {
        let v = self
            .ck
            .get(name)
            .ok_or_else(|| not_found(&self.path, name))?;
        Ok(v.to_f32())
    }
}

struct IrpaSource {
    r: IrpaReader,
    metas: Vec<TensorMeta>,
    index: HashMap<String, usize>,
}

impl IrpaSource {
    fn new(r: IrpaReader) -> Result<Self> {
        let mut metas = Vec::new();
        let data: HashMap<&str, (u64, u64)> = r
            .entries()
            .iter()
            .filter_map(|e| match e.kind {
                EntryKind::Data { offset, length } => Some((e.name.as_str(), (offset, length))),
                _ => None,
            })
            .collect();
        for e in r.entries() {
            if is_chunk_view(&e.name, &data) {
                continue;
            }
            let (kind, offset) = match e.kind {
                EntryKind::Data { offset, .. } => {
                    (StorageKind::Data, Some(r.storage_offset() + offset))
                }
                EntryKind::Splat { .. } => (StorageKind::Splat, None),
                EntryKind::Skip => continue,
            };
            let (dtype, shape) = match e.described() {
                Some((dt, shape)) => {
                    let want = super::dtype::checked_nbytes(dt, &shape);
                    if want != Some(e.len()) {
                        return Err(ParamsError::InvalidMetadata {
                            file: r.path().to_path_buf(),
                            key: e.name.clone(),
                            msg: format!(
                                "described as {dt} {shape:?} but the entry covers {} bytes",
                                e.len()
                            ),
                        });
                    }
                    (SourceDType::Plain(dt), shape)
                }
                None => (SourceDType::Raw, vec![e.len()]),
            };
            metas.push(TensorMeta {
                name: e.name.clone(),
                dtype,
                shape,
                nbytes: e.len(),
                offset,
                kind: Some(kind),
            });
        }
        let index = index_of(&metas);
        Ok(IrpaSource { r, metas, index })
    }
}

/// Whether entry `name` is a row-chunk entry `KEY@OFFSET` that `kiln
/// export` writes over part of entry `KEY` (spec/irpa.md, "Row-chunk
/// entries"): a view of that table's bytes, not a tensor of its own, so
/// `kiln params` does not list it.
fn is_chunk_view(name: &str, data: &HashMap<&str, (u64, u64)>) -> bool {
    let Some((key, at)) = super::irpa::parse_chunk_key(name) else {
        return false;
    };
    let (Some(&(start, len)), Some(&(whole_start, whole_len))) = (data.get(name), data.get(key))
    else {
        return false;
    };
    whole_start.checked_add(at) == Some(start)
        && at.checked_add(len).is_some_and(|end| end <= whole_len)
}

impl ParamSource for IrpaSource {
    fn path(&self) -> &Path {
        self.r.path()
    }
    fn format(&self) -> Format {
        Format::Irpa
    }
    fn tensors(&self) -> &[TensorMeta] {
        &self.metas
    }
    fn file_range(&self, name: &str) -> Option<(&Path, u64)> {
        let &i = self.index.get(name)?;
        self.metas[i].offset.map(|o| (self.r.path(), o))
    }
    fn raw(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let d = self
            .r
            .get(name)
            .ok_or_else(|| not_found(self.r.path(), name))?;
        Ok(match d {
            IrpaData::Data(b) => Cow::Borrowed(b),
            s @ IrpaData::Splat { length, .. } => Cow::Owned(
                s.expand()
                    .map_err(|_| ParamsError::Unsupported {
                        file: self.r.path().to_path_buf(),
                        tensor: name.to_string(),
                        msg: format!("splat of {length} bytes does not fit in memory"),
                    })?
                    .into_owned(),
            ),
        })
    }
    fn to_f32(&self, name: &str) -> Result<Vec<f32>> {
        let &i = self
            .index
            .get(name)
            .ok_or_else(|| not_found(self.r.path(), name))?;
        let Some(dt) = self.metas[i].dtype.plain() else {
            return Err(ParamsError::Undescribed {
                file: self.r.path().to_path_buf(),
                tensor: name.to_string(),
            });
        };
        let raw = self.raw(name)?;
        let mut v = Vec::new();
        super::convert::bytes_to_f32(dt, &raw, &mut v);
        Ok(v)
    }
}

struct GgufSource {
    g: GgufFile,
    metas: Vec<TensorMeta>,
}

impl GgufSource {
    fn new(g: GgufFile) -> Self {
        let metas = g
            .tensors()
            .iter()
            .map(|t| TensorMeta {
                name: t.name.clone(),
                dtype: SourceDType::Ggml(t.ggml_type),
                shape: t.shape(),
                nbytes: t.nbytes,
                offset: Some(g.data_start() + t.offset),
                kind: None,
            })
            .collect();
        GgufSource { g, metas }
    }

    /// The underlying GGUF file.
    fn file(&self) -> &GgufFile {
        &self.g
    }
}

impl ParamSource for GgufSource {
    fn path(&self) -> &Path {
        self.g.path()
    }
    fn format(&self) -> Format {
        Format::Gguf
    }
    fn tensors(&self) -> &[TensorMeta] {
        &self.metas
    }
    fn file_range(&self, name: &str) -> Option<(&Path, u64)> {
        let t = self.g.tensor(name)?;
        Some((self.g.path(), self.g.data_start() + t.offset))
    }
    fn raw(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let t = self
            .file()
            .tensor(name)
            .ok_or_else(|| not_found(self.g.path(), name))?;
        Ok(Cow::Borrowed(self.g.tensor_data(t)))
    }
    fn to_f32(&self, name: &str) -> Result<Vec<f32>> {
        self.g.dequantize_by_name(name)
    }
}
