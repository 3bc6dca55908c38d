//! `kiln generate MODULE.vmfb (--prompt TEXT | --tokens IDS) …`: text
//! generation with exactly the phone's redecode loop.

use super::run::{parse_tokens, resolve, task_groups};
use crate::generate::{generate, Forward, IreeRunModule};
use crate::iree::flags::Device;
use crate::iree::run::{Emulation, RunOptions};
use crate::iree::session::Session;
use crate::iree::Toolchain;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use crate::{Error, Result};
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
    /// Wrap the prompt in the model's chat template (a user message).
    #[arg(long)]
    pub chat: bool,
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
    /// Runtime device: local-task, local-sync or vulkan.
    #[arg(long, default_value = "local-task")]
    pub device: String,
    /// Run the arm64 module under qemu (`arm64`); one runtime process per step.
    #[arg(long, value_name = "ARCH")]
    pub emulate: Option<String>,
    /// Fix the number of local-task worker groups (or $KILN_TASK_GROUPS).
    #[arg(long, value_name = "N")]
    pub task_groups: Option<usize>,
    /// Use one iree-run-module process per step instead of a loaded session.
    #[arg(long)]
    pub per_step: bool,
    /// Use the IREE venv (or tool directory) at DIR.
    #[arg(long, value_name = "DIR")]
    pub iree_dir: Option<PathBuf>,
}

fn default_tokenizer(source: Option<&str>) -> Option<PathBuf> {
    let src = Path::new(source?);
    if src.is_dir() {
        let t = src.join("tokenizer.json");
        return t.is_file().then_some(t);
    }
    src.is_file().then(|| src.to_path_buf())
}

/// Runs `kiln generate`.
pub fn run(a: Args) -> Result<i32> {
    let r = resolve(&a.module, a.seq, a.function.clone(), None, a.params.clone())?;
    let tok_path = a
        .tokenizer
        .clone()
        .or_else(|| default_tokenizer(r.manifest.source()));
    let tokenizer = match &tok_path {
        Some(p) => Some(Tokenizer::open(p)?),
        None => None,
    };
    let prompt: Vec<i32> = match (&a.prompt, &a.tokens) {
        (Some(text), _) => {
            let t = tokenizer.as_ref().ok_or_else(|| {
                Error::Usage(
                    "--prompt needs a tokenizer: pass --tokenizer FILE (a GGUF or tokenizer.json)"
                        .into(),
                )
            })?;
            let text = if a.chat {
                t.apply_chat(&[("user", text.as_str())], true)?
            } else {
                text.clone()
            };
            t.encode(&text)?.into_iter().map(|x| x as i32).collect()
        }
        (None, Some(ids)) => {
            if a.chat {
                return Err(Error::Usage(
                    "--chat applies to --prompt text, not --tokens".into(),
                ));
            }
            parse_tokens(ids)?
        }
        (None, None) => return Err(Error::Usage("pass --prompt TEXT or --tokens IDS".into())),
    };
    if prompt.len() >= r.seq {
        return Err(Error::Usage(format!(
            "the prompt has {} tokens but SEQ is {}: it must be at most {} tokens (export with a larger --seq)",
            prompt.len(),
            r.seq,
            r.seq - 1
        )));
    }
    let mut eos = r.manifest.eos();
    if let Some(e) = tokenizer.as_ref().and_then(Tokenizer::eos) {
        if !eos.contains(&(e as i32)) {
            eos.push(e as i32);
        }
    }
    let device = Device::parse(&a.device)?;
    let emulate = a.emulate.as_deref().map(Emulation::parse).transpose()?;
    let groups = task_groups(a.task_groups)?;
    let tc = Toolchain::locate(a.iree_dir.as_deref())?;
    let t0 = std::time::Instant::now();
    let mut model: Box<dyn Forward> = if a.per_step || emulate.is_some() {
        Box::new(IreeRunModule {
            toolchain: tc,
            vmfb: a.module.clone(),
            options: RunOptions {
                device,
                function: r.function.clone(),
                params: vec![(r.scope.clone(), r.params.clone())],
                task_groups: groups,
                emulate,
                exact_outputs: None,
            },
            seq: r.seq,
        })
    } else {
        Box::new(Session::start(
            &tc,
            &a.module,
            &r.params,
            &r.scope,
            &r.function,
            device,
            r.seq,
            groups,
        )?)
    };
    let load = t0.elapsed().as_secs_f64();
    eprintln!(
        "prompt: {} tokens; SEQ {}; loaded in {load:.2}s",
        prompt.len(),
        r.seq
    );
    let mut stdout = std::io::stdout();
    let mut decoder = StreamDecoder::new();
    let mut stream_err = None;
    let t1 = std::time::Instant::now();
    let g = generate(model.as_mut(), &prompt, a.max_new_tokens, &eos, |id| {
        let piece = match &tokenizer {
            Some(t) => match decoder.push(t, id as u32) {
                Ok(s) => s,
                Err(e) => {
                    stream_err.get_or_insert(e);
                    String::new()
                }
            },
            None => format!("{id} "),
        };
        let _ = stdout.write_all(piece.as_bytes());
        let _ = stdout.flush();
    })?;
    if let Some(e) = stream_err {
        return Err(e);
    }
    let rest = decoder.finish();
    println!("{rest}");
    let secs = t1.elapsed().as_secs_f64();
    let n = g.ids.len() + usize::from(g.stopped_at_eos);
    eprintln!(
        "{} new tokens{} in {secs:.2}s: {:.2} tokens/s ({} forward passes)",
        g.ids.len(),
        if g.stopped_at_eos {
            " (stopped at eos)"
        } else {
            ""
        },
        n as f64 / secs.max(1e-9),
        n
    );
    Ok(0)
}
