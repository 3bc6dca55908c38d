//! What `kiln generate` and `kiln chat` share: the sampling flags and the
//! chat template they render prompts with.

use crate::error::{Error, Result};
use kiln::generate::{Sampler, SamplingParams};
use kiln::tokenizer::{ChatTemplate, Tokenizer};
use std::path::Path;

/// Sampling flags of `kiln generate` and `kiln chat`: applied on the host
/// to the top-K candidates a `--sampling topk=K` KV module returns, in
/// transformers' order (repetition penalty, temperature, top-k, top-p,
/// min-p). Without them, generation is greedy.
#[derive(Debug, Clone, clap::Args)]
pub struct SamplingArgs {
    /// Softmax temperature; 0 (the default) is greedy.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "T",
        allow_negative_numbers = true
    )]
    pub temperature: f32,
    /// Sample among the K best candidates only (default: all the module returns).
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Nucleus sampling: the smallest set of best candidates whose probability reaches P, in (0, 1].
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "P",
        allow_negative_numbers = true
    )]
    pub top_p: f32,
    /// Drop candidates less likely than P × the best one's probability, in [0, 1].
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "P",
        allow_negative_numbers = true
    )]
    pub min_p: f32,
    /// Penalise ids already in the conversation (transformers'
    /// repetition_penalty; 1 is off).
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "R",
        allow_negative_numbers = true
    )]
    pub repeat_penalty: f32,
    /// Seed of the draws (default: from the clock, printed so a run can be repeated).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampler these flags ask for (checked; the error names the
    /// flag). A seed taken from the clock is reported on stderr.
    pub fn sampler(&self) -> Result<Sampler> {
        let mut p = SamplingParams::default()
            .temperature(self.temperature)
            .top_k(self.top_k.unwrap_or(0))
            .top_p(self.top_p)
            .min_p(self.min_p)
            .repeat_penalty(self.repeat_penalty);
        if self.top_k == Some(0) {
            return Err(Error::Usage("--top-k 0: must be at least 1".into()));
        }
        p.validate()?;
        if !p.is_greedy() {
            p.seed = match self.seed {
                Some(s) => s,
                None => {
                    let s = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64);
                    crate::status!("sampling with --seed {s}");
                    s
                }
            };
        }
        Ok(Sampler::new(p)?)
    }
}

/// The chat template `--chat` renders with: the `--chat-template` file,
/// else the model's own, else ChatML (said on stderr).
pub fn chat_template(tokenizer: &Tokenizer, file: Option<&Path>) -> Result<ChatTemplate> {
    let name = |id: Option<u32>| id.and_then(|i| tokenizer.id_to_token(i));
    let source = match file {
        Some(f) => std::fs::read_to_string(f).map_err(|e| Error::io(f, e))?,
        None => match tokenizer.chat_template() {
            Some(t) => t.to_string(),
            None => {
                eprintln!("kiln: the model has no chat template; using ChatML (pass --chat-template FILE for another)");
                ChatTemplate::CHATML.to_string()
            }
        },
    };
    ChatTemplate::new(&source, name(tokenizer.bos()), name(tokenizer.eos())).map_err(|e| match file
    {
        Some(f) => Error::Usage(format!("--chat-template {}: {e}", f.display())),
        None => e.into(),
    })
}

/// A rendering error, naming where the template came from: the
/// `--chat-template` file, else the tokenizer file.
pub fn template_error(
    file: Option<&Path>,
    tokenizer: Option<&Path>,
    e: kiln::tokenizer::TokenizerError,
) -> Error {
    match (file, tokenizer) {
        (Some(f), _) => Error::Usage(format!("--chat-template {}: {e}", f.display())),
        (None, Some(t)) => Error::Usage(format!("{}: {e}", t.display())),
        (None, None) => e.into(),
    }
}
