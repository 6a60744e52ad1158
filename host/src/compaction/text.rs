//! Text lengths as OpenClaw measures them: JavaScript string lengths are UTF-16 code units, so
//! every character budget of docs/CONTRACT.md §9.3 (the 16000-character cap, the 800-character request
//! block, the 900-character file lists) counts UTF-16 units, and a cut never splits a character
//! (`truncateUtf16Safe`, `sliceUtf16Safe`).

/// The JavaScript `length` of `text`.
pub fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

/// The longest prefix of `text` of at most `max` UTF-16 units (never half a character).
pub fn truncate_utf16(text: &str, max: usize) -> &str {
    let mut units = 0;
    for (at, c) in text.char_indices() {
        units += c.len_utf16();
        if units > max {
            return &text[..at];
        }
    }
    text
}

/// The longest suffix of `text` of at most `max` UTF-16 units (never half a character).
pub fn tail_utf16(text: &str, max: usize) -> &str {
    let mut units = 0;
    for (at, c) in text.char_indices().rev() {
        units += c.len_utf16();
        if units > max {
            return &text[at + c.len_utf8()..];
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_cuts_count_utf16_units() {
        assert_eq!(utf16_len("a😀é"), 4);
        assert_eq!(
            truncate_utf16("a😀é", 2),
            "a",
            "never half a surrogate pair"
        );
        assert_eq!(truncate_utf16("a😀é", 3), "a😀");
        assert_eq!(truncate_utf16("abc", 10), "abc");
        assert_eq!(tail_utf16("a😀é", 2), "é");
        assert_eq!(tail_utf16("a😀é", 3), "😀é");
        assert_eq!(tail_utf16("abc", 0), "");
    }
}
