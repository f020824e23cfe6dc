//! A throwaway PostgreSQL server for tests, from Debian's server binaries (the stub-model habit,
//! for a database): `initdb -A trust` and `pg_ctl start` in a temporary directory, on a free
//! loopback port, as the `postgres` user when the tests run as root (the server refuses to run
//! as root). Stopped when dropped, and by a watchdog when the test process ends without
//! dropping it (a shared server in a static).
//!
//! Where no server binaries exist, [`PgServer::start`] says so and gives `None` (the test
//! skips), unless `PMM_REQUIRE_POSTGRES=1`, where it fails: CI installs Debian's `postgresql`.
//! `PMM_POSTGRES_BIN` names the directory of `initdb` and `pg_ctl` when they are elsewhere.
//!
//! The library's contract tests include this file too (`store/postgres/tests.rs`), so it uses
//! nothing but std, libc and tempfile.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// A running server; each test takes a database of its own ([`PgServer::database`]).
pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    watchdog: Mutex<Option<Child>>,
    /// The network namespace it runs in (`ip netns exec`), if not this one.
    netns: Option<String>,
}

static DATABASES: AtomicU32 = AtomicU32::new(0);

/// The directory of the server binaries, if there is one.
pub fn server_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PMM_POSTGRES_BIN") {
        return Some(PathBuf::from(dir)).filter(|d| d.join("initdb").is_file());
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn required() -> bool {
    std::env::var("PMM_REQUIRE_POSTGRES").is_ok_and(|v| v == "1")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn id_of(flag: &str) -> u32 {
    let out = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .expect("id runs");
    assert!(
        out.status.success(),
        "running as root, the tests start PostgreSQL as the postgres user, which does not exist"
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

impl PgServer {
    /// Starts a server, or says why not and gives `None` (a panic with
    /// `PMM_REQUIRE_POSTGRES=1`).
    pub fn start() -> Option<PgServer> {
        Self::start_with(&[])
    }

    /// [`PgServer::start`] with more `-c name=value` server settings.
    pub fn start_with(settings: &[&str]) -> Option<PgServer> {
        Self::start_in(None, "127.0.0.1", &[], settings)
    }

    /// A server in network namespace `netns` (when given) listening on `listen` (PostgreSQL's
    /// `listen_addresses`), trusting connections from the networks `trusted` (CIDR) as well
    /// as the loopback.
    pub fn start_in(
        netns: Option<&str>,
        listen: &str,
        trusted: &[&str],
        settings: &[&str],
    ) -> Option<PgServer> {
        let Some(bin) = server_bin() else {
            assert!(
                !required(),
                "PMM_REQUIRE_POSTGRES=1 but no PostgreSQL server binaries were found (apt-get install postgresql, or set PMM_POSTGRES_BIN)"
            );
            eprintln!(
                "skipped: no PostgreSQL server binaries (/usr/lib/postgresql/*/bin or PMM_POSTGRES_BIN); install Debian's postgresql to run this test"
            );
            return None;
        };
        let as_postgres = unsafe { libc::geteuid() } == 0;
        let dir = tempfile::Builder::new()
            .prefix("pmm-pg-")
            .tempdir_in("/tmp")
            .expect("a temporary directory");
        if as_postgres {
            std::os::unix::fs::chown(dir.path(), Some(id_of("-u")), Some(id_of("-g")))
                .expect("the server's directory given to postgres");
        }
        let mut server = PgServer {
            dir,
            bin,
            port: 0,
            as_postgres,
            watchdog: Mutex::new(None),
            netns: netns.map(str::to_string),
        };
        let data = server.data();
        let init = server
            .command("initdb")
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .arg("-D")
            .arg(&data)
            .output()
            .expect("initdb runs");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        if !trusted.is_empty() {
            use std::io::Write;
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("pg_hba.conf"))
                .expect("pg_hba.conf");
            for net in trusted {
                writeln!(hba, "host all all {net} trust").unwrap();
            }
        }
        let mut last = String::new();
        for _ in 0..3 {
            server.port = free_port();
            let mut opts = format!(
                "-p {} -k {} -c listen_addresses={listen} -c fsync=off -c max_connections=60",
                server.port,
                server.dir.path().display()
            );
            for s in settings {
                opts.push_str(&format!(" -c {s}"));
            }
            let started = server
                .command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(server.dir.path().join("log"))
                .args(["-w", "-t", "60", "-o", &opts, "start"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .output()
                .expect("pg_ctl runs");
            if started.status.success() {
                server.watch();
                return Some(server);
            }
            last = format!(
                "{}{}",
                String::from_utf8_lossy(&started.stderr),
                std::fs::read_to_string(server.dir.path().join("log")).unwrap_or_default()
            );
        }
        panic!("PostgreSQL did not start: {last}");
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A server program, run as the postgres user when the tests run as root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut argv: Vec<std::ffi::OsString> = Vec::new();
        if let Some(ns) = &self.netns {
            argv.extend(["ip", "netns", "exec", ns].map(Into::into));
        }
        if self.as_postgres {
            argv.extend(["runuser", "-u", "postgres", "--"].map(Into::into));
        }
        argv.push(path.into());
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    }

    /// Stops the server when this process ends, if [`Drop`] did not (a server in a static).
    fn watch(&self) {
        let stop = format!(
            "{}'{}' stop -D '{}' -m immediate",
            if self.as_postgres {
                "runuser -u postgres -- "
            } else {
                ""
            },
            self.bin.join("pg_ctl").display(),
            self.data().display()
        );
        let script = format!(
            "while kill -0 {} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf '{}'",
            std::process::id(),
            self.dir.path().display()
        );
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        *self.watchdog.lock().unwrap() = child;
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory of its files (`data/`, `log`, the socket).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The URL of database `db` as the superuser, without TLS.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{db}?sslmode=disable",
            self.port
        )
    }

    /// Runs `sql` with psql as the superuser in database `db`: its output.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        self.psql_as("postgres", db, sql)
    }

    /// Runs `sql` with psql as role `user` (the server trusts every local role) in database
    /// `db`: its output.
    pub fn psql_as(&self, user: &str, db: &str, sql: &str) -> Result<String, String> {
        let mut psql = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(self.bin.join("psql"));
                c
            }
            None => Command::new(self.bin.join("psql")),
        };
        let out = psql
            .args([
                "-X",
                "-q",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-U",
                user,
            ])
            .args(["-p", &self.port.to_string(), "-d", db, "-c", sql])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// A new empty database: its URL.
    pub fn database(&self) -> String {
        let name = format!(
            "t{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::Relaxed)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"))
            .expect("CREATE DATABASE");
        self.url(&name)
    }

    /// Restarts the server (`pg_ctl restart -m fast`: every session is ended) on the same
    /// port, waiting until it accepts connections again.
    pub fn restart(&self) {
        let out = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .args(["-w", "-t", "60", "-m", "fast", "restart"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output()
            .expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Some(mut w) = self.watchdog.lock().unwrap().take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}
