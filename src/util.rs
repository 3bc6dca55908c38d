//! Small shared helpers: atomic output files, hashing, cache directories.
//!
//! Their only failure is an I/O error on a named path ([`IoError`]), which
//! each stage's error type takes in (`From`), so a helper never ties a stage
//! to the crate-wide error.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// An I/O operation on `path` failed.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct IoError {
    /// The file or directory involved.
    pub path: PathBuf,
    /// The underlying error.
    #[source]
    pub source: std::io::Error,
}

/// `Result` of the helpers.
pub type Result<T, E = IoError> = std::result::Result<T, E>;

impl IoError {
    /// Wraps `source` with the path it concerns.
    pub fn new(path: impl Into<PathBuf>, source: std::io::Error) -> IoError {
        IoError {
            path: path.into(),
            source,
        }
    }
}

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
            .map_err(|e| IoError::new(&dest, e))?;
        Ok(AtomicFile { tmp, dest })
    }

    /// The underlying file, for writing or memory-mapping.
    pub fn file(&mut self) -> &mut std::fs::File {
        self.tmp.as_file_mut()
    }

    /// Flushes, syncs nothing (speed over durability) and moves the file
    /// into place with [`persist`].
    pub fn commit(mut self) -> Result<PathBuf> {
        self.tmp.flush().map_err(|e| IoError::new(&self.dest, e))?;
        persist(self.tmp, &self.dest)?;
        Ok(self.dest)
    }
}

/// Gives the complete temporary file `tmp` the usual `0644` mode (temporary
/// files start private) and renames it to `dest`. A file already at `dest`
/// is replaced by [`replace_by_rename`] (moved aside into a fresh folder
/// beside it, deleted after), not renamed over: see there for why.
pub fn persist(tmp: tempfile::NamedTempFile, dest: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let perms = std::fs::Permissions::from_mode(0o644);
        std::fs::set_permissions(tmp.path(), perms).map_err(|e| IoError::new(dest, e))?;
    }
    let replaces = std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_file());
    if !replaces {
        tmp.persist(dest).map_err(|e| IoError::new(dest, e.error))?;
        return Ok(());
    }
    let aside = tempfile::Builder::new()
        .prefix(".kiln-old-")
        .tempdir_in(tmp.path().parent().unwrap_or(Path::new(".")))
        .map_err(|e| IoError::new(dest, e))?;
    // The temporary name is deleted on drop unless the rename took it.
    let tmp = tmp.into_temp_path();
    replace_by_rename(&tmp, dest, aside.path())?;
    let _ = tmp.keep();
    Ok(())
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
        .map_err(|e| IoError::new(dest.as_ref(), e))?;
    f.commit()
}

/// Moves the complete file `src` to `dst`, replacing what is there, by
/// renames only: a previous `dst` is first moved into `aside` (a directory
/// on the same file system, which the caller deletes), then `src` takes the
/// free name; if that fails the previous file is put back.
///
/// Why not one `rename(src, dst)`: on ext4 a rename that replaces an
/// existing file forces writeback of the new file's data first (the
/// `auto_da_alloc` heuristic), ≈ 90 ms per 270 MB archive here, so
/// re-exporting SmolLM2 into the same folder took 1.0 s instead of 0.65 s.
/// No reader ever sees a partial file either way; the name is absent only
/// between the two renames.
pub fn replace_by_rename(src: &Path, dst: &Path, aside: &Path) -> Result<()> {
    let prev = aside.join(dst.file_name().unwrap_or_default());
    let moved = match std::fs::rename(dst, &prev) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(IoError::new(dst, e)),
    };
    std::fs::rename(src, dst).map_err(|e| {
        if moved {
            let _ = std::fs::rename(&prev, dst);
        }
        IoError::new(dst, e)
    })
}

/// A staging directory `DIR/PREFIX<pid>-<random>` for files that are
/// renamed into `dir` once all of them are written. Staging directories of
/// this kind left by a process that no longer runs (killed mid-way) are
/// removed first, so they never pile up; `what` names `dir` in the error
/// when it is not writable.
pub fn staging_dir(dir: &Path, prefix: &str, what: &str) -> Result<tempfile::TempDir> {
    remove_stale_staging(dir, prefix);
    tempfile::Builder::new()
        .prefix(&format!("{prefix}{}-", std::process::id()))
        .tempdir_in(dir)
        .map_err(|e| {
            IoError::new(
                dir,
                std::io::Error::new(e.kind(), format!("{what} is not writable: {e}")),
            )
        })
}

/// Output files staged together: each is written into a staging directory
/// inside the output directory ([`staging_dir`]), and [`Staging::commit`]
/// renames them all into place, the manifest last, once every one is
/// complete. Dropped uncommitted, the staging directory goes with
/// everything in it, so a failed run leaves no partial output; one left by
/// a killed run is removed by the next.
pub struct Staging {
    out: PathBuf,
    dir: tempfile::TempDir,
}

impl Staging {
    /// Creates the output directory `out` when missing and a staging
    /// directory `out/PREFIX<pid>-<random>` in it; `what` names `out` in
    /// the errors (`cannot create WHAT: …`, `WHAT is not writable: …`).
    pub fn create(out: &Path, prefix: &str, what: &str) -> Result<Self> {
        std::fs::create_dir_all(out).map_err(|e| {
            IoError::new(
                out,
                std::io::Error::new(e.kind(), format!("cannot create {what}: {e}")),
            )
        })?;
        let dir = staging_dir(out, prefix, what)?;
        Ok(Staging {
            out: out.to_path_buf(),
            dir,
        })
    }

    /// Where the file `name` is staged.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Moves the staged `files`, in order, then `manifest` into the output
    /// directory with [`replace_by_rename`] (files already there are moved
    /// aside into the staging directory and deleted with it), and returns
    /// their final paths in that order.
    pub fn commit<S: AsRef<str>>(self, files: &[S], manifest: &str) -> Result<Vec<PathBuf>> {
        let aside = self.dir.path().join(".previous");
        std::fs::create_dir(&aside).map_err(|e| IoError::new(&aside, e))?;
        let mut written = Vec::new();
        for f in files.iter().map(AsRef::as_ref).chain([manifest]) {
            let dest = self.out.join(f);
            replace_by_rename(&self.path(f), &dest, &aside)?;
            written.push(dest);
        }
        Ok(written)
    }
}

/// Removes `dir/PREFIX<pid>-*` folders whose process is gone (Linux and
/// Android: no `/proc/<pid>`); best effort, errors ignored.
fn remove_stale_staging(dir: &Path, prefix: &str) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().filter(|p| p.parse::<u32>().is_ok()) else {
            continue;
        };
        if !proc.join(pid).exists() && e.path().is_dir() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Hex sha256 of a file's contents, streamed.
pub fn sha256_file(path: impl AsRef<Path>) -> Result<String> {
    let path = path.as_ref();
    let mut f = std::fs::File::open(path).map_err(|e| IoError::new(path, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| IoError::new(path, e))?;
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

#[cfg(test)]
mod replace_tests {
    use super::replace_by_rename;

    #[test]
    fn replaces_moves_the_previous_aside_and_restores_it_on_failure() {
        let d = tempfile::tempdir().unwrap();
        let (src, dst, aside) = (
            d.path().join("new"),
            d.path().join("out"),
            d.path().join("aside"),
        );
        std::fs::create_dir(&aside).unwrap();
        // No previous file: a plain move.
        std::fs::write(&src, b"one").unwrap();
        replace_by_rename(&src, &dst, &aside).unwrap();
        assert_eq!(std::fs::read(&dst).unwrap(), b"one");
        assert!(!src.exists());
        // A previous file: replaced, and the old one waits in `aside`.
        std::fs::write(&src, b"two").unwrap();
        replace_by_rename(&src, &dst, &aside).unwrap();
        assert_eq!(std::fs::read(&dst).unwrap(), b"two");
        assert_eq!(std::fs::read(aside.join("out")).unwrap(), b"one");
        // The new file cannot be moved (it is gone): an error naming the
        // destination, and the previous file is back in place.
        let e = replace_by_rename(&src, &dst, &aside)
            .unwrap_err()
            .to_string();
        assert!(e.contains("out"), "{e}");
        assert_eq!(std::fs::read(&dst).unwrap(), b"two");
    }
}

#[cfg(test)]
mod atomic_tests {
    use super::AtomicFile;
    use std::io::Write;

    fn names(d: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn commit_replaces_an_existing_file_and_leaves_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("w.irpa");
        let mut f = AtomicFile::create(&dest).unwrap();
        f.write_all(b"first").unwrap();
        f.commit().unwrap();
        // Replacing goes through a move-aside folder, removed afterwards.
        let mut f = AtomicFile::create(&dest).unwrap();
        f.write_all(b"second").unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"first", "not yet committed");
        f.commit().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"second");
        assert_eq!(names(d.path()), ["w.irpa"]);
        // Dropped uncommitted: the old file stays, the temporary goes.
        let mut f = AtomicFile::create(&dest).unwrap();
        f.write_all(b"third").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&dest).unwrap(), b"second");
        assert_eq!(names(d.path()), ["w.irpa"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dest).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o644);
        }
    }
}
