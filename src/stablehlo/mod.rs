//! StableHLO text: the printer (graph → MLIR) and the parser (MLIR → graph).

mod parser;
mod printer;

pub(crate) use parser::parse_module_full;
pub use parser::ParsedModule;
pub(crate) use printer::{print_module, sanitize_identifier, SLICE_OPENS};
pub use printer::{ConstantPolicy, PrintError, PrintOptions, WeightSource};

use std::fmt;

/// StableHLO text that could not be parsed: where, what was expected, what
/// was found, and the offending line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The file the text came from, when known.
    pub file: Option<std::path::PathBuf>,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What the parser expected at that point.
    pub expected: String,
    /// What it found instead.
    pub found: String,
    /// The offending line (shortened around the column when very long).
    pub line_text: String,
    /// Column of the caret within `line_text` (1-based, in characters).
    pub caret: usize,
}

impl ParseError {
    /// An error at byte offset `pos` of `src`.
    pub(crate) fn at(src: &str, pos: usize, expected: String, found: String) -> Self {
        let mut pos = pos.min(src.len());
        while !src.is_char_boundary(pos) {
            pos -= 1;
        }
        let line_start = src[..pos].rfind('\n').map(|i| i + 1).unwrap_or(0);
        let line_end = src[pos..].find('\n').map(|i| pos + i).unwrap_or(src.len());
        let line = src[..line_start].matches('\n').count() + 1;
        let before: Vec<char> = src[line_start..pos].chars().collect();
        let after: Vec<char> = src[pos..line_end].chars().collect();
        let column = before.len() + 1;
        // Keep at most 60 characters either side of the column.
        const W: usize = 60;
        let (lead, skip_before) = if before.len() > W {
            ("…", before.len() - W)
        } else {
            ("", 0)
        };
        let tail = if after.len() > W { "…" } else { "" };
        let mut text: String = lead.to_string();
        text.extend(&before[skip_before..]);
        let caret = text.chars().count() + 1;
        text.extend(after.iter().take(W));
        text.push_str(tail);
        ParseError {
            file: None,
            line,
            column,
            expected,
            found,
            line_text: text.replace('\t', " "),
            caret,
        }
    }

    /// The same error, naming the file it came from.
    pub fn with_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.file {
            write!(f, "{}:", p.display())?;
        }
        writeln!(
            f,
            "{}:{}: expected {}, found {}",
            self.line, self.column, self.expected, self.found
        )?;
        let num = self.line.to_string();
        writeln!(f, "{num} | {}", self.line_text)?;
        write!(
            f,
            "{} | {}^",
            " ".repeat(num.len()),
            " ".repeat(self.caret.saturating_sub(1))
        )
    }
}

impl std::error::Error for ParseError {}
