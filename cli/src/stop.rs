//! `kiln generate --stop`: stop strings matched on the streamed text.

/// Stop strings matched on streamed text (`kiln generate --stop`): text is
/// passed on as it arrives except what could still be the start of a stop
/// string, which is held back until it is decided; a completed stop string
/// and everything after it are never shown.
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    pending: String,
}

impl StopStrings {
    /// Matches `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> StopStrings {
        StopStrings {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
        }
    }

    /// Adds `piece`; returns the text now safe to show and whether a stop
    /// string was completed (then the text ends just before it).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        self.pending.push_str(piece);
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = hit {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            return (out, true);
        }
        // Hold back the longest tail that is a proper prefix of a stop string.
        let keep = self
            .pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.pending[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.pending.len());
        let out = self.pending[..keep].to_string();
        self.pending.drain(..keep);
        (out, false)
    }

    /// The text held back at the end of a generation.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_hold_back_only_what_may_match() {
        let mut s = StopStrings::new(&["<|end|>".to_string(), "\n\n".to_string()]);
        assert_eq!(s.push("Hello"), ("Hello".to_string(), false));
        assert_eq!(s.push(" wor<|"), (" wor".to_string(), false));
        assert_eq!(s.push("en"), (String::new(), false));
        assert_eq!(s.push("d|> more"), (String::new(), true));
        let mut s = StopStrings::new(&["\n\n".to_string()]);
        assert_eq!(s.push("a\n"), ("a".to_string(), false));
        assert_eq!(s.push("b"), ("\nb".to_string(), false));
        assert_eq!(s.push("é\n"), ("é".to_string(), false));
        assert_eq!(s.finish(), "\n");
        let mut none = StopStrings::new(&[]);
        assert_eq!(none.push("x\n"), ("x\n".to_string(), false));
    }
}
