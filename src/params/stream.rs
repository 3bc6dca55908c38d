//! The streaming core both parameter writers share: a temporary output
//! file that receives a fixed header, then the bytes of each declared
//! tensor in order (zero-padded up to each tensor's absolute offset), with
//! per-tensor byte accounting, an optional running sha256 of everything
//! written, and an atomic rename once the file is complete.
//!
//! [`super::safetensors::SafetensorsWriter`] and [`super::irpa::IrpaWriter`]
//! only lay out their header and slots; every byte goes through here, and
//! both stream their tensors through the one [`TensorWriter`] interface.

use super::{ParamsError, Result};
use crate::util::AtomicFile;
use sha2::{Digest, Sha256};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// One tensor whose bytes are streamed: its name, the absolute file offset
/// its bytes start at, and their length.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub name: String,
    pub start: u64,
    pub len: u64,
}

/// A finished output file: where it is, its size, and its sha256 when the
/// writer was asked to hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The final path.
    pub path: PathBuf,
    /// File size in bytes.
    pub bytes: u64,
    /// Lower-case hex sha256 of the whole file, when hashing was enabled.
    pub sha256: Option<String>,
}

const ZEROS: [u8; 4096] = [0; 4096];

/// See the module docs. Public only in name (its module is private), so
/// that [`TensorWriter`] can be built on it; nothing outside kiln can make one.
pub struct TensorStream {
    path: PathBuf,
    out: BufWriter<AtomicFile>,
    hasher: Option<Sha256>,
    pos: u64,
    slots: Vec<Slot>,
    next: usize,
    /// Bytes written so far for the open tensor.
    open: Option<u64>,
}

impl TensorStream {
    /// Creates the temporary output beside `path` and writes `head`.
    pub(crate) fn create(path: &Path, head: &[u8], slots: Vec<Slot>, hash: bool) -> Result<Self> {
        let file = AtomicFile::create(path)?;
        let mut s = TensorStream {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, file),
            hasher: hash.then(Sha256::new),
            pos: 0,
            slots,
            next: 0,
            open: None,
        };
        s.put(head)?;
        Ok(s)
    }

    fn err(&self, tensor: Option<&str>, msg: String) -> ParamsError {
        ParamsError::Write {
            file: self.path.clone(),
            tensor: tensor.map(str::to_string),
            msg,
        }
    }

    /// Writes (and hashes) raw bytes at the current position.
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| ParamsError::io(&self.path, e))?;
        if let Some(h) = &mut self.hasher {
            h.update(bytes);
        }
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn pad_to(&mut self, target: u64) -> Result<()> {
        while self.pos < target {
            let n = (target - self.pos).min(ZEROS.len() as u64) as usize;
            self.put(&ZEROS[..n])?;
        }
        Ok(())
    }

    /// Starts the bytes of `name`, which must be the next declared slot.
    pub fn begin(&mut self, name: &str) -> Result<()> {
        if self.open.is_some() {
            return Err(self.err(Some(name), "previous tensor not ended".into()));
        }
        let Some(slot) = self.slots.get(self.next) else {
            return Err(self.err(Some(name), "not declared, or written twice".into()));
        };
        if slot.name != name {
            let next = slot.name.clone();
            return Err(self.err(
                Some(name),
                format!("written out of order: `{next}` comes next"),
            ));
        }
        let start = slot.start;
        self.pad_to(start)?;
        self.open = Some(0);
        Ok(())
    }

    /// Checks that `add` more bytes fit the open tensor; returns the new count.
    fn grow(&self, what: &str, add: u64) -> Result<u64> {
        let Some(done) = self.open else {
            return Err(self.err(None, format!("{what} without begin_tensor")));
        };
        let slot = &self.slots[self.next];
        let total = done + add;
        if total > slot.len {
            return Err(self.err(
                Some(&slot.name),
                format!("{total} bytes written, {} declared", slot.len),
            ));
        }
        Ok(total)
    }

    /// Appends bytes to the open tensor.
    pub fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        let total = self.grow("write_chunk", bytes.len() as u64)?;
        self.put(bytes)?;
        self.open = Some(total);
        Ok(())
    }

    /// Appends `len` bytes of `src` at `offset` to the open tensor. Without
    /// hashing the kernel copies them (`copy_file_range` on Linux) and no
    /// page of the input enters the process; with hashing they pass
    /// through a 1 MiB buffer so the digest sees them.
    pub fn copy_from(
        &mut self,
        src: &std::fs::File,
        src_path: &Path,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let total = self.grow("copy_chunk_from", len)?;
        if self.hasher.is_none() {
            super::kernel_copy(&mut self.out, &self.path, src, src_path, offset, len)?;
            self.pos += len;
        } else {
            let mut buf = vec![0u8; (1usize << 20).min(len as usize)];
            let mut done = 0u64;
            while done < len {
                let n = buf.len().min((len - done) as usize);
                read_exact_at(src, &mut buf[..n], offset + done).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        ParamsError::Truncated {
                            file: src_path.to_path_buf(),
                            tensor: None,
                            what: format!("copy of [{offset}, +{len})"),
                            needed: len,
                            available: done,
                        }
                    } else {
                        ParamsError::io(src_path, e)
                    }
                })?;
                self.put(&buf[..n])?;
                done += n as u64;
            }
        }
        self.open = Some(total);
        Ok(())
    }

    /// Closes the open tensor, checking its byte count.
    pub fn end(&mut self) -> Result<()> {
        let Some(done) = self.open.take() else {
            return Err(self.err(None, "end_tensor without begin_tensor".into()));
        };
        let slot = &self.slots[self.next];
        if done != slot.len {
            return Err(self.err(
                Some(&slot.name),
                format!("{done} bytes written, {} declared", slot.len),
            ));
        }
        self.next += 1;
        Ok(())
    }

    /// Checks every slot was written, zero-pads to `size`, gives the file
    /// mode 0644 and renames it into place.
    pub fn finish(mut self, size: u64) -> Result<Written> {
        if self.open.is_some() || self.next != self.slots.len() {
            let missing = self.slots.get(self.next).map(|s| s.name.clone());
            return Err(self.err(missing.as_deref(), "tensor never written".into()));
        }
        self.pad_to(size)?;
        let path = self.path.clone();
        let file = self
            .out
            .into_inner()
            .map_err(|e| ParamsError::io(&path, e.into_error()))?;
        let path = file.commit()?;
        Ok(Written {
            path,
            bytes: self.pos,
            sha256: self.hasher.map(|h| crate::util::hex(&h.finalize())),
        })
    }
}

#[cfg(unix)]
fn read_exact_at(f: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(f: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = f;
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(buf)
}

/// Keeps [`TensorWriter`] implemented only by kiln's writers, over their
/// [`TensorStream`].
pub(crate) mod sealed {
    /// A writer built on a [`super::TensorStream`].
    pub trait Streamed {
        /// The stream every byte goes through.
        fn stream(&mut self) -> &mut super::TensorStream;
        /// The stream and the file size to pad to at the end.
        fn into_stream(self) -> (super::TensorStream, u64);
    }
}

/// Streaming writes shared by [`super::safetensors::SafetensorsWriter`] and
/// [`super::irpa::IrpaWriter`]: declare every tensor up front (the
/// writer's `new`), then stream each tensor's bytes in declaration order,
/// then finish, which renames the complete file into place. Dropping a
/// writer unfinished leaves no output.
pub trait TensorWriter: sealed::Streamed + Sized {
    /// Starts the bytes of `name`, which must be the next declared tensor.
    fn begin_tensor(&mut self, name: &str) -> Result<()> {
        self.stream().begin(name)
    }

    /// Appends bytes to the open tensor.
    fn write_chunk(&mut self, bytes: &[u8]) -> Result<()> {
        self.stream().chunk(bytes)
    }

    /// Appends `len` bytes of `src`, starting at `offset`, to the open
    /// tensor, copied by the kernel (`copy_file_range` on Linux) without
    /// passing through user space unless the writer hashes.
    fn copy_chunk_from(
        &mut self,
        src: &std::fs::File,
        src_path: &Path,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        self.stream().copy_from(src, src_path, offset, len)
    }

    /// Closes the open tensor, checking its byte count against its declaration.
    fn end_tensor(&mut self) -> Result<()> {
        self.stream().end()
    }

    /// Writes a whole tensor (the next declared one).
    fn write_tensor(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        self.begin_tensor(name)?;
        self.write_chunk(bytes)?;
        self.end_tensor()
    }

    /// Checks every tensor was written, pads the file to its size and
    /// renames it into place.
    fn finish(self) -> Result<PathBuf> {
        Ok(self.finish_written()?.path)
    }

    /// [`TensorWriter::finish`], returning the size and (when the writer
    /// was created hashing) the sha256 too.
    fn finish_written(self) -> Result<Written> {
        let (stream, size) = self.into_stream();
        stream.finish(size)
    }
}
