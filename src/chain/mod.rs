//! Digests, the hash chain and its verification (SPEC §2.6).
//!
//! [`Verifier`] is a streaming fold: feed it events in ledger order, it returns findings as it
//! goes and a [`Summary`] at the end. Memory stays flat whatever the ledger size: it keeps the
//! last [`WINDOW`] hashes exactly (to name where a broken link points and to catch repeats) and
//! a fixed-size Bloom filter of every hash seen. Anything it cannot settle from those — a link
//! pointing further back, a possible repeat older than the window — is settled by a second pass
//! over the same input ([`Verifier::second_pass`]). A second pass is only ever needed on a
//! ledger that already has findings: in a chain whose hashes and links all check, a repeated
//! hash is impossible (it would need a sha256 collision), so Bloom hits there are false alarms
//! and are dropped.

mod verify;

pub mod merkle;
pub mod note;
pub mod proof;
pub mod root;

pub use verify::{
    compute, Anchor, AnchorError, Finding, HashError, Problem, SecondPass, Summary, Verifier,
    WINDOW,
};

use crate::canon::{self, CanonError};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use std::fmt;

/// A sha256 digest. Displayed as 64 lowercase hex digits, as the ledger stores it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl std::hash::Hash for Digest {
    // The digest is uniformly random already: 8 of its bytes are as good a hash as any.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.0[..8]);
        state.write_u64(u64::from_le_bytes(w));
    }
}

impl Digest {
    /// sha256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    /// Parses 64 hex digits (either case); `None` for anything else.
    pub fn from_hex(hex: &str) -> Option<Digest> {
        let b = hex.as_bytes();
        if b.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in b.chunks_exact(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Some(Digest(out))
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        self.to_string()
    }

    /// Writes the lowercase hex into `buf` (no allocation) and returns it.
    pub fn write_hex<'b>(&self, buf: &'b mut [u8; 64]) -> &'b [u8] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for (i, b) in self.0.iter().enumerate() {
            buf[2 * i] = HEX[(b >> 4) as usize];
            buf[2 * i + 1] = HEX[(b & 0xf) as usize];
        }
        &buf[..]
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 64];
        f.write_str(std::str::from_utf8(self.write_hex(&mut buf)).unwrap_or_default())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// The hash of an event: sha256 of the canonical JSON of
/// `{"content","kind","meta","prev_hash"}` (id and ts are not hashed). `scratch` is reused
/// between calls to avoid an allocation per event.
pub fn event_digest(
    scratch: &mut Vec<u8>,
    kind: &str,
    content: &str,
    meta: &Map<String, Value>,
    prev_hash: Option<&str>,
) -> Result<Digest, CanonError> {
    scratch.clear();
    canon::write_event_payload(scratch, kind, content, meta, prev_hash)?;
    Ok(Digest::of(scratch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::from_hex(&d.to_string()), Some(d));
        assert_eq!(Digest::from_hex("xyz"), None);
        assert_eq!(Digest::from_hex(&"g".repeat(64)), None);
    }

    #[test]
    fn anchor_and_hash_errors_are_typed_and_name_the_input() {
        let err = |s: &str| s.parse::<Anchor>().unwrap_err();
        assert_eq!(err("abc"), AnchorError::NotIdHash("abc".into()));
        assert_eq!(err("abc").to_string(), "anchor 'abc' is not ID:HASH");
        assert_eq!(
            err("x:ab").to_string(),
            "anchor 'x:ab': 'x' is not an event id"
        );
        assert_eq!(
            err("0:ab").to_string(),
            "anchor '0:ab' is not ID:HASH (an id ≥ 1 and 64 hex digits)"
        );
        let ev = crate::event::Event::sample(1, "test_event", "", "[1]");
        let e = compute(&mut Vec::new(), &ev, None).unwrap_err();
        assert!(matches!(e, HashError::Meta(_)), "{e}");
        assert!(e.to_string().starts_with("meta: "), "{e}");
    }
}
