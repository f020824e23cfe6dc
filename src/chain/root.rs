//! Checkpoint root hashes (FORMATS.md §8.9).
//!
//! A `checkpoint_manifest` pins the ledger prefix `1..=up_to_id` with
//! `root_hash = sha256_hex(json.dumps([h1, h2, …], separators=(",", ":")))`: the sha256 of the
//! text `["h1","h2",…]` built from the stored hashes in id order. That text only ever grows at
//! its end, so the root of every prefix can be had in one streaming pass: [`RootHasher`] keeps
//! the sha256 state of `["h1",…,"hn"` and closes a copy of it with `]` on demand. Nothing
//! about the ledger has to be held in memory.

use super::Digest;
use crate::canon;
use sha2::{Digest as _, Sha256};

/// The root hash of a ledger prefix, fed one stored hash at a time.
#[derive(Clone)]
pub struct RootHasher {
    state: Sha256,
    count: u64,
    scratch: Vec<u8>,
}

impl Default for RootHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RootHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootHasher")
            .field("count", &self.count)
            .field("root", &self.root())
            .finish()
    }
}

impl RootHasher {
    /// The hasher of the empty prefix (its root is the sha256 of `[]`).
    pub fn new() -> Self {
        let mut state = Sha256::new();
        state.update(b"[");
        RootHasher {
            state,
            count: 0,
            scratch: Vec::with_capacity(80),
        }
    }

    /// Appends the next event's stored hash. A missing hash (the schema allows NULL) is
    /// written `null`, as Python's `json.dumps` would; anything else is written as a JSON
    /// string exactly as stored (escaped the way CPython escapes, should it not be hex).
    pub fn push(&mut self, hash: Option<&str>) {
        self.scratch.clear();
        if self.count > 0 {
            self.scratch.push(b',');
        }
        match hash {
            Some(h) => canon::write_str(&mut self.scratch, h),
            None => self.scratch.extend_from_slice(b"null"),
        }
        self.state.update(&self.scratch);
        self.count += 1;
    }

    /// How many hashes have been pushed.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True before the first [`RootHasher::push`].
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The root of the prefix pushed so far; the hasher can go on being fed afterwards.
    pub fn root(&self) -> Digest {
        self.snapshot().root()
    }

    /// The state of the prefix pushed so far, to be closed later: cheaper than [`root`]
    /// (a copy of the sha256 state, no compression), so a checker can keep one per recent
    /// event and pay for the root only of the prefixes a checkpoint asks about.
    ///
    /// [`root`]: RootHasher::root
    pub fn snapshot(&self) -> RootSnapshot {
        RootSnapshot(self.state.clone())
    }
}

/// The sha256 state of `["h1",…,"hn"` (see [`RootHasher::snapshot`]).
#[derive(Clone)]
pub struct RootSnapshot(Sha256);

impl RootSnapshot {
    /// The root hash of that prefix.
    pub fn root(&self) -> Digest {
        let mut s = self.0.clone();
        s.update(b"]");
        Digest(s.finalize().into())
    }
}

impl std::fmt::Debug for RootSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RootSnapshot({})", self.root())
    }
}

/// The root hash of a whole list of stored hashes, in id order.
pub fn root_hash<'a>(hashes: impl IntoIterator<Item = Option<&'a str>>) -> Digest {
    let mut h = RootHasher::new();
    for x in hashes {
        h.push(x);
    }
    h.root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_json_dumps() {
        // hashlib.sha256(json.dumps([], separators=(",",":")).encode()).hexdigest()
        assert_eq!(
            root_hash([]).to_string(),
            "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
        );
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        // … of json.dumps(["a"*64, "b"*64], separators=(",",":"))
        assert_eq!(
            root_hash([Some(a.as_str()), Some(b.as_str())]).to_string(),
            "2ba3056e95d23c0c154eca683e330401c46e441d5074523e16349e29d7597a64"
        );
        assert_eq!(root_hash([Some("x"), None]), Digest::of(br#"["x",null]"#));
    }

    #[test]
    fn snapshots_are_roots_of_prefixes() {
        let hashes: Vec<String> = (0..10).map(|i| Digest::of(&[i]).to_string()).collect();
        let mut h = RootHasher::new();
        assert!(h.is_empty());
        for (n, x) in hashes.iter().enumerate() {
            h.push(Some(x));
            assert_eq!(h.len(), n as u64 + 1);
            let text = format!(
                "[{}]",
                hashes[..=n]
                    .iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            assert_eq!(h.root(), Digest::of(text.as_bytes()));
            assert_eq!(h.snapshot().root(), h.root());
        }
    }
}
