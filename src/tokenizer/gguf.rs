//! The HF `tokenizer.json` (and `tokenizer_config.json`) a GGUF file's
//! `tokenizer.*` metadata describes, built as transformers' GGUF loader
//! builds it (`transformers/integrations/gguf/gguf_tokenizer_mapping.py`):
//!
//! - `gpt2`: byte-level BPE; tokens spelled outside GPT-2's byte alphabet
//!   are re-spelled from their UTF-8 bytes; the pre-tokenizer comes from
//!   `tokenizer.ggml.pre`.
//! - `llama`: SentencePiece-style BPE with byte fallback, merges from the
//!   file or derived from the scores; spaces spelled `▁`, prepended when
//!   `add_space_prefix` (as llama.cpp does).
//! - `llama` in a Gemma / Gemma 2 / Gemma 3 file: Gemma's shape (no space
//!   prefix, no leading-space strip), whitespace tokens respelled with `▁`,
//!   merges ordered by token position.
//!
//! Control tokens (type 3) become special added tokens and user-defined
//! ones (type 4) plain added tokens, both matched whole.

use super::TokenizerError;
use crate::params::gguf::{GgufFile, GgufValue};
use ahash::AHashMap;
use rayon::prelude::*;
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};

/// llama.cpp's token type for control tokens (`<|im_end|>`).
const CONTROL: i32 = 3;
/// llama.cpp's token type for user-defined tokens, matched whole.
const USER_DEFINED: i32 = 4;

/// SentencePiece's spelling of a space.
const SPACE: &str = "\u{2581}";

/// Llama 3's pre-tokenizer regex, as its `tokenizer.json` spells it.
pub const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's pre-tokenizer regex, as its `tokenizer.json` spells it.
pub const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The GGUF tokenizer models kiln reads, for error messages.
pub const SUPPORTED_MODELS: &str =
    "gpt2, byte-level BPE; llama, SentencePiece BPE (Llama, Mistral, Phi-3, Gemma 1-3)";

/// The `tokenizer.ggml.pre` values kiln reads, for error messages.
pub const SUPPORTED_PRE: &str =
    "smollm, starcoder, gpt2, default, llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen";

/// An HF tokenizer's files, in memory.
#[derive(Debug, Clone)]
pub struct TokenizerFiles {
    /// `tokenizer.json`.
    pub tokenizer_json: String,
    /// `tokenizer_config.json` (bos/eos/pad tokens, chat template).
    pub tokenizer_config_json: String,
}

/// The `tokenizer.*` metadata of a GGUF file.
#[derive(Debug, Clone, Default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `gpt2` or `llama`.
    pub model: String,
    /// `general.architecture` (Gemma files need Gemma's rules).
    pub arch: String,
    /// `tokenizer.ggml.pre` (byte-level only; absent means `gpt2`).
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type` (3 = control, 4 = user-defined).
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.scores` (SentencePiece).
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.merges`, each `"a b"`.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` (default: true for `llama`, else false).
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix` (default true).
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

fn malformed(msg: impl Into<String>) -> TokenizerError {
    TokenizerError::Malformed(msg.into())
}

impl GgufVocab {
    /// Reads the `tokenizer.*` metadata of `f`.
    pub fn read(f: &GgufFile) -> Result<GgufVocab, TokenizerError> {
        let meta = |k: &str| f.get_metadata(k);
        let s = |k: &str| meta(k).and_then(GgufValue::as_str).map(str::to_string);
        let id = |k: &str| meta(k).and_then(GgufValue::as_u64).map(|x| x as u32);
        let flag = |k: &str| meta(k).and_then(GgufValue::as_bool);
        let tokens = meta("tokenizer.ggml.tokens")
            .and_then(GgufValue::as_string_array)
            .ok_or_else(|| malformed("tokenizer.ggml.tokens is missing or not a string array"))?
            .into_iter()
            .map(str::to_string)
            .collect();
        let numbers = |k: &str| -> Result<Option<Vec<f64>>, TokenizerError> {
            meta(k)
                .map(|v| {
                    v.as_array()
                        .ok_or_else(|| malformed(format!("{k} is not an array")))
                        .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(0.0)).collect())
                })
                .transpose()
        };
        let merges = match meta("tokenizer.ggml.merges") {
            None => None,
            Some(v) => Some(
                v.as_string_array()
                    .ok_or_else(|| malformed("tokenizer.ggml.merges is not a string array"))?
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
            ),
        };
        Ok(GgufVocab {
            model: s("tokenizer.ggml.model").unwrap_or_default(),
            arch: s("general.architecture").unwrap_or_default(),
            pre: s("tokenizer.ggml.pre"),
            tokens,
            token_types: numbers("tokenizer.ggml.token_type")?
                .map(|v| v.into_iter().map(|x| x as i32).collect()),
            scores: numbers("tokenizer.ggml.scores")?
                .map(|v| v.into_iter().map(|x| x as f32).collect()),
            merges,
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            unk: id("tokenizer.ggml.unknown_token_id"),
            pad: id("tokenizer.ggml.padding_token_id"),
            add_bos: flag("tokenizer.ggml.add_bos_token"),
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix"),
            chat_template: s("tokenizer.chat_template"),
        })
    }

    /// The kind of tokenizer, or `Err` naming the unsupported setting.
    fn kind(&self) -> Result<Kind, TokenizerError> {
        match self.model.as_str() {
            "gpt2" => Ok(Kind::ByteLevel),
            "llama" if is_gemma(&self.arch) => Ok(Kind::Gemma),
            "llama" => Ok(Kind::SentencePiece),
            m => Err(TokenizerError::Unsupported(format!(
                "tokenizer.ggml.model = {m:?} (supported: {SUPPORTED_MODELS})"
            ))),
        }
    }

    /// The HF `tokenizer.json` and `tokenizer_config.json` of this
    /// vocabulary (see the module documentation), which
    /// [`super::Tokenizer::from_tokenizer_json`] and transformers both load.
    pub fn tokenizer_files(&self) -> Result<TokenizerFiles, TokenizerError> {
        let p = self.parts()?;
        let mut vocab = Map::with_capacity(p.spelled.len());
        // A repeated spelling keeps its first place and its last id, as
        // transformers' dict does.
        for (i, t) in p.spelled.iter().enumerate() {
            vocab.insert(t.clone(), json!(i));
        }
        let added: Vec<Value> = p
            .added
            .iter()
            .map(|(id, content, special)| {
                json!({
                    "id": id, "content": content, "single_word": false, "lstrip": false,
                    "rstrip": false, "normalized": false, "special": special
                })
            })
            .collect();
        let model = json!({
            "type": "BPE",
            "dropout": null,
            "unk_token": p.unk,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": p.spm,
            "byte_fallback": p.spm,
            "ignore_merges": p.ignore_merges,
            "vocab": vocab,
            "merges": p.merges.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>()
        });
        let tokenizer = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": p.normalizer,
            "pre_tokenizer": p.pre_tokenizer,
            "post_processor": p.post_processor,
            "decoder": p.decoder,
            "model": model
        });
        let mut tokenizer_json =
            serde_json::to_string(&tokenizer).map_err(|e| malformed(e.to_string()))?;
        tokenizer_json.push('\n');
        Ok(TokenizerFiles {
            tokenizer_json,
            tokenizer_config_json: p.config_json()?,
        })
    }

    /// The `tokenizers` crate's tokenizer of this vocabulary, built
    /// directly (no JSON in between, which is what makes loading a
    /// 262,144-token vocabulary fast), and its `tokenizer_config.json`. It
    /// is the tokenizer [`GgufVocab::tokenizer_files`] describes.
    pub(super) fn build(&self) -> Result<(tokenizers::Tokenizer, String), TokenizerError> {
        use tokenizers::models::bpe::BPE;
        let p = self.parts()?;
        let config = p.config_json()?;
        let mut vocab = ahash::AHashMap::with_capacity(p.spelled.len());
        for (i, t) in p.spelled.into_iter().enumerate() {
            vocab.insert(t, i as u32);
        }
        let mut bpe = BPE::builder()
            .vocab_and_merges(vocab, p.merges)
            .fuse_unk(p.spm)
            .byte_fallback(p.spm)
            .ignore_merges(p.ignore_merges);
        if let Some(u) = p.unk {
            bpe = bpe.unk_token(u);
        }
        let bpe = bpe.build().map_err(|e| malformed(e.to_string()))?;
        let mut tok = tokenizers::Tokenizer::new(bpe);
        tok.with_normalizer(component::<tokenizers::NormalizerWrapper>(
            p.normalizer,
            "normalizer",
        )?);
        tok.with_pre_tokenizer(component::<tokenizers::PreTokenizerWrapper>(
            p.pre_tokenizer,
            "pre_tokenizer",
        )?);
        tok.with_post_processor(component::<tokenizers::PostProcessorWrapper>(
            p.post_processor,
            "post_processor",
        )?);
        tok.with_decoder(component::<tokenizers::DecoderWrapper>(
            p.decoder, "decoder",
        )?);
        let added: Vec<tokenizers::AddedToken> = p
            .added
            .into_iter()
            .map(|(_, content, special)| {
                tokenizers::AddedToken::from(content, special).normalized(false)
            })
            .collect();
        tok.add_tokens(&added);
        Ok((tok, config))
    }

    /// What [`GgufVocab::tokenizer_files`] and [`GgufVocab::build`] write.
    fn parts(&self) -> Result<Parts, TokenizerError> {
        let kind = self.kind()?;
        let n = self.tokens.len();
        if u32::try_from(n).is_err() {
            return Err(malformed("too many tokens"));
        }
        let types = self.token_types(n)?;
        self.check_special_ids(n)?;
        let spelled = spellings(kind, &self.tokens);
        let added = added_tokens(kind, &self.tokens, &types, &spelled);
        let merges = self.merge_pairs(kind, &spelled)?;
        let c = self.components(kind)?;
        let names = Names::new(&added, &spelled);
        let spm = kind != Kind::ByteLevel;
        // llama.cpp adds bos to a SentencePiece vocabulary that does not say otherwise.
        let add_bos = self.add_bos.unwrap_or(spm);
        let post_processor = match (add_bos, self.bos) {
            (true, Some(b)) => bos_template(b, &names.of(b)),
            _ => Value::Null,
        };
        let config = self.config(add_bos, spm, &names);
        let unk = if spm {
            self.unk.map(|u| names.of(u))
        } else {
            None
        };
        Ok(Parts {
            unk,
            spelled,
            merges,
            added,
            spm,
            ignore_merges: c.ignore_merges,
            normalizer: c.normalizer,
            pre_tokenizer: c.pre_tokenizer,
            decoder: c.decoder,
            post_processor,
            config,
        })
    }

    /// Each token's type (all 1, normal, when the file gives none).
    fn token_types(&self, n: usize) -> Result<Vec<i32>, TokenizerError> {
        match &self.token_types {
            None => Ok(vec![1; n]),
            Some(t) if t.len() == n => Ok(t.clone()),
            Some(t) => Err(malformed(format!(
                "tokenizer.ggml.token_type has {} entries for {n} tokens",
                t.len()
            ))),
        }
    }

    /// Checks that the bos, eos, unknown and padding ids name tokens.
    fn check_special_ids(&self, n: usize) -> Result<(), TokenizerError> {
        for (key, id) in [
            ("bos_token_id", self.bos),
            ("eos_token_id", self.eos),
            ("unknown_token_id", self.unk),
            ("padding_token_id", self.pad),
        ] {
            if id.is_some_and(|i| i as usize >= n) {
                return Err(malformed(format!(
                    "tokenizer.ggml.{key} = {} is not a token id below {n}",
                    id.unwrap_or(0)
                )));
            }
        }
        Ok(())
    }

    /// The BPE merges: the file's, else none for byte-level, else derived
    /// from the scores (SentencePiece) or the token positions (Gemma).
    fn merge_pairs(
        &self,
        kind: Kind,
        spelled: &[String],
    ) -> Result<Vec<(String, String)>, TokenizerError> {
        let n = self.tokens.len();
        Ok(match (&self.merges, kind) {
            (Some(m), _) => parse_merges(m)?,
            (None, Kind::ByteLevel) => Vec::new(),
            (None, Kind::SentencePiece) => {
                let scores = self.scores.as_ref().ok_or_else(|| {
                    malformed("tokenizer.ggml.scores is missing (and there are no merges)")
                })?;
                if scores.len() != n {
                    return Err(malformed(format!(
                        "tokenizer.ggml.scores has {} entries for {n} tokens",
                        scores.len()
                    )));
                }
                merges_from_scores(&self.tokens, scores)
            }
            // Gemma's scores do not follow its merge order; token positions do.
            (None, Kind::Gemma) => {
                let positions: Vec<f32> = (0..n).map(|i| -(i as f32)).collect();
                merges_from_scores(spelled, &positions)
            }
        })
    }

    /// The normalizer, pre-tokenizer and decoder of `kind`, and whether a
    /// word that is a token whole skips the merges.
    fn components(&self, kind: Kind) -> Result<Components, TokenizerError> {
        let sp = SPACE;
        let replace_space = json!({"type": "Replace", "pattern": {"String": " "}, "content": sp});
        let mut decoders = vec![
            json!({"type": "Replace", "pattern": {"String": sp}, "content": " "}),
            json!({"type": "ByteFallback"}),
            json!({"type": "Fuse"}),
        ];
        Ok(match kind {
            Kind::ByteLevel => {
                let pre = self.pre.as_deref().unwrap_or("gpt2");
                let pre_tokenizer = byte_level_pre_tokenizer(pre).ok_or_else(|| {
                    TokenizerError::Unsupported(format!(
                        "tokenizer.ggml.pre = {pre:?} (supported: {SUPPORTED_PRE})"
                    ))
                })?;
                Components {
                    normalizer: Value::Null,
                    pre_tokenizer,
                    decoder: json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}),
                    // llama.cpp takes a word that is a token whole for Llama 3.
                    ignore_merges: matches!(pre, "llama-bpe" | "llama3" | "llama-v3"),
                }
            }
            Kind::SentencePiece => {
                let prefix = self.add_space_prefix.unwrap_or(true);
                let normalizer = if prefix {
                    json!({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": sp}, replace_space]})
                } else {
                    json!({"type": "Sequence", "normalizers": [replace_space]})
                };
                if prefix {
                    decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
                }
                Components {
                    normalizer,
                    pre_tokenizer: Value::Null,
                    decoder: json!({"type": "Sequence", "decoders": decoders}),
                    ignore_merges: false,
                }
            }
            Kind::Gemma => Components {
                normalizer: replace_space,
                pre_tokenizer: json!({"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": false}),
                decoder: json!({"type": "Sequence", "decoders": decoders}),
                ignore_merges: false,
            },
        })
    }

    /// `tokenizer_config.json`: the tokenizer class, bos/eos (and unknown,
    /// padding) tokens by name, and the chat template.
    fn config(&self, add_bos: bool, spm: bool, names: &Names) -> Map<String, Value> {
        let mut config = Map::new();
        config.insert("tokenizer_class".into(), json!("PreTrainedTokenizerFast"));
        config.insert("add_bos_token".into(), json!(add_bos));
        config.insert("add_eos_token".into(), json!(false));
        config.insert("bos_token".into(), json!(self.bos.map(|b| names.of(b))));
        config.insert("eos_token".into(), json!(self.eos.map(|e| names.of(e))));
        if let Some(u) = self.unk.filter(|_| spm) {
            config.insert("unk_token".into(), json!(names.of(u)));
        }
        if let Some(p) = self.pad {
            config.insert("pad_token".into(), json!(names.of(p)));
        }
        config.insert("clean_up_tokenization_spaces".into(), json!(false));
        if let Some(t) = &self.chat_template {
            config.insert("chat_template".into(), json!(t));
        }
        config
    }
}

/// The vocabulary's spelling of each token.
fn spellings(kind: Kind, tokens: &[String]) -> Vec<String> {
    match kind {
        Kind::ByteLevel => tokens.iter().map(|t| byte_level_spelling(t)).collect(),
        Kind::SentencePiece => tokens.to_vec(),
        // A token of spaces is stored as spaces but looked up as `▁`s.
        Kind::Gemma => tokens
            .iter()
            .map(|t| {
                if t.contains(' ') && t.chars().all(py_isspace) {
                    SPACE.repeat(t.chars().count())
                } else {
                    t.clone()
                }
            })
            .collect(),
    }
}

/// `(id, content, special)` of the added tokens: control tokens (special)
/// and user-defined ones, in id order.
fn added_tokens(
    kind: Kind,
    tokens: &[String],
    types: &[i32],
    spelled: &[String],
) -> Vec<(u32, String, bool)> {
    let in_vocab: HashSet<&str> = spelled.iter().map(String::as_str).collect();
    let mut added = Vec::new();
    for (i, (t, &ty)) in tokens.iter().zip(types).enumerate() {
        // A byte-level control token outside the byte alphabet is a
        // llama.cpp mislabel: transformers skips it. A user-defined one
        // is added only under its vocabulary spelling.
        let special =
            ty == CONTROL && (kind != Kind::ByteLevel || t.chars().all(is_byte_level_char));
        let user = ty == USER_DEFINED && in_vocab.contains(t.as_str());
        if special || user {
            added.push((i as u32, t.clone(), special));
        }
    }
    added
}

/// The post-processor that prepends bos (id `b`, named `bt`) to each
/// sequence.
fn bos_template(b: u32, bt: &str) -> Value {
    json!({
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": bt, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}}
        ],
        "pair": [
            {"SpecialToken": {"id": bt, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": bt, "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}}
        ],
        "special_tokens": {bt: {"id": bt, "ids": [b], "tokens": [bt]}}
    })
}

/// The text a config names a token by: an added token's content, else its
/// vocabulary spelling.
struct Names<'a> {
    added: HashMap<u32, &'a str>,
    spelled: &'a [String],
}

impl<'a> Names<'a> {
    /// The names of a vocabulary's `added` tokens and `spelled` tokens.
    fn new(added: &'a [(u32, String, bool)], spelled: &'a [String]) -> Self {
        let added = added.iter().map(|(i, t, _)| (*i, t.as_str())).collect();
        Names { added, spelled }
    }

    /// The name of token `i`.
    fn of(&self, i: u32) -> String {
        self.added
            .get(&i)
            .map(|s| s.to_string())
            .unwrap_or_else(|| self.spelled[i as usize].clone())
    }
}

/// A tokenizer's normalizer, pre-tokenizer and decoder (`null`: none) and
/// its BPE model's `ignore_merges`.
struct Components {
    normalizer: Value,
    pre_tokenizer: Value,
    decoder: Value,
    ignore_merges: bool,
}

/// One tokenizer component from its `tokenizer.json` value (`null`: none).
fn component<T: serde::de::DeserializeOwned>(
    v: Value,
    what: &str,
) -> Result<Option<T>, TokenizerError> {
    serde_json::from_value(v).map_err(|e| malformed(format!("{what}: {e}")))
}

/// A GGUF vocabulary as the pieces of an HF tokenizer.
struct Parts {
    /// Each id's token in the vocabulary's spelling.
    spelled: Vec<String>,
    merges: Vec<(String, String)>,
    /// `(id, content, special)` of the added tokens.
    added: Vec<(u32, String, bool)>,
    unk: Option<String>,
    /// SentencePiece-style (byte fallback, unknown runs fused).
    spm: bool,
    ignore_merges: bool,
    normalizer: Value,
    pre_tokenizer: Value,
    decoder: Value,
    post_processor: Value,
    config: Map<String, Value>,
}

impl Parts {
    fn config_json(&self) -> Result<String, TokenizerError> {
        let mut s =
            serde_json::to_string_pretty(&self.config).map_err(|e| malformed(e.to_string()))?;
        s.push('\n');
        Ok(s)
    }
}

impl TokenizerFiles {
    /// The tokenizer files of a GGUF file's `tokenizer.*` metadata
    /// ([`GgufVocab::read`], then [`GgufVocab::tokenizer_files`]).
    pub fn from_gguf(f: &GgufFile) -> Result<TokenizerFiles, TokenizerError> {
        GgufVocab::read(f)?.tokenizer_files()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ByteLevel,
    SentencePiece,
    Gemma,
}

/// Gemma, Gemma 2 and Gemma 3 files (`general.architecture`).
fn is_gemma(arch: &str) -> bool {
    matches!(arch, "gemma" | "gemma2" | "gemma3" | "gemma3n")
}

/// Python's `str.isspace` for one character.
fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The pre-tokenizer of a byte-level vocabulary's `tokenizer.ggml.pre`.
fn byte_level_pre_tokenizer(pre: &str) -> Option<Value> {
    let byte_level = |regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": regex});
    let split = |regex: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            byte_level(false)
        ]})
    };
    Some(match pre {
        // SmolLM2's and StarCoder's own tokenizer.json (llama.cpp: `\p{N}`
        // then the GPT-2 regex).
        "smollm" | "starcoder" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level(true)
        ]}),
        "gpt2" | "default" => byte_level(true),
        "llama-bpe" | "llama3" | "llama-v3" => split(LLAMA3_REGEX),
        "qwen2" | "deepseek-r1-qwen" => split(QWEN2_REGEX),
        _ => return None,
    })
}

fn parse_merges(merges: &[String]) -> Result<Vec<(String, String)>, TokenizerError> {
    merges
        .iter()
        .enumerate()
        .map(|(i, m)| match m.split_once(' ') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(' ') => {
                Ok((a.to_string(), b.to_string()))
            }
            _ => Err(malformed(format!(
                "tokenizer.ggml.merges[{i}] = {m:?} is not two tokens separated by one space"
            ))),
        })
        .collect()
}

/// The BPE merges transformers derives from a SentencePiece vocabulary and
/// its scores (`generate_merges`): every split of a token into two tokens,
/// best score first, then longer left and right pieces first, ties in
/// vocabulary order.
pub fn merges_from_scores(tokens: &[String], scores: &[f32]) -> Vec<(String, String)> {
    // A repeated token maps to its last id (and score), as in transformers'
    // dict, and is visited once, at its first position.
    let mut ids: AHashMap<&str, usize> = AHashMap::with_capacity(tokens.len());
    let mut first: AHashMap<&str, usize> = AHashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        ids.insert(t.as_str(), i);
        first.entry(t.as_str()).or_insert(i);
    }
    // (score, left length, right length, sequence) sorts the candidates;
    // `sequence` is the position in transformers' pre-sort list.
    struct Cand {
        score: f32,
        left_len: u32,
        right_len: u32,
        left: u32,
        right: u32,
    }
    let per_token: Vec<Vec<Cand>> = tokens
        .par_iter()
        .enumerate()
        .map(|(i, token)| {
            let mut local = Vec::new();
            if first[token.as_str()] != i {
                return local;
            }
            let score = scores.get(ids[token.as_str()]).copied().unwrap_or(0.0);
            let chars = token.chars().count() as u32;
            // Splits at character boundaries (Python slices a str by code point).
            for (k, (cut, _)) in token.char_indices().enumerate().skip(1) {
                let (l, r) = token.split_at(cut);
                // The right part is looked up only when the left is a token.
                let Some(&li) = ids.get(l) else { continue };
                if let Some(&ri) = ids.get(r) {
                    local.push(Cand {
                        score,
                        left_len: k as u32,
                        right_len: chars - k as u32,
                        left: li as u32,
                        right: ri as u32,
                    });
                }
            }
            local.sort_by_key(|c| (c.left, c.right));
            local
        })
        .collect();
    // Python's stable sort with reverse=True: descending keys, equal keys
    // in their original order (rayon's sort is stable too).
    let mut cands: Vec<Cand> = per_token.into_iter().flatten().collect();
    cands.par_sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.left_len.cmp(&a.left_len))
            .then(b.right_len.cmp(&a.right_len))
    });
    cands
        .par_iter()
        .map(|c| {
            (
                tokens[c.left as usize].clone(),
                tokens[c.right as usize].clone(),
            )
        })
        .collect()
}

/// GPT-2's byte alphabet: the character spelling each byte.
fn byte_char(b: u8) -> char {
    let printable = |c: u32| {
        (0x21..=0x7e).contains(&c) || (0xa1..=0xac).contains(&c) || (0xae..=0xff).contains(&c)
    };
    let b32 = u32::from(b);
    if printable(b32) {
        return char::from(b);
    }
    let rank = (0..b32).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + rank).unwrap_or('\u{fffd}')
}

fn is_byte_level_char(c: char) -> bool {
    let code = c as u32;
    (0x21..=0x7e).contains(&code)
        || (0xa1..=0xac).contains(&code)
        || (0xae..=0xff).contains(&code)
        || (256..256 + 68).contains(&code)
}

/// A GGUF token as it appears in an HF byte-level vocabulary: unchanged
/// when already spelled in the byte alphabet, else re-spelled from its
/// UTF-8 bytes (what transformers does).
fn byte_level_spelling(token: &str) -> String {
    if token.chars().all(is_byte_level_char) {
        token.to_string()
    } else {
        token.bytes().map(byte_char).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet() {
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(b'a'), 'a');
        assert_eq!(byte_level_spelling("é"), "é");
        assert_eq!(byte_level_spelling("a b"), "aĠb");
        assert_eq!(byte_level_spelling("€").chars().count(), 3);
        assert_eq!(byte_level_spelling("Ġhello"), "Ġhello");
        for b in 0..=255u8 {
            assert!(is_byte_level_char(byte_char(b)));
        }
    }

    #[test]
    fn merges_follow_scores_then_lengths() {
        let tokens: Vec<String> = ["a", "b", "ab", "abb", "bb"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let merges = merges_from_scores(&tokens, &[0.0, 0.0, -1.0, -3.0, -2.0]);
        let want = [("a", "b"), ("b", "b"), ("ab", "b"), ("a", "bb")];
        let got: Vec<(&str, &str)> = merges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        assert_eq!(got, want);
    }
}
