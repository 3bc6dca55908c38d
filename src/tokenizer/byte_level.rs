//! GPT-2's byte ↔ unicode mapping: byte-level BPE vocabularies spell every
//! byte as one printable character, so a token is a plain string.

use std::sync::OnceLock;

/// The 256 characters that spell bytes `0..=255`, in byte order.
///
/// Printable Latin-1 bytes (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) stand for
/// themselves; the other 68 bytes are mapped in order to U+0100, U+0101, …
/// (so a space is `Ġ` and a newline `Ċ`).
pub fn byte_chars() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut next = 256u32;
        for (b, slot) in table.iter_mut().enumerate() {
            let b = b as u32;
            let printable = (0x21..=0x7e).contains(&b)
                || (0xa1..=0xac).contains(&b)
                || (0xae..=0xff).contains(&b);
            let code = if printable {
                b
            } else {
                next += 1;
                next - 1
            };
            // All codes are below U+0144, so always valid chars.
            *slot = char::from_u32(code).unwrap_or('\u{fffd}');
        }
        table
    })
}

/// The byte a byte-level character stands for, if it is one of the 256.
pub fn char_byte(c: char) -> Option<u8> {
    let code = c as u32;
    let direct = (0x21..=0x7e).contains(&code)
        || (0xa1..=0xac).contains(&code)
        || (0xae..=0xff).contains(&code);
    if direct {
        return Some(code as u8);
    }
    if (256..256 + 68).contains(&code) {
        return u8::try_from(code - 256)
            .ok()
            .and_then(|k| unprintable_bytes().get(usize::from(k)).copied());
    }
    None
}

/// The 68 bytes without a printable spelling, in order.
fn unprintable_bytes() -> &'static [u8] {
    static LIST: OnceLock<Vec<u8>> = OnceLock::new();
    LIST.get_or_init(|| {
        (0u8..=255)
            .filter(|&b| byte_chars()[usize::from(b)] as u32 >= 256)
            .collect()
    })
}

/// Spells `bytes` in the byte-level alphabet.
pub fn encode_bytes(bytes: &[u8], out: &mut String) {
    let table = byte_chars();
    out.extend(bytes.iter().map(|&b| table[usize::from(b)]));
}

/// The bytes a token string stands for, as HF's `ByteLevel` decoder reads
/// it: every character mapped back to its byte when all of them are in the
/// alphabet, else the token's own UTF-8 (e.g. an added token spelled in
/// plain text).
pub fn decode_token(token: &str) -> Vec<u8> {
    let mapped: Option<Vec<u8>> = token.chars().map(char_byte).collect();
    mapped.unwrap_or_else(|| token.as_bytes().to_vec())
}

/// True when every character of `s` is in the byte-level alphabet.
pub fn is_byte_level(s: &str) -> bool {
    s.chars().all(|c| char_byte(c).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_round_trips() {
        for b in 0u8..=255 {
            assert_eq!(char_byte(byte_chars()[usize::from(b)]), Some(b));
        }
        assert_eq!(byte_chars()[usize::from(b' ')], 'Ġ');
        assert_eq!(byte_chars()[usize::from(b'\n')], 'Ċ');
        assert_eq!(char_byte('a'), Some(b'a'));
        assert_eq!(char_byte('\u{0144}'), None);
        assert_eq!(char_byte(' '), None);
    }
}
