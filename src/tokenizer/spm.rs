//! SentencePiece-style BPE (Llama 2, Phi-3, Mistral v0.1 vocabularies):
//! spaces are spelled `▁`, a `▁` is put in front of the text, every
//! character is a symbol (a character without a token falls back to its
//! UTF-8 bytes as `<0xXX>` tokens) and adjacent symbols are merged by rank,
//! as HF `tokenizers` runs a `BPE` model with `byte_fallback`. From a GGUF
//! vocabulary (`tokenizer.ggml.model = llama`, which has scores but no
//! merges) the merges are derived from the scores as transformers does
//! ([`merges_from_scores`]).

use super::bpe::Bpe;
use std::collections::HashMap;
use std::ops::Range;

/// The character a space is spelled with.
pub const SPACE: char = '\u{2581}';

/// Where a `▁` is put in front of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix {
    /// Before every non-empty piece of text between added tokens, even one
    /// that starts with a space (HF `normalizers.Prepend("▁")`; llama.cpp's
    /// `add_space_prefix`; Llama 2's and Phi-3's `tokenizer.json`).
    Prepend,
    /// Before every piece that does not already start with a space (HF
    /// `Metaspace` with `prepend_scheme: always`).
    MetaspaceAlways,
    /// Like `MetaspaceAlways`, only for the piece at the start of the
    /// input (`prepend_scheme: first`).
    MetaspaceFirst,
    /// Never (`prepend_scheme: never`).
    Never,
}

/// The SentencePiece-style parts of a tokenizer beside its BPE model.
#[derive(Debug, Clone)]
pub struct Spm {
    /// Where `▁` is prepended.
    pub prefix: Prefix,
    /// Cut the spelled text before every `▁` (HF Metaspace `split: true`);
    /// merges then never cross a word boundary.
    pub split: bool,
    /// Decoding drops one leading space (HF's `Strip(" ", 1, 0)` decoder).
    pub strip_leading_space: bool,
    /// The id of each byte's `<0xXX>` token.
    byte_ids: [Option<u32>; 256],
}

impl Spm {
    /// The SentencePiece parts over `vocab` (for its `<0xXX>` tokens).
    pub fn new(
        vocab: &HashMap<String, u32>,
        prefix: Prefix,
        split: bool,
        strip_leading_space: bool,
    ) -> Spm {
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = vocab.get(&byte_token(b as u8)).copied();
        }
        Spm {
            prefix,
            split,
            strip_leading_space,
            byte_ids,
        }
    }

    /// Appends the ids of one piece of text (between added tokens) to
    /// `out`; `first` says it is the first piece of the input.
    pub fn encode_piece(&self, bpe: &Bpe, text: &str, first: bool, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let starts_with_space = text.starts_with(' ');
        let prefix = match self.prefix {
            Prefix::Prepend => true,
            Prefix::MetaspaceAlways => !starts_with_space,
            Prefix::MetaspaceFirst => first && !starts_with_space,
            Prefix::Never => false,
        };
        let mut spelled = String::with_capacity(text.len() + 3);
        if prefix {
            spelled.push(SPACE);
        }
        spelled.extend(text.chars().map(|c| if c == ' ' { SPACE } else { c }));
        let mut words: Vec<Range<usize>> = Vec::new();
        if self.split {
            let mut start = 0;
            for (i, c) in spelled.char_indices() {
                if c == SPACE && i > start {
                    words.push(start..i);
                    start = i;
                }
            }
            words.push(start..spelled.len());
        } else {
            words.push(0..spelled.len());
        }
        let mut ids = Vec::with_capacity(spelled.len());
        for w in words {
            ids.clear();
            self.symbols(bpe, &spelled[w], &mut ids);
            bpe.merge(&mut ids);
            out.extend_from_slice(&ids);
        }
    }

    /// One symbol per character: its token, else its bytes' `<0xXX>`
    /// tokens, else the unknown token (consecutive ones fused when the
    /// model says so), else nothing: HF's BPE `merge_word` with
    /// `byte_fallback`, including its order (a pending unknown is written
    /// when the next character with a token comes, or at the end).
    fn symbols(&self, bpe: &Bpe, word: &str, out: &mut Vec<u32>) {
        let mut pending_unk = false;
        let mut buf = [0u8; 4];
        for c in word.chars() {
            let s: &str = c.encode_utf8(&mut buf);
            if let Some(&id) = bpe.vocab.get(s) {
                if let (true, Some(unk)) = (pending_unk, bpe.unk()) {
                    out.push(unk);
                }
                pending_unk = false;
                out.push(id);
                continue;
            }
            let bytes: Option<Vec<u32>> =
                s.bytes().map(|b| self.byte_ids[usize::from(b)]).collect();
            if let Some(bytes) = bytes {
                out.extend(bytes);
                continue;
            }
            if let Some(unk) = bpe.unk() {
                if pending_unk && !bpe.fuse_unk() {
                    out.push(unk);
                }
                pending_unk = true;
            }
        }
        if let (true, Some(unk)) = (pending_unk, bpe.unk()) {
            out.push(unk);
        }
    }
}

/// The `<0xXX>` token of a byte.
pub fn byte_token(b: u8) -> String {
    format!("<0x{b:02X}>")
}

/// The bytes a SentencePiece token stands for: `<0xXX>` is that byte,
/// anything else its text with `▁` read as a space.
pub fn decode_token(token: &str) -> Vec<u8> {
    if let Some(hex) = token
        .strip_prefix("<0x")
        .and_then(|t| t.strip_suffix('>'))
        .filter(|h| h.len() == 2)
    {
        if let Ok(b) = u8::from_str_radix(hex, 16) {
            return vec![b];
        }
    }
    token.replace(SPACE, " ").into_bytes()
}

/// Merges implied by a vocabulary and its scores, best first, as
/// transformers' `generate_merges` derives them for a GGUF file that lists
/// none: every split of every token into two tokens, ranked by the token's
/// score (highest first), then the longer left part, then the longer right
/// part; ties keep vocabulary order, and within a token the order of the
/// parts' ids.
pub fn merges_from_scores(tokens: &[String], scores: &[f32]) -> Vec<(String, String)> {
    // A repeated token maps to its last id, as in transformers' dict.
    let ids: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    // (score, left length, right length, sequence) sorts the candidates;
    // `sequence` is the position in transformers' pre-sort list.
    struct Cand {
        score: f32,
        left_len: usize,
        right_len: usize,
        seq: usize,
        left: usize,
        right: usize,
    }
    let mut cands: Vec<Cand> = Vec::new();
    // transformers iterates a dict built from the token list: a repeated
    // token keeps its first position and its last score.
    let mut score_of: HashMap<&str, f32> = HashMap::with_capacity(tokens.len());
    for (t, &s) in tokens.iter().zip(scores) {
        score_of.insert(t.as_str(), s);
    }
    let mut seen = std::collections::HashSet::with_capacity(tokens.len());
    for token in tokens {
        if !seen.insert(token.as_str()) {
            continue;
        }
        let score = score_of[token.as_str()];
        let mut local: Vec<(usize, usize, usize, usize)> = Vec::new();
        // Splits at character boundaries (Python slices a str by code point).
        let cuts = token.char_indices().map(|(i, _)| i).skip(1);
        for cut in cuts {
            let (l, r) = token.split_at(cut);
            if let (Some(&li), Some(&ri)) = (ids.get(l), ids.get(r)) {
                local.push((li, ri, l.chars().count(), r.chars().count()));
            }
        }
        local.sort_by_key(|&(li, ri, _, _)| (li, ri));
        for (li, ri, ll, rl) in local {
            cands.push(Cand {
                score,
                left_len: ll,
                right_len: rl,
                seq: cands.len(),
                left: li,
                right: ri,
            });
        }
    }
    // Python's stable sort with reverse=True: descending keys, equal keys
    // in their original order.
    cands.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.left_len.cmp(&a.left_len))
            .then(b.right_len.cmp(&a.right_len))
            .then(a.seq.cmp(&b.seq))
    });
    cands
        .into_iter()
        .map(|c| (tokens[c.left].clone(), tokens[c.right].clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::bpe::{Bpe, BpeOptions};

    fn toks(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn merges_rank_by_score_then_lengths() {
        let t = toks(&["a", "b", "c", "ab", "bc", "abc"]);
        let s = [0.0, 0.0, 0.0, -1.0, -2.0, -0.5];
        let m = merges_from_scores(&t, &s);
        let m: Vec<(&str, &str)> = m.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        // abc (-0.5): "ab"+"c" (left 2) before "a"+"bc" (left 1); then ab, bc.
        assert_eq!(m, [("ab", "c"), ("a", "bc"), ("a", "b"), ("b", "c")]);
    }

    #[test]
    fn pieces_are_spelled_prefixed_and_fall_back_to_bytes() {
        let t = toks(&[
            "<unk>",
            "\u{2581}",
            "h",
            "i",
            "\u{2581}h",
            "\u{2581}hi",
            "<0xC3>",
            "<0xA9>",
        ]);
        let vocab: HashMap<String, u32> = t
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), i as u32))
            .collect();
        let merges = merges_from_scores(&t, &[0.0, 0.0, 0.0, 0.0, -1.0, -2.0, 0.0, 0.0]);
        let bpe = Bpe::new(
            vocab.clone(),
            &merges,
            BpeOptions {
                unk: Some(0),
                fuse_unk: true,
                ignore_merges: false,
            },
        )
        .unwrap();
        let spm = Spm::new(&vocab, Prefix::Prepend, false, true);
        let mut out = Vec::new();
        spm.encode_piece(&bpe, "hi é", true, &mut out);
        // ▁hi ▁ <0xC3> <0xA9>
        assert_eq!(out, [5, 1, 6, 7]);
        out.clear();
        spm.encode_piece(&bpe, "xy", true, &mut out);
        assert_eq!(out, [1, 0], "unknown characters fuse into one <unk>");
        assert_eq!(decode_token("<0x0A>"), b"\n");
        assert_eq!(decode_token("\u{2581}hi"), b" hi");
    }
}
