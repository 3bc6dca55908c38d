//! kiln: a pure-Rust compiler front end that turns an LLM checkpoint into
//! StableHLO MLIR with externalized weights, parameter files (`.safetensors`,
//! `.irpa`) and, through `iree-compile`, one IREE module per target.
//!
//! The crate follows the pipeline, so a stage is found by its name:
//!
//! | stage | module |
//! |---|---|
//! | typed tensor-graph DSL | [`graph`] |
//! | StableHLO printer (and parser) | [`stablehlo`] |
//! | parameter files: safetensors, irpa, gguf | [`params`] |
//! | model loaders (HF folders, GGUF) | [`models`] |
//! | export of a checkpoint to MLIR + weights | [`export`] |
//! | IREE toolchain driver | [`iree`] |
//! | pure-Rust reference interpreter | [`interp`] |
//! | tokenizer | [`tokenizer`] |
//! | Android asset packaging | [`package`] |
//! | the manifests export and package write | [`manifest`] |
//! | progress of long steps, for a caller to draw | [`progress`] |
//!
//! # Example: checkpoint → export → compile → run
//!
//! A two-layer model with deterministic weights stands in for a checkpoint
//! here ([`models::Checkpoint::open`] takes an HF folder or a GGUF file the
//! same way). kiln's interpreter reads the emitted MLIR back; with the
//! pinned IREE installed (`kiln toolchain install`), the module is compiled
//! for the host and run on the `.irpa`, and both give the same ids.
//!
//! ```
//! use kiln::export::{export, ExportOptions};
//! use kiln::iree::{compile::compile, flags::Target, run, Toolchain};
//! use kiln::models::{Checkpoint, DecoderConfig};
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
//!         let opts = run::RunOptions::default()
//!             .function(report.manifest.function.clone())
//!             .params(vec![("model".into(), report.irpa.clone())]);
//!         let input = run::HostTensor::i32(vec![1, 8], tokens.to_vec())?;
//!         let outs = run::run_module(&tc, &vmfb, &opts, &[input])?;
//!         assert_eq!(outs[0].as_i32(), Some(&by_kiln[..]));
//!     }
//!     // CI sets KILN_REQUIRE_IREE: there a missing toolchain fails the example.
//!     Err(e) if std::env::var_os("KILN_REQUIRE_IREE").is_some() => return Err(e),
//!     Err(_) => {}
//! }
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! The `kiln` binary's command line (`src/cli/`, one file per verb) is
//! built on this API and is not part of it.

pub mod error;
pub mod export;
pub mod generate;
pub mod graph;
pub mod interp;
pub mod iree;
pub mod manifest;
pub mod models;
pub mod package;
pub mod params;
pub mod progress;
pub mod stablehlo;
pub mod step;
pub mod tokenizer;
mod util;

pub use util::cache_dir;

pub use error::{Error, Result};

/// README.md's Rust example, run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// kiln's version, as recorded in manifests.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
