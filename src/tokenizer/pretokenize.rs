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
    /// Llama 3's regex (HF `Split` with it, then `ByteLevel` without a
    /// regex; llama.cpp `llama-bpe`): [`LLAMA3_REGEX`], numbers in runs of
    /// at most three digits.
    Llama3,
    /// Qwen2's regex: Llama 3's with one digit per number
    /// ([`QWEN2_REGEX`]; llama.cpp `qwen2`).
    Qwen2,
}

/// Llama 3's pre-tokenizer regex, as its `tokenizer.json` spells it.
pub const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's pre-tokenizer regex, as its `tokenizer.json` spells it.
pub const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

impl PreTokenizer {
    /// Appends the byte ranges of the words of `text` to `out`, in order;
    /// together they cover `text` exactly.
    pub fn split(self, text: &str, out: &mut Vec<Range<usize>>) {
        match self {
            PreTokenizer::Gpt2 => split_gpt2(text, 0, out),
            PreTokenizer::Llama3 => split_llama3(text, 3, out),
            PreTokenizer::Qwen2 => split_llama3(text, 1, out),
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

/// The characters of a text with their byte offsets and classes.
struct Chars<'a> {
    text: &'a str,
    v: Vec<(usize, char, Class)>,
}

impl<'a> Chars<'a> {
    fn new(text: &'a str) -> Chars<'a> {
        let v = text.char_indices().map(|(i, c)| (i, c, class(c))).collect();
        Chars { text, v }
    }

    /// The byte offset of character `k` (the text's length past the end).
    fn offset(&self, k: usize) -> usize {
        self.v.get(k).map_or(self.text.len(), |c| c.0)
    }

    /// The end of the run of class `cls` characters starting at `from`.
    fn run_end(&self, from: usize, cls: Class) -> usize {
        let mut k = from;
        while k < self.v.len() && self.v[k].2 == cls {
            k += 1;
        }
        k
    }
}

/// The GPT-2 regex over `text` (which starts at byte `base` of the whole
/// input); the look-ahead sees only `text`, as when HF applies the regex to
/// one piece of a previous split.
fn split_gpt2(text: &str, base: usize, out: &mut Vec<Range<usize>>) {
    let cs = Chars::new(text);
    let (chars, n) = (&cs.v, cs.v.len());
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
            let end = cs.run_end(start, start_cls);
            out.push(base + pos..base + cs.offset(end));
            i = end;
            continue;
        }
        debug_assert_eq!(cls, Class::Space);
        // `\s+(?!\S)`: the whitespace run, less its last character when
        // something other than whitespace follows; else `\s+`.
        let end = cs.run_end(i, Class::Space);
        let end = if end < n && end - i >= 2 {
            end - 1
        } else {
            end
        };
        out.push(base + pos..base + cs.offset(end));
        i = end;
    }
}

/// A contraction `'s 't 're 've 'm 'll 'd` at the start of `rest` (just
/// after the apostrophe), case-insensitively as Oniguruma's `(?i)` matches
/// (so `ſ`, U+017F, is an `s`): its length in bytes.
fn contraction(rest: &str) -> Option<usize> {
    let mut cs = rest.chars();
    let a = cs.next()?;
    let b = cs.next();
    let s_like = |c: char| c.eq_ignore_ascii_case(&'s') || c == '\u{17f}';
    let is = |c: Option<char>, x: char| c.is_some_and(|c| c.eq_ignore_ascii_case(&x));
    if s_like(a)
        || a.eq_ignore_ascii_case(&'t')
        || a.eq_ignore_ascii_case(&'m')
        || a.eq_ignore_ascii_case(&'d')
    {
        return Some(a.len_utf8());
    }
    let two = (a.eq_ignore_ascii_case(&'r') && is(b, 'e'))
        || (a.eq_ignore_ascii_case(&'v') && is(b, 'e'))
        || (a.eq_ignore_ascii_case(&'l') && is(b, 'l'));
    two.then_some(2)
}

/// Llama 3's regex ([`LLAMA3_REGEX`]; Qwen2's with `max_digits` 1) over
/// `text`, alternative by alternative in the order the regex tries them:
///
/// 1. `(?i:'s|'t|'re|'ve|'m|'ll|'d)`
/// 2. `[^\r\n\p{L}\p{N}]?\p{L}+` — one non-letter, non-number, non-newline
///    character (a space, a tab, punctuation) may lead a letter run
/// 3. `\p{N}{1,max_digits}`
/// 4. ` ?[^\s\p{L}\p{N}]+[\r\n]*`
/// 5. `\s*[\r\n]+` — whitespace up to and including its last newline
/// 6. `\s+(?!\S)` — a whitespace run, less its last character when
///    something else follows
/// 7. `\s+`
fn split_llama3(text: &str, max_digits: usize, out: &mut Vec<Range<usize>>) {
    let cs = Chars::new(text);
    let (chars, n) = (&cs.v, cs.v.len());
    let newline = |k: usize| k < n && matches!(chars[k].1, '\r' | '\n');
    let mut i = 0;
    while i < n {
        let (pos, c, cls) = chars[i];
        // 1.
        if c == '\'' {
            if let Some(len) = contraction(&text[pos + 1..]) {
                let end_byte = pos + 1 + len;
                out.push(pos..end_byte);
                while i < n && chars[i].0 < end_byte {
                    i += 1;
                }
                continue;
            }
        }
        // 2.
        let leads = !matches!(c, '\r' | '\n') && matches!(cls, Class::Space | Class::Other);
        let letters_from = if cls == Class::Letter {
            Some(i)
        } else if leads && i + 1 < n && chars[i + 1].2 == Class::Letter {
            Some(i + 1)
        } else {
            None
        };
        if let Some(from) = letters_from {
            let end = cs.run_end(from, Class::Letter);
            out.push(pos..cs.offset(end));
            i = end;
            continue;
        }
        // 3.
        if cls == Class::Number {
            let end = cs.run_end(i, Class::Number).min(i + max_digits);
            out.push(pos..cs.offset(end));
            i = end;
            continue;
        }
        // 4.
        let other_from = if cls == Class::Other {
            Some(i)
        } else if c == ' ' && i + 1 < n && chars[i + 1].2 == Class::Other {
            Some(i + 1)
        } else {
            None
        };
        if let Some(from) = other_from {
            let mut end = cs.run_end(from, Class::Other);
            while newline(end) {
                end += 1;
            }
            out.push(pos..cs.offset(end));
            i = end;
            continue;
        }
        debug_assert_eq!(cls, Class::Space);
        let ws_end = cs.run_end(i, Class::Space);
        // 5.
        if let Some(last_nl) = (i..ws_end).rev().find(|&k| newline(k)) {
            out.push(pos..cs.offset(last_nl + 1));
            i = last_nl + 1;
            continue;
        }
        // 6. and 7.
        let end = if ws_end < n && ws_end - i >= 2 {
            ws_end - 1
        } else {
            ws_end
        };
        out.push(pos..cs.offset(end));
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
    fn llama3_split() {
        let p = PreTokenizer::Llama3;
        assert_eq!(words(p, "Hello world"), ["Hello", " world"]);
        assert_eq!(words(p, "I'M here'S"), ["I", "'M", " here", "'S"]);
        assert_eq!(words(p, "12345 x"), ["123", "45", " x"]);
        assert_eq!(words(p, "\thello (world"), ["\thello", " (", "world"]);
        assert_eq!(words(p, "a  \n\n  b"), ["a", "  \n\n", " ", " b"]);
        assert_eq!(words(p, "x!!\n\ny"), ["x", "!!\n\n", "y"]);
        assert_eq!(words(p, "a   b"), ["a", "  ", " b"]);
        assert_eq!(words(p, " 1"), [" ", "1"]);
        assert_eq!(words(PreTokenizer::Qwen2, "123"), ["1", "2", "3"]);
        assert!(words(p, "").is_empty());
    }

    #[test]
    fn digits_split() {
        let p = PreTokenizer::DigitsThenGpt2;
        assert_eq!(words(p, "x  12"), ["x", "  ", "1", "2"]);
        assert_eq!(words(p, "v2.0"), ["v", "2", ".", "0"]);
    }
}
