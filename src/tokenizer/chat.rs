//! Chat templates: kiln renders ChatML (the format of SmolLM2, Qwen and
//! others) directly instead of interpreting Jinja.
//!
//! A ChatML template writes each message as
//! `<|im_start|>{role}\n{content}<|im_end|>\n` and, with
//! `add_generation_prompt`, ends with `<|im_start|>assistant\n`. Some
//! templates also insert a fixed system message when the conversation does
//! not start with one; kiln takes that text from the template itself.

use super::TokenizerError;

const START: &str = "<|im_start|>";
const END: &str = "<|im_end|>";

/// Renders `messages` with a ChatML `template`.
pub fn render<R: AsRef<str>, C: AsRef<str>>(
    template: &str,
    messages: &[(R, C)],
    add_generation_prompt: bool,
) -> Result<String, TokenizerError> {
    if !template.contains(START) || !template.contains(END) {
        return Err(TokenizerError::ChatTemplate(format!(
            "only ChatML templates (with {START} … {END}) are supported; this one starts {:?}",
            template.chars().take(80).collect::<String>()
        )));
    }
    let mut out = String::new();
    if let Some((first_role, _)) = messages.first() {
        if first_role.as_ref() != "system" {
            if let Some(system) = default_system_prompt(template) {
                push_message(&mut out, "system", &system);
            }
        }
    }
    for (role, content) in messages {
        push_message(&mut out, role.as_ref(), content.as_ref());
    }
    if add_generation_prompt {
        out.push_str(START);
        out.push_str("assistant\n");
    }
    Ok(out)
}

fn push_message(out: &mut String, role: &str, content: &str) {
    out.push_str(START);
    out.push_str(role);
    out.push('\n');
    out.push_str(content);
    out.push_str(END);
    out.push('\n');
}

/// The fixed system message a template inserts when the conversation has
/// none: the text of a string literal `'<|im_start|>system\n…<|im_end|>`
/// in the template (a literal newline or a `\n` escape after `system`), when
/// the template tests the first role against `'system'`.
pub fn default_system_prompt(template: &str) -> Option<String> {
    let tests_role = [
        "!= 'system'",
        "!= \"system\"",
        "== 'system'",
        "== \"system\"",
    ]
    .iter()
    .any(|t| template.contains(t));
    if !tests_role {
        return None;
    }
    let marker = format!("{START}system");
    let mut search = 0;
    while let Some(found) = template[search..].find(&marker) {
        let at = search + found;
        search = at + marker.len();
        // The block must open a string literal, quoted ' or ".
        let Some(quote) = template[..at]
            .chars()
            .last()
            .filter(|&q| q == '\'' || q == '"')
        else {
            continue;
        };
        let rest = &template[at + marker.len()..];
        let Some(rest) = rest.strip_prefix('\n').or_else(|| rest.strip_prefix("\\n")) else {
            continue;
        };
        let Some(end) = rest.find(END) else {
            continue;
        };
        let raw = &rest[..end];
        if let Some(text) = unescape(raw, quote) {
            return Some(text);
        }
    }
    None
}

/// The value of the inside of a Jinja string literal, or `None` if the
/// literal ends (an unescaped `quote`) before `raw` does.
fn unescape(raw: &str, quote: char) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                other => out.push(other),
            },
            c if c == quote => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn smollm2_default_system() {
        assert_eq!(
            default_system_prompt(SMOLLM2).as_deref(),
            Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
        );
        let escaped = SMOLLM2.replace('\n', "\\n");
        assert_eq!(
            default_system_prompt(&escaped),
            default_system_prompt(SMOLLM2)
        );
    }

    #[test]
    fn renders() {
        let out = render(SMOLLM2, &[("user", "Hi")], true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let empty: [(&str, &str); 0] = [];
        assert_eq!(
            render(SMOLLM2, &empty, true).unwrap(),
            "<|im_start|>assistant\n"
        );
    }

    #[test]
    fn system_from_message_is_not_a_default() {
        let t = "{% if messages[0]['role'] != 'system' %}{% endif %}{{ '<|im_start|>system\n' + message['content'] + '<|im_end|>' }}";
        assert_eq!(default_system_prompt(t), None);
    }

    #[test]
    fn other_templates_are_refused() {
        let err = render("{{ bos_token }}[INST]", &[("user", "x")], false).unwrap_err();
        assert!(err.to_string().contains("ChatML"));
    }
}
