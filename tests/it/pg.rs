//! PostgreSQL ledgers (issue 35), as far as the programs go today: a `postgres://` or
//! `postgresql://` URL in `--db` or `$PMM_DB` is never taken for a file path (it used to create
//! a folder named `postgres:`); every program refuses it with exit 2 until it speaks
//! PostgreSQL. And the throwaway server the library's contract tests run on starts here.

use crate::harness::Pmm;
use crate::pgserver::PgServer;

#[test]
fn a_postgres_url_is_never_taken_for_a_file_path() {
    let pmm = Pmm::new();
    let line = "{\"kind\":\"user_message\",\"content\":\"hi\"}\n";
    for url in [
        "postgres://h/db",
        "postgresql://u@h:5432/db?sslmode=require",
    ] {
        for (prog, args) in [
            ("pmm-append", vec![]),
            ("pmm-replay", vec![]),
            ("pmm-verify", vec![]),
            ("pmm-export", vec!["--format", "jsonl"]),
        ] {
            let by_flag = pmm.run(prog, &[&["--db", url][..], &args[..]].concat(), line);
            by_flag.assert_error(prog, &["PostgreSQL", "SQLite"]);
            let by_env = pmm
                .cmd(prog)
                .env("PMM_DB", url)
                .args(&args)
                .write_stdin(line)
                .output()
                .unwrap();
            assert_eq!(by_env.status.code(), Some(2), "{prog} with PMM_DB={url}");
            let stderr = String::from_utf8_lossy(&by_env.stderr);
            assert!(stderr.contains("PostgreSQL"), "{stderr}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(pmm.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "nothing created: {left:?}");
}

#[test]
fn the_throwaway_server_starts_and_stops() {
    let Some(server) = PgServer::start() else {
        return;
    };
    let dir = server.dir().to_path_buf();
    assert_eq!(server.psql("postgres", "SELECT 1").unwrap().trim(), "1");
    let url = server.database();
    assert!(url.starts_with("postgres://postgres@127.0.0.1:"), "{url}");
    drop(server);
    assert!(!dir.exists(), "its directory is gone with it");
}
