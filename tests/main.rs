//! kiln's integration tests, one binary: each file under tests/ is a module
//! here (`cargo test --release --test suite smollm2::` runs one file's tests).
//! One binary links once, and tests of different files share what they
//! build through `common` (exports and compiled modules made once per run).
//! tests/interp_memory.rs stays its own binary: it reads its process's peak
//! memory.

mod common;

mod android;
mod c_library;
mod cli;
mod export_errors;
mod export_hf;
mod families;
mod graph_dsl;
mod interp_cli;
mod interp_files;
mod interp_iree;
mod interp_models;
mod interp_op_cases;
mod interp_ops;
mod iree_errors;
mod iree_flags;
mod iree_ops;
mod iree_run;
mod java_library;
mod kv_cache;
mod layering;
mod manifest;
mod messages;
mod op_cases_selfcheck;
mod pack;
mod package;
mod params_attacks;
mod params_cli;
mod params_gguf;
mod params_irpa;
mod params_safetensors;
mod parser_errors;
mod parser_roundtrip;
mod parser_spellings;
mod quantized;
mod reproducible;
mod runtime_model;
mod sampling;
mod smollm2;
mod tokenizer_chat;
mod tokenizer_errors;
mod tokenizer_smollm2;
mod tokenizer_vocabs;
mod verify;
mod vulkan;
