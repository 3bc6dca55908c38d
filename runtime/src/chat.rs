//! A multi-turn chat over the KV pair's caches: the messages so far, their
//! rendering with the model's chat template, and what the caches hold.
//! `kiln chat` and the app library ([`crate::Model::chat`]) both run their
//! turns through [`Chat::turn`].
//!
//! Each turn renders the whole conversation and prefills only the ids the
//! caches do not hold yet. A sampled reply need not be the tokenizer's
//! own spelling of its text, so when the rendered ids diverge from what
//! the caches hold while the text still extends it, only the new text is
//! encoded; otherwise the conversation starts over from all of it.

use crate::generate::{check_ids, Conversation, GenerateError, Generation, Prediction};
use crate::tokenizer::{ChatTemplate, Tokenizer, TokenizerError};

/// A chat turn that could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChatError {
    /// The chat template refused the conversation; the user's message was
    /// dropped, the conversation is as before.
    #[error("the chat template: {0}")]
    Template(TokenizerError),
    /// The turn would leave no room for a reply in the caches; the user's
    /// message was dropped (start over from a shorter history).
    #[error("this turn would take the conversation to {tokens} tokens, past the max context N = {max_context}")]
    PastContext {
        /// Tokens the conversation would hold.
        tokens: usize,
        /// The pair's max context N.
        max_context: usize,
    },
    /// Encoding or decoding failed.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// The generation failed.
    #[error(transparent)]
    Generate(#[from] GenerateError),
}

/// One reply.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Reply {
    /// Its text, special tokens skipped.
    pub text: String,
    /// The generation: its ids, why it stopped, its timings.
    pub generation: Generation,
}

/// The messages of a chat and what the caches hold of it.
#[derive(Debug)]
pub struct Chat {
    template: ChatTemplate,
    system: Option<String>,
    messages: Vec<(String, String)>,
    vocab_size: Option<usize>,
    /// The rendered text the caches hold, and its ids.
    held: Option<(String, Vec<i32>)>,
}

impl Chat {
    /// A chat rendered with `template`, opened by `system` when given;
    /// every id is checked against `vocab_size` before a prefill.
    pub fn new(template: ChatTemplate, system: Option<String>, vocab_size: Option<usize>) -> Chat {
        let mut c = Chat {
            template,
            system,
            messages: Vec::new(),
            vocab_size,
            held: None,
        };
        c.reset();
        c
    }

    /// Forgets every message but the system one.
    pub fn reset(&mut self) {
        self.messages.clear();
        self.held = None;
        if let Some(s) = &self.system {
            self.messages.push(("system".into(), s.clone()));
        }
    }

    /// The chat template the turns are rendered with.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The messages so far, as (role, content).
    pub fn messages(&self) -> &[(String, String)] {
        &self.messages
    }

    /// One turn: the user's `message`, prefilled over what `conv`'s caches
    /// hold, and the reply generated (at most `max_new_tokens`, up to one
    /// of `eos`), each id handed to `on_token` as it comes (`false`
    /// stops). A refused turn ([`ChatError::Template`],
    /// [`ChatError::PastContext`]) leaves the chat as it was.
    pub fn turn(
        &mut self,
        conv: &mut Conversation<'_>,
        tokenizer: &Tokenizer,
        message: &str,
        max_new_tokens: usize,
        eos: &[i32],
        on_token: impl FnMut(i32) -> bool,
    ) -> Result<Reply, ChatError> {
        self.messages.push(("user".into(), message.to_string()));
        let (text, ids) = match self.render(tokenizer, conv.tokens()) {
            Ok(r) => r,
            Err(e) => {
                self.messages.pop();
                return Err(e);
            }
        };
        if let Some(v) = self.vocab_size {
            if let Err(e) = check_ids(&ids, v) {
                self.messages.pop();
                return Err(e.into());
            }
        }
        if !ids.starts_with(conv.tokens()) {
            conv.restart()?;
        }
        let max_context = conv.tokens().len() + conv.remaining();
        if ids.len() >= max_context {
            self.messages.pop();
            return Err(ChatError::PastContext {
                tokens: ids.len(),
                max_context,
            });
        }
        let new = &ids[conv.tokens().len()..];
        let next: Prediction = conv.append(new)?;
        let generation = conv.generate(next, max_new_tokens, eos, on_token)?;
        let reply = tokenizer.decode_skipping_special(
            &generation.ids.iter().map(|&i| i as u32).collect::<Vec<_>>(),
        )?;
        // What the caches now hold (the last id is fed with the next
        // turn), and the text it spells.
        let mut held_ids = conv.tokens().to_vec();
        held_ids.extend(generation.ids.last());
        self.held = Some((format!("{text}{reply}"), held_ids));
        self.messages.push(("assistant".into(), reply.clone()));
        Ok(Reply {
            text: reply,
            generation,
        })
    }

    /// The conversation rendered up to the assistant's generation prompt,
    /// and its ids (see the module's note on what the caches hold).
    fn render(
        &self,
        tokenizer: &Tokenizer,
        cached: &[i32],
    ) -> Result<(String, Vec<i32>), ChatError> {
        let text = self
            .template
            .render(&self.messages, true)
            .map_err(ChatError::Template)?;
        let ids: Vec<i32> = tokenizer
            .encode_prompt(&text, true)?
            .into_iter()
            .map(|x| x as i32)
            .collect();
        let ids = match self.held.as_ref() {
            Some((held_text, held_ids))
                if !ids.starts_with(cached)
                    && held_ids.starts_with(cached)
                    && text.starts_with(held_text.as_str()) =>
            {
                let rest = tokenizer.encode(&text[held_text.len()..])?;
                held_ids
                    .iter()
                    .copied()
                    .chain(rest.into_iter().map(|x| x as i32))
                    .collect()
            }
            _ => ids,
        };
        Ok((text, ids))
    }
}
