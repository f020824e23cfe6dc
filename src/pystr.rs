//! CPython's string and truthiness primitives, the one definition of each: the reference's
//! derived texts (cids, summaries, reflections, transcripts) are made with Python's `strip`,
//! `split`, `splitlines` and `bool()`, whose whitespace and line breaks are not Rust's.
//! Every module that must agree with the reference byte for byte uses these; the tests check
//! them against CPython's own definitions.

use serde_json::Value;

/// True for the characters CPython's `str.splitlines()` breaks on: `\n`, `\r`, `\x0b`, `\x0c`,
/// `\x1c`, `\x1d`, `\x1e`, `\x85`, `\u2028`, `\u2029` (`\r\n` counts as one break).
pub fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r'
            | '\x0b'
            | '\x0c'
            | '\x1c'
            | '\x1d'
            | '\x1e'
            | '\u{85}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// True for CPython's `str.isspace()` characters: Unicode `White_Space` (what Rust's
/// `char::is_whitespace` tests) plus the separators `\x1c`-`\x1f`.
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// CPython's `str.strip()` without an argument.
pub fn strip(s: &str) -> &str {
    s.trim_matches(is_space)
}

/// CPython's `str.splitlines()` (without `keepends`): the lines without their breaks, and no
/// trailing empty line after a final break.
pub fn splitlines(s: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !is_line_break(c) {
            continue;
        }
        lines.push(&s[start..i]);
        let mut end = i + c.len_utf8();
        if c == '\r' {
            if let Some(&(j, '\n')) = chars.peek() {
                chars.next();
                end = j + 1;
            }
        }
        start = end;
    }
    if start < s.len() {
        lines.push(&s[start..]);
    }
    lines
}

/// CPython's `str.split()` with no argument: runs of Python whitespace separate tokens, and
/// there are no empty tokens.
pub fn split(text: &str) -> impl Iterator<Item = &str> {
    text.split(is_space).filter(|t| !t.is_empty())
}

/// Python's `bool()` of a JSON value as `json.loads` gives it: `null`, `false`, zero (`0`,
/// `0.0`, `-0e5`), `""`, `[]` and `{}` are false; everything else, a number too large for a
/// float included (Python reads `1e400` as `inf`), is true.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.to_string().parse::<f64>() != Ok(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn isspace_is_cpythons() {
        // CPython: ''.join(c for c in map(chr, range(0x110000)) if c.isspace())
        let py: Vec<u32> = vec![
            0x9, 0xa, 0xb, 0xc, 0xd, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2000,
            0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200a, 0x2028,
            0x2029, 0x202f, 0x205f, 0x3000,
        ];
        let ours: Vec<u32> = (0..0x11_0000u32)
            .filter_map(char::from_u32)
            .filter(|c| is_space(*c))
            .map(|c| c as u32)
            .collect();
        assert_eq!(ours, py);
    }

    #[test]
    fn split_and_strip_are_pythons() {
        assert_eq!(
            split(" a\x1cb\u{3000}c  ").collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(strip("\x1f x \u{85}"), "x");
        assert_eq!(strip("\u{200b}x"), "\u{200b}x");
    }

    #[test]
    fn truthiness_is_pythons() {
        for v in [
            json!(null),
            json!(false),
            json!(0),
            json!(0.0),
            json!(""),
            json!([]),
            json!({}),
        ] {
            assert!(!truthy(&v), "{v}");
        }
        for v in [
            json!(true),
            json!(1),
            json!(-0.5),
            json!("0"),
            json!([0]),
            json!({"a": 0}),
        ] {
            assert!(truthy(&v), "{v}");
        }
        let huge: Value = serde_json::from_str("1e400").unwrap();
        assert!(truthy(&huge));
        let negzero: Value = serde_json::from_str("-0e5").unwrap();
        assert!(!truthy(&negzero));
    }
}
