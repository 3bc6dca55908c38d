//! Crafted bad files (tests/attacks/, written by make_attacks.py): each is
//! rejected with an error naming the file and, where known, the tensor; the
//! CLI exits 2 and leaves no output. Plus a deterministic mutation sweep.

use crate::common;
use kiln::params::gguf::GgufFile;
use kiln::params::irpa::IrpaReader;
use kiln::params::safetensors::SafeTensors;
use kiln::params::{ParamSource, ParamsError};
use std::path::{Path, PathBuf};

fn attacks() -> PathBuf {
    crate::common::root().join("tests/attacks")
}

fn expected() -> Vec<(String, String, Option<String>)> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(attacks().join("expected.json")).unwrap()).unwrap();
    v.as_object()
        .unwrap()
        .iter()
        .map(|(k, e)| {
            (
                k.clone(),
                e["contains"].as_str().unwrap().to_string(),
                e["tensor"].as_str().map(str::to_string),
            )
        })
        .collect()
}

fn open_native(path: &Path) -> Result<(), ParamsError> {
    let dir = path
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    match dir {
        "safetensors" => SafeTensors::open(path).map(|_| ()),
        "irpa" => IrpaReader::open(path).map(|_| ()),
        "gguf" => GgufFile::open(path).map(|_| ()),
        _ => panic!("unknown attack dir {dir}"),
    }
}

#[test]
fn every_attack_is_rejected_with_a_precise_error() {
    let cases = expected();
    assert!(cases.len() >= 25, "at least 25 attack files");
    for (rel, contains, tensor) in cases {
        let path = attacks().join(&rel);
        let err = open_native(&path).expect_err(&rel);
        let msg = err.to_string();
        assert!(
            msg.contains(&path.display().to_string()),
            "{rel}: `{msg}` does not name the file"
        );
        assert!(msg.contains(&contains), "{rel}: `{msg}` lacks `{contains}`");
        assert_eq!(err.tensor(), tensor.as_deref(), "{rel}: `{msg}`");
        assert_eq!(err.file(), path);
        // The format-agnostic view rejects it too (empty files have no magic).
        let any = <dyn ParamSource>::open(&path)
            .err()
            .unwrap_or_else(|| panic!("{rel}: ParamSource::open accepted it"));
        assert!(any.to_string().contains(&path.display().to_string()));
    }
}

#[test]
fn cli_exits_2_and_leaves_no_output() {
    let out_dir = tempfile::tempdir().unwrap();
    for (rel, _, _) in expected() {
        let path = attacks().join(&rel);
        for out_name in ["out.irpa", "out.safetensors"] {
            let out = out_dir.path().join(out_name);
            let o = common::kiln_command()
                .args(["params", "convert"])
                .arg(&path)
                .arg("-o")
                .arg(&out)
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(2), "{rel}");
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert!(stderr.contains(&rel), "{rel}: {stderr}");
            assert!(
                std::fs::read_dir(out_dir.path()).unwrap().next().is_none(),
                "{rel}: output or temp file left behind"
            );
        }
        let o = common::kiln_command()
            .args(["params", "inspect"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{rel}");
    }
}

/// xorshift for reproducible mutations.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn mutate_all(name: &str, good: &[u8], open: &dyn Fn(Vec<u8>) -> bool) {
    assert!(open(good.to_vec()), "{name}: the seed file must be valid");
    // Every truncation.
    for n in 0..good.len() {
        let _ = open(good[..n].to_vec());
    }
    // Random byte edits, biased toward the header where the structure is.
    let mut rng = Rng(0x1234_5678_9abc_def1 ^ good.len() as u64);
    let head = good.len().min(512);
    for i in 0..3000 {
        let mut m = good.to_vec();
        for _ in 0..1 + rng.next() % 4 {
            let pos = if i % 2 == 0 {
                rng.next() as usize % head
            } else {
                rng.next() as usize % m.len()
            };
            m[pos] = match rng.next() % 4 {
                0 => 0xff,
                1 => 0,
                2 => m[pos] ^ (1 << (rng.next() % 8)),
                _ => rng.next() as u8,
            };
        }
        let _ = open(m);
    }
}

#[test]
fn thousands_of_mutations_never_panic() {
    let fx = crate::common::root().join("tests/fixtures/params");
    let g = std::fs::read(fx.join("gguf/q4_k.gguf")).unwrap();
    mutate_all("gguf", &g, &|b| {
        GgufFile::from_bytes("m.gguf", b)
            .map(|f| {
                for t in f.tensors() {
                    let _ = f.dequantize(t);
                }
            })
            .is_ok()
    });
    let g = std::fs::read(fx.join("gguf/metadata.gguf")).unwrap();
    mutate_all("gguf-meta", &g, &|b| {
        GgufFile::from_bytes("m.gguf", b).is_ok()
    });
    let st = std::fs::read(fx.join("tiny.safetensors")).unwrap();
    mutate_all("safetensors", &st, &|b| {
        SafeTensors::from_bytes("m.safetensors", b)
            .map(|f| {
                for t in f.tensors() {
                    let _ = t.to_f32();
                }
            })
            .is_ok()
    });
    let ir = std::fs::read(fx.join("tiny.irpa")).unwrap();
    mutate_all("irpa", &ir, &|b| {
        IrpaReader::from_bytes("m.irpa", b)
            .map(|r| {
                for e in r.entries() {
                    if e.len() < 1 << 20 {
                        assert_eq!(r.data(e).expand().unwrap().len() as u64, e.len());
                    }
                }
            })
            .is_ok()
    });
}
