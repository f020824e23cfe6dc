//! Man pages in man/ are generated from the clap definitions; this fails when they are stale.
//! Regenerate with `PMM_BLESS=1 cargo test --test it man_pages`.

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

