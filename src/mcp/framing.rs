//! What `pmm-mcp` makes of each line a client sends, before the protocol sees it: a message, a
//! message repaired, an error response to write back, or nothing. No I/O here; the stdio
//! transport in `cmd::mcp` reads the lines and writes the responses.
//!
//! - A line that parses is handed on as it is.
//! - Lone UTF-16 surrogate escapes (`"cut \ud83d"`: what JavaScript's `JSON.stringify` writes
//!   for a string cut in the middle of an emoji), which serde_json refuses, are each replaced
//!   with `\ufffd`, U+FFFD REPLACEMENT CHARACTER, as JavaScript's `TextEncoder` does when it
//!   encodes such a string; the repaired line is then read as any other.
//! - A line that is still not JSON (garbage, invalid UTF-8, a cut line) is answered with a
//!   JSON-RPC parse error (-32700) whose `id` is the request's when one can be read from the
//!   line, else `null`, as JSON-RPC 2.0 §5 asks: a client waiting on that id gets an answer
//!   instead of hanging.
//! - JSON that is not a message (a request whose params have the wrong shape, an array) is an
//!   invalid request (-32600) with the request's id, or `null`; a notification (no `id`) is
//!   never answered, as JSON-RPC 2.0 §4.1 says, and is dropped.
//! - A line longer than the limit is an invalid request (-32600) too, with the id read from
//!   its first [`ID_SEARCH_BYTES`] bytes if it is there.

use rmcp::service::RxJsonRpcMessage;
use rmcp::RoleServer;
use serde_json::{json, Value};

/// JSON-RPC's parse error.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// How many bytes of a line too long to read are kept to look for its request's id.
pub const ID_SEARCH_BYTES: usize = 4096;

/// What to do with one line.
#[derive(Debug)]
pub enum Frame {
    /// A message for the protocol (`repaired`: lone surrogates were replaced).
    Message {
        /// The message.
        message: Box<RxJsonRpcMessage<RoleServer>>,
        /// Whether the line had to be repaired.
        repaired: bool,
    },
    /// An error response to write back, one line of JSON without its newline.
    Reply(String),
    /// Nothing to do (a blank line, a notification that is not a message).
    Skip,
}

/// What to make of `line` (without its line end).
pub fn frame(line: &[u8]) -> Frame {
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Frame::Skip;
    }
    if let Ok(message) = serde_json::from_slice(line) {
        return Frame::Message {
            message: Box::new(message),
            repaired: false,
        };
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return Frame::Reply(error_response(
            find_id(line),
            PARSE_ERROR,
            "Parse error: the line is not UTF-8",
        ));
    };
    let repaired = repair_surrogates(text);
    let text = repaired.as_deref().unwrap_or(text);
    if repaired.is_some() {
        if let Ok(message) = serde_json::from_str(text) {
            return Frame::Message {
                message: Box::new(message),
                repaired: true,
            };
        }
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) if !m.contains_key("id") => Frame::Skip,
        Ok(v) => {
            let id = v.get("id").cloned().filter(is_id).unwrap_or(Value::Null);
            Frame::Reply(error_response(
                id,
                INVALID_REQUEST,
                "Invalid Request: not a JSON-RPC 2.0 message the server reads",
            ))
        }
        Err(e) => Frame::Reply(error_response(
            find_id(text.as_bytes()),
            PARSE_ERROR,
            &format!("Parse error: {e}"),
        )),
    }
}

/// The response to a line longer than `limit` bytes, of which `prefix` is the start.
pub fn too_long(prefix: &[u8], limit: usize) -> String {
    error_response(
        find_id(prefix),
        INVALID_REQUEST,
        &format!("Invalid Request: the line is longer than {limit} bytes (--max-line)"),
    )
}

/// A JSON-RPC error response to `id` (one line of JSON, without its newline).
pub fn error_response(id: Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// A JSON-RPC id: a string or a number.
fn is_id(v: &Value) -> bool {
    v.is_string() || v.is_number()
}

/// `text` with every lone surrogate escape (`\ud800`–`\udfff` not in a high-low pair)
/// replaced with `\ufffd`; `None` when it has none. Escaped backslashes are skipped, so
/// `\\ud83d` (a backslash, then letters) is left alone.
pub fn repair_surrogates(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let unit = |at: usize| -> Option<u16> {
        if b.get(at) != Some(&b'\\') || b.get(at + 1) != Some(&b'u') {
            return None;
        }
        let hex = std::str::from_utf8(b.get(at + 2..at + 6)?).ok()?;
        u16::from_str_radix(hex, 16).ok()
    };
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit(i) {
            Some(0xD800..=0xDBFF) if matches!(unit(i + 6), Some(0xDC00..=0xDFFF)) => i += 12,
            Some(0xD800..=0xDFFF) => {
                let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
                o.push_str(&text[copied..i]);
                o.push_str("\\ufffd");
                i += 6;
                copied = i;
            }
            _ => i += 2,
        }
    }
    out.map(|mut o| {
        o.push_str(&text[copied..]);
        o
    })
}

/// The `id` of a request that does not parse, read from its top-level object: a number or a
/// string written after `"id":`; `null` when there is none to read.
fn find_id(line: &[u8]) -> Value {
    let mut depth = 0usize;
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let end = string_end(line, i);
                if depth == 1 && &line[i..end.min(line.len())] == b"\"id\"" {
                    let mut j = end;
                    while line.get(j).is_some_and(u8::is_ascii_whitespace) {
                        j += 1;
                    }
                    if line.get(j) == Some(&b':') {
                        return id_value(line, j + 1).unwrap_or(Value::Null);
                    }
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Value::Null
}

/// The index just past the string that starts with the quote at `start`.
fn string_end(line: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < line.len() {
        match line[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    line.len()
}

/// The id value at `at` (after its colon): a JSON number or string that parses whole.
fn id_value(line: &[u8], mut at: usize) -> Option<Value> {
    while line.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    let end = match line.get(at)? {
        b'"' => string_end(line, at),
        b'-' | b'0'..=b'9' => {
            at + line[at..]
                .iter()
                .position(|c| !matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                .unwrap_or(line.len() - at)
        }
        _ => return None,
    };
    serde_json::from_slice::<Value>(&line[at..end])
        .ok()
        .filter(is_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &[u8]) -> Value {
        match frame(line) {
            Frame::Reply(r) => serde_json::from_str(&r).unwrap(),
            other => panic!("not a reply: {other:?}"),
        }
    }

    #[test]
    fn lone_surrogates_become_replacement_characters_and_pairs_stay() {
        assert_eq!(repair_surrogates(r#"{"a":"ok"}"#), None);
        assert_eq!(repair_surrogates(r#""\ud83d\ude00""#), None, "a pair");
        assert_eq!(
            repair_surrogates(r#""cut \ud83d""#).as_deref(),
            Some(r#""cut \ufffd""#)
        );
        assert_eq!(
            repair_surrogates(r#""\ude00 \uD83D\uD83D\uDE00 \\ud83d""#).as_deref(),
            Some(r#""\ufffd \ufffd\uD83D\uDE00 \\ud83d""#)
        );
        let line =
            br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":{"x":"cut \ud83d"}}}"#;
        assert!(matches!(frame(line), Frame::Message { repaired: true, .. }));
    }

    #[test]
    fn unreadable_lines_are_answered_with_their_id_or_null() {
        let r = reply(br#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"t":"a"#);
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (json!(7), json!(-32700))
        );
        let r = reply(b"{\"jsonrpc\":\"2.0\",\"id\":\"a\\\"b\",\"p\":\"\xff\"}");
        assert_eq!(r["id"], "a\"b");
        let r = reply(br#"{"params":{"id":5},"t":"\"id\":6", "id" : -2, }"#);
        assert_eq!(r["id"], -2, "only the top level's id");
        let r = reply(b"this is not json");
        assert!(r.get("id").is_some_and(Value::is_null), "{r}");
        let r = reply(br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":"nope"}"#);
        assert_eq!(
            (r["id"].clone(), r["error"]["code"].clone()),
            (json!(8), json!(-32600))
        );
        let r = reply(br#"[1,2]"#);
        assert!(r["id"].is_null());
        assert!(matches!(
            frame(br#"{"jsonrpc":"2.0","method":7}"#),
            Frame::Skip
        ));
        assert!(matches!(frame(b"  \r"), Frame::Skip));
        let long: Value =
            serde_json::from_str(&too_long(br#"{"jsonrpc":"2.0","id":12,"par"#, 9)).unwrap();
        assert_eq!(long["id"], 12);
    }
}
