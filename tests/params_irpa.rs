//! IRPA writer byte-identity against the real `iree-convert-parameters`,
//! reader checks against IREE-written archives and `iree-dump-parameters`.

use crate::common;
use kiln::params::irpa::{EntryKind, EntrySpec, IrpaData, IrpaReader, IrpaWriter};
use kiln::params::safetensors::{SafeTensors, SafetensorsWriter, TensorSpec};
use kiln::params::DType;
use kiln::params::TensorWriter;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An IREE parameter tool of the toolchain `tests/common` finds, or
/// `None` (a skip, or a failure when required).
fn iree_tool(name: &str) -> Option<PathBuf> {
    common::iree_tool(name, |tc| match name {
        "iree-convert-parameters" => tc.convert_parameters.clone(),
        "iree-dump-parameters" => tc.dump_parameters.clone(),
        other => panic!("no such tool in the toolchain: {other}"),
    })
}

/// Deterministic pseudo-random bytes.
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn write_st(path: &Path, tensors: &[(String, DType, Vec<u64>)]) {
    let specs: Vec<TensorSpec> = tensors
        .iter()
        .map(|(n, d, s)| TensorSpec::new(n, *d, s))
        .collect();
    let mut w = SafetensorsWriter::new(path, &specs, &[]).unwrap();
    for (i, s) in specs.iter().enumerate() {
        let n = s.shape.iter().product::<u64>() as usize * s.dtype.size();
        w.write_tensor(&s.name, &bytes(i as u64 + 1, n)).unwrap();
    }
    w.finish().unwrap();
}

/// kiln's default IRPA for a safetensors file: one DATA entry per tensor, file order.
fn kiln_irpa(st: &Path, out: &Path) {
    let f = SafeTensors::open(st).unwrap();
    let specs = f
        .tensors()
        .map(|t| EntrySpec::data(t.name, t.data.len() as u64))
        .collect();
    let mut w = IrpaWriter::new(out, specs).unwrap();
    for t in f.tensors() {
        w.write_tensor(t.name, t.data).unwrap();
    }
    w.finish().unwrap();
}

fn iree_convert(tool: &Path, args: &[String], out: &Path) {
    let st = Command::new(tool)
        .args(args)
        .arg(format!("--output={}", out.display()))
        .arg("--quiet")
        .status()
        .unwrap();
    assert!(st.success(), "iree-convert-parameters failed");
}

/// (name, dtype, shape) of each tensor of a test file.
type Tensors = Vec<(String, DType, Vec<u64>)>;

fn cases() -> Vec<(&'static str, Tensors)> {
    let mut many = Vec::new();
    for i in 0..300u64 {
        let dt = [
            DType::F32,
            DType::BF16,
            DType::F16,
            DType::I8,
            DType::U8,
            DType::I64,
        ][i as usize % 6];
        let shape = match i % 5 {
            0 => vec![i % 7 + 1, 3],
            1 => vec![17],
            2 => vec![0, 4],
            3 => vec![2, 3, (i % 11) + 1],
            _ => vec![],
        };
        many.push((format!("blk.{}.w{}", i / 10, i % 10), dt, shape));
    }
    vec![
        (
            "small",
            vec![
                ("emb".into(), DType::BF16, vec![5]),
                ("w".into(), DType::F32, vec![2, 3]),
                ("b".into(), DType::F32, vec![3]),
            ],
        ),
        ("empty", vec![]),
        (
            "odd",
            vec![
                ("zero".into(), DType::F32, vec![0]),
                ("x".into(), DType::U8, vec![3]),
                (
                    "long.name.with.ünïcode/and spaces".into(),
                    DType::F64,
                    vec![9, 1],
                ),
                ("big".into(), DType::BF16, vec![257, 131]),
                ("zero.last".into(), DType::F16, vec![4, 0]),
            ],
        ),
        ("many", many),
    ]
}

#[test]
fn writer_is_byte_identical_to_iree_convert_parameters() {
    let Some(tool) = iree_tool("iree-convert-parameters") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (name, tensors) in cases() {
        let st = dir.path().join(format!("{name}.safetensors"));
        write_st(&st, &tensors);
        let want = dir.path().join(format!("{name}.iree.irpa"));
        iree_convert(&tool, &[format!("--parameters={}", st.display())], &want);
        let got = dir.path().join(format!("{name}.kiln.irpa"));
        kiln_irpa(&st, &got);
        let (w, g) = (std::fs::read(&want).unwrap(), std::fs::read(&got).unwrap());
        assert_eq!(w.len(), g.len(), "{name}: sizes differ");
        if let Some(i) = w.iter().zip(&g).position(|(a, b)| a != b) {
            panic!("{name}: first differing byte at {i}");
        }
        // And through the CLI.
        let cli = dir.path().join(format!("{name}.cli.irpa"));
        let out = common::kiln_command()
            .args(["params", "convert"])
            .arg(&st)
            .arg("-o")
            .arg(&cli)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            std::fs::read(&cli).unwrap() == w,
            "{name}: CLI output differs"
        );
        // The reader agrees with the source.
        let r = IrpaReader::open(&want).unwrap();
        let f = SafeTensors::open(&st).unwrap();
        assert_eq!(r.entries().len(), f.len());
        for (e, t) in r.entries().iter().zip(f.tensors()) {
            assert_eq!(e.name, t.name);
            assert_eq!(e.min_alignment, 64);
            assert_eq!(r.get(t.name), Some(IrpaData::Data(t.data)));
        }
    }
}

#[test]
fn splat_output_is_byte_identical_to_iree_splat() {
    let Some(tool) = iree_tool("iree-convert-parameters") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("s.safetensors");
    let specs = vec![
        TensorSpec::new("a", DType::F32, &[4, 4]),
        TensorSpec::new("ones", DType::F32, &[8]),
        TensorSpec::new("zeros", DType::BF16, &[6]),
        TensorSpec::new("c", DType::U8, &[5]),
    ];
    let mut w = SafetensorsWriter::new(&st, &specs, &[]).unwrap();
    w.write_tensor("a", &bytes(7, 64)).unwrap();
    w.write_tensor("ones", &1.5f32.to_le_bytes().repeat(8))
        .unwrap();
    w.write_tensor("zeros", &[0u8; 12]).unwrap();
    w.write_tensor("c", &bytes(9, 5)).unwrap();
    w.finish().unwrap();
    let want = dir.path().join("iree.irpa");
    iree_convert(
        &tool,
        &[
            format!("--parameters={}", st.display()),
            "--splat=ones=f32=1.5".into(),
            "--splat=zeros=bf16=0".into(),
        ],
        &want,
    );
    let got = dir.path().join("kiln.irpa");
    let out = common::kiln_command()
        .args(["params", "convert", "--splat"])
        .arg(&st)
        .arg("-o")
        .arg(&got)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read(&got).unwrap() == std::fs::read(&want).unwrap());
    let r = IrpaReader::open(&got).unwrap();
    match r.get("ones").unwrap() {
        d @ IrpaData::Splat { .. } => assert_eq!(
            d.expand().unwrap().as_ref(),
            &1.5f32.to_le_bytes().repeat(8)[..]
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        r.entry("zeros").unwrap().kind,
        EntryKind::Splat { length: 12, .. }
    ));
}

#[test]
fn described_archive_loads_in_iree_and_describes_itself() {
    let Some(dump) = iree_tool("iree-dump-parameters") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("d.safetensors");
    write_st(
        &st,
        &[
            ("w".into(), DType::F32, vec![3, 5]),
            ("b".into(), DType::F32, vec![5]),
        ],
    );
    let irpa = dir.path().join("d.irpa");
    let out = common::kiln_command()
        .args(["params", "convert", "--describe", "--dtype", "bf16"])
        .arg(&st)
        .arg("-o")
        .arg(&irpa)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let src = <dyn kiln::params::ParamSource>::open(&irpa).unwrap();
    let t = &src.tensors()[0];
    assert_eq!(
        (t.name.as_str(), t.dtype.plain(), t.shape.clone()),
        ("w", Some(DType::BF16), vec![3, 5])
    );
    // IREE lists it with the same offsets. (`--extract` is UNIMPLEMENTED for
    // mapped files in IREE 3.13: "only host allocation file handles".)
    let o = Command::new(&dump)
        .arg(format!("--parameters={}", irpa.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let listing = String::from_utf8_lossy(&o.stdout);
    for t in src.tensors() {
        let off = t.offset.unwrap();
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!("`{}`", t.name)))
            .unwrap_or_else(|| panic!("{} not listed:\n{listing}", t.name));
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cols[0], off.to_string(), "{line}");
        assert_eq!(cols[1], (off + t.nbytes).to_string(), "{line}");
    }
    // The values are the f32 source rounded to bf16.
    let f = SafeTensors::open(&st).unwrap();
    let want: Vec<f32> = DType::BF16
        .encode_weights(&f.require("w").unwrap().to_f32())
        .unwrap()
        .chunks(2)
        .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
        .collect();
    let got = src.to_f32("w").unwrap();
    assert_eq!(
        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn writer_rejects_misuse() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.irpa");
    let dup = IrpaWriter::new(&p, vec![EntrySpec::data("a", 1), EntrySpec::data("a", 2)]);
    assert!(matches!(
        dup,
        Err(kiln::params::ParamsError::DuplicateName { .. })
    ));
    let mut w =
        IrpaWriter::new(&p, vec![EntrySpec::data("a", 2), EntrySpec::data("b", 1)]).unwrap();
    assert!(w.write_tensor("b", &[1]).is_err(), "out of order");
    assert!(w.write_tensor("a", &[1, 2, 3]).is_err(), "too long");
    drop(w);
    assert!(!p.exists(), "no output after an unfinished writer");
    let mut w = IrpaWriter::new(&p, vec![EntrySpec::data("a", 2)]).unwrap();
    w.begin_tensor("a").unwrap();
    w.write_chunk(&[1]).unwrap();
    assert!(w.end_tensor().is_err(), "too short");
    drop(w);
    assert!(IrpaWriter::new(&p, vec![EntrySpec::splat("s", &[1, 2, 3], 6)]).is_err());
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "no temp files left"
    );
}

/// A shared entry (`EntrySpec::shared`, how `kiln compile --pack` stores a
/// packed weight once for prefill and decode) reads the bytes of the
/// entry it names, in kiln's reader and in `iree-dump-parameters`, and takes
/// no storage of its own; a share of a later, missing or other-length entry
/// is refused.
#[test]
fn shared_entries_read_the_bytes_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("shared.irpa");
    let a = bytes(3, 100);
    let b = bytes(4, 40);
    let mut w = IrpaWriter::new(
        &p,
        vec![
            EntrySpec::data("a", 100),
            EntrySpec::shared("a_again", "a", 100),
            EntrySpec::data("b", 40),
            EntrySpec::shared("a_third", "a", 100),
            EntrySpec::part_of("a@64", "a", 64, 36),
        ],
    )
    .unwrap();
    w.write_tensor("a", &a).unwrap();
    w.write_tensor("b", &b).unwrap();
    w.finish().unwrap();
    let r = IrpaReader::open(&p).unwrap();
    for (name, want) in [
        ("a", &a[..]),
        ("a_again", &a[..]),
        ("b", &b[..]),
        ("a_third", &a[..]),
        ("a@64", &a[64..]),
    ] {
        assert_eq!(r.get(name), Some(IrpaData::Data(want)), "{name}");
    }
    let offsets: Vec<u64> = r
        .entries()
        .iter()
        .map(|e| match e.kind {
            EntryKind::Data { offset, .. } => offset,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(offsets, vec![0, 0, 128, 0, 64]);
    // IREE's own listing: the shared entries start where `a` does.
    // (Its `--extract` reads only mapped archives, which its tools no
    // longer open: "only host allocation file handles are supported".)
    if let Some(dump) = iree_tool("iree-dump-parameters") {
        let out = Command::new(&dump)
            .arg(format!("--parameters={}", p.display()))
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let start = |name: &str| {
            text.lines()
                .find(|l| l.trim_end().ends_with(&format!("`{name}`")))
                .and_then(|l| l.split('|').next())
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|| panic!("{name} not listed: {text}"))
        };
        assert_eq!(start("a_again"), start("a"), "{text}");
        assert_eq!(start("a_third"), start("a"), "{text}");
        assert_ne!(start("b"), start("a"), "{text}");
        let at = |name: &str| start(name).parse::<u64>().unwrap();
        assert_eq!(at("a@64"), at("a") + 64, "{text}");
    }
    let q = dir.path().join("bad.irpa");
    for specs in [
        vec![EntrySpec::shared("x", "a", 4), EntrySpec::data("a", 4)],
        vec![EntrySpec::data("a", 4), EntrySpec::shared("x", "a", 8)],
        vec![EntrySpec::data("a", 4), EntrySpec::shared("x", "nope", 4)],
        // A part past the end of its entry, or off the storage alignment.
        vec![
            EntrySpec::data("a", 100),
            EntrySpec::part_of("x", "a", 64, 64),
        ],
        vec![
            EntrySpec::data("a", 100),
            EntrySpec::part_of("x", "a", 8, 8),
        ],
    ] {
        let e = IrpaWriter::new(&q, specs)
            .err()
            .expect("refused")
            .to_string();
        assert!(e.contains("which is no earlier stored entry"), "{e}");
    }
    assert!(!q.exists());
}
