//! `kiln generate MODULE (--prompt TEXT | --tokens IDS) …`: text
//! generation with exactly the phone's redecode loop, or (`--kv-cache`)
//! with the prefill + decode pair, which gives the same ids. MODULE is a
//! `.vmfb` (run by IREE) or a `.mlir` (run by kiln's interpreter).

use super::gen_common::{chat_template, template_error, SamplingArgs};
use super::run::{parse_tokens, resolve, Resolved};
use super::stop::StopStrings;
use crate::error::{Error, Result};
use kiln::generate::{Driver, DriverOptions, Generation, Sampler, Stop};
use kiln::iree::{Device, Emulation};
use kiln::manifest::KvPair;
use kiln::tokenizer::{StreamDecoder, Tokenizer};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Arguments of `kiln generate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The compiled module (`NAME-<target>.vmfb`), with `NAME.json` beside it.
    pub module: PathBuf,
    /// Parameter file (default: the manifest's `.irpa`).
    #[arg(long, short = 'p', value_name = "FILE")]
    pub params: Option<PathBuf>,
    /// Prompt text (tokenized with the model's tokenizer).
    #[arg(long, conflicts_with = "tokens", required_unless_present = "tokens")]
    pub prompt: Option<String>,
    /// Prompt token ids, comma-separated.
    #[arg(long, value_name = "IDS")]
    pub tokens: Option<String>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub max_new_tokens: usize,
    /// Wrap the prompt in the model's chat template (a user message;
    /// ChatML when the model has no template).
    #[arg(long)]
    pub chat: bool,
    /// With --chat: a system message before the prompt.
    #[arg(long, value_name = "TEXT", requires = "chat")]
    pub system: Option<String>,
    /// With --chat: render with this Jinja chat template instead of the
    /// model's own.
    #[arg(long, value_name = "FILE", requires = "chat")]
    pub chat_template: Option<PathBuf>,
    /// Tokenizer: a GGUF file or an HF tokenizer.json (default: the
    /// checkpoint the module was exported from, when it is a GGUF file or
    /// an HF folder with tokenizer.json).
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// SEQ (default: from the manifest).
    #[arg(long, value_name = "N")]
    pub seq: Option<usize>,
    /// Function (default: from the manifest).
    #[arg(long, value_name = "NAME")]
    pub function: Option<String>,
    /// Runtime device.
    #[arg(long, value_parser = crate::values::device(), default_value_t = Device::LocalTask)]
    pub device: Device,
    /// Run the module under qemu: `arm64` or `arm32` (the whole
    /// generation in one process of kiln's runtime built for aarch64 or
    /// armv7, else, or with --per-step, one runtime process per step).
    #[arg(long, value_parser = crate::values::emulation(), value_name = "ARCH")]
    pub emulate: Option<Emulation>,
    /// Fix the number of local-task worker groups (default: IREE's detection).
    #[arg(long, value_name = "N", env = "KILN_TASK_GROUPS")]
    pub task_groups: Option<usize>,
    /// Use one iree-run-module process per step instead of a loaded session.
    #[arg(long)]
    pub per_step: bool,
    /// Use the IREE venv (or tool directory) at DIR.
    #[arg(long, value_name = "DIR")]
    pub iree_dir: Option<PathBuf>,
    /// Drive the KV-cache pair (`NAME-kv-<target>.vmfb` or
    /// `NAME-kv-gen.mlir` from `kiln export --kv-cache`): the prompt
    /// prefilled in chunks of P tokens, then one decode call per token,
    /// the caches kept on the device. Implied when MODULE is named as a
    /// KV-cache pair (`NAME-kv-…`).
    #[arg(long)]
    pub kv_cache: bool,
    /// Stop when the generated text contains STRING (repeatable); the
    /// string itself is not printed. Needs a tokenizer.
    #[arg(long, value_name = "STRING")]
    pub stop: Vec<String>,
    /// Sampling (a KV module exported with `--sampling topk=K`).
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Print one JSON report on stdout (the ids, the text with a
    /// tokenizer, why it stopped, prefill and decode times) instead of
    /// streaming the text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `kiln generate`.
pub fn run(mut a: Args) -> Result<i32> {
    if a.json {
        super::set_quiet();
    }
    let sampler = a.sampling.sampler()?;
    let r = resolve(&a.module, a.seq, a.function.clone(), None, a.params.clone())?;
    // A module named as the KV-cache pair is driven as one.
    a.kv_cache |= r.kv_module;
    let tok_path = a
        .tokenizer
        .clone()
        .or_else(|| r.manifest.source_tokenizer());
    // Token ids need no tokenizer to start: it only turns the output into
    // text, so it is read on another thread while the module loads (a
    // GGUF's vocabulary takes tens of milliseconds).
    let ids_only = a.prompt.is_none() && a.tokens.is_some();
    let (mut tokenizer, mut ids_note) = (None, None);
    if !ids_only {
        (tokenizer, ids_note) = open_tokenizer(tok_path.as_deref(), a.tokens.is_some())?;
    }
    let prompt = prompt_ids(&a, tokenizer.as_ref(), tok_path.as_deref())?;
    super::run::check_vocab(&r.manifest, &prompt)?;
    let kv = kv_pair(&a, &r, prompt.len())?;
    sampler.check_candidates(kv.as_ref().and_then(|k| k.top_k))?;
    let mut model = if ids_only {
        let (opened, model) = std::thread::scope(|s| {
            let tokenizer = s.spawn(|| open_tokenizer(tok_path.as_deref(), true));
            let model = open_model(&a, &r, kv.as_ref(), prompt.len());
            (tokenizer.join(), model)
        });
        (tokenizer, ids_note) = opened.expect("reading the tokenizer does not panic")?;
        model?
    } else {
        open_model(&a, &r, kv.as_ref(), prompt.len())?
    };
    let eos = r.manifest.eos_with(tokenizer.as_ref());
    if !a.stop.is_empty() && tokenizer.is_none() {
        return Err(Error::Usage(
            "--stop matches decoded text and needs a tokenizer: pass --tokenizer FILE".into(),
        ));
    }
    if let Some(note) = ids_note.filter(|_| !a.json) {
        eprintln!("kiln generate: {note}; printing token ids");
    }
    let t1 = std::time::Instant::now();
    let (g, text) = stream(&mut model, &a, &prompt, &eos, sampler, tokenizer.as_ref())?;
    let secs = t1.elapsed().as_secs_f64();
    let stopped = stop_reason(g.stop, kv.as_ref(), r.seq);
    if a.json {
        super::print_json(&report(&a, &prompt, &g, text, secs, &stopped));
    }
    crate::status!(
        "{}; {} new tokens in {secs:.2} s ({:.2} tokens/s); stopped: {stopped}",
        g.timings,
        g.ids.len(),
        g.ids.len() as f64 / secs.max(1e-9),
    );
    Ok(0)
}

/// `--json`'s report: what ran, the ids (and text), why it stopped, and
/// the figures of the summary line.
fn report(
    a: &Args,
    prompt: &[i32],
    g: &Generation,
    text: Option<String>,
    secs: f64,
    stopped: &str,
) -> serde_json::Value {
    let t = &g.timings;
    serde_json::json!({
        "module": a.module,
        "device": a.device.name(),
        "kv_cache": a.kv_cache,
        "prompt_tokens": prompt.len(),
        "ids": g.ids,
        "text": text,
        "stopped": stopped,
        "new_tokens": g.ids.len(),
        "seconds": secs,
        "prefill": {
            "tokens": t.prefill_tokens,
            "seconds": t.prefill.as_secs_f64(),
            "tokens_per_second": t.prefill_tokens_per_second(),
        },
        "decode": {
            "tokens": t.decode_tokens,
            "seconds": t.decode.as_secs_f64(),
            "ms_per_token": t.decode_ms_per_token(),
        },
    })
}

/// The tokenizer at `path`, if any. With token ids (`ids_given`) it only
/// turns the output into text: without one kiln prints ids, and the
/// second value is the note saying so once generation starts.
fn open_tokenizer(
    path: Option<&Path>,
    ids_given: bool,
) -> Result<(Option<Tokenizer>, Option<String>)> {
    Ok(match (path, ids_given) {
        (Some(p), false) => (Some(kiln::tokenizer::open(p)?), None),
        (Some(p), true) => match kiln::tokenizer::open(p) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(format!("no tokenizer ({e})"))),
        },
        (None, true) => (
            None,
            Some("no tokenizer (pass --tokenizer FILE for text)".to_string()),
        ),
        (None, false) => (None, None),
    })
}

/// The prompt's ids: `--prompt` encoded with the tokenizer, or `--tokens`.
fn prompt_ids(
    a: &Args,
    tokenizer: Option<&Tokenizer>,
    tok_path: Option<&Path>,
) -> Result<Vec<i32>> {
    match (&a.prompt, &a.tokens) {
        (Some(text), _) => {
            let t = tokenizer.ok_or_else(|| {
                Error::Usage(
                    "--prompt needs a tokenizer: pass --tokenizer FILE (a GGUF or tokenizer.json)"
                        .into(),
                )
            })?;
            encode_prompt(a, t, text, tok_path)
        }
        (None, Some(ids)) => {
            if a.chat {
                return Err(Error::Usage(
                    "--chat applies to --prompt text, not --tokens".into(),
                ));
            }
            parse_tokens(ids)
        }
        (None, None) => Err(Error::Usage("pass --prompt TEXT or --tokens IDS".into())),
    }
}

/// `--prompt` text as ids, in the chat template with `--chat`.
fn encode_prompt(a: &Args, t: &Tokenizer, text: &str, tok_path: Option<&Path>) -> Result<Vec<i32>> {
    let text = if a.chat {
        render_chat(a, t, text, tok_path)?
    } else {
        text.to_string()
    };
    let ids = t.encode_prompt(&text, a.chat)?;
    if ids.is_empty() && !text.is_empty() {
        return Err(Error::Usage(format!(
            "--prompt encodes to no tokens with {}: its vocabulary has no token (and no byte fallback) for these characters",
            tok_path.map_or("the tokenizer".into(), |p| p.display().to_string())
        )));
    }
    Ok(ids.into_iter().map(|x| x as i32).collect())
}

/// `--prompt` as a user message (after the `--system` one) rendered with
/// the chat template.
fn render_chat(a: &Args, t: &Tokenizer, text: &str, tok_path: Option<&Path>) -> Result<String> {
    let template = chat_template(t, a.chat_template.as_deref())?;
    let mut messages = Vec::new();
    if let Some(system) = &a.system {
        messages.push(("system", system.as_str()));
    }
    messages.push(("user", text));
    template
        .render(&messages, true)
        .map_err(|e| template_error(a.chat_template.as_deref(), tok_path, e))
}

/// With `--kv-cache` (or a module named as the KV-cache pair), the
/// manifest's KV pair; without, checks that the prompt leaves room in the
/// SEQ window.
fn kv_pair(a: &Args, r: &Resolved, prompt_len: usize) -> Result<Option<KvPair>> {
    if a.kv_cache {
        // The pair's functions, P and N are the manifest's: refuse what
        // would otherwise be ignored.
        if a.seq.is_some() || a.function.is_some() {
            return Err(Error::Usage(
                "--seq and --function apply to the redecode module; the KV-cache pair calls the manifest's prefill and decode functions with its P and N".into(),
            ));
        }
        return Ok(Some(r.manifest.kv_pair().ok_or_else(|| {
            Error::Usage(format!(
                "--kv-cache: the manifest beside {} records no KV-cache export (re-export with `kiln export … --kv-cache`)",
                a.module.display()
            ))
        })?));
    }
    if prompt_len >= r.seq {
        return Err(Error::Usage(format!(
            "the prompt has {} tokens but SEQ is {}: it must be at most {} tokens (export with a larger --seq)",
            prompt_len,
            r.seq,
            r.seq - 1
        )));
    }
    Ok(None)
}

/// Opens the module's driver and reports the prompt, the window and the
/// load time.
fn open_model(a: &Args, r: &Resolved, kv: Option<&KvPair>, prompt_len: usize) -> Result<Driver> {
    let t0 = std::time::Instant::now();
    let model = Driver::open(
        &DriverOptions::new(&a.module, &r.params, &r.function, r.seq)
            .scope(&r.scope)
            .kv(kv.cloned())
            .device(a.device)
            .emulate(a.emulate)
            .task_groups(a.task_groups)
            .per_step(a.per_step)
            .iree_dir(a.iree_dir.clone())
            .vocab_size(r.manifest.vocab_size()),
    )?;
    let load = t0.elapsed().as_secs_f64();
    match kv {
        Some(kv) => crate::status!(
            "prompt: {} tokens; KV cache P {} N {}; loaded in {load:.2}s",
            prompt_len,
            kv.prompt_len,
            kv.max_context
        ),
        None => crate::status!(
            "prompt: {} tokens; SEQ {}; loaded in {load:.2}s",
            prompt_len,
            r.seq
        ),
    }
    Ok(model)
}

/// Generates from `prompt`, streaming the text (ids without a tokenizer)
/// to stdout up to a `--stop` string, then a newline; with `--json`,
/// collects the text instead (returned when there is a tokenizer).
fn stream(
    model: &mut Driver,
    a: &Args,
    prompt: &[i32],
    eos: &[i32],
    sampler: Sampler,
    tokenizer: Option<&Tokenizer>,
) -> Result<(Generation, Option<String>)> {
    let mut stdout = std::io::stdout();
    let mut decoder = StreamDecoder::new();
    let mut stops = StopStrings::new(&a.stop);
    let mut stream_err = None;
    let mut collected = String::new();
    let on_token = |id: i32| {
        let (piece, go_on) = match tokenizer {
            Some(t) => match decoder.push(t, id as u32) {
                Ok(s) => {
                    let (text, hit) = stops.push(&s);
                    (text, !hit)
                }
                Err(e) => {
                    stream_err.get_or_insert(e);
                    (String::new(), false)
                }
            },
            None => (format!("{id} "), true),
        };
        if a.json {
            collected.push_str(&piece);
        } else {
            let _ = stdout.write_all(piece.as_bytes());
            let _ = stdout.flush();
        }
        go_on
    };
    let g = model.generate(prompt, a.max_new_tokens, eos, sampler, on_token)?;
    if let Some(e) = stream_err {
        return Err(e.into());
    }
    let mut rest = String::new();
    if g.stop != Stop::Caller {
        if let Some(t) = tokenizer {
            rest = stops.push(&decoder.finish(t)?).0;
        }
        rest.push_str(&stops.finish());
    }
    if a.json {
        collected.push_str(&rest);
        return Ok((g, tokenizer.map(|_| collected)));
    }
    println!("{rest}");
    Ok((g, None))
}

/// Why generation stopped, a full window or context with its size.
fn stop_reason(stop: Stop, kv: Option<&KvPair>, seq: usize) -> String {
    match stop {
        Stop::ContextFull => match kv {
            Some(kv) => format!("context full (N = {})", kv.max_context),
            None => format!("window full (SEQ = {seq})"),
        },
        other => super::hint::stop(other),
    }
}
