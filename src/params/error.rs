//! [`ParamsError`]: one variant per way a parameter file can be wrong.

use std::path::{Path, PathBuf};

/// Formats an optional tensor name as a message prefix.
fn tn(tensor: &Option<String>) -> String {
    match tensor {
        Some(t) => format!("tensor `{t}`: "),
        None => String::new(),
    }
}

/// A malformed or unsupported parameter file, or a failed write. Every
/// variant names the file and, where one is involved, the tensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParamsError {
    /// Opening, mapping, reading or writing the file failed.
    #[error("{}: {source}", .file.display())]
    Io {
        /// The file involved.
        file: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file starts with no known signature.
    #[error("{}: not a parameter file (no safetensors, IRPA or GGUF signature)", .file.display())]
    UnknownFormat {
        /// The file involved.
        file: PathBuf,
    },
    /// The file ends before a structure it declares.
    #[error("{}: {}truncated: {what} needs {needed} bytes but only {available} remain", .file.display(), tn(.tensor))]
    Truncated {
        /// The file involved.
        file: PathBuf,
        /// The tensor being read, when known.
        tensor: Option<String>,
        /// The structure that did not fit.
        what: String,
        /// Bytes the structure needs.
        needed: u64,
        /// Bytes left in the file (or segment).
        available: u64,
    },
    /// The magic number is wrong.
    #[error("{}: bad {format} magic", .file.display())]
    BadMagic {
        /// The file involved.
        file: PathBuf,
        /// The format that was expected.
        format: &'static str,
    },
    /// The format version is not one kiln reads.
    #[error("{}: unsupported {format} version {version}", .file.display())]
    UnsupportedVersion {
        /// The file involved.
        file: PathBuf,
        /// The format.
        format: &'static str,
        /// The version found.
        version: String,
    },
    /// A declared header length exceeds the cap.
    #[error("{}: header length {len} exceeds the limit of {max} bytes", .file.display())]
    HeaderTooLarge {
        /// The file involved.
        file: PathBuf,
        /// The declared length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A string is not valid UTF-8.
    #[error("{}: {}{what} is not valid UTF-8", .file.display(), tn(.tensor))]
    InvalidUtf8 {
        /// The file involved.
        file: PathBuf,
        /// The tensor involved, when known.
        tensor: Option<String>,
        /// Which string.
        what: String,
    },
    /// The JSON header does not parse.
    #[error("{}: invalid JSON header: {msg}", .file.display())]
    InvalidJson {
        /// The file involved.
        file: PathBuf,
        /// The parser's message.
        msg: String,
    },
    /// The header parses but has the wrong structure.
    #[error("{}: {}invalid header: {msg}", .file.display(), tn(.tensor))]
    InvalidHeader {
        /// The file involved.
        file: PathBuf,
        /// The tensor involved, when known.
        tensor: Option<String>,
        /// What is wrong.
        msg: String,
    },
    /// A tensor's dtype (or GGML type) is unknown or unsupported.
    #[error("{}: tensor `{tensor}`: unknown or unsupported dtype {dtype}", .file.display())]
    UnknownDType {
        /// The file involved.
        file: PathBuf,
        /// The tensor involved.
        tensor: String,
        /// The dtype as spelled in the file.
        dtype: String,
    },
    /// A size computation overflows 64 bits.
    #[error("{}: {}{what} overflows", .file.display(), tn(.tensor))]
    Overflow {
        /// The file involved.
        file: PathBuf,
        /// The tensor involved, when known.
        tensor: Option<String>,
        /// The quantity that overflows.
        what: String,
    },
    /// A tensor's byte span does not match its shape and dtype.
    #[error("{}: tensor `{tensor}`: shape and dtype need {expected} bytes but {actual} are stored", .file.display())]
    SizeMismatch {
        /// The file involved.
        file: PathBuf,
        /// The tensor involved.
        tensor: String,
        /// Bytes implied by shape × dtype.
        expected: u64,
        /// Bytes actually given.
        actual: u64,
    },
    /// Data offsets are out of range, overlapping or not contiguous.
    #[error("{}: {}bad data offsets: {msg}", .file.display(), tn(.tensor))]
    InvalidOffsets {
        /// The file involved.
        file: PathBuf,
        /// The tensor involved, when known.
        tensor: Option<String>,
        /// What is wrong.
        msg: String,
    },
    /// The data section does not end exactly at the end of the file.
    #[error("{}: tensor data ends at byte {data_end} but the file has {file_size} bytes", .file.display())]
    TrailingData {
        /// The file involved.
        file: PathBuf,
        /// Where the declared data ends.
        data_end: u64,
        /// The file's size.
        file_size: u64,
    },
    /// Two tensors (or entries) share a name.
    #[error("{}: duplicate tensor name `{tensor}`", .file.display())]
    DuplicateName {
        /// The file involved.
        file: PathBuf,
        /// The repeated name.
        tensor: String,
    },
    /// A count is larger than the file could possibly hold.
    #[error("{}: absurd {what} count {count} (at most {max} fit)", .file.display())]
    TooMany {
        /// The file involved.
        file: PathBuf,
        /// What is counted.
        what: String,
        /// The declared count.
        count: u64,
        /// The largest plausible count.
        max: u64,
    },
    /// An IRPA entry is malformed.
    #[error("{}: entry {index}: {}{msg}", .file.display(), tn(.tensor))]
    InvalidEntry {
        /// The file involved.
        file: PathBuf,
        /// The entry's name, when it could be read.
        tensor: Option<String>,
        /// The entry's index.
        index: u64,
        /// What is wrong.
        msg: String,
    },
    /// An IRPA entry has an unknown type.
    #[error("{}: entry {index}: unknown entry type {entry_type}", .file.display())]
    UnknownEntryType {
        /// The file involved.
        file: PathBuf,
        /// The entry's index.
        index: u64,
        /// The type found.
        entry_type: u32,
    },
    /// An IRPA entry refers to an external file (IREE's runtime refuses these).
    #[error("{}: tensor `{tensor}`: EXTERNAL entry (data in another file: {target}) is not supported", .file.display())]
    ExternalEntry {
        /// The file involved.
        file: PathBuf,
        /// The entry's name.
        tensor: String,
        /// The external path as stored, lossily decoded.
        target: String,
    },
    /// An IRPA SPLAT entry is malformed.
    #[error("{}: tensor `{tensor}`: bad splat: {msg}", .file.display())]
    InvalidSplat {
        /// The file involved.
        file: PathBuf,
        /// The entry's name.
        tensor: String,
        /// What is wrong.
        msg: String,
    },
    /// Tensor data is not aligned as the file requires.
    #[error("{}: tensor `{tensor}`: data at file offset {offset} is not aligned to {alignment}", .file.display())]
    Misaligned {
        /// The file involved.
        file: PathBuf,
        /// The tensor involved.
        tensor: String,
        /// The offset found.
        offset: u64,
        /// The alignment required.
        alignment: u64,
    },
    /// A GGUF metadata value (or safetensors `__metadata__`) is malformed.
    #[error("{}: metadata `{key}`: {msg}", .file.display())]
    InvalidMetadata {
        /// The file involved.
        file: PathBuf,
        /// The metadata key.
        key: String,
        /// What is wrong.
        msg: String,
    },
    /// A tensor cannot be converted as asked.
    #[error("{}: tensor `{tensor}`: {msg}", .file.display())]
    Unsupported {
        /// The file involved.
        file: PathBuf,
        /// The tensor involved.
        tensor: String,
        /// What is not supported.
        msg: String,
    },
    /// An IRPA entry stored as plain bytes, without the dtype and shape
    /// description that would let it be read as numbers.
    #[error("{}: tensor `{tensor}`: entry has no dtype description", .file.display())]
    Undescribed {
        /// The file involved.
        file: PathBuf,
        /// The tensor involved.
        tensor: String,
    },
    /// No tensor of that name.
    #[error("{}: no tensor named `{tensor}`", .file.display())]
    NotFound {
        /// The file involved.
        file: PathBuf,
        /// The requested name.
        tensor: String,
    },
    /// A writer was used incorrectly (wrong order, wrong byte count).
    #[error("{}: {}{msg}", .file.display(), tn(.tensor))]
    Write {
        /// The output file.
        file: PathBuf,
        /// The tensor involved, when known.
        tensor: Option<String>,
        /// What went wrong.
        msg: String,
    },
}

/// Builds the errors of one file: every constructor fills in the path, so
/// a parser's error sites say only what went wrong (and with which tensor).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileErrors<'a>(pub(crate) &'a Path);

impl FileErrors<'_> {
    /// The file, owned.
    pub(crate) fn file(self) -> PathBuf {
        self.0.to_path_buf()
    }

    /// [`ParamsError::Truncated`].
    pub(crate) fn truncated(
        self,
        tensor: Option<&str>,
        what: impl Into<String>,
        needed: u64,
        available: u64,
    ) -> ParamsError {
        ParamsError::Truncated {
            file: self.file(),
            tensor: tensor.map(str::to_string),
            what: what.into(),
            needed,
            available,
        }
    }

    /// [`ParamsError::BadMagic`].
    pub(crate) fn bad_magic(self, format: &'static str) -> ParamsError {
        ParamsError::BadMagic {
            file: self.file(),
            format,
        }
    }

    /// [`ParamsError::UnsupportedVersion`].
    pub(crate) fn unsupported_version(self, format: &'static str, version: String) -> ParamsError {
        ParamsError::UnsupportedVersion {
            file: self.file(),
            format,
            version,
        }
    }

    /// [`ParamsError::HeaderTooLarge`].
    pub(crate) fn header_too_large(self, len: u64, max: u64) -> ParamsError {
        ParamsError::HeaderTooLarge {
            file: self.file(),
            len,
            max,
        }
    }

    /// [`ParamsError::InvalidUtf8`].
    pub(crate) fn invalid_utf8(self, tensor: Option<&str>, what: impl Into<String>) -> ParamsError {
        ParamsError::InvalidUtf8 {
            file: self.file(),
            tensor: tensor.map(str::to_string),
            what: what.into(),
        }
    }

    /// [`ParamsError::InvalidJson`].
    pub(crate) fn invalid_json(self, msg: impl Into<String>) -> ParamsError {
        ParamsError::InvalidJson {
            file: self.file(),
            msg: msg.into(),
        }
    }

    /// [`ParamsError::InvalidHeader`].
    pub(crate) fn invalid_header(
        self,
        tensor: Option<&str>,
        msg: impl Into<String>,
    ) -> ParamsError {
        ParamsError::InvalidHeader {
            file: self.file(),
            tensor: tensor.map(str::to_string),
            msg: msg.into(),
        }
    }

    /// [`ParamsError::UnknownDType`].
    pub(crate) fn unknown_dtype(self, tensor: &str, dtype: impl Into<String>) -> ParamsError {
        ParamsError::UnknownDType {
            file: self.file(),
            tensor: tensor.to_string(),
            dtype: dtype.into(),
        }
    }

    /// [`ParamsError::Overflow`].
    pub(crate) fn overflow(self, tensor: Option<&str>, what: impl Into<String>) -> ParamsError {
        ParamsError::Overflow {
            file: self.file(),
            tensor: tensor.map(str::to_string),
            what: what.into(),
        }
    }

    /// [`ParamsError::SizeMismatch`].
    pub(crate) fn size_mismatch(self, tensor: &str, expected: u64, actual: u64) -> ParamsError {
        ParamsError::SizeMismatch {
            file: self.file(),
            tensor: tensor.to_string(),
            expected,
            actual,
        }
    }

    /// [`ParamsError::InvalidOffsets`].
    pub(crate) fn invalid_offsets(
        self,
        tensor: Option<&str>,
        msg: impl Into<String>,
    ) -> ParamsError {
        ParamsError::InvalidOffsets {
            file: self.file(),
            tensor: tensor.map(str::to_string),
            msg: msg.into(),
        }
    }

    /// [`ParamsError::TrailingData`].
    pub(crate) fn trailing_data(self, data_end: u64, file_size: u64) -> ParamsError {
        ParamsError::TrailingData {
            file: self.file(),
            data_end,
            file_size,
        }
    }

    /// [`ParamsError::DuplicateName`].
    pub(crate) fn duplicate_name(self, tensor: &str) -> ParamsError {
        ParamsError::DuplicateName {
            file: self.file(),
            tensor: tensor.to_string(),
        }
    }

    /// [`ParamsError::TooMany`].
    pub(crate) fn too_many(self, what: impl Into<String>, count: u64, max: u64) -> ParamsError {
        ParamsError::TooMany {
            file: self.file(),
            what: what.into(),
            count,
            max,
        }
    }

    /// [`ParamsError::InvalidEntry`].
    pub(crate) fn invalid_entry(
        self,
        index: u64,
        tensor: Option<&str>,
        msg: impl Into<String>,
    ) -> ParamsError {
        ParamsError::InvalidEntry {
            file: self.file(),
            tensor: tensor.map(str::to_string),
            index,
            msg: msg.into(),
        }
    }

    /// [`ParamsError::UnknownEntryType`].
    pub(crate) fn unknown_entry_type(self, index: u64, entry_type: u32) -> ParamsError {
        ParamsError::UnknownEntryType {
            file: self.file(),
            index,
            entry_type,
        }
    }

    /// [`ParamsError::ExternalEntry`].
    pub(crate) fn external_entry(self, tensor: &str, target: String) -> ParamsError {
        ParamsError::ExternalEntry {
            file: self.file(),
            tensor: tensor.to_string(),
            target,
        }
    }

    /// [`ParamsError::InvalidSplat`].
    pub(crate) fn invalid_splat(self, tensor: &str, msg: impl Into<String>) -> ParamsError {
        ParamsError::InvalidSplat {
            file: self.file(),
            tensor: tensor.to_string(),
            msg: msg.into(),
        }
    }

    /// [`ParamsError::Misaligned`].
    pub(crate) fn misaligned(self, tensor: &str, offset: u64, alignment: u64) -> ParamsError {
        ParamsError::Misaligned {
            file: self.file(),
            tensor: tensor.to_string(),
            offset,
            alignment,
        }
    }

    /// [`ParamsError::InvalidMetadata`].
    pub(crate) fn invalid_metadata(self, key: &str, msg: impl Into<String>) -> ParamsError {
        ParamsError::InvalidMetadata {
            file: self.file(),
            key: key.to_string(),
            msg: msg.into(),
        }
    }

    /// [`ParamsError::NotFound`].
    pub(crate) fn not_found(self, tensor: &str) -> ParamsError {
        ParamsError::NotFound {
            file: self.file(),
            tensor: tensor.to_string(),
        }
    }
}

impl From<crate::util::IoError> for ParamsError {
    fn from(e: crate::util::IoError) -> Self {
        ParamsError::Io {
            file: e.path,
            source: e.source,
        }
    }
}

impl ParamsError {
    /// Wraps an I/O error with its path.
    pub fn io(file: impl AsRef<Path>, source: std::io::Error) -> Self {
        ParamsError::Io {
            file: file.as_ref().to_path_buf(),
            source,
        }
    }

    /// The file the error is about.
    pub fn file(&self) -> &Path {
        use ParamsError::*;
        match self {
            Io { file, .. }
            | UnknownFormat { file }
            | Truncated { file, .. }
            | BadMagic { file, .. }
            | UnsupportedVersion { file, .. }
            | HeaderTooLarge { file, .. }
            | InvalidUtf8 { file, .. }
            | InvalidJson { file, .. }
            | InvalidHeader { file, .. }
            | UnknownDType { file, .. }
            | Overflow { file, .. }
            | SizeMismatch { file, .. }
            | InvalidOffsets { file, .. }
            | TrailingData { file, .. }
            | DuplicateName { file, .. }
            | TooMany { file, .. }
            | InvalidEntry { file, .. }
            | UnknownEntryType { file, .. }
            | ExternalEntry { file, .. }
            | InvalidSplat { file, .. }
            | Misaligned { file, .. }
            | InvalidMetadata { file, .. }
            | Unsupported { file, .. }
            | Undescribed { file, .. }
            | NotFound { file, .. }
            | Write { file, .. } => file,
        }
    }

    /// The tensor the error is about, when known.
    pub fn tensor(&self) -> Option<&str> {
        use ParamsError::*;
        match self {
            Truncated { tensor, .. }
            | InvalidUtf8 { tensor, .. }
            | InvalidHeader { tensor, .. }
            | Overflow { tensor, .. }
            | InvalidOffsets { tensor, .. }
            | InvalidEntry { tensor, .. }
            | Write { tensor, .. } => tensor.as_deref(),
            UnknownDType { tensor, .. }
            | SizeMismatch { tensor, .. }
            | DuplicateName { tensor, .. }
            | ExternalEntry { tensor, .. }
            | InvalidSplat { tensor, .. }
            | Misaligned { tensor, .. }
            | Unsupported { tensor, .. }
            | Undescribed { tensor, .. }
            | NotFound { tensor, .. } => Some(tensor),
            _ => None,
        }
    }
}
