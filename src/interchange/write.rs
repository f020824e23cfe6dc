//! The reference JSON export writer: `json.dump(rows, indent=2, ensure_ascii=False)` of the raw
//! rows, `meta` as the stored string, no trailing newline (FORMATS.md §1.10).

use crate::event::Event;
use std::io::{self, Write};

/// Appends `s` as CPython writes a string with `ensure_ascii=False`: raw UTF-8; only `"`, `\`,
/// the short escapes and other control characters below U+0020 (as `\u00XX`) are escaped.
pub fn python_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(format!("\\u{:04x}", b).as_bytes());
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Streams events as the reference JSON export.
pub struct JsonArrayWriter<W: Write> {
    out: W,
    count: u64,
    buf: Vec<u8>,
}

impl<W: Write> JsonArrayWriter<W> {
    /// Starts the array.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(b"[")?;
        Ok(JsonArrayWriter {
            out,
            count: 0,
            buf: Vec::with_capacity(4096),
        })
    }

    /// Writes one event.
    pub fn write(&mut self, ev: &Event) -> io::Result<()> {
        let b = &mut self.buf;
        b.clear();
        b.extend_from_slice(if self.count == 0 {
            b"\n  {\n    \"id\": "
        } else {
            b",\n  {\n    \"id\": "
        });
        b.extend_from_slice(ev.id.to_string().as_bytes());
        b.extend_from_slice(b",\n    \"ts\": ");
        python_str(b, &ev.ts);
        b.extend_from_slice(b",\n    \"kind\": ");
        python_str(b, ev.kind.as_str());
        b.extend_from_slice(b",\n    \"content\": ");
        python_str(b, &ev.content);
        b.extend_from_slice(b",\n    \"meta\": ");
        python_str(b, &ev.meta);
        b.extend_from_slice(b",\n    \"prev_hash\": ");
        match &ev.prev_hash {
            Some(p) => python_str(b, p),
            None => b.extend_from_slice(b"null"),
        }
        b.extend_from_slice(b",\n    \"hash\": ");
        match &ev.hash {
            Some(h) => python_str(b, h),
            None => b.extend_from_slice(b"null"),
        }
        b.extend_from_slice(b"\n  }");
        self.count += 1;
        self.out.write_all(b)
    }

    /// Closes the array and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out
            .write_all(if self.count == 0 { b"]" } else { b"\n]" })?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_escaping() {
        let mut out = Vec::new();
        python_str(&mut out, "é\u{7f}\u{1}\"\\\n/😀");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"é\u{7f}\\u0001\\\"\\\\\\n/😀\""
        );
    }

    #[test]
    fn empty_array() {
        let w = JsonArrayWriter::new(Vec::new()).unwrap();
        assert_eq!(w.finish().unwrap(), b"[]");
    }
}
