//! Turning a person's text into search terms: never FTS5 syntax, never raw input.
//!
//! The text is split on everything that is not a letter or digit (so quotes, `*`, `-`, `:`,
//! `NEAR(…)`, column filters and NUL are separators, not operators), lowercased, stripped of
//! English stop words (which match everything and say nothing), deduplicated, and capped.
//! Each term is later quoted as an FTS5 string, so a term that happens to spell `OR` or
//! `NEAR` is a word, not an operator.

/// The most terms one query uses (the first ones, in the text's order).
pub const MAX_TERMS: usize = 32;
/// Terms longer than this are not words anyone asks about (hashes, base64): dropped.
pub const MAX_TERM_CHARS: usize = 64;

/// Whether `w` (lowercase) is a stop word ([`crate::formats::stop`]).
pub use crate::formats::stop::is_stop_word;

/// The search terms of `text`, in order of first appearance.
pub fn query_terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() || word.chars().count() > MAX_TERM_CHARS {
            continue;
        }
        let w = word.to_lowercase();
        if is_stop_word(&w) || out.contains(&w) {
            continue;
        }
        out.push(w);
        if out.len() == MAX_TERMS {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_list_is_sorted() {
        let stop = crate::formats::stop::STOP;
        assert!(stop.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn fts_syntax_is_split_into_plain_words() {
        assert_eq!(
            query_terms("what did \"Caroline\" paint? NEAR(a b) -x col:val pai* OR"),
            ["caroline", "paint", "near", "b", "x", "col", "val", "pai"]
        );
        assert!(query_terms("").is_empty());
        assert!(query_terms("what is the of and").is_empty());
        assert_eq!(query_terms("a\0b\0Café café"), ["b", "café"]);
    }

    #[test]
    fn terms_are_capped() {
        let text: String = (0..100).map(|i| format!("w{i} ")).collect();
        assert_eq!(query_terms(&text).len(), MAX_TERMS);
        assert!(query_terms(&"x".repeat(100)).is_empty());
    }
}
