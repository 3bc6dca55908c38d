//! The KV-cache pair (`kiln export --kv-cache`): prefill + one-token decode
//! over the same archive as the redecode forward.
//!
//! - every tiny transformers fixture, in kiln's interpreter: teacher-forced
//!   prefill + decode predicts transformers' argmax at every position, and
//!   greedy KV generation gives exactly the redecode loop's ids;
//! - attention spans (N 64, spans 16 and 32), on every fixture, in the
//!   interpreter (f32 and bf16 caches) and on the IREE host: every span
//!   gives the call over all N's ids, teacher-forced and across span
//!   switches in a greedy generation; both predict transformers' argmax
//!   (with bf16 caches, but within [`BF16_TIE`] of a tie);
//! - one fixture with bf16 caches and a span compiled for host, arm64,
//!   arm32 and Vulkan: a two-turn conversation across the span boundary
//!   gives the host's ids under qemu and on lavapipe (caches as i32
//!   pairs); bf16 caches give the f32 caches' ids on the CPU and Vulkan;
//! - chunked prefill and multi-turn conversations: a prompt of 2.5 × P
//!   equals one prefill with a larger P, turn 2 equals a fresh prefill of
//!   the whole conversation, and a two-turn script gives the host's ids in
//!   the interpreter, under qemu and on lavapipe;
//! - the session runs IREE's threads under SCHED_BATCH;
//! - bad input: a prompt that fills N, a turn or a decode past N, caches
//!   of the wrong shape, a module exported without `--kv-cache`.

use crate::common;
use common::*;
use kiln::export::{export, ExportOptions, ExportReport, KvCacheOptions, Weights};
use kiln::generate::{
    generate, generate_kv, Conversation, Driver, DriverLoop, DriverOptions, Forward, Interpreter,
    KvDriver, KvStep, Redecode, RunModule, Sampler, Stop,
};
use kiln::graph::DType;
use kiln::iree::{Device, Emulation, KvSession, RunOptions, SessionSpec, Target, Toolchain};
use kiln::models::Checkpoint;
use kiln::step::KvSpec;
use std::path::Path;

/// Prompt bucket used for the fixtures: positions 0..P go through prefill.
const P: usize = 4;

/// Max context of the span exports, and their attention spans: a SEQ-33
/// case teacher-forced from position 0 runs every span (16, 32) and N.
const SPAN_N: usize = 64;
const SPANS: [usize; 2] = [16, 32];

/// With bf16 caches, transformers' argmax must hold where its two best
/// logits lie at least this far apart. Rounding every cached key and
/// value to bf16 (8 significant bits) moves the tiny fixtures' logits by
/// up to about a tenth: measured, it flips the argmax at 11 positions of
/// 10 of the 17 fixtures, with margins of 0.0028–0.0245 and one of 0.106
/// (tiny-llama-head-dim); f32 caches flip none above [`TIE_MARGIN`].
const BF16_TIE: f64 = 0.15;

fn export_kv(name: &str, seq: usize, dir: &Path, cache: DType) -> ExportReport {
    let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
    export_kv_of(&ckpt, hf_expected(name).dtype().into(), seq, dir, cache)
}

/// The KV export of `ckpt` (P = [`P`], N = `seq`) with `weights`.
fn export_kv_of(
    ckpt: &Checkpoint,
    weights: Weights,
    seq: usize,
    dir: &Path,
    cache: DType,
) -> ExportReport {
    let kv = KvCacheOptions::default().prompt_len(P).cache_dtype(cache);
    export_tiny_kv(ckpt, weights, seq, dir, kv)
}

/// The KV export of fixture `name` with attention spans: P = [`P`], N =
/// [`SPAN_N`], spans [`SPANS`], `cache` caches.
fn export_spans(name: &str, dir: &Path, cache: DType) -> ExportReport {
    let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
    let kv = KvCacheOptions::default()
        .prompt_len(P)
        .cache_dtype(cache)
        .spans(SPANS.to_vec());
    export_tiny_kv(&ckpt, hf_expected(name).dtype(), SPAN_N, dir, kv)
}

/// The pair `r`'s manifest records (its spans included), as a runtime
/// on `device` takes it (i32 pairs for bf16 caches on Vulkan).
fn kv_spec(r: &ExportReport, device: Device) -> KvSpec {
    let spec = KvSpec::try_from(&r.manifest.kv.as_ref().unwrap().pair).unwrap();
    match device {
        Device::Vulkan => spec.for_vulkan().unwrap(),
        _ => spec,
    }
}

/// A KV session over `vmfb` (compiled from `r`'s KV module) on `device`,
/// running each call on the smallest span that holds it.
fn kv_session(r: &ExportReport, vmfb: &Path, device: Device) -> KvSession {
    let spec = SessionSpec::new(vmfb, &r.irpa).device(device);
    KvSession::new(spec.open().unwrap(), &kv_spec(r, device)).unwrap()
}

/// The same session running every call over all N positions (no spans).
fn kv_session_full(r: &ExportReport, vmfb: &Path) -> KvSession {
    let spec = SessionSpec::new(vmfb, &r.irpa);
    let kv = kv_spec(r, Device::LocalTask).spans(Vec::new()).unwrap();
    KvSession::new(spec.open().unwrap(), &kv).unwrap()
}

/// The KV pair of `r` in the interpreter, each call on the smallest span
/// that holds it.
fn interp_spans(r: &ExportReport) -> KvDriver<Interpreter> {
    interp_kv(r)
        .with_spans(kv_spec(r, Device::LocalTask).spans)
        .unwrap()
}

/// The KV pair of `r` in the interpreter, every call over all N positions.
fn interp_kv(r: &ExportReport) -> KvDriver<Interpreter> {
    let kv = &r.manifest.kv.as_ref().unwrap().pair;
    KvDriver::<Interpreter>::open(
        r.kv_mlir.as_ref().unwrap(),
        &r.irpa,
        &kv.prefill,
        &kv.decode,
    )
    .unwrap()
}

/// The KV pair of `r` in the interpreter and, with a toolchain, compiled
/// for the host (into `dir`) as a session.
fn interp_and_host(
    r: &ExportReport,
    tc: Option<&Toolchain>,
    dir: &Path,
) -> Vec<(&'static str, Box<dyn KvStep>)> {
    let mut models: Vec<(&str, Box<dyn KvStep>)> = vec![("interp", Box::new(interp_kv(r)))];
    if let Some(tc) = tc {
        let vmfb = dir.join("tiny-kv-host.vmfb");
        let kv = r.kv_mlir.as_ref().unwrap();
        common::compiled::compile(tc, kv, &Target::Host, &vmfb, &[]).unwrap();
        models.push(("host", Box::new(kv_session(r, &vmfb, Device::LocalTask))));
    }
    models
}

/// Teacher forcing with chunked prefill: the first `k` input ids (k = 10
/// at SEQ 33: chunks of P = 4 at 0, 4 and 8, the last one 2 real ids; k = 6
/// at SEQ 8) through prefill calls at their offsets, then each following
/// input id decoded at its position. Each chunk's prediction (at its last
/// real position) and every decode's must be transformers' argmax (ties
/// excepted).
fn teacher_forced(
    model: &mut dyn KvStep,
    input: &[i32],
    argmax: &[i32],
    margin: &[f64],
) -> Vec<String> {
    teacher_forced_within(model, input, argmax, margin, TIE_MARGIN)
}

/// [`teacher_forced`], where a margin below `tie` counts as a tie.
fn teacher_forced_within(
    model: &mut dyn KvStep,
    input: &[i32],
    argmax: &[i32],
    margin: &[f64],
    tie: f64,
) -> Vec<String> {
    let margin: Vec<f64> = margin
        .iter()
        .map(|&m| if m < tie { 0.0 } else { m })
        .collect();
    let margin = &margin[..];
    let (got, checked) = forced(model, input);
    let got: Vec<i32> = (0..argmax.len())
        .map(|p| got.get(&p).copied().unwrap_or(argmax[p]))
        .collect();
    checked
        .into_iter()
        .flat_map(|p| mismatches(&got, argmax, margin, p..p + 1))
        .collect()
}

/// [`teacher_forced`]'s calls: the id predicted at each position a call
/// ends at, and those positions in order.
fn forced(
    model: &mut dyn KvStep,
    input: &[i32],
) -> (std::collections::BTreeMap<usize, i32>, Vec<usize>) {
    let k = 10.min(input.len() - 2);
    let mut got = std::collections::BTreeMap::new();
    model.reset().unwrap();
    let mut checked = Vec::new();
    for start in (0..k).step_by(P) {
        let len = P.min(k - start);
        let at = start + len - 1;
        let id = model
            .prefill(&pad(&input[start..start + len], P), start, len)
            .unwrap()
            .id;
        got.insert(at, id);
        checked.push(at);
    }
    for (pos, &id) in input.iter().enumerate().skip(k) {
        got.insert(pos, model.decode(id, pos).unwrap().id);
        checked.push(pos);
    }
    (got, checked)
}

/// Spans against the full context on one fixture's runtimes: `spans` and
/// `full` run the same module, each call on its smallest span or over
/// all N. Teacher-forced on every SEQ-33 case (prefill chunks at 0, 4, 8,
/// decodes at 10..33: spans 16 and 32 and N 64 all run), both predict
/// transformers' argmax (margins below `tie` excepted) and exactly each
/// other's ids; a greedy generation from a 10-token prompt to a full
/// cache (span 16, then 32, then N) gives the ids of the full-N
/// generation. Returns the failures.
fn spans_against_full(
    name: &str,
    spans: &mut dyn KvStep,
    full: &mut dyn KvStep,
    (what, tie): (&str, f64),
) -> Vec<String> {
    let exp = hf_expected(name);
    let rs = exp.seqs.iter().find(|s| s.seq == 33).unwrap();
    let mut failures = Vec::new();
    for (ci, c) in rs.cases.iter().enumerate() {
        let bad = [
            (
                "spans",
                teacher_forced_within(spans, &c.input, &c.argmax, &c.margin, tie),
            ),
            (
                "full",
                teacher_forced_within(full, &c.input, &c.argmax, &c.margin, tie),
            ),
        ];
        for (which, bad) in bad.iter().filter(|(_, b)| !b.is_empty()) {
            failures.push(format!(
                "{name} {what} {which} case {ci}: {}",
                bad.join("; ")
            ));
        }
        let (a, b) = (forced(spans, &c.input).0, forced(full, &c.input).0);
        if a != b {
            failures.push(format!(
                "{name} {what} case {ci}: spans predicted {a:?}, the full context {b:?}"
            ));
        }
    }
    let prompt = &rs.cases[0].input[..10];
    let g_spans = generate_kv(spans, prompt, SPAN_N, &[], Sampler::greedy(), |_| true).unwrap();
    let g_full = generate_kv(full, prompt, SPAN_N, &[], Sampler::greedy(), |_| true).unwrap();
    assert_eq!(g_full.ids.len(), SPAN_N - 10, "{name}: fills N");
    if g_spans != g_full {
        failures.push(format!(
            "{name} {what}: generated {:?} with spans, {:?} over all N",
            g_spans.ids, g_full.ids
        ));
    }
    failures
}

/// Every span equals the call over all N in the interpreter, on every
/// tiny fixture, with f32 caches (transformers' argmax but for ties) and
/// with bf16 caches (transformers' argmax where its margin is at least
/// [`BF16_TIE`]): [`spans_against_full`].
#[test]
fn spans_equal_the_full_context_in_the_interpreter_on_every_fixture() {
    let mut failures = Vec::new();
    for name in HF_FIXTURES {
        for (cache, what, tie) in [
            (DType::F32, "interp f32", TIE_MARGIN),
            (DType::BF16, "interp bf16", BF16_TIE),
        ] {
            let dir = tmpdir();
            let r = export_spans(name, dir.path(), cache);
            let kv = &r.manifest.kv.as_ref().unwrap().pair;
            assert_eq!(
                kv.spans.iter().map(|s| s.span).collect::<Vec<_>>(),
                SPANS.to_vec()
            );
            failures.extend(spans_against_full(
                name,
                &mut interp_spans(&r),
                &mut interp_kv(&r),
                (what, tie),
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn interpreter_kv_matches_transformers_and_redecode_on_every_fixture() {
    let mut failures = Vec::new();
    for name in HF_FIXTURES {
        let exp = hf_expected(name);
        for rs in &exp.seqs {
            let dir = tmpdir();
            let r = export_kv(name, rs.seq, dir.path(), DType::F32);
            let mut kv = interp_kv(&r);
            for (ci, c) in rs.cases.iter().enumerate() {
                let bad = teacher_forced(&mut kv, &c.input, &c.argmax, &c.margin);
                if !bad.is_empty() {
                    failures.push(format!(
                        "{name} seq {} case {ci}: {}",
                        rs.seq,
                        bad.join("; ")
                    ));
                }
            }
            // Greedy generation from a prompt longer than P (prefilled in
            // chunks): the KV loop and the redecode loop at SEQ = N.
            let plen = if rs.seq > 8 { 10 } else { 5 };
            let prompt = &rs.cases[0].input[..plen];
            let g_kv =
                generate_kv(&mut kv, prompt, rs.seq, &[], Sampler::greedy(), |_| true).unwrap();
            let mut re =
                Redecode::<Interpreter>::open(&r.mlir, &r.irpa, &r.manifest.function).unwrap();
            let g_re = generate(&mut re, prompt, rs.seq, &[], |_| true).unwrap();
            assert_eq!(g_kv.ids.len(), rs.seq - plen, "{name}: fills N");
            assert_eq!(g_kv.stop, Stop::ContextFull);
            if g_kv != g_re {
                failures.push(format!(
                    "{name} seq {}: KV generated {:?}, redecode {:?}",
                    rs.seq, g_kv.ids, g_re.ids
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// On the IREE host, every tiny fixture's pair with spans (f32 caches)
/// predicts transformers' argmax, every span equals the call over all N,
/// and a generation across two span switches equals the full-N one
/// ([`spans_against_full`]; one session each, over one module).
#[test]
fn iree_host_kv_with_spans_matches_transformers_and_the_full_context_on_every_fixture() {
    let Some(tc) = toolchain() else { return };
    let mut failures = Vec::new();
    for name in HF_FIXTURES {
        let dir = tmpdir();
        let r = export_spans(name, dir.path(), DType::F32);
        let vmfb = dir.path().join("tiny-kv-host.vmfb");
        common::compiled::compile(&tc, r.kv_mlir.as_ref().unwrap(), &Target::Host, &vmfb, &[])
            .unwrap();
        let mut spans = kv_session(&r, &vmfb, Device::LocalTask);
        let mut full = kv_session_full(&r, &vmfb);
        failures.extend(spans_against_full(
            name,
            &mut spans,
            &mut full,
            ("host", TIE_MARGIN),
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The session runs IREE's threads under SCHED_BATCH (policy 3), where
/// the wait on a call's fence does not spin behind a preempted worker
/// (spec/iree.md, "The session's scheduling policy"): every IREE worker
/// thread of this process, once a prefill and a decode have run.
#[test]
fn the_session_runs_its_threads_under_sched_batch() {
    let Some(tc) = toolchain() else { return };
    let dir = tmpdir();
    let r = export_kv("tiny-llama-tied-gqa", 16, dir.path(), DType::F32);
    let vmfb = dir.path().join("tiny-kv-host.vmfb");
    common::compiled::compile(&tc, r.kv_mlir.as_ref().unwrap(), &Target::Host, &vmfb, &[]).unwrap();
    let mut s = kv_session(&r, &vmfb, Device::LocalTask);
    s.reset().unwrap();
    let next = s.prefill(&[1, 2, 3, 0], 0, 3).unwrap();
    s.decode(next.id, 3).unwrap();
    let policies: Vec<(String, u32)> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.ok()?.path().join("stat")).ok()?;
            let (comm, rest) = stat.rsplit_once(") ")?;
            // Field 41 of proc(5)'s stat; `rest` starts at field 3.
            let policy = rest.split(' ').nth(38)?.parse().ok()?;
            Some((comm.split_once(" (")?.1.to_string(), policy))
        })
        .filter(|(name, _)| name.starts_with("iree-worker"))
        .collect();
    assert!(
        !policies.is_empty(),
        "no IREE worker threads in this process"
    );
    assert!(policies.iter().all(|(_, p)| *p == 3), "{policies:?}");
}

/// `--weights keep` (block-quantized matrices widened in the graph): the
/// KV pair of both quantized GGUF fixtures, teacher-forced, predicts
/// transformers' argmax in the interpreter and on the host.
#[test]
fn keep_weights_kv_matches_transformers_in_the_interpreter_and_on_the_host() {
    let tc = toolchain();
    let mut failures = Vec::new();
    for name in ["tiny-llama-quant-mix", "tiny-llama-quant-tied"] {
        let exp: HfExpected = serde_json::from_str(
            &std::fs::read_to_string(fixture(&format!("gguf/quant/{name}.json"))).unwrap(),
        )
        .unwrap();
        let ckpt = Checkpoint::open(fixture(&format!("gguf/quant/{name}.gguf"))).unwrap();
        let rs = exp.seqs.last().unwrap();
        let dir = tmpdir();
        let r = export_kv_of(&ckpt, Weights::Keep, rs.seq, dir.path(), DType::F32);
        let mut models = interp_and_host(&r, tc.as_ref(), dir.path());
        for (what, m) in &mut models {
            for (ci, c) in rs.cases.iter().enumerate() {
                let bad = teacher_forced(m.as_mut(), &c.input, &c.argmax, &c.margin);
                if !bad.is_empty() {
                    failures.push(format!("{name} {what} case {ci}: {}", bad.join("; ")));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `--weights w8a8` (i8 matrices, activations rounded to i8 per row at
/// each product), `w8a16` (two i8 terms per row), `w8a16e` (its embedding
/// rows in two terms) and `w16a16` (two terms on both sides): each
/// position's row is rounded on its own, so the KV
/// pair, teacher-forced in the interpreter and on the host, predicts the
/// redecode forward's ids at every position (the interpreter's reading of
/// the forward module; its agreement with transformers is
/// tests/quantized.rs's).
#[test]
fn i8_forms_kv_match_their_redecode_forward() {
    for weights in [
        Weights::W8A8,
        Weights::W8A16,
        Weights::W8A16E,
        Weights::W16A16,
    ] {
        i8_rows_kv_matches_its_redecode_forward(weights);
    }
}

fn i8_rows_kv_matches_its_redecode_forward(weights: Weights) {
    let tc = toolchain();
    let name = "tiny-llama-untied-mha";
    let exp = hf_expected(name);
    let rs = exp.seqs.last().unwrap();
    let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
    let dir = tmpdir();
    let r = export_kv_of(&ckpt, weights, rs.seq, dir.path(), DType::F32);
    let mut models = interp_and_host(&r, tc.as_ref(), dir.path());
    let mut failures = Vec::new();
    for (ci, c) in rs.cases.iter().enumerate() {
        let redecode = kiln::interp::predict_file(&r.mlir, &r.irpa, None, &c.input).unwrap();
        let every = vec![f64::INFINITY; redecode.len()];
        for (what, m) in &mut models {
            let bad = teacher_forced(m.as_mut(), &c.input, &redecode, &every);
            if !bad.is_empty() {
                failures.push(format!("{weights} {what} case {ci}: {}", bad.join("; ")));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The pair with bf16 caches and an attention span at 8 (P 4, N 16)
/// compiles for four targets; [`two_turns`] (prefill chunks and decodes
/// on span 8, then past it on the functions over N) gives the host's ids
/// in the interpreter, on arm64 under qemu (one `iree-run-module` per
/// call, bf16 caches through files) and on lavapipe (the caches as i32
/// pairs), and the host's ids equal those of the same session run over
/// all N positions.
#[test]
fn kv_module_compiles_for_four_targets_and_emulated_runs_match_the_host() {
    let Some(tc) = toolchain() else { return };
    let dir = tmpdir();
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-bf16")).unwrap();
    let opts = KvCacheOptions::default()
        .prompt_len(P)
        .cache_dtype(DType::BF16)
        .spans(vec![8]);
    let r = export_tiny_kv(&ckpt, DType::BF16, 16, dir.path(), opts);
    let kv = r.manifest.kv.clone().unwrap().pair;
    assert_eq!((kv.cache_dtype.as_str(), kv.spans.len()), ("bf16", 1));
    let targets = [
        Target::Host,
        Target::Arm64,
        Target::Arm32,
        Target::parse("vulkan").unwrap(),
    ];
    let outs = common::compiled::compile_many(
        &tc,
        r.kv_mlir.as_ref().unwrap(),
        &targets,
        dir.path(),
        "tiny-kv",
        2,
    )
    .unwrap();
    let session = |vmfb: &Path, device| kv_session(&r, vmfb, device);
    let host = two_turns(&mut session(&outs[0], Device::LocalTask));
    assert_eq!(host.len(), 4, "{host:?}");
    assert_eq!(two_turns(&mut kv_session_full(&r, &outs[0])), host);
    assert_eq!(two_turns(&mut interp_spans(&r)), host, "interpreter");
    // The runtimes kiln generate opens: arm64 under qemu (kiln's runtime
    // program for a whole generation), arm32 under qemu, lavapipe.
    let driver = |vmfb: &Path, device, emulate| {
        let o = DriverOptions::new(vmfb, &r.irpa, &r.manifest.function, 16)
            .kv(kv.clone())
            .device(device)
            .emulate(emulate);
        match Driver::open(&o).unwrap().model {
            DriverLoop::Kv(kv) => kv,
            DriverLoop::Redecode(_) => unreachable!("a KV pair"),
        }
    };
    if arm64_emulation(&tc) {
        let mut arm = driver(&outs[1], Device::LocalTask, Some(Emulation::Arm64));
        assert_eq!(two_turns(arm.as_mut()), host, "arm64 under qemu");
    }
    // The arm32 module under qemu-arm: kiln's runtime program for armv7
    // (local-sync) when install-deps built it, else an armv7
    // iree-run-module per call.
    if arm32_emulation(&tc) {
        let mut arm32 = driver(&outs[2], Device::LocalTask, Some(Emulation::Arm32));
        assert_eq!(two_turns(arm32.as_mut()), host, "arm32 under qemu");
    }
    if lavapipe_present() {
        let mut vk = driver(&outs[3], Device::Vulkan, None);
        assert_eq!(two_turns(vk.as_mut()), host, "lavapipe");
    }
}

/// Caches over the tensor bound are split into groups of layers (here a
/// 2048-byte bound: one tensor per layer, two K and two V arguments): the
/// manifest says so, and the interpreter, the host session, one
/// iree-run-module per call and lavapipe give the ids of the stacked pair.
#[test]
fn caches_over_the_bound_are_split_into_layer_groups() {
    let name = "tiny-llama-bf16";
    let dir = tmpdir();
    let stacked = export_kv(name, 16, dir.path(), DType::F32);
    let split_dir = tmpdir();
    let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
    let split = export(
        &ckpt,
        &ExportOptions::new(16, split_dir.path())
            .name("tiny")
            // The bf16 fixture's values, stored as f32: the same weights.
            .weights(DType::F32)
            .max_tensor_bytes(2048)
            .kv(KvCacheOptions::default()
                .prompt_len(P)
                .max_context(16)
                .cache_dtype(DType::F32)),
    )
    .unwrap();
    let kv = split.manifest.kv.clone().unwrap().pair;
    assert_eq!(
        (kv.cache_count, kv.cache_shape.as_slice()),
        (2, &[1, 2, 16, 12][..])
    );
    assert_eq!(stacked.manifest.kv.as_ref().unwrap().pair.cache_count, 1);
    let want = two_turns(&mut interp_kv(&stacked));
    assert_eq!(two_turns(&mut interp_kv(&split)), want, "interpreter");
    let Some(tc) = toolchain() else { return };
    let targets = [Target::Host, Target::parse("vulkan").unwrap()];
    let outs = common::compiled::compile_many(
        &tc,
        split.kv_mlir.as_ref().unwrap(),
        &targets,
        split_dir.path(),
        "tiny-kv",
        2,
    )
    .unwrap();
    let mut host = kv_session(&split, &outs[0], Device::LocalTask);
    assert_eq!(two_turns(&mut host), want, "host session");
    let mut per_call = KvDriver::new(
        RunModule {
            toolchain: tc.clone(),
            vmfb: outs[0].clone(),
            options: RunOptions::default()
                .params(vec![("model".into(), split.irpa.clone())])
                .exact_outputs(kv.outputs()),
        },
        KvSpec::try_from(&kv).unwrap(),
    );
    assert_eq!(two_turns(&mut per_call), want, "iree-run-module per call");
    if lavapipe_present() {
        let mut vk = kv_session(&split, &outs[1], Device::Vulkan);
        assert_eq!(two_turns(&mut vk), want, "lavapipe");
    }
}

/// A two-turn conversation on a pair with P = 4, N = 16: a 7-token prompt
/// (two prefill chunks), 3 greedy tokens, then a turn of the last one plus
/// 5 new ids from position 9 (a chunk at 9, then one that would pass N and
/// starts at 12 instead), and greedy tokens until the cache is full.
/// Returns every generated id.
fn two_turns(model: &mut dyn KvStep) -> Vec<i32> {
    let mut c = Conversation::new(model).unwrap();
    let next = c.append(&[5, 17, 3, 9, 11, 2, 6]).unwrap();
    let g1 = c.generate(next, 3, &[], |_| true).unwrap();
    assert_eq!((g1.stop, c.tokens().len()), (Stop::MaxNewTokens, 9));
    let mut turn = vec![*g1.ids.last().unwrap()];
    turn.extend([7, 8, 1, 4, 6]);
    let next = c.append(&turn).unwrap();
    assert_eq!(c.remaining(), 1);
    let g2 = c.generate(next, 8, &[], |_| true).unwrap();
    assert_eq!(g2.stop, Stop::ContextFull);
    [g1.ids, g2.ids].concat()
}

/// Chunked prefill is exact: a prompt of 2.5 × P gives the ids of one
/// prefill on a module exported with P = 16, and turn 2 of a conversation
/// predicts what a fresh prefill of the whole conversation predicts.
#[test]
fn chunked_prefill_and_turns_equal_one_prefill() {
    let dir = tmpdir();
    let r = export_kv("tiny-llama-untied-mha", 33, dir.path(), DType::F32);
    let big = tmpdir();
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-untied-mha")).unwrap();
    let r16 = export(
        &ckpt,
        &ExportOptions::new(33, big.path())
            .name("tiny")
            .weights(DType::F32)
            .kv(KvCacheOptions::default()
                .prompt_len(16)
                .max_context(33)
                .cache_dtype(DType::F32)),
    )
    .unwrap();
    let prompt: Vec<i32> = (0..10).map(|i| (i * 7 + 3) % 80).collect();
    let (mut small, mut one) = (interp_kv(&r), interp_kv(&r16));
    let a = generate_kv(&mut small, &prompt, 12, &[], Sampler::greedy(), |_| true).unwrap();
    let b = generate_kv(&mut one, &prompt, 12, &[], Sampler::greedy(), |_| true).unwrap();
    assert_eq!(a, b);
    // Two turns against one fresh prefill of everything.
    let mut c = Conversation::new(&mut small).unwrap();
    let next = c.append(&prompt).unwrap();
    let g = c.generate(next, 4, &[], |_| true).unwrap();
    let mut turn = vec![*g.ids.last().unwrap()];
    turn.extend([11, 12, 13, 14, 15, 16]);
    let second = c.append(&turn).unwrap();
    let all = c.tokens().to_vec();
    assert_eq!(all.len(), 10 + 3 + 7);
    let mut fresh = Conversation::new(&mut one).unwrap();
    assert_eq!(fresh.append(&all).unwrap(), second);
    // The redecode forward agrees at the last position.
    let mut re = Redecode::<Interpreter>::open(&r.mlir, &r.irpa, &r.manifest.function).unwrap();
    let out = re.forward(&pad(&all, 33)).unwrap();
    assert_eq!(out[all.len() - 1], second.id);
}

/// bf16 caches hold half the bytes and, on this fixture, generate the f32
/// caches' ids in the interpreter, on the host and on lavapipe (there as
/// i32 pairs).
#[test]
fn bf16_caches_match_f32_on_the_cpu_and_on_vulkan() {
    let dir = tmpdir();
    let r = export_kv("tiny-llama-tied-gqa", 16, dir.path(), DType::BF16);
    let kv = r.manifest.kv.clone().unwrap().pair;
    assert_eq!(kv.cache_dtype, "bf16");
    let text = std::fs::read_to_string(r.kv_mlir.as_ref().unwrap()).unwrap();
    assert!(text.contains("tensor<2x2x16x12xbf16>"), "bf16 cache type");
    let f32_dir = tmpdir();
    let r32 = export_kv("tiny-llama-tied-gqa", 16, f32_dir.path(), DType::F32);
    let prompt = [5, 17, 3];
    let greedy = |r: &ExportReport| {
        generate_kv(
            &mut interp_kv(r),
            &prompt,
            16,
            &[],
            Sampler::greedy(),
            |_| true,
        )
        .unwrap()
    };
    let (g16, g32) = (greedy(&r), greedy(&r32));
    assert_eq!(g16, g32);
    let Some(tc) = toolchain() else { return };
    let vmfb = dir.path().join("tiny-kv-host.vmfb");
    common::compiled::compile(&tc, r.kv_mlir.as_ref().unwrap(), &Target::Host, &vmfb, &[]).unwrap();
    let mut s = kv_session(&r, &vmfb, Device::LocalTask);
    assert_eq!(
        generate_kv(&mut s, &prompt, 16, &[], Sampler::greedy(), |_| true).unwrap(),
        g32
    );
    let vk = dir.path().join("tiny-kv-vulkan.vmfb");
    common::compiled::compile(
        &tc,
        r.kv_mlir.as_ref().unwrap(),
        &Target::parse("vulkan").unwrap(),
        &vk,
        &[],
    )
    .unwrap();
    assert_eq!(
        kv_spec(&r, Device::Vulkan).caches[0].to_string(),
        "tensor<2x2x16x6xi32>"
    );
    if lavapipe_present() {
        let mut s = kv_session(&r, &vk, Device::Vulkan);
        assert_eq!(
            generate_kv(&mut s, &prompt, 16, &[], Sampler::greedy(), |_| true).unwrap(),
            g32
        );
    }
}

/// The library refuses a prompt id at or past the vocabulary before any
/// call: `Driver::generate`, on both loops, with the vocabulary size from
/// the export manifest (here in kiln's interpreter, through the same
/// `Driver` that opens IREE sessions).
#[test]
fn the_driver_refuses_ids_past_the_vocabulary() {
    let dir = tmpdir();
    let r = export_kv("tiny-llama-tied-gqa", 8, dir.path(), DType::F32);
    let vocab = r.manifest.vocab_size;
    let kv = r.manifest.kv.clone().unwrap().pair;
    let f = &r.manifest.function;
    let kv_mlir = r.kv_mlir.as_ref().unwrap();
    for o in [
        DriverOptions::new(&r.mlir, &r.irpa, f, 8),
        DriverOptions::new(kv_mlir, &r.irpa, f, 8).kv(kv),
    ] {
        let mut d = Driver::open(&o.vocab_size(vocab)).unwrap();
        let e = d
            .generate(&[1, vocab as i32], 2, &[], Sampler::greedy(), |_| true)
            .err();
        assert!(
            matches!(
                e,
                Some(kiln::generate::GenerateError::IdPastVocabulary { id, vocab_size })
                    if id == vocab as i64 && vocab_size == vocab
            ),
            "{e:?}"
        );
        let g = d
            .generate(&[1, vocab as i32 - 1], 2, &[], Sampler::greedy(), |_| true)
            .unwrap();
        assert_eq!(g.ids.len(), 2);
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tmpdir();
    let r = export_kv("tiny-llama-tied-gqa", 8, dir.path(), DType::F32);
    let mut kv = interp_kv(&r);
    // A prompt longer than P is prefilled in chunks; one that fills N is
    // an error.
    let g = generate_kv(&mut kv, &[1, 2, 3, 4, 5], 2, &[], Sampler::greedy(), |_| {
        true
    })
    .unwrap();
    assert_eq!(g.ids.len(), 2);
    let e = generate_kv(&mut kv, &[1; 8], 2, &[], Sampler::greedy(), |_| true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("the max context N is 8"), "{e}");
    // A turn that would pass N leaves the conversation as it was.
    let mut c = Conversation::new(&mut kv).unwrap();
    c.append(&[1, 2, 3, 4, 5, 6]).unwrap();
    let e = c.append(&[7, 8, 9]).unwrap_err().to_string();
    assert!(
        e.contains("holds 6 tokens and this adds 3: more than the max context N = 8"),
        "{e}"
    );
    assert_eq!(c.tokens().len(), 6);
    // A decode past N; a chunk that passes N; calls before a reset.
    kv.reset().unwrap();
    kv.prefill(&pad(&[1, 2], P), 0, 2).unwrap();
    let e = kv.decode(7, 8).unwrap_err().to_string();
    assert!(e.contains("past the max context N = 8"), "{e}");
    let e = kv.prefill(&pad(&[1, 2], P), 5, 2).unwrap_err().to_string();
    assert!(e.contains("start + P ≤ N = 8"), "{e}");
    let mut fresh = interp_kv(&r);
    let e = fresh.decode(7, 1).unwrap_err().to_string();
    assert!(e.contains("before a reset"), "{e}");
    // Caches of the wrong shape, fed to the decode function.
    let text = std::fs::read_to_string(r.kv_mlir.as_ref().unwrap()).unwrap();
    let m = kiln::graph::Module::parse(&text).unwrap();
    let kvm = &r.manifest.kv.as_ref().unwrap().pair;
    let params = <dyn kiln::params::ParamSource>::open(&r.irpa).unwrap();
    let bad = kiln::interp::Tensor::f32(&[2, 2, 4, 12], vec![0.0; 2 * 2 * 4 * 12]);
    let e = kiln::interp::run(
        m.function(Some(&kvm.decode)).unwrap(),
        &[
            kiln::interp::Tensor::i32(&[1], vec![3]),
            kiln::interp::Tensor::i32(&[], vec![2]),
            bad.clone(),
            bad,
        ],
        &params,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("argument 2 of @tiny_decode must be tensor<2x2x8x12xf32>"),
        "{e}"
    );
    // CLI: too long a prompt, and a module exported without --kv-cache.
    let kv_mlir = r.kv_mlir.as_ref().unwrap().to_str().unwrap().to_string();
    let (code, _, err) = kiln(&[
        "generate",
        &kv_mlir,
        "--kv-cache",
        "--tokens",
        "1,2,3,4,5,6,7,8",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the max context N is 8"), "{err}");
    // A prompt longer than P: chunked; the summary says why it stopped.
    let (code, out, err) = kiln(&[
        "generate",
        &kv_mlir,
        "--kv-cache",
        "--tokens",
        "1,2,3,4,5,6",
        "--max-new-tokens",
        "5",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.split_whitespace().count(), 2, "{out}");
    assert!(err.contains("stopped: context full (N = 8)"), "{err}");
    // A module named as the KV pair is driven as one without the flag:
    // the same ids.
    let (code2, out2, err2) = kiln(&[
        "generate",
        &kv_mlir,
        "--tokens",
        "1,2,3,4,5,6",
        "--max-new-tokens",
        "5",
    ]);
    assert_eq!(code2, 0, "{err2}");
    assert_eq!(out2, out);
    assert!(err2.contains("KV cache P"), "{err2}");
    // `kiln interp` (and `kiln run`) call the SEQ forward, which a KV
    // module does not have: they say so and point to generate.
    let (code, _, err) = kiln(&["interp", &kv_mlir, "--tokens", "1,2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is a KV-cache module") && err.contains("--kv-cache"),
        "{err}"
    );
    // (`kiln run` decides by the name, before loading the module.)
    let vmfb = dir.path().join("tiny-kv-host.vmfb");
    std::fs::write(&vmfb, b"not loaded").unwrap();
    let (code, _, err) = kiln(&["run", vmfb.to_str().unwrap(), "--tokens", "1,2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is a KV-cache module") && err.contains("kiln generate"),
        "{err}"
    );
    let plain = tmpdir();
    let ckpt = Checkpoint::open(fixture("hf/tiny-llama-tied-gqa")).unwrap();
    let p = export(&ckpt, &ExportOptions::new(8, plain.path()).name("tiny")).unwrap();
    let (code, _, err) = kiln(&[
        "generate",
        p.mlir.to_str().unwrap(),
        "--kv-cache",
        "--tokens",
        "1,2",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("records no KV-cache export"), "{err}");
    // Export: N must exceed P; KV flags need --kv-cache.
    let fx = fixture("hf/tiny-llama-tied-gqa");
    let out = tmpdir();
    let (code, _, err) = kiln(&[
        "export",
        fx.to_str().unwrap(),
        "--seq",
        "8",
        "--out",
        out.path().to_str().unwrap(),
        "--kv-cache",
        "--max-context",
        "8",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("must exceed the prompt length P (8)"), "{err}");
    assert!(files_in(out.path()).is_empty(), "no partial output");
    let (code, _, err) = kiln(&[
        "export",
        fx.to_str().unwrap(),
        "--seq",
        "8",
        "--prompt-len",
        "4",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--kv-cache"), "{err}");
}
