//! Signed checkpoints: the C2SP `tlog-checkpoint` body in a C2SP `signed-note`, signed with
//! Ed25519, keys in the Go `golang.org/x/mod/sumdb/note` text forms (docs/verification.md).
//! Pure: key bytes in, text out; the random seed of a new key comes from the caller.
//!
//! - verifier key: `NAME+HASH+BASE64(0x01 ‖ public key)`, HASH the first 4 bytes of
//!   `SHA-256(NAME ‖ "\n" ‖ 0x01 ‖ public key)` as 8 hex digits;
//! - signer key: `PRIVATE+KEY+NAME+HASH+BASE64(0x01 ‖ seed)`, which Go's `note.NewSigner`
//!   reads too;
//! - checkpoint: `ORIGIN\nSIZE\nBASE64(root)\n`, the origin being the key's name;
//! - signed note: the checkpoint, a blank line, then `— NAME BASE64(HASH ‖ signature)\n`, the
//!   signature over the checkpoint text.

use super::Digest;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest as _, Sha256};

/// The algorithm byte of Ed25519 keys in the note formats.
const ALG_ED25519: u8 = 1;

/// The algorithm byte of C2SP `tlog-cosignature` Ed25519 cosignatures (`cosignature/v1`), in
/// a witness's key id and verifier key.
const ALG_COSIGNATURE_V1: u8 = 4;

/// Why a key, checkpoint or note is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// A key name the formats cannot carry.
    #[error("bad key name {0:?}: it must be non-empty, without spaces or '+'")]
    Name(String),
    /// A key that does not parse.
    #[error("malformed {what} key: {why}")]
    Key {
        /// `signer` or `verifier`.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
    /// A note or checkpoint that does not parse.
    #[error("malformed {what}: {why}")]
    Malformed {
        /// `note` or `checkpoint`.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
    /// No signature by the key was found.
    #[error("the note has no signature by key {0}")]
    Unsigned(String),
    /// The key's signature does not verify.
    #[error("the signature by key {0} does not verify")]
    BadSignature(String),
}

fn check_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty() || name.contains('+') || name.chars().any(|c| c.is_whitespace()) {
        return Err(NoteError::Name(name.into()));
    }
    Ok(())
}

/// The 4-byte key hash that names a key in signatures: the first 4 bytes of
/// `SHA-256(name ‖ "\n" ‖ 0x01 ‖ public key)`, big-endian.
pub fn key_hash(name: &str, public: &[u8; 32]) -> u32 {
    key_id(name, ALG_ED25519, public)
}

/// `SHA-256(name ‖ "\n" ‖ alg ‖ public key)[:4]`, big-endian.
fn key_id(name: &str, alg: u8, public: &[u8; 32]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([alg]);
    h.update(public);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

/// A private signing key with its name.
pub struct SignerKey {
    /// The key's name (the checkpoint's origin).
    pub name: String,
    key: SigningKey,
}

impl std::fmt::Debug for SignerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the seed.
        write!(f, "SignerKey({})", self.name)
    }
}

impl SignerKey {
    /// The key of this 32-byte seed (from the OS's random source for a new key).
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<SignerKey, NoteError> {
        check_name(name)?;
        Ok(SignerKey {
            name: name.into(),
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// Parses `PRIVATE+KEY+NAME+HASH+BASE64(0x01 ‖ seed)`.
    pub fn parse(text: &str) -> Result<SignerKey, NoteError> {
        let bad = |why: &str| NoteError::Key {
            what: "signer",
            why: why.into(),
        };
        let rest = text
            .trim()
            .strip_prefix("PRIVATE+KEY+")
            .ok_or_else(|| bad("it does not start with PRIVATE+KEY+"))?;
        let (name, hash, _, seed) = parse_key(rest, "signer", &[ALG_ED25519])?;
        let signer = SignerKey::from_seed(name, seed)?;
        if signer.hash() != hash {
            return Err(bad("its hash does not match its name and key"));
        }
        Ok(signer)
    }

    fn hash(&self) -> u32 {
        key_hash(&self.name, self.key.verifying_key().as_bytes())
    }

    /// The Go note form of the private key (the file `--keygen` writes).
    pub fn to_text(&self) -> String {
        let mut k = vec![ALG_ED25519];
        k.extend_from_slice(self.key.as_bytes());
        format!(
            "PRIVATE+KEY+{}+{:08x}+{}",
            self.name,
            self.hash(),
            B64.encode(k)
        )
    }

    /// The matching verifier key.
    pub fn verifier(&self) -> VerifierKey {
        let public = self.key.verifying_key();
        VerifierKey {
            name: self.name.clone(),
            hash: self.hash(),
            key: public,
        }
    }

    /// The key as a witness's verifier key (C2SP `tlog-cosignature`, `cosignature/v1`).
    pub fn witness(&self) -> WitnessKey {
        let key = self.key.verifying_key();
        WitnessKey {
            name: self.name.clone(),
            hash: key_id(&self.name, ALG_COSIGNATURE_V1, key.as_bytes()),
            key,
        }
    }

    /// Cosigns a signed note as a witness (C2SP `tlog-cosignature` v1, Ed25519) at
    /// `timestamp` (POSIX seconds): the note with one more signature line, `— NAME
    /// BASE64(key id ‖ timestamp ‖ signature)`, the signature over `cosignature/v1\ntime
    /// T\n` and the note's body. The caller has checked the checkpoint's consistency first:
    /// that check is what a cosignature states.
    pub fn cosign(&self, note: &str, timestamp: u64) -> Result<String, NoteError> {
        let (body, _) = split_note(note)?;
        if timestamp > i64::MAX as u64 {
            return Err(NoteError::Malformed {
                what: "note",
                why: "a cosignature time above 2^63-1".into(),
            });
        }
        let sig = self.key.sign(cosigned_message(body, timestamp).as_bytes());
        let mut blob = self.witness().hash.to_be_bytes().to_vec();
        blob.extend_from_slice(&timestamp.to_be_bytes());
        blob.extend_from_slice(&sig.to_bytes());
        Ok(format!(
            "{note}\u{2014} {} {}\n",
            self.name,
            B64.encode(blob)
        ))
    }

    /// Signs `text` (a note body ending in a newline) and returns the signed note.
    pub fn sign(&self, text: &str) -> Result<String, NoteError> {
        check_body(text)?;
        let sig = self.key.sign(text.as_bytes());
        let mut blob = self.hash().to_be_bytes().to_vec();
        blob.extend_from_slice(&sig.to_bytes());
        Ok(format!(
            "{text}\n\u{2014} {} {}\n",
            self.name,
            B64.encode(blob)
        ))
    }
}

/// Parses `NAME+HASH+BASE64(ALG ‖ 32 bytes)`, `ALG` one of `algs`, into the name, the hash,
/// the algorithm and the 32 bytes (a seed or a public key); the hash is not checked here.
fn parse_key<'t>(
    text: &'t str,
    what: &'static str,
    algs: &[u8],
) -> Result<(&'t str, u32, u8, [u8; 32]), NoteError> {
    let bad = |why: &str| NoteError::Key {
        what,
        why: why.into(),
    };
    let mut parts = text.splitn(3, '+');
    let (Some(name), Some(hash), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad("expected NAME+HASH+BASE64"));
    };
    let hash = Some(hash)
        .filter(|h| h.len() == 8 && !key.is_empty())
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| bad("expected NAME+HASH+BASE64"))?;
    check_name(name)?;
    let bytes = B64.decode(key).map_err(|_| bad("the key is not base64"))?;
    match bytes.split_first() {
        Some((&alg, k)) if algs.contains(&alg) => Ok((
            name,
            hash,
            alg,
            k.try_into().map_err(|_| bad("wrong key length"))?,
        )),
        _ => Err(bad("not an Ed25519 key of this kind")),
    }
}

/// A public verifier key with its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    /// The key's name.
    pub name: String,
    /// Its 4-byte hash.
    pub hash: u32,
    key: VerifyingKey,
}

impl VerifierKey {
    /// Parses `NAME+HASH+BASE64(0x01 ‖ public key)`.
    pub fn parse(text: &str) -> Result<VerifierKey, NoteError> {
        let bad = |why: &str| NoteError::Key {
            what: "verifier",
            why: why.into(),
        };
        let (name, hash, _, public) = parse_key(text.trim(), "verifier", &[ALG_ED25519])?;
        if key_hash(name, &public) != hash {
            return Err(bad("its hash does not match its name and key"));
        }
        let key = VerifyingKey::from_bytes(&public).map_err(|_| bad("not a valid point"))?;
        Ok(VerifierKey {
            name: name.into(),
            hash,
            key,
        })
    }

    /// The text form.
    pub fn to_text(&self) -> String {
        let mut k = vec![ALG_ED25519];
        k.extend_from_slice(self.key.as_bytes());
        format!("{}+{:08x}+{}", self.name, self.hash, B64.encode(k))
    }

    /// Checks a signed note and returns its text (the signed body), when it carries a valid
    /// signature by this key. Signatures by other keys are ignored, as Go's `note.Open` does
    /// with unknown keys.
    pub fn open<'n>(&self, note: &'n str) -> Result<&'n str, NoteError> {
        let bad = |why: &str| NoteError::Malformed {
            what: "note",
            why: why.into(),
        };
        let (text, sigs) = split_note(note)?;
        let mut seen = false;
        for line in sigs.lines() {
            let rest = line
                .strip_prefix("\u{2014} ")
                .ok_or_else(|| bad("a signature line does not start with '\u{2014} '"))?;
            let (name, b64) = rest
                .split_once(' ')
                .ok_or_else(|| bad("a signature line has no signature"))?;
            let blob = B64
                .decode(b64)
                .map_err(|_| bad("a signature is not base64"))?;
            if blob.len() < 4 {
                return Err(bad("a signature is too short"));
            }
            let hash = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]);
            if name != self.name || hash != self.hash {
                continue;
            }
            seen = true;
            let sig = Signature::from_slice(&blob[4..])
                .map_err(|_| NoteError::BadSignature(self.to_text()))?;
            if self.key.verify_strict(text.as_bytes(), &sig).is_ok() {
                return Ok(text);
            }
        }
        Err(if seen {
            NoteError::BadSignature(self.to_text())
        } else {
            NoteError::Unsigned(self.to_text())
        })
    }
}

/// The message a `cosignature/v1` signs: the header line, the time line and the note body.
fn cosigned_message(body: &str, timestamp: u64) -> String {
    format!("cosignature/v1\ntime {timestamp}\n{body}")
}

/// A signed note's body (with its final newline) and its signature lines.
fn split_note(note: &str) -> Result<(&str, &str), NoteError> {
    let bad = |why: &str| NoteError::Malformed {
        what: "note",
        why: why.into(),
    };
    if !note.ends_with('\n') {
        return Err(bad("it does not end in a newline"));
    }
    let split = note
        .rfind("\n\n")
        .ok_or_else(|| bad("no blank line before the signatures"))?;
    let (text, sigs) = (&note[..split + 1], &note[split + 2..]);
    check_body(text)?;
    Ok((text, sigs))
}

/// A witness's public key (C2SP `tlog-cosignature`, Ed25519 `cosignature/v1`) with its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessKey {
    /// The witness's name.
    pub name: String,
    /// Its 4-byte key id (algorithm byte 0x04).
    pub hash: u32,
    key: VerifyingKey,
}

impl WitnessKey {
    /// Parses `NAME+HASH+BASE64(0x04 ‖ public key)`; the same key's note verifier form
    /// (`0x01`, as `pmm-export --keygen` prints it) is taken too, as the witness's key.
    pub fn parse(text: &str) -> Result<WitnessKey, NoteError> {
        let bad = |why: &str| NoteError::Key {
            what: "witness",
            why: why.into(),
        };
        let (name, hash, alg, public) =
            parse_key(text.trim(), "witness", &[ALG_COSIGNATURE_V1, ALG_ED25519])?;
        if key_id(name, alg, &public) != hash {
            return Err(bad("its hash does not match its name and key"));
        }
        let key = VerifyingKey::from_bytes(&public).map_err(|_| bad("not a valid point"))?;
        Ok(WitnessKey {
            name: name.into(),
            hash: key_id(name, ALG_COSIGNATURE_V1, &public),
            key,
        })
    }

    /// The text form, `NAME+HASH+BASE64(0x04 ‖ public key)`.
    pub fn to_text(&self) -> String {
        let mut k = vec![ALG_COSIGNATURE_V1];
        k.extend_from_slice(self.key.as_bytes());
        format!("{}+{:08x}+{}", self.name, self.hash, B64.encode(k))
    }

    /// The time (POSIX seconds) of this witness's valid cosignature on `note`; lines of
    /// other keys are ignored.
    pub fn open(&self, note: &str) -> Result<u64, NoteError> {
        let (body, sigs) = split_note(note)?;
        let mut seen = false;
        for line in sigs.lines() {
            let Some((name, blob)) = signature_line(line)? else {
                continue;
            };
            let hash = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]);
            if name != self.name || hash != self.hash {
                continue;
            }
            seen = true;
            let Some(t) = blob.get(4..12).and_then(|t| <[u8; 8]>::try_from(t).ok()) else {
                continue;
            };
            let t = u64::from_be_bytes(t);
            let Ok(sig) = Signature::from_slice(&blob[12..]) else {
                continue;
            };
            let msg = cosigned_message(body, t);
            if t <= i64::MAX as u64 && self.key.verify_strict(msg.as_bytes(), &sig).is_ok() {
                return Ok(t);
            }
        }
        Err(if seen {
            NoteError::BadSignature(self.to_text())
        } else {
            NoteError::Unsigned(self.to_text())
        })
    }
}

/// One signature line's key name and decoded blob (at least the 4-byte key id).
fn signature_line(line: &str) -> Result<Option<(&str, Vec<u8>)>, NoteError> {
    let bad = |why: &str| NoteError::Malformed {
        what: "note",
        why: why.into(),
    };
    let rest = line
        .strip_prefix("\u{2014} ")
        .ok_or_else(|| bad("a signature line does not start with '\u{2014} '"))?;
    let (name, b64) = rest
        .split_once(' ')
        .ok_or_else(|| bad("a signature line has no signature"))?;
    let blob = B64
        .decode(b64)
        .map_err(|_| bad("a signature is not base64"))?;
    if blob.len() < 4 {
        return Err(bad("a signature is too short"));
    }
    Ok(Some((name, blob)))
}

/// A note body: non-empty, ends in a newline, no blank line inside, no control characters
/// but newlines (the signed-note rules).
fn check_body(text: &str) -> Result<(), NoteError> {
    let bad = |why: &str| NoteError::Malformed {
        what: "note",
        why: why.into(),
    };
    if text.is_empty() || !text.ends_with('\n') {
        return Err(bad("its text must end in a newline"));
    }
    if text.contains("\n\n") || text.starts_with('\n') {
        return Err(bad("its text has a blank line"));
    }
    if text.chars().any(|c| c.is_control() && c != '\n') {
        return Err(bad("its text has a control character"));
    }
    Ok(())
}

/// A C2SP `tlog-checkpoint`: the origin, the tree size and the root hash (and any extension
/// lines, kept as they are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's name (pmm uses the signing key's name).
    pub origin: String,
    /// The tree size.
    pub size: u64,
    /// The root of the tree of that size.
    pub root: Digest,
    /// Extension lines after the root, without their newlines.
    pub extensions: Vec<String>,
}

impl Checkpoint {
    /// The checkpoint's text (the note body that is signed).
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root.0)
        );
        for e in &self.extensions {
            s.push_str(e);
            s.push('\n');
        }
        s
    }

    /// Parses a checkpoint's text (a note body).
    pub fn parse(text: &str) -> Result<Checkpoint, NoteError> {
        let bad = |why: &str| NoteError::Malformed {
            what: "checkpoint",
            why: why.into(),
        };
        let mut lines = text
            .strip_suffix('\n')
            .ok_or_else(|| bad("it does not end in a newline"))?
            .split('\n');
        let origin = lines
            .next()
            .filter(|o| !o.is_empty())
            .ok_or_else(|| bad("no origin"))?;
        let size = lines.next().ok_or_else(|| bad("no tree size"))?;
        if size.is_empty()
            || !size.bytes().all(|b| b.is_ascii_digit())
            || size.len() > 1 && size.starts_with('0')
        {
            return Err(bad("the tree size is not a decimal number"));
        }
        let size: u64 = size
            .parse()
            .map_err(|_| bad("the tree size is too large"))?;
        let root = lines.next().ok_or_else(|| bad("no root hash"))?;
        let root: [u8; 32] = B64
            .decode(root)
            .ok()
            .and_then(|r| r.try_into().ok())
            .ok_or_else(|| bad("the root hash is not 32 bytes of base64"))?;
        Ok(Checkpoint {
            origin: origin.into(),
            size,
            root: Digest(root),
            extensions: lines.map(str::to_string).collect(),
        })
    }
}

/// Opens a signed checkpoint with `key`: the checkpoint, when its signature verifies and its
/// origin is the key's name.
pub fn open_checkpoint(note: &str, key: &VerifierKey) -> Result<Checkpoint, NoteError> {
    let text = key.open(note)?;
    let cp = Checkpoint::parse(text)?;
    if cp.origin != key.name {
        return Err(NoteError::Malformed {
            what: "checkpoint",
            why: format!(
                "its origin {:?} is not the key's name {:?}",
                cp.origin, key.name
            ),
        });
    }
    Ok(cp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_keys_of_every_kind_are_refused_with_the_reason() {
        let signer = SignerKey::from_seed("pmm.test", [7; 32]).unwrap();
        let verifier = signer.verifier().to_text();
        let witness = signer.witness().to_text();
        let private = signer.to_text();
        let why = |e: NoteError| e.to_string();
        // Each key's text parses; cut, re-encoded or re-named, it does not.
        assert!(SignerKey::parse(&private).is_ok());
        assert!(VerifierKey::parse(&verifier).is_ok());
        assert!(WitnessKey::parse(&witness).is_ok());
        assert!(
            WitnessKey::parse(&verifier).is_ok(),
            "a verifier key is a witness key too"
        );
        let (name_hash, _) = verifier.rsplit_once('+').unwrap();
        for (text, reason) in [
            ("pmm.test".to_string(), "expected NAME+HASH+BASE64"),
            (format!("{name_hash}+"), "expected NAME+HASH+BASE64"),
            (verifier.replacen("+", "+0", 1), "expected NAME+HASH+BASE64"),
            (format!("{name_hash}+!!"), "not base64"),
            (
                format!("{name_hash}+{}", B64.encode([1u8; 20])),
                "wrong key length",
            ),
            (
                format!("{name_hash}+{}", B64.encode([9u8; 33])),
                "of this kind",
            ),
            (
                verifier.replacen("pmm.test", "pmm.tent", 1),
                "does not match",
            ),
        ] {
            let e = why(VerifierKey::parse(&text).unwrap_err());
            assert!(e.contains(reason), "{text}: {e}");
        }
        assert!(why(SignerKey::parse(&verifier).unwrap_err()).contains("PRIVATE+KEY+"));
        assert!(why(VerifierKey::parse(&witness).unwrap_err()).contains("of this kind"));
        let renamed = private.replacen("pmm.test", "pmm.tent", 1);
        assert!(why(SignerKey::parse(&renamed).unwrap_err()).contains("does not match"));
        let bad_name = verifier.replacen("pmm.test", "", 1);
        assert!(matches!(
            VerifierKey::parse(&bad_name),
            Err(NoteError::Name(_))
        ));
    }

    #[test]
    fn sign_then_open_round_trips_and_keys_reparse() {
        let s = SignerKey::from_seed("example.com/log", [7; 32]).unwrap();
        let v = s.verifier();
        assert_eq!(
            SignerKey::parse(&s.to_text()).unwrap().to_text(),
            s.to_text()
        );
        assert_eq!(VerifierKey::parse(&v.to_text()).unwrap(), v);
        let cp = Checkpoint {
            origin: "example.com/log".into(),
            size: 5,
            root: Digest::of(b"r"),
            extensions: vec![],
        };
        let note = s.sign(&cp.to_text()).unwrap();
        assert_eq!(open_checkpoint(&note, &v).unwrap(), cp);
        let forged = note.replace("\n5\n", "\n6\n");
        assert!(open_checkpoint(&forged, &v).is_err());
    }

    #[test]
    fn cosignatures_verify_and_any_flipped_bit_fails() {
        let log = SignerKey::from_seed("example.com/log", [7; 32]).unwrap();
        let w = SignerKey::from_seed("witness.example.com/w1", [9; 32]).unwrap();
        let cp = Checkpoint {
            origin: "example.com/log".into(),
            size: 20852163,
            root: Digest::of(b"r"),
            extensions: vec![],
        };
        let note = log.sign(&cp.to_text()).unwrap();
        let cosigned = w.cosign(&note, 1679315147).unwrap();
        assert!(cosigned.starts_with(&note));
        let wk = WitnessKey::parse(&w.witness().to_text()).unwrap();
        assert_eq!(wk, w.witness());
        assert_eq!(WitnessKey::parse(&w.verifier().to_text()).unwrap(), wk);
        assert_eq!(wk.open(&cosigned), Ok(1679315147));
        // The log's own signature still opens, the cosignature line is ignored by it.
        assert_eq!(open_checkpoint(&cosigned, &log.verifier()).unwrap(), cp);
        assert!(matches!(wk.open(&note), Err(NoteError::Unsigned(_))));
        // A flipped bit anywhere in the cosignature's blob fails.
        let line = cosigned.lines().last().unwrap();
        let b64 = line.rsplit(' ').next().unwrap();
        let blob = B64.decode(b64).unwrap();
        for bit in 32..blob.len() * 8 {
            let mut b = blob.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let bad = cosigned.replace(b64, &B64.encode(&b));
            assert!(wk.open(&bad).is_err(), "bit {bit}");
        }
        // ... and in the body it signs.
        let forged = cosigned.replace("\n20852163\n", "\n20852164\n");
        assert!(wk.open(&forged).is_err());
        // A key id per C2SP: SHA-256(name ‖ "\n" ‖ 0x04 ‖ key)[:4].
        let mut h = Sha256::new();
        h.update(b"witness.example.com/w1\n\x04");
        h.update(w.key.verifying_key().as_bytes());
        let d = h.finalize();
        assert_eq!(wk.hash, u32::from_be_bytes([d[0], d[1], d[2], d[3]]));
    }
}
