//! Why a recalled event was picked: a closed vocabulary ([`Via`]), one variant per reason a
//! source gives, written and read as the strings `pmm-recall` prints and ledgers record
//! (`retrieval_selection.via`, a thinking reply's `meta.via`).

use super::when::Window;
use chrono::NaiveDate;
use std::borrow::Cow;
use std::fmt;

/// One reason a recalled event was picked. Each is written as one string (`fts`,
/// `neighbour-of:12`, `corrects:7` …: [`Via::as_str`]) and read back from it ([`Via::parse`]);
/// a string that is none of them — one a later or another writer put in a ledger — is kept
/// as [`Via::Other`] and written back unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// `fts`: a full-text match.
    Fts,
    /// `dense`: near in meaning (the embedding model's vectors).
    Dense,
    /// `neighbour-of:ID`: the message one or two before or after the match `ID`.
    NeighbourOf(i64),
    /// `concept:TOKEN`: bound to a concept the text mentions.
    Concept(String),
    /// `thread:CID`: the story of a commitment bound to a concept the text mentions.
    Thread(String),
    /// `fact:TYPE=VALUE`: the message a fact the text names or asks about was extracted from.
    Fact {
        /// The fact's claim type (`user.location`).
        claim_type: String,
        /// Its value (`lisbon`).
        value: String,
    },
    /// `when:DAY` or `when:FIRST..LAST`: told in the window of days the text names.
    When(Window),
    /// `speaker:NAME`: labelled with a speaker the text names.
    Speaker(String),
    /// `corrects:ID`: the event believed now, brought in because it corrects `ID`, which
    /// matched.
    Corrects(i64),
    /// A reason this version does not know, kept as it was read.
    Other(String),
}

impl Via {
    /// The reason as written: `fts`, `neighbour-of:12`, `fact:user.location=lisbon` ….
    pub fn as_str(&self) -> Cow<'_, str> {
        match self {
            Via::Fts => Cow::Borrowed("fts"),
            Via::Dense => Cow::Borrowed("dense"),
            Via::NeighbourOf(id) => Cow::Owned(format!("neighbour-of:{id}")),
            Via::Concept(token) => Cow::Owned(format!("concept:{token}")),
            Via::Thread(cid) => Cow::Owned(format!("thread:{cid}")),
            Via::Fact { claim_type, value } => Cow::Owned(format!("fact:{claim_type}={value}")),
            Via::When(w) if w.first == w.last => Cow::Owned(format!("when:{}", w.first)),
            Via::When(w) => Cow::Owned(format!("when:{}..{}", w.first, w.last)),
            Via::Speaker(name) => Cow::Owned(format!("speaker:{name}")),
            Via::Corrects(id) => Cow::Owned(format!("corrects:{id}")),
            Via::Other(s) => Cow::Borrowed(s),
        }
    }

    /// Reads a reason as written. Whatever the string, writing the result gives it back: a
    /// string no variant writes exactly (`corrects:x`, `corrects:012`, `when:2022-7-9`) is
    /// [`Via::Other`].
    pub fn parse(s: &str) -> Via {
        match Via::known(s) {
            Some(v) if v.as_str() == s => v,
            _ => Via::Other(s.to_string()),
        }
    }

    /// The variant `s` names, if any (not yet checked to be written as `s`).
    fn known(s: &str) -> Option<Via> {
        let id = |rest: &str| rest.parse::<i64>().ok();
        let (kind, rest) = match s {
            "fts" => return Some(Via::Fts),
            "dense" => return Some(Via::Dense),
            _ => s.split_once(':')?,
        };
        Some(match kind {
            "neighbour-of" => Via::NeighbourOf(id(rest)?),
            "concept" => Via::Concept(rest.to_string()),
            "thread" => Via::Thread(rest.to_string()),
            "fact" => {
                let (claim_type, value) = rest.split_once('=')?;
                Via::Fact {
                    claim_type: claim_type.to_string(),
                    value: value.to_string(),
                }
            }
            "when" => {
                let day = |d: &str| d.parse::<NaiveDate>().ok();
                let (first, last) = rest.split_once("..").unwrap_or((rest, rest));
                Via::When(Window {
                    first: day(first)?,
                    last: day(last)?,
                })
            }
            "speaker" => Via::Speaker(rest.to_string()),
            "corrects" => Via::Corrects(id(rest)?),
            _ => return None,
        })
    }
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl serde::Serialize for Via {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Via {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Via, D::Error> {
        struct Reason;
        impl serde::de::Visitor<'_> for Reason {
            type Value = Via;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a recall reason (a string)")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Via, E> {
                Ok(Via::parse(s))
            }
        }
        d.deserialize_str(Reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    fn every_variant() -> Vec<(Via, &'static str)> {
        vec![
            (Via::Fts, "fts"),
            (Via::Dense, "dense"),
            (Via::NeighbourOf(41), "neighbour-of:41"),
            (Via::Concept("topic.pets".into()), "concept:topic.pets"),
            (Via::Thread("c-9f2".into()), "thread:c-9f2"),
            (
                Via::Fact {
                    claim_type: "user.location".into(),
                    value: "lisbon".into(),
                },
                "fact:user.location=lisbon",
            ),
            (
                Via::When(Window {
                    first: day("2022-07-09"),
                    last: day("2022-07-09"),
                }),
                "when:2022-07-09",
            ),
            (
                Via::When(Window {
                    first: day("2022-07-01"),
                    last: day("2022-07-31"),
                }),
                "when:2022-07-01..2022-07-31",
            ),
            (Via::Speaker("Melanie".into()), "speaker:Melanie"),
            (Via::Corrects(12), "corrects:12"),
            (Via::Other("session".into()), "session"),
        ]
    }

    #[test]
    fn every_variant_round_trips_through_its_string() {
        for (via, s) in every_variant() {
            assert_eq!(via.as_str(), s);
            assert_eq!(via.to_string(), s);
            assert_eq!(Via::parse(s), via, "{s}");
            let json = serde_json::to_string(&via).unwrap();
            assert_eq!(json, serde_json::to_string(s).unwrap());
            assert_eq!(serde_json::from_str::<Via>(&json).unwrap(), via);
        }
    }

    #[test]
    fn corrects_carries_its_id() {
        assert_eq!(Via::parse("corrects:12"), Via::Corrects(12));
        assert_eq!(Via::Corrects(12).as_str(), "corrects:12");
        assert_eq!(Via::parse("corrects:-3"), Via::Corrects(-3));
    }

    #[test]
    fn unknown_and_malformed_reasons_are_other_and_written_back_unchanged() {
        for s in [
            "",
            "meaning",
            "session:4",
            "corrects:x",
            "corrects:",
            "corrects:012",
            "corrects:+12",
            "corrects: 12",
            "corrects:99999999999999999999",
            "neighbour-of:1.5",
            "fact:no-equals",
            "when:2022-7-9",
            "when:2022-07-09..2022-07-09",
            "when:2022-07-09..",
            "when:yesterday",
            "FTS",
            "fts ",
            "concept\"quoted\"\n",
            "ünïcödé:✓",
        ] {
            let via = Via::parse(s);
            assert_eq!(via, Via::Other(s.to_string()), "{s:?}");
            assert_eq!(via.as_str(), s);
            let json = serde_json::to_string(&via).unwrap();
            assert_eq!(json, serde_json::to_string(s).unwrap());
            assert_eq!(serde_json::from_str::<Via>(&json).unwrap(), via);
        }
    }

    #[test]
    fn payloads_are_taken_whole() {
        // Everything after the prefix is the payload, colons and equals signs included.
        assert_eq!(Via::parse("concept:"), Via::Concept(String::new()));
        assert_eq!(Via::parse("thread:a:b"), Via::Thread("a:b".into()));
        assert_eq!(
            Via::parse("speaker:Dr. Who"),
            Via::Speaker("Dr. Who".into())
        );
        assert_eq!(
            Via::parse("fact:user.tool_usage=a=b"),
            Via::Fact {
                claim_type: "user.tool_usage".into(),
                value: "a=b".into()
            }
        );
    }

    #[test]
    fn lists_of_reasons_read_and_write_as_the_same_json() {
        let json = r#"[["fts","neighbour-of:3","speaker:Caroline"],[],["corrects:5"],["x"]]"#;
        let read: Vec<Vec<Via>> = serde_json::from_str(json).unwrap();
        assert_eq!(read[2], [Via::Corrects(5)]);
        assert_eq!(read[3], [Via::Other("x".into())]);
        assert_eq!(serde_json::to_string(&read).unwrap(), json);
        assert!(serde_json::from_str::<Vec<Via>>(r#"["fts",1]"#).is_err());
    }
}
