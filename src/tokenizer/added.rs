//! Added tokens (`<|im_start|>`, `<|endoftext|>`, …): found in the raw text
//! before pre-tokenization and never split.

use std::collections::HashMap;
use std::ops::Range;

/// One added token.
#[derive(Debug, Clone)]
pub struct AddedToken {
    /// Its id.
    pub id: u32,
    /// The text it matches.
    pub content: String,
    /// A special (control) token, like `<|im_end|>`.
    pub special: bool,
    /// Matched in the normalized text (HF `normalized`); kiln has no
    /// normalizer, so this only orders matching: non-normalized tokens are
    /// found first, as in HF.
    pub normalized: bool,
    /// Swallows the whitespace before it.
    pub lstrip: bool,
    /// Swallows the whitespace after it.
    pub rstrip: bool,
}

/// A piece of text after added tokens are found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// An added token.
    Token(u32),
    /// A byte range of plain text, to be pre-tokenized.
    Text(Range<usize>),
}

/// Leftmost-longest matcher over one set of added tokens.
#[derive(Debug, Clone, Default)]
struct Matcher {
    /// First byte → indices into `tokens`, longest content first.
    by_first: HashMap<u8, Vec<usize>>,
    tokens: Vec<AddedToken>,
}

impl Matcher {
    fn new(tokens: Vec<AddedToken>) -> Matcher {
        let mut by_first: HashMap<u8, Vec<usize>> = HashMap::new();
        for (i, t) in tokens.iter().enumerate() {
            if let Some(&b) = t.content.as_bytes().first() {
                by_first.entry(b).or_default().push(i);
            }
        }
        for list in by_first.values_mut() {
            list.sort_by_key(|&i| std::cmp::Reverse(tokens[i].content.len()));
        }
        Matcher { by_first, tokens }
    }

    /// Splits `text[range]`, appending pieces to `out`.
    fn split(&self, text: &str, range: Range<usize>, out: &mut Vec<Piece>) {
        if self.tokens.is_empty() {
            out.push(Piece::Text(range));
            return;
        }
        let bytes = text.as_bytes();
        let mut start = range.start;
        let mut pos = range.start;
        while pos < range.end {
            let hit = self.by_first.get(&bytes[pos]).and_then(|list| {
                list.iter().copied().find(|&i| {
                    let c = self.tokens[i].content.as_bytes();
                    pos + c.len() <= range.end && &bytes[pos..pos + c.len()] == c
                })
            });
            let Some(i) = hit else {
                pos += 1;
                continue;
            };
            let t = &self.tokens[i];
            let mut from = pos;
            let mut to = pos + t.content.len();
            if t.lstrip {
                from = start + text[start..from].trim_end().len();
            }
            if t.rstrip {
                to = range.end - text[to..range.end].trim_start().len();
            }
            if from > start {
                out.push(Piece::Text(start..from));
            }
            out.push(Piece::Token(t.id));
            start = to;
            pos = to;
        }
        if start < range.end {
            out.push(Piece::Text(start..range.end));
        }
    }
}

/// All added tokens of a tokenizer.
#[derive(Debug, Clone, Default)]
pub struct AddedTokens {
    /// Tokens matched first (HF: `normalized: false`, all special ones).
    raw: Matcher,
    /// Tokens matched in what is left.
    normalized: Matcher,
    ids: HashMap<String, u32>,
}

impl AddedTokens {
    /// Indexes `tokens`.
    pub fn new(tokens: Vec<AddedToken>) -> AddedTokens {
        let ids = tokens.iter().map(|t| (t.content.clone(), t.id)).collect();
        let (normalized, raw): (Vec<_>, Vec<_>) = tokens
            .into_iter()
            .filter(|t| !t.content.is_empty())
            .partition(|t| t.normalized && !t.special);
        AddedTokens {
            raw: Matcher::new(raw),
            normalized: Matcher::new(normalized),
            ids,
        }
    }

    /// The id of an added token by content.
    pub fn id_of(&self, content: &str) -> Option<u32> {
        self.ids.get(content).copied()
    }

    /// `text` cut into added tokens and the plain text between them.
    pub fn split(&self, text: &str) -> Vec<Piece> {
        let mut first = Vec::new();
        self.raw.split(text, 0..text.len(), &mut first);
        let mut out = Vec::with_capacity(first.len());
        for p in first {
            match p {
                Piece::Text(r) => self.normalized.split(text, r, &mut out),
                token => out.push(token),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(id: u32, content: &str) -> AddedToken {
        AddedToken {
            id,
            content: content.into(),
            special: true,
            normalized: false,
            lstrip: false,
            rstrip: false,
        }
    }

    #[test]
    fn leftmost_longest() {
        let a = AddedTokens::new(vec![tok(1, "<a>"), tok(2, "<a><b>"), tok(3, "<b>")]);
        let text = "x<a><b>y<b>é<a>";
        let pieces = a.split(text);
        assert_eq!(
            pieces,
            [
                Piece::Text(0..1),
                Piece::Token(2),
                Piece::Text(7..8),
                Piece::Token(3),
                Piece::Text(11..13),
                Piece::Token(1),
            ]
        );
    }

    #[test]
    fn strip_flags() {
        let mut t = tok(7, "<m>");
        t.lstrip = true;
        t.rstrip = true;
        let a = AddedTokens::new(vec![t]);
        assert_eq!(
            a.split("a  <m>  b"),
            [Piece::Text(0..1), Piece::Token(7), Piece::Text(8..9)]
        );
    }
}
