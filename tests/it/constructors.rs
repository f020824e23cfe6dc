//! What a writer writes and `pmm-verify --deep` recomputes is built by one function, which
//! every writer calls and the checker compares with (docs/architecture.md: `--deep` uses "the
//! same library functions the writers use"). A writer that spelled the text itself could drift
//! from the checker unseen, so each test here fails when the text's telltale appears in the
//! code of `src/` outside its constructor's file (comments and tests aside, as in
//! [`super::architecture`]).

use super::architecture::code_by_file;

/// The code lines outside `owner` (a file or a folder under `src/`) that `telltale` matches.
fn outside(owner: &str, telltale: impl Fn(&str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for (file, lines) in code_by_file() {
        if file.starts_with(owner) {
            continue;
        }
        for line in lines.iter().filter(|l| telltale(l)) {
            found.push(format!("src/{file}: {line}"));
        }
    }
    found
}

fn only_in(owner: &str, what: &str, telltale: impl Fn(&str) -> bool) {
    let found = outside(owner, telltale);
    assert!(
        found.is_empty(),
        "{what} is built only in src/{owner}; call it instead of spelling it:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_commitment_close_text_is_built_only_by_its_constructor() {
    // `Commitment closed: <cid>` and `Internal commitment closed: <cid>`.
    only_in(
        "projection/mirror.rs",
        "a commitment_close's content (mirror::close_content, internal_close_content)",
        |l| l.contains("ommitment closed: "),
    );
}

#[test]
fn a_commitment_open_is_built_only_by_its_constructor() {
    // Its content, and the meta only a commitment to a text carries (`impact_score`).
    only_in(
        "projection/mirror.rs",
        "a commitment_open (mirror::commitment_open, internal_open_content)",
        |l| l.contains("ommitment opened: ") || l.contains("\"impact_score\""),
    );
}

#[test]
fn the_synthesized_reflection_cut_is_built_only_by_its_constructor() {
    // A message cut to its first 256 characters, however spelled.
    only_in(
        "projection/rsm.rs",
        "a synthesized reflection's intent or outcome (rsm::synthesized_text)",
        |l| l.contains("256") && (l.contains("take(") || l.contains("chars")),
    );
}

#[test]
fn a_checkpoint_manifest_is_built_only_by_its_constructor() {
    only_in(
        "chain/root.rs",
        "a checkpoint_manifest's content and covers (root::manifest_content, MANIFEST_COVERS)",
        |l| l.contains("\"rsm_state\", \"open_commitments\"") || l.contains("\"covers\":"),
    );
}

#[test]
fn a_refused_write_commits_its_violation_only_in_the_write_session() {
    // `session::commit_one`, `session::append` and `session::record_violation`: no writer
    // re-implements them.
    only_in(
        "session/",
        "a refused write's violation (session::commit_one)",
        |l| l.contains("append_violation("),
    );
}

#[test]
fn an_erasure_event_is_built_only_by_its_constructor() {
    // `event::erasure::erasure`: `pmm-append --erase`, `pmm-forget`, the MCP tool and a
    // tick's retention pass all call it.
    only_in(
        "event/erasure.rs",
        "an erasure event's content (event::erasure::erasure)",
        |l| l.contains("erased event "),
    );
}
