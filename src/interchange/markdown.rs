//! markdown export. Placeholder: being written.

use super::{ExportContext, Sink};
use crate::event::Event;
use std::io::{self, Write};

/// markdown writer.
pub struct MarkdownWriter<W: Write> {
    out: W,
}

impl<W: Write> MarkdownWriter<W> {
    /// Starts the document.
    pub fn new(out: W, _ctx: &ExportContext) -> io::Result<Self> {
        Ok(MarkdownWriter { out })
    }
}

impl<W: Write> Sink for MarkdownWriter<W> {
    fn event(&mut self, _ev: &Event) -> io::Result<()> {
        Ok(())
    }
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.flush()
    }
}
