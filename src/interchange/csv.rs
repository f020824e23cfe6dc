//! CSV export (RFC 4180, seven columns). Placeholder: being written.

use super::Sink;
use crate::event::Event;
use std::io::{self, Write};

/// CSV writer.
pub struct CsvWriter<W: Write> {
    out: W,
}

impl<W: Write> CsvWriter<W> {
    /// Starts the CSV (header row).
    pub fn new(out: W) -> io::Result<Self> {
        Ok(CsvWriter { out })
    }
}

impl<W: Write> Sink for CsvWriter<W> {
    fn event(&mut self, _ev: &Event) -> io::Result<()> {
        Ok(())
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.flush()
    }
}
