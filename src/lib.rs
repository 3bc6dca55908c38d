//! kiln: a pure-Rust compiler front end that turns an LLM checkpoint (an
//! HF folder or a GGUF file) into StableHLO MLIR with externalized weights,
//! parameter files (`.safetensors`, `.irpa`) and, through the pinned
//! `iree-compile`, one IREE module per target (host, Android arm64 and
//! arm32, Vulkan); then runs those modules, generates text with them and
//! packages them as Android assets.
//!
//! # The pipeline
//!
//! Each stage is one module, ground floor first; the main entry points are
//! also at the crate root (`kiln::export`, `kiln::compile`, …).
//!
//! | stage | module | start with |
//! |---|---|---|
//! | typed tensor-graph DSL | [`graph`] | [`graph::Graph`], [`graph::Module`] |
//! | StableHLO text, printed and parsed | [`stablehlo`] | [`graph::Module::print`], [`graph::Module::parse`], [`stablehlo::PrintOptions`] |
//! | parameter files: safetensors, irpa, gguf | [`params`] | [`params::ParamSource`], [`params::safetensors`], [`params::irpa`], [`params::gguf`] |
//! | model loaders (HF folders, GGUF) | [`models`] | [`Checkpoint`], [`DecoderConfig`] |
//! | kiln's reference interpreter | [`interp`] | [`interp::predict_file`], [`interp::run`] |
//! | tokenizers and chat templates | [`tokenizer`] | [`Tokenizer`] |
//! | the runtime seam (what a runtime implements) | [`step`] | [`step::Forward`], [`step::KvStep`], [`step::Prediction`] |
//! | the IREE tools: find, compile, run | [`iree`] | [`Toolchain`], [`compile()`], [`run_module`] |
//! | the manifests kiln writes and reads | [`manifest`] | [`manifest::ExportManifest`], [`manifest::AssetsManifest`] |
//! | export of a checkpoint to MLIR + weights | [`mod@export`] | [`export()`], [`ExportOptions`] |
//! | text generation | [`mod@generate`] | [`Driver`], [`generate()`], [`Conversation`] |
//! | Android asset packaging | [`mod@package`] | [`package()`], [`PackageOptions`] |
//! | checks of assets against their manifest, and rebuilds | [`mod@verify`] | [`verify()`], [`VerifyOptions`] |
//! | progress of long steps, for a caller to draw | [`progress`] | [`progress::Progress`] |
//!
//! Every fallible call returns [`Result`], whose [`Error`] wraps each
//! stage's own error type.
//!
//! # Example: checkpoint → export → compile → run
//!
//! A two-layer model with deterministic weights stands in for a checkpoint
//! here ([`Checkpoint::open`] takes an HF folder or a GGUF file the
//! same way). kiln's interpreter reads the emitted MLIR back; with the
//! pinned IREE installed (`kiln toolchain install`), the module is compiled
//! for the host and run on the `.irpa`, and both give the same ids.
//!
//! ```
//! use kiln::{
//!     compile, export, run_module, Checkpoint, DecoderConfig, ExportOptions, HostTensor,
//!     RunOptions, Target, Toolchain,
//! };
//!
//! let config = DecoderConfig::from_hf_json(
//!     r#"{"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
//!         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
//!         "vocab_size": 64, "max_position_embeddings": 128}"#,
//! )?;
//! let ckpt = Checkpoint::synthetic("tiny", config, 7)?;
//! let dir = tempfile::tempdir().expect("a temporary directory");
//! let opts = ExportOptions::new(8, dir.path());
//! let report = export(&ckpt, &opts)?;
//! // report.mlir: StableHLO with every weight a util.global of scope "model";
//! // report.irpa and report.safetensors: the weights (bf16).
//! let tokens = [1, 5, 9, 2, 0, 0, 0, 0];
//! let by_kiln = kiln::interp::predict_file(&report.mlir, &report.irpa, None, &tokens)?;
//! assert_eq!(by_kiln.len(), 8);
//!
//! match Toolchain::find() {
//!     Ok(tc) => {
//!         let vmfb = dir.path().join("tiny-host.vmfb");
//!         compile(&tc, &report.mlir, &Target::Host, &vmfb, &[])?;
//!         let opts = RunOptions::default()
//!             .function(report.manifest.function.clone())
//!             .params(vec![("model".into(), report.irpa.clone())]);
//!         let input = HostTensor::i32(vec![1, 8], tokens.to_vec())?;
//!         let outs = run_module(&tc, &vmfb, &opts, &[input])?;
//!         assert_eq!(outs[0].as_i32(), Some(&by_kiln[..]));
//!     }
//!     // CI sets KILN_REQUIRE_IREE: there a missing toolchain fails the example.
//!     Err(e) if std::env::var_os("KILN_REQUIRE_IREE").is_some() => return Err(e.into()),
//!     Err(_) => {}
//! }
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! # Where to go next
//!
//! - `docs/architecture.md`: the layers, which module may import which,
//!   and the path of one export and one generation through the code.
//! - `README.md`: installing kiln and the IREE toolchain, and a
//!   five-minute path to generated text; `docs/cli.md`: the `kiln` command
//!   line (`kiln --help`), which is built on this API and is not part of it
//!   (the `kiln-cli` crate in `cli/`, one file per verb).
//! - `spec/`: the formats kiln reads, writes and emits (StableHLO subset,
//!   irpa, safetensors, gguf, the KV-cache pair, IREE flags, Vulkan limits).

mod error;
pub mod export;
pub mod generate;
pub mod graph;
pub mod interp;
pub mod iree;
pub mod manifest;
pub mod models;
pub use kiln_runtime::names;
pub mod package;
pub mod params;
pub mod progress;
pub mod stablehlo;
pub use kiln_runtime::step;
pub mod tokenizer;
mod util;
pub mod verify;

pub use error::{Error, Result};
pub use export::{export, ExportOptions, ExportReport};
pub use generate::{generate, Conversation, Driver, DriverOptions};
#[doc(no_inline)]
pub use iree::compile::compile;
pub use iree::{run_module, HostTensor, RunOptions, Target, Toolchain};
pub use models::{Checkpoint, DecoderConfig};
pub use package::{package, PackageOptions};
pub use tokenizer::Tokenizer;
pub use util::cache_dir;
pub use verify::{verify, VerifyOptions, VerifyReport};

/// README.md's Rust example, run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// kiln's version, as recorded in manifests.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
