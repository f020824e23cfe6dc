//! The reference telemetry report: the *Telemetry* document of `export_session_and_telemetry.py`
//! (FORMATS.md §13.5), byte for byte where the reference is deterministic, so a report made
//! here can be compared with (and read like) the reports in the reference's archive. Checked
//! against the archived GPT-5.1 report: over the same ledger the output differs only in the
//! file names the reference links to.
//!
//! The reference builds a list of pieces and writes `"\n".join(pieces)`; most pieces already end
//! in `\n`, which is why a blank line separates every table row. Here every piece is written
//! followed by `\n` except the last one, which is the same bytes without holding the list.
//!
//! It streams: the header and the event table are written row by row as events arrive; what
//! follows the table needs the whole ledger, so only bounded state is kept for it (counts per
//! kind, the last 10 events, the latest event of each adaptive kind, the last 3
//! `concept_define`s, a running sha256, and the continuity breaks, which are rare) and it is
//! written by `finish`.
//!
//! Choices where FORMATS.md leaves room, each the most literal reading:
//! - The export time is written as the reference writes it: `**Exported:** YYYY-MM-DD HH-MM-SS
//!   UTC` (its file-name stamp `%Y-%m-%d_%H-%M-%S` with `_` → space, dashes in the time) and
//!   `"export_timestamp": "YYYY-MM-DD_HH-MM-SS"` in the manifest.
//! - One export writes one file, so both "Linked" lines name the output file (`—` inside the
//!   backticks when writing to stdout); in the manifest an absent name is `null`.
//! - The adaptive sections follow the reference's code: a section only when the latest event of
//!   its kind has non-empty content; content that is not JSON counts as `{}`; JSON that is not
//!   an object prints `- Raw content: ...`; values are printed with Python's `str` (`False`,
//!   `None`, `{'a': 1}`); the meta-policy line is `- **Meta Changes:** ...`.
//! - `Total Definitions` / `Total Bindings` count events (`concept_define`;
//!   `concept_bind_event` + `concept_bind_async`), which is what the archived reports show (205
//!   and 237 for the GPT-5.1 ledger, which holds 41 distinct tokens); the Recent Definitions
//!   list is left out when there is none, as in the archived gemma report.
//! - The optional `### 📚 Archivist Activity` block is not written: FORMATS.md does not say
//!   what it holds or when it appears, and neither archived report has one.
//! - Where the reference would stop with a `TypeError` (a non-string domain, a `conflicts` that
//!   has no length) this writes on: `str()` of the item, a count of 0. JSON that Python accepts
//!   and `serde_json` refuses (`NaN`, lone surrogates) counts as unparsable. Object keys come
//!   out in code-point order, which is the reference's order for everything it writes
//!   (canonical JSON).

use super::markdown::py_strip;
use super::{python_str, ExportContext, Sink};
use crate::canon;
use crate::event::{Event, Kind};
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};

/// How many events the SQL snippet section shows.
const SQL_TAIL: usize = 10;
/// How many recent concept definitions the concept-graph section lists.
const RECENT_DEFINITIONS: usize = 3;
/// Meta previews are cut after this many code points.
const PREVIEW_CHARS: usize = 300;

/// A `prev_hash` that is not the hash of the row before it.
struct Break {
    id: i64,
    /// The previous row's hash (`None` prints as Python does, `None`).
    expected: Option<String>,
    saw: String,
}

/// Streams the reference telemetry report.
pub struct TelemetryWriter<W: Write> {
    out: W,
    buf: String,
    stamp: String,
    output_name: Option<String>,
    total: u64,
    /// Kinds in order of first appearance, as Python's `Counter` keeps them.
    counts: Vec<(String, u64)>,
    index: HashMap<String, usize>,
    /// The previous row's hash; `None` before the first row.
    previous: Option<Option<String>>,
    breaks: Vec<Break>,
    tail: VecDeque<Event>,
    digest: Sha256,
    stability: Option<String>,
    coherence: Option<String>,
    policy: Option<String>,
    meta_policy: Option<String>,
    definitions: VecDeque<String>,
}

impl<W: Write> TelemetryWriter<W> {
    /// Writes the header and the table head at once, so the table can follow event by event.
    pub fn new(mut out: W, ctx: &ExportContext) -> io::Result<Self> {
        let stamp = ctx.exported_at.format("%Y-%m-%d_%H-%M-%S").to_string();
        let name = ctx.output_name.as_deref().unwrap_or("—");
        let mut head = String::new();
        for piece in [
            "# Persistent Mind Model — Telemetry Summary\n",
            &format!("**Exported:** {} UTC\n", stamp.replace('_', " ")),
            &format!("**Linked Readable:** `{name}`  \n"),
            &format!("**Linked Ledger:** `{name}`\n"),
            "---\n",
            "## 📜 Event Summary\n\n",
            "| ID | Kind | Meta Preview | Prev Hash | Hash |\n",
            "|----|------|--------------|-----------|------|\n",
        ] {
            piece_to(&mut head, piece);
        }
        out.write_all(head.as_bytes())?;
        Ok(TelemetryWriter {
            out,
            buf: String::with_capacity(1024),
            stamp,
            output_name: ctx.output_name.clone(),
            total: 0,
            counts: Vec::new(),
            index: HashMap::new(),
            previous: None,
            breaks: Vec::new(),
            tail: VecDeque::with_capacity(SQL_TAIL + 1),
            digest: Sha256::new(),
            stability: None,
            coherence: None,
            policy: None,
            meta_policy: None,
            definitions: VecDeque::with_capacity(RECENT_DEFINITIONS + 1),
        })
    }

    fn count(&mut self, kind: &str) {
        match self.index.get(kind) {
            Some(&i) => self.counts[i].1 += 1,
            None => {
                self.index.insert(kind.to_string(), self.counts.len());
                self.counts.push((kind.to_string(), 1));
            }
        }
    }

    fn count_of(&self, kind: Kind) -> u64 {
        self.index
            .get(kind.as_str())
            .map_or(0, |&i| self.counts[i].1)
    }

    /// Everything after the event table.
    fn render_tail(&self) -> String {
        let mut s = String::with_capacity(8192);
        piece_to(&mut s, "\n## 📊 Statistics\n\n");
        piece_to(&mut s, &format!("- **Total Events:** {}\n", self.total));
        piece_to(
            &mut s,
            &format!("- **Event Types:** {}\n", self.counts.len()),
        );
        piece_to(&mut s, "\n| Kind | Count |\n|------|-------:|\n");
        for (kind, n) in &self.counts {
            piece_to(&mut s, &format!("| {kind} | {n} |\n"));
        }
        piece_to(&mut s, "\n");
        if self.breaks.is_empty() {
            piece_to(&mut s, "✅ **No hash continuity breaks detected.**\n");
        } else {
            piece_to(&mut s, "⚠️ **Continuity Breaks Detected:**\n");
            for b in &self.breaks {
                let expected = b.expected.as_deref().unwrap_or("None");
                piece_to(
                    &mut s,
                    &format!(
                        "- Event {}: expected `{expected}` but saw `{}`\n",
                        b.id, b.saw
                    ),
                );
            }
        }

        piece_to(&mut s, "\n## 🔎 SQL Snippets (Last 10 Events)\n\n");
        piece_to(&mut s, "```sql\n");
        for ev in &self.tail {
            piece_to(&mut s, &sql_insert(ev));
        }
        piece_to(&mut s, "```\n");

        piece_to(&mut s, "\n## 🧩 Adaptive Metrics Snapshot\n\n");
        self.render_adaptive(&mut s);
        self.render_concepts(&mut s);

        piece_to(&mut s, "\n## 🧾 Verification Manifest\n\n```json\n");
        piece_to(&mut s, &self.manifest());
        s.push_str("\n```\n\n---\n_End of telemetry summary._\n");
        s
    }

    /// The adaptive sections, each only when its latest event has content: stability,
    /// coherence, policy and meta-policy.
    fn render_adaptive(&self, s: &mut String) {
        self.render_stability(s);
        self.render_coherence(s);
        self.render_policies(s);
    }

    /// `### Stability Metrics (latest)`: the score, the window and each metric.
    fn render_stability(&self, s: &mut String) {
        if let Some(content) = self.stability.as_deref().filter(|c| !c.is_empty()) {
            piece_to(s, "### Stability Metrics (latest)\n\n");
            match parse_content(content) {
                Value::Object(m) => {
                    piece_to(
                        s,
                        &format!(
                            "- **Stability Score:** `{}`\n",
                            get_str(&m, "stability_score")
                        ),
                    );
                    piece_to(
                        s,
                        &format!("- **Window Size:** `{}`\n", get_str(&m, "window_size")),
                    );
                    if let Some(Value::Object(metrics)) = m.get("metrics") {
                        for (key, val) in metrics {
                            piece_to(s, &format!("  - `{key}` = `{}`\n", py_str(val)));
                        }
                    }
                }
                _ => piece_to(s, &format!("- Raw content: `{content}`\n")),
            }
            piece_to(s, "\n");
        }
    }

    /// `### Coherence Check (latest)`: the score, whether a resolution is needed, the domains
    /// and the number of conflicts.
    fn render_coherence(&self, s: &mut String) {
        if let Some(content) = self.coherence.as_deref().filter(|c| !c.is_empty()) {
            piece_to(s, "### Coherence Check (latest)\n\n");
            match parse_content(content) {
                Value::Object(m) => {
                    piece_to(
                        s,
                        &format!(
                            "- **Coherence Score:** `{}`\n",
                            get_str(&m, "coherence_score")
                        ),
                    );
                    piece_to(
                        s,
                        &format!(
                            "- **Resolution Needed:** `{}`\n",
                            get_str(&m, "resolution_needed")
                        ),
                    );
                    if let Some(scope) = m.get("scope").filter(|v| py_truthy(v)) {
                        piece_to(s, &format!("- **Domains:** {}\n", py_join(scope)));
                    }
                    let conflicts = m
                        .get("conflicts")
                        .filter(|v| py_truthy(v))
                        .map_or(0, py_len);
                    piece_to(s, &format!("- **Conflicts:** `{conflicts}`\n"));
                }
                _ => piece_to(s, &format!("- Raw content: `{content}`\n")),
            }
            piece_to(s, "\n");
        }
    }

    /// `### Policy Update (latest)` and `### Meta-Policy Update (latest)`: their changes.
    fn render_policies(&self, s: &mut String) {
        for (latest, title, label) in [
            (&self.policy, "### Policy Update (latest)\n\n", "Changes"),
            (
                &self.meta_policy,
                "### Meta-Policy Update (latest)\n\n",
                "Meta Changes",
            ),
        ] {
            let Some(content) = latest.as_deref().filter(|c| !c.is_empty()) else {
                continue;
            };
            piece_to(s, title);
            match parse_content(content) {
                Value::Object(m) => {
                    let changes = match m.get("changes").filter(|v| py_truthy(v)) {
                        Some(v) => py_str(v),
                        None => "{}".to_string(),
                    };
                    piece_to(s, &format!("- **{label}:** `{changes}`\n"));
                }
                _ => piece_to(s, &format!("- Raw content: `{content}`\n")),
            }
            piece_to(s, "\n");
        }
    }

    fn render_concepts(&self, s: &mut String) {
        piece_to(s, "### Concept Graph Snapshot\n\n");
        piece_to(
            s,
            &format!(
                "- **Total Definitions:** `{}`\n",
                self.count_of(Kind::ConceptDefine)
            ),
        );
        let bindings =
            self.count_of(Kind::ConceptBindEvent) + self.count_of(Kind::ConceptBindAsync);
        piece_to(s, &format!("- **Total Bindings:** `{bindings}`\n"));
        if !self.definitions.is_empty() {
            piece_to(s, "- **Recent Definitions:**\n");
            for content in &self.definitions {
                let (token, kind) = match parse_content(content) {
                    Value::Object(m) => (get_str(&m, "token"), get_str(&m, "concept_kind")),
                    _ => ("None".to_string(), "None".to_string()),
                };
                piece_to(s, &format!("  - `{token}` ({kind})\n"));
            }
        }
        piece_to(s, "\n");
    }

    /// `json.dumps(manifest, indent=2, ensure_ascii=False)`.
    fn manifest(&self) -> String {
        let mut b = Vec::with_capacity(1024);
        b.extend_from_slice(b"{\n  \"export_timestamp\": ");
        python_str(&mut b, &self.stamp);
        for key in ["linked_readable", "linked_ledger"] {
            b.extend_from_slice(format!(",\n  \"{key}\": ").as_bytes());
            match &self.output_name {
                Some(name) => python_str(&mut b, name),
                None => b.extend_from_slice(b"null"),
            }
        }
        b.extend_from_slice(format!(",\n  \"total_events\": {}", self.total).as_bytes());
        b.extend_from_slice(b",\n  \"event_type_counts\": {");
        for (i, (kind, n)) in self.counts.iter().enumerate() {
            b.extend_from_slice(if i == 0 { b"\n    " } else { b",\n    " });
            python_str(&mut b, kind);
            b.extend_from_slice(format!(": {n}").as_bytes());
        }
        if !self.counts.is_empty() {
            b.extend_from_slice(b"\n  ");
        }
        b.extend_from_slice(
            format!("}},\n  \"continuity_breaks\": {}", self.breaks.len()).as_bytes(),
        );
        b.extend_from_slice(b",\n  \"sha256_full_digest\": ");
        let digest = hex(&self.digest.clone().finalize());
        python_str(&mut b, &digest);
        b.extend_from_slice(b"\n}");
        String::from_utf8_lossy(&b).into_owned()
    }
}

impl<W: Write> Sink for TelemetryWriter<W> {
    fn event(&mut self, ev: &Event) -> io::Result<()> {
        self.total += 1;
        self.count(ev.kind.as_str());

        let prev = ev.prev_hash.as_deref().filter(|p| !p.is_empty());
        if let (Some(previous), Some(prev)) = (&self.previous, prev) {
            if previous.as_deref() != Some(prev) {
                self.breaks.push(Break {
                    id: ev.id,
                    expected: previous.clone(),
                    saw: prev.to_string(),
                });
            }
        }
        self.previous = Some(ev.hash.clone());
        if let Some(h) = &ev.hash {
            self.digest.update(h.as_bytes());
        }

        if self.tail.len() == SQL_TAIL {
            self.tail.pop_front();
        }
        self.tail.push_back(ev.clone());
        let latest = match ev.kind {
            Kind::StabilityMetrics => Some(&mut self.stability),
            Kind::CoherenceCheck => Some(&mut self.coherence),
            Kind::PolicyUpdate => Some(&mut self.policy),
            Kind::MetaPolicyUpdate => Some(&mut self.meta_policy),
            _ => None,
        };
        if let Some(slot) = latest {
            *slot = Some(ev.content.clone());
        }
        if ev.kind == Kind::ConceptDefine {
            if self.definitions.len() == RECENT_DEFINITIONS {
                self.definitions.pop_front();
            }
            self.definitions.push_back(ev.content.clone());
        }

        let b = &mut self.buf;
        b.clear();
        b.push_str("| ");
        b.push_str(&ev.id.to_string());
        b.push_str(" | ");
        b.push_str(ev.kind.as_str());
        b.push_str(" | ");
        push_meta_preview(b, &ev.meta);
        b.push_str(" | `");
        b.push_str(
            ev.prev_hash
                .as_deref()
                .filter(|h| !h.is_empty())
                .unwrap_or("∅"),
        );
        b.push_str("` | `");
        b.push_str(ev.hash.as_deref().filter(|h| !h.is_empty()).unwrap_or("∅"));
        b.push_str("` |\n\n");
        self.out.write_all(b.as_bytes())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        let tail = self.render_tail();
        self.out.write_all(tail.as_bytes())?;
        self.out.flush()
    }
}

/// Appends one piece of the reference's list and the `\n` that `"\n".join` puts after it.
fn piece_to(out: &mut String, piece: &str) {
    out.push_str(piece);
    out.push('\n');
}

/// The stored meta with CR/LF turned into spaces, stripped, cut at 300 code points (`…` when
/// cut); `—` when there is nothing worth showing (`{}`, `null`, empty).
fn push_meta_preview(out: &mut String, meta: &str) {
    let start = out.len();
    if !meta.is_empty() && !matches!(py_strip(meta), "{}" | "null" | "NULL") {
        let flat = meta.replace(['\n', '\r'], " ");
        let flat = py_strip(&flat);
        match flat.char_indices().nth(PREVIEW_CHARS) {
            Some((cut, _)) => {
                out.push_str(&flat[..cut]);
                out.push('…');
            }
            None => out.push_str(flat),
        }
    }
    if out.len() == start {
        out.push('—');
    }
}

/// One line of the SQL snippet section, values as the reference's `_sql_literal` renders them
/// (for reading, not for replaying: newlines become spaces).
fn sql_insert(ev: &Event) -> String {
    format!(
        "INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash) VALUES({}, {}, {}, {}, {}, {}, {});\n",
        ev.id,
        sql_literal(Some(&ev.ts)),
        sql_literal(Some(ev.kind.as_str())),
        sql_literal(Some(&ev.content)),
        sql_literal(Some(&ev.meta)),
        sql_literal(ev.prev_hash.as_deref()),
        sql_literal(ev.hash.as_deref()),
    )
}

fn sql_literal(value: Option<&str>) -> String {
    match value {
        None => "NULL".to_string(),
        Some(v) => {
            let flat = v.replace(['\n', '\r'], " ");
            format!("'{}'", py_strip(&flat).replace('\'', "''"))
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `json.loads(content)`, or `{}` when that fails, as the reference's `try`/`except` does.
fn parse_content(content: &str) -> Value {
    serde_json::from_str(content).unwrap_or_else(|_| Value::Object(Map::new()))
}

/// `str(d.get(key))`.
fn get_str(m: &Map<String, Value>, key: &str) -> String {
    m.get(key).map_or_else(|| "None".to_string(), py_str)
}

// Python truthiness: the one definition, in `pystr`.
use crate::pystr::truthy as py_truthy;

/// `len(v)`; 0 for values without a length (where the reference would raise).
fn py_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(a) => a.len(),
        Value::Object(m) => m.len(),
        _ => 0,
    }
}

/// `", ".join(v)`: over a list's items, a string's characters or an object's keys; `str(v)`
/// for anything else (where the reference would raise).
fn py_join(v: &Value) -> String {
    match v {
        Value::Array(items) => items.iter().map(py_str).collect::<Vec<_>>().join(", "),
        Value::String(s) => s.chars().map(String::from).collect::<Vec<_>>().join(", "),
        Value::Object(m) => m.keys().cloned().collect::<Vec<_>>().join(", "),
        other => py_str(other),
    }
}

/// Python's `str()` of a value that `json.loads` produced: a string as is, anything else as
/// its `repr`.
fn py_str(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => {
            let mut out = String::new();
            py_repr(other, &mut out);
            out
        }
    }
}

/// Python's `repr()` of a value that `json.loads` produced.
fn py_repr(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => py_number(n, out),
        Value::String(s) => py_repr_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr_str(k, out);
                out.push_str(": ");
                py_repr(item, out);
            }
            out.push('}');
        }
    }
}

/// An `int` exactly, a `float` as CPython's `repr` (`inf` for what overflows).
fn py_number(n: &Number, out: &mut String) {
    let mut bytes = Vec::new();
    match canon::write(&mut bytes, &Value::Number(n.clone())) {
        Ok(()) => out.push_str(&String::from_utf8_lossy(&bytes)),
        Err(_) if n.to_string().starts_with('-') => out.push_str("-inf"),
        Err(_) => out.push_str("inf"),
    }
}

/// CPython's `repr(str)`: single quotes unless the text has `'` and no `"`; backslash escapes
/// for the quote, `\`, `\t \n \r`, and `\xhh` / `\uhhhh` / `\Uhhhhhhhh` for what is not
/// printable.
fn py_repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if py_printable(c) => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
}

/// Python's `str.isprintable` for one character: false for control, format, separator (other
/// than space), private-use and non-character code points. Unassigned code points, which
/// Python also escapes, would need the Unicode tables; they are printed as they are.
fn py_printable(c: char) -> bool {
    let u = c as u32;
    if u < 0x7f {
        return u >= 0x20;
    }
    !matches!(u,
        0x7f..=0xa0 | 0xad
        | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x890..=0x891 | 0x8e2 | 0x1680 | 0x180e
        | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064 | 0x2066..=0x206f | 0x3000
        | 0xd800..=0xf8ff | 0xfdd0..=0xfdef | 0xfeff | 0xfff9..=0xfffb
        | 0x110bd | 0x110cd | 0x13430..=0x1343f | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a
        | 0xe0001 | 0xe0020..=0xe007f | 0xf0000..=0x10ffff)
        && (u & 0xfffe) != 0xfffe
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn ctx(name: Option<&str>) -> ExportContext {
        ExportContext {
            exported_at: Utc.with_ymd_and_hms(2025, 11, 24, 6, 9, 48).unwrap(),
            output_name: name.map(Into::into),
        }
    }

    fn ev(
        id: i64,
        kind: &str,
        content: &str,
        meta: &str,
        prev: Option<&str>,
        hash: Option<&str>,
    ) -> Event {
        Event {
            id,
            ts: format!("2025-11-24T06:09:{id:02}.000000Z"),
            kind: kind.into(),
            content: content.into(),
            meta: meta.into(),
            prev_hash: prev.map(Into::into),
            hash: hash.map(Into::into),
        }
    }

    fn export(name: Option<&str>, events: &[Event]) -> String {
        let mut out = Vec::new();
        let mut w: Box<dyn Sink> = Box::new(TelemetryWriter::new(&mut out, &ctx(name)).unwrap());
        for e in events {
            w.event(e).unwrap();
        }
        w.finish().unwrap();
        String::from_utf8(out).unwrap()
    }

    fn three() -> Vec<Event> {
        vec![
            ev(
                1,
                "user_message",
                "héllo, 'world'\r\nbye",
                "{\"role\":\"user\"}",
                None,
                Some("aaa"),
            ),
            ev(
                2,
                "assistant_message",
                "ok\nCOMMIT: x",
                "{}",
                Some("aaa"),
                Some("bbb"),
            ),
            ev(
                3,
                "user_message",
                "again",
                "{\"a\":\"😀\"}",
                Some("zzz"),
                Some("ccc"),
            ),
        ]
    }

    #[test]
    fn header_and_table_rows() {
        let text = export(Some("report.md"), &three());
        assert!(text.starts_with(
            "# Persistent Mind Model — Telemetry Summary\n\n\
             **Exported:** 2025-11-24 06-09-48 UTC\n\n\
             **Linked Readable:** `report.md`  \n\n\
             **Linked Ledger:** `report.md`\n\n\
             ---\n\n\
             ## 📜 Event Summary\n\n\n\
             | ID | Kind | Meta Preview | Prev Hash | Hash |\n\n\
             |----|------|--------------|-----------|------|\n\n\
             | 1 | user_message | {\"role\":\"user\"} | `∅` | `aaa` |\n\n\
             | 2 | assistant_message | — | `aaa` | `bbb` |\n\n\
             | 3 | user_message | {\"a\":\"😀\"} | `zzz` | `ccc` |\n\n\
             \n## 📊 Statistics\n\n\n\
             - **Total Events:** 3\n\n\
             - **Event Types:** 2\n\n\
             \n| Kind | Count |\n|------|-------:|\n\n\
             | user_message | 2 |\n\n\
             | assistant_message | 1 |\n\n\
             \n\n\
             ⚠️ **Continuity Breaks Detected:**\n\n\
             - Event 3: expected `bbb` but saw `zzz`\n\n\
             \n## 🔎 SQL Snippets (Last 10 Events)\n\n\n```sql\n\n"
        ));
    }

    #[test]
    fn sql_snippets_flatten_and_double_quotes() {
        let text = export(None, &three());
        assert!(text.contains(
            "```sql\n\n\
             INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash) VALUES(1, \
             '2025-11-24T06:09:01.000000Z', 'user_message', 'héllo, ''world''  bye', \
             '{\"role\":\"user\"}', NULL, 'aaa');\n\n"
        ));
        assert!(text.contains("'again', '{\"a\":\"😀\"}', 'zzz', 'ccc');\n\n```\n\n\n## 🧩 Adaptive Metrics Snapshot\n\n\n"));
    }

    #[test]
    fn sql_snippets_keep_only_the_last_ten() {
        let events: Vec<Event> = (1..=12)
            .map(|i| ev(i, "filler", "x", "{}", None, Some(&format!("h{i}"))))
            .collect();
        let text = export(None, &events);
        assert!(!text.contains("VALUES(2, "));
        assert!(text.contains("VALUES(3, "));
        assert!(text.contains("VALUES(12, "));
    }

    #[test]
    fn no_breaks_and_no_name() {
        let events = vec![
            ev(1, "config", "{}", "{\"source\":\"x\"}", None, Some("a")),
            ev(2, "config", "{}", "", Some("a"), None),
            // After a null hash the expected value prints as Python's None.
            ev(3, "config", "{}", "null", Some("b"), Some("c")),
        ];
        let text = export(None, &events);
        assert!(text.contains("**Linked Readable:** `—`  \n\n**Linked Ledger:** `—`\n\n"));
        assert!(
            text.contains("| 2 | config | — | `a` | `∅` |\n\n| 3 | config | — | `b` | `c` |\n\n")
        );
        assert!(text.contains("- Event 3: expected `None` but saw `b`\n"));
        assert!(text.contains("  \"linked_readable\": null,\n  \"linked_ledger\": null,\n"));

        let clean = export(None, &events[..2]);
        assert!(clean.contains(
            "| config | 2 |\n\n\n\n✅ **No hash continuity breaks detected.**\n\n\n## 🔎"
        ));
    }

    #[test]
    fn meta_preview_is_flattened_and_cut() {
        let mut s = String::new();
        push_meta_preview(&mut s, " {\"a\":\r\n1} ");
        assert_eq!(s, "{\"a\":  1}");
        let long = format!("{{\"k\":\"{}\"}}", "é".repeat(400));
        let mut s = String::new();
        push_meta_preview(&mut s, &long);
        assert_eq!(s.chars().count(), 301);
        assert!(s.ends_with("éé…"));
        for empty in ["", "  ", " {} ", "null", "NULL"] {
            let mut s = String::new();
            push_meta_preview(&mut s, empty);
            assert_eq!(s, "—");
        }
    }

    #[test]
    fn adaptive_metrics_and_concepts() {
        let events = vec![
            ev(1, "stability_metrics", "{\"stability_score\":0.5}", "{}", None, Some("a")),
            ev(
                2,
                "stability_metrics",
                "{\"metrics\":{\"claim_stability\":1.0,\"churn\":0.011627906976744186},\"stability_score\":0.99,\"window_size\":100}",
                "{}",
                Some("a"),
                Some("b"),
            ),
            ev(
                3,
                "coherence_check",
                "{\"coherence_score\":1.0,\"conflicts\":[1,2],\"resolution_needed\":false,\"scope\":[\"identity\",\"goals\"]}",
                "{}",
                Some("b"),
                Some("c"),
            ),
            ev(
                4,
                "policy_update",
                "{\"changes\":{\"autonomy_idle\":\"increase_frequency\",\"it's\":[1,null,true,\"x\\ny\"]}}",
                "{}",
                Some("c"),
                Some("d"),
            ),
            ev(5, "meta_policy_update", "[1, 2]", "{}", Some("d"), Some("e")),
            ev(6, "concept_define", "{\"concept_kind\":\"ontology\",\"token\":\"a\"}", "{}", Some("e"), Some("f")),
            ev(7, "concept_define", "{\"concept_kind\":\"topic\",\"token\":\"b\"}", "{}", Some("f"), Some("g")),
            ev(8, "concept_define", "not json", "{}", Some("g"), Some("h")),
            ev(9, "concept_define", "{\"concept_kind\":\"ontology\",\"token\":\"ontology.Bias(x)\"}", "{}", Some("h"), Some("i")),
            ev(10, "concept_bind_event", "{}", "{}", Some("i"), Some("j")),
            ev(11, "concept_bind_async", "{}", "{}", Some("j"), Some("k")),
        ];
        let text = export(None, &events);
        let expected = "```\n\n\
            \n## 🧩 Adaptive Metrics Snapshot\n\n\n\
            ### Stability Metrics (latest)\n\n\n\
            - **Stability Score:** `0.99`\n\n\
            - **Window Size:** `100`\n\n\
            \x20 - `churn` = `0.011627906976744186`\n\n\
            \x20 - `claim_stability` = `1.0`\n\n\
            \n\n\
            ### Coherence Check (latest)\n\n\n\
            - **Coherence Score:** `1.0`\n\n\
            - **Resolution Needed:** `False`\n\n\
            - **Domains:** identity, goals\n\n\
            - **Conflicts:** `2`\n\n\
            \n\n\
            ### Policy Update (latest)\n\n\n\
            - **Changes:** `{'autonomy_idle': 'increase_frequency', \"it's\": [1, None, True, 'x\\ny']}`\n\n\
            \n\n\
            ### Meta-Policy Update (latest)\n\n\n\
            - Raw content: `[1, 2]`\n\n\
            \n\n\
            ### Concept Graph Snapshot\n\n\n\
            - **Total Definitions:** `4`\n\n\
            - **Total Bindings:** `2`\n\n\
            - **Recent Definitions:**\n\n\
            \x20 - `b` (topic)\n\n\
            \x20 - `None` (None)\n\n\
            \x20 - `ontology.Bias(x)` (ontology)\n\n\
            \n\n\
            \n## 🧾 Verification Manifest\n\n```json\n\n";
        assert!(text.contains(expected), "{text}");
    }

    #[test]
    fn empty_adaptive_sections_are_left_out() {
        let text = export(
            None,
            &[ev(1, "stability_metrics", "", "{}", None, Some("a"))],
        );
        assert!(text.contains(
            "```sql\n\nINSERT INTO events (id, ts, kind, content, meta, prev_hash, hash) VALUES(1, \
             '2025-11-24T06:09:01.000000Z', 'stability_metrics', '', '{}', NULL, 'a');\n\n```\n\n\
             \n## 🧩 Adaptive Metrics Snapshot\n\n\n\
             ### Concept Graph Snapshot\n\n\n\
             - **Total Definitions:** `0`\n\n\
             - **Total Bindings:** `0`\n\n\
             \n\n\
             \n## 🧾"
        ));
        // Unparsable content counts as `{}`.
        let text = export(
            None,
            &[ev(1, "coherence_check", "oops", "{}", None, Some("a"))],
        );
        assert!(text.contains(
            "- **Coherence Score:** `None`\n\n- **Resolution Needed:** `None`\n\n- **Conflicts:** `0`\n\n"
        ));
    }

    #[test]
    fn manifest_and_footer() {
        let text = export(Some("t.md"), &three());
        let digest = hex(&Sha256::digest(b"aaabbbccc"));
        let expected = format!(
            "\n## 🧾 Verification Manifest\n\n```json\n\n{{\n  \
             \"export_timestamp\": \"2025-11-24_06-09-48\",\n  \
             \"linked_readable\": \"t.md\",\n  \
             \"linked_ledger\": \"t.md\",\n  \
             \"total_events\": 3,\n  \
             \"event_type_counts\": {{\n    \
             \"user_message\": 2,\n    \
             \"assistant_message\": 1\n  }},\n  \
             \"continuity_breaks\": 1,\n  \
             \"sha256_full_digest\": \"{digest}\"\n}}\n\n```\n\n---\n_End of telemetry summary._\n"
        );
        assert!(text.ends_with(&expected), "{text}");
    }

    #[test]
    fn empty_ledger() {
        let text = export(None, &[]);
        assert!(text.contains("|----|------|--------------|-----------|------|\n\n\n## 📊 Statistics\n\n\n- **Total Events:** 0\n"));
        assert!(text.contains("```sql\n\n```\n\n"));
        assert!(text.contains("\"event_type_counts\": {},\n"));
        // sha256 of the empty string.
        assert!(text.contains("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    }

    #[test]
    fn python_reprs() {
        let v: Value = serde_json::from_str(
            "{\"b\":[1e400,-0.0,1E-5,12345678901234567890123,-0],\"a\":\"q\\\"'\\u0007\\u00a0é\\ud83d\\ude00\\u2028\"}",
        )
        .unwrap();
        assert_eq!(
            py_str(&v),
            "{'a': 'q\"\\'\\x07\\xa0é😀\\u2028', 'b': [inf, -0.0, 1e-05, 12345678901234567890123, 0]}"
        );
        assert_eq!(py_str(&Value::String("raw 'x'".into())), "raw 'x'");
        assert_eq!(py_str(&serde_json::json!(["it's"])), "[\"it's\"]");
    }
}
