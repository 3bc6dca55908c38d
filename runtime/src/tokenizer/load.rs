//! Opening a tokenizer: an HF `tokenizer.json` (with the
//! `tokenizer_config.json`, `chat_template.jinja` or `chat_template.json`
//! beside it), or a `tokenizers` crate tokenizer built elsewhere (the
//! compiler's GGUF vocabulary) with its `tokenizer_config.json`.

use super::{Result, Tokenizer, TokenizerError};
use serde_json::Value;
use std::path::Path;

/// The content of a special token entry: a string or `{"content": …}`.
fn token_content(v: &Value) -> Option<&str> {
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
}

/// A `chat_template` value: a string, or a list of named templates (the
/// `default` one is taken).
fn template_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template").and_then(Value::as_str))
            .map(str::to_string),
        _ => None,
    }
}

/// Whether a `TemplateProcessing` post-processor (alone, or in a
/// `Sequence` as Llama 3's) puts `bos` first.
fn post_processor_adds(v: &Value, bos: &str) -> bool {
    let type_of = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_string);
    if type_of(v).as_deref() == Some("Sequence") {
        return v
            .get("processors")
            .and_then(Value::as_array)
            .is_some_and(|ps| ps.iter().any(|p| post_processor_adds(p, bos)));
    }
    type_of(v).as_deref() == Some("TemplateProcessing")
        && v.get("single")
            .and_then(Value::as_array)
            .and_then(|s| s.first())
            .and_then(|f| f.get("SpecialToken"))
            .and_then(|t| t.get("id"))
            .and_then(Value::as_str)
            == Some(bos)
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| TokenizerError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_json(text: &str, path: &Path) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| TokenizerError::file(path, e))
}

impl Tokenizer {
    /// Builds a tokenizer from the text of a `tokenizer.json` and a
    /// `tokenizer_config.json` (`"{}"` for none), plus a chat template that
    /// overrides the config's. Errors name `label`, the tokenizer.json's
    /// path (or the file it was built from), and `config_label`.
    fn from_texts(
        json: &str,
        config: &str,
        template: Option<String>,
        label: &Path,
        config_label: &Path,
    ) -> Result<Tokenizer> {
        let inner: tokenizers::Tokenizer =
            json.parse().map_err(|e| TokenizerError::file(label, e))?;
        Tokenizer::assemble(inner, config, template, label, config_label, None)
    }

    /// [`Tokenizer::from_texts`] of a `tokenizers` crate tokenizer, whose
    /// number of ids is `known_size` when the caller knows it.
    fn assemble(
        inner: tokenizers::Tokenizer,
        config: &str,
        template: Option<String>,
        label: &Path,
        config_label: &Path,
        known_size: Option<usize>,
    ) -> Result<Tokenizer> {
        let config = parse_json(config, config_label)?;
        // The post-processor as its JSON, to see whether it writes the bos.
        let post = serde_json::to_value(inner.get_post_processor()).unwrap_or(Value::Null);
        let added = inner.get_added_tokens_decoder();
        let vocab_size = match known_size {
            Some(n) => n,
            None => {
                let (count, max) = {
                    let vocab = inner.get_vocab(true);
                    (vocab.len(), vocab.values().copied().max())
                };
                let size = max.map_or(0, |m| m as usize + 1);
                // A few ids may be unnamed (repeated spellings), not most of them.
                if size > 2 * count + 256 {
                    return Err(TokenizerError::file(
                        label,
                        format!(
                            "token ids run to {} but there are only {count} tokens",
                            size - 1
                        ),
                    ));
                }
                size
            }
        };
        let mut special = vec![false; vocab_size];
        for (&id, t) in &added {
            if let Some(s) = special.get_mut(id as usize) {
                *s = t.special;
            }
        }
        let lookup = |key: &str| -> Result<Option<u32>> {
            let Some(content) = config.get(key).and_then(token_content) else {
                return Ok(None);
            };
            inner.token_to_id(content).map(Some).ok_or_else(|| {
                TokenizerError::file(
                    config_label,
                    format!("{key} {content:?} is not a token of {}", label.display()),
                )
            })
        };
        let bos = lookup("bos_token")?;
        let eos = lookup("eos_token")?;
        let bos_name = config.get("bos_token").and_then(token_content);
        let add_bos = config.get("add_bos_token").and_then(Value::as_bool) == Some(true)
            || bos_name.is_some_and(|b| post_processor_adds(&post, b));
        let chat_template = template.or_else(|| config.get("chat_template").and_then(template_of));
        Ok(Tokenizer {
            inner,
            add_bos,
            special,
            vocab_size,
            bos,
            eos,
            chat_template,
        })
    }

    /// Loads an HF `tokenizer.json`. The bos/eos tokens and the chat
    /// template come from `tokenizer_config.json` beside it, the template
    /// from `chat_template.jinja` or `chat_template.json` when present
    /// (they win, as in transformers). A file named `NAME.tokenizer.json`
    /// reads `NAME.tokenizer_config.json` and `NAME.chat_template.jinja`
    /// instead (the layout `kiln package` writes).
    pub fn from_tokenizer_json(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let path = path.as_ref();
        let json = read_text(path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let prefix = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".tokenizer.json"))
            .map(|stem| format!("{stem}."))
            .unwrap_or_default();
        let config_path = dir.join(format!("{prefix}tokenizer_config.json"));
        let config = if config_path.is_file() {
            read_text(&config_path)?
        } else {
            "{}".to_string()
        };
        let jinja = dir.join(format!("{prefix}chat_template.jinja"));
        let template_json = dir.join(format!("{prefix}chat_template.json"));
        let template = if jinja.is_file() {
            Some(read_text(&jinja)?)
        } else if template_json.is_file() {
            let v = parse_json(&read_text(&template_json)?, &template_json)?;
            Some(
                v.get("chat_template")
                    .and_then(template_of)
                    .ok_or_else(|| {
                        TokenizerError::file(&template_json, "no \"chat_template\" string")
                    })?,
            )
        } else {
            None
        };
        Tokenizer::from_texts(&json, &config, template, path, &config_path)
    }

    /// The tokenizer of a `tokenizers` crate tokenizer built elsewhere (kiln
    /// builds one from a GGUF file's `tokenizer.*` metadata) and the text of
    /// its `tokenizer_config.json`, with `vocab_size` ids. Errors name
    /// `path`, the file it was built from.
    pub fn from_engine(
        inner: tokenizers::Tokenizer,
        config: &str,
        vocab_size: usize,
        path: &Path,
    ) -> Result<Tokenizer> {
        Tokenizer::assemble(inner, config, None, path, path, Some(vocab_size))
    }
}
