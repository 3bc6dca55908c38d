//! A tokenizer from an HF `tokenizer.json` (plus, beside it, the
//! `tokenizer_config.json` and `chat_template.jinja` transformers writes).

use super::added::AddedToken;
use super::bpe::{Bpe, BpeOptions};
use super::pretokenize::{LLAMA3_REGEX, QWEN2_REGEX};
use super::spm::{Prefix, Spm, SPACE};
use super::{PreTokenizer, Tokenizer, TokenizerError};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

#[derive(Deserialize)]
struct TokenizerJson {
    #[serde(default)]
    added_tokens: Vec<AddedTokenJson>,
    #[serde(default)]
    normalizer: Value,
    #[serde(default)]
    pre_tokenizer: Value,
    #[serde(default)]
    decoder: Value,
    #[serde(default)]
    post_processor: Value,
    model: ModelJson,
}

#[derive(Deserialize)]
struct AddedTokenJson {
    id: u32,
    content: String,
    #[serde(default)]
    special: bool,
    #[serde(default)]
    lstrip: bool,
    #[serde(default)]
    rstrip: bool,
    #[serde(default)]
    single_word: bool,
    #[serde(default = "yes")]
    normalized: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct ModelJson {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    vocab: HashMap<String, u32>,
    #[serde(default)]
    merges: Vec<MergeJson>,
    #[serde(default)]
    unk_token: Option<String>,
    #[serde(default)]
    fuse_unk: bool,
    #[serde(default)]
    byte_fallback: bool,
    #[serde(default)]
    ignore_merges: bool,
    #[serde(default)]
    dropout: Option<f64>,
    #[serde(default)]
    continuing_subword_prefix: Option<String>,
    #[serde(default)]
    end_of_word_suffix: Option<String>,
}

/// A merge, written `"a b"` (older files) or `["a", "b"]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum MergeJson {
    Pair(String, String),
    Joined(String),
}

/// The `tokenizer_config.json` keys kiln reads.
#[derive(Deserialize, Default)]
struct ConfigJson {
    #[serde(default)]
    bos_token: Value,
    #[serde(default)]
    eos_token: Value,
    #[serde(default)]
    chat_template: Value,
}

fn file_error(path: &Path, message: impl Into<String>) -> TokenizerError {
    TokenizerError::File {
        path: path.display().to_string(),
        message: message.into(),
    }
}

fn type_of(v: &Value) -> &str {
    v.get("type").and_then(Value::as_str).unwrap_or("?")
}

/// Checks a `ByteLevel` pre-tokenizer is the one kiln implements: no
/// prefix space, and the GPT-2 regex (`use_regex`) unless a `Split` before
/// it already cut the text (`regex = false`).
fn check_byte_level(v: &Value, path: &Path, regex: bool) -> Result<(), TokenizerError> {
    if v.get("add_prefix_space").and_then(Value::as_bool) == Some(true) {
        return Err(file_error(
            path,
            "unsupported pre_tokenizer: ByteLevel with add_prefix_space = true",
        ));
    }
    let uses = v.get("use_regex").and_then(Value::as_bool).unwrap_or(true);
    if uses != regex {
        return Err(file_error(
            path,
            format!("unsupported pre_tokenizer: ByteLevel with use_regex = {uses} here"),
        ));
    }
    Ok(())
}

/// The pre-tokenizer of a `Split` by one of the regexes kiln implements
/// (Llama 3's, Qwen2's), isolating the matches.
fn split_regex(v: &Value) -> Option<PreTokenizer> {
    let regex = v
        .get("pattern")
        .and_then(|p| p.get("Regex"))
        .and_then(Value::as_str)?;
    let isolated = v.get("behavior").and_then(Value::as_str) == Some("Isolated")
        && v.get("invert").and_then(Value::as_bool) != Some(true);
    if !isolated || type_of(v) != "Split" {
        return None;
    }
    match regex {
        r if r == LLAMA3_REGEX => Some(PreTokenizer::Llama3),
        r if r == QWEN2_REGEX => Some(PreTokenizer::Qwen2),
        _ => None,
    }
}

/// The pre-tokenizer of a `pre_tokenizer` entry, among those kiln supports.
fn pre_tokenizer(v: &Value, path: &Path) -> Result<PreTokenizer, TokenizerError> {
    let unsupported = || {
        file_error(
            path,
            format!(
                "unsupported pre_tokenizer {v} (supported: ByteLevel, \
                 Sequence[Digits(individual_digits=true), ByteLevel])"
            ),
        )
    };
    match type_of(v) {
        "ByteLevel" => {
            check_byte_level(v, path, true)?;
            Ok(PreTokenizer::Gpt2)
        }
        "Sequence" => {
            let parts = v
                .get("pretokenizers")
                .and_then(Value::as_array)
                .ok_or_else(unsupported)?;
            match parts.as_slice() {
                [digits, byte_level]
                    if type_of(digits) == "Digits"
                        && digits.get("individual_digits").and_then(Value::as_bool)
                            == Some(true)
                        && type_of(byte_level) == "ByteLevel" =>
                {
                    check_byte_level(byte_level, path, true)?;
                    Ok(PreTokenizer::DigitsThenGpt2)
                }
                [split, byte_level] if type_of(byte_level) == "ByteLevel" => {
                    let pre = split_regex(split).ok_or_else(unsupported)?;
                    check_byte_level(byte_level, path, false)?;
                    Ok(pre)
                }
                [only] if type_of(only) == "ByteLevel" => {
                    check_byte_level(only, path, true)?;
                    Ok(PreTokenizer::Gpt2)
                }
                _ => Err(unsupported()),
            }
        }
        _ => Err(unsupported()),
    }
}

/// A `Replace` normalizer or decoder from `from` to `to` (string patterns).
fn is_replace(v: &Value, from: &str, to: &str) -> bool {
    type_of(v) == "Replace"
        && v.get("pattern")
            .and_then(|p| p.get("String"))
            .and_then(Value::as_str)
            == Some(from)
        && v.get("content").and_then(Value::as_str) == Some(to)
}

/// The SentencePiece-style spelling a `tokenizer.json` describes, if any:
/// `normalizer` Sequence[Prepend("▁"), Replace(" ", "▁")] with no
/// pre-tokenizer (Llama 2, Phi-3), or no normalizer and a `Metaspace`
/// pre-tokenizer; the decoder says whether one leading space is stripped.
/// `Ok(None)`: not SentencePiece-style (byte-level, checked elsewhere).
fn sentencepiece(
    json: &TokenizerJson,
    path: &Path,
) -> Result<Option<(Prefix, bool, bool)>, TokenizerError> {
    let sp = SPACE.to_string();
    let prefix_split = match (&json.normalizer, &json.pre_tokenizer) {
        (Value::Null, p) if type_of(p) == "Metaspace" => {
            if p.get("replacement").and_then(Value::as_str) != Some(sp.as_str()) {
                return Err(file_error(
                    path,
                    format!("unsupported Metaspace replacement in {p}"),
                ));
            }
            let prefix = match p.get("prepend_scheme").and_then(Value::as_str) {
                Some("always") | None => Prefix::MetaspaceAlways,
                Some("first") => Prefix::MetaspaceFirst,
                Some("never") => Prefix::Never,
                Some(other) => {
                    return Err(file_error(
                        path,
                        format!("unsupported Metaspace prepend_scheme {other:?}"),
                    ))
                }
            };
            let split = p.get("split").and_then(Value::as_bool).unwrap_or(true);
            (prefix, split)
        }
        (n, Value::Null) if type_of(n) == "Sequence" => {
            let parts = n
                .get("normalizers")
                .and_then(Value::as_array)
                .map(Vec::as_slice);
            match parts {
                Some([prepend, replace])
                    if type_of(prepend) == "Prepend"
                        && prepend.get("prepend").and_then(Value::as_str) == Some(sp.as_str())
                        && is_replace(replace, " ", &sp) =>
                {
                    (Prefix::Prepend, false)
                }
                Some([replace]) if is_replace(replace, " ", &sp) => (Prefix::Never, false),
                _ => {
                    return Err(file_error(
                        path,
                        format!("unsupported normalizer {n} (supported: null; Sequence[Prepend(\"\u{2581}\"), Replace(\" \", \"\u{2581}\")])"),
                    ))
                }
            }
        }
        _ => return Ok(None),
    };
    let d = &json.decoder;
    let strip = match type_of(d) {
        "Metaspace" => prefix_split.0 != Prefix::Never,
        "Sequence" => {
            let parts = d
                .get("decoders")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let (body, strip) = match parts {
                [rest @ .., last]
                    if type_of(last) == "Strip"
                        && last.get("content").and_then(Value::as_str) == Some(" ")
                        && last.get("start").and_then(Value::as_u64) == Some(1)
                        && last.get("stop").and_then(Value::as_u64) == Some(0) =>
                {
                    (rest, true)
                }
                all => (all, false),
            };
            let ok = matches!(body, [r, b, f]
                if is_replace(r, &sp, " ") && type_of(b) == "ByteFallback" && type_of(f) == "Fuse");
            if !ok {
                return Err(file_error(
                    path,
                    format!("unsupported decoder {d} (supported: Sequence[Replace(\"\u{2581}\", \" \"), ByteFallback, Fuse, Strip(\" \", 1, 0)], Metaspace)"),
                ));
            }
            strip
        }
        _ => {
            return Err(file_error(
                path,
                format!("unsupported decoder {d} for a SentencePiece-style tokenizer"),
            ))
        }
    };
    Ok(Some((prefix_split.0, prefix_split.1, strip)))
}

/// Whether a `TemplateProcessing` post-processor (alone, or in a
/// `Sequence` as Llama 3's) puts `bos` first.
fn post_processor_adds(v: &Value, bos: &str) -> bool {
    if type_of(v) == "Sequence" {
        return v
            .get("processors")
            .and_then(Value::as_array)
            .is_some_and(|ps| ps.iter().any(|p| post_processor_adds(p, bos)));
    }
    type_of(v) == "TemplateProcessing"
        && v.get("single")
            .and_then(Value::as_array)
            .and_then(|s| s.first())
            .and_then(|f| f.get("SpecialToken"))
            .and_then(|t| t.get("id"))
            .and_then(Value::as_str)
            == Some(bos)
}

/// The content of a special token entry: a string or `{"content": …}`.
fn token_content(v: &Value) -> Option<&str> {
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> crate::Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| crate::Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| file_error(path, e.to_string()).into())
}

impl Tokenizer {
    /// Loads an HF `tokenizer.json` (byte-level BPE, or SentencePiece-style
    /// BPE with byte fallback as Llama 2 and Phi-3 write it). The bos/eos tokens and
    /// the chat template come from `tokenizer_config.json` and
    /// `chat_template.jinja` in the same folder when present (the `.jinja`
    /// file wins, as in transformers 5). A file named `NAME.tokenizer.json`
    /// reads `NAME.tokenizer_config.json` and `NAME.chat_template.jinja`
    /// instead (the layout `kiln package` writes).
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> crate::Result<Tokenizer> {
        let path = path.as_ref();
        let json: TokenizerJson = read_json(path)?;
        let spm = sentencepiece(&json, path)?;
        let mut nfc = false;
        let pre = if spm.is_some() {
            PreTokenizer::Gpt2
        } else {
            match type_of(&json.normalizer) {
                _ if json.normalizer.is_null() => {}
                // Qwen2's tokenizer.json.
                "NFC" => nfc = true,
                _ => {
                    return Err(file_error(
                        path,
                        format!(
                            "unsupported normalizer {} (supported: null, NFC)",
                            json.normalizer
                        ),
                    )
                    .into())
                }
            }
            if type_of(&json.decoder) != "ByteLevel" {
                return Err(file_error(
                    path,
                    format!(
                        "unsupported decoder {} (supported: ByteLevel)",
                        json.decoder
                    ),
                )
                .into());
            }
            pre_tokenizer(&json.pre_tokenizer, path)?
        };
        let model = json.model;
        if model.kind.as_deref().is_some_and(|k| k != "BPE") {
            return Err(file_error(
                path,
                format!("unsupported model type {:?} (supported: BPE)", model.kind),
            )
            .into());
        }
        if model.byte_fallback != spm.is_some() {
            let what = if model.byte_fallback {
                "byte_fallback = true with a byte-level pre-tokenizer"
            } else {
                "byte_fallback = false with SentencePiece-style spelling"
            };
            return Err(file_error(path, format!("unsupported model option {what}")).into());
        }
        if model.dropout.is_some_and(|d| d > 0.0) {
            return Err(file_error(path, "unsupported model option dropout").into());
        }
        for (what, v) in [
            (
                "continuing_subword_prefix",
                &model.continuing_subword_prefix,
            ),
            ("end_of_word_suffix", &model.end_of_word_suffix),
        ] {
            if v.as_deref().is_some_and(|s| !s.is_empty()) {
                return Err(file_error(path, format!("unsupported model option {what}")).into());
            }
        }
        let merges = model
            .merges
            .into_iter()
            .enumerate()
            .map(|(i, m)| match m {
                MergeJson::Pair(a, b) => Ok((a, b)),
                MergeJson::Joined(s) => match s.split_once(' ') {
                    Some((a, b)) if !b.contains(' ') => Ok((a.to_string(), b.to_string())),
                    _ => Err(file_error(
                        path,
                        format!(
                            "model.merges[{i}] = {s:?} is not two tokens separated by one space"
                        ),
                    )),
                },
            })
            .collect::<Result<Vec<_>, _>>()?;
        let unk = match &model.unk_token {
            None => None,
            Some(u) => Some(*model.vocab.get(u).ok_or_else(|| {
                file_error(
                    path,
                    format!("model.unk_token {u:?} is not in the vocabulary"),
                )
            })?),
        };
        let options = BpeOptions {
            unk,
            fuse_unk: model.fuse_unk,
            ignore_merges: model.ignore_merges,
        };
        let spm = spm.map(|(prefix, split, strip)| Spm::new(&model.vocab, prefix, split, strip));
        let bpe =
            Bpe::new(model.vocab, &merges, options).map_err(|e| file_error(path, e.to_string()))?;

        let mut added = Vec::with_capacity(json.added_tokens.len());
        for t in json.added_tokens {
            if spm.is_some() && t.normalized {
                // HF matches these in the normalized (▁-spelled) text.
                return Err(file_error(
                    path,
                    format!(
                        "unsupported added token option normalized = true on {:?} with a SentencePiece normalizer",
                        t.content
                    ),
                )
                .into());
            }
            if t.single_word {
                return Err(file_error(
                    path,
                    format!(
                        "unsupported added token option single_word on {:?}",
                        t.content
                    ),
                )
                .into());
            }
            added.push(AddedToken {
                id: t.id,
                content: t.content,
                special: t.special,
                normalized: t.normalized,
                lstrip: t.lstrip,
                rstrip: t.rstrip,
            });
        }

        let dir = path.parent().unwrap_or(Path::new("."));
        // `NAME.tokenizer.json` (as `kiln package` writes it) pairs with
        // `NAME.tokenizer_config.json` / `NAME.chat_template.jinja`.
        let prefix = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".tokenizer.json"))
            .map(|stem| format!("{stem}."))
            .unwrap_or_default();
        let config_path = dir.join(format!("{prefix}tokenizer_config.json"));
        let config: ConfigJson = if config_path.is_file() {
            read_json(&config_path)?
        } else {
            ConfigJson::default()
        };
        let jinja_path = dir.join(format!("{prefix}chat_template.jinja"));
        let chat_template = if jinja_path.is_file() {
            Some(
                std::fs::read_to_string(&jinja_path)
                    .map_err(|e| crate::Error::io(&jinja_path, e))?,
            )
        } else {
            match &config.chat_template {
                Value::String(s) => Some(s.clone()),
                // A list of named templates: take the default one.
                Value::Array(list) => list
                    .iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                    .and_then(|t| t.get("template").and_then(Value::as_str))
                    .map(str::to_string),
                _ => None,
            }
        };

        let lookup = |v: &Value, what: &str| -> crate::Result<Option<u32>> {
            let Some(content) = token_content(v) else {
                return Ok(None);
            };
            let id = added
                .iter()
                .find(|t| t.content == content)
                .map(|t| t.id)
                .or_else(|| bpe.vocab.get(content).copied());
            id.map(Some).ok_or_else(|| {
                file_error(
                    &config_path,
                    format!("{what} {content:?} is not a token of {}", path.display()),
                )
                .into()
            })
        };
        let bos = lookup(&config.bos_token, "bos_token")?;
        let eos = lookup(&config.eos_token, "eos_token")?;
        let add_bos = token_content(&config.bos_token)
            .is_some_and(|b| post_processor_adds(&json.post_processor, b));
        let mut t = Tokenizer::assemble_with(bpe, pre, spm, added, bos, eos, chat_template)
            .map_err(|e| file_error(path, e.to_string()))?;
        t.add_bos = add_bos;
        t.nfc = nfc;
        Ok(t)
    }
}
