//! The one check of a file name read from a manifest: it must name a file
//! directly inside the manifest's folder. Written once, std only (no other
//! kiln module), so that every reader of a manifest (`kiln verify`, `kiln
//! run`/`generate`/`chat`, `kiln package`, a runtime) shares it; a name is
//! checked before any file is opened under it.

use std::path::{Path, PathBuf};

/// Why a manifest's file name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameFault {
    /// Empty.
    Empty,
    /// `.` or `..`.
    Dots,
    /// Holds a path separator (`/` or `\`), so also any absolute path.
    Separator,
    /// Holds a NUL or another control character.
    Control,
    /// A symbolic link whose target is not a file directly in the folder.
    LinkOutside,
}

impl std::fmt::Display for NameFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameFault::Empty => "is empty",
            NameFault::Dots => "is `.` or `..`",
            NameFault::Separator => "is not a plain file name (it holds a path separator)",
            NameFault::Control => "holds a control character",
            NameFault::LinkOutside => "is a symbolic link that leaves the folder",
        })
    }
}

impl std::error::Error for NameFault {}

/// Whether `name` is a plain file name: not empty, not `.` or `..`, no
/// `/` or `\` (so not absolute and no parent step), no control character.
/// Reads no file.
pub fn plain_name(name: &str) -> Result<(), NameFault> {
    if name.is_empty() {
        return Err(NameFault::Empty);
    }
    if name == "." || name == ".." {
        return Err(NameFault::Dots);
    }
    if name.contains(['/', '\\']) {
        return Err(NameFault::Separator);
    }
    if name.chars().any(char::is_control) {
        return Err(NameFault::Control);
    }
    Ok(())
}

/// The path of the file `name` in `dir`, when `name` is a plain file name
/// ([`plain_name`]) and, when `dir/name` is a symbolic link, its target is
/// a file directly in `dir` too. Opens no file: the link check reads the
/// link itself (`lstat`, `readlink`), never what it points at outside.
/// A missing file passes (the caller reports it as missing).
pub fn file_in_folder(dir: &Path, name: &str) -> Result<PathBuf, NameFault> {
    plain_name(name)?;
    let path = dir.join(name);
    let is_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link {
        let inside = match (std::fs::canonicalize(dir), std::fs::canonicalize(&path)) {
            (Ok(d), Ok(target)) => target.parent() == Some(d.as_path()),
            // A dangling link, or a folder that cannot be resolved.
            _ => false,
        };
        if !inside {
            return Err(NameFault::LinkOutside);
        }
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_everything_but_a_plain_name_in_the_folder() {
        for bad in [
            "",
            ".",
            "..",
            "/etc/passwd",
            "../x",
            "a/b",
            "..\\x",
            "C:\\x",
            "a\0b",
            "a\nb",
        ] {
            assert!(plain_name(bad).is_err(), "{bad:?}");
        }
        for good in ["t.irpa", "t-arm64-v8a.vmfb", "..t", "a..b", ".hidden"] {
            assert_eq!(plain_name(good), Ok(()), "{good:?}");
        }
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("in"), b"x").unwrap();
        let outside = tempfile::NamedTempFile::new().unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(outside.path(), d.path().join("out")).unwrap();
            std::os::unix::fs::symlink("in", d.path().join("ok")).unwrap();
            std::os::unix::fs::symlink("nowhere", d.path().join("dangling")).unwrap();
            assert_eq!(file_in_folder(d.path(), "out"), Err(NameFault::LinkOutside));
            assert_eq!(
                file_in_folder(d.path(), "dangling"),
                Err(NameFault::LinkOutside)
            );
            assert!(file_in_folder(d.path(), "ok").is_ok());
        }
        assert_eq!(file_in_folder(d.path(), "in"), Ok(d.path().join("in")));
        assert_eq!(
            file_in_folder(d.path(), "missing"),
            Ok(d.path().join("missing"))
        );
        assert_eq!(file_in_folder(d.path(), "../in"), Err(NameFault::Separator));
    }
}
