//! The token layer: a byte cursor over the source with `nom` recognizers for
//! identifiers, numbers and strings, and errors that know their position.

use crate::stablehlo::ParseError;
use nom::bytes::complete::{tag, take_while, take_while1};
use nom::character::complete::{char as nchar, digit1, hex_digit1, one_of};
use nom::combinator::{opt, recognize};
use nom::sequence::{pair, preceded, tuple};
use nom::IResult;

/// Result of the parser's internal steps.
pub(crate) type PResult<T> = Result<T, ParseError>;

/// A position in the source plus the source itself.
#[derive(Clone)]
pub(crate) struct Cursor<'a> {
    pub src: &'a str,
    pub pos: usize,
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.' || c == '-'
}

fn bare_ident(i: &str) -> IResult<&str, &str> {
    recognize(pair(
        take_while1(|c: char| c.is_ascii_alphabetic() || c == '_'),
        take_while(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.'),
    ))(i)
}

fn suffix_id(i: &str) -> IResult<&str, &str> {
    take_while1(is_ident_char)(i)
}

fn float_lit(i: &str) -> IResult<&str, &str> {
    recognize(tuple((
        opt(one_of("+-")),
        digit1,
        nchar('.'),
        take_while(|c: char| c.is_ascii_digit()),
        opt(tuple((one_of("eE"), opt(one_of("+-")), digit1))),
    )))(i)
}

fn hex_lit(i: &str) -> IResult<&str, &str> {
    recognize(preceded(tag("0x"), hex_digit1))(i)
}

fn int_lit(i: &str) -> IResult<&str, &str> {
    recognize(pair(opt(one_of("+-")), digit1))(i)
}

/// A numeric token of a dense literal or attribute.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    /// A decimal integer.
    Int(i128),
    /// A decimal float (parsed as f64, as MLIR does before rounding).
    Float(f64),
    /// `0x…`: an integer, or a float's bit pattern.
    Hex(u64),
}

impl<'a> Cursor<'a> {
    pub fn new(src: &'a str) -> Self {
        Cursor { src, pos: 0 }
    }

    pub fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    /// Skips whitespace and `//` comments.
    pub fn ws(&mut self) {
        loop {
            let r = self.rest();
            let t = r.trim_start();
            self.pos += r.len() - t.len();
            if t.starts_with("//") {
                let n = t.find('\n').unwrap_or(t.len());
                self.pos += n;
            } else {
                break;
            }
        }
    }

    pub fn at_end(&mut self) -> bool {
        self.ws();
        self.pos >= self.src.len()
    }

    /// A short description of what is at `pos`, for "found …".
    pub fn found_at(src: &str, pos: usize) -> String {
        let mut pos = pos.min(src.len());
        while !src.is_char_boundary(pos) {
            pos -= 1;
        }
        let r = &src[pos..];
        let Some(c) = r.chars().next() else {
            return "end of input".into();
        };
        if c == '\n' {
            return "end of line".into();
        }
        let tok: String = if is_ident_char(c) || c == '%' || c == '@' || c == '#' || c == '^' {
            let mut s = String::new();
            for (i, ch) in r.char_indices() {
                if i > 0 && !(is_ident_char(ch) || ch == '#') {
                    break;
                }
                s.push(ch);
                if s.len() >= 40 {
                    s.push('…');
                    break;
                }
            }
            s
        } else if c == '"' {
            let mut end = r[1..].find('"').map(|e| e + 2).unwrap_or(r.len()).min(42);
            // At most 42 bytes, cut where a character starts.
            while !r.is_char_boundary(end) {
                end -= 1;
            }
            r[..end].to_string()
        } else if r.starts_with("->") {
            "->".into()
        } else {
            c.to_string()
        };
        format!("`{tok}`")
    }

    /// An error at byte `pos`: expected `expected`, found what is there.
    pub fn err_at(&self, pos: usize, expected: impl Into<String>) -> ParseError {
        ParseError::at(
            self.src,
            pos,
            expected.into(),
            Self::found_at(self.src, pos),
        )
    }

    /// An error at the current position (after whitespace).
    pub fn err(&mut self, expected: impl Into<String>) -> ParseError {
        self.ws();
        self.err_at(self.pos, expected)
    }

    /// An error at `pos` where the found text is given explicitly.
    pub fn err_found(
        &self,
        pos: usize,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> ParseError {
        ParseError::at(self.src, pos, expected.into(), found.into())
    }

    pub fn peek(&mut self, s: &str) -> bool {
        self.ws();
        self.rest().starts_with(s)
    }

    /// Consumes punctuation `s` if present.
    pub fn eat(&mut self, s: &str) -> bool {
        if self.peek(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    /// Consumes punctuation `s` or fails.
    pub fn expect(&mut self, s: &str) -> PResult<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.err(format!("`{s}`")))
        }
    }

    /// True if keyword `kw` is next (not as a prefix of a longer word).
    pub fn peek_kw(&mut self, kw: &str) -> bool {
        self.ws();
        let r = self.rest();
        r.starts_with(kw) && !r[kw.len()..].starts_with(is_ident_char)
    }

    pub fn eat_kw(&mut self, kw: &str) -> bool {
        if self.peek_kw(kw) {
            self.pos += kw.len();
            true
        } else {
            false
        }
    }

    pub fn expect_kw(&mut self, kw: &str) -> PResult<()> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(self.err(format!("`{kw}`")))
        }
    }

    fn run<T>(&mut self, p: impl Fn(&'a str) -> IResult<&'a str, T>) -> Option<T> {
        self.ws();
        match p(self.rest()) {
            Ok((rest, v)) => {
                self.pos = self.src.len() - rest.len();
                Some(v)
            }
            Err(_) => None,
        }
    }

    /// A bare identifier (`func.func`, `stablehlo.add`, `GT`, `dims`).
    pub fn ident(&mut self, what: &str) -> PResult<&'a str> {
        self.run(bare_ident)
            .ok_or_else(|| self.err(what.to_string()))
    }

    /// An SSA value name with its `%`, including a `#N` result number.
    pub fn ssa(&mut self) -> PResult<(&'a str, usize)> {
        self.ws();
        let start = self.pos;
        let r = self.rest();
        if !r.starts_with('%') {
            return Err(self.err("an SSA value (`%name`)"));
        }
        self.pos += 1;
        let Some(_) = self.run(suffix_id) else {
            return Err(self.err_at(start, "an SSA value (`%name`)"));
        };
        if self.rest().starts_with('#') {
            self.pos += 1;
            if self.run(digit1).is_none() {
                return Err(self.err("a result number after `#`"));
            }
        }
        Ok((&self.src[start..self.pos], start))
    }

    /// A symbol `@name` or `@"name"`, without the `@`.
    pub fn symbol(&mut self) -> PResult<(String, usize)> {
        self.ws();
        let start = self.pos;
        if !self.rest().starts_with('@') {
            return Err(self.err("a symbol (`@name`)"));
        }
        self.pos += 1;
        if self.rest().starts_with('"') {
            let s = self.string()?;
            return Ok((s, start));
        }
        match self.run(suffix_id) {
            Some(s) => Ok((s.to_string(), start)),
            None => Err(self.err_at(start, "a symbol (`@name`)")),
        }
    }

    /// A decimal integer that fits `usize`.
    pub fn usize(&mut self, what: &str) -> PResult<usize> {
        self.ws();
        let start = self.pos;
        let Some(t) = self.run(int_lit) else {
            return Err(self.err(what.to_string()));
        };
        t.parse::<usize>()
            .map_err(|_| self.err_found(start, what.to_string(), format!("`{t}`")))
    }

    /// A decimal integer (signed).
    pub fn i64(&mut self, what: &str) -> PResult<i64> {
        self.ws();
        let start = self.pos;
        let Some(t) = self.run(int_lit) else {
            return Err(self.err(what.to_string()));
        };
        t.parse::<i64>()
            .map_err(|_| self.err_found(start, what.to_string(), format!("`{t}`")))
    }

    /// A number token: hex, float or integer.
    pub fn num(&mut self, what: &str) -> PResult<Num> {
        self.ws();
        let start = self.pos;
        let bad = |c: &Self, t: &str| c.err_found(start, what.to_string(), format!("`{t}`"));
        if let Some(t) = self.run(hex_lit) {
            return u64::from_str_radix(&t[2..], 16)
                .map(Num::Hex)
                .map_err(|_| bad(self, t));
        }
        if let Some(t) = self.run(float_lit) {
            return t.parse::<f64>().map(Num::Float).map_err(|_| bad(self, t));
        }
        if let Some(t) = self.run(int_lit) {
            return t.parse::<i128>().map(Num::Int).map_err(|_| bad(self, t));
        }
        Err(self.err(what.to_string()))
    }

    /// A string literal with MLIR escapes (`\XX` hex, `\n`, `\t`, `\"`, `\\`).
    pub fn string(&mut self) -> PResult<String> {
        self.ws();
        let start = self.pos;
        if !self.rest().starts_with('"') {
            return Err(self.err("a string literal"));
        }
        let bytes = self.src.as_bytes();
        let mut i = self.pos + 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            match bytes.get(i) {
                None | Some(b'\n') => {
                    return Err(self.err_found(start, "a closing `\"`", "an unterminated string"))
                }
                Some(b'"') => break,
                Some(b'\\') => {
                    let esc = |k: usize| bytes.get(i + k).copied();
                    match esc(1) {
                        Some(b'n') => {
                            out.push(b'\n');
                            i += 2;
                        }
                        Some(b't') => {
                            out.push(b'\t');
                            i += 2;
                        }
                        Some(b'"') => {
                            out.push(b'"');
                            i += 2;
                        }
                        Some(b'\\') => {
                            out.push(b'\\');
                            i += 2;
                        }
                        Some(h) if h.is_ascii_hexdigit() => match esc(2) {
                            Some(l) if l.is_ascii_hexdigit() => {
                                let v = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
                                out.push(v(h) * 16 + v(l));
                                i += 3;
                            }
                            _ => return Err(self.err_at(i, "a two-digit hex escape")),
                        },
                        _ => {
                            return Err(self.err_at(
                                i,
                                "a valid escape (`\\XX`, `\\n`, `\\t`, `\\\"`, `\\\\`)",
                            ))
                        }
                    }
                }
                Some(&b) => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        self.pos = i + 1;
        String::from_utf8(out)
            .map_err(|_| self.err_found(start, "a UTF-8 string", "invalid UTF-8 bytes"))
    }

    /// One bracketed group at the cursor (`(…)`, `[…]`, `{…}` or `<…>`,
    /// nested groups and strings inside, `->` not a closer), consumed
    /// through its closing bracket.
    pub fn skip_group(&mut self) -> PResult<&'a str> {
        self.ws();
        let start = self.pos;
        self.pos = self.scan_balanced(true)?;
        Ok(&self.src[start..self.pos])
    }

    /// Where a balanced run that starts at the cursor ends, over strings,
    /// `->` and nested brackets: with `one_group`, just past the closing
    /// bracket of the group at the cursor; otherwise at the first `,` or
    /// unmatched closing bracket at depth 0 (or the end of the text).
    fn scan_balanced(&self, one_group: bool) -> PResult<usize> {
        let bytes = self.src.as_bytes();
        let mut depth: Vec<u8> = Vec::new();
        let mut i = self.pos;
        while i < bytes.len() {
            match bytes[i] {
                b'"' => {
                    let mut c = self.clone();
                    c.pos = i;
                    c.string()?;
                    i = c.pos;
                    continue;
                }
                b'-' if bytes.get(i + 1) == Some(&b'>') => {
                    i += 2;
                    continue;
                }
                b @ (b'(' | b'[' | b'{' | b'<') => depth.push(b),
                b @ (b')' | b']' | b'}' | b'>') => {
                    let open = match b {
                        b')' => b'(',
                        b']' => b'[',
                        b'}' => b'{',
                        _ => b'<',
                    };
                    match depth.last() {
                        Some(&o) if o == open => {
                            depth.pop();
                            if one_group && depth.is_empty() {
                                return Ok(i + 1);
                            }
                        }
                        None if !one_group => break,
                        _ => return Err(self.err_at(i, "balanced brackets")),
                    }
                }
                b',' if depth.is_empty() && !one_group => break,
                _ if depth.is_empty() && one_group => {
                    return Err(self.err_at(i, "a bracketed group"))
                }
                _ => {}
            }
            i += 1;
        }
        if one_group || !depth.is_empty() {
            return Err(self.err_at(i, "a closing bracket"));
        }
        Ok(i)
    }

    /// Skips one balanced attribute value up to a `,` or closing bracket at
    /// depth 0, returning its trimmed text.
    pub fn skip_balanced(&mut self) -> PResult<&'a str> {
        self.ws();
        let start = self.pos;
        let i = self.scan_balanced(false)?;
        self.pos = i;
        let text = self.src[start..i].trim_end();
        if text.is_empty() {
            return Err(self.err_at(start, "an attribute value"));
        }
        Ok(text)
    }
}
