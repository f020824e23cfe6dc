//! telemetry export. Placeholder: being written.

use super::{ExportContext, Sink};
use crate::event::Event;
use std::io::{self, Write};

/// telemetry writer.
pub struct TelemetryWriter<W: Write> {
    out: W,
}

impl<W: Write> TelemetryWriter<W> {
    /// Starts the document.
    pub fn new(out: W, _ctx: &ExportContext) -> io::Result<Self> {
        Ok(TelemetryWriter { out })
    }
}

impl<W: Write> Sink for TelemetryWriter<W> {
    fn event(&mut self, _ev: &Event) -> io::Result<()> {
        Ok(())
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.flush()
    }
}
