//! `kiln chat MODULE-kv.vmfb`: an interactive multi-turn conversation over
//! the KV-cache pair. Each turn renders the whole conversation with the
//! model's chat template and prefills only the tokens the caches do not
//! hold yet; replies stream as they are generated. `/reset` starts over,
//! `/exit` (or end of input) quits.

use super::gen_common::{chat_template, SamplingArgs};
use super::run::{resolve, Resolved};
use crate::error::{Error, Result};
use kiln::generate::{Conversation, Driver, DriverLoop, DriverOptions, Stop};
use kiln::iree::Device;
use kiln::manifest::KvPair;
use kiln::tokenizer::{StreamDecoder, Tokenizer};
use kiln_runtime::chat::{Chat, ChatError};
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Arguments of `kiln chat`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  kiln chat out/smollm2-kv-host.vmfb --system \"You are terse.\"\n  printf 'Hi!\\n/exit\\n' | kiln chat out/smollm2-kv-gen.mlir"
)]
pub struct Args {
    /// The KV-cache module (`NAME-kv-<target>.vmfb`, or `NAME-kv-gen.mlir`
    /// for kiln's interpreter), with `NAME.json` beside it.
    pub module: PathBuf,
    /// Parameter file (default: the manifest's `.irpa`).
    #[arg(long, short = 'p', value_name = "FILE")]
    pub params: Option<PathBuf>,
    /// Tokenizer: a GGUF file or an HF tokenizer.json (default: the
    /// checkpoint the module was exported from).
    #[arg(long, value_name = "FILE")]
    pub tokenizer: Option<PathBuf>,
    /// A system message before the first turn.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Render with this Jinja chat template instead of the model's own.
    #[arg(long, value_name = "FILE")]
    pub chat_template: Option<PathBuf>,
    /// Most tokens per reply.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub max_new_tokens: usize,
    /// Runtime device.
    #[arg(long, value_parser = crate::values::device(), default_value_t = Device::LocalTask)]
    pub device: Device,
    /// Fix the number of local-task worker groups (default: IREE's detection).
    #[arg(long, value_name = "N", env = "KILN_TASK_GROUPS")]
    pub task_groups: Option<usize>,
    /// Use the IREE venv (or tool directory) at DIR.
    #[arg(long, value_name = "DIR")]
    pub iree_dir: Option<PathBuf>,
    /// Sampling (a module exported with `--sampling topk=K`).
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Runs `kiln chat`.
pub fn run(a: Args) -> Result<i32> {
    let sampler = a.sampling.sampler()?;
    let r = resolve(&a.module, None, None, None, a.params.clone())?;
    let kv = r.manifest.kv_pair().ok_or_else(|| {
        Error::Usage(format!(
            "{}: kiln chat needs a KV-cache module (export with `kiln export … --kv-cache`)",
            a.module.display()
        ))
    })?;
    sampler.check_candidates(kv.top_k)?;
    let tok_path = a
        .tokenizer
        .clone()
        .or_else(|| r.manifest.source_tokenizer())
        .ok_or_else(|| Error::Usage("kiln chat needs a tokenizer: pass --tokenizer FILE".into()))?;
    let tokenizer = kiln::tokenizer::open(&tok_path)?;
    let eos = r.manifest.eos_with(Some(&tokenizer));
    let mut driver = open_driver(&a, &r, &kv)?;
    let DriverLoop::Kv(model) = &mut driver.model else {
        unreachable!("a driver opened with a KV pair drives it")
    };
    let interactive = std::io::stdin().is_terminal();
    crate::status!(
        "kiln chat: {} (P {}, N {}); /reset starts over, /exit quits",
        module_name(&a.module),
        kv.prompt_len,
        kv.max_context
    );
    let template = chat_template(&tokenizer, a.chat_template.as_deref())?;
    let chat = Chat::new(template, a.system.clone(), r.manifest.vocab_size());
    let template_source = a.chat_template.clone().unwrap_or(tok_path.clone());
    let mut conv = Conversation::new(model.as_mut())?;
    conv.set_sampler(sampler);
    let mut session = Session {
        tokenizer: &tokenizer,
        chat,
        conv,
        eos,
        max_new_tokens: a.max_new_tokens,
        template_source,
    };
    session.converse(interactive)?;
    Ok(0)
}

/// Opens the KV-cache pair `kv` of the module on the runtime that fits it.
fn open_driver(a: &Args, r: &Resolved, kv: &KvPair) -> Result<Driver> {
    let o = DriverOptions::new(&a.module, &r.params, &r.function, r.seq)
        .scope(&r.scope)
        .kv(kv.clone())
        .device(a.device)
        .task_groups(a.task_groups)
        .iree_dir(a.iree_dir.clone());
    Ok(Driver::open(&o)?)
}

/// A running `kiln chat`: the messages, the caches and what they hold.
struct Session<'t, 'm> {
    tokenizer: &'t Tokenizer,
    chat: Chat,
    conv: Conversation<'m>,
    eos: Vec<i32>,
    max_new_tokens: usize,
    /// Where the template came from, for its errors.
    template_source: PathBuf,
}

impl Session<'_, '_> {
    /// Reads turns from stdin until `/exit`, `/quit` or the end of input
    /// (with a `> ` prompt on stderr when `interactive`).
    fn converse(&mut self, interactive: bool) -> Result<()> {
        let stdin = std::io::stdin();
        let mut lines = stdin.lock().lines();
        loop {
            if interactive {
                eprint!("> ");
            }
            let Some(line) = lines.next() else { break };
            let line = line.map_err(|e| Error::io(Path::new("<stdin>"), e))?;
            match line.trim() {
                "" => continue,
                "/exit" | "/quit" => break,
                "/reset" => {
                    self.chat.reset();
                    self.conv.restart()?;
                    eprintln!("(conversation reset)");
                    continue;
                }
                _ => {}
            }
            self.turn(&line)?;
        }
        Ok(())
    }

    /// One user turn ([`Chat::turn`]), its reply streamed to stdout as it
    /// is generated (a turn the template refuses, or one past the max
    /// context, is dropped with a note).
    fn turn(&mut self, line: &str) -> Result<()> {
        let t0 = std::time::Instant::now();
        let tokenizer = self.tokenizer;
        let mut out = std::io::stdout();
        let mut decoder = StreamDecoder::new();
        let mut err = None;
        let reply = self.chat.turn(
            &mut self.conv,
            tokenizer,
            line,
            self.max_new_tokens,
            &self.eos,
            |id| match decoder.push(tokenizer, id as u32) {
                Ok(s) => {
                    let _ = out.write_all(s.as_bytes());
                    let _ = out.flush();
                    true
                }
                Err(e) => {
                    err.get_or_insert(e);
                    false
                }
            },
        );
        let g = match reply {
            Ok(r) => r.generation,
            Err(ChatError::Template(e)) => {
                // The template refused the conversation: say so, keep going.
                eprintln!("({}: {e})", self.template_source.display());
                return Ok(());
            }
            Err(ChatError::PastContext { max_context, .. }) => {
                eprintln!(
                    "(this turn would pass the max context N = {max_context}: /reset to start over)"
                );
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(e) = err {
            return Err(e.into());
        }
        let _ = writeln!(out, "{}", decoder.finish(tokenizer)?);
        let secs = t0.elapsed().as_secs_f64();
        let max_context = self.conv.tokens().len() + self.conv.remaining();
        crate::status!(
            "({}; {} new tokens in {secs:.2} s ({:.1} tokens/s); {}; {} of {} positions used)",
            g.timings,
            g.ids.len(),
            g.ids.len() as f64 / secs.max(1e-9),
            match g.stop {
                Stop::Eos(_) => "end of turn".to_string(),
                other => super::hint::stop(other),
            },
            self.conv.tokens().len() + 1,
            max_context
        );
        Ok(())
    }
}

/// The file name of the module, for the greeting.
fn module_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}
