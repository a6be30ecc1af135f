//! Bounding and escaping text that comes from outside the host's trust: a component, an MCP
//! client, a document or a remote server chooses its length and its bytes.
//!
//! - [`cut`] and [`quoted_prefix`] keep such text to a size chosen by the host before it goes
//!   into an error message, a log line or a record the host keeps;
//! - [`for_terminal`] makes it safe to print on the operator's terminal, where escape
//!   sequences could move the cursor, rewrite the screen or set the clipboard (OSC 52).

/// `s` cut to at most `max` bytes at a character boundary, with `…` and the number of bytes
/// left out when it was longer.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes)", &s[..end], s.len() - end)
}

/// `s` in double quotes, escaped as Rust's `{:?}` does, and cut to `max` characters first.
pub fn quoted_prefix(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => format!("{s:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes in all)", &s[..end], s.len()),
    }
}

/// `s` with every control character (C0, DEL, C1) but newline and tab, and every
/// bidirectional control ([`is_bidi_control`]), written as a visible escape (`\x1b`,
/// `\u{9b}`, `\u{202e}`), so printing it can neither drive the terminal nor make the text
/// read in another order than it is stored (Trojan Source, CVE-2021-42574).
pub fn for_terminal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\t' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if ('\u{80}'..='\u{9f}').contains(&c) || is_bidi_control(c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether `c` is one of Unicode's bidirectional formatting characters: the embeddings,
/// overrides and isolates (U+202A–U+202E, U+2066–U+2069), the marks (U+200E, U+200F) and the
/// Arabic letter mark (U+061C).
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_short_text_and_marks_long_text() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("abcdef", 3), "abc… (3 more bytes)");
        // Never splits a character.
        assert_eq!(cut("ééé", 3), "é… (4 more bytes)");
        assert_eq!(quoted_prefix("abc", 5), "\"abc\"");
        assert_eq!(quoted_prefix(&"x".repeat(1000), 4), "\"xxxx\"… (1000 bytes in all)");
    }

    #[test]
    fn terminal_text_has_no_live_control_characters() {
        let hostile = "title\x1b]52;c;ZXZpbA==\x07 \x1b[2J\r\u{9b}31m\nnext\tcol";
        let safe = for_terminal(hostile);
        assert_eq!(safe, "title\\x1b]52;c;ZXZpbA==\\x07 \\x1b[2J\\x0d\\u{9b}31m\nnext\tcol");
        assert!(!safe.chars().any(|c| c.is_control() && c != '\n' && c != '\t'));
        assert_eq!(for_terminal("plain, 中文 ok"), "plain, 中文 ok");
        // Bidirectional controls, which reorder what the reader sees.
        assert_eq!(
            for_terminal("a\u{202e}cba\u{2066}x\u{2069}\u{200f}\u{61c}"),
            "a\\u{202e}cba\\u{2066}x\\u{2069}\\u{200f}\\u{61c}"
        );
        assert_eq!(for_terminal("עברית العربية"), "עברית العربية");
    }
}
