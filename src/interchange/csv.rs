//! CSV export: RFC 4180 with the seven ledger columns, one row per event, written as it comes.
//!
//! The terminator is CRLF because RFC 4180 says so and spreadsheet importers expect it; fields are
//! quoted only when they must be (a comma, a quote, CR or LF inside), quotes doubled. `meta` is
//! the stored text, not re-serialised, so a row carries exactly what was hashed. A null
//! `prev_hash`/`hash` becomes an empty field: CSV has no null, and no real hash is empty.

use super::Sink;
use crate::event::Event;
use ::csv::{QuoteStyle, Terminator, WriterBuilder};
use std::io::{self, Write};

/// The header row, in the reference export's key order.
const HEADER: [&str; 7] = ["id", "ts", "kind", "content", "meta", "prev_hash", "hash"];

/// Streams events as RFC 4180 CSV.
pub struct CsvWriter<W: Write> {
    csv: ::csv::Writer<W>,
}

impl<W: Write> CsvWriter<W> {
    /// Starts the CSV by writing the header row, so even an empty export names its columns.
    pub fn new(out: W) -> io::Result<Self> {
        let mut csv = WriterBuilder::new()
            .terminator(Terminator::CRLF)
            .quote_style(QuoteStyle::Necessary)
            .from_writer(out);
        csv.write_record(HEADER).map_err(io_error)?;
        Ok(CsvWriter { csv })
    }
}

impl<W: Write> Sink for CsvWriter<W> {
    fn event(&mut self, ev: &Event) -> io::Result<()> {
        let id = ev.id.to_string();
        self.csv
            .write_record([
                id.as_str(),
                &ev.ts,
                ev.kind.as_str(),
                &ev.content,
                &ev.meta,
                ev.prev_hash.as_deref().unwrap_or(""),
                ev.hash.as_deref().unwrap_or(""),
            ])
            .map_err(io_error)
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        // Flushes the csv buffer and then the underlying writer.
        self.csv.flush()
    }
}

/// The I/O error inside a csv error as it was (a closed stdout stays a `BrokenPipe`, which
/// the runner ends quietly on; the csv crate's own conversion makes every error `Other`).
fn io_error(e: ::csv::Error) -> io::Error {
    if !e.is_io_error() {
        return io::Error::other(e);
    }
    match e.into_kind() {
        ::csv::ErrorKind::Io(e) => e,
        other => io::Error::other(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, content: &str, meta: &str, prev: Option<&str>, hash: Option<&str>) -> Event {
        Event {
            id,
            ts: "2025-01-02T03:04:05.000006Z".into(),
            kind: "user_message".into(),
            content: content.into(),
            meta: meta.into(),
            prev_hash: prev.map(Into::into),
            hash: hash.map(Into::into),
        }
    }

    fn export(events: &[Event]) -> String {
        let mut out = Vec::new();
        let mut w: Box<dyn Sink> = Box::new(CsvWriter::new(&mut out).unwrap());
        for e in events {
            w.event(e).unwrap();
        }
        w.finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    fn sample() -> Vec<Event> {
        vec![
            ev(
                1,
                "héllo, \"world\" 😀",
                "{\"role\":\"user\"}",
                None,
                Some("aa"),
            ),
            ev(2, "line1\r\nline2\nline3\r", "{}", Some("aa"), Some("bb")),
            ev(3, "plain", "{\"a\":\"x,y\"}", Some("zz"), None),
        ]
    }

    #[test]
    fn header_and_crlf_and_quoting() {
        let text = export(&sample());
        assert!(text.starts_with("id,ts,kind,content,meta,prev_hash,hash\r\n"));
        assert!(text.contains(
            "\r\n1,2025-01-02T03:04:05.000006Z,user_message,\"héllo, \"\"world\"\" 😀\",\
             \"{\"\"role\"\":\"\"user\"\"}\",,aa\r\n"
        ));
        assert!(text.contains(",\"line1\r\nline2\nline3\r\",{},aa,bb\r\n"));
        assert!(text.ends_with(
            "3,2025-01-02T03:04:05.000006Z,user_message,plain,\"{\"\"a\"\":\"\"x,y\"\"}\",zz,\r\n"
        ));
    }

    #[test]
    fn empty_export_is_just_the_header() {
        assert_eq!(export(&[]), "id,ts,kind,content,meta,prev_hash,hash\r\n");
    }

    #[test]
    fn round_trips_through_a_csv_reader() {
        let events = sample();
        let text = export(&events);
        let mut r = ::csv::ReaderBuilder::new().from_reader(text.as_bytes());
        assert_eq!(r.headers().unwrap(), HEADER.as_slice());
        let rows: Vec<::csv::StringRecord> = r.records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), events.len());
        for (row, e) in rows.iter().zip(&events) {
            assert_eq!(row.len(), 7);
            assert_eq!(row[0].parse::<i64>().unwrap(), e.id);
            assert_eq!(&row[1], e.ts);
            assert_eq!(&row[2], e.kind.as_str());
            assert_eq!(&row[3], e.content);
            assert_eq!(&row[4], e.meta);
            assert_eq!(&row[5], e.prev_hash.as_deref().unwrap_or(""));
            assert_eq!(&row[6], e.hash.as_deref().unwrap_or(""));
        }
    }
}
