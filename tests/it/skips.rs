//! Fixture tests that cannot run say so in cargo's own summary (issue 13, item 18), and tests
//! that need an outside tool skip by one rule (issue 21, item 10).

use std::path::Path;

const ATTR: &str = r#"#[cfg_attr(pmm_no_fixtures, ignore = "needs ../shared/fixtures")]"#;

/// The names of the functions in `src` that return an `Option` built from `fixture_path`
/// (helpers such as `events()` that tests guard on).
fn fixture_helpers(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in src.match_indices("fn ") {
        let rest = &src[i + 3..];
        let Some(name_end) = rest.find('(') else {
            continue;
        };
        let name = &rest[..name_end];
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let sig_end = rest.find('{').unwrap_or(rest.len());
        let body_end = rest[sig_end..]
            .find("\n}")
            .or_else(|| rest[sig_end..].find("\n    }"))
            .map_or(rest.len(), |e| sig_end + e);
        if rest[..sig_end].contains("-> Option<")
            && rest[sig_end..body_end].contains("fixture_path(")
        {
            out.push(name.to_string());
        }
    }
    out
}

/// Every test that returns early when a fixture is missing carries the `pmm_no_fixtures`
/// ignore attribute, so that a clone without `../shared/fixtures` reports it as ignored (with
/// the reason) instead of `ok`.
#[test]
fn issue13_item18_fixture_tests_are_ignored_not_ok_without_fixtures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let build = std::fs::read_to_string(root.join("build.rs")).expect("build.rs");
    assert!(build.contains("cargo::rustc-cfg=pmm_no_fixtures"));
    assert!(build.contains("cargo::rustc-check-cfg=cfg(pmm_no_fixtures)"));
    assert!(build.contains("PMM_REQUIRE_FIXTURES"));
    let mut gated = 0;
    let mut missing = Vec::new();
    let dir = root.join("tests/it");
    for entry in std::fs::read_dir(&dir).expect("tests/it") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") || path.ends_with("harness.rs") {
            continue;
        }
        let src = std::fs::read_to_string(&path).expect("read");
        let mut guards = vec![
            "fixture_path(".to_string(),
            "with_reference_ledger(".to_string(),
        ];
        guards.extend(fixture_helpers(&src).into_iter().map(|h| format!("{h}()")));
        // Each test: from its `#[test]` to the next one.
        let starts: Vec<usize> = src.match_indices("#[test]").map(|(i, _)| i).collect();
        for (n, &start) in starts.iter().enumerate() {
            let end = starts.get(n + 1).copied().unwrap_or(src.len());
            let test = &src[start..end];
            let Some(fn_at) = test.find("fn ") else {
                continue;
            };
            let (head, body) = test.split_at(fn_at);
            let name: String = body[3..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // A guard is a fixture look-up whose `None` ends the test: `... else { return`.
            let guarded = guards.iter().any(|g| {
                body.match_indices(g.as_str()).any(|(i, _)| {
                    let after = &body[i..];
                    let stmt_end = after.find(';').unwrap_or(after.len());
                    let line_end = after.find('\n').unwrap_or(after.len());
                    after[..stmt_end.max(line_end)].contains("else")
                })
            });
            if !guarded {
                continue;
            }
            gated += 1;
            if !head.contains(ATTR) {
                missing.push(format!("{}: {name}", path.display()));
            }
        }
    }
    assert!(gated >= 15, "found only {gated} fixture tests");
    assert!(
        missing.is_empty(),
        "fixture tests without {ATTR} (see tests/it/harness.rs): {missing:#?}"
    );
}

/// Issue 21 item 10: one rule for tests that need an outside tool. Only the harness reads
/// `PMM_REQUIRE_TOOLS` or prints a "skipping:" line, so that `PMM_REQUIRE_TOOLS=1` turns every
/// missing tool into a failure (the live CPython check used to skip silently when python3
/// would not start, the tmux and MCP checks had rules of their own), and no unit test in
/// `src` has a skip rule of its own (the telemetry report's fixture test had one).
#[test]
fn issue21_item10_tests_skip_only_through_the_harness() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut own_rules = Vec::new();
    let mut files = Vec::new();
    let mut dirs = vec![root.join("tests/it"), root.join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().and_then(|e| e.to_str()) == Some("rs")
                && !path.ends_with("tests/it/harness.rs")
                && !path.ends_with("tests/it/skips.rs")
            {
                files.push(path);
            }
        }
    }
    for path in &files {
        let src = std::fs::read_to_string(path).expect("read");
        // Code only: comments may name the rule.
        let code = src.lines().filter(|l| !l.trim_start().starts_with("//"));
        for (n, line) in code.enumerate() {
            for needle in ["PMM_REQUIRE_TOOLS", "PMM_REQUIRE_FIXTURES", "\"skipping"] {
                if line.contains(needle) {
                    own_rules.push(format!(
                        "{} (code line {}): {needle}",
                        path.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(files.len() > 50, "found only {} files", files.len());
    assert!(
        own_rules.is_empty(),
        "skip rules outside tests/it/harness.rs (use tool_or_skip, present_or_skip or \
         fixture_path): {own_rules:#?}"
    );
}
