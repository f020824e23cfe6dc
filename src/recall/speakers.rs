//! Speakers: a question that names a speaker ("What has Melanie painted?") is answered
//! mostly by that speaker's own words, and a conversation between two people who both keep
//! dogs holds as many of the other one's words about dogs. Transcripts and imported chats
//! label each message with its speaker ("Melanie: I finished the lake painting"); when the
//! text names the speaker of a labelled event, the event's fused score counts [`WEIGHT`]
//! times, with the reason `speaker:NAME`.
//!
//! On the LoCoMo dev conversations (their messages labelled so by `scripts/recall-bench`),
//! with all-MiniLM-L6-v2, this took all-evidence recall from 75.7 / 82.2 / 87.7 % to 76.6 /
//! 84.0 / 89.5 % at 4,000, 8,000 and 16,000 characters, multi-hop questions most (39.4 →
//! 49.0 % at 8,000); without a model from 72.7 / 79.8 / 85.3 % to 75.2 / 81.9 / 86.3 %
//! (`docs/recall.md`). Counting a score 1.5 to 2.5 times gave the same within half a point;
//! 3 times loses what the other speaker's replies and the neighbours of hits bring. Looking
//! at the best 1,000 fused events costs well under a millisecond: they were read while
//! ranking.

use super::{Cache, Query};
use crate::store::Reads;
use crate::Result;
use std::collections::BTreeSet;

/// How many times a named speaker's event counts.
pub const WEIGHT: f64 = 2.0;
/// How far down the fused list events are looked at, at least: about eight times what a
/// 16,000-character budget holds of LoCoMo's messages (an event further down would not
/// reach the fill even counted twice; looking at 300 gave the same figures).
pub const DEPTH: usize = 1_000;
/// A larger budget looks at one event per this many characters of it.
pub const CHARS_PER_EVENT: usize = 16;

/// How far down the fused list a fill of `budget` characters looks for named speakers.
pub fn depth(budget: usize) -> usize {
    (budget / CHARS_PER_EVENT).max(DEPTH)
}
/// The longest speaker label, in characters.
pub const MAX_LABEL: usize = 40;

/// The words of `text`, lowercased, that a speaker label could match (letters and digits; a
/// possessive `'s` dropped).
pub fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
        .map(|w| {
            let w = w.trim_matches(|c| c == '\'' || c == '’');
            w.strip_suffix("'s")
                .or_else(|| w.strip_suffix("’s"))
                .unwrap_or(w)
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// The speaker label `content` begins with: one to three words, each beginning with a
/// capital letter, then `": "` ("Melanie: …", "Dr Kim: …"), at most [`MAX_LABEL`]
/// characters.
pub fn label(content: &str) -> Option<&str> {
    let (head, _) = content.split_once(": ")?;
    let n = head.split(' ').count();
    let ok = (1..=3).contains(&n)
        && head.chars().count() <= MAX_LABEL
        && head.split(' ').all(|w| {
            let mut cs = w.chars();
            cs.next().is_some_and(char::is_uppercase)
                && cs.all(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '\''))
        });
    ok.then_some(head)
}

/// The speaker `content` is labelled with, when `named` (the text's [`words`]) names them:
/// one of the label's words is among them.
fn named_speaker<'c>(content: &'c str, named: &BTreeSet<String>) -> Option<&'c str> {
    label(content).filter(|l| {
        l.split(' ')
            .any(|w| named.contains(&w.trim_end_matches('.').to_lowercase()))
    })
}

/// Counts [`WEIGHT`] times the fused score of every event among the first [`depth`] whose
/// speaker `q`'s text names, and puts the list back in order (best first, ties by id). The
/// events read are kept in `cache` for the fill.
pub fn favour<R: Reads>(
    r: &R,
    q: &Query,
    fused: &mut [(i64, f64, Vec<String>)],
    cache: &mut Cache,
) -> Result<()> {
    let named = words(&q.text);
    if named.is_empty() {
        return Ok(());
    }
    let mut lifted = false;
    for (id, score, via) in fused.iter_mut().take(depth(q.budget)) {
        if !cache.contains_key(id) {
            match r.get(*id)? {
                Some(e) => {
                    cache.insert(*id, e);
                }
                None => continue,
            }
        }
        let Some(speaker) = cache
            .get(id)
            .and_then(|e| named_speaker(&e.content, &named))
        else {
            continue;
        };
        *score *= WEIGHT;
        via.push(format!("speaker:{speaker}"));
        lifted = true;
    }
    if lifted {
        fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_a_few_capitalised_words_before_a_colon() {
        assert_eq!(label("Melanie: I painted a lake."), Some("Melanie"));
        assert_eq!(label("Dr Kim: take two."), Some("Dr Kim"));
        assert_eq!(label("Mary-Jo O'Neil: hi"), Some("Mary-Jo O'Neil"));
        assert_eq!(label("the plan: eat"), None, "not capitalised");
        assert_eq!(label("Melanie said: hi"), None, "a lower-case word");
        assert_eq!(label("One Two Three Four: x"), None, "four words");
        assert_eq!(label("Melanie:no space"), None);
        assert_eq!(label("No label here"), None);
        assert_eq!(label(": empty"), None);
    }

    #[test]
    fn words_drop_case_punctuation_and_possessives() {
        let w = words("What is Melanie's favourite book, and Caroline’s?");
        for want in [
            "what",
            "is",
            "melanie",
            "favourite",
            "book",
            "and",
            "caroline",
        ] {
            assert!(w.contains(want), "{want} in {w:?}");
        }
        assert!(!w.contains("melanie's"));
    }

    #[test]
    fn larger_budgets_look_further() {
        assert_eq!(depth(8_000), DEPTH);
        assert_eq!(depth(16_000), DEPTH);
        assert_eq!(depth(1_000_000), 62_500);
    }

    #[test]
    fn a_label_matches_when_one_of_its_words_is_named() {
        let named = words("what did kim say?");
        assert_eq!(named_speaker("Dr Kim: rest.", &named), Some("Dr Kim"));
        assert_eq!(named_speaker("Melanie: rest.", &named), None);
        assert_eq!(named_speaker("kim: lower-case label", &named), None);
    }
}
