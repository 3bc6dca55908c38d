//! GGUF (versions 2 and 3, little-endian): a strict memory-mapped reader
//! with typed metadata and dequantization to f32.
//!
//! Layout: magic `GGUF`, version u32, tensor count u64, metadata count u64,
//! the key/value pairs, the tensor infos (name, n_dims u32, dims u64
//! innermost first, type u32, offset u64), padding to `general.alignment`
//! (default 32) and the data section. See `spec/gguf.md` for every rule.

pub(crate) use super::dtype::GgmlType;

use super::error::FileErrors;
use super::{align_up, quant, Backing, ParamsError, Result};
use byteorder::{ByteOrder, LittleEndian};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// Default data alignment.
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a GGML tensor has.
pub(crate) const MAX_DIMS: u32 = 4;
/// Deepest nesting of arrays accepted in metadata.
pub(crate) const MAX_ARRAY_DEPTH: u32 = 8;

/// A typed metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// type 0
    U8(u8),
    /// type 1
    I8(i8),
    /// type 2
    U16(u16),
    /// type 3
    I16(i16),
    /// type 4
    U32(u32),
    /// type 5
    I32(i32),
    /// type 6
    F32(f32),
    /// type 7 (stored as one byte, 0 or 1)
    Bool(bool),
    /// type 8 (u64 length + UTF-8 bytes)
    String(String),
    /// type 9: element type id and elements (all of that type)
    Array(u32, Vec<GgufValue>),
    /// type 10
    U64(u64),
    /// type 11
    I64(i64),
    /// type 12
    F64(f64),
}

impl GgufValue {
    /// An integer value (of any integer type) as u64, if non-negative.
    pub fn as_u64(&self) -> Option<u64> {
        use GgufValue::*;
        match *self {
            U8(v) => Some(v as u64),
            U16(v) => Some(v as u64),
            U32(v) => Some(v as u64),
            U64(v) => Some(v),
            I8(v) => u64::try_from(v).ok(),
            I16(v) => u64::try_from(v).ok(),
            I32(v) => u64::try_from(v).ok(),
            I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// An integer value as i64.
    pub fn as_i64(&self) -> Option<i64> {
        use GgufValue::*;
        match *self {
            U8(v) => Some(v as i64),
            U16(v) => Some(v as i64),
            U32(v) => Some(v as i64),
            U64(v) => i64::try_from(v).ok(),
            I8(v) => Some(v as i64),
            I16(v) => Some(v as i64),
            I32(v) => Some(v as i64),
            I64(v) => Some(v),
            _ => None,
        }
    }

    /// A float (or integer) value as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// A boolean value.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array's elements.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(_, v) => Some(v),
            _ => None,
        }
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn as_string_array(&self) -> Option<Vec<&str>> {
        self.as_array()?.iter().map(|v| v.as_str()).collect()
    }

    /// The GGUF type name of this value.
    pub fn type_name(&self) -> &'static str {
        use GgufValue::*;
        match self {
            U8(_) => "u8",
            I8(_) => "i8",
            U16(_) => "u16",
            I16(_) => "i16",
            U32(_) => "u32",
            I32(_) => "i32",
            F32(_) => "f32",
            Bool(_) => "bool",
            String(_) => "string",
            Array(..) => "array",
            U64(_) => "u64",
            I64(_) => "i64",
            F64(_) => "f64",
        }
    }
}

impl fmt::Display for GgufValue {
    /// Scalars print as themselves; arrays print their type and length
    /// and, when short, their elements.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GgufValue::*;
        match self {
            U8(v) => write!(f, "{v}"),
            I8(v) => write!(f, "{v}"),
            U16(v) => write!(f, "{v}"),
            I16(v) => write!(f, "{v}"),
            U32(v) => write!(f, "{v}"),
            I32(v) => write!(f, "{v}"),
            F32(v) => write!(f, "{v}"),
            Bool(v) => write!(f, "{v}"),
            String(s) => write!(f, "{s:?}"),
            U64(v) => write!(f, "{v}"),
            I64(v) => write!(f, "{v}"),
            F64(v) => write!(f, "{v}"),
            Array(_, v) if v.len() <= 8 => {
                write!(f, "[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{x}")?;
                }
                write!(f, "]")
            }
            Array(t, v) => write!(f, "[{} × {}]", v.len(), value_type_name(*t)),
        }
    }
}

fn value_type_name(t: u32) -> &'static str {
    [
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
        "f64",
    ]
    .get(t as usize)
    .copied()
    .unwrap_or("?")
}

/// One tensor's info record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// Tensor name.
    pub name: String,
    /// Storage type.
    pub ggml_type: GgmlType,
    /// Dimensions as GGUF lists them: innermost (fastest-varying) first.
    pub dims: Vec<u64>,
    /// Offset relative to the data section.
    pub offset: u64,
    /// Stored bytes.
    pub nbytes: u64,
}

impl GgufTensorInfo {
    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Row-major shape, outermost first (GGUF dims reversed): the HF shape.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }
}

/// A validated, memory-mapped GGUF file.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    bytes: Backing,
    version: u32,
    metadata: Vec<(String, GgufValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    index: HashMap<String, usize>,
    alignment: u64,
    data_start: u64,
}

struct Cursor<'a> {
    path: &'a Path,
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// The error builder of the file being read.
    fn err(&self) -> FileErrors<'a> {
        FileErrors(self.path)
    }
    fn remaining(&self) -> u64 {
        (self.b.len() - self.pos) as u64
    }
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.err().truncated(None, what(), n, self.remaining()));
        }
        let s = &self.b[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }
    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(LittleEndian::read_u32(self.take(4, what)?))
    }
    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(LittleEndian::read_u64(self.take(8, what)?))
    }
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let n = self.u64(what)?;
        let s = self.take(n, what)?;
        std::str::from_utf8(s)
            .map(str::to_string)
            .map_err(|_| self.err().invalid_utf8(None, what()))
    }
}

/// Smallest encoding of one value of type `t` (for plausibility checks).
fn min_value_size(t: u32) -> u64 {
    match t {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10 | 11 | 12 => 8,
        9 => 12,
        _ => 1,
    }
}

fn read_value(c: &mut Cursor, key: &str, t: u32, depth: u32) -> Result<GgufValue> {
    let what = || format!("metadata `{key}`");
    let err = c.err();
    let bad = |msg: String| err.invalid_metadata(key, msg);
    Ok(match t {
        0 => GgufValue::U8(c.take(1, &what)?[0]),
        1 => GgufValue::I8(c.take(1, &what)?[0] as i8),
        2 => GgufValue::U16(LittleEndian::read_u16(c.take(2, &what)?)),
        3 => GgufValue::I16(LittleEndian::read_i16(c.take(2, &what)?)),
        4 => GgufValue::U32(c.u32(&what)?),
        5 => GgufValue::I32(c.u32(&what)? as i32),
        6 => GgufValue::F32(f32::from_bits(c.u32(&what)?)),
        7 => match c.take(1, &what)?[0] {
            0 => GgufValue::Bool(false),
            1 => GgufValue::Bool(true),
            v => return Err(bad(format!("bool byte is {v}, not 0 or 1"))),
        },
        8 => GgufValue::String(c.string(&what)?),
        9 => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(bad(format!("arrays nested deeper than {MAX_ARRAY_DEPTH}")));
            }
            let et = c.u32(&what)?;
            if et > 12 {
                return Err(bad(format!("unknown array element type {et}")));
            }
            let n = c.u64(&what)?;
            let max = c.remaining() / min_value_size(et);
            if n > max {
                let what = format!("array element (metadata `{key}`)");
                return Err(err.too_many(what, n, max));
            }
            let mut v = Vec::with_capacity(n as usize);
            for _ in 0..n {
                v.push(read_value(c, key, et, depth + 1)?);
            }
            GgufValue::Array(et, v)
        }
        10 => GgufValue::U64(c.u64(&what)?),
        11 => GgufValue::I64(c.u64(&what)? as i64),
        12 => GgufValue::F64(f64::from_bits(c.u64(&what)?)),
        other => return Err(bad(format!("unknown value type {other}"))),
    })
}

/// Reads the magic and the version (2 or 3; a big-endian file is named as
/// such) and returns the version, the tensor count and the metadata count.
fn read_preamble(c: &mut Cursor) -> Result<(u32, u64, u64)> {
    let magic = c.take(4, &|| "GGUF magic".into())?;
    if magic != b"GGUF" {
        return Err(c.err().bad_magic("GGUF"));
    }
    let version = c.u32(&|| "GGUF version".into())?;
    if version != 2 && version != 3 {
        let swapped = version.swap_bytes();
        let version = if swapped == 2 || swapped == 3 {
            format!("{swapped} (big-endian)")
        } else {
            version.to_string()
        };
        return Err(c.err().unsupported_version("GGUF", version));
    }
    let n_tensors = c.u64(&|| "tensor count".into())?;
    let n_kv = c.u64(&|| "metadata count".into())?;
    Ok((version, n_tensors, n_kv))
}

/// Metadata key/value pairs in file order and each key's position.
type Metadata = (Vec<(String, GgufValue)>, HashMap<String, usize>);

/// Reads `n_kv` metadata key/value pairs, refusing a repeated key.
fn read_metadata(c: &mut Cursor, n_kv: u64) -> Result<Metadata> {
    // A KV needs ≥ 13 bytes (key length, type, 1-byte value).
    let max_kv = c.remaining() / 13;
    if n_kv > max_kv {
        return Err(c.err().too_many("metadata key/value", n_kv, max_kv));
    }
    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut meta_index = HashMap::new();
    for i in 0..n_kv {
        let key = c.string(&|| format!("metadata key {i}"))?;
        let t = c.u32(&|| format!("type of metadata `{key}`"))?;
        let v = read_value(c, &key, t, 0)?;
        if meta_index.insert(key.clone(), metadata.len()).is_some() {
            return Err(c.err().invalid_metadata(&key, "duplicate key"));
        }
        metadata.push((key, v));
    }
    Ok((metadata, meta_index))
}

/// `general.alignment`: a non-zero power-of-two u32, or
/// [`DEFAULT_ALIGNMENT`] when absent.
fn alignment(
    err: FileErrors,
    metadata: &[(String, GgufValue)],
    meta_index: &HashMap<String, usize>,
) -> Result<u64> {
    match meta_index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(GgufValue::U32(a)) if *a > 0 && a.is_power_of_two() => Ok(*a as u64),
        Some(v) => Err(err.invalid_metadata(
            "general.alignment",
            format!(
                "must be a non-zero power of two u32, found {} {v}",
                v.type_name()
            ),
        )),
    }
}

/// Reads `n_tensors` tensor infos whose data offsets are multiples of
/// `alignment`.
fn read_tensor_infos(
    c: &mut Cursor,
    n_tensors: u64,
    alignment: u64,
) -> Result<Vec<GgufTensorInfo>> {
    // A tensor info needs ≥ 24 bytes (name length, n_dims, type, offset).
    let max_t = c.remaining() / 24;
    if n_tensors > max_t {
        return Err(c.err().too_many("tensor", n_tensors, max_t));
    }
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        tensors.push(read_tensor_info(c, i, alignment)?);
    }
    Ok(tensors)
}

/// Reads tensor info `i`: name, at most [`MAX_DIMS`] dimensions, a known
/// GGML type that blocks the innermost dimension, and an aligned offset;
/// computes the stored byte count.
fn read_tensor_info(c: &mut Cursor, i: u64, alignment: u64) -> Result<GgufTensorInfo> {
    let err = c.err();
    let name = c.string(&|| format!("tensor {i} name"))?;
    let what = || format!("info of tensor `{name}`");
    let header = |msg: String| err.invalid_header(Some(&name), msg);
    let n_dims = c.u32(&what)?;
    if n_dims > MAX_DIMS {
        return Err(header(format!("{n_dims} dimensions (at most {MAX_DIMS})")));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        let d = c.u64(&what)?;
        if d > i64::MAX as u64 {
            return Err(header(format!("dimension {d} exceeds i64")));
        }
        dims.push(d);
    }
    let ty_id = c.u32(&what)?;
    let ggml_type = GgmlType::from_id(ty_id)
        .ok_or_else(|| err.unknown_dtype(&name, format!("ggml type {ty_id}")))?;
    let offset = c.u64(&what)?;
    let numel = dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| err.overflow(Some(&name), "element count"))?;
    let bs = ggml_type.block_size();
    let inner = dims.first().copied().unwrap_or(1);
    if inner % bs != 0 {
        return Err(header(format!(
            "innermost dimension {inner} is not a multiple of the {ggml_type} block size {bs}"
        )));
    }
    let nbytes = (numel / bs)
        .checked_mul(ggml_type.type_size())
        .ok_or_else(|| err.overflow(Some(&name), "byte size"))?;
    if offset % alignment != 0 {
        return Err(err.misaligned(&name, offset, alignment));
    }
    Ok(GgufTensorInfo {
        name,
        ggml_type,
        dims,
        offset,
        nbytes,
    })
}

/// Each tensor's position by name, refusing a repeated name.
fn name_index(err: FileErrors, tensors: &[GgufTensorInfo]) -> Result<HashMap<String, usize>> {
    let mut index = HashMap::new();
    let mut seen = HashSet::new();
    for (i, t) in tensors.iter().enumerate() {
        if !seen.insert(t.name.as_str()) {
            return Err(err.duplicate_name(&t.name));
        }
        index.insert(t.name.clone(), i);
    }
    Ok(index)
}

/// Checks that every tensor lies inside a data section of `data_len` bytes
/// and that no two overlap.
fn check_data_offsets(err: FileErrors, tensors: &[GgufTensorInfo], data_len: u64) -> Result<()> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| (tensors[i].offset, tensors[i].nbytes));
    let mut prev_end = 0u64;
    let mut prev_name = "";
    for &i in &order {
        let t = &tensors[i];
        let end = t
            .offset
            .checked_add(t.nbytes)
            .ok_or_else(|| err.overflow(Some(&t.name), "offset + size"))?;
        if end > data_len {
            let msg = format!(
                "[{}, {end}) is past the end of the data section ({data_len} bytes)",
                t.offset
            );
            return Err(err.invalid_offsets(Some(&t.name), msg));
        }
        if t.offset < prev_end {
            let msg = format!("overlaps tensor `{prev_name}`, which ends at {prev_end}");
            return Err(err.invalid_offsets(Some(&t.name), msg));
        }
        prev_end = end;
        prev_name = &t.name;
    }
    Ok(())
}

impl GgufFile {
    backed_constructors!();

    /// Validates the whole file: preamble, metadata, tensor infos and the
    /// tensors' places in the data section.
    fn from_backing(path: &Path, bytes: Backing) -> Result<Self> {
        let err = FileErrors(path);
        let mut c = Cursor {
            path,
            b: &bytes,
            pos: 0,
        };
        let (version, n_tensors, n_kv) = read_preamble(&mut c)?;
        let (metadata, meta_index) = read_metadata(&mut c, n_kv)?;
        let alignment = alignment(err, &metadata, &meta_index)?;
        let tensors = read_tensor_infos(&mut c, n_tensors, alignment)?;
        let size = bytes.len() as u64;
        let data_start = align_up(c.pos as u64, alignment);
        if data_start > size && !tensors.is_empty() {
            return Err(err.truncated(None, "data section", data_start, size));
        }
        let index = name_index(err, &tensors)?;
        check_data_offsets(err, &tensors, size.saturating_sub(data_start))?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            bytes,
            version,
            metadata,
            meta_index,
            tensors,
            index,
            alignment,
            data_start,
        })
    }

    /// The file this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.metadata
    }

    /// The metadata value for `key`.
    pub fn get_metadata(&self, key: &str) -> Option<&GgufValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The info of tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// Data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// File offset of the data section.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// The stored (possibly quantized) bytes of a tensor (zero-copy).
    pub fn tensor_data(&self, t: &GgufTensorInfo) -> &[u8] {
        // Validated in `from_backing`: every tensor lies inside the file.
        let a = (self.data_start + t.offset) as usize;
        &self.bytes[a..a + t.nbytes as usize]
    }

    /// Dequantizes a tensor to f32 (row-major in GGUF's dims order, i.e. the
    /// HF layout of [`GgufTensorInfo::shape`]).
    pub fn dequantize(&self, t: &GgufTensorInfo) -> Result<Vec<f32>> {
        let mut out = vec![0f32; t.numel() as usize];
        quant::dequantize(t.ggml_type, self.tensor_data(t), &mut out).map_err(|msg| {
            ParamsError::Unsupported {
                file: self.path.clone(),
                tensor: t.name.clone(),
                msg,
            }
        })?;
        Ok(out)
    }

    /// Dequantizes the tensor called `name`.
    pub fn dequantize_by_name(&self, name: &str) -> Result<Vec<f32>> {
        let t = self.tensor(name).ok_or_else(|| ParamsError::NotFound {
            file: self.path.clone(),
            tensor: name.to_string(),
        })?;
        self.dequantize(t)
    }
}
