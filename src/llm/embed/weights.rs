//! The SHA-256 of a model's whole weights file, for its fingerprint ([`super::bert`]): every
//! byte of every tensor decides the vectors, so a fine-tune of the middle layers that keeps
//! the file's size, header and ends is another model. Hashing all-MiniLM-L6-v2's 91 MB costs
//! more than loading the model does (docs/recall.md), so a file's digest is kept in a small
//! cache, `$XDG_CACHE_HOME/pmm/weights-sha256` (else `$HOME/.cache/pmm/weights-sha256`), one
//! line per file keyed by its device, inode, size, modification time and inode-change time:
//! any write to the file, a copy or a rename over it changes the key (the inode-change time
//! cannot be set back by a user), and the file is hashed again. A cache that cannot be read
//! or written is only a cost: the digest is then computed every time.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The cache file's name in its directory.
const CACHE_FILE: &str = "weights-sha256";
/// Files the cache remembers (the newest kept); a line is about 120 bytes.
const CACHE_LINES: usize = 64;
/// A cache file larger than this is not read (not ours, or damaged).
const CACHE_MAX_BYTES: u64 = 64 * 1024;

/// What identifies one version of a file: device, inode, size, mtime and ctime (ns).
fn key(m: &std::fs::Metadata) -> String {
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    format!(
        "{} {} {} {} {}",
        m.dev(),
        m.ino(),
        m.len(),
        ns(m.mtime(), m.mtime_nsec()),
        ns(m.ctime(), m.ctime_nsec())
    )
}

/// The cache file, when a cache directory is known.
fn cache_path() -> Option<PathBuf> {
    let var = |n: &str| {
        std::env::var_os(n)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let dir = var("XDG_CACHE_HOME")
        .filter(|p| p.is_absolute())
        .or_else(|| var("HOME").map(|h| h.join(".cache")))?;
    Some(dir.join("pmm").join(CACHE_FILE))
}

/// The cache's lines (`KEY HEX`), oldest first; none when it is missing or unreadable.
fn read_cache(path: &Path) -> Vec<String> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut text = String::new();
    if f.take(CACHE_MAX_BYTES).read_to_string(&mut text).is_err() {
        return Vec::new();
    }
    text.lines().map(str::to_string).collect()
}

/// The hex digest the cache holds for `key`.
fn cached(lines: &[String], key: &str) -> Option<String> {
    lines.iter().rev().find_map(|l| {
        let hex = l.strip_prefix(key)?.strip_prefix(' ')?;
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hex.to_string())
    })
}

/// Adds `key hex` to the cache (the oldest lines dropped), written beside it and renamed into
/// place so that a reader never sees half of it; failures are ignored.
fn remember(path: &Path, mut lines: Vec<String>, key: &str, hex: &str) {
    lines.retain(|l| !l.starts_with(&format!("{key} ")));
    lines.push(format!("{key} {hex}"));
    let skip = lines.len().saturating_sub(CACHE_LINES);
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = dir.join(format!(".{CACHE_FILE}.{}", std::process::id()));
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        for l in &lines[skip..] {
            writeln!(f, "{l}")?;
        }
        f.flush()
    });
    if written.is_err() || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// SHA-256 of the whole file, in hex.
fn hash(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The SHA-256 of the file at `path` (hex), from the cache when the file is the one it was
/// hashed as; otherwise hashed now and remembered (unless the file changed meanwhile).
pub(crate) fn sha256(path: &Path) -> std::io::Result<String> {
    let before = key(&std::fs::metadata(path)?);
    let cache = cache_path();
    let lines = cache.as_deref().map(read_cache).unwrap_or_default();
    if let Some(hex) = cached(&lines, &before) {
        return Ok(hex);
    }
    let hex = hash(path)?;
    if let Some(cache) = cache {
        if key(&std::fs::metadata(path)?) == before {
            remember(&cache, lines, &before, &hex);
        }
    }
    Ok(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_digest_is_used_only_for_the_same_file_version() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("w");
        std::fs::write(&f, b"weights").unwrap();
        let cache = dir.path().join("c/pmm").join(CACHE_FILE);
        let k = key(&std::fs::metadata(&f).unwrap());
        remember(&cache, Vec::new(), &k, &"ab".repeat(32));
        let lines = read_cache(&cache);
        assert_eq!(cached(&lines, &k), Some("ab".repeat(32)));
        // Rewritten (same size): another key.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&f, b"Weights").unwrap();
        let k2 = key(&std::fs::metadata(&f).unwrap());
        assert_ne!(k, k2);
        assert_eq!(cached(&lines, &k2), None);
        // A damaged line is not a digest.
        assert_eq!(cached(&[format!("{k2} xyz")], &k2), None);
        assert_eq!(
            hash(&f).unwrap(),
            "147ec15498661dd98b2128a1fa230b4838f66d6b66dea64847dc55ac7d88a130"
        );
    }
}
