//! The one line reader: every place pmm reads input line by line (JSON Lines inputs and
//! imports, `pmm-append` and `pmm-turn` stdin, chat) reads through [`read_line`], which
//! refuses a line longer than a limit instead of growing without bound (`pmm-append <
//! /dev/zero` must not eat the machine's memory).
//!
//! The limit is [`DEFAULT_MAX_LINE`] (256 MiB, far larger than any real event), raised or
//! lowered with `--max-line BYTES` or `$PMM_MAX_LINE`.
//!
//! And the one whole-file reader, [`read_bounded`]: every file a flag names and pmm reads
//! whole goes through it (opened by the caller: this module touches no file), with a limit on the whole file as well as on
//! each line. `--anchors-from`, `--script` and `.env` are at most the line limit in all; keys,
//! signed checkpoints and proofs (`--key`, `--checkpoint`, `--previous`, `--witness-key`,
//! `--check-proof`, `--checkpoint-key`) at most [`MAX_SMALL_FILE`]. `/dev/zero`, `yes |` and
//! a FIFO that never ends are refused after reading at most one byte past the limit.

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

/// The largest key, checkpoint or proof file read whole: 1 MiB (a signed checkpoint is a
/// few hundred bytes, a proof a few KiB even for a ledger of billions of events).
pub const MAX_SMALL_FILE: u64 = 1 << 20;

/// A file larger than the limit (inside the [`io::Error`] of a [`ReadError`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    /// The limit in bytes.
    pub limit: u64,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "larger than {} bytes, refused", self.limit)
    }
}

impl std::error::Error for TooLarge {}

/// Why a whole file could not be read: the line that is too long (`line`), a file larger than
/// its limit, or the read itself failing.
#[derive(Debug)]
pub struct ReadError {
    /// The line (from 1) that is longer than the line limit; `None` for anything else.
    pub line: Option<u64>,
    /// What went wrong: an [`io::ErrorKind::InvalidData`] holding a [`TooLong`] or a
    /// [`TooLarge`], or the read's own error.
    pub error: io::Error,
}

impl ReadError {
    /// Where the error is: `source:line` for a line too long, else `source`.
    pub fn at(&self, source: &str) -> String {
        match self.line {
            Some(n) => format!("{source}:{n}"),
            None => source.to_string(),
        }
    }

    /// Whether the input broke a limit (bad input, exit 2) rather than failing to be read.
    pub fn over_limit(&self) -> bool {
        too_long(&self.error).is_some() || self.too_large().is_some()
    }

    /// The [`TooLarge`] inside, if that is what this is.
    pub fn too_large(&self) -> Option<TooLarge> {
        self.error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<TooLarge>())
            .copied()
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (too_long(&self.error), self.too_large()) {
            (Some(t), _) => t.fmt(f),
            (_, Some(t)) => t.fmt(f),
            _ => self.error.fmt(f),
        }
    }
}

impl std::error::Error for ReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The one whole-input reader: reads all of `r`, each line at most `line_limit` bytes (not
/// counting its newline) and all of it at most `total_limit` bytes, keeping at most one byte
/// past whichever limit is broken (and reading no more than the reader's buffer beyond it). `/dev/zero`, an endless pipe and a file of endless empty
/// lines are refused, not loaded. Split the text with [`lines_of`]. An error opening the file is
/// the caller's; one reading it is a [`ReadError`] without a line.
pub fn read_bounded<R: BufRead + ?Sized>(
    r: &mut R,
    line_limit: u64,
    total_limit: u64,
) -> Result<Vec<u8>, ReadError> {
    let mut text = Vec::new();
    // The line being read (from 1) and its length so far, without its newline.
    let mut line = 1u64;
    let mut len = 0u64;
    loop {
        let buf = r
            .fill_buf()
            .map_err(|error| ReadError { line: None, error })?;
        if buf.is_empty() {
            return Ok(text);
        }
        // At most one byte past the whole limit; a chunk at a time, not a line at a time (a
        // file of endless empty lines is read as fast as any other).
        let room = total_limit.saturating_add(1) - text.len() as u64;
        let chunk = &buf[..buf.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        for piece in chunk.split_inclusive(|b| *b == b'\n') {
            let ended = piece.last() == Some(&b'\n');
            len += piece.len() as u64 - u64::from(ended);
            if len > line_limit {
                return Err(ReadError {
                    line: Some(line),
                    error: io::Error::new(
                        io::ErrorKind::InvalidData,
                        TooLong { limit: line_limit },
                    ),
                });
            }
            if ended {
                line += 1;
                len = 0;
            }
        }
        text.extend_from_slice(chunk);
        let n = chunk.len();
        r.consume(n);
        if text.len() as u64 > total_limit {
            return Err(ReadError {
                line: None,
                error: io::Error::new(io::ErrorKind::InvalidData, TooLarge { limit: total_limit }),
            });
        }
    }
}

/// The lines of a text read whole, without their ends (`\n` or `\r\n`); no empty last line
/// after a final newline.
pub fn lines_of(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let some = !text.is_empty();
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    body.split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(move |_| some)
}

/// Lines from a pipe (a program's standard input) that can say, without waiting, whether a
/// whole line is already there: `pmm-append` commits together the lines that arrived while
/// it was committing. `first` is what was read of the input before (its first line, checked
/// before the ledger was opened), read again first.
pub struct Piped<R: Read> {
    first: io::Cursor<Vec<u8>>,
    rest: io::BufReader<R>,
}

impl<R: Read + std::os::fd::AsFd> Piped<R> {
    /// `first`, then what `rest` gives.
    pub fn new(first: Vec<u8>, rest: R) -> Piped<R> {
        Piped {
            first: io::Cursor::new(first),
            rest: io::BufReader::with_capacity(64 * 1024, rest),
        }
    }

    /// Has `bytes` (what was read of the input before, up to a line's end) read again first.
    pub fn unread(&mut self, bytes: Vec<u8>) {
        self.first = io::Cursor::new(bytes);
    }

    /// Whether a whole line (up to its `\n`) can be read now without waiting for the input:
    /// one is buffered, or the input has bytes ready (then read, once) that hold one. A part
    /// of a line buffered without its end is not one (reading it could wait for the rest).
    pub fn line_waiting(&mut self) -> bool {
        if (self.first.position() as usize) < self.first.get_ref().len() {
            return true;
        }
        let buffered = self.rest.buffer();
        if buffered.contains(&b'\n') {
            return true;
        }
        if !buffered.is_empty() || !ready(self.rest.get_ref()) {
            return false;
        }
        matches!(self.rest.fill_buf(), Ok(b) if b.contains(&b'\n'))
    }
}

/// Whether reading `fd` now returns at once (bytes, or the end of input): `poll` with no
/// wait.
fn ready(fd: &impl std::os::fd::AsFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, its length 1, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0
}

impl<R: Read> Read for Piped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.first.read(buf)?;
        if n > 0 || buf.is_empty() {
            return Ok(n);
        }
        self.rest.read(buf)
    }
}

impl<R: Read> BufRead for Piped<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if (self.first.position() as usize) < self.first.get_ref().len() {
            return self.first.fill_buf();
        }
        self.rest.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        if (self.first.position() as usize) < self.first.get_ref().len() {
            self.first.consume(amt);
        } else {
            self.rest.consume(amt);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line is waiting only once it is whole: a part of one is not (reading it would wait
    /// for its end), and an empty pipe is not; what was read before comes first.
    #[test]
    fn piped_says_a_line_is_waiting_only_when_it_is_whole() {
        // A `line_waiting` that waited for the input would hang: it fails here instead.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            piped_lines();
            let _ = done.send(());
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("Piped waited for the input (or failed: see the thread's panic)");
    }

    fn piped_lines() {
        use std::io::Write;
        let (r, mut w) = std::io::pipe().unwrap();
        let mut p = Piped::new(b"first\n".to_vec(), r);
        let mut line = Vec::new();
        assert!(p.line_waiting(), "the line read before");
        read_line(&mut p, &mut line, 100).unwrap();
        assert_eq!(line, b"first\n");
        assert!(!p.line_waiting(), "an empty pipe");
        w.write_all(b"second\nthi").unwrap();
        assert!(p.line_waiting());
        read_line(&mut p, &mut line, 100).unwrap();
        assert_eq!(line, b"second\n");
        assert!(!p.line_waiting(), "a part of a line");
        w.write_all(b"rd\n").unwrap();
        assert!(
            !p.line_waiting(),
            "still only a part buffered: never a wait"
        );
        read_line(&mut p, &mut line, 100).unwrap();
        assert_eq!(line, b"third\n");
        drop(w);
        assert!(!p.line_waiting(), "the end of input is no line");
        assert_eq!(read_line(&mut p, &mut line, 100).unwrap(), 0);
    }

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
    fn a_whole_read_stops_one_byte_past_either_limit() {
        // An endless line: the line limit, with its line number.
        let mut r = io::BufReader::new(io::repeat(0).take(1 << 30));
        let e = read_bounded(&mut r, 1000, 1 << 20).unwrap_err();
        assert_eq!(e.line, Some(1));
        assert_eq!(too_long(&e.error), Some(TooLong { limit: 1000 }));
        assert!(e.over_limit());
        // Endless empty lines: the whole limit, with no line.
        let mut r = io::BufReader::new(io::repeat(b'\n').take(1 << 30));
        let e = read_bounded(&mut r, 1000, 4096).unwrap_err();
        assert_eq!(
            (e.line, e.too_large()),
            (None, Some(TooLarge { limit: 4096 }))
        );
        assert_eq!(e.at("f"), "f");
        assert_eq!(e.to_string(), "larger than 4096 bytes, refused");
        // No line limit: the whole limit still holds for one endless line.
        let mut r = io::BufReader::new(io::repeat(0).take(1 << 30));
        let e = read_bounded(&mut r, u64::MAX, 4096).unwrap_err();
        assert_eq!(e.too_large(), Some(TooLarge { limit: 4096 }));
        // Exactly at the limits is read.
        let text = read_bounded(&mut io::Cursor::new(b"abcd\nef\n".to_vec()), 4, 8).unwrap();
        assert_eq!(text, b"abcd\nef\n");
        assert!(read_bounded(&mut io::Cursor::new(b"abcd\nef\nx".to_vec()), 4, 8).is_err());
        assert!(read_bounded(&mut io::Cursor::new(b"abcde\n".to_vec()), 4, 8).is_err());
        // A line is measured across the reader's chunks, and named.
        let mut r = io::BufReader::with_capacity(3, io::Cursor::new(b"ab\nabcdef\n".to_vec()));
        assert_eq!(read_bounded(&mut r, 4, 100).unwrap_err().line, Some(2));
        let mut r = io::BufReader::with_capacity(3, io::Cursor::new(b"ab\r\nabcd\n".to_vec()));
        assert_eq!(read_bounded(&mut r, 4, 100).unwrap(), b"ab\r\nabcd\n");
    }

    #[test]
    fn lines_of_a_text_drop_their_ends() {
        let all = |t: &[u8]| lines_of(t).map(<[u8]>::to_vec).collect::<Vec<_>>();
        assert_eq!(all(b"a\r\nb\n\nc"), [&b"a"[..], b"b", b"", b"c"]);
        assert_eq!(all(b"a\n"), [b"a"]);
        assert_eq!(all(b"\n"), [b""]);
        assert!(all(b"").is_empty());
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
