//! Several hosts on one PostgreSQL ledger, made with network namespaces (issue 35): a server
//! in one namespace, client "hosts" in others, each joined to it by a veth pair, each with its
//! own cache directory. Needs root and `ip` (iproute2); skips with a message otherwise, and
//! fails instead when `PMM_REQUIRE_NETNS=1` (CI sets it).

use crate::harness::Pmm;
use crate::pgserver::PgServer;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Namespaces made for one test, deleted (with their veth pairs) when it ends.
struct Net {
    server: String,
    hosts: Vec<String>,
}

impl Net {
    /// A server namespace and `n` host namespaces, host `i` at 10.77.`i+1`.2 and the server
    /// at 10.77.`i+1`.1 on the pair between them; `None` (after saying why) where namespaces
    /// cannot be made.
    fn make(tag: &str, n: usize) -> Option<Net> {
        let required = std::env::var_os("PMM_REQUIRE_NETNS").is_some_and(|v| v == "1");
        let base = format!("pmm{}{tag}", std::process::id() % 100_000);
        let net = Net {
            server: format!("{base}s"),
            hosts: (0..n).map(|i| format!("{base}h{i}")).collect(),
        };
        if let Err(why) = ip(&["netns", "add", &net.server]) {
            assert!(
                !required,
                "PMM_REQUIRE_NETNS=1 but a network namespace cannot be made: {why}"
            );
            eprintln!("skipped: network namespaces need root and iproute2 ({why})");
            return None;
        }
        in_ns(&net.server, &["ip", "link", "set", "lo", "up"]).unwrap();
        for (i, host) in net.hosts.iter().enumerate() {
            let (a, b) = (format!("{base}a{i}"), format!("{base}b{i}"));
            let a = &a[a.len().saturating_sub(15)..];
            let b = &b[b.len().saturating_sub(15)..];
            ip(&["netns", "add", host]).unwrap();
            ip(&["link", "add", a, "type", "veth", "peer", "name", b]).unwrap();
            ip(&["link", "set", a, "netns", host]).unwrap();
            ip(&["link", "set", b, "netns", &net.server]).unwrap();
            let sub = i + 1;
            in_ns(
                host,
                &["ip", "addr", "add", &format!("10.77.{sub}.2/24"), "dev", a],
            )
            .unwrap();
            in_ns(host, &["ip", "link", "set", a, "up"]).unwrap();
            in_ns(host, &["ip", "link", "set", "lo", "up"]).unwrap();
            in_ns(
                &net.server,
                &["ip", "addr", "add", &format!("10.77.{sub}.1/24"), "dev", b],
            )
            .unwrap();
            in_ns(&net.server, &["ip", "link", "set", b, "up"]).unwrap();
        }
        Some(net)
    }

    /// The address the server answers host `i` on.
    fn server_addr(&self, i: usize) -> String {
        format!("10.77.{}.1", i + 1)
    }

    /// `listen_addresses` for the server: the loopback and every pair's server end.
    fn listen(&self) -> String {
        let mut all = vec!["127.0.0.1".to_string()];
        all.extend((0..self.hosts.len()).map(|i| self.server_addr(i)));
        all.join(",")
    }

    /// The client end of host `i`'s pair.
    fn link(&self, i: usize) -> String {
        let base = &self.server[..self.server.len() - 1];
        let a = format!("{base}a{i}");
        a[a.len().saturating_sub(15)..].to_string()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.hosts.iter().chain([&self.server]) {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn in_ns(ns: &str, argv: &[&str]) -> Result<(), String> {
    ip(&[&["netns", "exec", ns][..], argv].concat())
}

/// `pmm`'s program `prog` run inside namespace `ns`, with the workspace's environment.
fn run_in(ns: &str, pmm: &Pmm, prog: &str, args: &[&str]) -> Output {
    spawn_in(ns, pmm, prog, args, &[])
        .wait_with_output()
        .unwrap()
}

fn spawn_in(
    ns: &str,
    pmm: &Pmm,
    prog: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Child {
    let plain = pmm.std_cmd(prog);
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(plain.get_program())
        .args(args);
    for (k, v) in plain.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.current_dir(pmm.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().unwrap()
}

/// Host `i`'s workspace: the ledger's URL through that host's link, its own cache.
fn host(net: &Net, server: &PgServer, db: &str, i: usize) -> Pmm {
    let mut pmm = Pmm::new();
    pmm.db = PathBuf::from(format!(
        "postgres://postgres@{}:{}/{db}?sslmode=disable&connect_timeout=5",
        net.server_addr(i),
        server.port()
    ));
    let cache = pmm.path("cache");
    std::fs::create_dir_all(&cache).unwrap();
    pmm.cache = Some(cache);
    pmm
}

fn new_database(server: &PgServer) -> String {
    let url = server.database();
    let tail = url.rsplit('/').next().unwrap();
    tail.split('?').next().unwrap().to_string()
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn three_hosts_with_four_writers_each_share_one_chain_over_the_network() {
    let Some(net) = Net::make("m", 3) else {
        return;
    };
    let Some(server) = PgServer::start_in(Some(&net.server), &net.listen(), &["10.77.0.0/16"], &[])
    else {
        return;
    };
    let db = new_database(&server);
    let hosts: Vec<Pmm> = (0..3).map(|i| host(&net, &server, &db, i)).collect();
    // The first writer creates the schema; then every host's writers at once: appends, turns
    // and ticks.
    ok(
        &run_in(
            &net.hosts[0],
            &hosts[0],
            "pmm-append",
            &["--kind", "user_message", "--content", "start"],
        ),
        "first",
    );
    std::thread::scope(|s| {
        for (h, pmm) in hosts.iter().enumerate() {
            let ns = &net.hosts[h];
            for w in 0..4 {
                s.spawn(move || {
                    for i in 0..6 {
                        let text = format!("host {h} writer {w} item {i}");
                        let out = match (w, i % 3) {
                            (0, _) | (1, _) => run_in(
                                ns,
                                pmm,
                                "pmm-append",
                                &["--kind", "user_message", "--content", &text],
                            ),
                            (2, _) => run_in(ns, pmm, "pmm-turn", &["--adapter", "dummy", &text]),
                            _ => {
                                run_in(ns, pmm, "pmm-tick", &["--slot", &(h * 100 + i).to_string()])
                            }
                        };
                        ok(&out, &text);
                    }
                });
            }
        }
    });
    let export = |h: usize| {
        let out = run_in(
            &net.hosts[h],
            &hosts[h],
            "pmm-export",
            &["--format", "jsonl"],
        );
        ok(&out, "export");
        String::from_utf8(out.stdout).unwrap()
    };
    let all: Vec<String> = (0..3).map(export).collect();
    assert!(
        all.iter().all(|e| *e == all[0]),
        "every host sees one chain"
    );
    let ids: Vec<i64> = all[0]
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        ids,
        (1..=ids.len() as i64).collect::<Vec<_>>(),
        "every id once, no gap"
    );
    let messages: Vec<String> = all[0]
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == "user_message")
        .map(|e| e["content"].as_str().unwrap().to_string())
        .collect();
    for h in 0..3 {
        for w in 0..3 {
            for i in 0..6 {
                let text = format!("host {h} writer {w} item {i}");
                let n = messages.iter().filter(|m| **m == text).count();
                assert_eq!(n, 1, "{text}: one user message");
            }
        }
    }
    let verified = run_in(&net.hosts[1], &hosts[1], "pmm-verify", &[]);
    ok(&verified, "pmm-verify");
    let summary = String::from_utf8_lossy(&verified.stdout).to_string();
    assert!(summary.contains("\"ok\":true"), "{summary}");
    // The Merkle root, recomputed from the export in a file of its own.
    let file = Pmm::new();
    std::fs::write(file.path("x.jsonl"), &all[0]).unwrap();
    let r = file.run("pmm-append", &["--import", "x.jsonl"], "");
    assert_eq!(r.code, 0, "{r:?}");
    let root = run_in(&net.hosts[2], &hosts[2], "pmm-verify", &["--root"]);
    ok(&root, "--root");
    assert_eq!(
        String::from_utf8_lossy(&root.stdout),
        file.run("pmm-verify", &["--root"], "").stdout
    );
}

#[test]
fn a_host_cut_off_while_it_holds_the_head_lock_forks_nothing_and_frees_the_lock() {
    let Some(net) = Net::make("c", 2) else {
        return;
    };
    let Some(server) = PgServer::start_in(Some(&net.server), &net.listen(), &["10.77.0.0/16"], &[])
    else {
        return;
    };
    let db = new_database(&server);
    let hosts: Vec<Pmm> = (0..2).map(|i| host(&net, &server, &db, i)).collect();
    ok(
        &run_in(
            &net.hosts[0],
            &hosts[0],
            "pmm-append",
            &["--kind", "user_message", "--content", "before"],
        ),
        "first",
    );
    let before = run_in(
        &net.hosts[1],
        &hosts[1],
        "pmm-export",
        &["--format", "jsonl"],
    )
    .stdout;
    // Host 0 ticks and waits inside its write transaction (the testing aid), holding the lock.
    let mut tick = spawn_in(
        &net.hosts[0],
        &hosts[0],
        "pmm-tick",
        &[],
        &[("PMM_TEST_TICK_PAUSE_MS", "120000")],
    );
    let held = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        server
            .psql(&db, "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'pmm_head' AND l.mode = 'RowShareLock' AND l.granted")
            .is_ok_and(|n| n.trim() != "0")
    });
    assert!(held, "host 0's tick holds the head row");
    // Its link goes down: the server hears nothing more from it.
    in_ns(&net.hosts[0], &["ip", "link", "set", &net.link(0), "down"]).unwrap();
    let started = Instant::now();
    let out = run_in(
        &net.hosts[1],
        &hosts[1],
        "pmm-append",
        &[
            "--busy-timeout",
            "90000",
            "--kind",
            "user_message",
            "--content",
            "after the cut",
        ],
    );
    let waited = started.elapsed();
    ok(&out, "host 1 appends once the lock is freed");
    assert!(
        waited < Duration::from_secs(60),
        "freed by keepalives or the idle timeout: {waited:?}"
    );
    let _ = tick.kill();
    let _ = tick.wait();
    let after = run_in(
        &net.hosts[1],
        &hosts[1],
        "pmm-export",
        &["--format", "jsonl"],
    )
    .stdout;
    let (before, after) = (
        String::from_utf8(before).unwrap(),
        String::from_utf8(after).unwrap(),
    );
    assert!(after.starts_with(&before));
    assert_eq!(
        after.lines().count(),
        before.lines().count() + 1,
        "nothing of the cut-off tick: {after}"
    );
    // The link comes back: host 0 goes on from the same chain.
    in_ns(&net.hosts[0], &["ip", "link", "set", &net.link(0), "up"]).unwrap();
    ok(
        &run_in(
            &net.hosts[0],
            &hosts[0],
            "pmm-append",
            &["--kind", "user_message", "--content", "back"],
        ),
        "host 0 again",
    );
    ok(
        &run_in(&net.hosts[0], &hosts[0], "pmm-verify", &[]),
        "verify",
    );
}
