//! The derived parts of a ledger, in one list (projection checkpoints, the view of the
//! recallable events, the full-text index over it, the Merkle tree, vectors): everything in the file besides the `events`
//! table is computed from it, and each part says the same things through one protocol —
//! whether the ledger has it whole ([`Derived::have`]), how far it lags ([`Derived::lag`]),
//! how a writer brings it up to the head ([`Derived::catch_up`]), how a writer puts back
//! what is missing ([`Derived::restore`]), how it is rebuilt from the ledger
//! ([`Derived::rebuild`]) and what a check finds wrong with it ([`Derived::check`]). Writers'
//! catch-up, `pmm-recall --reindex` and `pmm-recall --check` walk [`DERIVED`] instead of
//! knowing each part.
//!
//! A part any of whose tables (or views) was dropped is *broken*: readers do without it
//! (the full-text index is then built in memory, the Merkle tree computed, vectors not
//! searched), and the next writer restores it in its transaction and refills it from the
//! ledger. Vectors are the exception to "refilled": they cost a model call each, so a
//! missing vector table is recreated empty and filled again by `pmm-recall --embed`, and the
//! vector tables that are still there are kept.

use super::schema::{self, Schema};
use super::{checkpoint, fts, merkle, vectors};
use rusqlite::{Connection, OptionalExtension};

/// One derived part of a ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Derived {
    /// The view `pmm_recallable` (the recallable events' id and text): the full-text
    /// index's content, so the index is used only with it.
    Views,
    /// The full-text index (`pmm_fts`, its shadow tables, `pmm_fts_state`).
    Text,
    /// The Merkle tree's perfect subtrees (`pmm_merkle`, `pmm_merkle_state`).
    Tree,
    /// Sentence-embedding vectors per model (`pmm_embed_models`, `pmm_vectors`,
    /// `pmm_vector_pack`).
    Vectors,
    /// Projection checkpoints (`pmm_checkpoints`).
    Checkpoints,
}

/// Every derived part, in the order they are restored and rebuilt.
pub const DERIVED: [Derived; 5] = [
    Derived::Checkpoints,
    Derived::Views,
    Derived::Text,
    Derived::Tree,
    Derived::Vectors,
];

/// What a ledger holds of a part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Have {
    /// All of it.
    Whole,
    /// Some of it: why it cannot be used.
    Broken(String),
    /// None of it, and no writer of ours ever made it (a reference ledger, or one only
    /// readers have opened).
    Never,
}

impl Derived {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Derived::Views => "recallable-events view",
            Derived::Text => "full-text index",
            Derived::Tree => "Merkle tree",
            Derived::Vectors => "vector tables",
            Derived::Checkpoints => "projection checkpoints",
        }
    }

    /// Whether its name is a plural.
    fn plural(self) -> bool {
        matches!(self, Derived::Vectors | Derived::Checkpoints)
    }

    /// Its name in JSON records.
    pub fn key(self) -> &'static str {
        match self {
            Derived::Views => "views",
            Derived::Text => "text",
            Derived::Tree => "tree",
            Derived::Vectors => "vectors",
            Derived::Checkpoints => "checkpoints",
        }
    }

    /// The schema objects it consists of.
    fn objects(self) -> &'static [&'static str] {
        match self {
            Derived::Views => &["pmm_recallable"],
            Derived::Text => &[
                "pmm_fts",
                "pmm_fts_data",
                "pmm_fts_idx",
                "pmm_fts_docsize",
                "pmm_fts_config",
                "pmm_fts_state",
            ],
            Derived::Tree => &["pmm_merkle", "pmm_merkle_state"],
            Derived::Vectors => &["pmm_embed_models", "pmm_vectors", "pmm_vector_pack"],
            Derived::Checkpoints => &["pmm_checkpoints"],
        }
    }

    /// The migration (its number, `user_version` after it) that first made it.
    fn migration(self) -> i64 {
        match self {
            Derived::Checkpoints => 1,
            Derived::Views | Derived::Text => 2,
            Derived::Tree => 3,
            Derived::Vectors => 4,
        }
    }

    /// Whether every write transaction brings it up to its head (the others are filled by
    /// turns and `--embed`, and are never behind in a way that matters).
    pub fn kept_by_writes(self) -> bool {
        matches!(self, Derived::Text | Derived::Tree)
    }

    /// What the ledger holds of it.
    pub(crate) fn have(self, conn: &Connection) -> rusqlite::Result<Have> {
        self.have_in(conn, &*schema::of(conn)?)
    }

    /// What the ledger holds of it, by the connection's [`Schema`] as of now.
    pub(crate) fn have_in(self, conn: &Connection, schema: &Schema) -> rusqlite::Result<Have> {
        let missing: Vec<&str> = self
            .objects()
            .iter()
            .copied()
            .filter(|o| !schema.has(o))
            .collect();
        if missing.len() == self.objects().len() && schema.version() < self.migration() {
            return Ok(Have::Never);
        }
        if !missing.is_empty() {
            return Ok(Have::Broken(format!(
                "{} {} missing",
                missing.join(", "),
                if missing.len() == 1 { "is" } else { "are" }
            )));
        }
        let state = match self {
            Derived::Text => Some("pmm_fts_state"),
            Derived::Tree => Some("pmm_merkle_state"),
            _ => None,
        };
        if let Some(table) = state {
            let row: Option<i64> = conn
                .prepare_cached(&format!("SELECT 1 FROM main.{table} WHERE id = 0"))?
                .query_row([], |r| r.get(0))
                .optional()?;
            if row.is_none() {
                return Ok(Have::Broken(format!(
                    "{table} has no row, so what the {} covers is unknown",
                    self.name()
                )));
            }
        }
        Ok(Have::Whole)
    }

    /// Whether the ledger has it whole.
    pub(crate) fn whole(self, conn: &Connection) -> rusqlite::Result<bool> {
        Ok(self.have(conn)? == Have::Whole)
    }

    /// The highest event id it covers, for the parts writes keep up to date (`None`: not such
    /// a part, or not whole).
    pub(crate) fn through(self, conn: &Connection) -> rusqlite::Result<Option<i64>> {
        match self {
            Derived::Text => fts::through(conn),
            Derived::Tree => Ok(merkle::state(conn)?.map(|(_, t)| t)),
            _ => Ok(None),
        }
    }

    /// How many events it is behind `head`: `None` for a part writes do not keep or that the
    /// ledger never had; all of them when it is broken.
    pub(crate) fn lag(self, conn: &Connection, head: i64) -> rusqlite::Result<Option<u64>> {
        if !self.kept_by_writes() {
            return Ok(None);
        }
        Ok(match self.have(conn)? {
            Have::Never => None,
            Have::Broken(_) => Some(head.max(0) as u64),
            Have::Whole => self
                .through(conn)?
                .map(|t| head.saturating_sub(t).max(0) as u64),
        })
    }

    /// Brings it up to `head` inside the caller's write transaction (nothing for the parts
    /// writes do not keep).
    pub(crate) fn catch_up(self, conn: &Connection, head: i64) -> rusqlite::Result<()> {
        match self {
            Derived::Text => fts::catch_up(conn, head, i64::MAX, &mut |_, _| {}),
            Derived::Tree => merkle::catch_up(conn, head),
            _ => Ok(()),
        }
    }

    /// Puts back what is missing of it inside the caller's write transaction, so that it is
    /// whole again: a part that lost any table is made again, empty, for the catch-up to
    /// refill from the ledger; vector tables that are still there are kept.
    pub(crate) fn restore(self, conn: &Connection) -> rusqlite::Result<()> {
        match self {
            Derived::Views => fts::restore_view(conn),
            Derived::Text => fts::restore(conn),
            Derived::Tree => merkle::restore(conn),
            Derived::Vectors => vectors::restore(conn),
            Derived::Checkpoints => conn.execute_batch(super::MIGRATIONS[0]),
        }
    }

    /// Rebuilds it from the ledger up to `head` inside the caller's write transaction
    /// (`pmm-recall --reindex`): the index and the tree from the events, the vectors' packs
    /// from the stored vectors, and the checkpoints that no longer match the ledger dropped.
    pub(crate) fn rebuild(self, conn: &Connection, head: i64) -> rusqlite::Result<()> {
        self.restore(conn)?;
        match self {
            Derived::Views => fts::rebuild_view(conn),
            Derived::Text => fts::rebuild(conn, head),
            Derived::Tree => merkle::rebuild(conn, head),
            Derived::Vectors => vectors::repack(conn),
            Derived::Checkpoints => checkpoint::drop_stale(conn),
        }
    }

    /// What is wrong with it against the ledger up to `head` (empty: nothing). FTS5's own
    /// check of the index needs a connection that may write.
    pub(crate) fn check(self, conn: &Connection, head: i64) -> rusqlite::Result<Vec<String>> {
        let mut findings = Vec::new();
        match self.have(conn)? {
            Have::Never => {
                if self == Derived::Text {
                    findings
                        .push("the ledger has no full-text index (any writer builds it)".into());
                }
                return Ok(findings);
            }
            Have::Broken(why) => {
                findings.push(format!(
                    "the {} {} broken ({why}): any writer, or pmm-recall --reindex, {}",
                    self.name(),
                    if self.plural() { "are" } else { "is" },
                    match self {
                        Derived::Vectors =>
                            "makes the missing tables again, empty (pmm-recall --embed refills them)",
                        Derived::Checkpoints => "makes the table again (turns and ticks refill it)",
                        Derived::Views => "makes it again",
                        _ => "rebuilds it from the ledger",
                    }
                ));
                return Ok(findings);
            }
            Have::Whole => {}
        }
        if let Some(through) = self.through(conn)? {
            if through != head {
                let what = if self == Derived::Text {
                    "the index".to_string()
                } else {
                    format!("the {}", self.name())
                };
                findings.push(format!(
                    "{what} covers events up to {through}, the ledger's head is {head}"
                ));
            }
        }
        match self {
            // FTS5's check reads the text through the view (a missing one is a finding of its own).
            Derived::Text if Derived::Views.whole(conn)? => {
                if let Some(why) = fts::integrity(conn)? {
                    findings.push(format!("the index does not match the ledger's text: {why}"));
                }
            }
            Derived::Tree => {
                if let Some(why) = merkle::mismatch(conn, head)? {
                    findings.push(format!("the Merkle tree does not match the ledger: {why}"));
                }
            }
            Derived::Vectors => {
                for (name, packed, stored) in vectors::pack_counts(conn)? {
                    if packed != stored {
                        findings.push(format!(
                            "the vector packs of model {name} hold {packed} vectors, its stored vectors are {stored} (pmm-recall --reindex repacks them)"
                        ));
                    }
                }
            }
            _ => {}
        }
        Ok(findings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list covers every `pmm_` object the migrations make, and a new ledger has every
    /// part whole: a derived table added later without its part here would be one that no
    /// writer restores and no check sees.
    #[test]
    fn the_list_covers_every_table_the_migrations_make() {
        let dir = tempfile::tempdir().unwrap();
        let l = super::super::Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        let conn = &l.conn;
        let schema = schema::of(conn).unwrap();
        let mut listed: Vec<&str> = DERIVED.iter().flat_map(|d| d.objects()).copied().collect();
        listed.sort_unstable();
        let mut names: Vec<&str> = schema.names().filter(|n| n.starts_with("pmm_")).collect();
        names.sort_unstable();
        assert_eq!(names, listed);
        for d in DERIVED {
            assert_eq!(d.have_in(conn, &schema).unwrap(), Have::Whole, "{d:?}");
        }
    }
}
