//! What a parameter file holds (`kiln params inspect`): its tensors and
//! totals, a GGUF's metadata, IRPA entry kinds, the model family it names,
//! and the quantized matrices kiln recognizes by their parts (i8 rows and
//! block forms).

use super::blocks::{part_key, recognize, Recognized};
use super::gguf::{GgufFile, GgufValue};
use super::quant::{I8_REST_CODES, I8_ROWS_PARTS, I8_TWO_TERM_CODES};
use super::{DType, Format, ParamSource, Result, StorageKind, TensorMeta};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// What [`Inspection::open`] found in one parameter file.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Inspection {
    /// The path, as given.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// Its tensors, in file order.
    pub tensors: Vec<TensorMeta>,
    /// Bytes of all tensors.
    pub total_bytes: u64,
    /// A GGUF file's header and metadata.
    pub gguf: Option<GgufHeader>,
    /// The model family the file names: a GGUF's `general.architecture`,
    /// or the `model_type` of the `config.json` beside a safetensors file
    /// (an HF checkpoint folder).
    pub family: Option<String>,
    /// IRPA entry kinds and their counts, in first-seen order.
    pub entry_kinds: Vec<(StorageKind, usize)>,
    /// The block-quantized matrices, by their parts (`--weights keep`,
    /// `q8_0`, `q4_0` exports).
    pub blocks: Vec<Recognized>,
    /// The i8-rows matrices, by their parts (`--weights w8a8` and `w8a16` exports).
    pub int8_rows: Vec<Int8Rows>,
}

/// A GGUF file's version, alignment and metadata.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GgufHeader {
    /// Format version.
    pub version: u32,
    /// Data alignment in bytes.
    pub alignment: u64,
    /// Metadata, in file order.
    pub metadata: Vec<(String, GgufValue)>,
}

/// One matrix stored as i8 rows: `NAME.q8` (i8 `[rows, K]`, or an IRPA
/// entry of rows·K bytes) or `NAME.q8x2` (two terms per weight, `[rows,
/// 2·K]`), with `NAME.scale`, one f32 per row.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Int8Rows {
    /// `NAME`.
    pub name: String,
    /// `[rows, K]`.
    pub shape: [u64; 2],
    /// i8 terms stored per weight: 1 (`w8a8`, `w8a16`) or 2 (`w16a16`,
    /// `w8a16e`).
    pub terms: u64,
    /// The parts' suffixes, in archive order (`q8`, `scale`; `q8x2`,
    /// `scale`; `q8`, `scale`, `q8lo`).
    pub parts: Vec<String>,
    /// Bytes of both parts.
    pub bytes: u64,
}

impl Inspection {
    /// Opens `path` (any format, chosen by its magic) and gathers the
    /// report.
    pub fn open(path: &Path) -> Result<Inspection> {
        let src = <dyn ParamSource>::open(path)?;
        let gguf = match src.format() {
            Format::Gguf => Some(GgufFile::open(path)?),
            _ => None,
        };
        let family = model_family(path, gguf.as_ref());
        let tensors = src.tensors();
        let total_bytes: u64 = tensors.iter().map(|t| t.nbytes).sum();
        let mut entry_kinds: Vec<(StorageKind, usize)> = Vec::new();
        for kind in tensors.iter().filter_map(|t| t.kind) {
            match entry_kinds.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, n)) => *n += 1,
                None => entry_kinds.push((kind, 1)),
            }
        }
        Ok(Inspection {
            path: path.to_path_buf(),
            format: src.format(),
            blocks: blocks_of(&*src),
            int8_rows: int8_rows_of(tensors),
            total_bytes,
            entry_kinds,
            family,
            gguf: gguf.map(|g| GgufHeader {
                version: g.version(),
                alignment: g.alignment(),
                metadata: g.metadata().to_vec(),
            }),
            tensors: tensors.to_vec(),
        })
    }

    /// Elements of all tensors.
    pub fn total_elements(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.shape.iter().product::<u64>())
            .sum()
    }

    /// The report as JSON (`kiln params inspect --json`); `model_family`
    /// is what to record for [`Inspection::family`], when there is one.
    pub fn to_json(&self, model_family: Option<Value>) -> Value {
        let ts: Vec<Value> = self
            .tensors
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "dtype": t.dtype.to_string(),
                    "shape": t.shape,
                    "nbytes": t.nbytes,
                    "offset": t.offset,
                    "kind": t.kind.map(StorageKind::name),
                })
            })
            .collect();
        let mut out = json!({
            "file": self.path.display().to_string(),
            "format": self.format.to_string(),
            "tensor_count": self.tensors.len(),
            "total_bytes": self.total_bytes,
            "tensors": ts,
        });
        if let Some(g) = &self.gguf {
            let meta: serde_json::Map<String, Value> = g
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), gguf_json(v)))
                .collect();
            out["version"] = g.version.into();
            out["alignment"] = g.alignment.into();
            out["metadata"] = meta.into();
        }
        if let Some(f) = model_family {
            out["model_family"] = f;
        }
        if !self.int8_rows.is_empty() {
            out["int8_rows"] = self
                .int8_rows
                .iter()
                .map(|r| json!({ "name": r.name, "shape": r.shape, "terms": r.terms, "parts": r.parts, "bytes": r.bytes }))
                .collect::<Vec<_>>()
                .into();
        }
        if !self.blocks.is_empty() {
            out["blocks"] = self
                .blocks
                .iter()
                .map(block_json)
                .collect::<Vec<_>>()
                .into();
        }
        if !self.entry_kinds.is_empty() {
            let k: serde_json::Map<String, Value> = self
                .entry_kinds
                .iter()
                .map(|(k, n)| (k.to_string(), (*n).into()))
                .collect();
            out["entry_kinds"] = k.into();
        }
        out
    }
}

/// A GGUF metadata value as JSON.
fn gguf_json(v: &GgufValue) -> Value {
    match v {
        GgufValue::String(s) => Value::from(s.as_str()),
        GgufValue::Bool(b) => Value::from(*b),
        GgufValue::F32(f) => {
            serde_json::Number::from_f64(*f as f64).map_or(Value::Null, Value::Number)
        }
        GgufValue::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        GgufValue::Array(_, items) => Value::Array(items.iter().map(gguf_json).collect()),
        other => match other.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(other.as_u64().unwrap_or(0)),
        },
    }
}

/// One block-quantized matrix as JSON.
fn block_json(b: &Recognized) -> Value {
    json!({
        "name": b.name,
        "type": b.form.ggml.to_string(),
        "shape": b.shape,
        "elements": b.elements,
        "group": b.form.group,
        "bytes": b.bytes,
        "parts": b.parts,
    })
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
    let j: Value = serde_json::from_str(&text).ok()?;
    j.get("model_type")?.as_str().map(str::to_string)
}

/// The block-quantized matrices of a parameter file (`--weights keep`,
/// `q8_0`, `q4_0` exports), by their parts.
pub fn blocks_of(src: &dyn ParamSource) -> Vec<Recognized> {
    recognize(
        &src.tensors()
            .iter()
            .map(|t| (t.name.clone(), t.dtype.try_into().ok(), t.shape.clone()))
            .collect::<Vec<_>>(),
    )
}

/// The i8-rows matrices among `tensors`: every `NAME.q8` (i8 `[rows, K]`,
/// or an IRPA entry of rows·K bytes) or `NAME.q8x2` (two terms, `[rows,
/// 2·K]`) with a `NAME.scale` of one f32 per row (and, for `w8a16e`, a
/// `NAME.q8lo` of the rows' rounding errors).
fn int8_rows_of(tensors: &[TensorMeta]) -> Vec<Int8Rows> {
    let [codes, scale] = I8_ROWS_PARTS;
    let find = |n: &str| tensors.iter().find(|t| t.name == n);
    tensors
        .iter()
        .filter_map(|q| {
            let (base, terms) = match q.name.strip_suffix(codes) {
                Some(b) => (b, 1),
                None => (q.name.strip_suffix(I8_TWO_TERM_CODES)?, 2),
            };
            let base = base.strip_suffix('.')?;
            let s = find(&part_key(base, scale))?;
            let rows = s.nbytes / 4;
            let ok = rows > 0
                && q.nbytes % (rows * terms) == 0
                && match (q.dtype.plain(), s.dtype.plain()) {
                    // An IRPA entry is only bytes.
                    (None, None) => true,
                    (Some(DType::I8), Some(DType::F32)) => {
                        q.shape.len() == 2 && s.shape == [rows, 1]
                    }
                    _ => false,
                };
            // A `w8a16e` matrix's second term is a part of its own.
            let rest = (terms == 1)
                .then(|| find(&part_key(base, I8_REST_CODES)))
                .flatten()
                .filter(|r| r.nbytes == q.nbytes);
            ok.then(|| Int8Rows {
                name: base.to_string(),
                shape: [rows, q.nbytes / rows / terms],
                terms: terms + u64::from(rest.is_some()),
                parts: [
                    q.name.rsplit('.').next(),
                    Some(scale),
                    rest.map(|_| I8_REST_CODES),
                ]
                .into_iter()
                .flatten()
                .map(str::to_string)
                .collect(),
                bytes: q.nbytes + s.nbytes + rest.map_or(0, |r| r.nbytes),
            })
        })
        .collect()
}
