//! Any bytes as a package's `NAME.manifest.json` (or an export's
//! `NAME.json`, by the first byte), in a folder with a small archive: verify
//! must return a report or an error, never panic, and never read a file
//! outside the folder (every name it opens passes `kiln::names`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, manifest)) = data.split_first() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary folder");
    let name = if kind & 1 == 0 { "t.manifest.json" } else { "t.json" };
    std::fs::write(dir.path().join(name), manifest).expect("write");
    std::fs::write(dir.path().join("t.irpa"), b"IRPA").expect("write");
    let Ok(tc) = kiln::iree::Toolchain::locate(None) else {
        return;
    };
    let _ = kiln::verify::verify(dir.path(), &tc, &kiln::verify::VerifyOptions::default());
});
