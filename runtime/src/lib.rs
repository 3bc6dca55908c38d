//! kiln-runtime: what runs a compiled kiln model, in-process, over IREE's
//! C runtime, and nothing of the compiler.
//!
//! The build script compiles IREE's runtime (local-sync, local-task and
//! Vulkan drivers, the embedded-ELF loader, the io-parameters module) from
//! the copy of IREE's sources that the crates.io package `eerie-sys`
//! carries, with CMake, for the target being built. [`Session`] loads a
//! `.vmfb` over its parameter archives on a [`Device`]; [`Session::call`]
//! runs an exported [`Function`] on [`Tensor`]s that stay on the device
//! between calls (the KV caches).
//!
//! ```no_run
//! use kiln_runtime::{Device, ElementType, ParamFile, ParamMode, Session, SessionOptions};
//! let options = SessionOptions::new(Device::LocalTask)
//!     .param(ParamFile::new("model", "out/smollm2.irpa", ParamMode::Map));
//! let mut session = Session::open("out/smollm2-host.vmfb".as_ref(), &options)?;
//! let forward = session.function("smollm2")?;
//! let ids: Vec<u8> = [1i32; 64].iter().flat_map(|i| i.to_le_bytes()).collect();
//! let input = session.tensor(ElementType::I32, &[1, 64], &ids)?;
//! let out = session.call(&forward, &[&input])?;
//! let predicted = session.read(&out[0])?;
//! # Ok::<(), kiln_runtime::Error>(())
//! ```
//!
//! [`tokenizer`] turns text into the model's token ids and back, and renders
//! its chat template, from the `NAME.tokenizer.json` and
//! `NAME.tokenizer_config.json` a kiln package ships.

pub mod capi;
pub mod chat;
mod ffi;
pub mod generate;
mod iree;
mod jni;
mod kv;
mod model;
pub mod names;
pub mod package;
pub mod serve;
pub mod step;
pub mod steps;
pub mod tokenizer;
pub mod types;

pub use iree::{
    Device, ElementType, Function, ParamFile, ParamMode, Session, SessionOptions, Tensor,
};
pub use kv::{CacheType, KvPair, Step};
pub use model::{device, Model, ModelError};
use std::path::PathBuf;

/// What can go wrong running a module.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// IREE's runtime returned an error: its message, on one line.
    #[error("{during}: {message}")]
    Iree {
        /// What kiln was doing.
        during: String,
        /// IREE's message.
        message: String,
    },
    /// The module exports no such function.
    #[error("the module has no function {name}")]
    NoFunction {
        /// The full name looked up.
        name: String,
    },
    /// A call's results are not what kiln's contract says.
    #[error("{function}: {message}")]
    Call {
        /// The function (full name), or "" when none was chosen.
        function: String,
        /// What is wrong.
        message: String,
    },
    /// A tensor's bytes do not match its shape.
    #[error("a tensor of shape {shape:?} given {bytes} bytes")]
    TensorSize {
        /// The shape.
        shape: Vec<usize>,
        /// The bytes given.
        bytes: usize,
    },
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// kiln-runtime's result.
pub type Result<T> = std::result::Result<T, Error>;
