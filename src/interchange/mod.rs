//! Import and export formats: the reference JSON export, JSONL events, gzip of either, SQLite
//! ledgers (readers); and JSON, JSONL, CSV, Markdown transcript and telemetry report (writers).
//!
//! Readers stream: one event at a time, whatever the size of the input; [`import`] verifies
//! what one reads and appends it to a ledger verbatim. Writers are [`Sink`]s:
//! fed events in id order, then finished.

mod import;
mod read;
mod write;

pub mod csv;
pub mod markdown;
pub mod report;
pub mod telemetry;

pub use import::{import, ImportSummary};
pub use read::{detect, digest, read, read_with, Format, Input, Item, Record};
pub use write::{python_str, JsonArrayWriter};

use crate::event::Event;
use chrono::{DateTime, Utc};
use std::io::{self, Write};

/// The export formats of `pmm-export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// The reference export: JSON array, indent 2, raw UTF-8, `meta` as a string.
    Json,
    /// One event per line, `meta` as an object.
    Jsonl,
    /// RFC 4180 CSV with the seven columns.
    Csv,
    /// A readable Markdown transcript of the conversation (markers hidden).
    Md,
    /// The reference telemetry report (FORMATS.md §13.5).
    Telemetry,
    /// The self-verifying HTML report (docs/report.md).
    Html,
}

/// What some formats print about the export itself.
#[derive(Debug, Clone)]
pub struct ExportContext {
    /// When the export was made (the pinned clock in tests).
    pub exported_at: DateTime<Utc>,
    /// The output file's name, if any (the telemetry report links to it).
    pub output_name: Option<String>,
}

/// An export writer: fed every event in id order, then finished.
pub trait Sink {
    /// Writes one event.
    fn event(&mut self, ev: &Event) -> io::Result<()>;
    /// Writes whatever comes after the last event and flushes.
    fn finish(self: Box<Self>) -> io::Result<()>;
}

struct Jsonl<W: Write> {
    out: W,
    buf: Vec<u8>,
}

impl<W: Write> Sink for Jsonl<W> {
    fn event(&mut self, ev: &Event) -> io::Result<()> {
        self.buf.clear();
        ev.write_jsonl(&mut self.buf);
        self.buf.push(b'\n');
        self.out.write_all(&self.buf)
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.flush()
    }
}

impl<W: Write> Sink for JsonArrayWriter<W> {
    fn event(&mut self, ev: &Event) -> io::Result<()> {
        self.write(ev)
    }
    fn finish(self: Box<Self>) -> io::Result<()> {
        let mut out = JsonArrayWriter::finish(*self)?;
        out.flush()
    }
}

/// The writer for `format` over `out` (a report with its default title and no checkpoint).
pub fn sink<'a, W: Write + 'a>(
    format: ExportFormat,
    out: W,
    ctx: &ExportContext,
) -> io::Result<Box<dyn Sink + 'a>> {
    let report = report::ReportOptions {
        exported_at: crate::event::format_ts(ctx.exported_at),
        ..report::ReportOptions::default()
    };
    sink_with(format, out, ctx, &report)
}

/// The writer for `format` over `out`; `report` is what an HTML report says about itself.
pub fn sink_with<'a, W: Write + 'a>(
    format: ExportFormat,
    out: W,
    ctx: &ExportContext,
    report: &report::ReportOptions,
) -> io::Result<Box<dyn Sink + 'a>> {
    Ok(match format {
        ExportFormat::Html => Box::new(report::HtmlWriter::new(out, report)?),
        ExportFormat::Json => Box::new(JsonArrayWriter::new(out)?),
        ExportFormat::Jsonl => Box::new(Jsonl {
            out,
            buf: Vec::with_capacity(4096),
        }),
        ExportFormat::Csv => Box::new(csv::CsvWriter::new(out)?),
        ExportFormat::Md => Box::new(markdown::MarkdownWriter::new(out, ctx)?),
        ExportFormat::Telemetry => Box::new(telemetry::TelemetryWriter::new(out, ctx)?),
    })
}
