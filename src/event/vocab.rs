//! Closed vocabularies of the ledger: names that pmm writes from a fixed set, each declared
//! once as an enum with its names (the [`Kind`](super::Kind) table is the model), so that
//! writers, folds and the verifier match on values instead of re-spelling strings. What is
//! not in a set (a ledger written by the reference or another program may hold any string)
//! stays a string where it is read: [`parse`](Source::parse) says `None`.

/// Declares an enum of unit variants, each with the name the ledger spells, and derives from
/// that one table its `ALL`, `as_str`, `parse`, `Display`, its JSON form (the name) and
/// comparisons with strings.
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: [$name; [$($text),*].len()] = [$($name::$variant),*];

            /// The name, as the ledger spells it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )*
                }
            }

            /// The names as a sentence lists them: `a, b or c`.
            pub fn listed() -> String {
                let names = $name::ALL.map($name::as_str);
                match names.split_last() {
                    Some((last, [])) => last.to_string(),
                    Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                    None => String::new(),
                }
            }

            /// The value named `name`, if it is one.
            pub fn parse(name: &str) -> Option<$name> {
                match name {
                    $( $text => Some($name::$variant), )*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl From<$name> for serde_json::Value {
            fn from(v: $name) -> serde_json::Value {
                serde_json::Value::String(v.as_str().to_string())
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.as_str()
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }
    };
}
pub(crate) use vocabulary;

vocabulary! {
    /// The `meta.source` (and a commitment's `meta.origin`) of the events pmm's own writers
    /// append: who wrote it. Other values occur (an MCP client's configured name, an erasure's
    /// actor, an imported ledger's); they are read as strings.
    pub enum Source {
        /// The autonomy kernel: ticks, kernel reflections, its goals, thinking ticks, the
        /// default configs a runtime program writes on a ledger's first use.
        AutonomyKernel = "autonomy_kernel",
        /// The tick's `autonomy_stimulus`.
        AutonomySupervisor = "autonomy_supervisor",
        /// The tick's `autonomy_metrics`.
        AutonomyTracker = "autonomy_tracker",
        /// The indexer's events (`index` ticks and the writers that share its rules).
        Indexer = "autonomy_kernel.indexer",
        /// The indexer's backfill of a ledger indexed before it existed.
        IndexerBackfill = "indexer.backfill",
        /// The `meta.origin` of the indexer's bindings and claims (the reference's).
        Async = "async",
        /// An internal goal's `internal_goal_created`.
        InternalGoal = "internal_goal",
        /// `pmm-turn`: generation failures, synthesized reflections.
        PmmTurn = "pmm-turn",
        /// `pmm-tick --set`/`--unset`: the thresholds a user sets.
        PmmTick = "pmm-tick",
        /// A validated claim's concept binding.
        AutoBinder = "auto_binder",
        /// `identity_adoption`.
        IdentityManager = "identity_manager",
        /// The `meta_summary` after a synthesized reflection.
        MetaReflectionEngine = "meta_reflection_engine",
        /// A turn's own concept bindings (the reference's active indexing).
        ActiveIndexing = "active_indexing",
        /// The binding of a turn's concepts to the threads it opened.
        Loop = "loop",
        /// The model's reply: commitments a `COMMIT:`/`CLOSE:` line opens or closes.
        Assistant = "assistant",
        /// `pmm-mcp`'s writes (unless the caller's token names another source).
        Mcp = "mcp",
        /// `pmm-chat`'s `/config`.
        Chat = "chat",
        /// A `violation`: the runtime refusing a write.
        Runtime = "runtime",
    }
}

vocabulary! {
    /// What a tick decided: an `autonomy_tick`'s `decision` (SPEC §4).
    pub enum Action {
        /// Nothing (besides auto-closes).
        Idle = "idle",
        /// A kernel reflection.
        Reflect = "reflect",
        /// A `summary_update`.
        Summarize = "summarize",
        /// A batch of the indexer (`concept_bind_async`, `claim_from_text`).
        Index = "index",
    }
}

impl Action {
    /// The `action_kind` of the `outcome_observation` after a tick that decided `decision`
    /// (`autonomy_reflect`): what the tick writes and what `--deep` expects of it. A string,
    /// not an [`Action`]: a ledger's tick may hold a decision pmm does not make.
    pub fn outcome_kind(decision: &str) -> String {
        format!("autonomy_{decision}")
    }
}

impl Source {
    /// Whether `v` (a `meta` value) is this source's name.
    pub fn is(self, v: Option<&serde_json::Value>) -> bool {
        v.and_then(serde_json::Value::as_str) == Some(self.as_str())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Each name gives its value back, and no two values share a name.
    fn round_trip<T: Copy + PartialEq + std::fmt::Debug>(
        all: &[T],
        name: fn(T) -> &'static str,
        parse: fn(&str) -> Option<T>,
    ) {
        let mut names: Vec<&str> = all.iter().map(|v| name(*v)).collect();
        assert!(all.iter().all(|v| parse(name(*v)) == Some(*v)), "{names:?}");
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
        assert_eq!(parse("nobody"), None);
    }

    #[test]
    fn names_round_trip_and_are_unique() {
        use crate::event::config::{Strategy, Threshold};
        round_trip(&Source::ALL, Source::as_str, Source::parse);
        round_trip(&Action::ALL, Action::as_str, Action::parse);
        round_trip(&Threshold::ALL, Threshold::as_str, Threshold::parse);
        round_trip(&Strategy::ALL, Strategy::as_str, Strategy::parse);
        assert_eq!(
            serde_json::to_string(&Action::Summarize).unwrap(),
            r#""summarize""#
        );
        assert!("autonomy_kernel" == Source::AutonomyKernel);
        assert_eq!(Action::listed(), "idle, reflect, summarize or index");
        assert_eq!(Action::outcome_kind("reflect"), "autonomy_reflect");
    }

    /// The library's code outside its tests, file by file (`path`, text): what the tests that
    /// guard a single authority read.
    pub(crate) fn library_code() -> Vec<(String, String)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap();
                    let code = match text.find("#[cfg(test)]\nmod tests") {
                        Some(at) => text[..at].to_string(),
                        None => text,
                    };
                    out.push((path.display().to_string(), code));
                }
            }
        }
        let mut out = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut out,
        );
        out
    }

    /// Writers and readers name a source or a threshold by its value, never by spelling it:
    /// the tables above (and `Kind`'s, which has `autonomy_kernel` too) are the only places.
    #[test]
    fn sources_and_thresholds_are_spelled_only_in_their_tables() {
        use crate::event::config::Threshold;
        let names: Vec<&str> = Source::ALL
            .iter()
            .map(|s| s.as_str())
            .filter(|n| n.contains(['_', '.']))
            .chain(Threshold::ALL.iter().map(|t| t.as_str()))
            .collect();
        let mut found = Vec::new();
        for (path, code) in library_code() {
            if path.ends_with("vocab.rs")
                || path.ends_with("config.rs")
                || path.ends_with("kind.rs")
            {
                continue;
            }
            for (n, line) in code.lines().enumerate() {
                let quoted = |name: &&str| line.contains(&format!("\"{name}\""));
                if !line.trim_start().starts_with("//") && names.iter().any(quoted) {
                    found.push(format!("{path}:{}: {}", n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "spelled outside the tables:\n{}",
            found.join("\n")
        );
    }
}
