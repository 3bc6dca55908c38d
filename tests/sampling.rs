//! Sampling on the KV pair (`kiln export --kv-cache --sampling topk=K`):
//!
//! - the in-graph top-K of every tiny transformers fixture, through chunked
//!   prefill and decode in kiln's interpreter, equals transformers' top-K
//!   logits within 1e-4 (ids too, except among near ties);
//! - greedy stays what it was: a sampling module's greedy ids equal a
//!   greedy module's; `--top-k 1` is greedy; a seed repeats its ids and
//!   another seed gives others;
//! - one fixture compiled for the host, arm64 and Vulkan: a sampled
//!   two-turn conversation gives the interpreter's ids on the host, under
//!   qemu and on lavapipe;
//! - bad input: every flag out of range, sampling flags on a greedy module,
//!   `--top-k` above K, a bad `--sampling`.

use crate::common;
use common::*;
use kiln::export::{ExportReport, KvCacheOptions};
use kiln::generate::{
    generate_kv, Conversation, Interpreter, KvDriver, KvStep, Prediction, RunModule, Sampler,
    SamplingParams,
};
use kiln::iree::{Device, Emulation, KvSession, RunOptions, SessionSpec, Target};
use kiln::models::Checkpoint;
use kiln::step::KvSpec;
use std::path::Path;

/// Prompt bucket of the fixtures' KV pairs.
const P: usize = 4;

/// transformers' top-(K+1) logits at some positions (`tests/fixtures/hf/*/topk.json`,
/// `scripts/fixtures/make_topk_fixtures.py`).
#[derive(serde::Deserialize)]
struct TopK {
    k: usize,
    input: Vec<i32>,
    positions: Vec<TopKAt>,
}

#[derive(serde::Deserialize)]
struct TopKAt {
    position: usize,
    ids: Vec<i32>,
    logits: Vec<f32>,
}

fn export_kv(name: &str, seq: usize, dir: &Path, top_k: Option<usize>) -> ExportReport {
    let ckpt = Checkpoint::open(fixture(&format!("hf/{name}"))).unwrap();
    let kv = KvCacheOptions::default().prompt_len(P).top_k(top_k);
    export_tiny_kv(&ckpt, hf_expected(name).dtype(), seq, dir, kv)
}

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

/// Teacher forcing: the first 10 ids of `input` in prefill chunks of P
/// (predictions at 3, 7 and 9), then each later id decoded at its
/// position. Returns the prediction made at each position.
fn predictions(model: &mut dyn KvStep, input: &[i32]) -> Vec<Option<Prediction>> {
    let mut got = vec![None; input.len()];
    model.reset().unwrap();
    let k = 10;
    for start in (0..k).step_by(P) {
        let len = P.min(k - start);
        let chunk = pad(&input[start..start + len], P);
        got[start + len - 1] = Some(model.prefill(&chunk, start, len).unwrap());
    }
    for (pos, &id) in input.iter().enumerate().skip(k) {
        got[pos] = Some(model.decode(id, pos).unwrap());
    }
    got
}

/// Where kiln's top-K differs from transformers': values beyond 1e-4, or
/// ids, unless the reference has a near tie (within 2e-4) at that rank.
fn topk_mismatches(name: &str, want: &TopKAt, got: &Prediction) -> Vec<String> {
    let mut bad = Vec::new();
    let k = got.top.len();
    if got.top.first().map(|c| c.id) != Some(got.id) {
        bad.push(format!(
            "{name} @{}: top[0] is not the argmax",
            want.position
        ));
    }
    for (r, c) in got.top.iter().enumerate() {
        let (wi, wv) = (want.ids[r], want.logits[r]);
        if (c.logit - wv).abs() > 1e-4 {
            bad.push(format!(
                "{name} @{} rank {r}: logit {} vs transformers {wv}",
                want.position, c.logit
            ));
        }
        let near = |o: usize| want.logits.get(o).is_some_and(|&v| (v - wv).abs() < 2e-4);
        let tied = near(r + 1) || (r > 0 && near(r - 1));
        if c.id != wi && !tied {
            bad.push(format!(
                "{name} @{} rank {r}: id {} vs transformers {wi}",
                want.position, c.id
            ));
        }
    }
    if k != want.ids.len() - 1 {
        bad.push(format!(
            "{name}: {k} candidates, expected {}",
            want.ids.len() - 1
        ));
    }
    bad
}

#[test]
fn topk_matches_transformers_on_every_fixture() {
    let mut failures = Vec::new();
    for name in HF_FIXTURES {
        let path = fixture(&format!("hf/{name}/topk.json"));
        let want: TopK = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let dir = tmpdir();
        let r = export_kv(name, want.input.len(), dir.path(), Some(want.k));
        assert_eq!(r.manifest.kv.as_ref().unwrap().pair.top_k, Some(want.k));
        let got = predictions(&mut interp_kv(&r), &want.input);
        for at in &want.positions {
            let p = got[at.position].as_ref().expect("a prediction there");
            failures.extend(topk_mismatches(name, at, p));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn sampler(temperature: f32, top_k: usize, seed: u64) -> Sampler {
    Sampler::new(
        SamplingParams::default()
            .temperature(temperature)
            .top_k(top_k)
            .top_p(0.95)
            .seed(seed),
    )
    .unwrap()
}

#[test]
fn greedy_is_unchanged_top_k_1_is_greedy_and_seeds_repeat() {
    let name = "tiny-qwen2";
    let (d1, d2) = (tmpdir(), tmpdir());
    let greedy_module = export_kv(name, 33, d1.path(), None);
    let sampling_module = export_kv(name, 33, d2.path(), Some(40));
    let prompt: Vec<i32> = hf_expected(name).seqs[1].cases[0].input[..10].to_vec();
    let mut plain = interp_kv(&greedy_module);
    let mut kv = interp_kv(&sampling_module);
    let greedy = generate_kv(&mut plain, &prompt, 20, &[], Sampler::greedy(), |_| true).unwrap();
    assert_eq!(
        greedy,
        generate_kv(&mut kv, &prompt, 20, &[], Sampler::greedy(), |_| true).unwrap()
    );
    let run = |kv: &mut KvDriver<Interpreter>, s: Sampler| {
        generate_kv(kv, &prompt, 20, &[], s, |_| true).unwrap().ids
    };
    assert_eq!(run(&mut kv, sampler(1.0, 1, 5)), greedy.ids, "top-k 1");
    let a = run(&mut kv, sampler(1.5, 0, 5));
    assert_eq!(a, run(&mut kv, sampler(1.5, 0, 5)), "same seed");
    assert_ne!(a, run(&mut kv, sampler(1.5, 0, 6)), "another seed");
    assert_ne!(a, greedy.ids, "sampling at T 1.5 differs from greedy");
    // Sampling flags on a greedy module: a clear error (the library's
    // states the facts; `kiln generate` adds the flags, below).
    let e = generate_kv(&mut plain, &prompt, 2, &[], sampler(1.0, 0, 1), |_| true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("needs the top-K candidates, and the module returns none"),
        "{e}"
    );
}

/// A two-turn conversation sampled with a fixed seed (P = 4, N = 16).
fn sampled_turns(model: &mut dyn KvStep) -> Vec<i32> {
    let mut c = Conversation::new(model).unwrap();
    c.set_sampler(sampler(1.2, 8, 11));
    let next = c.append(&[5, 17, 3, 9, 11, 2, 6]).unwrap();
    let g1 = c.generate(next, 3, &[], |_| true).unwrap();
    let mut turn = vec![*g1.ids.last().unwrap()];
    turn.extend([7, 8, 1, 4, 6]);
    let next = c.append(&turn).unwrap();
    let g2 = c.generate(next, 8, &[], |_| true).unwrap();
    [g1.ids, g2.ids].concat()
}

#[test]
fn sampled_ids_agree_on_host_arm64_and_vulkan() {
    let Some(tc) = toolchain() else { return };
    let dir = tmpdir();
    let r = export_kv("tiny-llama-bf16", 16, dir.path(), Some(16));
    let kv = r.manifest.kv.clone().unwrap().pair;
    let targets = [
        Target::Host,
        Target::Arm64,
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
    let spec = KvSpec::try_from(&kv).unwrap();
    let session = |vmfb: &Path, device| {
        KvSession::new(
            SessionSpec::new(vmfb, &r.irpa)
                .device(device)
                .open()
                .unwrap(),
            &spec,
        )
    };
    let want = sampled_turns(&mut interp_kv(&r));
    let mut host = session(&outs[0], Device::LocalTask).unwrap();
    assert_eq!(sampled_turns(&mut host), want, "host");
    // The host's candidates are the interpreter's, to float rounding.
    let input: Vec<i32> = (0..16).map(|i| (i * 7 + 3) % 96).collect();
    let (a, b) = (
        predictions(&mut host, &input),
        predictions(&mut interp_kv(&r), &input),
    );
    for (x, y) in a
        .iter()
        .zip(&b)
        .filter_map(|(x, y)| x.as_ref().zip(y.as_ref()))
    {
        assert_eq!(x.id, y.id);
        for (c, d) in x.top.iter().zip(&y.top) {
            assert!((c.logit - d.logit).abs() < 1e-4, "{x:?} vs {y:?}");
        }
    }
    if common::arm64_emulation(&tc) {
        let mut arm = KvDriver::new(
            RunModule {
                toolchain: tc.clone(),
                vmfb: outs[1].clone(),
                options: RunOptions::default()
                    .params(vec![("model".into(), r.irpa.clone())])
                    .emulate(Emulation::Arm64)
                    .exact_outputs(5),
            },
            spec.clone(),
        );
        assert_eq!(sampled_turns(&mut arm), want, "arm64 under qemu");
    }
    if lavapipe_present() {
        let mut vk = session(&outs[2], Device::Vulkan).unwrap();
        assert_eq!(sampled_turns(&mut vk), want, "lavapipe");
    }
}

#[test]
fn the_cli_samples_repeatably_and_refuses_bad_flags() {
    let (d1, d2) = (tmpdir(), tmpdir());
    let greedy = export_kv("tiny-mistral", 33, d1.path(), None);
    let sampling = export_kv("tiny-mistral", 33, d2.path(), Some(40));
    let path = |r: &ExportReport| r.kv_mlir.as_ref().unwrap().to_str().unwrap().to_string();
    let (g, s) = (path(&greedy), path(&sampling));
    let gen = |m: &str, extra: &[&str]| {
        let mut args = vec!["generate", m, "--kv-cache", "--tokens", "5,17,3,9,11,2"];
        args.extend_from_slice(&["--max-new-tokens", "12"]);
        args.extend_from_slice(extra);
        kiln(&args)
    };
    let (code, greedy_out, err) = gen(&g, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        gen(&s, &[]).1,
        greedy_out,
        "a sampling module decodes greedy ids by default"
    );
    assert_eq!(
        gen(&s, &["--temperature", "1", "--top-k", "1"]).1,
        greedy_out
    );
    let sampled = gen(&s, &["--temperature", "1.5", "--seed", "42"]);
    assert_eq!(sampled.0, 0, "{}", sampled.2);
    assert_eq!(
        gen(&s, &["--temperature", "1.5", "--seed", "42"]).1,
        sampled.1
    );
    assert_ne!(sampled.1, greedy_out);
    // Without --seed the seed is drawn and reported.
    let (code, _, err) = gen(&s, &["--temperature", "0.7"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("sampling with --seed "), "{err}");
    for (flags, want) in [
        (
            &["--temperature", "-1"][..],
            "--temperature -1: must be ≥ 0",
        ),
        (
            &["--temperature", "1", "--top-p", "0"][..],
            "--top-p 0: must be in (0, 1]",
        ),
        (&["--temperature", "1", "--top-p", "1.5"][..], "--top-p 1.5"),
        (&["--temperature", "1", "--min-p", "2"][..], "--min-p 2"),
        (&["--repeat-penalty", "0"][..], "--repeat-penalty 0"),
        (&["--temperature", "1", "--top-k", "0"][..], "--top-k 0"),
        (
            &["--temperature", "1", "--top-k", "41"][..],
            "only K = 40 candidates",
        ),
    ] {
        let (code, _, err) = gen(&s, flags);
        assert_eq!(code, 2, "{flags:?}: {err}");
        assert!(err.contains(want), "{flags:?}: {err}");
    }
    let (code, _, err) = gen(&g, &["--temperature", "0.8"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--sampling topk=K"), "{err}");
    // Export: a bad --sampling names the flag.
    let ckpt = fixture("hf/tiny-mistral");
    let out = tmpdir();
    let (code, _, err) = kiln(&[
        "export",
        ckpt.to_str().unwrap(),
        "-o",
        out.path().to_str().unwrap(),
        "--seq",
        "8",
        "--kv-cache",
        "--sampling",
        "nucleus",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--sampling nucleus"), "{err}");
    assert!(files_in(out.path()).is_empty());
}
