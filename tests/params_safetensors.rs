//! safetensors reader/writer, sharded checkpoints, and IREE reading our files.

use kiln::params::safetensors::{Checkpoint, SafeTensors, SafetensorsWriter, TensorSpec};
use kiln::params::TensorWriter;
use kiln::params::{DType, ParamsError};
use std::path::Path;

fn write(path: &Path, specs: &[TensorSpec], meta: &[(String, String)]) {
    let mut w = SafetensorsWriter::new(path, specs, meta).unwrap();
    for (i, s) in specs.iter().enumerate() {
        let n = s.shape.iter().product::<u64>() as usize * s.dtype.size();
        // Stream in small chunks to exercise the chunked path.
        w.begin_tensor(&s.name).unwrap();
        let data: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
        for c in data.chunks(5) {
            w.write_chunk(c).unwrap();
        }
        w.end_tensor().unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn writer_round_trips_true_shapes_metadata_and_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.safetensors");
    let specs = vec![
        TensorSpec::new("z.last", DType::BF16, &[3, 4, 5]),
        TensorSpec::new("a.first", DType::F32, &[2]),
        TensorSpec::new("scalar", DType::I64, &[]),
        TensorSpec::new("empty", DType::F16, &[0, 7]),
        TensorSpec::new("flag\"quoted\"", DType::Bool, &[3]),
    ];
    let meta = vec![("format".to_string(), "pt".to_string())];
    write(&p, &specs, &meta);
    let bytes = std::fs::read(&p).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert_eq!(n % 8, 0, "header padded to 8 bytes");
    let st = SafeTensors::open(&p).unwrap();
    assert_eq!(st.metadata(), &meta[..]);
    let names: Vec<&str> = st.tensors().map(|t| t.name).collect();
    assert_eq!(
        names,
        ["z.last", "a.first", "scalar", "empty", "flag\"quoted\""]
    );
    for (t, s) in st.tensors().zip(&specs) {
        assert_eq!(t.dtype, s.dtype);
        assert_eq!(t.shape, &s.shape[..]);
    }
    assert_eq!(st.get("scalar").unwrap().data.len(), 8);
    // Deterministic: writing again gives the same bytes.
    let p2 = dir.path().join("m2.safetensors");
    write(&p2, &specs, &meta);
    assert_eq!(std::fs::read(&p2).unwrap(), bytes);
}

#[test]
fn writer_rejects_misuse_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.safetensors");
    let dup = [
        TensorSpec::new("a", DType::F32, &[1]),
        TensorSpec::new("a", DType::F32, &[1]),
    ];
    assert!(matches!(
        SafetensorsWriter::new(&p, &dup, &[]),
        Err(ParamsError::DuplicateName { .. })
    ));
    let over = [TensorSpec::new("a", DType::F64, &[u64::MAX / 4, 2])];
    assert!(matches!(
        SafetensorsWriter::new(&p, &over, &[]),
        Err(ParamsError::Overflow { .. })
    ));
    let specs = [
        TensorSpec::new("a", DType::F32, &[2]),
        TensorSpec::new("b", DType::U8, &[1]),
    ];
    let mut w = SafetensorsWriter::new(&p, &specs, &[]).unwrap();
    assert!(w.write_tensor("b", &[0]).is_err(), "out of order");
    assert!(w.write_tensor("a", &[0; 9]).is_err(), "too many bytes");
    drop(w);
    let mut w = SafetensorsWriter::new(&p, &specs, &[]).unwrap();
    w.write_tensor("a", &[0; 8]).unwrap();
    let err = w.finish().unwrap_err();
    assert_eq!(err.tensor(), Some("b"));
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

#[test]
fn sharded_checkpoints_follow_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        &d.join("model-00001-of-00002.safetensors"),
        &[
            TensorSpec::new("a", DType::F32, &[2]),
            TensorSpec::new("b", DType::F32, &[1]),
        ],
        &[],
    );
    write(
        &d.join("model-00002-of-00002.safetensors"),
        &[TensorSpec::new("c", DType::BF16, &[4])],
        &[],
    );
    let index = |map: &str| {
        std::fs::write(
            d.join("model.safetensors.index.json"),
            format!("{{\"metadata\":{{\"total_size\":20}},\"weight_map\":{{{map}}}}}"),
        )
        .unwrap()
    };
    index(
        r#""c":"model-00002-of-00002.safetensors","a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors""#,
    );
    let ck = Checkpoint::open(d).unwrap();
    let names: Vec<&str> = ck.tensors().map(|t| t.name).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(ck.get("c").unwrap().dtype, DType::BF16);
    assert!(ck
        .file_of("c")
        .unwrap()
        .ends_with("model-00002-of-00002.safetensors"));
    let src = <dyn kiln::params::ParamSource>::open(d).unwrap();
    assert_eq!(src.tensors().len(), 3);

    index(r#""a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors""#);
    // Shards the index does not name are not part of the checkpoint.
    assert!(Checkpoint::open(d).unwrap().get("c").is_none());
    index(r#""a":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors""#);
    let e = Checkpoint::open(d).unwrap_err();
    assert_eq!(
        e.tensor(),
        Some("b"),
        "unlisted tensor in a listed shard: {e}"
    );
    index(
        r#""a":"model-00002-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors""#,
    );
    let e = Checkpoint::open(d).unwrap_err();
    assert_eq!(e.tensor(), Some("a"), "{e}");
    index(r#""a":"../x.safetensors""#);
    assert!(Checkpoint::open(d)
        .unwrap_err()
        .to_string()
        .contains("plain file name"));
    index(
        r#""a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors","ghost":"model-00002-of-00002.safetensors""#,
    );
    assert_eq!(Checkpoint::open(d).unwrap_err().tensor(), Some("ghost"));
    // A directory with a single model.safetensors.
    let single = tempfile::tempdir().unwrap();
    write(
        &single.path().join("model.safetensors"),
        &[TensorSpec::new("w", DType::F16, &[2, 2])],
        &[],
    );
    assert_eq!(Checkpoint::open(single.path()).unwrap().len(), 1);
}

#[test]
fn iree_reads_our_safetensors() {
    let Some(tool) =
        crate::common::iree_tool("iree-dump-parameters", |tc| tc.dump_parameters.clone())
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.safetensors");
    write(
        &p,
        &[
            TensorSpec::new("w", DType::BF16, &[3, 5]),
            TensorSpec::new("b", DType::F32, &[5]),
        ],
        &[("k".into(), "v".into())],
    );
    let o = std::process::Command::new(&tool)
        .arg(format!("--parameters={}", p.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let st = SafeTensors::open(&p).unwrap();
    for t in st.tensors() {
        let start = st.data_start() + t.data_offsets.0;
        let end = st.data_start() + t.data_offsets.1;
        assert!(
            text.lines().any(|l| l.ends_with(&format!("`{}`", t.name))
                && l.split('|')
                    .map(str::trim)
                    .take(2)
                    .eq([start.to_string(), end.to_string()]
                        .iter()
                        .map(String::as_str))),
            "{}: {text}",
            t.name
        );
    }
}
