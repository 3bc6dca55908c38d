//! Pre-tokenization: cutting text into the words BPE works on.
//!
//! The GPT-2 split is HF tokenizers' `ByteLevel` regex,
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
//! written out by hand because of the look-ahead. `\p{L}` and `\p{N}` are
//! Unicode general categories (tables from `regex-syntax`), `\s` is the
//! Unicode `White_Space` property, as in Oniguruma, the engine HF uses.

use std::ops::Range;
use std::sync::OnceLock;

/// How text is cut into words before BPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// The GPT-2 regex (HF `ByteLevel` with `use_regex`; llama.cpp `gpt2`).
    Gpt2,
    /// Every `\p{N}` character split off on its own first, then the GPT-2
    /// regex inside each piece (HF `Sequence[Digits(individual_digits),
    /// ByteLevel]`; llama.cpp `smollm`, `starcoder`, …).
    DigitsThenGpt2,
}

impl PreTokenizer {
    /// Appends the byte ranges of the words of `text` to `out`, in order;
    /// together they cover `text` exactly.
    pub fn split(self, text: &str, out: &mut Vec<Range<usize>>) {
        match self {
            PreTokenizer::Gpt2 => split_gpt2(text, 0, out),
            PreTokenizer::DigitsThenGpt2 => {
                let mut start = 0;
                for (i, c) in text.char_indices() {
                    if class(c) == Class::Number {
                        split_gpt2(&text[start..i], start, out);
                        out.push(i..i + c.len_utf8());
                        start = i + c.len_utf8();
                    }
                }
                split_gpt2(&text[start..], start, out);
            }
        }
    }
}

/// The character classes the GPT-2 regex distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// `\s`.
    Space,
    /// Anything else: `[^\s\p{L}\p{N}]`.
    Other,
}

fn class(c: char) -> Class {
    if c.is_ascii() {
        return if c.is_ascii_alphabetic() {
            Class::Letter
        } else if c.is_ascii_digit() {
            Class::Number
        } else if c.is_ascii_whitespace() || c == '\u{0b}' {
            // `is_ascii_whitespace` leaves out U+000B, which `\s` includes.
            Class::Space
        } else {
            Class::Other
        };
    }
    if in_table(letters(), c) {
        Class::Letter
    } else if in_table(numbers(), c) {
        Class::Number
    } else if c.is_whitespace() {
        Class::Space
    } else {
        Class::Other
    }
}

fn in_table(table: &[(char, char)], c: char) -> bool {
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

fn letters() -> &'static [(char, char)] {
    static TABLE: OnceLock<Vec<(char, char)>> = OnceLock::new();
    TABLE.get_or_init(|| category_ranges(r"\p{L}"))
}

fn numbers() -> &'static [(char, char)] {
    static TABLE: OnceLock<Vec<(char, char)>> = OnceLock::new();
    TABLE.get_or_init(|| category_ranges(r"\p{N}"))
}

/// The sorted code-point ranges of a Unicode class, from regex-syntax's
/// tables. Empty only if regex-syntax were built without Unicode tables,
/// which a unit test rules out.
fn category_ranges(pattern: &str) -> Vec<(char, char)> {
    use regex_syntax::hir::{Class as HirClass, HirKind};
    match regex_syntax::parse(pattern).map(|h| h.into_kind()) {
        Ok(HirKind::Class(HirClass::Unicode(cls))) => {
            cls.ranges().iter().map(|r| (r.start(), r.end())).collect()
        }
        _ => Vec::new(),
    }
}

/// The GPT-2 regex over `text` (which starts at byte `base` of the whole
/// input); the look-ahead sees only `text`, as when HF applies the regex to
/// one piece of a previous split.
fn split_gpt2(text: &str, base: usize, out: &mut Vec<Range<usize>>) {
    let chars: Vec<(usize, char, Class)> =
        text.char_indices().map(|(i, c)| (i, c, class(c))).collect();
    let n = chars.len();
    let offset = |k: usize| if k < n { chars[k].0 } else { text.len() };
    let run_end = |from: usize, cls: Class| {
        let mut k = from;
        while k < n && chars[k].2 == cls {
            k += 1;
        }
        k
    };
    let mut i = 0;
    while i < n {
        let (pos, c, cls) = chars[i];
        // 's 't 're 've 'm 'll 'd (case-sensitive, ASCII only).
        if c == '\'' {
            let rest = &text[pos + 1..];
            let suffix = ["s", "t", "re", "ve", "m", "ll", "d"]
                .into_iter()
                .find(|s| rest.starts_with(s));
            if let Some(s) = suffix {
                out.push(base + pos..base + pos + 1 + s.len());
                i += 1 + s.len();
                continue;
            }
        }
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`.
        let start = if c == ' ' && i + 1 < n { i + 1 } else { i };
        let start_cls = chars[start].2;
        if start_cls != Class::Space {
            let end = run_end(start, start_cls);
            out.push(base + pos..base + offset(end));
            i = end;
            continue;
        }
        debug_assert_eq!(cls, Class::Space);
        // `\s+(?!\S)`: the whitespace run, less its last character when
        // something other than whitespace follows; else `\s+`.
        let end = run_end(i, Class::Space);
        let end = if end < n && end - i >= 2 {
            end - 1
        } else {
            end
        };
        out.push(base + pos..base + offset(end));
        i = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(p: PreTokenizer, s: &str) -> Vec<&str> {
        let mut r = Vec::new();
        p.split(s, &mut r);
        r.into_iter().map(|r| &s[r]).collect()
    }

    #[test]
    fn tables_are_loaded() {
        assert!(letters().len() > 100);
        assert!(numbers().len() > 50);
        assert_eq!(class('é'), Class::Letter);
        assert_eq!(class('٣'), Class::Number);
        assert_eq!(class('Ⅻ'), Class::Number);
        assert_eq!(class('\u{3000}'), Class::Space);
        assert_eq!(class('\u{200d}'), Class::Other);
        // A Devanagari vowel sign is alphabetic but not \p{L}.
        assert!('\u{093e}'.is_alphabetic());
        assert_eq!(class('\u{093e}'), Class::Other);
    }

    #[test]
    fn gpt2_split() {
        let p = PreTokenizer::Gpt2;
        assert_eq!(words(p, "Hello world"), ["Hello", " world"]);
        assert_eq!(words(p, "I'm here's"), ["I", "'m", " here", "'s"]);
        assert_eq!(words(p, "a   b"), ["a", "  ", " b"]);
        assert_eq!(words(p, "a\n\nb "), ["a", "\n", "\n", "b", " "]);
        assert_eq!(words(p, "x  1"), ["x", " ", " 1"]);
        assert_eq!(words(p, " 's"), [" '", "s"]);
        assert_eq!(words(p, "a!!? b"), ["a", "!!?", " b"]);
        assert!(words(p, "").is_empty());
    }

    #[test]
    fn digits_split() {
        let p = PreTokenizer::DigitsThenGpt2;
        assert_eq!(words(p, "x  12"), ["x", "  ", "1", "2"]);
        assert_eq!(words(p, "v2.0"), ["v", "2", ".", "0"]);
    }
}
