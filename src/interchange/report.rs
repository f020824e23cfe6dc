//! The self-verifying HTML report (`pmm-export --format html`, issue 45): one offline page that
//! shows what the agent remembered and did, and recomputes every embedded event's hash and link
//! in the browser.
//!
//! The page's code is not Rust: `report/page.html` (the shell), `report/report.css`,
//! `report/verify.js` (canonical JSON, SHA-256, the chain, the Merkle root, the checkpoint) and
//! `report/views.js` and `report/panels.js` (what a person sees), included at build time. This module only fills the
//! shell: the Content-Security-Policy (the scripts and the style allowed by their sha256, no
//! connection of any kind), the title, and the events as
//! `<script type="application/json" id="pmm-events">`: a JSON array of
//! `{"id","ts","kind","content","meta","prev_hash","hash"}`, `meta` the stored text, every `<`,
//! `>`, `&` and every character outside ASCII escaped, so that no ledger text can end the
//! element and the block is ASCII. The reader
//! (`read.rs`) finds the same block again, so `pmm-verify mind.html` checks a report as it
//! checks an export.

use crate::event::Event;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use std::io::{self, Write};

const PAGE: &str = include_str!("report/page.html");
const STYLE: &str = include_str!("report/report.css");
/// The verifier's script (the browser tests run it on its own).
pub const VERIFY_JS: &str = include_str!("report/verify.js");
const VIEWS_JS: &str = include_str!("report/views.js");
const PANELS_JS: &str = include_str!("report/panels.js");
/// hash-wasm's SHA-256 library, vendored unchanged (`report/vendor/hash-wasm/README.md`): the
/// page takes its WebAssembly module.
const HASH_WASM_JS: &str = include_str!("report/vendor/hash-wasm/sha256.umd.min.js");
/// Its licence, which goes with the module into every page.
const HASH_WASM_LICENSE: &str = include_str!("report/vendor/hash-wasm/LICENSE");

/// hash-wasm's SHA-256 module in base64, as its library holds it (the `data` of the module
/// named `sha256`); the page's verifier compiles it where the browser allows, and checks its
/// digest against the one `verify.js` pins.
pub fn sha256_wasm_base64() -> &'static str {
    const KEY: &str = "name:\"sha256\",data:\"";
    let start = HASH_WASM_JS
        .find(KEY)
        .map_or(HASH_WASM_JS.len(), |at| at + KEY.len());
    let rest = &HASH_WASM_JS[start..];
    &rest[..rest.find('"').unwrap_or(0)]
}

/// What opens the events block: the reader looks for exactly this.
pub const EVENTS_OPEN: &str = r#"<script type="application/json" id="pmm-events">"#;

/// Where the events go in the shell.
const EVENTS_SLOT: &str = "{{EVENTS}}";

/// A signed checkpoint to embed, with the verifier key the page checks it with.
#[derive(Debug, Clone)]
pub struct EmbeddedCheckpoint {
    /// The signed note, as `pmm-export --checkpoint` printed it.
    pub note: String,
    /// The verifier key, `NAME+HASH+BASE64`.
    pub key: String,
}

/// What the report says about itself besides the events.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// The page's title.
    pub title: String,
    /// When the report was made (RFC 3339).
    pub exported_at: String,
    /// A checkpoint to embed.
    pub checkpoint: Option<EmbeddedCheckpoint>,
}

/// Streams events into the report.
pub struct HtmlWriter<W: Write> {
    out: W,
    count: u64,
    buf: Vec<u8>,
    tail: String,
}

/// `sha256-BASE64` of a script or style element's text, as a CSP source names it.
fn csp_hash(text: &str) -> String {
    format!("'sha256-{}'", B64.encode(Sha256::digest(text.as_bytes())))
}

/// The policy: nothing from outside, no connection, only this page's own script and style.
pub fn content_security_policy() -> String {
    format!(
        "default-src 'none'; script-src 'wasm-unsafe-eval' {} {} {}; style-src {}; img-src data:; font-src 'none'; \
         connect-src 'none'; media-src 'none'; object-src 'none'; frame-src 'none'; \
         worker-src 'none'; manifest-src 'none'; base-uri 'none'; form-action 'none'",
        csp_hash(VERIFY_JS),
        csp_hash(VIEWS_JS),
        csp_hash(PANELS_JS),
        csp_hash(STYLE)
    )
}

/// `s` as HTML text (element content or a double-quoted attribute).
pub fn html_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Appends `s` as a JSON string that is safe inside a `<script>` element and is plain ASCII:
/// `"`, `\`, control characters, `<`, `>` and `&` are escaped (so neither `</script>` nor
/// `<!--` can appear), and so is every character outside ASCII, as `\uXXXX` (a surrogate pair
/// above U+FFFF), which takes U+2028 and U+2029 with it. ASCII is what keeps the page fast: a
/// browser holds an all-ASCII text in one byte a character, and one character outside Latin-1
/// anywhere in 70 MB of events doubles what its HTML parser, `textContent` and `JSON.parse`
/// go through (10^5 events: the page's script is reached 0.6–0.8 s sooner).
pub fn script_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            b'<' => b"\\u003c",
            b'>' => b"\\u003e",
            b'&' => b"\\u0026",
            0x00..=0x1f | 0x7f..=0xff => b"",
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            // A control character, or the first byte of a character outside ASCII (`i` is
            // on a character boundary: every byte before it was ASCII or a whole character).
            let c = s[i..].chars().next().unwrap_or('\u{fffd}');
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let digit = |shift: u16| HEX[usize::from((*unit >> shift) & 15)];
                out.extend_from_slice(&[b'\\', b'u', digit(12), digit(8), digit(4), digit(0)]);
            }
            i += c.len_utf8();
        } else {
            out.extend_from_slice(esc);
            i += 1;
        }
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn opt_json(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => script_json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// The shell with everything but the events filled in, split where they go.
fn shell(opts: &ReportOptions) -> (String, String) {
    let title = if opts.title.is_empty() {
        "pmm: the mind"
    } else {
        opts.title.as_str()
    };
    let checkpoint = match &opts.checkpoint {
        None => String::new(),
        Some(cp) => {
            let mut b = Vec::with_capacity(cp.note.len() + 256);
            b.extend_from_slice(br#"<script type="application/json" id="pmm-checkpoint">{"key":"#);
            script_json_str(&mut b, &cp.key);
            b.extend_from_slice(br#","note":"#);
            script_json_str(&mut b, &cp.note);
            b.extend_from_slice(b"}</script>");
            String::from_utf8_lossy(&b).into_owned()
        }
    };
    let csp = html_text(&content_security_policy());
    let (title, exported_at) = (html_text(title), html_text(&opts.exported_at));
    let values: [(&str, &str); 11] = [
        ("SHA256_WASM", sha256_wasm_base64()),
        ("SHA256_WASM_LICENSE", HASH_WASM_LICENSE.trim_end()),
        ("CSP", &csp),
        ("TITLE", &title),
        ("EXPORTED_AT", &exported_at),
        ("VERSION", env!("CARGO_PKG_VERSION")),
        ("STYLE", STYLE),
        ("CHECKPOINT", &checkpoint),
        ("VERIFY_JS", VERIFY_JS),
        ("VIEWS_JS", VIEWS_JS),
        ("PANELS_JS", PANELS_JS),
    ];
    let (head, tail) = PAGE.split_once(EVENTS_SLOT).unwrap_or((PAGE, ""));
    (fill(head, &values), fill(tail, &values))
}

/// `template` with each `{{NAME}}` replaced by its value, in one pass: a value is never
/// scanned again (a title that reads `{{STYLE}}` stays that text).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 4096);
    let mut rest = template;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let hit = after.find("}}").and_then(|end| {
            let name = &after[..end];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v, end))
        });
        match hit {
            Some((v, end)) => {
                out.push_str(v);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

impl<W: Write> HtmlWriter<W> {
    /// Writes everything before the first event.
    pub fn new(mut out: W, opts: &ReportOptions) -> io::Result<Self> {
        let (head, tail) = shell(opts);
        out.write_all(head.as_bytes())?;
        out.write_all(EVENTS_OPEN.as_bytes())?;
        out.write_all(b"[")?;
        Ok(HtmlWriter {
            out,
            count: 0,
            buf: Vec::with_capacity(4096),
            tail,
        })
    }

    /// Writes one event.
    pub fn write(&mut self, ev: &Event) -> io::Result<()> {
        let b = &mut self.buf;
        b.clear();
        if self.count > 0 {
            b.extend_from_slice(b",\n");
        }
        b.extend_from_slice(b"{\"id\":");
        b.extend_from_slice(ev.id.to_string().as_bytes());
        b.extend_from_slice(b",\"ts\":");
        script_json_str(b, &ev.ts);
        b.extend_from_slice(b",\"kind\":");
        script_json_str(b, ev.kind.as_str());
        b.extend_from_slice(b",\"content\":");
        script_json_str(b, &ev.content);
        b.extend_from_slice(b",\"meta\":");
        script_json_str(b, &ev.meta);
        b.extend_from_slice(b",\"prev_hash\":");
        opt_json(b, ev.prev_hash.as_deref());
        b.extend_from_slice(b",\"hash\":");
        opt_json(b, ev.hash.as_deref());
        b.push(b'}');
        self.count += 1;
        self.out.write_all(b)
    }

    /// Closes the events block, writes the rest of the page and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"]</script>")?;
        self.out.write_all(self.tail.as_bytes())?;
        Ok(self.out)
    }
}

impl<W: Write> super::Sink for HtmlWriter<W> {
    fn event(&mut self, ev: &Event) -> io::Result<()> {
        self.write(ev)
    }
    fn finish(self: Box<Self>) -> io::Result<()> {
        let mut out = HtmlWriter::finish(*self)?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::script_json_str;
    use base64::Engine as _;
    use sha2::Digest as _;

    fn sha256_hex(bytes: &[u8]) -> String {
        super::Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn the_vendored_library_is_the_pinned_version() {
        // hash-wasm 4.13.0's dist/sha256.umd.min.js from the npm tarball, unchanged: the
        // digest its README records (vendor/hash-wasm/README.md says how to update both).
        const PINNED: &str = "0ab0ba5a8242ca02d4403e08a60b9308cb7322a175c3a5c3071c595fad1e65de";
        assert_eq!(sha256_hex(super::HASH_WASM_JS.as_bytes()), PINNED);
        let readme = include_str!("report/vendor/hash-wasm/README.md");
        assert!(readme.contains(PINNED) && readme.contains("# hash-wasm 4.13.0"));
        assert!(super::HASH_WASM_LICENSE.starts_with("MIT License"));
    }

    #[test]
    fn the_embedded_sha256_module_is_the_pinned_one() {
        let b64 = super::sha256_wasm_base64();
        let module = super::B64.decode(b64).expect("base64");
        assert!(module.starts_with(b"\0asm"), "not a WebAssembly module");
        let digest = sha256_hex(&module);
        let pin = super::VERIFY_JS
            .split_once("const WASM_SHA256 = \"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(pin, _)| pin)
            .expect("verify.js pins the module");
        assert_eq!(
            pin, digest,
            "pin this digest in verify.js (vendor/hash-wasm/README.md)"
        );
        assert!(include_str!("report/vendor/hash-wasm/README.md").contains(&digest));
        // The module goes into every page once, before the verifier, with its licence in a
        // comment that nothing in the licence can end early.
        let (head, tail) = super::shell(&super::ReportOptions::default());
        let page = head + &tail;
        assert_eq!(page.matches("id=\"pmm-sha256-wasm\"").count(), 1);
        assert!(page.contains(&format!("id=\"pmm-sha256-wasm\">{b64}</script>\n<script>")));
        assert!(!super::HASH_WASM_LICENSE.contains("--"));
        assert!(page.contains("Copyright (c) 2020 Dani Bir"));
    }

    fn escaped(s: &str) -> String {
        let mut out = Vec::new();
        script_json_str(&mut out, s);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn strings_come_out_ascii_and_read_back_the_same() {
        let texts = [
            "plain",
            "</script><!-- & \"quoted\" \\ \n\r\t\u{0}\u{1f}\u{7f}",
            "café — “quotes” \u{2028}\u{2029} \u{202e}rtl\u{202c}",
            "astral 😀 𝄞 at the end 😀",
            "",
        ];
        for text in texts {
            let out = escaped(text);
            assert!(out.is_ascii(), "{out}");
            assert!(
                !out.contains('<') && !out.contains('>') && !out.contains('&'),
                "{out}"
            );
            let back: String = serde_json::from_str(&out).expect("JSON");
            assert_eq!(back, text);
        }
    }

    #[test]
    fn characters_outside_ascii_are_utf16_escapes() {
        assert_eq!(escaped("é"), r#""\u00e9""#);
        assert_eq!(escaped("a\u{2028}b"), r#""a\u2028b""#);
        assert_eq!(escaped("😀"), r#""\ud83d\ude00""#);
        assert_eq!(escaped("\u{7f}x"), r#""\u007fx""#);
    }
}
