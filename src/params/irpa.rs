//! IREE parameter archives (`.irpa`): a strict reader and a streaming
//! writer whose default output is byte-identical to `iree-convert-parameters`.
//!
//! Layout (all little-endian, packed): an 88-byte header (magic `IRPA`,
//! version 0.0, entry count and three segments: entries, metadata, storage),
//! an entry table (16-byte aligned entries of type SKIP, SPLAT, DATA or
//! EXTERNAL), a metadata segment (names and per-entry metadata) and a storage
//! segment holding the DATA bytes. See `spec/irpa.md` for every rule.

use super::dtype::DType;
use super::error::FileErrors;
use super::stream::{sealed, Slot, TensorStream, TensorWriter};
use super::{align_up, Backing, ParamsError, Result};
use byteorder::{ByteOrder, LittleEndian, WriteBytesExt};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// `IRPA` as a little-endian u32.
pub(crate) const MAGIC: u32 = 0x4150_5249;
/// Size of the v0 header.
pub(crate) const HEADER_SIZE: u64 = 88;
/// Size of the common entry header.
pub(crate) const ENTRY_HEADER_SIZE: u64 = 60;
/// Size of a SPLAT entry.
pub(crate) const SPLAT_ENTRY_SIZE: u64 = 85;
/// Size of a DATA entry.
pub(crate) const DATA_ENTRY_SIZE: u64 = 76;
/// Size of an EXTERNAL entry.
pub(crate) const EXTERNAL_ENTRY_SIZE: u64 = 92;
/// Alignment of each entry in the entry table.
pub(crate) const ENTRY_ALIGNMENT: u64 = 16;
/// Alignment IREE's builder gives DATA entries.
pub(crate) const DATA_ALIGNMENT: u64 = 64;
/// The whole file is padded to this.
pub(crate) const FILE_ALIGNMENT: u64 = 4096;

/// What an entry holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// An entry to ignore (IREE's parser skips it).
    Skip,
    /// A constant: `length` bytes filled with `pattern`.
    Splat {
        /// Bytes the parameter covers.
        length: u64,
        /// The repeated little-endian value (1, 2, 4, 8 or 16 bytes).
        pattern: Vec<u8>,
    },
    /// Bytes stored in the archive.
    Data {
        /// Offset relative to the storage segment.
        offset: u64,
        /// Length in bytes.
        length: u64,
    },
}

/// One validated archive entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrpaEntry {
    /// Parameter name (the key in `#flow.parameter.named<"scope"::"key">`).
    pub name: String,
    /// What the entry holds.
    pub kind: EntryKind,
    /// Optional per-entry metadata bytes (empty when none).
    pub metadata: Vec<u8>,
    /// Required alignment of the data's file offset (0 = none).
    pub min_alignment: u64,
    /// Offset of the entry header in the file.
    pub entry_offset: u64,
}

impl IrpaEntry {
    /// Bytes the parameter covers (0 for SKIP).
    pub fn len(&self) -> u64 {
        match &self.kind {
            EntryKind::Skip => 0,
            EntryKind::Splat { length, .. } | EntryKind::Data { length, .. } => *length,
        }
    }

    /// Whether the parameter covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entry type as IREE spells it.
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            EntryKind::Skip => "SKIP",
            EntryKind::Splat { .. } => "SPLAT",
            EntryKind::Data { .. } => "DATA",
        }
    }

    /// dtype and shape, when the metadata was written by kiln's `describe` option.
    pub fn described(&self) -> Option<(DType, Vec<u64>)> {
        parse_description(&self.metadata)
    }
}

/// A parameter's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IrpaData<'a> {
    /// Stored bytes (zero-copy).
    Data(&'a [u8]),
    /// A constant fill.
    Splat {
        /// The repeated value.
        pattern: &'a [u8],
        /// Bytes covered.
        length: u64,
    },
}

impl<'a> IrpaData<'a> {
    /// The parameter's bytes, expanding a splat (which may be far larger
    /// than the file: the allocation is fallible).
    pub fn expand(&self) -> std::result::Result<Cow<'a, [u8]>, std::collections::TryReserveError> {
        match *self {
            IrpaData::Data(d) => Ok(Cow::Borrowed(d)),
            IrpaData::Splat { pattern, length } => {
                let mut v: Vec<u8> = Vec::new();
                v.try_reserve_exact(usize::try_from(length).unwrap_or(usize::MAX))?;
                while (v.len() as u64) < length {
                    v.extend_from_slice(pattern);
                }
                Ok(Cow::Owned(v))
            }
        }
    }
}

/// A validated, memory-mapped parameter archive.
#[derive(Debug)]
pub struct IrpaReader {
    path: PathBuf,
    bytes: Backing,
    storage_offset: u64,
    entries: Vec<IrpaEntry>,
    index: HashMap<String, usize>,
}

/// A `{offset, length}` pair.
#[derive(Debug, Clone, Copy)]
struct Range {
    offset: u64,
    length: u64,
}

impl Range {
    fn at(b: &[u8], o: usize) -> Range {
        Range {
            offset: LittleEndian::read_u64(&b[o..]),
            length: LittleEndian::read_u64(&b[o + 8..]),
        }
    }
    /// End of the range, if it fits in `limit`.
    fn within(self, limit: u64) -> Option<u64> {
        self.offset.checked_add(self.length).filter(|&e| e <= limit)
    }
}

impl IrpaReader {
    backed_constructors!();

    fn from_backing(path: &Path, bytes: Backing) -> Result<Self> {
        let (storage_offset, entries) = parse(path, &bytes)?;
        let mut index = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            if e.kind != EntryKind::Skip && index.insert(e.name.clone(), i).is_some() {
                return Err(FileErrors(path).duplicate_name(&e.name));
            }
        }
        Ok(IrpaReader {
            path: path.to_path_buf(),
            bytes,
            storage_offset,
            entries,
            index,
        })
    }

    /// The file this was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All entries in table order (SKIP entries included).
    pub fn entries(&self) -> &[IrpaEntry] {
        &self.entries
    }

    /// File offset of the storage segment.
    pub fn storage_offset(&self) -> u64 {
        self.storage_offset
    }

    /// The entry called `name` (SKIP entries are not found).
    pub fn entry(&self, name: &str) -> Option<&IrpaEntry> {
        self.index.get(name).map(|&i| &self.entries[i])
    }

    /// The contents of the parameter called `name`.
    pub fn get(&self, name: &str) -> Option<IrpaData<'_>> {
        self.entry(name).map(|e| self.data(e))
    }

    /// The contents of `entry` (which must come from this reader).
    pub fn data<'a>(&'a self, entry: &'a IrpaEntry) -> IrpaData<'a> {
        match &entry.kind {
            EntryKind::Skip => IrpaData::Data(&[]),
            EntryKind::Splat { length, pattern } => IrpaData::Splat {
                pattern,
                length: *length,
            },
            EntryKind::Data { length: 0, .. } => IrpaData::Data(&[]),
            EntryKind::Data { offset, length } => {
                // Bounds were validated in `parse`.
                let a = (self.storage_offset + offset) as usize;
                IrpaData::Data(&self.bytes[a..a + *length as usize])
            }
        }
    }
}

/// Validates the whole archive: its header, then every entry of the table.
/// Returns the storage segment's file offset and the entries.
fn parse(path: &Path, b: &[u8]) -> Result<(u64, Vec<IrpaEntry>)> {
    let err = FileErrors(path);
    let h = read_header(err, b)?;
    let table = EntryTable {
        err,
        bytes: segment(b, h.entries),
        offset: h.entries.offset,
        meta: segment(b, h.metadata),
        storage: h.storage,
    };
    let mut entries = Vec::with_capacity(h.count as usize);
    let mut cursor = 0u64;
    for index in 0..h.count {
        let (entry, entry_size) = table.entry(index, cursor)?;
        entries.push(entry);
        cursor = cursor
            .checked_add(align_up(entry_size, ENTRY_ALIGNMENT))
            .ok_or_else(|| err.overflow(None, "entry table cursor"))?;
    }
    Ok((h.storage.offset, entries))
}

/// What the header declares: the entry count and the three segments.
struct Header {
    count: u64,
    entries: Range,
    metadata: Range,
    storage: Range,
}

/// Validates the 88-byte header: magic, version, size, flags, segments
/// inside the file and an entry count the entry segment can hold.
fn read_header(err: FileErrors, b: &[u8]) -> Result<Header> {
    let size = b.len() as u64;
    if size < 32 {
        return Err(err.truncated(None, "IRPA header prefix", 32, size));
    }
    if LittleEndian::read_u32(b) != MAGIC {
        return Err(err.bad_magic("IRPA"));
    }
    let (major, minor) = (
        LittleEndian::read_u16(&b[4..]),
        LittleEndian::read_u16(&b[6..]),
    );
    if major != 0 || minor != 0 {
        return Err(err.unsupported_version("IRPA", format!("{major}.{minor}")));
    }
    let header_size = LittleEndian::read_u64(&b[8..]);
    if header_size > size {
        return Err(err.truncated(None, "IRPA header", header_size, size));
    }
    if header_size != HEADER_SIZE {
        return Err(err.invalid_header(
            None,
            format!("header_size is {header_size}, expected {HEADER_SIZE}"),
        ));
    }
    if LittleEndian::read_u64(&b[16..]) != 0 {
        return Err(err.invalid_header(
            None,
            "chained headers (next_header_offset ≠ 0) are not supported",
        ));
    }
    let flags = LittleEndian::read_u64(&b[24..]);
    if flags != 0 {
        return Err(err.invalid_header(None, format!("reserved header flags are set ({flags:#x})")));
    }
    let h = Header {
        count: LittleEndian::read_u64(&b[32..]),
        entries: Range::at(b, 40),
        metadata: Range::at(b, 56),
        storage: Range::at(b, 72),
    };
    for (what, r) in [
        ("entry", h.entries),
        ("metadata", h.metadata),
        ("storage", h.storage),
    ] {
        check_segment(err, what, r, size)?;
    }
    let max = h.entries.length / ENTRY_HEADER_SIZE;
    if h.count > max {
        return Err(err.too_many("entry", h.count, max));
    }
    Ok(h)
}

/// Checks that the `what` segment `r` lies in a file of `size` bytes.
fn check_segment(err: FileErrors, what: &str, r: Range, size: u64) -> Result<()> {
    // IREE skips empty segments; kiln also wants their offset in the file.
    if r.offset > size || (r.length > 0 && r.within(size).is_none()) {
        return Err(match r.offset.checked_add(r.length) {
            None => err.overflow(None, format!("{what} segment offset + length")),
            Some(end) => err.truncated(
                None,
                format!("{what} segment [{}, {end})", r.offset),
                end,
                size,
            ),
        });
    }
    Ok(())
}

/// The bytes of a segment already checked to lie in `b` (none when empty).
fn segment(b: &[u8], r: Range) -> &[u8] {
    if r.length > 0 {
        &b[r.offset as usize..][..r.length as usize]
    } else {
        &[][..]
    }
}

/// The entry table and the segments its entries point into.
struct EntryTable<'a> {
    err: FileErrors<'a>,
    /// The entry segment's bytes.
    bytes: &'a [u8],
    /// The entry segment's file offset.
    offset: u64,
    /// The metadata segment's bytes.
    meta: &'a [u8],
    /// The storage segment.
    storage: Range,
}

impl EntryTable<'_> {
    /// Validates entry `index`, whose header starts `cursor` bytes into the
    /// table; returns it and its `entry_size`.
    fn entry(&self, index: u64, cursor: u64) -> Result<(IrpaEntry, u64)> {
        let remaining = (self.bytes.len() as u64).saturating_sub(cursor);
        if remaining < ENTRY_HEADER_SIZE {
            let what = format!("entry {index} header");
            return Err(self.err.truncated(None, what, ENTRY_HEADER_SIZE, remaining));
        }
        let e = &self.bytes[cursor as usize..][..remaining as usize];
        let entry_size = LittleEndian::read_u64(e);
        if entry_size < ENTRY_HEADER_SIZE || entry_size > remaining {
            return Err(self.err.invalid_entry(
                index,
                None,
                format!("entry_size {entry_size} outside [{ENTRY_HEADER_SIZE}, {remaining}]"),
            ));
        }
        let e = &e[..entry_size as usize];
        let name = self.name(index, e)?;
        let flags = LittleEndian::read_u64(&e[12..]);
        if flags != 0 {
            let msg = format!("reserved entry flags are set ({flags:#x})");
            return Err(self.err.invalid_entry(index, Some(&name), msg));
        }
        let metadata = self.metadata(index, &name, e)?;
        let min_alignment = LittleEndian::read_u64(&e[52..]);
        let kind = match LittleEndian::read_u32(&e[8..]) {
            0 => EntryKind::Skip,
            1 => self.splat(index, &name, e)?,
            2 => self.data(index, &name, e, min_alignment)?,
            3 => return Err(self.external(&name, e)),
            other => return Err(self.err.unknown_entry_type(index, other)),
        };
        let entry = IrpaEntry {
            name,
            kind,
            metadata,
            min_alignment,
            entry_offset: self.offset + cursor,
        };
        Ok((entry, entry_size))
    }

    /// The name of entry `index` (header `e`), from the metadata segment.
    fn name(&self, index: u64, e: &[u8]) -> Result<String> {
        let r = Range::at(e, 20);
        let end = r.within(self.meta.len() as u64).ok_or_else(|| {
            let msg = "name range is outside the metadata segment";
            self.err.invalid_entry(index, None, msg)
        })?;
        std::str::from_utf8(&self.meta[r.offset as usize..end as usize])
            .map(str::to_string)
            .map_err(|_| self.err.invalid_utf8(None, format!("entry {index} name")))
    }

    /// The per-entry metadata bytes of entry `index` (empty when none).
    fn metadata(&self, index: u64, name: &str, e: &[u8]) -> Result<Vec<u8>> {
        let r = Range::at(e, 36);
        if r.length == 0 {
            return Ok(Vec::new());
        }
        let end = r.within(self.meta.len() as u64).ok_or_else(|| {
            let msg = "metadata range is outside the metadata segment";
            self.err.invalid_entry(index, Some(name), msg)
        })?;
        Ok(self.meta[r.offset as usize..end as usize].to_vec())
    }

    /// A SPLAT entry: its length and a 1, 2, 4, 8 or 16-byte pattern that
    /// divides it.
    fn splat(&self, index: u64, name: &str, e: &[u8]) -> Result<EntryKind> {
        let entry_size = e.len() as u64;
        if entry_size < SPLAT_ENTRY_SIZE {
            let msg = format!("SPLAT entry_size {entry_size} < {SPLAT_ENTRY_SIZE}");
            return Err(self.err.invalid_entry(index, Some(name), msg));
        }
        let length = LittleEndian::read_u64(&e[60..]);
        let plen = e[84];
        if ![1u8, 2, 4, 8, 16].contains(&plen) {
            let msg = format!("pattern length {plen} is not 1, 2, 4, 8 or 16");
            return Err(self.err.invalid_splat(name, msg));
        }
        if length % plen as u64 != 0 {
            let msg = format!("length {length} is not a multiple of the {plen}-byte pattern");
            return Err(self.err.invalid_splat(name, msg));
        }
        Ok(EntryKind::Splat {
            length,
            pattern: e[68..68 + plen as usize].to_vec(),
        })
    }

    /// A DATA entry: a range inside the storage segment whose file offset
    /// meets the entry's minimum alignment.
    fn data(&self, index: u64, name: &str, e: &[u8], min_alignment: u64) -> Result<EntryKind> {
        let entry_size = e.len() as u64;
        if entry_size < DATA_ENTRY_SIZE {
            let msg = format!("DATA entry_size {entry_size} < {DATA_ENTRY_SIZE}");
            return Err(self.err.invalid_entry(index, Some(name), msg));
        }
        let r = Range::at(e, 60);
        let storage = self.storage;
        if r.within(storage.length).is_none() {
            let msg = format!(
                "storage range [{}, +{}) is outside the storage segment ({} bytes)",
                r.offset, r.length, storage.length
            );
            return Err(self.err.invalid_offsets(Some(name), msg));
        }
        if min_alignment != 0 && !min_alignment.is_power_of_two() {
            let msg = format!("minimum alignment {min_alignment} is not a power of two");
            return Err(self.err.invalid_entry(index, Some(name), msg));
        }
        // Both terms are ≤ the file size (checked above).
        let abs = storage.offset + r.offset;
        if min_alignment > 1 && abs % min_alignment != 0 {
            return Err(self.err.misaligned(name, abs, min_alignment));
        }
        Ok(EntryKind::Data {
            offset: r.offset,
            length: r.length,
        })
    }

    /// The refusal of an EXTERNAL entry, naming its target file when the
    /// entry holds a readable path.
    fn external(&self, name: &str, e: &[u8]) -> ParamsError {
        let target = if e.len() as u64 >= EXTERNAL_ENTRY_SIZE {
            let p = Range::at(e, 60);
            match p.within(self.meta.len() as u64) {
                Some(end) => String::from_utf8_lossy(&self.meta[p.offset as usize..end as usize])
                    .into_owned(),
                None => "<path outside the metadata segment>".into(),
            }
        } else {
            "<truncated entry>".into()
        };
        self.err.external_entry(name, target)
    }
}

/// kiln's self-description of an entry: `{"dtype":"BF16","shape":[…]}`.
pub(crate) fn describe(dtype: DType, shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    format!(
        "{{\"dtype\":\"{}\",\"shape\":[{}]}}",
        dtype.safetensors_name(),
        dims.join(",")
    )
    .into_bytes()
}

/// Parses metadata written by [`describe`]; `None` for anything else.
pub(crate) fn parse_description(meta: &[u8]) -> Option<(DType, Vec<u64>)> {
    let v: serde_json::Value = serde_json::from_slice(meta).ok()?;
    let dtype = DType::from_safetensors_name(v.get("dtype")?.as_str()?)?;
    let shape: Option<Vec<u64>> = v
        .get("shape")?
        .as_array()?
        .iter()
        .map(|d| d.as_u64())
        .collect();
    let shape = shape?;
    // Only trust a description that matches the entry's byte count later.
    Some((dtype, shape))
}

/// The element pattern of a constant tensor: `Some(first element)` when all
/// `elem_size`-byte elements of `bytes` are equal (and there is at least one).
pub(crate) fn splat_pattern(bytes: &[u8], elem_size: usize) -> Option<Vec<u8>> {
    if bytes.is_empty() || !matches!(elem_size, 1 | 2 | 4 | 8 | 16) || bytes.len() % elem_size != 0
    {
        return None;
    }
    let first = &bytes[..elem_size];
    bytes
        .chunks_exact(elem_size)
        .all(|c| c == first)
        .then(|| first.to_vec())
}

/// The name of the IRPA entry `kiln export` writes over one row chunk of
/// entry `key`, the bytes from `offset` on that a graph reads as
/// `#flow.parameter.named<…, {offset = …}>` ([`EntrySpec::part_of`]): a
/// whole entry, which IREE's tools can import and which the mapped mode of
/// iree-base-runtime 3.13 reads where it starts (spec/irpa.md, "Row-chunk
/// entries").
pub fn chunk_key(key: &str, offset: u64) -> String {
    format!("{key}@{offset}")
}

/// The key and offset a [`chunk_key`] name is made of; `None` for a name
/// that is not one.
pub fn parse_chunk_key(name: &str) -> Option<(&str, u64)> {
    let (key, offset) = name.rsplit_once('@')?;
    Some((key, offset.parse().ok()?))
}

/// One entry to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySpec {
    /// Parameter name.
    pub name: String,
    /// Bytes covered.
    pub length: u64,
    /// `Some(pattern)` for a SPLAT entry (1, 2, 4, 8 or 16 bytes).
    pub splat: Option<Vec<u8>>,
    /// Per-entry metadata (empty for none; IREE's tools write none).
    pub metadata: Vec<u8>,
    /// `Some(name)`: a DATA entry with no bytes of its own, reading the
    /// stored bytes of the earlier DATA entry `name`, from
    /// [`EntrySpec::shares_at`] on. IREE's parser takes entries over one
    /// storage range, or over part of one; a runtime that maps the archive
    /// then holds those bytes once.
    pub shares: Option<String>,
    /// Where a shared entry's bytes start in those of the entry it shares
    /// (0 for all of them).
    pub shares_at: u64,
}

impl EntrySpec {
    /// A DATA entry of `length` bytes.
    pub fn data(name: impl Into<String>, length: u64) -> Self {
        EntrySpec {
            name: name.into(),
            length,
            splat: None,
            metadata: Vec::new(),
            shares: None,
            shares_at: 0,
        }
    }

    /// A DATA entry of `length` bytes stored nowhere else: bytes
    /// `offset..offset + length` of the earlier DATA entry `of` (a row
    /// chunk of a table, readable as a whole entry); `offset` must be a
    /// multiple of the storage alignment (64). No bytes are streamed for
    /// it.
    pub fn part_of(
        name: impl Into<String>,
        of: impl Into<String>,
        offset: u64,
        length: u64,
    ) -> Self {
        EntrySpec {
            shares: Some(of.into()),
            shares_at: offset,
            ..EntrySpec::data(name, length)
        }
    }

    /// A DATA entry of `length` bytes stored nowhere else: it reads the
    /// bytes of the earlier DATA entry `of`, which has the same length (or
    /// more: then its first `length`). No bytes are streamed for it.
    pub fn shared(name: impl Into<String>, of: impl Into<String>, length: u64) -> Self {
        EntrySpec {
            shares: Some(of.into()),
            ..EntrySpec::data(name, length)
        }
    }

    /// A SPLAT entry of `length` bytes filled with `pattern`.
    pub fn splat(name: impl Into<String>, pattern: &[u8], length: u64) -> Self {
        EntrySpec {
            name: name.into(),
            length,
            splat: Some(pattern.to_vec()),
            metadata: Vec::new(),
            shares: None,
            shares_at: 0,
        }
    }

    /// Attaches metadata bytes.
    pub fn with_metadata(mut self, metadata: Vec<u8>) -> Self {
        self.metadata = metadata;
        self
    }
}

/// Streaming IRPA writer laid out exactly as IREE's builder does (see the
/// module docs and `spec/irpa.md`). Declare every entry up front, then
/// stream each DATA entry's bytes in declaration order (SPLAT entries need
/// none), then [`IrpaWriter::finish`], which pads to 4096 and renames the
/// file into place. Dropping the writer unfinished leaves no output.
pub struct IrpaWriter {
    stream: TensorStream,
    file_size: u64,
}

impl IrpaWriter {
    /// Lays out the archive, creates the temporary output and writes the
    /// header, entry table and metadata segment.
    pub fn new(path: impl AsRef<Path>, specs: Vec<EntrySpec>) -> Result<Self> {
        Self::create(path.as_ref(), specs, false)
    }

    /// Like [`IrpaWriter::new`], and also keeps a running sha256 of every
    /// byte written, returned by [`IrpaWriter::finish_written`] (no second
    /// pass over the file).
    pub fn new_hashed(path: impl AsRef<Path>, specs: Vec<EntrySpec>) -> Result<Self> {
        Self::create(path.as_ref(), specs, true)
    }

    /// Checks the specs, lays the archive out and writes everything before
    /// the storage segment.
    fn create(path: &Path, specs: Vec<EntrySpec>, hash: bool) -> Result<Self> {
        let err = FileErrors(path);
        check_specs(err, &specs)?;
        let layout = Layout::plan(err, &specs)?;
        let head = layout.head(&specs).map_err(|e| ParamsError::io(path, e))?;
        let slots = layout.slots(&specs);
        Ok(IrpaWriter {
            stream: TensorStream::create(path, &head, slots, hash)?,
            file_size: layout.file_size,
        })
    }
}

/// Refuses a repeated name, a splat pattern that cannot cover its entry
/// and a shared entry whose bytes are not within an earlier stored DATA
/// entry's.
fn check_specs(err: FileErrors, specs: &[EntrySpec]) -> Result<()> {
    let mut seen = HashSet::new();
    let mut stored: HashMap<&str, u64> = HashMap::new();
    for s in specs {
        if !seen.insert(s.name.as_str()) {
            return Err(err.duplicate_name(&s.name));
        }
        // A part starts on a DATA entry's alignment, as every entry does.
        let end = s.shares_at.checked_add(s.length);
        let fits = |stored_len: Option<&u64>| {
            s.shares_at % DATA_ALIGNMENT == 0
                && stored_len.is_some_and(|&n| end.is_some_and(|e| e <= n))
        };
        match (&s.shares, &s.splat) {
            (Some(of), None) if !fits(stored.get(of.as_str())) => {
                let msg = format!(
                    "shares {} bytes of \"{of}\" from byte {}, which is no earlier stored entry \
                     holding them from a multiple of {DATA_ALIGNMENT}",
                    s.length, s.shares_at
                );
                return Err(ParamsError::Write {
                    file: err.file(),
                    tensor: Some(s.name.clone()),
                    msg,
                });
            }
            (None, None) => {
                stored.insert(s.name.as_str(), s.length);
            }
            // A share of a stored entry, or a splat (checked below).
            _ => {}
        }
        if let Some(p) = &s.splat {
            if ![1, 2, 4, 8, 16].contains(&p.len()) || s.length % p.len() as u64 != 0 {
                let msg = format!(
                    "pattern of {} bytes cannot cover {} bytes",
                    p.len(),
                    s.length
                );
                return Err(err.invalid_splat(&s.name, msg));
            }
        }
    }
    Ok(())
}

/// Where each part of an archive goes, as IREE's builder places it.
struct Layout {
    /// File offset of the entry table.
    table_start: u64,
    /// File offset of each entry.
    entry_at: Vec<u64>,
    /// File offset of the metadata segment (the end of the entry table).
    meta_start: u64,
    /// Length of the metadata segment.
    meta_len: u64,
    /// File offset of the storage segment.
    storage_start: u64,
    /// Each DATA entry's offset in the storage segment (`None` for SPLAT).
    data_rel: Vec<Option<u64>>,
    /// Length of the storage segment.
    storage_len: u64,
    /// The file's size, padded to [`FILE_ALIGNMENT`].
    file_size: u64,
}

impl Layout {
    /// Places the entry table after the header, the metadata segment (name
    /// then metadata, per entry, unaligned) after the table, and the storage
    /// segment after that, aligned for the first DATA entry.
    fn plan(err: FileErrors, specs: &[EntrySpec]) -> Result<Layout> {
        let table_start = align_up(HEADER_SIZE, ENTRY_ALIGNMENT);
        let mut cursor = table_start;
        let mut entry_at = Vec::with_capacity(specs.len());
        for s in specs {
            let at = align_up(cursor, ENTRY_ALIGNMENT);
            entry_at.push(at);
            cursor = at
                + if s.splat.is_some() {
                    SPLAT_ENTRY_SIZE
                } else {
                    DATA_ENTRY_SIZE
                };
        }
        let meta_start = cursor;
        let mut meta_len = 0u64;
        for s in specs {
            meta_len = meta_len
                .checked_add(s.name.len() as u64 + s.metadata.len() as u64)
                .ok_or_else(|| err.overflow(None, "metadata segment"))?;
        }
        let meta_end = meta_start + meta_len;
        let has_data = specs.iter().any(|s| s.splat.is_none());
        let storage_start = align_up(meta_end, if has_data { DATA_ALIGNMENT } else { 1 });
        let (data_rel, storage_len) = storage_offsets(err, specs)?;
        let end = storage_start
            .checked_add(storage_len)
            .ok_or_else(|| err.overflow(None, "file size"))?;
        Ok(Layout {
            table_start,
            entry_at,
            meta_start,
            meta_len,
            storage_start,
            data_rel,
            storage_len,
            file_size: align_up(end, FILE_ALIGNMENT),
        })
    }

    /// Every byte before the storage segment: header, entry table (padded
    /// between entries) and metadata segment (padded after the table).
    /// (Writing to a `Vec` does not fail; the `io::Result` is
    /// `WriteBytesExt`'s.)
    fn head(&self, specs: &[EntrySpec]) -> std::io::Result<Vec<u8>> {
        let mut head = Vec::with_capacity(self.storage_start as usize);
        self.write_header(&mut head, specs.len() as u64)?;
        let mut name_off = 0u64;
        for (i, s) in specs.iter().enumerate() {
            head.resize(self.entry_at[i] as usize, 0);
            name_off = write_entry(&mut head, s, name_off, self.data_rel[i])?;
        }
        head.resize(self.meta_start as usize, 0);
        for s in specs {
            head.extend_from_slice(s.name.as_bytes());
            head.extend_from_slice(&s.metadata);
        }
        Ok(head)
    }

    /// The 88-byte header: magic, version 0.0, header size, no chained
    /// header, no flags, the entry count and the three segments.
    fn write_header(&self, head: &mut Vec<u8>, count: u64) -> std::io::Result<()> {
        head.write_u32::<LittleEndian>(MAGIC)?;
        head.write_u16::<LittleEndian>(0)?;
        head.write_u16::<LittleEndian>(0)?;
        for v in [
            HEADER_SIZE,
            0,
            0,
            count,
            self.table_start,
            self.meta_start - self.table_start,
            self.meta_start,
            self.meta_len,
            self.storage_start,
            self.storage_len,
        ] {
            head.write_u64::<LittleEndian>(v)?;
        }
        Ok(())
    }

    /// Where the writer streams each DATA entry's bytes, in order.
    fn slots(&self, specs: &[EntrySpec]) -> Vec<Slot> {
        specs
            .iter()
            .zip(&self.data_rel)
            .filter(|(s, _)| s.shares.is_none())
            .filter_map(|(s, r)| {
                r.map(|o| Slot {
                    name: s.name.clone(),
                    start: self.storage_start + o,
                    len: s.length,
                })
            })
            .collect()
    }
}

/// Each DATA entry's offset in the storage segment (`None` for a SPLAT
/// entry), each aligned to [`DATA_ALIGNMENT`], and the segment's length.
fn storage_offsets(err: FileErrors, specs: &[EntrySpec]) -> Result<(Vec<Option<u64>>, u64)> {
    let mut scur = 0u64;
    let mut data_rel = Vec::with_capacity(specs.len());
    let mut at_name: HashMap<&str, u64> = HashMap::new();
    for s in specs {
        if s.splat.is_some() {
            data_rel.push(None);
        } else if let Some(of) = &s.shares {
            // check_specs made sure `of` is an earlier stored entry that
            // holds the shared bytes.
            data_rel.push(at_name.get(of.as_str()).map(|at| at + s.shares_at));
        } else {
            at_name.insert(s.name.as_str(), align_up(scur, DATA_ALIGNMENT));
            let at = align_up(scur, DATA_ALIGNMENT);
            data_rel.push(Some(at));
            scur = at
                .checked_add(s.length)
                .ok_or_else(|| err.overflow(None, "storage segment"))?;
        }
    }
    Ok((data_rel, scur))
}

/// Appends the entry of `s` whose name starts `name_off` bytes into the
/// metadata segment (its metadata, if any, right after the name) and whose
/// data, for a DATA entry, starts `data_rel` bytes into the storage segment.
/// Returns where the next entry's name starts.
fn write_entry(
    head: &mut Vec<u8>,
    s: &EntrySpec,
    name_off: u64,
    data_rel: Option<u64>,
) -> std::io::Result<u64> {
    let mut mcur = name_off + s.name.len() as u64;
    let (meta_off, meta_n) = if s.metadata.is_empty() {
        (0, 0)
    } else {
        let o = mcur;
        mcur += s.metadata.len() as u64;
        (o, s.metadata.len() as u64)
    };
    let (size, ty, align) = match s.splat {
        Some(_) => (SPLAT_ENTRY_SIZE, 1u32, 0u64),
        None => (DATA_ENTRY_SIZE, 2u32, DATA_ALIGNMENT),
    };
    head.write_u64::<LittleEndian>(size)?;
    head.write_u32::<LittleEndian>(ty)?;
    head.write_u64::<LittleEndian>(0)?;
    for v in [name_off, s.name.len() as u64, meta_off, meta_n, align] {
        head.write_u64::<LittleEndian>(v)?;
    }
    match &s.splat {
        Some(p) => {
            head.write_u64::<LittleEndian>(s.length)?;
            let mut pat = [0u8; 16];
            pat[..p.len()].copy_from_slice(p);
            head.extend_from_slice(&pat);
            head.write_u8(p.len() as u8)?;
        }
        None => {
            head.write_u64::<LittleEndian>(data_rel.unwrap_or(0))?;
            head.write_u64::<LittleEndian>(s.length)?;
        }
    }
    Ok(mcur)
}

impl sealed::Streamed for IrpaWriter {
    fn stream(&mut self) -> &mut TensorStream {
        &mut self.stream
    }
    fn into_stream(self) -> (TensorStream, u64) {
        (self.stream, self.file_size)
    }
}

impl TensorWriter for IrpaWriter {}
