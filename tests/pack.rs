//! `kiln compile --pack` (spec/iree.md, "Packed at compile time"): the
//! products' weights packed by iree-compile into `NAME-<target>.packed.irpa`,
//! each packed tensor stored once, found by run, generate and package; the
//! same ids as the module packed at load, on the host and on arm64 under
//! qemu.

use crate::common::{self, kiln, s, tmpdir};
use kiln::params::irpa::{EntryKind, IrpaReader};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const FIXTURE: &str = "tests/fixtures/hf/tiny-llama-untied-mha";

/// `kiln` with `args`, which must succeed; its stdout.
fn ok(args: &[&str]) -> String {
    let (code, out, err) = kiln(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// The ids `kiln run` or `kiln interp` prints.
fn run_ids(args: &[&str]) -> String {
    ok(args).trim().to_string()
}

/// The token ids `kiln generate --kv-cache` prints for a fixed prompt.
fn generated(vmfb: &Path) -> String {
    let out = ok(&[
        "generate",
        s(vmfb),
        "--kv-cache",
        "--tokens",
        "3,1,4,1,5",
        "--max-new-tokens",
        "8",
    ]);
    out.lines().next().unwrap_or_default().to_string()
}

/// The `weights` export of the tiny checkpoint `ckpt` (forward and KV
/// pair, SEQ 8, N 16) in `dir`, named `m`.
fn export_into(dir: &Path, ckpt: &str, weights: &str) {
    export_into_with(dir, ckpt, weights, &[]);
}

/// [`export_into`] with more `kiln export` arguments.
fn export_into_with(dir: &Path, ckpt: &str, weights: &str, more: &[&str]) {
    let ckpt = crate::common::root().join(ckpt);
    let mut args = vec![
        "export",
        s(&ckpt),
        "--seq",
        "8",
        "--out",
        s(dir),
        "--name",
        "m",
        "--weights",
        weights,
        "--kv-cache",
        "--max-context",
        "16",
    ];
    args.extend_from_slice(more);
    ok(&args);
}

/// Compiles the KV module exported in `a` for the host as it is, and a copy
/// of the export with `--pack` in a new folder, which it returns; the
/// packed compile must say nothing of weights it could not pack.
fn compiled_at_load_and_packed(a: &Path) -> tempfile::TempDir {
    let b = tmpdir();
    for f in ["m-kv-gen.mlir", "m.irpa", "m.json"] {
        std::fs::copy(a.join(f), b.path().join(f)).unwrap();
    }
    ok(&["compile", s(&a.join("m-kv-gen.mlir")), "-t", "host"]);
    let mlir = b.path().join("m-kv-gen.mlir");
    let (code, _, err) = kiln(&["compile", s(&mlir), "-t", "host", "--pack"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("no weight could be packed"), "{err}");
    b
}

/// The packed module in `b` holds no weights compiled in as constants (it
/// is at most 16 KiB larger than the one packed at load in `a`) and
/// generates the same ids.
fn assert_packed_like_at_load(a: &Path, b: &Path) {
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    let (packed, at_load) = (
        size(&b.join("m-kv-host.vmfb")),
        size(&a.join("m-kv-host.vmfb")),
    );
    assert!(
        packed < at_load + 16 * 1024,
        "no codes compiled in as constants: {packed} against {at_load} bytes"
    );
    assert_eq!(
        generated(&b.join("m-kv-host.vmfb")),
        generated(&a.join("m-kv-host.vmfb"))
    );
}

/// How many entries an archive has, and how many distinct storage ranges.
fn entries_and_stored(path: &Path) -> (usize, usize) {
    let r = IrpaReader::open(path).unwrap();
    let stored: BTreeSet<u64> = r
        .entries()
        .iter()
        .filter_map(|e| match e.kind {
            EntryKind::Data { offset, .. } => Some(offset),
            _ => None,
        })
        .collect();
    (r.entries().len(), stored.len())
}

#[test]
fn packed_modules_give_the_same_ids_with_each_packed_weight_stored_once() {
    let Some(tc) = common::toolchain() else {
        return;
    };
    let a = tmpdir();
    let a = a.path();
    export_into(a, FIXTURE, "w8a8");
    let p = |d: &Path, f: &str| -> PathBuf { d.join(f) };

    // The forward module on the host and on arm64 under qemu: the ids of
    // the module packed at load and of the interpreter.
    ok(&[
        "compile",
        s(&p(a, "m-gen.mlir")),
        "-t",
        "host,arm64",
        "--pack",
    ]);
    for t in ["host", "arm64"] {
        assert!(p(a, &format!("m-{t}.packed.irpa")).is_file(), "{t}");
    }
    let tokens = "3,1,4,1,5,9,2,6";
    let interp = run_ids(&[
        "interp",
        s(&p(a, "m-gen.mlir")),
        "--params",
        s(&p(a, "m.irpa")),
        "--tokens",
        tokens,
    ]);
    assert_eq!(
        run_ids(&["run", s(&p(a, "m-host.vmfb")), "--tokens", tokens]),
        interp,
        "host"
    );
    if common::arm64_emulation(&tc) {
        assert_eq!(
            run_ids(&[
                "run",
                s(&p(a, "m-arm64.vmfb")),
                "--emulate",
                "arm64",
                "--tokens",
                tokens,
            ]),
            interp,
            "arm64 under qemu"
        );
    }

    // The KV pair: prefill and decode get two identical packed entries per
    // weight from iree-compile; kiln stores each once. IREE's own tool
    // reads the archive.
    ok(&["compile", s(&p(a, "m-kv-gen.mlir")), "-t", "host", "--pack"]);
    let packed = p(a, "m-kv-host.packed.irpa");
    let (entries, stored) = entries_and_stored(&packed);
    assert!(
        entries >= 2 * 14 && stored * 2 == entries,
        "{entries} entries, {stored} stored"
    );
    let dump = std::process::Command::new(tc.dump_parameters.as_ref().unwrap())
        .arg(format!("--parameters=packed={}", s(&packed)))
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&dump.stdout);
    assert!(
        dump.status.success() && listed.contains(&format!("({entries} entries")),
        "{listed}{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    // The manifest records the packing and the archive.
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p(a, "m.json")).unwrap()).unwrap();
    let rec = &m["modules"]["m-kv-host.vmfb"];
    assert_eq!(rec["pack"], true, "{rec}");
    assert_eq!(rec["packed"]["path"], "m-kv-host.packed.irpa", "{rec}");
    let sha = {
        use sha2::Digest;
        sha2::Sha256::digest(std::fs::read(&packed).unwrap())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    assert_eq!(rec["packed"]["sha256"].as_str().unwrap(), sha);
    let packed_ids = generated(&p(a, "m-kv-host.vmfb"));

    // The same export in another folder: byte-identical module and packed
    // archive. Compiled again without --pack, the packed archive goes and
    // the ids stay.
    let b = tmpdir();
    let b = b.path();
    for f in ["m-kv-gen.mlir", "m.irpa", "m.json"] {
        std::fs::copy(p(a, f), p(b, f)).unwrap();
    }
    ok(&["compile", s(&p(b, "m-kv-gen.mlir")), "-t", "host", "--pack"]);
    for f in ["m-kv-host.vmfb", "m-kv-host.packed.irpa"] {
        assert!(
            std::fs::read(p(a, f)).unwrap() == std::fs::read(p(b, f)).unwrap(),
            "{f} differs between two folders"
        );
    }
    ok(&["compile", s(&p(b, "m-kv-gen.mlir")), "-t", "host"]);
    assert!(!p(b, "m-kv-host.packed.irpa").exists());
    assert_eq!(generated(&p(b, "m-kv-host.vmfb")), packed_ids);
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p(b, "m.json")).unwrap()).unwrap();
    assert!(m["modules"]["m-kv-host.vmfb"].get("packed").is_none());

    // kiln package carries each packed archive beside its module, and
    // kiln verify checks the folder.
    let assets = p(a, "assets");
    ok(&[
        "package",
        s(&p(a, "m.json")),
        "--no-tokenizer",
        "--include-host",
        "-o",
        s(&assets),
    ]);
    let am: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p(&assets, "m.manifest.json")).unwrap())
            .unwrap();
    assert_eq!(
        am["modules"]["arm64-v8a"]["packed"], "m-arm64-v8a.packed.irpa",
        "{am}"
    );
    assert_eq!(
        am["kv"]["modules"]["host"]["packed"], "m-kv-host.packed.irpa",
        "{am}"
    );
    assert!(p(&assets, "m-kv-host.packed.irpa").is_file());
    ok(&["verify", s(&assets)]);
    // A packed archive changed after packaging is a fault that names it.
    let f = p(&assets, "m-kv-host.packed.irpa");
    let mut bytes = std::fs::read(&f).unwrap();
    let last = bytes.len() - 4096 - 1;
    bytes[last] ^= 1;
    std::fs::write(&f, bytes).unwrap();
    let (code, out, err) = kiln(&["verify", s(&assets)]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        (out.clone() + &err).contains("m-kv-host.packed.irpa"),
        "{out}{err}"
    );

    // Vulkan has no CPU kernels to pack for: a usage error, no output.
    let (code, _, err) = kiln(&["compile", s(&p(a, "m-gen.mlir")), "-t", "vulkan", "--pack"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--pack") && err.contains("vulkan"), "{err}");
    assert!(!p(a, "m-vulkan.vmfb").exists());
}

/// A tied embedding is gathered and is the LM head: `--pack` reads the
/// head's side under a key of its own (`KEY#products`, the same bytes), so
/// the head is packed at compile time too while the gather reads the
/// export's archive, which the runtime session then maps. The ids stay those
/// of the module packed at load. With `--weights w8a16e` the gather also
/// reads the rows' second term (`KEY.q8lo`), which the head does not.
#[test]
fn a_tied_head_is_packed_at_compile_time_and_the_gather_reads_the_archive() {
    let Some(_tc) = common::toolchain() else {
        return;
    };
    let a = tmpdir();
    let a = a.path();
    export_into(a, "tests/fixtures/hf/tiny-llama-tied-gqa", "w8a16e");
    let text = std::fs::read_to_string(a.join("m-kv-gen.mlir")).unwrap();
    assert!(text.contains("model.embed_tokens.weight.q8lo"));
    let module = kiln::graph::Module::parse(&text).unwrap();
    let emb = "model.embed_tokens.weight.q8";
    let packable = kiln::iree::pack::packable_keys(&module);
    assert!(!packable.contains(&emb.to_string()));
    assert!(!packable.contains(&format!("{emb}lo")));
    let (split, pairs) = kiln::iree::pack::split_products(&module, |_| false)
        .unwrap()
        .expect("a split");
    let head = format!("{emb}{}", kiln::iree::pack::PRODUCTS_SUFFIX);
    assert_eq!(
        pairs,
        vec![kiln::iree::pack::SplitKey {
            key: head.clone(),
            source: emb.to_string(),
            range: None
        }]
    );
    let keys = kiln::iree::pack::packable_keys(&split);
    assert!(
        keys.contains(&head) && !keys.contains(&emb.to_string()),
        "{keys:?}"
    );

    let b = compiled_at_load_and_packed(a);
    let b = b.path();
    // Two entries (prefill, decode) per packed matrix, the head's included:
    // 7 per layer and the head.
    let (entries, stored) = entries_and_stored(&b.join("m-kv-host.packed.irpa"));
    let layers = 2;
    assert_eq!((entries, stored), (2 * (7 * layers + 1), 7 * layers + 1));
    assert_eq!(
        generated(&b.join("m-kv-host.vmfb")),
        generated(&a.join("m-kv-host.vmfb"))
    );
}

#[test]
fn keep_weights_are_packed_widened_with_the_tied_table_split() {
    let Some(_tc) = common::toolchain() else {
        return;
    };
    // A tied GGUF table in blocks: the gather reads the codes and the
    // f16 scales (widened once for both), the head widens them too. Its
    // products' side is split (codes and scales), and every block matrix
    // is packed widened at compile time; nothing is compiled into the
    // module as a constant, and the ids are those of the module packed at
    // load.
    let gguf = common::fixture("gguf/quant/tiny-llama-quant-tied.gguf");
    let a = tmpdir();
    let a = a.path();
    export_into(a, s(&gguf), "keep");
    let text = std::fs::read_to_string(a.join("m-kv-gen.mlir")).unwrap();
    let module = kiln::graph::Module::parse(&text).unwrap();
    let (split, pairs) = kiln::iree::pack::split_products(&module, |_| false)
        .unwrap()
        .expect("the tied table is split");
    let split_keys: BTreeSet<&str> = pairs.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(
        split_keys,
        BTreeSet::from([
            "model.embed_tokens.weight.qs#products",
            "model.embed_tokens.weight.scale#products",
            "model.embed_tokens.weight.min#products",
        ]),
        "{pairs:?}"
    );
    let keys = kiln::iree::pack::packable_keys(&split);
    assert!(
        keys.iter()
            .any(|k| k == "model.layers.0.mlp.down_proj.weight.qs")
            && keys
                .iter()
                .all(|k| !k.starts_with("model.embed_tokens.weight.") || k.ends_with("#products")),
        "{keys:?}"
    );

    let b = compiled_at_load_and_packed(a);
    let b = b.path();
    assert!(b.join("m-kv-host.packed.irpa").is_file());
    assert_packed_like_at_load(a, b);
}

/// A table exported in row chunks (Vulkan's tensor bound, here made small
/// so that the tied table and the larger matrices are chunked) is read as
/// slices of its entry, which iree-compile 3.13 cannot import: `--pack`
/// gives each product's slice a whole entry of its bytes
/// (`KEY@OFFSET#products`), so the chunks are packed at compile time too,
/// nothing is compiled into the module as a constant, the gather keeps
/// reading the export's slices, and the ids are those of the module
/// packed at load.
/// A `keep` matrix is widened from its codes in the graph, and IREE 3.13
/// hoists that widening and its packing once per function: one f32 copy
/// each for the prefill and the decode, unless both compute it by the same
/// dispatch. Its data tiling swaps a one-row product's sides, so the
/// graph writes the one-row products (the decode's, and the prefill's
/// head) weight first, as `W · xᵀ`: both functions then pack the widened
/// matrix the same way and IREE keeps one copy (SmolLM2 keep at load 1053
/// → 664 MB, docs/journal/2026-12-05-fast-exact-and-small.md, "One
/// widened copy at load").
#[test]
fn one_row_products_of_widened_matrices_are_weight_first() {
    let gguf = common::fixture("gguf/quant/tiny-llama-quant-tied.gguf");
    let a = tmpdir();
    export_into(a.path(), s(&gguf), "keep");
    let text = std::fs::read_to_string(a.path().join("m-kv-gen.mlir")).unwrap();
    let module = kiln::graph::Module::parse(&text).unwrap();
    let widened = |f: &kiln::graph::Graph, v: kiln::graph::Value| {
        matches!(
            f.nodes()[v.index()].op,
            kiln::graph::Op::DequantizeBlocks(_)
        )
    };
    // (products of a widened matrix, of them weight first), per function.
    let counts = |f: &kiln::graph::Graph| {
        let products: Vec<_> = f
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, kiln::graph::Op::DotGeneral(_)))
            .filter(|n| n.args.iter().any(|&a| widened(f, a)))
            .collect();
        let first = products.iter().filter(|n| widened(f, n.args[0])).count();
        (products.len(), first)
    };
    let function = |suffix: &str| {
        let f = module.functions.iter().find(|f| f.name.ends_with(suffix));
        counts(f.expect("the KV pair's functions"))
    };
    // The checkpoint's 13 block-quantized layer matrices (one is stored
    // f32) and the tied head: every decode product is one row, and of
    // the prefill's P-row products only the head's.
    assert_eq!(function("_decode"), (14, 14));
    assert_eq!(function("_prefill"), (14, 1));
}

#[test]
fn row_chunks_are_packed_at_compile_time() {
    let Some(_tc) = common::toolchain() else {
        return;
    };
    let a = chunked_keep_export();
    let a = a.path();
    let text = std::fs::read_to_string(a.join("m-kv-gen.mlir")).unwrap();
    let module = kiln::graph::Module::parse(&text).unwrap();
    // The export's archive has a whole entry over each chunk (no bytes of
    // its own), which IREE's tools read.
    let archive = kiln::params::irpa::IrpaReader::open(a.join("m.irpa")).unwrap();
    let has = |k: &str| archive.entry(k).is_some();
    let (split, keys) = kiln::iree::pack::split_products(&module, has)
        .unwrap()
        .expect("the chunks are split");
    let qs = "model.embed_tokens.weight.qs";
    let first = keys
        .iter()
        .find(|k| k.key == format!("{qs}@0#products"))
        .unwrap_or_else(|| panic!("{keys:?}"));
    assert_eq!(first.source, qs);
    let (offset, length) = first.range.expect("a slice");
    assert_eq!(offset, 0);
    let second = keys
        .iter()
        .find(|k| k.key == format!("{qs}@{length}#products"))
        .unwrap_or_else(|| panic!("{keys:?}"));
    assert_eq!(second.range, Some((length, length)));
    assert!(
        keys.iter()
            .any(|k| k.source.starts_with("model.layers.") && k.range.is_some()),
        "a layer's chunked matrix is split too: {keys:?}"
    );
    // Every split key is packable; the gather still reads the export's
    // slices, and no slice is left on a product path.
    let packable = kiln::iree::pack::packable_keys(&split);
    assert!(
        keys.iter().all(|k| packable.contains(&k.key)),
        "{packable:?}"
    );
    assert!(has(&format!("{qs}@{length}")));
    // They are views, not tensors: `kiln params` lists the same tensors in
    // both archives of the export.
    let (code, out, err) = kiln(&[
        "params",
        "diff",
        s(&a.join("m.safetensors")),
        s(&a.join("m.irpa")),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!ok(&["params", "inspect", s(&a.join("m.irpa"))]).contains('@'));
    assert_eq!(
        archive
            .get(&format!("{qs}@{length}"))
            .unwrap()
            .expand()
            .unwrap()[..],
        archive.get(qs).unwrap().expand().unwrap()[length as usize..2 * length as usize]
    );
    // The gathers read those whole entries, so the packed module reads no
    // slice (the session can map the archive); without them, slices stay.
    let print = |m: &kiln::graph::Module| {
        m.print(&kiln::stablehlo::PrintOptions::default(), None)
            .unwrap()
    };
    let printed = print(&split);
    assert!(!printed.contains("offset ="), "{printed}");
    assert!(printed.contains(&format!(r#""{qs}@{length}">"#)));
    let (no_entries, _) = kiln::iree::pack::split_products(&module, |_| false)
        .unwrap()
        .unwrap();
    assert!(print(&no_entries).contains(&format!(r#""{qs}", {{offset = {length} : i64"#)));

    let b = compiled_at_load_and_packed(a);
    let b = b.path();
    let (entries, stored) = entries_and_stored(&b.join("m-kv-host.packed.irpa"));
    assert_eq!(entries, 2 * stored, "prefill's and decode's, stored once");
    assert_packed_like_at_load(a, b);
}

/// Compiled without `--pack`, a chunked export's module reads the
/// archive's whole entry over each chunk (`KEY@OFFSET`) in place of a
/// slice past an entry's start, so a runtime may map the archive
/// (spec/iree.md, "Row chunks read through their entries"): no parameter
/// read at an offset; the KV pair on the host (its session maps the
/// archive) gives the ids of the module compiled from the same MLIR
/// without the archive (which reads slices, from a file handle); the
/// forward on lavapipe gives the host's; and `kiln verify --rebuild`
/// remakes them byte for byte.
#[test]
fn modules_read_the_chunk_entries() {
    let Some(tc) = common::toolchain() else {
        return;
    };
    let a = chunked_keep_export();
    let a = a.path();
    ok(&["compile", s(&a.join("m-kv-gen.mlir")), "-t", "host"]);
    // The same MLIR compiled by the library without the archive.
    let c = tmpdir();
    let c = c.path();
    for f in ["m-kv-gen.mlir", "m.irpa", "m.json"] {
        std::fs::copy(a.join(f), c.join(f)).unwrap();
    }
    kiln::iree::compile(
        &tc,
        &c.join("m-kv-gen.mlir"),
        &kiln::iree::Target::Host,
        &c.join("m-kv-host.vmfb"),
        &[],
    )
    .unwrap();
    let reads = |d: &Path| {
        kiln::iree::inspect::inspect_module(&tc, &d.join("m-kv-host.vmfb"))
            .unwrap()
            .parameters
    };
    let qs = "model.embed_tokens.weight.qs";
    let entries = reads(a);
    assert!(entries.iter().all(|r| r.offset == 0), "{entries:?}");
    assert!(
        entries.iter().any(|r| r.key.starts_with(&format!("{qs}@"))),
        "{entries:?}"
    );
    let slices = reads(c);
    assert!(
        slices.iter().any(|r| r.key == qs && r.offset > 0),
        "{slices:?}"
    );
    assert_eq!(
        generated(&a.join("m-kv-host.vmfb")),
        generated(&c.join("m-kv-host.vmfb"))
    );
    // The forward on Vulkan reads the chunk entries too.
    ok(&["compile", s(&a.join("m-gen.mlir")), "-t", "host,vulkan"]);
    let vk = kiln::iree::inspect::inspect_module(&tc, &a.join("m-vulkan.vmfb"))
        .unwrap()
        .parameters;
    assert!(vk.iter().all(|r| r.offset == 0), "{vk:?}");
    if common::lavapipe_present() {
        let tokens = "3,1,4,1,5,9,2,6";
        let on = |vmfb: &str, device: &str| {
            run_ids(&[
                "run",
                s(&a.join(vmfb)),
                "--tokens",
                tokens,
                "--device",
                device,
            ])
        };
        assert_eq!(
            on("m-vulkan.vmfb", "vulkan"),
            on("m-host.vmfb", "local-task")
        );
    }
    let (code, out, err) = kiln(&["verify", s(a), "--rebuild"]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_module_with_nothing_to_pack_says_so() {
    if common::toolchain().is_none() {
        return;
    }
    // A module whose one parameter is used elementwise (a norm's weight):
    // nothing reaches a product, and the compile packs nothing, with a note.
    let a = tmpdir();
    let a = a.path();
    export_into(a, FIXTURE, "bf16");
    let mlir = a.join("m-gen.mlir");
    std::fs::write(
        &mlir,
        r#"module @m {
  util.global private @model_norm_weight = #flow.parameter.named<"model"::"model.norm.weight"> : tensor<32xbf16>
  func.func @m(%arg0: tensor<32xf32>) -> tensor<32xf32> {
    %0 = util.global.load @model_norm_weight : tensor<32xbf16>
    %1 = stablehlo.convert %0 : (tensor<32xbf16>) -> tensor<32xf32>
    %2 = stablehlo.add %arg0, %1 : tensor<32xf32>
    return %2 : tensor<32xf32>
  }
}
"#,
    )
    .unwrap();
    let (code, _, err) = kiln(&["compile", s(&mlir), "-t", "host", "--pack"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("m-host.vmfb: no weight could be packed while compiling"),
        "{err}"
    );
    assert!(a.join("m-host.vmfb").is_file());
    assert!(!a.join("m-host.packed.irpa").exists());
}

/// The tiny tied Q4_K GGUF exported `keep` with a 64 KiB tensor bound, so
/// that the tied table and the larger matrices are read in row chunks.
fn chunked_keep_export() -> tempfile::TempDir {
    let gguf = common::fixture("gguf/quant/tiny-llama-quant-tied.gguf");
    let a = tmpdir();
    export_into_with(a.path(), s(&gguf), "keep", &["--max-tensor-bytes", "65536"]);
    a
}

/// Both archives of an export store the vectors (norms, row scales) ahead
/// of the matrices, in the same order: a packed module reads only those and
/// the gathered embedding rows from the export's archive, and stored
/// between the matrices each vector's first read brought neighbouring
/// matrix pages in by readahead (spec/iree.md, "Packed at compile time").
#[test]
fn the_archives_store_the_vectors_ahead_of_the_matrices() {
    let a = tmpdir();
    let a = a.path();
    export_into(a, FIXTURE, "w8a8");
    let st = kiln::params::safetensors::SafeTensors::open(a.join("m.safetensors")).unwrap();
    let mut st_order: Vec<(u64, String, bool)> = st
        .tensors()
        .map(|t| {
            let vector = t.shape.iter().filter(|&&d| d > 1).count() <= 1;
            (t.data_offsets.0, t.name.to_string(), vector)
        })
        .collect();
    st_order.sort();
    let irpa = IrpaReader::open(a.join("m.irpa")).unwrap();
    let mut irpa_order: Vec<(u64, String)> = irpa
        .entries()
        .iter()
        .filter_map(|e| match e.kind {
            EntryKind::Data { offset, .. } => Some((offset, e.name.clone())),
            _ => None,
        })
        .collect();
    irpa_order.sort();
    let st_names: Vec<&String> = st_order.iter().map(|t| &t.1).collect();
    let irpa_names: Vec<&String> = irpa_order.iter().map(|t| &t.1).collect();
    assert_eq!(st_names, irpa_names, "the two archives, the same order");
    let vectors = st_order.iter().filter(|t| t.2).count();
    assert!(
        vectors > 4 && vectors < st_order.len(),
        "the fixture has vectors and matrices"
    );
    assert!(
        st_order[..vectors].iter().all(|t| t.2),
        "vectors first: {:?}",
        st_order.iter().map(|t| (&t.1, t.2)).collect::<Vec<_>>()
    );
    // Each group in graph order: the first layer's row scales before the
    // last layer's, and its matrices likewise.
    let at = |name: &str| st_order.iter().position(|t| t.1 == name).unwrap();
    for part in ["q8", "scale"] {
        assert!(
            at(&format!("model.layers.0.self_attn.q_proj.weight.{part}"))
                < at(&format!("model.layers.1.self_attn.q_proj.weight.{part}"))
        );
    }
}
