//! Speakers: a question that names a speaker ("What has Melanie painted?") is answered
//! mostly by that speaker's own words, and a conversation between two people who both keep
//! dogs holds as many of the other one's words about dogs. Transcripts and imported chats
//! label each message with its speaker ("Melanie: I finished the lake painting"); when the
//! text names the speaker of a labelled event, the event's fused score counts [`WEIGHT`]
//! times, with the reason `speaker:NAME`; and the names are left out of the text the
//! sentence model embeds for the query ([`dense_text`]).
//!
//! The lift does most for questions whose evidence is spread over one speaker's messages
//! (multi-hop); counting a score three times would crowd out what the other speaker's replies
//! and the neighbours of hits bring. The best fused events were read while ranking, so
//! looking at them costs no read. Figures: docs/recall.md ("Speakers", and the tables of
//! 2026-11-28).

use super::{Cache, Query, Via};
use crate::store::Indexes;
use crate::Result;
use std::collections::BTreeSet;

/// How many times a named speaker's event counts.
pub const WEIGHT: f64 = 2.0;
/// How far down the fused list events are looked at, at least: about eight times what a
/// 16,000-character budget holds of LoCoMo's messages, so an event further down would not
/// reach the fill even counted twice.
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
    text.split(|c: char| !is_word_char(c))
        .map(|w| base(w).to_lowercase())
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
pub fn favour<R: Indexes>(
    r: &R,
    q: &Query,
    fused: &mut [(i64, f64, Vec<Via>)],
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
        via.push(Via::Speaker(speaker.to_string()));
        lifted = true;
    }
    if lifted {
        fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    Ok(())
}

/// How many of a capitalised word's newest full-text hits are looked at for a speaker label
/// with it (a speaker's own messages are about half of those that hold their name).
pub const LABEL_PROBE: usize = 10;
/// How many distinct capitalised words of a text are looked up at most.
pub const MAX_NAME_WORDS: usize = 12;

/// The text a sentence model is asked about for `text` ([`super::Query::dense`]): `text`
/// without the names of the ledger's speakers, when it names any and a word that is not a
/// stop word is left ("What about Melanie?" is embedded whole).
///
/// A name weighs heavily in a small model's vector: "What has Melanie painted?" comes out
/// nearest to the messages that greet Melanie, whatever they are about. Who speaks is
/// [`favour`]'s part (and full text's: the name is one of its terms); what is asked about is
/// the model's (figures: docs/recall.md, "Speakers"). A text that names no speaker is
/// embedded as it is.
pub fn dense_text<R: Indexes>(r: &R, text: &str) -> Result<Option<String>> {
    let names = named(r, text)?;
    if names.is_empty() {
        return Ok(None);
    }
    let left = without(text, &names);
    Ok((!super::terms::query_terms(&left).is_empty()).then_some(left))
}

/// The capitalised words of `text` (lowercased, a possessive `'s` dropped) that are a word of
/// the speaker label of a message the full-text index finds them in, among its newest
/// [`LABEL_PROBE`]: the speakers `text` names. Stop words are not looked up (a question's
/// first word; a speaker called Will stays in the text). None while the index lags further
/// than a reader catches up on the fly (a turn's first write on such a ledger catches it up).
pub fn named<R: Indexes>(r: &R, text: &str) -> Result<BTreeSet<String>> {
    let mut capitalised: Vec<String> = Vec::new();
    for w in text.split(|c: char| !is_word_char(c)).map(base) {
        let lower = w.to_lowercase();
        if w.chars().next().is_some_and(char::is_uppercase)
            && !super::terms::is_stop_word(&lower)
            && !capitalised.contains(&lower)
        {
            capitalised.push(lower);
        }
    }
    let mut out = BTreeSet::new();
    if capitalised.is_empty() {
        return Ok(out);
    }
    let index = match r.text_index(super::MAX_UNINDEXED) {
        // A turn's write will catch the index up; until then no name is known.
        Err(crate::Error::IndexBehind { .. }) => return Ok(out),
        other => other?,
    };
    for w in capitalised.into_iter().take(MAX_NAME_WORDS) {
        let one = BTreeSet::from([w.clone()]);
        for (id, _) in index.term_hits(&w, i64::MAX, LABEL_PROBE)? {
            if r.get(id)?
                .is_some_and(|e| named_speaker(&e.content, &one).is_some())
            {
                out.insert(w);
                break;
            }
        }
    }
    Ok(out)
}

/// `text` without the words in `names` (compared lowercased, a possessive `'s` with them),
/// its spaces collapsed.
pub fn without(text: &str, names: &BTreeSet<String>) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if !names.contains(&base(word).to_lowercase()) {
            out.push_str(word);
        }
        word.clear();
    };
    for c in text.chars() {
        if is_word_char(c) {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '\'' || c == '’'
}

/// A word without surrounding apostrophes and a possessive `'s`.
fn base(w: &str) -> &str {
    let w = w.trim_matches(|c| c == '\'' || c == '’');
    w.strip_suffix("'s")
        .or_else(|| w.strip_suffix("’s"))
        .unwrap_or(w)
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
    fn names_are_left_out_with_their_possessive() {
        let names = BTreeSet::from(["melanie".to_string(), "dr".to_string()]);
        assert_eq!(
            without("What is Melanie's dog, and MELANIE’s cat?", &names),
            "What is dog, and cat?"
        );
        assert_eq!(without("Did Dr. Kim call?", &names), "Did . Kim call?");
        assert_eq!(without("Melanies plan", &names), "Melanies plan");
        assert_eq!(without("no names", &BTreeSet::new()), "no names");
    }

    #[test]
    fn the_speakers_a_text_names_are_found_by_their_labels() {
        use crate::event::{Clock, Kind, NewEvent};
        let dir = tempfile::tempdir().unwrap();
        let mut l = crate::store::Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let clock = Clock::pinned("2025-11-24T00:00:00Z").unwrap();
        for text in [
            "Melanie: I painted the lake",
            "Caroline: Hey Melanie, I saw Paris",
            "Dr Kim: rest",
        ] {
            let meta = serde_json::Map::new();
            let ev = NewEvent::new(Kind::UserMessage, text, meta).unwrap();
            crate::session::append(&mut l, &ev, &clock).unwrap();
        }
        let text = "What did Melanie's friend and dr Kim see in Paris?";
        let names = named(&l, text).unwrap();
        assert_eq!(names, BTreeSet::from(["kim".into(), "melanie".into()]));
        assert_eq!(
            dense_text(&l, text).unwrap().as_deref(),
            Some("What did friend and dr see in Paris?")
        );
        assert_eq!(dense_text(&l, "Paris, in May?").unwrap(), None);
        assert_eq!(dense_text(&l, "Melanie?").unwrap(), None, "nothing left");
        assert_eq!(dense_text(&l, "And what about Melanie's?").unwrap(), None);
    }

    /// A ledger whose index lags too far to be caught up on the fly names nobody (a turn
    /// goes on to its write, which catches the index up) instead of failing.
    #[test]
    fn a_far_lagging_index_names_nobody() {
        let dir = tempfile::tempdir().unwrap();
        let l = crate::store::Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let over = super::super::MAX_UNINDEXED + 1;
        l.conn_for_tests()
            .execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 INSERT INTO events (ts, kind, content, meta) SELECT 't', 'user_message',
                 'Melanie: hi', '{}' FROM n",
                [over as i64],
            )
            .unwrap();
        assert_eq!(dense_text(&l, "Did Melanie paint?").unwrap(), None);
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
