//! Scrubbing secrets from everything an adapter lets out. A server (or a proxy) that echoes the
//! request's `Authorization` header, or a cmd program that prints `$OPENAI_API_KEY`, would
//! otherwise get a secret into the reply, and from there into the ledger, its reflections and
//! every export, or into an error on stderr and in a `generation_failure`.
//!
//! An adapter knows its secrets as [`Secrets`]: the API key (and its `Bearer` form), the
//! credentials of a URL's `user:password@` (the password, `user:password`, and the base64 of it
//! that goes out as `Authorization: Basic …`), and for the cmd adapter the environment's
//! `*API_KEY`, `*_TOKEN`, `*_SECRET` and `*PASSWORD` variables. Every string of a successful
//! answer goes through [`Secrets::value`] before an adapter reads it, every reply through
//! [`Secrets::text`] (a streamed one piece by piece through a [`Holdback`]), every error
//! through [`Secrets::redact`].

use super::Config;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{Map, Value};

/// Secrets shorter than this are scrubbed from replies only in their `Bearer <key>` (or
/// `Basic <base64>`) form: a local server's placeholder key (`x`, `none`) replaced everywhere
/// would mangle ordinary replies, and is no secret.
pub(crate) const MIN_SCRUBBED: usize = 8;

/// What replaces a secret.
const MASK: &str = "***";

/// Environment variables whose values the cmd adapter scrubs, by the end of their names.
const SECRET_VARS: [&str; 4] = ["API_KEY", "_TOKEN", "_SECRET", "PASSWORD"];

/// One secret and how it is recognised.
#[derive(Clone)]
struct Secret {
    value: String,
    /// The word before it in an `Authorization` header (`Bearer `, `Basic `): a short secret is
    /// scrubbed from replies only after it.
    prefix: Option<&'static str>,
    /// Redacted from errors in every occurrence, however short (pmm's own configuration);
    /// else only as in replies (a variable of the environment that merely looks secret).
    strict: bool,
}

impl Secret {
    /// True when it is scrubbed from replies wherever it appears.
    fn bare(&self) -> bool {
        self.value.chars().count() >= MIN_SCRUBBED
    }
}

/// Every secret one adapter holds. Not `Debug`: it holds them.
#[derive(Clone, Default)]
pub(crate) struct Secrets(Vec<Secret>);

/// Where a secret occurs in a text: the whole match (`start..end`, its prefix included) and the
/// part replaced (`mask..end`).
#[derive(Clone, Copy)]
struct Hit {
    start: usize,
    mask: usize,
    end: usize,
}

impl Secrets {
    /// No secrets: every text passes as it is.
    pub(crate) fn none() -> Secrets {
        Secrets::default()
    }

    /// The secrets of `cfg`: the API key, and the credentials in the OpenAI base URL and the
    /// Ollama host (whichever adapter it is for: a cmd program may see them in its
    /// environment too).
    pub(crate) fn of(cfg: &Config) -> Secrets {
        let mut s = Secrets::none();
        if let Some(key) = cfg.openai_api_key.as_deref() {
            s.bearer(key.trim());
        }
        s.url(&cfg.openai_base_url);
        s.url(&cfg.ollama_host);
        s
    }

    /// [`Secrets::of`] and the values of the environment's variables named like secrets
    /// (`*API_KEY`, `*_TOKEN`, `*_SECRET`, `*PASSWORD`): what the cmd adapter's program inherits.
    pub(crate) fn of_with_env(cfg: &Config) -> Secrets {
        let mut s = Secrets::of(cfg);
        for (name, value) in std::env::vars_os() {
            let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else {
                continue;
            };
            let upper = name.to_ascii_uppercase();
            if SECRET_VARS.iter().any(|end| upper.ends_with(end)) {
                s.add(value.trim(), None, false);
            }
            // A database URL (`PMM_DB=postgres://user:password@…`, `DATABASE_URL`): its
            // password, however it is written in the URL.
            if value.contains("://") {
                for p in url_passwords(value) {
                    s.add(&p, None, true);
                }
            }
        }
        s
    }

    /// Adds a bearer token (also scrubbed, when short, in its `Bearer <key>` form).
    pub(crate) fn bearer(&mut self, key: &str) {
        self.add(key, Some("bearer "), true);
    }

    /// Adds the credentials of `url`'s `user:password@`, if it has any: the password (also
    /// percent-decoded), `user:password` and its base64 (what `Authorization: Basic` carries).
    pub(crate) fn url(&mut self, url: &str) {
        let Some(userinfo) = userinfo(url) else {
            return;
        };
        let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        for p in [password.to_string(), percent_decoded(password)] {
            self.add(&p, None, true);
        }
        self.add(userinfo, None, true);
        self.add(
            &B64.encode(format!("{user}:{password}")),
            Some("basic "),
            true,
        );
    }

    /// Adds one secret (an empty one, or a short one without a prefix that is not `strict`,
    /// could never be scrubbed and is left out).
    fn add(&mut self, value: &str, prefix: Option<&'static str>, strict: bool) {
        let secret = Secret {
            value: value.to_string(),
            prefix,
            strict,
        };
        if value.is_empty()
            || (!secret.bare() && prefix.is_none() && !strict)
            || self.0.iter().any(|s| s.value == value)
        {
            return;
        }
        self.0.push(secret);
    }

    /// True when there is nothing to scrub.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where the secrets occur in `raw` as [`Secrets::text`] replaces them, by `mask`.
    fn hits(&self, raw: &str) -> Vec<Hit> {
        let mut hits = Vec::new();
        let mut lower = None;
        for s in &self.0 {
            if s.bare() {
                hits.extend(raw.match_indices(s.value.as_str()).map(|(i, m)| Hit {
                    start: i,
                    mask: i,
                    end: i + m.len(),
                }));
                continue;
            }
            let Some(prefix) = s.prefix else { continue };
            // The prefix is ASCII, so the lowercase copy keeps every byte offset.
            let lower: &String = lower.get_or_insert_with(|| raw.to_ascii_lowercase());
            let needle = format!("{prefix}{}", s.value.to_ascii_lowercase());
            for (i, _) in lower.match_indices(&needle) {
                let (mask, end) = (i + prefix.len(), i + needle.len());
                if raw.get(mask..end) == Some(s.value.as_str()) {
                    hits.push(Hit {
                        start: i,
                        mask,
                        end,
                    });
                }
            }
        }
        hits.sort_by_key(|h| (h.mask, std::cmp::Reverse(h.end)));
        hits
    }

    /// The longest text a secret's match may span ([`Holdback`] keeps that much back).
    fn longest(&self) -> usize {
        self.0
            .iter()
            .map(|s| match s.prefix {
                Some(p) if !s.bare() => p.len() + s.value.len(),
                _ => s.value.len(),
            })
            .max()
            .unwrap_or(0)
    }

    /// `text` with every secret replaced by `***`: a secret of at least [`MIN_SCRUBBED`]
    /// characters wherever it is, a shorter one in its `Bearer <key>` / `Basic <base64>` form
    /// (any case of the word). What replies go through.
    pub(crate) fn text(&self, text: &str) -> String {
        if self.is_empty() {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for h in self.hits(text) {
            if h.mask >= last {
                out.push_str(&text[last..h.mask]);
                out.push_str(MASK);
                last = h.end;
            } else if h.end > last {
                last = h.end;
            }
        }
        out.push_str(&text[last..]);
        out
    }

    /// [`Secrets::text`], and then pmm's own secrets (the key, a URL's password) wherever they
    /// are, however short: what errors go through, where a mangled word costs nothing.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = self.text(text);
        let mut strict: Vec<&str> = self
            .0
            .iter()
            .filter(|s| s.strict)
            .map(|s| s.value.as_str())
            .collect();
        // The longest first, so that `user:pw` goes whole before `pw` in it.
        strict.sort_by_key(|v| std::cmp::Reverse(v.len()));
        for v in strict {
            out = out.replace(v, MASK);
        }
        out
    }

    /// `v` with the secrets scrubbed from every string and every object key in it.
    pub(crate) fn value(&self, v: Value) -> Value {
        if self.is_empty() {
            return v;
        }
        match v {
            Value::String(s) => Value::String(self.text(&s)),
            Value::Array(items) => Value::Array(items.into_iter().map(|x| self.value(x)).collect()),
            Value::Object(o) => Value::Object(
                o.into_iter()
                    .map(|(k, x)| (self.text(&k), self.value(x)))
                    .collect::<Map<String, Value>>(),
            ),
            other => other,
        }
    }
}

/// The `user:password` (or `user`) before the `@` of `url`'s authority, with or without a
/// scheme (`$OLLAMA_HOST` may be a bare `host:port`).
fn userinfo(url: &str) -> Option<&str> {
    let url = url.trim();
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .map(|(u, _)| u)
        .filter(|u| !u.is_empty())
}

/// Every password `url` carries, as written and percent-decoded: the user part's (up to the
/// last `@` before the query, so that an unencoded `/` in it does not hide it) and each
/// `password=` parameter's, whatever the case or encoding of its name.
pub(crate) fn url_passwords(url: &str) -> Vec<String> {
    let url = url.trim();
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (base, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut out = Vec::new();
    if let Some((userinfo, _)) = base.rsplit_once('@') {
        if let Some((_, p)) = userinfo.split_once(':') {
            out.push(p.to_string());
        }
    }
    for pair in query.split('&') {
        if let Some((k, v)) = pair.split_once('=') {
            if percent_decoded(k).eq_ignore_ascii_case("password") {
                out.push(v.to_string());
            }
        }
    }
    let decoded: Vec<String> = out.iter().map(|p| percent_decoded(p)).collect();
    out.extend(decoded);
    out.retain(|p| !p.is_empty());
    out
}

/// `s` with its `%XX` escapes decoded (as the server sees a URL's password), or `s` when that
/// is not UTF-8.
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
}

/// A streamed reply, scrubbed as it is shown: what [`Holdback::push`] returns never holds a
/// secret, even when one arrives split over several pieces (a model echoes it token by token).
/// It holds back just enough of the end to see a secret that has not finished arriving, and
/// keeps nothing else: a long reply costs time in proportion to its length.
pub(crate) struct Holdback {
    secrets: Secrets,
    /// What has arrived and is not shown yet.
    held: String,
}

impl Holdback {
    /// A holdback for `secrets` (none: every piece passes as it is).
    pub(crate) fn new(secrets: &Secrets) -> Holdback {
        Holdback {
            secrets: secrets.clone(),
            held: String::new(),
        }
    }

    /// Takes one piece; returns what can be shown now.
    pub(crate) fn push(&mut self, piece: &str) -> String {
        let longest = self.secrets.longest();
        if longest == 0 {
            return piece.to_string();
        }
        self.held.push_str(piece);
        let mut end = self.held.len().saturating_sub(longest - 1);
        let hits = self.secrets.hits(&self.held);
        // A match across the cut moves the cut before it, which may put it inside another.
        while let Some(h) = hits.iter().find(|h| h.start < end && h.end > end) {
            end = h.start;
        }
        while !self.held.is_char_boundary(end) {
            end -= 1;
        }
        if end == 0 {
            return String::new();
        }
        let rest = self.held.split_off(end);
        let shown = std::mem::replace(&mut self.held, rest);
        self.secrets.text(&shown)
    }

    /// What is left to show once the stream has ended.
    pub(crate) fn finish(&mut self) -> String {
        self.secrets.text(&std::mem::take(&mut self.held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(k: &str) -> Secrets {
        let mut s = Secrets::none();
        s.bearer(k);
        s
    }

    #[test]
    fn the_key_and_its_bearer_form_are_scrubbed_everywhere() {
        let key_ = "sk-test-0123456789";
        let v = json!({"model": format!("m-{key_}"), "choices": [{"message": {"content": format!("Authorization: Bearer {key_}\nkey {key_}")}}], key_: 1});
        let s = key(key_).value(v).to_string();
        assert!(!s.contains(key_), "{s}");
        assert!(s.contains("Bearer ***"), "{s}");
    }

    #[test]
    fn a_short_key_is_scrubbed_only_in_its_bearer_form() {
        assert_eq!(
            key("x").text("x marks the spot; BEARER x, bearer xy"),
            "x marks the spot; BEARER ***, bearer ***y"
        );
        assert_eq!(Secrets::none().text("no key"), "no key");
        assert_eq!(key("x").text("é bearer x é"), "é bearer *** é");
        // In an error it goes wherever it is.
        assert_eq!(key("x").redact("x marks"), "*** marks");
    }

    #[test]
    fn url_credentials_are_scrubbed_in_every_form_the_server_may_echo() {
        let mut cfg = Config::new(crate::llm::AdapterKind::Openai);
        cfg.openai_base_url = "http://admin:PASS@host/v1".into();
        cfg.ollama_host = "bob:p%40ssw0rd-long@gpu:11434".into();
        let s = Secrets::of(&cfg);
        let basic = B64.encode("admin:PASS");
        assert_eq!(basic, "YWRtaW46UEFTUw==");
        assert_eq!(
            s.text(&format!("got Authorization: Basic {basic} from admin:PASS")),
            "got Authorization: Basic *** from ***"
        );
        // A short password alone is left in replies ("PASS" is a word), not in errors.
        assert_eq!(s.text("PASS"), "PASS");
        assert_eq!(s.redact("bad password PASS"), "bad password ***");
        // Long passwords go wherever they are, as written in the URL and as the server reads it.
        assert_eq!(s.text("p%40ssw0rd-long p@ssw0rd-long"), "*** ***");
        let none = Secrets::of(&Config::new(crate::llm::AdapterKind::Openai));
        assert!(none.is_empty());
        assert_eq!(userinfo("https://h/a@b"), None);
        assert_eq!(userinfo("u@h:1"), Some("u"));
    }
}

#[cfg(test)]
mod holdback_tests {
    use super::*;

    #[test]
    fn a_key_split_over_pieces_is_never_shown() {
        let key = "sk-live-0123456789";
        let mut secrets = Secrets::none();
        secrets.bearer(key);
        for cut in [1, 3, 7, 12] {
            let reply = format!("Your key is {key}, keep it.");
            let mut h = Holdback::new(&secrets);
            let mut shown = String::new();
            for piece in reply.as_bytes().chunks(cut) {
                shown.push_str(&h.push(std::str::from_utf8(piece).unwrap()));
                assert!(!shown.contains(&key[..key.len() - 1]), "{shown}");
            }
            shown.push_str(&h.finish());
            assert_eq!(shown, "Your key is ***, keep it.");
        }
        let mut none = Holdback::new(&Secrets::none());
        assert_eq!(none.push("abc"), "abc");
        assert_eq!(none.finish(), "");
    }

    #[test]
    fn a_short_key_split_after_its_bearer_word_is_never_shown() {
        let mut secrets = Secrets::none();
        secrets.bearer("xyz");
        let mut h = Holdback::new(&secrets);
        let mut shown = String::new();
        for piece in ["say Bear", "er x", "y", "z and go"] {
            shown.push_str(&h.push(piece));
            assert!(!shown.contains("Bearer x"), "{shown}");
        }
        shown.push_str(&h.finish());
        assert_eq!(shown, "say Bearer *** and go");
    }

    #[test]
    fn a_long_reply_is_held_back_in_linear_time() {
        // 20 MB in 60 KB pieces: each push looks at the piece and the few bytes held back,
        // not at all that came before (which took minutes).
        let mut secrets = Secrets::none();
        secrets.bearer("sk-live-0123456789");
        let mut h = Holdback::new(&secrets);
        let piece = "x".repeat(60_000);
        let started = std::time::Instant::now();
        let mut shown = 0;
        for _ in 0..350 {
            shown += h.push(&piece).len();
        }
        shown += h.finish().len();
        assert_eq!(shown, 350 * 60_000);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
