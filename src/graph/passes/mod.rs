//! Passes: whole-module rewrites, built on the IR core's public builder
//! (each rebuilds its functions through checked builder methods).

pub mod vulkan;
