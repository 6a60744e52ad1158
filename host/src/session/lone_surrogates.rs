//! JSON text holding lone UTF-16 surrogates, read as OpenClaw reads it.
//!
//! OpenClaw's `JSON.stringify` writes an unpaired UTF-16 surrogate (what slicing a JavaScript
//! string in the middle of an emoji leaves) as an escape such as `\ud83d`, and its `JSON.parse`
//! reads it back. A Rust string cannot hold such a code unit, so `serde_json` refuses the text
//! (`lone leading surrogate in hex escape`, `unexpected end of hex escape`). pincer reads it
//! with U+FFFD REPLACEMENT CHARACTER in the surrogate's place: [`replace_lone_surrogates`]
//! rewrites each unpaired `\uD800`–`\uDFFF` escape of the text to `\ufffd` (an escape of the
//! same length, so every other byte keeps its offset), and [`from_str`] / [`from_slice`] parse
//! with it only when the text as written does not parse.
//!
//! What changes is only what is parsed: a session file's line keeps its bytes (a record is kept
//! as the line read), and the token estimate counts U+FFFD as OpenClaw counts the surrogate (one
//! UTF-16 unit, no weight).

use std::borrow::Cow;

use serde::de::DeserializeOwned;

/// `text` with every `\uXXXX` escape of an unpaired UTF-16 surrogate replaced by `\ufffd`;
/// borrowed when it holds none. Escapes only occur inside JSON strings, so the text is scanned
/// for backslashes alone; `\\` is skipped as a pair, and a high surrogate followed by a low one
/// is a pair and kept.
pub fn replace_lone_surrogates(text: &[u8]) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let mut at = 0;
    while let Some(found) = text[at..].iter().position(|&b| b == b'\\') {
        let escape = at + found;
        if text.get(escape + 1) != Some(&b'u') {
            // `\\`, `\"`, `\n`, …: two bytes, whatever the second is.
            at = escape + 2;
            continue;
        }
        let Some(unit) = hex_unit(text, escape + 2) else {
            at = escape + 2;
            continue;
        };
        let lone = match unit {
            0xD800..=0xDBFF => {
                let paired = text.get(escape + 6) == Some(&b'\\')
                    && text.get(escape + 7) == Some(&b'u')
                    && hex_unit(text, escape + 8)
                        .is_some_and(|low| (0xDC00..=0xDFFF).contains(&low));
                if paired {
                    at = escape + 12;
                    continue;
                }
                true
            }
            0xDC00..=0xDFFF => true,
            _ => false,
        };
        if lone {
            let out = out.get_or_insert_with(|| text.to_vec());
            out[escape + 2..escape + 6].copy_from_slice(b"fffd");
        }
        at = escape + 6;
    }
    match out {
        Some(out) => Cow::Owned(out),
        None => Cow::Borrowed(text),
    }
}

/// [`replace_lone_surrogates`] for a `str` (the result is UTF-8: only ASCII was replaced).
pub fn replace_lone_surrogates_str(text: &str) -> Cow<'_, str> {
    match replace_lone_surrogates(text.as_bytes()) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(bytes) => {
            Cow::Owned(String::from_utf8(bytes).expect("only ASCII bytes were replaced"))
        }
    }
}

/// `serde_json::from_str`, reading lone surrogate escapes as U+FFFD when the text as written
/// does not parse.
///
/// # Errors
/// The error of the text as written, when replacing changes nothing or does not help.
pub fn from_str<T: DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(err) => match replace_lone_surrogates_str(text) {
            Cow::Borrowed(_) => Err(err),
            Cow::Owned(replaced) => serde_json::from_str(&replaced).map_err(|_| err),
        },
    }
}

/// `serde_json::from_slice`, reading lone surrogate escapes as U+FFFD when the bytes as written
/// do not parse.
///
/// # Errors
/// The error of the bytes as written, when replacing changes nothing or does not help.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(err) => match replace_lone_surrogates(bytes) {
            Cow::Borrowed(_) => Err(err),
            Cow::Owned(replaced) => serde_json::from_slice(&replaced).map_err(|_| err),
        },
    }
}

/// The four hex digits at `text[at..at + 4]` as a UTF-16 unit.
fn hex_unit(text: &[u8], at: usize) -> Option<u16> {
    let digits = std::str::from_utf8(text.get(at..at + 4)?).ok()?;
    u16::from_str_radix(digits, 16)
        .ok()
        .filter(|_| digits.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replaced(text: &str) -> String {
        replace_lone_surrogates_str(text).into_owned()
    }

    #[test]
    fn only_unpaired_surrogates_are_replaced() {
        assert_eq!(replaced(r#"{"a":"x\ud83d"}"#), r#"{"a":"x\ufffd"}"#);
        assert_eq!(replaced(r#""\ude00y""#), r#""\ufffdy""#);
        assert_eq!(replaced(r#""\ud83d\ude00""#), r#""\ud83d\ude00""#);
        assert_eq!(
            replaced(r#""\ud83d\ud83d\ude00""#),
            r#""\ufffd\ud83d\ude00""#
        );
        assert_eq!(replaced(r#""\\ud83d""#), r#""\\ud83d""#);
        assert_eq!(replaced(r#""\\\ud83d""#), r#""\\\ufffd""#);
        assert_eq!(replaced(r#""\u00e9\n""#), r#""\u00e9\n""#);
        assert!(matches!(
            replace_lone_surrogates(br#""plain""#),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_lone_surrogate_reads_as_the_replacement_character() {
        let value: serde_json::Value = from_str(r#"{"a":"cut \ud83d"}"#).unwrap();
        assert_eq!(value["a"], "cut \u{fffd}");
        let value: serde_json::Value = from_slice(br#"["\udc00"]"#).unwrap();
        assert_eq!(value[0], "\u{fffd}");
        assert!(from_str::<serde_json::Value>(r#"{"a":"\ud83d"#).is_err());
    }
}
