//! The readable Markdown transcript: the conversation only, modelled on the *Readable* document
//! of the reference's `export_session_and_telemetry.py` (FORMATS.md §13.5).
//!
//! Differences from the reference, on purpose: the assistant is called "Assistant" (the
//! reference says "Echo", a persona name), there are no "Linked" lines (one export writes one
//! file), `REF:` marker lines are hidden too, marker lines are recognised after leading white
//! space, and the code fence grows to outrun any backtick run in the text so that a message
//! can never close its block early. Everything else — the blank lines the reference gets from
//! joining its pieces with `\n`, `textwrap.dedent` + `strip`, `splitlines` — follows the
//! reference's Python string semantics (FORMATS.md §1.11), so turns read the same.
//!
//! Also on purpose: turns number exchanges, not messages (a user's message
//! starts turn N, the reply to it is turn N too); each reply names the provider and model
//! that wrote it (from its meta); a turn the model failed or that was interrupted
//! (`generation_failure`) is shown, with the error, instead of vanishing; a reply cut by a
//! token limit (`finish_reason` "length") is marked `[truncated]`.
//!
//! Streams: each message is written as it arrives; only a turn counter is kept.

use super::{ExportContext, Sink};
use crate::event::{Event, Kind};
use std::io::{self, Write};

/// Streams the conversation as a readable Markdown transcript.
pub struct MarkdownWriter<W: Write> {
    out: W,
    turn: u64,
    buf: String,
}

impl<W: Write> MarkdownWriter<W> {
    /// Starts the document: title, export time and rule, before any event is seen.
    pub fn new(mut out: W, ctx: &ExportContext) -> io::Result<Self> {
        let head = format!(
            "# Persistent Mind Model — Readable Chat Log\n\n**Exported:** {} UTC\n\n---\n\n",
            ctx.exported_at.format("%Y-%m-%d %H:%M:%S")
        );
        out.write_all(head.as_bytes())?;
        Ok(MarkdownWriter {
            out,
            turn: 0,
            buf: String::with_capacity(4096),
        })
    }
}

impl<W: Write> Sink for MarkdownWriter<W> {
    fn event(&mut self, ev: &Event) -> io::Result<()> {
        let meta = ev.meta_map().unwrap_or_default();
        let field = |k: &str| {
            meta.get(k)
                .and_then(serde_json::Value::as_str)
                .filter(|v| !v.is_empty())
        };
        let role = match ev.kind {
            Kind::UserMessage => {
                self.turn += 1;
                "👤 User".to_string()
            }
            Kind::AssistantMessage => match (field("provider"), field("model")) {
                (Some(p), Some(m)) => format!("🤖 Assistant ({p} · {m})"),
                (Some(p), None) | (None, Some(p)) => format!("🤖 Assistant ({p})"),
                (None, None) => "🤖 Assistant".to_string(),
            },
            Kind::GenerationFailure => {
                let interrupted = meta.get("interrupted").and_then(serde_json::Value::as_bool)
                    == Some(true)
                    || field("reason") == Some("interrupted");
                let what = if interrupted {
                    "⏹ Interrupted"
                } else {
                    "⚠️ No reply: the model failed"
                };
                match field("provider") {
                    Some(p) => format!(
                        "{what} ({p}{})",
                        field("model")
                            .map(|m| format!(" · {m}"))
                            .unwrap_or_default()
                    ),
                    None => what.to_string(),
                }
            }
            _ => return Ok(()),
        };
        // A reply before any message (an import) still belongs to a turn.
        let turn = self.turn.max(1);
        let mut text = match ev.kind {
            Kind::GenerationFailure => py_strip(field("error").unwrap_or(&ev.content)).to_string(),
            ref kind => visible_text(&ev.content, *kind == Kind::AssistantMessage),
        };
        if field("finish_reason").is_some_and(crate::formats::reply::is_truncation) {
            text.push_str(if text.is_empty() { "" } else { "\n" });
            text.push_str(crate::formats::reply::TRUNCATED);
        }
        let fence = "`".repeat((longest_backtick_run(&text) + 1).max(3));
        let b = &mut self.buf;
        b.clear();
        b.push_str("### Turn ");
        b.push_str(&turn.to_string());
        b.push_str(": ");
        b.push_str(&role);
        b.push_str("\n*");
        b.push_str(&ev.ts);
        b.push_str("*\n\n");
        b.push_str(&fence);
        b.push_str("text\n");
        b.push_str(&text);
        b.push('\n');
        b.push_str(&fence);
        b.push_str("\n\n");
        self.out.write_all(b.as_bytes())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.out.write_all(
            "\n---\n_End of readable log — see telemetry or ledger for verification._\n".as_bytes(),
        )?;
        self.out.flush()
    }
}

/// What the reader sees of a message: `textwrap.dedent(content).strip()`, and for the
/// assistant the marker lines dropped and the rest stripped again, as the reference does.
pub(crate) fn visible_text(content: &str, assistant: bool) -> String {
    let dedented = dedent(content);
    let text = py_strip(&dedented);
    if !assistant {
        return text.to_string();
    }
    let kept: Vec<&str> = splitlines(text)
        // Marker lines are instructions to the runtime, not words to the reader: the one rule
        // of crate::marker decides which they are.
        .filter(|line| !crate::marker::is_marker_line(line))
        .collect();
    py_strip(&kept.join("\n")).to_string()
}

fn longest_backtick_run(text: &str) -> usize {
    let (mut best, mut run) = (0, 0);
    for c in text.chars() {
        if c == '`' {
            run += 1;
            best = best.max(run);
        } else {
            run = 0;
        }
    }
    best
}

// Python's `str.isspace`, `strip` and `splitlines`: the one definition of each, in `pystr`.
pub(super) use crate::pystr::strip as py_strip;

/// Python's `str.splitlines()` as an iterator (see [`crate::pystr::splitlines`]).
pub(super) fn splitlines(s: &str) -> impl Iterator<Item = &str> {
    crate::pystr::splitlines(s).into_iter()
}

/// Python's `textwrap.dedent`: lines of only spaces and tabs are emptied, then the longest run
/// of leading spaces/tabs common to every other line is removed. Lines are split on `\n` only,
/// as its regular expressions do, and a tab is not a run of spaces.
pub(super) fn dedent(text: &str) -> String {
    let is_blank = |l: &str| !l.is_empty() && l.bytes().all(|b| b == b' ' || b == b'\t');
    let mut margin: Option<&str> = None;
    for line in text.split('\n') {
        if line.is_empty() || is_blank(line) {
            continue;
        }
        let indent = &line[..line.len() - line.trim_start_matches([' ', '\t']).len()];
        margin = Some(match margin {
            None => indent,
            Some(m) if indent.starts_with(m) => m,
            Some(m) if m.starts_with(indent) => indent,
            Some(m) => {
                let common = m
                    .bytes()
                    .zip(indent.bytes())
                    .take_while(|(a, b)| a == b)
                    .count();
                &m[..common]
            }
        });
    }
    let margin = margin.unwrap_or("");
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if is_blank(line) {
            continue;
        }
        out.push_str(line.strip_prefix(margin).unwrap_or(line));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn ctx() -> ExportContext {
        ExportContext {
            exported_at: Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5).unwrap(),
            output_name: Some("chat.md".into()),
        }
    }

    fn ev(id: i64, kind: &str, content: &str) -> Event {
        Event {
            id,
            ts: format!("2025-01-02T03:04:{id:02}.000000Z"),
            kind: kind.into(),
            content: content.into(),
            meta: "{}".into(),
            prev_hash: None,
            hash: Some(format!("h{id}")),
        }
    }

    fn export(events: &[Event]) -> String {
        let mut out = Vec::new();
        let mut w: Box<dyn Sink> = Box::new(MarkdownWriter::new(&mut out, &ctx()).unwrap());
        for e in events {
            w.event(e).unwrap();
        }
        w.finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn transcript_layout() {
        let text = export(&[
            ev(1, "user_message", "  Héllo, \"wörld\" 😀\r\n"),
            ev(2, "reflection", "not a message"),
            ev(
                3,
                "assistant_message",
                "Hi there.\nCOMMIT: write tests\n  CLAIM:name={}\nREF: a.json#3\nBye.",
            ),
        ]);
        assert_eq!(
            text,
            "# Persistent Mind Model — Readable Chat Log\n\n\
             **Exported:** 2025-01-02 03:04:05 UTC\n\n\
             ---\n\n\
             ### Turn 1: 👤 User\n*2025-01-02T03:04:01.000000Z*\n\n\
             ```text\nHéllo, \"wörld\" 😀\n```\n\n\
             ### Turn 1: 🤖 Assistant\n*2025-01-02T03:04:03.000000Z*\n\n\
             ```text\nHi there.\nBye.\n```\n\n\
             \n---\n_End of readable log — see telemetry or ledger for verification._\n"
        );
    }

    #[test]
    fn turns_are_exchanges_with_the_provider_failures_and_truncation_shown() {
        let mut reply = ev(2, "assistant_message", "Cut sho");
        reply.meta = r#"{"finish_reason":"length","model":"llama3.2","provider":"ollama","role":"assistant"}"#.into();
        let mut failed = ev(4, "generation_failure", "generation failed: x");
        failed.meta = r#"{"about_event":3,"error":"ollama at http://h/api/chat: no answer within 1 s","model":"llama3.2","provider":"ollama","source":"pmm-turn"}"#.into();
        let mut stopped = ev(6, "generation_failure", "generation interrupted");
        stopped.meta = r#"{"about_event":5,"interrupted":true,"provider":"openai"}"#.into();
        let text = export(&[
            ev(1, "user_message", "one"),
            reply,
            ev(3, "user_message", "two"),
            failed,
            ev(5, "user_message", "three"),
            stopped,
        ]);
        assert!(text.contains("### Turn 1: 👤 User\n"), "{text}");
        assert!(
            text.contains("### Turn 1: 🤖 Assistant (ollama · llama3.2)\n*2025-01-02T03:04:02.000000Z*\n\n```text\nCut sho\n[truncated]\n```"),
            "{text}"
        );
        assert!(
            text.contains("### Turn 2: ⚠️ No reply: the model failed (ollama · llama3.2)\n*2025-01-02T03:04:04.000000Z*\n\n```text\nollama at http://h/api/chat: no answer within 1 s\n```"),
            "{text}"
        );
        assert!(
            text.contains("### Turn 3: ⏹ Interrupted (openai)\n"),
            "{text}"
        );
        assert!(!text.contains("Turn 4"), "{text}");
    }

    #[test]
    fn empty_transcript() {
        assert!(export(&[]).ends_with(
            "UTC\n\n---\n\n\n---\n_End of readable log — see telemetry or ledger for verification._\n"
        ));
    }

    #[test]
    fn fence_outruns_backticks_in_the_text() {
        let text = export(&[ev(
            1,
            "user_message",
            "look:\n````rust\nfn x() {}\n````\n```",
        )]);
        assert!(text.contains("\n`````text\nlook:\n````rust\nfn x() {}\n````\n```\n`````\n\n"));
    }

    #[test]
    fn markers_only_hidden_for_the_assistant() {
        assert_eq!(visible_text("COMMIT: x\nhi", false), "COMMIT: x\nhi");
        assert_eq!(visible_text("COMMIT: x\n\thi\n REFLECT:{}", true), "hi");
        assert_eq!(visible_text("REFLECTION: kept", true), "REFLECTION: kept");
    }

    #[test]
    fn python_dedent() {
        assert_eq!(dedent("  a\n    b\n  \n  c"), "a\n  b\n\nc");
        assert_eq!(dedent("\ta\n  b"), "\ta\n  b");
        assert_eq!(dedent("   a\n  \tb"), " a\n\tb");
        assert_eq!(dedent("  a\r\n  b"), "a\r\nb");
        assert_eq!(dedent(""), "");
    }

    #[test]
    fn python_splitlines_and_strip() {
        let lines: Vec<&str> = splitlines("a\r\nb\rc\u{2028}d\x1ce\n").collect();
        assert_eq!(lines, ["a", "b", "c", "d", "e"]);
        assert_eq!(splitlines("").count(), 0);
        assert_eq!(splitlines("\n\n").collect::<Vec<_>>(), ["", ""]);
        assert_eq!(py_strip("\x1f\u{3000} x \x1c"), "x");
    }
}
