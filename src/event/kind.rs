//! The kind of an event: one of the names pmm knows, or a name it does not (a ledger written by
//! the reference or another program may hold any string), kept verbatim. The ledger stores the
//! name; [`Kind::as_str`] gives it back byte for byte.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Declares [`Kind`] from one table of variants and names, so the enum, its names and
/// [`Kind::ALL`] cannot drift apart.
macro_rules! kinds {
    ($($variant:ident = $name:literal,)*) => {
        /// An event's kind. Every name pmm writes is a variant; a name it does not know is
        /// [`Kind::Other`], so that any ledger reads, and writes back, unchanged.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum Kind {
            $(
                #[doc = concat!("`", $name, "`.")]
                $variant,
            )*
            /// A kind pmm does not know (never one of the names above).
            Other(OtherKind),
        }

        impl Kind {
            /// Every kind pmm knows and may append: the reference's allowlist in its order
            /// (FORMATS.md §1.7 says 38 but lists 39; all 39 are kept), then `violation`,
            /// `generation_failure` and `erasure` (SPEC §2.4; only `pmm-append --erase`
            /// writes an `erasure`).
            pub const ALL: &'static [Kind] = &[$(Kind::$variant),*];

            /// The kind's name, as the ledger stores it.
            pub const fn as_str(&self) -> &str {
                match self {
                    $(Kind::$variant => $name,)*
                    Kind::Other(other) => other.0.as_str(),
                }
            }

            /// The name of a known kind (`None` for [`Kind::Other`]), borrowed for as long as
            /// the program runs.
            pub const fn name(&self) -> Option<&'static str> {
                match self {
                    $(Kind::$variant => Some($name),)*
                    Kind::Other(_) => None,
                }
            }

            /// The known kind named `name`, if it is one.
            fn known(name: &str) -> Option<Kind> {
                match name {
                    $($name => Some(Kind::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

kinds! {
    UserMessage = "user_message",
    AssistantMessage = "assistant_message",
    Reflection = "reflection",
    IdentityAdoption = "identity_adoption",
    MetaSummary = "meta_summary",
    MetricsTurn = "metrics_turn",
    MetricCheck = "metric_check",
    CommitmentOpen = "commitment_open",
    CommitmentClose = "commitment_close",
    Claim = "claim",
    AutonomyRuleTable = "autonomy_rule_table",
    AutonomyTick = "autonomy_tick",
    AutonomyStimulus = "autonomy_stimulus",
    AutonomyKernel = "autonomy_kernel",
    SummaryUpdate = "summary_update",
    InterLedgerRef = "inter_ledger_ref",
    Config = "config",
    Filler = "filler",
    TestEvent = "test_event",
    MetricsUpdate = "metrics_update",
    AutonomyMetrics = "autonomy_metrics",
    InternalGoalCreated = "internal_goal_created",
    RetrievalSelection = "retrieval_selection",
    CheckpointManifest = "checkpoint_manifest",
    EmbeddingAdd = "embedding_add",
    LifetimeMemory = "lifetime_memory",
    StabilityMetrics = "stability_metrics",
    CoherenceCheck = "coherence_check",
    OutcomeObservation = "outcome_observation",
    PolicyUpdate = "policy_update",
    MetaPolicyUpdate = "meta_policy_update",
    ConceptDefine = "concept_define",
    ConceptAlias = "concept_alias",
    ConceptBindEvent = "concept_bind_event",
    ConceptRelate = "concept_relate",
    ConceptStateSnapshot = "concept_state_snapshot",
    ConceptBindThread = "concept_bind_thread",
    ClaimFromText = "claim_from_text",
    ConceptBindAsync = "concept_bind_async",
    Violation = "violation",
    GenerationFailure = "generation_failure",
    Erasure = "erasure",
}

/// The conversation's messages, by kind name: what a turn's retrieval and recall's
/// neighbours draw from.
pub const MESSAGE_KINDS: [&str; 2] = [Kind::UserMessage.as_str(), Kind::AssistantMessage.as_str()];

/// [`MESSAGE_KINDS`] as kinds, for the reads that take kinds (a hit's neighbouring messages).
pub const MESSAGES: [Kind; 2] = [Kind::UserMessage, Kind::AssistantMessage];

/// The name of a kind pmm does not know. Only [`Kind::from`] makes one, so it is never the
/// name of a known kind and equal kinds are equal values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OtherKind(String);

impl Kind {
    /// Whether writes of this kind are checked against the write policy (SPEC §2.5).
    pub fn is_sensitive(&self) -> bool {
        matches!(
            self,
            Kind::Config | Kind::CheckpointManifest | Kind::EmbeddingAdd | Kind::RetrievalSelection
        )
    }
}

/// Any name: a known kind, or [`Kind::Other`] (reading a ledger never fails on its kind).
impl From<&str> for Kind {
    fn from(name: &str) -> Kind {
        Kind::known(name).unwrap_or_else(|| Kind::Other(OtherKind(name.to_string())))
    }
}

/// Any name, as `From<&str>`, keeping the string of an unknown one.
impl From<String> for Kind {
    fn from(name: String) -> Kind {
        Kind::known(&name).unwrap_or(Kind::Other(OtherKind(name)))
    }
}

/// A name that is not one of the kinds pmm may append.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown kind '{0}' (`pmm-append --list-kinds` lists the {n} allowed kinds)", n = Kind::ALL.len())]
pub struct UnknownKind(pub String);

/// Known kinds only: what a writer accepts (`"x".parse::<Kind>()` fails where
/// `Kind::from("x")` gives [`Kind::Other`]).
impl FromStr for Kind {
    type Err = UnknownKind;

    fn from_str(name: &str) -> Result<Kind, UnknownKind> {
        Kind::known(name).ok_or_else(|| UnknownKind(name.to_string()))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AsRef<str> for Kind {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for Kind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Kind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A kind is its name in JSON.
impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        String::deserialize(d).map(Kind::from)
    }
}

#[cfg(test)]
impl Kind {
    /// Whether pmm knows this kind (only known kinds may be appended).
    pub fn is_known(&self) -> bool {
        !matches!(self, Kind::Other(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        assert_eq!(Kind::ALL.len(), 42);
        let mut names: Vec<&str> = Kind::ALL.iter().map(Kind::as_str).collect();
        for (kind, name) in Kind::ALL.iter().zip(&names) {
            assert_eq!(Kind::from(*name), *kind);
            assert_eq!(name.parse::<Kind>().as_ref(), Ok(kind));
            assert_eq!(kind.to_string(), *name);
            assert!(kind.is_known());
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Kind::ALL.len());
    }

    #[test]
    fn unknown_names_are_kept_verbatim_but_cannot_be_parsed() {
        for name in ["rsm_update", "", "User_Message", "user_message "] {
            let k = Kind::from(name);
            assert!(!k.is_known(), "{name:?}");
            assert_eq!(k.as_str(), name);
            assert_eq!(Kind::from(name.to_string()), k);
            assert_eq!(
                name.parse::<Kind>().unwrap_err().to_string(),
                format!(
                    "unknown kind '{name}' (`pmm-append --list-kinds` lists the 42 allowed kinds)"
                )
            );
        }
        assert_eq!(
            serde_json::to_string(&Kind::from("x y")).unwrap(),
            "\"x y\""
        );
        let k: Kind = serde_json::from_str("\"claim\"").unwrap();
        assert_eq!(k, Kind::Claim);
    }

    #[test]
    fn sensitive_kinds_are_the_policys_four() {
        let sensitive: Vec<&str> = Kind::ALL
            .iter()
            .filter(|k| k.is_sensitive())
            .map(Kind::as_str)
            .collect();
        assert_eq!(
            sensitive,
            [
                "config",
                "retrieval_selection",
                "checkpoint_manifest",
                "embedding_add"
            ]
        );
    }
}
