//! Small shared helpers: atomic output files, hashing, cache directories.

use crate::{Error, Result};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// An output file that only appears under its final name once it is
/// complete: bytes go to a temporary file in the same directory, and
/// [`AtomicFile::commit`] renames it into place. Dropping it uncommitted
/// removes the temporary file, so a failed run leaves no partial output.
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
    dest: PathBuf,
}

impl AtomicFile {
    /// Creates the temporary file beside `dest`.
    pub fn create(dest: impl AsRef<Path>) -> Result<Self> {
        let dest = dest.as_ref().to_path_buf();
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let tmp = tempfile::Builder::new()
            .prefix(".kiln-tmp-")
            .tempfile_in(&dir)
            .map_err(|e| Error::io(&dest, e))?;
        Ok(AtomicFile { tmp, dest })
    }

    /// The final path this file will have.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// The underlying file, for writing or memory-mapping.
    pub fn file(&mut self) -> &mut std::fs::File {
        self.tmp.as_file_mut()
    }

    /// Flushes, syncs nothing (speed over durability), gives the file the
    /// usual `0644` mode (temporary files start private) and renames it
    /// into place.
    pub fn commit(mut self) -> Result<PathBuf> {
        self.tmp.flush().map_err(|e| Error::io(&self.dest, e))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let perms = std::fs::Permissions::from_mode(0o644);
            std::fs::set_permissions(self.tmp.path(), perms)
                .map_err(|e| Error::io(&self.dest, e))?;
        }
        let dest = self.dest.clone();
        self.tmp
            .persist(&dest)
            .map_err(|e| Error::io(&dest, e.error))?;
        Ok(dest)
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tmp.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.tmp.write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.tmp.flush()
    }
}

/// Writes `bytes` to `dest` atomically (temp file + rename).
pub fn write_atomic(dest: impl AsRef<Path>, bytes: &[u8]) -> Result<PathBuf> {
    let mut f = AtomicFile::create(dest.as_ref())?;
    f.write_all(bytes)
        .map_err(|e| Error::io(dest.as_ref(), e))?;
    f.commit()
}

/// Hex sha256 of a file's contents, streamed.
pub fn sha256_file(path: impl AsRef<Path>) -> Result<String> {
    let path = path.as_ref();
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Hex sha256 of bytes in memory.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// kiln's cache directory: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`,
/// else `~/.cache/kiln`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KILN_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("kiln");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".cache").join("kiln")
}
