//! safetensors: a strict memory-mapped reader, sharded checkpoints
//! (`model.safetensors.index.json`) and a streaming writer.
//!
//! Layout: `u64` little-endian header length `N`, `N` bytes of UTF-8 JSON
//! (`{"name": {"dtype", "shape", "data_offsets": [begin, end]}, …,
//! "__metadata__": {string: string}}`), then the data; offsets are relative
//! to the start of the data. See `spec/safetensors.md` for every rule.

use super::dtype::{checked_nbytes, DType};
use super::error::FileErrors;
use super::stream::{sealed, Slot, TensorStream, TensorWriter};
use super::{Backing, ParamsError, Result};
use byteorder::{ByteOrder, LittleEndian, WriteBytesExt};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Largest header kiln accepts (same cap as the `safetensors` crate).
pub(crate) const MAX_HEADER_LEN: u64 = 100_000_000;

/// One tensor's header record ([`TensorView`] shows it with its bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// True shape, outermost dimension first.
    pub shape: Vec<u64>,
    /// Byte range relative to the start of the data section.
    pub data_offsets: (u64, u64),
}

/// A zero-copy view of one tensor.
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost first.
    pub shape: &'a [u64],
    /// The tensor's bytes (little-endian elements, no alignment guarantee).
    pub data: &'a [u8],
    /// Byte range of `data` relative to the start of the data section
    /// ([`SafeTensors::data_start`]), as the header gives it.
    pub data_offsets: (u64, u64),
}

impl TensorView<'_> {
    /// The values as f32 (exact for f32/f16/bf16).
    pub fn to_f32(&self) -> Vec<f32> {
        let mut v = Vec::new();
        super::convert::bytes_to_f32(self.dtype, self.data, &mut v);
        v
    }
}

/// A validated, memory-mapped safetensors file.
#[derive(Debug)]
pub struct SafeTensors {
    path: PathBuf,
    bytes: Backing,
    data_start: usize,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
    metadata: Vec<(String, String)>,
}

/// Collects a JSON object's entries in file order, keeping duplicates.
struct Pairs(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Pairs, A::Error> {
                let mut v = Vec::new();
                while let Some(kv) = m.next_entry::<String, serde_json::Value>()? {
                    v.push(kv);
                }
                Ok(Pairs(v))
            }
        }
        d.deserialize_map(V)
    }
}

impl SafeTensors {
    backed_constructors!();

    fn from_backing(path: &Path, bytes: Backing) -> Result<Self> {
        let (data_start, tensors, metadata) = parse(path, &bytes)?;
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(SafeTensors {
            path: path.to_path_buf(),
            bytes,
            data_start,
            tensors,
            index,
            metadata,
        })
    }

    /// The file this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor records in header (file) order.
    pub(crate) fn infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Views of every tensor, in header order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> + '_ {
        self.tensors.iter().map(move |t| self.view(t))
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<TensorView<'_>> {
        self.index.get(name).map(|&i| self.view(&self.tensors[i]))
    }

    /// The tensor called `name`, or a [`ParamsError::NotFound`].
    pub fn require(&self, name: &str) -> Result<TensorView<'_>> {
        self.get(name).ok_or_else(|| ParamsError::NotFound {
            file: self.path.clone(),
            tensor: name.to_string(),
        })
    }

    /// The `__metadata__` map, in file order.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// Byte offset of the data section in the file.
    pub fn data_start(&self) -> u64 {
        self.data_start as u64
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the file holds no tensors.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    fn view<'a>(&'a self, t: &'a TensorInfo) -> TensorView<'a> {
        // Offsets were validated against the data length in `parse`.
        let a = self.data_start + t.data_offsets.0 as usize;
        let b = self.data_start + t.data_offsets.1 as usize;
        TensorView {
            name: &t.name,
            dtype: t.dtype,
            shape: &t.shape,
            data: &self.bytes[a..b],
            data_offsets: t.data_offsets,
        }
    }
}

type Parsed = (usize, Vec<TensorInfo>, Vec<(String, String)>);

/// Validates the whole file; on success every offset is in bounds.
fn parse(path: &Path, bytes: &[u8]) -> Result<Parsed> {
    let err = FileErrors(path);
    let (data_start, text) = read_header(err, bytes)?;
    let pairs: Pairs = serde_json::from_str(text).map_err(|e| err.invalid_json(e.to_string()))?;
    let (tensors, metadata) = split_header(path, pairs)?;
    check_offsets(err, &tensors, data_start as u64, bytes.len() as u64)?;
    Ok((data_start, tensors, metadata))
}

/// The header's length prefix and UTF-8 JSON text (which must start with
/// `{`); returns where the data starts and the text.
fn read_header<'b>(err: FileErrors, bytes: &'b [u8]) -> Result<(usize, &'b str)> {
    let size = bytes.len() as u64;
    if size < 8 {
        return Err(err.truncated(None, "header length", 8, size));
    }
    let n = LittleEndian::read_u64(bytes);
    if n > MAX_HEADER_LEN {
        return Err(err.header_too_large(n, MAX_HEADER_LEN));
    }
    if n > size - 8 {
        return Err(err.truncated(None, "JSON header", n, size - 8));
    }
    let data_start = 8 + n as usize;
    let text = std::str::from_utf8(&bytes[8..data_start])
        .map_err(|_| err.invalid_utf8(None, "JSON header"))?;
    if !text.starts_with('{') {
        return Err(err.invalid_header(None, "header does not start with `{`"));
    }
    Ok((data_start, text))
}

/// A header's tensor records and its `__metadata__` pairs.
type Header = (Vec<TensorInfo>, Vec<(String, String)>);

/// The header's tensor records and its `__metadata__` (empty when absent),
/// refusing a repeated key.
fn split_header(path: &Path, pairs: Pairs) -> Result<Header> {
    let mut tensors = Vec::with_capacity(pairs.0.len());
    let mut metadata = None;
    let mut seen = HashSet::new();
    for (name, value) in pairs.0 {
        if !seen.insert(name.clone()) {
            return Err(FileErrors(path).duplicate_name(&name));
        }
        if name == "__metadata__" {
            metadata = Some(parse_metadata(path, value)?);
            continue;
        }
        tensors.push(parse_info(path, name, value)?);
    }
    Ok((tensors, metadata.unwrap_or_default()))
}

/// Checks that the tensors' offsets tile the data section (from
/// `data_start` to the end of a file of `size` bytes) exactly, starting
/// at 0, each span as long as its shape and dtype need.
fn check_offsets(
    err: FileErrors,
    tensors: &[TensorInfo],
    data_start: u64,
    size: u64,
) -> Result<()> {
    let data_len = size - data_start;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].data_offsets);
    let mut cursor = 0u64;
    for &i in &order {
        let t = &tensors[i];
        let (b, e) = t.data_offsets;
        let bad = |msg: String| err.invalid_offsets(Some(&t.name), msg);
        if e < b {
            return Err(bad(format!("end {e} is before begin {b}")));
        }
        if b != cursor {
            return Err(bad(if b < cursor {
                format!("[{b}, {e}) overlaps the previous tensor, which ends at {cursor}")
            } else {
                format!("gap: begins at {b} but the previous tensor ends at {cursor}")
            }));
        }
        if e > data_len {
            return Err(bad(format!(
                "[{b}, {e}) is past the end of the data section ({data_len} bytes)"
            )));
        }
        let expected = checked_nbytes(t.dtype, &t.shape)
            .ok_or_else(|| err.overflow(Some(&t.name), "shape × dtype size"))?;
        if expected != e - b {
            return Err(err.size_mismatch(&t.name, expected, e - b));
        }
        cursor = e;
    }
    if cursor != data_len {
        return Err(err.trailing_data(data_start + cursor, size));
    }
    Ok(())
}

fn parse_metadata(path: &Path, value: serde_json::Value) -> Result<Vec<(String, String)>> {
    let err = FileErrors(path);
    let bad = |msg: &str| err.invalid_metadata("__metadata__", msg);
    let obj = match value {
        serde_json::Value::Object(o) => o,
        _ => return Err(bad("must be an object of strings")),
    };
    obj.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            _ => Err(err.invalid_metadata(&k, "value must be a string")),
        })
        .collect()
}

fn parse_info(path: &Path, name: String, value: serde_json::Value) -> Result<TensorInfo> {
    let err = FileErrors(path);
    let bad = |msg: String| err.invalid_header(Some(&name), msg);
    let obj = match value {
        serde_json::Value::Object(o) => o,
        _ => return Err(bad("entry is not an object".into())),
    };
    let (mut dtype, mut shape, mut offsets) = (None, None, None);
    for (k, v) in obj {
        match k.as_str() {
            "dtype" => {
                let s = v
                    .as_str()
                    .ok_or_else(|| bad("`dtype` is not a string".into()))?;
                dtype = Some(
                    DType::from_safetensors_name(s).ok_or_else(|| err.unknown_dtype(&name, s))?,
                );
            }
            "shape" => {
                let arr = v
                    .as_array()
                    .ok_or_else(|| bad("`shape` is not an array".into()))?;
                let dims: Option<Vec<u64>> = arr.iter().map(|d| d.as_u64()).collect();
                shape = Some(dims.ok_or_else(|| {
                    bad("`shape` must hold non-negative integers below 2^64".into())
                })?);
            }
            "data_offsets" => {
                let arr = v
                    .as_array()
                    .filter(|a| a.len() == 2)
                    .ok_or_else(|| bad("`data_offsets` is not a pair".into()))?;
                match (arr[0].as_u64(), arr[1].as_u64()) {
                    (Some(a), Some(b)) => offsets = Some((a, b)),
                    _ => {
                        return Err(bad(
                            "`data_offsets` must be non-negative integers below 2^64".into(),
                        ))
                    }
                }
            }
            other => return Err(bad(format!("unknown field `{other}`"))),
        }
    }
    Ok(TensorInfo {
        dtype: dtype.ok_or_else(|| bad("missing `dtype`".into()))?,
        shape: shape.ok_or_else(|| bad("missing `shape`".into()))?,
        data_offsets: offsets.ok_or_else(|| bad("missing `data_offsets`".into()))?,
        name,
    })
}

/// A checkpoint made of one or more safetensors files.
#[derive(Debug)]
pub struct Checkpoint {
    files: Vec<SafeTensors>,
    /// (file index, tensor index) in listing order.
    order: Vec<(usize, usize)>,
    index: HashMap<String, usize>,
}

impl Checkpoint {
    /// Opens a checkpoint: a `.safetensors` file, a `*.index.json` shard index,
    /// or a directory holding `model.safetensors.index.json` or
    /// `model.safetensors`. Every shard is validated; the index must list
    /// exactly the tensors the shards hold, each in the shard it names.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        open_checkpoint(path)
    }

    /// The shard files, in the order their tensors are listed.
    pub fn files(&self) -> &[SafeTensors] {
        &self.files
    }

    /// Every tensor: shards in sorted file-name order, each in header order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> + '_ {
        self.order
            .iter()
            .map(move |&(f, t)| self.files[f].view(&self.files[f].tensors[t]))
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<TensorView<'_>> {
        let &k = self.index.get(name)?;
        let (f, t) = self.order[k];
        Some(self.files[f].view(&self.files[f].tensors[t]))
    }

    /// The file holding `name`.
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        let &k = self.index.get(name)?;
        Some(self.files[self.order[k].0].path())
    }

    /// The file holding `name` and the file offset of its bytes.
    pub fn locate(&self, name: &str) -> Option<(&Path, u64)> {
        let &k = self.index.get(name)?;
        let (f, t) = self.order[k];
        let st = &self.files[f];
        Some((st.path(), st.data_start() + st.tensors[t].data_offsets.0))
    }

    /// Number of tensors over all shards.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// Name of the shard index HF writes beside sharded checkpoints.
pub(crate) const INDEX_NAME: &str = "model.safetensors.index.json";

/// [`Checkpoint::open`].
pub(crate) fn open_checkpoint(path: impl AsRef<Path>) -> Result<Checkpoint> {
    let path = path.as_ref();
    let index_path = if path.is_dir() {
        let idx = path.join(INDEX_NAME);
        if idx.is_file() {
            idx
        } else {
            let single = path.join("model.safetensors");
            if !single.is_file() {
                let what = format!("(no {INDEX_NAME} or model.safetensors in this directory)");
                return Err(FileErrors(path).not_found(&what));
            }
            return single_checkpoint(SafeTensors::open(single)?);
        }
    } else if path.to_string_lossy().ends_with(".index.json") {
        path.to_path_buf()
    } else {
        return single_checkpoint(SafeTensors::open(path)?);
    };
    sharded_checkpoint(&index_path)
}

/// Opens the shards a `*.index.json` lists (each once, in sorted name
/// order) and checks that the index places every tensor where it is.
fn sharded_checkpoint(index_path: &Path) -> Result<Checkpoint> {
    let map = read_weight_map(index_path)?;
    let dir = index_path.parent().unwrap_or(Path::new("."));
    let mut files = Vec::new();
    let mut order = Vec::new();
    let mut index = HashMap::new();
    for (fi, s) in shard_names(index_path, &map)?.into_iter().enumerate() {
        let st = SafeTensors::open(dir.join(s))?;
        let err = FileErrors(&st.path);
        for (ti, t) in st.tensors.iter().enumerate() {
            let header = |msg: String| err.invalid_header(Some(&t.name), msg);
            match map.get(&t.name).and_then(|v| v.as_str()) {
                Some(listed) if listed == s => {}
                Some(listed) => {
                    return Err(header(format!(
                        "the index places this tensor in `{listed}`"
                    )))
                }
                None => {
                    let index_name = index_path.display();
                    return Err(header(format!("tensor is missing from {index_name}")));
                }
            }
            if index.insert(t.name.clone(), order.len()).is_some() {
                return Err(err.duplicate_name(&t.name));
            }
            order.push((fi, ti));
        }
        files.push(st);
    }
    if let Some(missing) = map.keys().find(|k| !index.contains_key(*k)) {
        return Err(FileErrors(index_path).not_found(missing));
    }
    Ok(Checkpoint {
        files,
        order,
        index,
    })
}

/// The `weight_map` object of a shard index: tensor name → shard file.
fn read_weight_map(index_path: &Path) -> Result<serde_json::Map<String, serde_json::Value>> {
    let err = FileErrors(index_path);
    let text = std::fs::read(index_path).map_err(|e| ParamsError::io(index_path, e))?;
    let mut json: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| err.invalid_json(e.to_string()))?;
    json.get_mut("weight_map")
        .and_then(serde_json::Value::as_object_mut)
        .map(std::mem::take)
        .ok_or_else(|| err.invalid_header(None, "missing `weight_map` object"))
}

/// The shard file names a weight map lists, sorted, each once; each must be
/// a plain file name (no directory part).
fn shard_names<'m>(
    index_path: &Path,
    map: &'m serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<&'m str>> {
    let err = FileErrors(index_path);
    let mut names: Vec<&str> = Vec::new();
    for (name, shard) in map {
        let s = shard
            .as_str()
            .ok_or_else(|| err.invalid_header(Some(name), "shard file name is not a string"))?;
        if s.is_empty() || s.contains('/') || s.contains('\\') || s == "." || s == ".." {
            let msg = format!("shard name `{s}` must be a plain file name");
            return Err(err.invalid_header(Some(name), msg));
        }
        names.push(s);
    }
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

fn single_checkpoint(st: SafeTensors) -> Result<Checkpoint> {
    let order: Vec<(usize, usize)> = (0..st.tensors.len()).map(|t| (0, t)).collect();
    let index = st.index.clone();
    Ok(Checkpoint {
        files: vec![st],
        order,
        index,
    })
}

/// One tensor to be written: name, dtype, true shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape, outermost first (never flattened).
    pub shape: Vec<u64>,
}

impl TensorSpec {
    /// Builds a spec.
    pub fn new(name: impl Into<String>, dtype: DType, shape: &[u64]) -> Self {
        TensorSpec {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }
}

/// Streaming safetensors writer: all tensors are declared up front (so the
/// header can be written first), then each tensor's bytes are streamed in
/// declaration order; [`SafetensorsWriter::finish`] renames the complete
/// file into place. Dropping the writer unfinished leaves no output.
///
/// The header lists tensors in declaration order (deterministic), with
/// `__metadata__` first when given, and is padded with spaces to 8 bytes.
pub struct SafetensorsWriter {
    stream: TensorStream,
    size: u64,
}

impl SafetensorsWriter {
    /// Validates the specs, creates the temporary output and writes the header.
    pub fn new(
        path: impl AsRef<Path>,
        specs: &[TensorSpec],
        metadata: &[(String, String)],
    ) -> Result<Self> {
        Self::create(path.as_ref(), specs, metadata, false)
    }

    /// Like [`SafetensorsWriter::new`], and also keeps a running sha256 of
    /// every byte written, returned by [`SafetensorsWriter::finish_written`]
    /// (no second pass over the file).
    pub fn new_hashed(
        path: impl AsRef<Path>,
        specs: &[TensorSpec],
        metadata: &[(String, String)],
    ) -> Result<Self> {
        Self::create(path.as_ref(), specs, metadata, true)
    }

    fn create(
        path: &Path,
        specs: &[TensorSpec],
        metadata: &[(String, String)],
        hash: bool,
    ) -> Result<Self> {
        let header = build_header(path, specs, metadata)?;
        let mut head = Vec::with_capacity(8 + header.len());
        head.write_u64::<LittleEndian>(header.len() as u64)
            .map_err(|e| ParamsError::io(path, e))?;
        head.extend_from_slice(&header);
        let mut at = head.len() as u64;
        let slots = specs
            .iter()
            .map(|s| {
                let len = checked_nbytes(s.dtype, &s.shape).unwrap_or(0);
                let slot = Slot {
                    name: s.name.clone(),
                    start: at,
                    len,
                };
                at += len;
                slot
            })
            .collect();
        Ok(SafetensorsWriter {
            stream: TensorStream::create(path, &head, slots, hash)?,
            size: at,
        })
    }
}

impl sealed::Streamed for SafetensorsWriter {
    fn stream(&mut self) -> &mut TensorStream {
        &mut self.stream
    }
    fn into_stream(self) -> (TensorStream, u64) {
        (self.stream, self.size)
    }
}

impl TensorWriter for SafetensorsWriter {}

fn build_header(
    path: &Path,
    specs: &[TensorSpec],
    metadata: &[(String, String)],
) -> Result<Vec<u8>> {
    let js = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut h = String::from("{");
    if !metadata.is_empty() {
        h.push_str("\"__metadata__\":{");
        for (i, (k, v)) in metadata.iter().enumerate() {
            if i > 0 {
                h.push(',');
            }
            h.push_str(&format!("{}:{}", js(k), js(v)));
        }
        h.push('}');
    }
    let mut seen = HashSet::new();
    let mut offset = 0u64;
    for (i, s) in specs.iter().enumerate() {
        if s.name == "__metadata__" || !seen.insert(s.name.as_str()) {
            return Err(ParamsError::DuplicateName {
                file: path.to_path_buf(),
                tensor: s.name.clone(),
            });
        }
        let n = checked_nbytes(s.dtype, &s.shape)
            .and_then(|n| offset.checked_add(n).map(|e| (n, e)))
            .ok_or_else(|| ParamsError::Overflow {
                file: path.to_path_buf(),
                tensor: Some(s.name.clone()),
                what: "shape × dtype size".into(),
            })?;
        if i > 0 || !metadata.is_empty() {
            h.push(',');
        }
        let shape: Vec<String> = s.shape.iter().map(u64::to_string).collect();
        h.push_str(&format!(
            "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            js(&s.name),
            s.dtype.safetensors_name(),
            shape.join(","),
            offset,
            n.1
        ));
        offset = n.1;
    }
    h.push('}');
    while h.len() % 8 != 0 {
        h.push(' ');
    }
    Ok(h.into_bytes())
}
