//! The one line reader: every place pmm reads input line by line (JSON Lines inputs and
//! imports, `pmm-append` and `pmm-turn` stdin, chat, `--anchors-from`, `--script`, `.env`)
//! reads through [`read_line`], which refuses a line longer than a limit instead of growing
//! without bound (`pmm-verify --anchors-from /dev/zero` must not eat the machine's memory).
//!
//! The limit is [`DEFAULT_MAX_LINE`] (256 MiB, far larger than any real event), raised or
//! lowered with `--max-line BYTES` or `$PMM_MAX_LINE`.

use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicU64, Ordering};

/// The default longest line, in bytes (without its newline): 256 MiB.
pub const DEFAULT_MAX_LINE: u64 = 256 << 20;

/// 0 until a program sets it from `--max-line`; then [`max_line`] falls back to the
/// environment and the default.
static MAX_LINE: AtomicU64 = AtomicU64::new(0);

/// The longest line any reader accepts: `--max-line`, else `$PMM_MAX_LINE`, else 256 MiB.
pub fn max_line() -> u64 {
    match MAX_LINE.load(Ordering::Relaxed) {
        0 => std::env::var("PMM_MAX_LINE")
            .ok()
            .and_then(|v| parse_size(&v).ok())
            .unwrap_or(DEFAULT_MAX_LINE),
        n => n,
    }
}

/// Sets the limit for this process (from `--max-line`).
pub fn set_max_line(bytes: u64) {
    MAX_LINE.store(bytes.max(1), Ordering::Relaxed);
}

/// Why a `--max-line` value is not a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not a number, or an unknown suffix.
    #[error("'{0}' is not a size (BYTES, or a number with K, M or G)")]
    NotASize(String),
    /// Zero.
    #[error("'{0}': the limit must be at least 1 byte")]
    Zero(String),
    /// More than a u64 holds.
    #[error("'{0}' is too large")]
    TooLarge(String),
}

/// Parses a size: bytes, or a number with a `K`, `M` or `G` suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return Err(SizeError::NotASize(s.to_string())),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| SizeError::NotASize(s.to_string()))?;
    match n.checked_mul(1 << shift) {
        Some(v) if v >= 1 => Ok(v),
        Some(_) => Err(SizeError::Zero(s.to_string())),
        None => Err(SizeError::TooLarge(s.to_string())),
    }
}

/// A line longer than the limit (the error inside the [`io::Error`] [`read_line`] returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong {
    /// The limit in bytes.
    pub limit: u64,
}

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line longer than {} bytes (raise the limit with --max-line BYTES or PMM_MAX_LINE)",
            self.limit
        )
    }
}

impl std::error::Error for TooLong {}

/// The [`TooLong`] inside `e`, if that is what `e` is.
pub fn too_long(e: &io::Error) -> Option<TooLong> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<TooLong>())
        .copied()
}

/// Reads one line, its `\n` included, into `buf` (cleared first); returns the bytes read, 0
/// at the end of input. A line longer than `limit` bytes (not counting its newline) is an
/// [`io::ErrorKind::InvalidData`] error holding a [`TooLong`]; at most `limit + 1` bytes are
/// read for it.
pub fn read_line<R: BufRead + ?Sized>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limit: u64,
) -> io::Result<usize> {
    buf.clear();
    let n = Read::take(&mut *r, limit.saturating_add(1)).read_until(b'\n', buf)?;
    if buf.last() != Some(&b'\n') && buf.len() as u64 > limit {
        buf.clear();
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            TooLong { limit },
        ));
    }
    Ok(n)
}

/// [`read_line`] with the process's limit ([`max_line`]).
pub fn read_line_default<R: BufRead + ?Sized>(r: &mut R, buf: &mut Vec<u8>) -> io::Result<usize> {
    read_line(r, buf, max_line())
}

/// `line` without its `\n` or `\r\n`.
pub fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Reads a whole (small) file of lines, each within the limit: for `.env`, `--script` and
/// `--anchors-from`. Returns the lines without their ends, numbered from 1, or the number
/// of the line that is too long.
pub fn read_all_lines<R: BufRead + ?Sized>(
    r: &mut R,
    limit: u64,
) -> Result<Vec<Vec<u8>>, (u64, io::Error)> {
    let mut lines = Vec::new();
    let mut buf = Vec::new();
    loop {
        match read_line(r, &mut buf, limit) {
            Ok(0) => return Ok(lines),
            Ok(_) => lines.push(trim_eol(&buf).to_vec()),
            Err(e) => return Err((lines.len() as u64 + 1, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_within_the_limit_are_read_whole() {
        let mut r = io::Cursor::new(b"abc\nabcd\n\nxy".to_vec());
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 4).unwrap(), 4);
        assert_eq!(buf, b"abc\n");
        assert_eq!(read_line(&mut r, &mut buf, 4).unwrap(), 5);
        assert_eq!(buf, b"abcd\n");
        assert_eq!(read_line(&mut r, &mut buf, 4).unwrap(), 1);
        assert_eq!(read_line(&mut r, &mut buf, 4).unwrap(), 2);
        assert_eq!(buf, b"xy");
        assert_eq!(read_line(&mut r, &mut buf, 4).unwrap(), 0);
    }

    #[test]
    fn a_longer_line_is_refused_after_reading_at_most_the_limit() {
        let mut r = io::repeat(0).take(1 << 30);
        let mut r = io::BufReader::new(&mut r);
        let mut buf = Vec::new();
        let e = read_line(&mut r, &mut buf, 1000).unwrap_err();
        assert_eq!(too_long(&e), Some(TooLong { limit: 1000 }));
        assert!(buf.capacity() < 1 << 20);
        let mut r = io::Cursor::new(b"abcde".to_vec());
        assert!(read_line(&mut r, &mut buf, 4).is_err());
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("1000"), Ok(1000));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("5T").is_err());
    }

    #[test]
    fn a_bad_size_is_a_typed_error_that_names_it() {
        assert_eq!(parse_size("0"), Err(SizeError::Zero("0".into())));
        assert_eq!(
            parse_size("0").unwrap_err().to_string(),
            "'0': the limit must be at least 1 byte"
        );
        assert_eq!(
            parse_size("5T").unwrap_err().to_string(),
            "'5T' is not a size (BYTES, or a number with K, M or G)"
        );
        assert_eq!(
            parse_size("99999999999G").unwrap_err(),
            SizeError::TooLarge("99999999999G".into())
        );
    }
}
