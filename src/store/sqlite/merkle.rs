//! The Merkle tree's stored nodes (docs/verification.md): every perfect subtree hash of the
//! tree over the ledger (`chain::merkle`), keyed by `(level, idx)`. Derived data, never part of
//! the chain, of exports or of verification's verdict on the chain.
//!
//! - `pmm_merkle` holds the perfect subtree of `2^level` leaves starting at leaf `idx·2^level`
//!   (level 0: the leaves). About 2n rows of 32 bytes for n events; every root and proof is
//!   O(log n) point reads of it.
//! - `pmm_merkle_state` says how many leaves (`size`) the stored tree covers and the id of the
//!   last event it covers (`through`). Every write transaction brings the tree up to its head
//!   just before it commits ([`catch_up`]), as the full-text index: a crash never leaves the
//!   tree out of step, and a ledger another program appended to is caught up by the next
//!   writer. A stored tree that claims more than the ledger holds, or whose last leaf is no
//!   longer the leaf of the event it names (history rewritten under it), is rebuilt.
//! - A reader never writes: when the stored tree lags (or is absent) it adds the missing
//!   leaves in memory ([`Tree`]), so its answers are always about the ledger as it is.

use crate::chain::merkle::{self, Nodes};
use crate::chain::Digest;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;

/// The migration that creates the tree (empty; [`catch_up`] fills it).
pub(crate) const MIGRATION: &str = "
CREATE TABLE IF NOT EXISTS pmm_merkle (
    level INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pmm_merkle_state (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    size INTEGER NOT NULL,
    through INTEGER NOT NULL
);
INSERT OR IGNORE INTO pmm_merkle_state (id, size, through) VALUES (0, 0, 0);";

/// Whether the ledger has the whole stored tree (both tables and the state row:
/// [`super::Derived`]).
pub(crate) fn has_tree(conn: &Connection) -> rusqlite::Result<bool> {
    super::Derived::Tree.whole(conn)
}

/// Makes a broken stored tree whole again, empty, inside the caller's write transaction
/// (the catch-up then fills it from the ledger). A whole one is left as it is.
pub(crate) fn restore(conn: &Connection) -> rusqlite::Result<()> {
    if has_tree(conn)? {
        return Ok(());
    }
    conn.execute_batch(
        "DROP TABLE IF EXISTS pmm_merkle;
         DROP TABLE IF EXISTS pmm_merkle_state;",
    )?;
    conn.execute_batch(MIGRATION)
}

/// Why the stored tree no longer describes the ledger up to `head`, if it does not (`None`
/// also without a whole tree).
pub(crate) fn mismatch(conn: &Connection, head: i64) -> rusqlite::Result<Option<String>> {
    let Some((size, through)) = state(conn)? else {
        return Ok(None);
    };
    if matches(conn, size, through, head)? {
        return Ok(None);
    }
    Ok(Some(format!(
        "it claims {size} leaves through event {through}, which the ledger up to {head} does not bear out"
    )))
}

/// `(size, through)` of the stored tree; `None` without one.
pub(crate) fn state(conn: &Connection) -> rusqlite::Result<Option<(u64, i64)>> {
    if !has_tree(conn)? {
        return Ok(None);
    }
    Ok(Some(
        conn.query_row(
            "SELECT size, through FROM pmm_merkle_state WHERE id = 0",
            [],
            |r| Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get::<_, i64>(1)?)),
        )
        .optional()?
        .unwrap_or((0, 0)),
    ))
}

fn stored_node(conn: &Connection, level: u32, idx: u64) -> rusqlite::Result<Option<Digest>> {
    let blob: Option<Vec<u8>> = conn
        .prepare_cached("SELECT hash FROM pmm_merkle WHERE level = ?1 AND idx = ?2")?
        .query_row(params![level, idx as i64], |r| r.get(0))
        .optional()?;
    Ok(blob.and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok().map(Digest)))
}

fn event_hash(conn: &Connection, id: i64) -> rusqlite::Result<Option<Option<String>>> {
    conn.prepare_cached("SELECT hash FROM events WHERE id = ?1")?
        .query_row([id], |r| r.get::<_, Option<String>>(0))
        .optional()
}

/// Appends leaves to a tree of `size` leaves, keeping the left siblings still waiting for a
/// right one (the "compact range" of RFC 6962's log: one per set bit of the size).
struct Frontier {
    size: u64,
    pending: Vec<Digest>,
}

impl Frontier {
    /// The frontier of the first `size` leaves, from `nodes`.
    fn load<N: Nodes>(nodes: &mut N, size: u64) -> Result<Frontier, N::Error> {
        let mut pending = vec![Digest([0; 32]); 64];
        for (level, slot) in pending.iter_mut().enumerate() {
            if size >> level & 1 == 1 {
                *slot = nodes.node(level as u32, (size >> level) - 1)?;
            }
        }
        Ok(Frontier { size, pending })
    }

    /// Adds a leaf; `put` receives every node it completes, the leaf first.
    fn push<E>(
        &mut self,
        leaf: Digest,
        put: &mut dyn FnMut(u32, u64, &Digest) -> Result<(), E>,
    ) -> Result<(), E> {
        let (mut h, mut level, mut idx) = (leaf, 0u32, self.size);
        put(0, idx, &h)?;
        while idx & 1 == 1 {
            h = merkle::node_hash(&self.pending[level as usize], &h);
            idx >>= 1;
            level += 1;
            put(level, idx, &h)?;
        }
        self.pending[level as usize] = h;
        self.size += 1;
        Ok(())
    }
}

/// Stored nodes read through a connection.
struct Stored<'c>(&'c Connection);

impl Nodes for Stored<'_> {
    type Error = rusqlite::Error;
    fn node(&mut self, level: u32, index: u64) -> rusqlite::Result<Digest> {
        stored_node(self.0, level, index)?.ok_or(rusqlite::Error::QueryReturnedNoRows)
    }
}

/// Whether the stored tree still describes the ledger: it covers no more than the head, and
/// its last leaf is still the leaf of the event it says it covers.
fn matches(conn: &Connection, size: u64, through: i64, head: i64) -> rusqlite::Result<bool> {
    if through > head || (size == 0) != (through == 0) {
        return Ok(false);
    }
    if size == 0 {
        return Ok(true);
    }
    let Some(hash) = event_hash(conn, through)? else {
        return Ok(false);
    };
    Ok(stored_node(conn, 0, size - 1)? == Some(merkle::event_leaf(hash.as_deref())))
}

/// Brings the stored tree up to `head` inside the caller's write transaction (rebuilding it
/// first when it no longer matches the ledger).
pub(crate) fn catch_up(conn: &Connection, head: i64) -> rusqlite::Result<()> {
    let Some((mut size, mut through)) = state(conn)? else {
        return Ok(());
    };
    if through == head && size > 0 && matches(conn, size, through, head)? {
        return Ok(());
    }
    if !matches(conn, size, through, head)? {
        conn.execute("DELETE FROM pmm_merkle", [])?;
        (size, through) = (0, 0);
    }
    if through == head {
        return set_state(conn, size, through);
    }
    let mut frontier = Frontier::load(&mut Stored(conn), size)?;
    let mut insert = conn.prepare_cached(
        "INSERT OR REPLACE INTO pmm_merkle (level, idx, hash) VALUES (?1, ?2, ?3)",
    )?;
    let mut put = |level: u32, idx: u64, h: &Digest| -> rusqlite::Result<()> {
        insert.execute(params![level, idx as i64, &h.0[..]])?;
        Ok(())
    };
    let mut rows = conn.prepare_cached("SELECT id, hash FROM events WHERE id > ?1 ORDER BY id")?;
    let mut rows = rows.query([through])?;
    while let Some(r) = rows.next()? {
        let id: i64 = r.get(0)?;
        let hash: Option<String> = r.get(1).ok();
        frontier.push(merkle::event_leaf(hash.as_deref()), &mut put)?;
        through = id;
    }
    set_state(conn, frontier.size, through)
}

fn set_state(conn: &Connection, size: u64, through: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO pmm_merkle_state (id, size, through) VALUES (0, ?1, ?2)",
    )?
    .execute(params![size as i64, through])?;
    Ok(())
}

/// Rebuilds the stored tree from the ledger.
pub(crate) fn rebuild(conn: &Connection, head: i64) -> rusqlite::Result<()> {
    if !has_tree(conn)? {
        return Ok(());
    }
    conn.execute("DELETE FROM pmm_merkle", [])?;
    set_state(conn, 0, 0)?;
    catch_up(conn, head)
}

/// The tree over a ledger as a reader sees it: the stored nodes, plus (when the stored tree
/// lags the ledger, does not match it, or is absent) the nodes of the missing leaves, computed
/// in memory from the events.
pub struct Tree<'c> {
    conn: &'c Connection,
    /// Leaves the stored part covers (0 when it is not used).
    stored: u64,
    /// Nodes completed by leaves after the stored part.
    overlay: HashMap<(u32, u64), Digest>,
    size: u64,
    /// The id of the last event covered.
    through: i64,
    /// How many nodes were read from the file (for the benchmark's claim of O(log n)).
    pub reads: u64,
}

impl<'c> Tree<'c> {
    /// The tree over every event of the ledger `conn` holds.
    pub(crate) fn open(conn: &'c Connection) -> rusqlite::Result<Tree<'c>> {
        let head = head_id(conn)?;
        let (stored, through) = match state(conn)? {
            Some((s, t)) if matches(conn, s, t, head)? => (s, t),
            _ => (0, 0),
        };
        let mut tree = Tree {
            conn,
            stored,
            overlay: HashMap::new(),
            size: stored,
            through,
            reads: 0,
        };
        if through < head {
            let mut frontier = Frontier::load(&mut tree, stored)?;
            let mut overlay = HashMap::new();
            let mut put = |level: u32, idx: u64, h: &Digest| -> rusqlite::Result<()> {
                overlay.insert((level, idx), *h);
                Ok(())
            };
            let mut stmt = conn.prepare("SELECT id, hash FROM events WHERE id > ?1 ORDER BY id")?;
            let mut rows = stmt.query([through])?;
            while let Some(r) = rows.next()? {
                let hash: Option<String> = r.get(1).ok();
                frontier.push(merkle::event_leaf(hash.as_deref()), &mut put)?;
                tree.through = r.get(0)?;
            }
            tree.overlay = overlay;
            tree.size = frontier.size;
        }
        Ok(tree)
    }

    /// How many leaves (events) the tree has.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// How many of them the stored tree already covered (the rest were added in memory).
    pub fn stored_size(&self) -> u64 {
        self.stored
    }

    /// The id of the newest event in the tree.
    pub fn through(&self) -> i64 {
        self.through
    }

    /// The stored hash of the event with this id: `None` when there is no such event,
    /// `Some(None)` when it has no hash.
    pub fn event_hash(&self, id: i64) -> rusqlite::Result<Option<Option<String>>> {
        event_hash(self.conn, id)
    }
}

fn head_id(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0))
}

impl Nodes for Tree<'_> {
    type Error = rusqlite::Error;
    fn node(&mut self, level: u32, index: u64) -> rusqlite::Result<Digest> {
        if let Some(h) = self.overlay.get(&(level, index)) {
            return Ok(*h);
        }
        self.reads += 1;
        stored_node(self.conn, level, index)?.ok_or(rusqlite::Error::QueryReturnedNoRows)
    }
}
