//! Chat templates: the model's own Jinja `chat_template`, rendered with
//! minijinja as transformers renders it (`trim_blocks`, `lstrip_blocks`,
//! loop controls, Python string methods through minijinja-contrib's
//! pycompat) with the context HF text-generation-inference gives:
//! `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, and the
//! functions `raise_exception`, `strftime_now` and the `tojson` filter.

use super::TokenizerError;
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde::Serialize;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// A compiled chat template with the special tokens it may write.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

fn template_error(e: minijinja::Error) -> TokenizerError {
    // The template's own message (raise_exception) without minijinja's
    // error-kind prefix.
    let mut msg = match e.kind() {
        ErrorKind::InvalidOperation if e.detail().is_some() => e.detail().unwrap_or("").to_string(),
        _ => e.to_string(),
    };
    if let Some(line) = e.line() {
        msg.push_str(&format!(" (template line {line})"));
    }
    TokenizerError::ChatTemplate(msg)
}

impl ChatTemplate {
    /// ChatML, the template `kiln generate --chat` falls back to for a model
    /// without one.
    pub const CHATML: &'static str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// Compiles `source` (Jinja, as in a `tokenizer_config.json`).
    pub fn new(
        source: &str,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<ChatTemplate, TokenizerError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string())
            .map_err(template_error)?;
        Ok(ChatTemplate {
            env,
            bos_token,
            eos_token,
        })
    }

    /// Renders `(role, content)` messages, as transformers'
    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=…)`.
    pub fn render<R: AsRef<str>, C: AsRef<str>>(
        &self,
        messages: &[(R, C)],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let messages: Vec<Message> = messages
            .iter()
            .map(|(r, c)| Message {
                role: r.as_ref().to_string(),
                content: c.as_ref().to_string(),
            })
            .collect();
        let template = self.env.get_template("chat").map_err(template_error)?;
        template
            .render(minijinja::context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(template_error)
    }

    /// The text a template writes around one message of `role`, for apps
    /// without a Jinja engine: `(prefix, suffix)` such that rendering
    /// `[…, (role, X)]` writes `prefix + X + suffix` after what the earlier
    /// messages wrote. `None` when the template does not write the content
    /// verbatim (it trims or rewrites it).
    pub fn role_affixes(
        &self,
        before: &[(&str, &str)],
        role: &str,
    ) -> Result<Option<(String, String)>, TokenizerError> {
        // Spaces at both ends: a template that trims the content does not
        // write it verbatim, and is caught.
        const MARK: &str = " \u{e000}kiln-content\u{e001} ";
        let head = self.render(before, false)?;
        let mut msgs = before.to_vec();
        msgs.push((role, MARK));
        let full = self.render(&msgs, false)?;
        let Some(rest) = full.strip_prefix(&head) else {
            return Ok(None);
        };
        Ok(rest
            .split_once(MARK)
            .filter(|(_, suffix)| !suffix.contains(MARK))
            .map(|(p, s)| (p.to_string(), s.to_string())))
    }
}

/// A chat template pre-rendered for apps without a Jinja engine: the text
/// around each message. A conversation is `start`, then each message as
/// `prefix + content + suffix` of its role, then `generation_prompt`.
/// A field is `None` where the template does not write a message that way
/// (it trims or moves the content, or refuses the role).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct ChatAffixes {
    /// What the template writes before the first user message (bos, a
    /// default system prompt), with that message's own prefix.
    pub first_user_prefix: Option<String>,
    /// Around a system message that opens the conversation.
    pub system: Option<(String, String)>,
    /// Around a later user message (after a user and an assistant turn).
    pub user: Option<(String, String)>,
    /// Around an assistant message.
    pub assistant: Option<(String, String)>,
    /// What `add_generation_prompt` appends (the assistant's turn opening).
    pub generation_prompt: Option<String>,
}

impl ChatTemplate {
    /// The template pre-rendered ([`ChatAffixes`]).
    pub fn affixes(&self) -> ChatAffixes {
        let ok = |r: Result<Option<(String, String)>, TokenizerError>| r.ok().flatten();
        let turn = [("user", "Hi"), ("assistant", "Hello")];
        let generation_prompt = (|| {
            let m = [("user", "Hi")];
            let without = self.render(&m, false).ok()?;
            let with = self.render(&m, true).ok()?;
            with.strip_prefix(&without).map(str::to_string)
        })();
        ChatAffixes {
            first_user_prefix: ok(self.role_affixes(&[], "user")).map(|(p, _)| p),
            system: ok(self.role_affixes(&[], "system")),
            user: ok(self.role_affixes(&turn, "user")),
            assistant: ok(self.role_affixes(&turn[..1], "assistant")),
            generation_prompt,
        }
    }
}

fn raise_exception(message: String) -> Result<String, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// Python's `datetime.now().strftime(format)` for the common directives, in
/// UTC (kiln has no time-zone database).
fn strftime_now(format: String) -> Result<String, minijinja::Error> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Ok(strftime(&format, secs))
}

/// `format` with the time `secs` after the Unix epoch (UTC).
fn strftime(format: &str, secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let (h, m, s) = (tod / 3600, tod / 60 % 60, tod % 60);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = chars.next();
        // `%-d`: no zero padding (glibc).
        let pad = spec != Some('-');
        if !pad {
            spec = chars.next();
        }
        let num = |v: i64, w: usize| {
            if pad {
                format!("{v:0w$}")
            } else {
                v.to_string()
            }
        };
        match spec {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&num(year.rem_euclid(100), 2)),
            Some('m') => out.push_str(&num(month, 2)),
            Some('d') => out.push_str(&num(day, 2)),
            Some('H') => out.push_str(&num(h, 2)),
            Some('M') => out.push_str(&num(m, 2)),
            Some('S') => out.push_str(&num(s, 2)),
            Some('j') => out.push_str(&num(doy_of(year, month, day), 3)),
            Some('B') => out.push_str(MONTHS[month as usize - 1]),
            Some('b') => out.push_str(&MONTHS[month as usize - 1][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Day of the year (1-based).
fn doy_of(year: i64, month: i64, day: i64) -> i64 {
    const CUM: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    CUM[month as usize - 1] + day + i64::from(leap && month > 2)
}

/// transformers' `tojson`: `json.dumps(value, ensure_ascii=False, indent=…,
/// sort_keys=…)`, without HTML escaping.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    write_py_json(&json, indent, sort_keys.unwrap_or(false), 0, &mut out);
    Ok(Value::from_safe_string(out))
}

/// Python's `json.dumps` layout: `", "` and `": "` separators, or one item
/// a line with `indent`.
fn write_py_json(
    v: &serde_json::Value,
    indent: Option<usize>,
    sort: bool,
    depth: usize,
    out: &mut String,
) {
    use serde_json::Value as J;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v {
        J::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                write_py_json(item, indent, sort, depth + 1, out);
            }
            newline(out, depth);
            out.push(']');
        }
        J::Object(map) if !map.is_empty() => {
            let mut entries: Vec<_> = map.iter().collect();
            if sort {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                out.push_str(&J::String(k.clone()).to_string());
                out.push_str(": ");
                write_py_json(item, indent, sort, depth + 1, out);
            }
            newline(out, depth);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders() {
        let t = ChatTemplate::new(ChatTemplate::CHATML, None, None).unwrap();
        assert_eq!(
            t.render(&[("user", "Hi")], true).unwrap(),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let (p, s) = t.role_affixes(&[], "user").unwrap().unwrap();
        assert_eq!(
            (p.as_str(), s.as_str()),
            ("<|im_start|>user\n", "<|im_end|>\n")
        );
    }

    #[test]
    fn affixes_of_a_template() {
        let t = ChatTemplate::new(ChatTemplate::CHATML, None, None).unwrap();
        let a = t.affixes();
        let pair = |p: &str, s: &str| Some((p.to_string(), s.to_string()));
        assert_eq!(a.user, pair("<|im_start|>user\n", "<|im_end|>\n"));
        assert_eq!(a.system, pair("<|im_start|>system\n", "<|im_end|>\n"));
        assert_eq!(a.assistant, pair("<|im_start|>assistant\n", "<|im_end|>\n"));
        assert_eq!(
            a.generation_prompt.as_deref(),
            Some("<|im_start|>assistant\n")
        );
        // A template that trims the content has no verbatim affixes.
        let trims = ChatTemplate::new(
            "{% for m in messages %}[{{ m.content | trim }}]{% endfor %}",
            None,
            None,
        )
        .unwrap();
        assert_eq!(trims.affixes().user, None);
    }

    #[test]
    fn raise_exception_is_an_error_with_its_message() {
        let t =
            ChatTemplate::new("{{ raise_exception('roles must alternate') }}", None, None).unwrap();
        let e = t.render(&[("user", "x")], true).unwrap_err().to_string();
        assert!(e.contains("roles must alternate"), "{e}");
    }

    #[test]
    fn python_methods_and_tojson() {
        let t = ChatTemplate::new(
            "{{ messages[0]['content'].strip() | tojson }} {{ {'a': [1, 'é']} | tojson }}",
            Some("<s>".into()),
            None,
        )
        .unwrap();
        assert_eq!(
            t.render(&[("user", "  x<y  ")], false).unwrap(),
            "\"x<y\" {\"a\": [1, \"é\"]}"
        );
    }

    #[test]
    fn strftime_formats() {
        // 2024-07-26 13:05:09 UTC, a Friday.
        let t = 1_722_000_309;
        assert_eq!(strftime("%d %b %Y", t), "26 Jul 2024");
        assert_eq!(
            strftime("%A %B %-d, %H:%M:%S %j %%", t),
            "Friday July 26, 13:25:09 208 %"
        );
    }
}
