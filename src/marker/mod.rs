//! Markers in a model reply (FORMATS.md §3), and the two Python string primitives they are
//! defined by (§1.11): `str.splitlines()` and `str.strip()`.
//!
//! The reference parses replies with CPython's string methods, whose character sets differ from
//! Rust's `lines` and `trim` (`\r` alone, `\x1c`, `\u2028` break lines; `\x1c`-`\x1f` are
//! whitespace). Getting these wrong changes which commitments a reply opens, hence the cids and
//! the ledger's hashes, so every marker parser goes through the functions here.

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
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// CPython's `str.strip()` without an argument.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
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

/// The commitment texts of a reply (FORMATS.md §3.1): for every line that starts, at column 0
/// and case-sensitively, with `COMMIT:`, the text after the first `COMMIT:`, Python-stripped;
/// empty texts are dropped. Duplicates are kept, in reply order (each opens its own event).
pub fn commit_texts(reply: &str) -> Vec<String> {
    splitlines(reply)
        .into_iter()
        .filter_map(|line| line.strip_prefix("COMMIT:"))
        .map(py_strip)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitlines_breaks_like_cpython() {
        assert_eq!(splitlines(""), Vec::<&str>::new());
        assert_eq!(splitlines("\n"), vec![""]);
        assert_eq!(splitlines("a\nb\n"), vec!["a", "b"]);
        assert_eq!(splitlines("a\r\nb\rc\n\nd"), vec!["a", "b", "c", "", "d"]);
        assert_eq!(splitlines("a\r\rb"), vec!["a", "", "b"]);
        assert_eq!(
            splitlines("a\x0bb\x0cc\x1cd\x1de\x1ef\u{85}g\u{2028}h\u{2029}i"),
            vec!["a", "b", "c", "d", "e", "f", "g", "h", "i"]
        );
        // \x1f is whitespace to Python but not a line break.
        assert_eq!(splitlines("a\x1fb"), vec!["a\x1fb"]);
        assert_eq!(splitlines("é😀\u{2028}"), vec!["é😀"]);
    }

    #[test]
    fn strip_uses_python_isspace() {
        assert_eq!(py_strip(" \t\x1c\x1d\x1e\x1fx y\u{a0}\u{3000}\r\n"), "x y");
        assert_eq!(py_strip("\u{200b}x"), "\u{200b}x"); // zero width space is not space
        assert_eq!(py_strip("   "), "");
    }

    #[test]
    fn commit_lines_start_at_column_zero() {
        let reply = "Hello\nCOMMIT: first  \n COMMIT: indented (ignored)\ncommit: lower (ignored)\nCOMMIT:\nCOMMIT:   \nCOMMIT:second COMMIT: keeps the rest";
        assert_eq!(
            commit_texts(reply),
            vec!["first", "second COMMIT: keeps the rest"]
        );
    }

    #[test]
    fn commit_lines_split_on_crlf_and_unicode_breaks() {
        assert_eq!(
            commit_texts("x\r\nCOMMIT: a\r\nCOMMIT: b\u{2028}COMMIT: c\x1cCOMMIT: d\x1f"),
            vec!["a", "b", "c", "d"]
        );
        // A duplicate is kept: it opens a second event with the same cid.
        assert_eq!(commit_texts("COMMIT: a\nCOMMIT: a"), vec!["a", "a"]);
        assert_eq!(
            commit_texts("COMMIT: apply_ontological_directives  "),
            vec!["apply_ontological_directives"]
        );
    }
}
