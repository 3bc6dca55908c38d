//! Parameter files: safetensors, IREE parameter archives (irpa) and GGUF.
//!
//! Every reader memory-maps its file, validates the whole structure up front
//! (so later accessors cannot fail on malformed input) and hands out
//! zero-copy views of tensor bytes. Writers take the full list of tensors
//! first, then stream each tensor's bytes in order, and only rename the
//! output into place once it is complete.
//!
//! | file | contents |
//! |---|---|
//! | `dtype.rs` | the element types ([`DType`], [`GgmlType`], [`SourceDType`]) and the conversions between them and the graph's |
//! | `convert.rs` | f32 ⇄ bf16/f16 conversions (round to nearest even); weights as stored bytes ([`DType::encode_weights`]) |
//! | [`safetensors`] | safetensors reader, sharded checkpoints, writer |
//! | [`irpa`] | IREE parameter archive reader and writer |
//! | [`gguf`] | GGUF reader |
//! | `quant.rs` | GGML block dequantization kernels ([`GgmlType::dequantize`]); kiln's i8 rows |
//! | `blocks.rs` | kiln's block form of the GGML types: [`GgmlType::quantize`], repacking, [`Recognized`] matrices |
//! | `source.rs` | a format-agnostic view over all three ([`ParamSource`], opened with `<dyn ParamSource>::open`) |
//! | `stream.rs` | the streaming, hashing, atomic core both writers share ([`TensorWriter`]) |
//! | `inspect.rs` | what one file holds ([`Inspection`], `kiln params inspect`) |
//! | `diff.rs` | two files compared tensor by tensor ([`Diff`], `kiln params diff`) |
//! | `merge.rs` | files converted and merged into one ([`Conversion`], `kiln params convert`) |

/// The two public constructors of a reader that validates a whole file in
/// `fn from_backing(path: &Path, bytes: Backing) -> Result<Self>`: `open`
/// memory-maps the file ([`map_file`]: its I/O errors name it) and
/// `from_bytes` takes bytes already in memory.
macro_rules! backed_constructors {
    () => {
        /// Memory-maps and validates `path`.
        pub fn open(path: impl AsRef<std::path::Path>) -> $crate::params::Result<Self> {
            let path = path.as_ref();
            Self::from_backing(path, $crate::params::map_file(path)?)
        }

        /// Validates bytes already in memory; `path` only labels errors.
        pub fn from_bytes(
            path: impl AsRef<std::path::Path>,
            bytes: Vec<u8>,
        ) -> $crate::params::Result<Self> {
            Self::from_backing(path.as_ref(), $crate::params::Backing::Vec(bytes))
        }
    };
}

pub(crate) mod blocks;
pub(crate) mod convert;
mod diff;
mod dtype;
mod error;
pub mod gguf;
mod inspect;
pub mod irpa;
mod merge;
pub(crate) mod quant;
pub mod safetensors;
mod source;
mod stream;

pub use blocks::Recognized;
pub use diff::{BlockChange, BlockDiff, Diff, Outcome, TensorDiff};
pub use dtype::{DType, GgmlType, SourceDType};
pub use error::ParamsError;
pub use inspect::{GgufHeader, Inspection, Int8Rows};
pub use merge::{Conversion, ConvertError, ConvertOptions};
pub use source::{Format, ParamSource, StorageKind, TensorMeta};
pub use stream::{TensorWriter, Written};

/// `Result` with [`ParamsError`].
pub(crate) type Result<T, E = ParamsError> = std::result::Result<T, E>;

use std::path::Path;

/// The bytes a reader parses: a read-only memory map, or an owned buffer
/// (for callers and fuzzers that already hold the bytes).
pub(crate) enum Backing {
    /// A memory-mapped file.
    Map(memmap2::Mmap),
    /// Bytes in memory.
    Vec(Vec<u8>),
}

impl std::ops::Deref for Backing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Backing::Map(m) => m,
            Backing::Vec(v) => v,
        }
    }
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Backing({} bytes)", self.len())
    }
}

/// Memory-maps a whole file read-only.
pub(crate) fn map_file(path: &Path) -> Result<Backing> {
    let file = std::fs::File::open(path).map_err(|e| ParamsError::io(path, e))?;
    // SAFETY: the map is read-only; kiln never writes to its inputs, and a
    // concurrent external truncation is the usual documented mmap caveat.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| ParamsError::io(path, e))?;
    Ok(Backing::Map(map))
}

/// Rounds `x` up to a multiple of `a` (a power of two or any non-zero value).
pub(crate) fn align_up(x: u64, a: u64) -> u64 {
    if a <= 1 {
        return x;
    }
    x.div_ceil(a) * a
}

/// Copies `len` bytes of `src` at `offset` to the end of `out` (flushed
/// first) with `std::io::copy` between files, which Linux turns into
/// `copy_file_range`: no page of the input enters the process.
pub(crate) fn kernel_copy(
    out: &mut std::io::BufWriter<crate::util::AtomicFile>,
    out_path: &Path,
    src: &std::fs::File,
    src_path: &Path,
    offset: u64,
    len: u64,
) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    out.flush().map_err(|e| ParamsError::io(out_path, e))?;
    let mut src = src;
    src.seek(SeekFrom::Start(offset))
        .map_err(|e| ParamsError::io(src_path, e))?;
    let mut take = src.take(len);
    let n =
        std::io::copy(&mut take, out.get_mut().file()).map_err(|e| ParamsError::io(out_path, e))?;
    if n != len {
        return Err(ParamsError::Truncated {
            file: src_path.to_path_buf(),
            tensor: None,
            what: format!("copy of [{offset}, +{len})"),
            needed: len,
            available: n,
        });
    }
    Ok(())
}
