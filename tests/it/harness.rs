//! A small harness that runs the real programs on temporary ledgers.

#![allow(dead_code)]

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The reference ledger fixture, if present (see `fixture_path`).
pub const GPT_LEDGER: &str = "reference-ledgers/GPT-5.1-ledger.json";

/// A temporary workspace with a ledger path in it.
pub struct Pmm {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    /// `PMM_CACHE_DIR` for a PostgreSQL ledger (this "host"'s cache directory).
    pub cache: Option<PathBuf>,
}

/// What a program printed and how it ended.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout parsed as JSON Lines.
    pub fn records(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    /// Records with `"type": t`.
    pub fn of_type(&self, t: &str) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| r["type"] == t)
            .collect()
    }

    /// The last `{"type":"summary"}` record.
    pub fn summary(&self) -> Value {
        self.of_type("summary")
            .pop()
            .unwrap_or_else(|| panic!("no summary in {self:?}"))
    }

    /// Findings as (id, problem).
    pub fn findings(&self) -> Vec<(Value, String)> {
        self.of_type("finding")
            .into_iter()
            .map(|f| {
                (
                    f["id"].clone(),
                    f["problem"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// Asserts a one-line `pmm-<tool>: error: ...` message containing all `needles`, exit 2.
    pub fn assert_error(&self, tool: &str, needles: &[&str]) {
        assert_eq!(self.code, 2, "expected exit 2: {self:?}");
        let line = self.stderr.trim_end();
        assert_eq!(line.lines().count(), 1, "error must be one line: {line:?}");
        assert!(
            line.starts_with(&format!("{tool}: error: ")),
            "bad prefix: {line:?}"
        );
        for n in needles {
            assert!(line.contains(n), "{line:?} does not mention {n:?}");
        }
    }
}

impl Default for Pmm {
    fn default() -> Self {
        Self::new()
    }
}

impl Pmm {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("ledger.db");
        Pmm {
            dir,
            db,
            cache: None,
        }
    }

    /// A workspace whose ledger is the reference fixture, imported with its forks; `None`
    /// (after saying why) when the fixture is absent, as [`fixture_path`] decides.
    pub fn with_reference_ledger() -> Option<Self> {
        let src = fixture_path(GPT_LEDGER)?;
        let pmm = Pmm::new();
        let r = pmm.run(
            "pmm-append",
            &["--import", src.to_str()?, "--accept-forks"],
            "",
        );
        assert_eq!(r.code, 0, "importing the reference ledger: {r:?}");
        Some(pmm)
    }

    /// A path inside the workspace.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A command for program `name` (`pmm-append` ...) with a clean environment: PMM_DB set to
    /// this ledger, no backtraces, a pinned clock, run inside the workspace.
    pub fn cmd(&self, name: &str) -> Command {
        Command::from_std(self.std_cmd(name))
    }

    /// [`Pmm::cmd`] as a plain `std::process::Command`, for tests that hold its pipes.
    pub fn std_cmd(&self, name: &str) -> std::process::Command {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin(name));
        c.current_dir(self.dir.path())
            .env_remove("RUST_BACKTRACE")
            .env_remove("PMM_NOW")
            .env_remove("PMM_ADAPTER")
            .env_remove("PMM_MODEL")
            .env_remove("OLLAMA_HOST")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("PMM_MAX_LINE")
            .env("PMM_DB", &self.db)
            .env("PMM_NOW", "2025-11-24T05:55:41.194157Z")
            // The embedding model's weights digest cache, per workspace.
            .env("XDG_CACHE_HOME", self.dir.path().join(".cache"));
        if let Some(cache) = &self.cache {
            c.env("PMM_CACHE_DIR", cache);
        }
        c
    }

    /// Runs `name args...` with `stdin`.
    pub fn run(&self, name: &str, args: &[&str], stdin: &str) -> Run {
        let out = self
            .cmd(name)
            .args(args)
            .write_stdin(stdin.as_bytes().to_vec())
            .output()
            .expect("run");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Appends `n` varied events through `pmm-append` and returns them as printed.
    pub fn seed(&self, n: usize) -> Vec<Value> {
        let mut lines = String::new();
        for i in 0..n {
            let (kind, meta) = match i % 4 {
                0 => ("user_message", r#"{"role":"user"}"#),
                1 => (
                    "assistant_message",
                    r#"{"role":"assistant","temperature":0.0,"n":12345678901234567890123}"#,
                ),
                2 => (
                    "reflection",
                    r#"{"source":"autonomy_kernel","x":[1.5,"é😀"]}"#,
                ),
                _ => ("metrics_turn", "{}"),
            };
            lines.push_str(&format!(
                "{{\"kind\":\"{kind}\",\"content\":\"event {i} — \\\"quoted\\\" \\u00e9\",\"meta\":{meta}}}\n"
            ));
        }
        let r = self.run("pmm-append", &[], &lines);
        assert_eq!(r.code, 0, "seed failed: {r:?}");
        r.records()
    }

    /// Number of events in the ledger (through pmm-verify's summary).
    pub fn count(&self) -> u64 {
        if !self.db.exists() {
            return 0;
        }
        let r = self.run("pmm-verify", &["--quiet"], "");
        r.summary()["events"].as_u64().unwrap_or(0)
    }
}

/// Resolves `../shared/fixtures/<rel>` relative to the package. When it is missing: with
/// `PMM_REQUIRE_FIXTURES=1` (as CI sets it) the test fails; otherwise it prints why it skips
/// and returns `None`.
///
/// A test that needs a fixture also carries, under its `#[test]`,
///
/// ```ignore
/// #[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]
/// ```
///
/// `build.rs` sets `pmm_no_fixtures` when `../shared/fixtures` is absent (and
/// `PMM_REQUIRE_FIXTURES` is not 1), so cargo's summary counts the test as ignored, with the
/// reason, instead of reporting an early return as `ok`. Keep the `else { return; }` after
/// `fixture_path` too: it covers a single missing file inside a present fixtures directory.
pub fn fixture_path(rel: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures")
        .join(rel);
    if p.exists() {
        return Some(p);
    }
    if std::env::var("PMM_REQUIRE_FIXTURES").as_deref() == Ok("1") {
        panic!(
            "fixture {} is required (PMM_REQUIRE_FIXTURES=1) but missing",
            p.display()
        );
    }
    eprintln!("skipping: {} not present", p.display());
    None
}

/// Whether `program` is on the PATH.
pub fn have(program: &str) -> bool {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The one rule for tests that need an outside tool: true when `program` is on the PATH;
/// otherwise as [`present_or_skip`] decides.
pub fn tool_or_skip(program: &str, why: &str) -> bool {
    present_or_skip(have(program), program, why)
}

/// The one rule for tests that need something from outside the crate (a program, a Python
/// package, a tool named by an environment variable): true when it is `present`; without it,
/// a failure under `PMM_REQUIRE_TOOLS=1` (as `.ci/run` sets it), else a printed reason and
/// `false` (the caller returns, skipping). `what` names the missing thing, with how to get it
/// when that is not obvious.
pub fn present_or_skip(present: bool, what: &str, why: &str) -> bool {
    if present {
        return true;
    }
    if std::env::var("PMM_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("{why} needs {what} (PMM_REQUIRE_TOOLS=1)");
    }
    eprintln!("skipping: {why} needs {what}, not found here");
    false
}

/// `rows` (events whose `meta` is a JSON object) as JSON Lines, with every `prev_hash` and
/// `hash` recomputed in order: a forgery that plain verification cannot see.
pub fn rechain(rows: &mut [Value]) -> String {
    let mut prev: Option<String> = None;
    let mut out = String::new();
    let mut scratch = Vec::new();
    for row in rows.iter_mut() {
        let meta = row["meta"].as_object().unwrap().clone();
        let d = pmm::chain::event_digest(
            &mut scratch,
            row["kind"].as_str().unwrap(),
            row["content"].as_str().unwrap(),
            &meta,
            prev.as_deref(),
        )
        .unwrap();
        row["prev_hash"] = prev.clone().map_or(Value::Null, Value::String);
        row["hash"] = Value::String(d.to_string());
        prev = Some(d.to_string());
        out.push_str(&serde_json::to_string(row).unwrap());
        out.push('\n');
    }
    out
}

/// A host of the PostgreSQL ledger at `url`: a workspace of its own whose `PMM_CACHE_DIR` is
/// its `cache` directory.
pub fn pg_host(url: &str) -> Pmm {
    let mut pmm = Pmm::new();
    pmm.db = std::path::PathBuf::from(url);
    let cache = pmm.path("cache");
    std::fs::create_dir_all(&cache).unwrap();
    pmm.cache = Some(cache);
    pmm
}

/// How many times `needle`'s bytes occur in the ledger's files (the database and its WAL).
pub fn occurrences(pmm: &Pmm, needle: &str) -> usize {
    ["", "-wal"]
        .iter()
        .map(|suffix| {
            let mut p = pmm.db.clone().into_os_string();
            p.push(suffix);
            std::fs::read(&p)
                .map(|b| {
                    b.windows(needle.len())
                        .filter(|w| *w == needle.as_bytes())
                        .count()
                })
                .unwrap_or(0)
        })
        .sum()
}
