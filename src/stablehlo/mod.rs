//! StableHLO text: the printer (graph → MLIR) and, later, the parser.

mod printer;

pub use printer::{
    escape_string, format_float, format_literal_value, print_module, sanitize_symbol,
    ConstantPolicy, PrintOptions, WeightSource,
};

/// StableHLO text that could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);
