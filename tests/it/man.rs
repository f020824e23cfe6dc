//! Man pages in man/ are generated from the clap definitions; this fails when they are stale.
//! Regenerate with `PMM_BLESS=1 cargo test --test it man_pages`. pmm(7) is written by hand and
//! checked against the code instead.

use std::collections::BTreeSet;
use std::path::Path;

#[test]
fn man_pages_match_the_clap_definitions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let bless = std::env::var("PMM_BLESS").as_deref() == Ok("1");
    let mut stale = Vec::new();
    let mut commands = pmm::cmd::commands();
    commands.push(pmm::cmd::front::command());
    for cmd in commands {
        let name = cmd.get_name().to_string();
        let page = pmm::cli::man_page(cmd.clone()).unwrap();
        let path = dir.join(format!("{name}.1"));
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &page).unwrap();
            continue;
        }
        match std::fs::read(&path) {
            Ok(old) if old == page => {}
            _ => stale.push(path.display().to_string()),
        }
        // Every flag of the program appears in its page.
        let text = String::from_utf8_lossy(&page).replace("\\-", "-");
        for arg in cmd.get_arguments() {
            if let Some(long) = arg.get_long() {
                assert!(
                    text.contains(&format!("--{long}")),
                    "{name}.1 lacks --{long}"
                );
            }
        }
        for section in ["EXAMPLES", "EXIT STATUS", "ENVIRONMENT"] {
            assert!(
                text.contains(&format!(".SH \"{section}\"")),
                "{name}.1 lacks {section}"
            );
        }
    }
    assert!(
        stale.is_empty(),
        "stale man pages (run `PMM_BLESS=1 cargo test --test it man_pages`): {stale:?}"
    );
}

/// The names of the environment variables that the code under `dir` reads: string literals
/// given to `var(…)`, `var_os(…)` (std::env and the llm config's helper) or clap's `env = …`.
fn variables_read(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            variables_read(&path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for opener in ["var(\"", "var_os(\"", "env = \""] {
            for (at, _) in text.match_indices(opener) {
                let name: String = text[at + opener.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !name.is_empty() && text[at + opener.len() + name.len()..].starts_with('"') {
                    out.insert(name);
                }
            }
        }
    }
}

#[test]
fn pmm_7_names_every_program_and_every_variable_the_code_reads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("man/pmm.7")).unwrap();
    let text = page.replace("\\-", "-");
    assert!(
        text.starts_with(".\\\"") || text.starts_with(".TH"),
        "not a roff page"
    );
    assert!(text.contains(".TH pmm 7 "), "pmm.7 lacks its title line");
    for section in ["EXIT STATUS", "ENVIRONMENT", "FILES", "SEE ALSO"] {
        assert!(
            text.contains(&format!(".SH {section}")),
            "pmm.7 lacks {section}"
        );
    }
    for cmd in pmm::cmd::commands() {
        let name = cmd.get_name();
        assert!(
            text.contains(&format!("\\fB{name}\\fR(1)")),
            "man/pmm.7 does not list {name}(1): add it to PROGRAMS and SEE ALSO"
        );
    }
    // Every variable the programs read, and the PMM_* ones the tests read.
    let mut vars = BTreeSet::new();
    variables_read(&root.join("src"), &mut vars);
    variables_read(&root.join("bin"), &mut vars);
    let mut test_vars = BTreeSet::new();
    variables_read(&root.join("tests"), &mut test_vars);
    vars.extend(test_vars.into_iter().filter(|v| v.starts_with("PMM_")));
    for must in ["PMM_DB", "PMM_NOW", "PMM_MODEL", "OPENAI_API_KEY", "PATH"] {
        assert!(vars.contains(must), "the scan missed {must}: {vars:?}");
    }
    let missing: Vec<&String> = vars
        .iter()
        .filter(|v| !text.contains(&format!("\\fB{v}\\fR")))
        .collect();
    assert!(
        missing.is_empty(),
        "man/pmm.7 does not describe {missing:?} (ENVIRONMENT)"
    );
    // Every kind of record the programs print is described.
    for record in [
        "finding",
        "summary",
        "import",
        "metrics",
        "state",
        "rsm_diff",
        "check_fast",
        "graph_stats",
        "graph",
        "turn",
    ] {
        assert!(
            text.contains(&format!("{{\"type\":\"{record}\"}}")),
            "man/pmm.7 does not describe {{\"type\":\"{record}\"}}"
        );
    }
}
