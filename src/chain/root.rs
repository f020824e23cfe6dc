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

/// What a `checkpoint_manifest` says it covers (FORMATS.md §8.9), always these two.
pub const MANIFEST_COVERS: [&str; 2] = ["rsm_state", "open_commitments"];

/// The content of a `checkpoint_manifest` pinning the prefix `1..=up_to_id` with `root_hash`
/// (canonical JSON): what the kernel writes and `pmm-verify --deep` compares with.
pub fn manifest_content(root_hash: &str, up_to_id: i64) -> String {
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(b"{\"covers\":[");
    for (i, c) in MANIFEST_COVERS.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        canon::write_str(&mut out, c);
    }
    out.extend_from_slice(b"],\"root_hash\":");
    canon::write_str(&mut out, root_hash);
    out.extend_from_slice(format!(",\"up_to_id\":{up_to_id}}}").as_bytes());
    // canon writes UTF-8 (ASCII, escaped as CPython's ensure_ascii): nothing is lost.
    String::from_utf8_lossy(&out).into_owned()
}

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

/// A [`RootHasher`] whose state can be stored: the sha256 chaining value, the bytes of the
/// unfinished block and the length, driven through `sha2::compress256`. The projections keep
/// one (the autonomy fold) so that a tick can write a `checkpoint_manifest` for a prefix of a
/// ledger of any size without reading it: the state is saved with the projection checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredRoot {
    state: [u32; 8],
    /// Bytes not yet compressed (fewer than 64).
    pending: Vec<u8>,
    /// Bytes fed in all.
    length: u64,
    count: u64,
}

const SHA256_IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

impl Default for StoredRoot {
    fn default() -> Self {
        let mut r = StoredRoot {
            state: SHA256_IV,
            pending: Vec::with_capacity(64),
            length: 0,
            count: 0,
        };
        r.feed(b"[");
        r
    }
}

impl StoredRoot {
    fn feed(&mut self, mut bytes: &[u8]) {
        use sha2::digest::generic_array::GenericArray;
        self.length += bytes.len() as u64;
        if !self.pending.is_empty() {
            let take = (64 - self.pending.len()).min(bytes.len());
            self.pending.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.pending.len() < 64 {
                return;
            }
            sha2::compress256(&mut self.state, &[*GenericArray::from_slice(&self.pending)]);
            self.pending.clear();
        }
        let whole = bytes.len() / 64 * 64;
        if whole > 0 {
            let blocks: Vec<GenericArray<u8, _>> = bytes[..whole]
                .chunks_exact(64)
                .map(|c| *GenericArray::from_slice(c))
                .collect();
            sha2::compress256(&mut self.state, &blocks);
        }
        self.pending.extend_from_slice(&bytes[whole..]);
    }

    /// Appends the next event's stored hash (as [`RootHasher::push`]).
    pub fn push(&mut self, hash: Option<&str>) {
        let mut scratch = Vec::with_capacity(80);
        if self.count > 0 {
            scratch.push(b',');
        }
        match hash {
            Some(h) => canon::write_str(&mut scratch, h),
            None => scratch.extend_from_slice(b"null"),
        }
        self.feed(&scratch);
        self.count += 1;
    }

    /// How many hashes have been pushed.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True before the first push.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The root of the prefix pushed so far (SHA-256 padding applied to a copy).
    pub fn root(&self) -> Digest {
        let mut tail = self.clone();
        tail.feed(b"]");
        let bits = tail.length.wrapping_mul(8);
        let mut pad = vec![0x80u8];
        let used = (tail.pending.len() + 1) % 64;
        let zeros = if used <= 56 { 56 - used } else { 120 - used };
        pad.extend(std::iter::repeat_n(0u8, zeros));
        pad.extend_from_slice(&bits.to_be_bytes());
        tail.feed(&pad);
        debug_assert!(tail.pending.is_empty());
        let mut out = [0u8; 32];
        for (chunk, word) in out.chunks_exact_mut(4).zip(tail.state) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        Digest(out)
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
    fn a_manifest_is_the_canonical_json_of_its_three_keys() {
        let root = "ab".repeat(32);
        let v = serde_json::json!({"covers": ["rsm_state", "open_commitments"], "root_hash": root, "up_to_id": 42});
        assert_eq!(manifest_content(&root, 42), canon::to_string(&v).unwrap());
    }

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
    fn stored_root_equals_the_streaming_one() {
        let mut a = RootHasher::new();
        let mut b = StoredRoot::default();
        assert_eq!(a.root(), b.root());
        for i in 0..300u32 {
            let h = Digest::of(&i.to_le_bytes()).to_string();
            // Odd lengths too, so that every position in a block is exercised.
            let h = &h[..(i as usize % 64) + 1];
            let h = if i % 17 == 0 { None } else { Some(h) };
            a.push(h);
            b.push(h);
            assert_eq!(a.root(), b.root(), "after {} hashes", i + 1);
            let copy: StoredRoot =
                serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
            assert_eq!(copy.root(), b.root());
        }
        assert_eq!(b.len(), 300);
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
