//! A packaged model, ready to generate: what an app links. [`Model::open`]
//! takes a folder from `kiln package`, checks it against its manifest
//! ([`Package::open`]) before IREE maps anything, loads the module for the
//! CPU it runs on (or Vulkan) over the package's archives, and the
//! model's tokenizer and chat template. The C ABI (`include/kiln_runtime.h`)
//! and the JNI class `dev.kiln.KilnModel` are thin layers over it.
//!
//! ```no_run
//! use kiln_runtime::{Device, Model};
//! let mut model = Model::open("assets/smollm2".as_ref(), Device::LocalTask, None)?;
//! let text = model.generate("The capital of France is", 16, false)?;
//! let reply = model.chat("What is the capital of Germany?", 32)?;
//! # Ok::<(), kiln_runtime::ModelError>(())
//! ```

use crate::chat::{Chat, ChatError};
use crate::generate::{
    check_ids, generate, generate_kv, Conversation, GenerateError, Generation, KvSpan, KvSpec,
    Sampler,
};
use crate::package::{host_abi, Package, PackageError, PackagedKv, PackagedModule};
use crate::step::StepError;
use crate::steps::{ForwardSession, KvSession};
use crate::tokenizer::{StreamDecoder, Tokenizer, TokenizerError};
use crate::types::{DType, TensorType};
use crate::{Device, Error, ParamFile, ParamMode, Session, SessionOptions};
use std::path::{Path, PathBuf};

/// What can go wrong opening or running a packaged model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The package is not one, or not as its manifest says.
    #[error(transparent)]
    Package(#[from] PackageError),
    /// IREE's runtime failed (loading the module, a call).
    #[error(transparent)]
    Runtime(#[from] Error),
    /// The manifest's KV pair cannot be one.
    #[error("{}: the KV pair: {source}", path.display())]
    Pair {
        /// The package.
        path: PathBuf,
        /// What does not hold.
        source: StepError,
    },
    /// A generation could not run as asked.
    #[error(transparent)]
    Generate(#[from] GenerateError),
    /// The tokenizer failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A chat turn could not run.
    #[error(transparent)]
    Chat(#[from] ChatError),
    /// Text in or out, on a package without a tokenizer.
    #[error("{}: the package has no tokenizer (packaged with --no-tokenizer): pass token ids", path.display())]
    NoTokenizer {
        /// The package.
        path: PathBuf,
    },
    /// A chat on a package whose tokenizer has no chat template, or
    /// without the KV pair.
    #[error("{}: {what}", path.display())]
    NoChat {
        /// The package.
        path: PathBuf,
        /// What is missing.
        what: &'static str,
    },
    /// An unknown device name.
    #[error("device \"{0}\": use local-task, local-sync or vulkan")]
    Device(String),
}

/// The loaded module: the KV pair, or the redecode forward.
enum Runner {
    Kv {
        session: Box<KvSession>,
        /// The tokens its caches hold (a chat's).
        held: Vec<i32>,
    },
    Forward(Box<ForwardSession>),
}

/// A packaged model, loaded.
pub struct Model {
    package: Package,
    runner: Runner,
    tokenizer: Option<Tokenizer>,
    chat: Option<Chat>,
    eos: Vec<i32>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("dir", &self.package.dir)
            .field("name", &self.package.manifest.name)
            .finish_non_exhaustive()
    }
}

/// The device named `name` (`local-task`, `local-sync`, `vulkan`).
pub fn device(name: &str) -> Result<Device, ModelError> {
    Device::from_name(name).ok_or_else(|| ModelError::Device(name.to_string()))
}

impl Model {
    /// Opens the package in `dir` on `device`, with `worker_groups`
    /// local-task workers (`None`: IREE's detection).
    pub fn open(
        dir: &Path,
        device: Device,
        worker_groups: Option<usize>,
    ) -> Result<Model, ModelError> {
        let package = Package::open(dir)?;
        let m = &package.manifest;
        let abi = if device == Device::Vulkan {
            "vulkan"
        } else {
            host_abi()
        };
        let entry = package.module_for(abi)?;
        package.check_sha256(&entry.path)?;
        let session = open_session(&package, entry, device, worker_groups)?;
        let runner = match &m.kv {
            Some(kv) => {
                let spec = kv_spec(kv, entry, &package)?;
                Runner::Kv {
                    session: Box::new(KvSession::new(session, &spec)?),
                    held: Vec::new(),
                }
            }
            None => Runner::Forward(Box::new(ForwardSession::new(session, &m.function, m.seq)?)),
        };
        let tokenizer = match &m.tokenizer {
            Some(t) => Some(Tokenizer::from_tokenizer_json(package.path(t))?),
            None => None,
        };
        let mut eos: Vec<i32> = m.eos_token_ids.iter().map(|&e| e as i32).collect();
        if let Some(e) = tokenizer.as_ref().and_then(Tokenizer::eos) {
            if !eos.contains(&(e as i32)) {
                eos.push(e as i32);
            }
        }
        let chat = match &tokenizer {
            Some(t) => t
                .template()?
                .map(|template| Chat::new(template, None, Some(m.vocab_size))),
            None => None,
        };
        Ok(Model {
            package,
            runner,
            tokenizer,
            chat,
            eos,
        })
    }

    /// The package's folder.
    pub fn dir(&self) -> &Path {
        &self.package.dir
    }

    /// The package: its manifest as the runtime reads it.
    pub fn package(&self) -> &Package {
        &self.package
    }

    /// The model's tokenizer, when packaged.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// Generates from `prompt` (token ids), greedily, up to
    /// `max_new_tokens` new ids or an end-of-sequence id; each id is handed
    /// to `on_token` as it comes (`false` stops). A fresh sequence: the
    /// caches a chat held are dropped.
    pub fn generate_ids_with(
        &mut self,
        prompt: &[i32],
        max_new_tokens: usize,
        on_token: impl FnMut(i32) -> bool,
    ) -> Result<Generation, ModelError> {
        check_ids(prompt, self.package.manifest.vocab_size)?;
        Ok(match &mut self.runner {
            Runner::Kv { session, held } => {
                held.clear();
                generate_kv(
                    session.as_mut(),
                    prompt,
                    max_new_tokens,
                    &self.eos,
                    Sampler::greedy(),
                    on_token,
                )?
            }
            Runner::Forward(f) => {
                generate(f.as_mut(), prompt, max_new_tokens, &self.eos, on_token)?
            }
        })
    }

    /// [`Model::generate_ids_with`], the new ids only.
    pub fn generate_ids(
        &mut self,
        prompt: &[i32],
        max_new_tokens: usize,
    ) -> Result<Vec<i32>, ModelError> {
        Ok(self
            .generate_ids_with(prompt, max_new_tokens, |_| true)?
            .ids)
    }

    /// Generates from the text `prompt` (wrapped in the model's chat
    /// template as one user message when `chat`), and returns the new
    /// text, as `kiln generate --prompt` prints it.
    pub fn generate(
        &mut self,
        prompt: &str,
        max_new_tokens: usize,
        chat: bool,
    ) -> Result<String, ModelError> {
        // Taken out for the call, so the loop can borrow the model mutably
        // and the tokenizer at once (no copy of its vocabulary per call).
        let tokenizer = self
            .tokenizer
            .take()
            .ok_or_else(|| ModelError::NoTokenizer {
                path: self.package.dir.clone(),
            })?;
        let text = self.generate_text(&tokenizer, prompt, max_new_tokens, chat);
        self.tokenizer = Some(tokenizer);
        text
    }

    /// [`Model::generate`] with the model's `tokenizer`.
    fn generate_text(
        &mut self,
        tokenizer: &Tokenizer,
        prompt: &str,
        max_new_tokens: usize,
        chat: bool,
    ) -> Result<String, ModelError> {
        let text = if chat {
            // The template `open` compiled (the chat's).
            let template =
                self.chat
                    .as_ref()
                    .map(Chat::template)
                    .ok_or_else(|| ModelError::NoChat {
                        path: self.package.dir.clone(),
                        what: "the tokenizer has no chat template",
                    })?;
            template.render(&[("user", prompt)], true)?
        } else {
            prompt.to_string()
        };
        let ids: Vec<i32> = tokenizer
            .encode_prompt(&text, chat)?
            .into_iter()
            .map(|x| x as i32)
            .collect();
        let mut decoder = StreamDecoder::new();
        let mut out = String::new();
        let mut err = None;
        self.generate_ids_with(&ids, max_new_tokens, |id| {
            match decoder.push(tokenizer, id as u32) {
                Ok(s) => {
                    out.push_str(&s);
                    true
                }
                Err(e) => {
                    err.get_or_insert(e);
                    false
                }
            }
        })?;
        if let Some(e) = err {
            return Err(e.into());
        }
        out.push_str(&decoder.finish(tokenizer)?);
        Ok(out)
    }

    /// One chat turn: `message` from the user, the reply's text back; the
    /// caches keep the conversation between turns (KV pair only).
    pub fn chat(&mut self, message: &str, max_new_tokens: usize) -> Result<String, ModelError> {
        let no_chat = |what| ModelError::NoChat {
            path: self.package.dir.clone(),
            what,
        };
        let tokenizer = self
            .tokenizer
            .as_ref()
            .ok_or_else(|| ModelError::NoTokenizer {
                path: self.package.dir.clone(),
            })?;
        let chat = self
            .chat
            .as_mut()
            .ok_or_else(|| no_chat("the tokenizer has no chat template"))?;
        let Runner::Kv { session, held } = &mut self.runner else {
            return Err(no_chat(
                "a chat needs the KV-cache pair (kiln export --kv-cache)",
            ));
        };
        let mut conv = Conversation::resume(session.as_mut(), std::mem::take(held));
        let reply = chat.turn(
            &mut conv,
            tokenizer,
            message,
            max_new_tokens,
            &self.eos,
            |_| true,
        );
        *held = conv.into_tokens();
        Ok(reply?.text)
    }

    /// Starts over: the chat's messages and the caches dropped.
    pub fn reset(&mut self) -> Result<(), ModelError> {
        if let Some(c) = &mut self.chat {
            c.reset();
        }
        if let Runner::Kv { session, held } = &mut self.runner {
            held.clear();
            crate::step::KvStep::reset(session.as_mut()).map_err(GenerateError::from)?;
        }
        Ok(())
    }
}

/// Loads `entry` on `device` over the package's archive (mapped on a CPU
/// device unless the module reads chunks as slices, `ParamMode::Auto`;
/// read into device memory on Vulkan) and its packed archive.
fn open_session(
    package: &Package,
    entry: &PackagedModule,
    device: Device,
    worker_groups: Option<usize>,
) -> Result<Session, ModelError> {
    let m = &package.manifest;
    let mode = if device == Device::Vulkan {
        ParamMode::File
    } else {
        ParamMode::Auto
    };
    let mut options = SessionOptions::new(device)
        .task_groups(worker_groups)
        .param(ParamFile::new(&m.scope, package.path(&m.parameters), mode));
    if let Some(packed) = &entry.packed {
        options = options.param(ParamFile::new(
            "packed",
            package.path(packed),
            ParamMode::Map,
        ));
    }
    Ok(Session::open(&package.path(&entry.path), &options)?)
}

/// The pair a package records, with `entry`'s own cache type when it has
/// one (a Vulkan module's bf16 caches as i32 words).
fn kv_spec(
    kv: &PackagedKv,
    entry: &PackagedModule,
    package: &Package,
) -> Result<KvSpec, ModelError> {
    let pair = |source| ModelError::Pair {
        path: package.dir.clone(),
        source,
    };
    let dtype_name = entry.cache_dtype.as_deref().unwrap_or(&kv.cache_dtype);
    let shape = entry.cache_shape.as_deref().unwrap_or(&kv.cache_shape);
    let dtype = DType::from_mlir(dtype_name).ok_or_else(|| {
        ModelError::Package(PackageError::Manifest {
            path: package.dir.clone(),
            message: format!("cache dtype \"{dtype_name}\" is not an element type"),
        })
    })?;
    let cache = TensorType::new(dtype, shape);
    let spans = kv
        .spans
        .iter()
        .map(|s| KvSpan::new(s.span, &s.prefill, &s.decode))
        .collect();
    KvSpec::new(
        &kv.prefill,
        &kv.decode,
        kv.prompt_len,
        cache,
        kv.cache_count,
    )
    .and_then(|k| k.spans(spans))
    .map_err(pair)
}
