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
pub mod tokenizer;
mod util;

pub use util::cache_dir;

pub use error::{Error, Result};

/// kiln's version, as recorded in manifests.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
