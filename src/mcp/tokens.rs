//! Bearer tokens of `pmm-mcp --http`: who may call, and whether they may write.
//!
//! A token is a random secret (`pmm_` and 43 base64url characters: 256 bits) shown once when it
//! is made; the tokens file keeps only its name, its scope and the sha256 of the secret, so the
//! file gives nobody a way in. A presented secret is hashed and compared with every entry in
//! constant time (no early exit on the first differing byte, none on the first match). This
//! module holds no file: the program reads and writes the file (`cmd::mcp`), the door
//! ([`super::http`]) asks it for the current set on each request.

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// recall, state, events, verify, prove and the resources.
    Read,
    /// Everything but the admin tools, writes too.
    Write,
    /// Everything, the admin tools too (`correct`, `forget`: they change what the memory
    /// holds rather than add to it).
    Admin,
}

impl Scope {
    /// `read`, `write` or `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }

    /// `read`, `write` or `admin`, else an error naming them.
    pub fn parse(s: &str) -> Result<Scope, String> {
        match s {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            "admin" => Ok(Scope::Admin),
            _ => Err(format!("scope must be read, write or admin (not '{s}')")),
        }
    }
}

/// One token as the file keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Its name: who holds it; writes record `mcp:NAME` as their `meta.source`.
    pub name: String,
    /// What it may do.
    pub scope: Scope,
    /// The sha256 of the secret, 64 lowercase hex digits.
    pub sha256: String,
    /// When it was made (RFC 3339), for the reader of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
}

/// Who is calling: the token that was presented (or the loopback `--no-auth` caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name.
    pub name: String,
    /// What it may do.
    pub scope: Scope,
    /// What its writes record as `meta.source`.
    pub source: String,
}

impl Caller {
    /// The caller a token's entry stands for.
    pub fn of(e: &Entry) -> Caller {
        Caller {
            name: e.name.clone(),
            scope: e.scope,
            source: format!("{}:{}", super::SOURCE, e.name),
        }
    }

    /// The caller of a `--no-auth` loopback server: writes as plain `mcp`, like stdio.
    pub fn anonymous() -> Caller {
        Caller {
            name: String::new(),
            scope: Scope::Write,
            source: super::SOURCE.to_string(),
        }
    }
}

/// The tokens file's contents.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tokens {
    /// Every token, in the order they were made.
    pub tokens: Vec<Entry>,
}

/// The prefix of every secret (so a leaked one is recognizable by secret scanners).
pub const PREFIX: &str = "pmm_";

/// A token name is 1 to 64 of `A-Z a-z 0-9 . _ -`: it goes into `meta.source` and logs.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(format!(
            "a token name is 1 to 64 letters, digits, '.', '_' or '-' (not '{}')",
            name.escape_default()
        ));
    }
    Ok(())
}

/// The sha256 of `secret`, in hex.
pub fn digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Equal in time that depends only on the lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

impl Tokens {
    /// Parses a tokens file (JSON); an empty file has no tokens.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        if text.trim().is_empty() {
            return Ok(Tokens::default());
        }
        let t: Tokens = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for e in &t.tokens {
            check_name(&e.name)?;
            if e.sha256.len() != 64 || !e.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("token '{}': sha256 is not 64 hex digits", e.name));
            }
        }
        Ok(t)
    }

    /// The file's text: pretty JSON and a newline.
    pub fn to_text(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Adds a token `name` with `scope` and returns its secret (shown once, never stored).
    pub fn add(&mut self, name: &str, scope: Scope, created: String) -> Result<String, String> {
        check_name(name)?;
        if self.tokens.iter().any(|e| e.name == name) {
            return Err(format!(
                "a token named '{name}' exists (revoke it first with --revoke {name})"
            ));
        }
        let mut raw = [0u8; 32];
        getrandom::getrandom(&mut raw).map_err(|e| format!("no random bytes: {e}"))?;
        let secret = format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        );
        self.tokens.push(Entry {
            name: name.to_string(),
            scope,
            sha256: digest(&secret),
            created: Some(created),
        });
        Ok(secret)
    }

    /// Removes the token `name`; false when there is none.
    pub fn revoke(&mut self, name: &str) -> bool {
        let before = self.tokens.len();
        self.tokens.retain(|e| e.name != name);
        self.tokens.len() != before
    }

    /// The entry whose secret is `secret`, compared with every entry in constant time.
    pub fn check(&self, secret: &str) -> Option<&Entry> {
        let d = digest(secret);
        let mut found = None;
        for e in &self.tokens {
            if same(d.as_bytes(), e.sha256.to_ascii_lowercase().as_bytes()) && found.is_none() {
                found = Some(e);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_checked_by_its_hash_and_never_kept() {
        let mut t = Tokens::default();
        let s = t.add("laptop", Scope::Read, "now".into()).unwrap();
        assert!(s.starts_with(PREFIX) && s.len() == PREFIX.len() + 43);
        let text = t.to_text();
        assert!(!text.contains(&s));
        let back = Tokens::parse(&text).unwrap();
        assert_eq!(back.check(&s).unwrap().name, "laptop");
        assert!(back.check("pmm_wrong").is_none());
        assert!(back.check("").is_none());
        let mut back = back;
        assert!(t.add("laptop", Scope::Write, "now".into()).is_err());
        assert!(back.revoke("laptop"));
        assert!(back.check(&s).is_none());
        assert!(check_name("a b").is_err() && check_name("").is_err());
        assert!(
            Tokens::parse(r#"{"tokens":[{"name":"x","scope":"read","sha256":"00"}]}"#).is_err()
        );
    }
}
