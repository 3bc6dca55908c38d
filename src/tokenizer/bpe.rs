//! The BPE model: a vocabulary, merges ranked by their order, and the merge
//! loop HF tokenizers runs on one word.

use super::byte_level;
use super::TokenizerError;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// A byte-level BPE vocabulary with its ranked merges.
#[derive(Debug, Clone)]
pub struct Bpe {
    /// Token string (byte-level spelling) → id.
    pub vocab: HashMap<String, u32>,
    /// `(left, right)` → `(rank, merged id)`; rank = position in the list.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// The id of each single byte's token, when the vocabulary has one.
    byte_ids: [Option<u32>; 256],
    /// The id bytes without a token become (`None`: they are dropped, as HF
    /// does with no `unk_token`).
    unk: Option<u32>,
    /// Consecutive unknown bytes give one `unk`.
    fuse_unk: bool,
    /// A word that is itself in the vocabulary is taken whole.
    ignore_merges: bool,
}

/// Options of a BPE model beyond its vocabulary and merges.
#[derive(Debug, Clone, Copy, Default)]
pub struct BpeOptions {
    /// See [`Bpe`]: the id unknown bytes become.
    pub unk: Option<u32>,
    /// See [`Bpe`]: fuse consecutive unknowns.
    pub fuse_unk: bool,
    /// See [`Bpe`]: take in-vocabulary words whole.
    pub ignore_merges: bool,
}

impl Bpe {
    /// Builds the model; `merges` are pairs of token strings, best first.
    /// Every merge's two parts and their concatenation must be tokens.
    pub fn new(
        vocab: HashMap<String, u32>,
        merges: &[(String, String)],
        options: BpeOptions,
    ) -> Result<Bpe, TokenizerError> {
        let mut ranked = HashMap::with_capacity(merges.len());
        for (rank, (a, b)) in merges.iter().enumerate() {
            let id = |t: &str| {
                vocab.get(t).copied().ok_or_else(|| {
                    TokenizerError::Malformed(format!(
                        "merge {rank} (`{a} {b}`) uses `{t}`, which is not in the vocabulary"
                    ))
                })
            };
            let key = (id(a)?, id(b)?);
            let merged = id(&format!("{a}{b}"))?;
            let rank = u32::try_from(rank)
                .map_err(|_| TokenizerError::Malformed("too many merges".into()))?;
            // A repeated pair keeps its first (best) rank, as in HF.
            ranked.entry(key).or_insert((rank, merged));
        }
        let table = byte_level::byte_chars();
        let mut byte_ids = [None; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = vocab.get(table[b].to_string().as_str()).copied();
        }
        Ok(Bpe {
            vocab,
            merges: ranked,
            byte_ids,
            unk: options.unk,
            fuse_unk: options.fuse_unk,
            ignore_merges: options.ignore_merges,
        })
    }

    /// The id unknown symbols become, if any.
    pub fn unk(&self) -> Option<u32> {
        self.unk
    }

    /// Whether consecutive unknown symbols become one.
    pub fn fuse_unk(&self) -> bool {
        self.fuse_unk
    }

    /// Appends the ids of one pre-tokenized word (raw UTF-8 bytes) to `out`.
    pub fn encode_word(&self, word: &[u8], out: &mut Vec<u32>) {
        if self.ignore_merges {
            let mut spelled = String::with_capacity(word.len() * 2);
            byte_level::encode_bytes(word, &mut spelled);
            if let Some(&id) = self.vocab.get(&spelled) {
                out.push(id);
                return;
            }
        }
        // Symbols: one per byte that has a token (missing ones dropped or
        // turned into `unk` before merging, as HF's `merge_word` does).
        let mut ids: Vec<u32> = Vec::with_capacity(word.len());
        let mut last_unk = false;
        for &b in word {
            match (self.byte_ids[usize::from(b)], self.unk) {
                (Some(id), _) => {
                    ids.push(id);
                    last_unk = false;
                }
                (None, Some(unk)) => {
                    if !(self.fuse_unk && last_unk) {
                        ids.push(unk);
                    }
                    last_unk = true;
                }
                (None, None) => {}
            }
        }
        self.merge(&mut ids);
        out.extend(ids);
    }

    /// Repeatedly merges the adjacent pair of lowest rank, leftmost first,
    /// until no pair has a merge: HF's priority-queue loop.
    pub(crate) fn merge(&self, ids: &mut Vec<u32>) {
        let n = ids.len();
        if n < 2 {
            return;
        }
        // Linked list over symbol slots; a merged-away slot has len 0.
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        for i in 0..n - 1 {
            if let Some(&(rank, new)) = self.merges.get(&(ids[i], ids[i + 1])) {
                heap.push(Reverse((rank, i, ids[i], ids[i + 1], new)));
            }
        }
        while let Some(Reverse((_, i, _, _, new))) = heap.pop() {
            let j = next[i];
            // Stale entry: the left symbol was merged away, or the pair at
            // `i` no longer merges into `new` (HF's exact test).
            if !alive[i] || j >= n {
                continue;
            }
            if self.merges.get(&(ids[i], ids[j])).map(|&(_, m)| m) != Some(new) {
                continue;
            }
            ids[i] = new;
            alive[j] = false;
            next[i] = next[j];
            if next[j] < n {
                prev[next[j]] = i;
            }
            let p = prev[i];
            if p < n {
                if let Some(&(r, m)) = self.merges.get(&(ids[p], new)) {
                    heap.push(Reverse((r, p, ids[p], new, m)));
                }
            }
            let q = next[i];
            if q < n {
                if let Some(&(r, m)) = self.merges.get(&(new, ids[q])) {
                    heap.push(Reverse((r, i, new, ids[q], m)));
                }
            }
        }
        let mut k = 0;
        for i in 0..n {
            if alive[i] {
                ids[k] = ids[i];
                k += 1;
            }
        }
        ids.truncate(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(tokens: &[&str], merges: &[(&str, &str)]) -> Bpe {
        let vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.to_string(), i as u32))
            .collect();
        let merges: Vec<(String, String)> = merges
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        Bpe::new(vocab, &merges, BpeOptions::default()).unwrap()
    }

    #[test]
    fn merges_by_rank_leftmost_first() {
        let m = model(
            &["a", "b", "aa", "ab", "aab"],
            &[("a", "a"), ("a", "b"), ("aa", "b")],
        );
        let mut out = Vec::new();
        m.encode_word(b"aaa", &mut out);
        assert_eq!(out, [2, 0]);
        out.clear();
        m.encode_word(b"aab", &mut out);
        assert_eq!(out, [4]);
        out.clear();
        m.encode_word(b"xab", &mut out); // `x` has no token: dropped
        assert_eq!(out, [3]);
    }

    #[test]
    fn merge_outside_vocab_is_an_error() {
        let vocab = [("a".to_string(), 0u32)].into_iter().collect();
        let err = Bpe::new(vocab, &[("a".into(), "a".into())], BpeOptions::default());
        assert!(err.is_err());
    }
}
