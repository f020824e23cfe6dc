//! `postgres://` and `postgresql://` URLs as `--db` and `PMM_DB` take them: libpq's URL form
//! (`postgresql://[user[:password]@][host][:port][/dbname][?param=value&…]`) with the query
//! parameters pmm supports, each one read and none ignored: an unknown parameter is refused.
//!
//! rust-postgres reads no `PG*` variable and no password file (rust-postgres#654, #729), so
//! what libpq would take from the environment is read here: the password from the URL, else
//! `PGPASSWORD`, else the password file (`PGPASSFILE`, default `~/.pgpass`, skipped when group
//! or others can read it, as libpq does); the user from the URL, else `PGUSER`, else the login
//! name; the host from the URL, else `PGHOST`, else the local socket directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the connection is protected (libpq's `sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, the certificate unchecked (libpq's default).
    Prefer,
    /// TLS or no connection, the certificate unchecked (checked against `sslrootcert` when
    /// one is given, as libpq does).
    Require,
    /// TLS, the certificate signed by `sslrootcert`.
    VerifyCa,
    /// TLS, the certificate signed by `sslrootcert` and naming the host.
    VerifyFull,
}

/// A parsed URL: the client's configuration and how to protect the connection.
#[derive(Debug, Clone)]
pub struct Target {
    /// rust-postgres's configuration (host, port, user, password, database, timeouts).
    pub config: postgres::Config,
    /// `sslmode`.
    pub ssl: SslMode,
    /// The root certificate(s) to verify the server with (`sslrootcert`, or libpq's default
    /// `~/.postgresql/root.crt` when it exists).
    pub root_cert: Option<PathBuf>,
    /// The URL with its password left out, for messages.
    pub shown: String,
}

/// The query parameters pmm reads; anything else is refused.
pub const PARAMETERS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "connect_timeout",
    "application_name",
    "host",
    "port",
    "user",
    "password",
    "dbname",
];

/// Whether `db` names a PostgreSQL database rather than a file.
pub fn is_postgres_url(db: &str) -> bool {
    let lower = db.get(..13).unwrap_or(db).to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// What the environment gives a URL: variables by name and the home directory (a function,
/// so that tests need not change the process's environment).
pub struct Env<'a> {
    /// A variable's value.
    pub var: &'a dyn Fn(&str) -> Option<String>,
}

impl Env<'_> {
    /// The process's environment.
    pub fn process() -> Env<'static> {
        Env {
            var: &|k| std::env::var(k).ok().filter(|v| !v.is_empty()),
        }
    }
}

/// Parses `url` (see the module docs); a message saying what is wrong otherwise.
pub fn parse(url: &str, env: &Env<'_>) -> Result<Target, String> {
    if !is_postgres_url(url) {
        return Err(format!(
            "'{}' is not a postgres:// or postgresql:// URL",
            shown(url)
        ));
    }
    let mut config = postgres::Config::new();
    let (mut said, query) = split(url)?;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        parameter(&mut said, &mut config, pair)?;
    }
    let default_port = hosts_and_port(&mut said, env)?;
    for (h, p) in &said.hosts {
        config.host(h);
        config.port(p.unwrap_or(default_port));
    }
    let user = match said.user.take().or_else(|| (env.var)("PGUSER")) {
        Some(u) => u,
        None => (env.var)("USER")
            .or_else(|| (env.var)("LOGNAME"))
            .ok_or("no user in the URL, and neither PGUSER nor USER is set")?,
    };
    config.user(&user);
    let dbname = said.dbname.take().unwrap_or_else(|| user.clone());
    config.dbname(&dbname);
    if let Some(p) = password(&mut said, env, default_port, &dbname, &user) {
        config.password(p);
    }
    let root_cert = root_cert(&said, env)?;
    config.ssl_mode(match said.ssl {
        SslMode::Disable => postgres::config::SslMode::Disable,
        SslMode::Prefer => postgres::config::SslMode::Prefer,
        _ => postgres::config::SslMode::Require,
    });
    Ok(Target {
        config,
        ssl: said.ssl,
        root_cert,
        shown: shown(url),
    })
}

/// What a URL says, before the environment fills in what it leaves out.
struct Said {
    user: Option<String>,
    password: Option<String>,
    hosts: Vec<(String, Option<u16>)>,
    dbname: Option<String>,
    ssl: SslMode,
    root_cert: Option<PathBuf>,
    port: Option<u16>,
}

/// The user, password, hosts and database of `url`, and its query string.
fn split(url: &str) -> Result<(Said, &str), String> {
    let scheme_end = url.find("://").map(|i| i + 3).unwrap_or(0);
    let (base, query) = match url.find('?') {
        Some(i) => (&url[..i], &url[i + 1..]),
        None => (url, ""),
    };
    let rest = &base[scheme_end..];
    if rest.contains('#') {
        return Err("a PostgreSQL URL has no #fragment".into());
    }
    // A password holding an unencoded '/' or '?' would be read as a host and a port, or a
    // query, and an error would show part of it: refused as it is, shown nowhere.
    let misread = match userinfo_end(&url[scheme_end..]) {
        Some(at) => url[scheme_end..scheme_end + at].contains(['/', '?']),
        None => false,
    };
    if misread {
        return Err("the user or password part of the URL holds a '/' or '?': percent-encode them (%2F, %3F), and '@' as %40".into());
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    let mut said = Said {
        user: None,
        password: None,
        hosts: Vec::new(),
        dbname: None,
        ssl: SslMode::Prefer,
        root_cert: None,
        port: None,
    };
    if let Some(ui) = userinfo {
        let (u, p) = match ui.find(':') {
            Some(i) => (&ui[..i], Some(&ui[i + 1..])),
            None => (ui, None),
        };
        if !u.is_empty() {
            said.user = Some(decode(u, "the user")?);
        }
        if let Some(p) = p {
            said.password = Some(decode(p, "the password")?);
        }
    }
    if !hostport.is_empty() {
        for hp in hostport.split(',') {
            said.hosts.push(split_host_port(hp)?);
        }
    }
    if !path.is_empty() {
        said.dbname = Some(decode(path, "the database name")?);
    }
    Ok((said, query))
}

/// One `key=value` of the query string (libpq's names; see [`PARAMETERS`]).
fn parameter(said: &mut Said, config: &mut postgres::Config, pair: &str) -> Result<(), String> {
    let (k, v) = match pair.find('=') {
        Some(i) => (&pair[..i], &pair[i + 1..]),
        None => {
            // Not echoed: a stray piece of the URL may be part of a password.
            return Err("a URL parameter has no value (each is NAME=VALUE, joined by '&')".into());
        }
    };
    let k = decode(k, "a parameter name")?;
    let v = decode(v, &format!("parameter {k}"))?;
    match k.as_str() {
        "sslmode" => said.ssl = ssl_mode(&v)?,
        "sslrootcert" => {
            if v == "system" {
                return Err(
                    "sslrootcert=system is not supported: name a file of PEM certificates".into(),
                );
            }
            said.root_cert = Some(PathBuf::from(v));
        }
        "connect_timeout" => {
            let secs: u64 = v
                .trim()
                .parse()
                .map_err(|_| format!("connect_timeout={v}: expected a whole number of seconds"))?;
            // libpq: 0 means wait forever; 1 is taken as 2.
            if secs > 0 {
                config.connect_timeout(Duration::from_secs(secs.max(2)));
            }
        }
        "application_name" => {
            config.application_name(&v);
        }
        "host" => said
            .hosts
            .extend(v.split(',').map(|h| (h.to_string(), None))),
        "port" => {
            said.port = Some(
                v.parse::<u16>()
                    .map_err(|_| format!("port={v}: expected a port number"))?,
            );
        }
        "user" => said.user = Some(v),
        "password" => said.password = Some(v),
        "dbname" => said.dbname = Some(v),
        other => {
            return Err(format!(
                "URL parameter '{other}' is not supported (pmm reads {})",
                PARAMETERS.join(", ")
            ))
        }
    }
    Ok(())
}

/// `sslmode=`'s value.
fn ssl_mode(v: &str) -> Result<SslMode, String> {
    Ok(match v {
        "disable" => SslMode::Disable,
        "prefer" => SslMode::Prefer,
        "require" => SslMode::Require,
        "verify-ca" => SslMode::VerifyCa,
        "verify-full" => SslMode::VerifyFull,
        "allow" => {
            return Err("sslmode=allow is not supported (use disable, prefer, require, verify-ca or verify-full)".into())
        }
        _ => {
            return Err(format!(
                "sslmode={v}: expected disable, prefer, require, verify-ca or verify-full"
            ))
        }
    })
}

/// The hosts (`PGHOST`, else the local socket directory, else localhost, when the URL names
/// none) and the port of those that name none (`port=`, else `PGPORT`, else 5432).
fn hosts_and_port(said: &mut Said, env: &Env<'_>) -> Result<u16, String> {
    if said.hosts.is_empty() {
        let h = (env.var)("PGHOST").unwrap_or_else(|| {
            if Path::new("/var/run/postgresql").is_dir() {
                "/var/run/postgresql".into()
            } else {
                "localhost".into()
            }
        });
        said.hosts.push((h, None));
    }
    Ok(match said.port {
        Some(p) => p,
        None => match (env.var)("PGPORT") {
            Some(p) => p
                .parse()
                .map_err(|_| format!("PGPORT={p}: expected a port number"))?,
            None => 5432,
        },
    })
}

/// The password: the URL's, else `PGPASSWORD`, else the password file's line for the first
/// host (`PGPASSFILE`, else `~/.pgpass`).
fn password(
    said: &mut Said,
    env: &Env<'_>,
    default_port: u16,
    dbname: &str,
    user: &str,
) -> Option<String> {
    if let Some(p) = said.password.take().or_else(|| (env.var)("PGPASSWORD")) {
        return Some(p);
    }
    let file = (env.var)("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| (env.var)("HOME").map(|h| Path::new(&h).join(".pgpass")))?;
    let (h, p) = &said.hosts[0];
    let h = if h.starts_with('/') { "localhost" } else { h };
    password_from_file(&file, h, p.unwrap_or(default_port), dbname, user)
}

/// The file of root certificates TLS checks the server against: `sslrootcert=`, else
/// `~/.postgresql/root.crt` when TLS is asked for; `verify-ca` and `verify-full` need one.
fn root_cert(said: &Said, env: &Env<'_>) -> Result<Option<PathBuf>, String> {
    let ssl = said.ssl;
    let mut root_cert = said.root_cert.clone();
    let tls = matches!(
        ssl,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
    ) || (ssl == SslMode::Prefer && root_cert.is_some());
    if !tls {
        return Ok(root_cert);
    }
    if root_cert.is_none() {
        root_cert = (env.var)("HOME")
            .map(|h| Path::new(&h).join(".postgresql/root.crt"))
            .filter(|p| p.is_file());
    }
    if root_cert.is_none() && matches!(ssl, SslMode::VerifyCa | SslMode::VerifyFull) {
        return Err(format!(
            "sslmode={} needs the certificate that signed the server's: sslrootcert=FILE (or ~/.postgresql/root.crt)",
            if ssl == SslMode::VerifyCa { "verify-ca" } else { "verify-full" }
        ));
    }
    Ok(root_cert)
}

/// `url` with the password, if any, replaced by `***`: the one in the user part (up to its
/// last `@`, so that a password holding an unencoded `/`, `?` or `@` is masked whole) and every
/// `password=` parameter, whatever its case or percent-encoding (`pass%77ord=`).
pub fn shown(url: &str) -> String {
    let scheme_end = url.find("://").map(|i| i + 3).unwrap_or(0);
    let (head, rest) = url.split_at(scheme_end);
    let (mut out, query) = match userinfo_end(rest) {
        Some(at) => {
            let ui = &rest[..at];
            let user = ui.find(':').map_or(ui, |c| &ui[..c]);
            let masked = if user.len() < ui.len() { ":***" } else { "" };
            let after = &rest[at..];
            let (authority, query) = match after.find('?') {
                Some(q) => (&after[..q], Some(&after[q + 1..])),
                None => (after, None),
            };
            (format!("{head}{user}{masked}{authority}"), query)
        }
        None => match rest.find('?') {
            Some(q) => (format!("{head}{}", &rest[..q]), Some(&rest[q + 1..])),
            None => (url.to_string(), None),
        },
    };
    if let Some(query) = query {
        let masked: Vec<String> = query
            .split('&')
            .map(|p| match p.find('=') {
                Some(i) if is_password_name(&p[..i]) => format!("{}=***", &p[..i]),
                _ => p.to_string(),
            })
            .collect();
        out = format!("{out}?{}", masked.join("&"));
    }
    out
}

/// Where the user part of `rest` (a URL after its `scheme://`) ends: its last `@` before the
/// query, or, when a password holds an unencoded `?`, the `@` after it (the part before it then
/// has a `:` and no `=`, as no query parameter has).
fn userinfo_end(rest: &str) -> Option<usize> {
    let q = rest.find('?').unwrap_or(rest.len());
    if let Some(at) = rest[..q].rfind('@') {
        return Some(at);
    }
    let at = rest.rfind('@')?;
    let before = &rest[..at];
    (before.contains(':') && !before.contains('=') && !before[..q].contains('/')).then_some(at)
}

/// Whether a query parameter's name, percent-decoded, is `password` in any case.
fn is_password_name(name: &str) -> bool {
    decode(name, "").is_ok_and(|n| n.eq_ignore_ascii_case("password"))
        || name.eq_ignore_ascii_case("password")
}

fn split_host_port(hp: &str) -> Result<(String, Option<u16>), String> {
    if let Some(rest) = hp.strip_prefix('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| format!("'{hp}': an IPv6 address without its closing ]"))?;
        let host = rest[..close].to_string();
        let after = &rest[close + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(port(p)?),
            None if after.is_empty() => None,
            None => return Err(format!("'{hp}': expected :PORT after the address")),
        };
        return Ok((host, port));
    }
    match hp.rfind(':') {
        Some(i) => Ok((decode(&hp[..i], "the host")?, Some(port(&hp[i + 1..])?))),
        None => Ok((decode(hp, "the host")?, None)),
    }
}

fn port(p: &str) -> Result<u16, String> {
    p.parse().map_err(|_| format!("'{p}' is not a port number"))
}

/// Percent-decoding (`%2F` → `/`); what is decoded must be UTF-8.
fn decode(s: &str, what: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("{what}: '%' not followed by two hex digits"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{what}: not UTF-8 once decoded"))
}

/// The password the password file gives `host:port:dbname:user` (libpq's format: one
/// `hostname:port:database:username:password` a line, `*` matching anything, `\` escaping
/// `:` and `\`, the first matching line winning). `None` when there is no file, no matching
/// line, or the file is readable by group or others (libpq ignores it then too).
pub fn password_from_file(
    file: &Path,
    host: &str,
    port: u16,
    dbname: &str,
    user: &str,
) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let md = std::fs::metadata(file).ok()?;
    if !md.is_file() || md.permissions().mode() & 0o077 != 0 {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let port = port.to_string();
    let want = [host, port.as_str(), dbname, user];
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_pgpass(line);
        if fields.len() < 5 {
            continue;
        }
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields[4..].join(":"));
        }
    }
    None
}

fn split_pgpass(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    fields.last_mut().unwrap().push(n);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres::config::Host;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    /// Issue 44, N1: no spelling of a password survives `shown`, and no parse error shows
    /// a piece of one.
    #[test]
    fn a_password_is_never_shown_however_it_is_spelled() {
        let cases = [
            "postgres://u:S3CRET@h:5/db",
            "postgres://u:S3CRET@h:5/db?sslmode=disable&bogus=1",
            "postgres://u@h/db?pass%77ord=S3CRET&sslmode=disable",
            "postgres://u@h/db?PASSWORD=S3CRET",
            "postgres://u@h/db?password=S3CRET",
            "postgres://u:XQ/S3CRET@h:5/db",
            "postgres://u:XQ?S3CRET@h:5/db",
            "postgres://u:S3@CRET@h:5/db?sslmode=disable",
        ];
        let var = env(&[]);
        for url in cases {
            let shown = shown(url);
            assert!(!shown.contains("S3CRET"), "{url} shown as {shown}");
            assert!(!shown.contains("CRET"), "{url} shown as {shown}");
            if let Err(e) = parse(url, &Env { var: &var }) {
                assert!(!e.contains("CRET") && !e.contains("XQ"), "{url}: {e}");
            }
        }
        assert_eq!(shown("postgres://u:pw@h:5/db"), "postgres://u:***@h:5/db");
        assert_eq!(
            shown("postgres://u@h/db?sslmode=disable&application_name=a@b"),
            "postgres://u@h/db?sslmode=disable&application_name=a@b"
        );
        assert_eq!(
            shown("postgres://u@h/db?pass%77ord=x"),
            "postgres://u@h/db?pass%77ord=***"
        );
    }

    #[test]
    fn a_url_gives_host_port_user_password_and_database() {
        let var = env(&[]);
        let t = parse(
            "postgresql://alice:s%3Acret@db.example:6543/minds?application_name=pmm-test&connect_timeout=7&sslmode=disable",
            &Env { var: &var },
        )
        .unwrap();
        assert_eq!(t.config.get_hosts(), &[Host::Tcp("db.example".into())]);
        assert_eq!(t.config.get_ports(), &[6543]);
        assert_eq!(t.config.get_user(), Some("alice"));
        assert_eq!(t.config.get_password(), Some(&b"s:cret"[..]));
        assert_eq!(t.config.get_dbname(), Some("minds"));
        assert_eq!(t.config.get_application_name(), Some("pmm-test"));
        assert_eq!(
            t.config.get_connect_timeout(),
            Some(&Duration::from_secs(7))
        );
        assert_eq!(t.ssl, SslMode::Disable);
        assert_eq!(
            t.shown,
            "postgresql://alice:***@db.example:6543/minds?application_name=pmm-test&connect_timeout=7&sslmode=disable"
        );
    }

    #[test]
    fn unknown_parameters_and_bad_values_are_refused() {
        let var = env(&[("USER", "u")]);
        let e = Env { var: &var };
        for (url, says) in [
            (
                "postgres://h/db?sslcert=x.pem",
                "'sslcert' is not supported",
            ),
            ("postgres://h/db?target_session_attrs=any", "not supported"),
            ("postgres://h/db?sslmode=maybe", "expected disable, prefer"),
            ("postgres://h/db?sslmode=allow", "not supported"),
            ("postgres://h/db?connect_timeout=soon", "whole number"),
            ("postgres://h/db?sslmode", "has no value"),
            ("postgres://h:99999/db", "not a port"),
            (
                "postgres://h/db?sslmode=verify-full",
                "needs the certificate",
            ),
            ("postgres://h/d%zz", "two hex digits"),
        ] {
            let err = parse(url, &e).unwrap_err();
            assert!(err.contains(says), "{url}: {err}");
        }
    }

    #[test]
    fn the_environment_fills_what_the_url_leaves_out() {
        let var = env(&[
            ("PGUSER", "bob"),
            ("PGPASSWORD", "pw"),
            ("PGHOST", "/tmp/sockets"),
            ("PGPORT", "5433"),
        ]);
        let t = parse("postgres://", &Env { var: &var }).unwrap();
        assert_eq!(t.config.get_user(), Some("bob"));
        assert_eq!(t.config.get_dbname(), Some("bob"));
        assert_eq!(t.config.get_password(), Some(&b"pw"[..]));
        assert_eq!(t.config.get_hosts(), &[Host::Unix("/tmp/sockets".into())]);
        assert_eq!(t.config.get_ports(), &[5433]);
        assert_eq!(t.ssl, SslMode::Prefer);
    }

    #[test]
    fn the_password_file_is_read_as_libpq_reads_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pgpass");
        std::fs::write(
            &f,
            "# comment\nother:5432:*:*:no\ndb.example:5432:minds:alice:first\\:pw\n*:*:*:alice:second\n",
        )
        .unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let pw = |h, p, d, u| password_from_file(&f, h, p, d, u);
        assert_eq!(
            pw("db.example", 5432, "minds", "alice").as_deref(),
            Some("first:pw")
        );
        assert_eq!(
            pw("db.example", 5433, "minds", "alice").as_deref(),
            Some("second")
        );
        assert_eq!(pw("db.example", 5432, "minds", "carol"), None);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            pw("db.example", 5432, "minds", "alice"),
            None,
            "readable by others: skipped"
        );
        let file = f.to_string_lossy().into_owned();
        let var = move |k: &str| match k {
            "PGPASSFILE" => Some(file.clone()),
            _ => None,
        };
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let t = parse("postgres://alice@db.example/minds", &Env { var: &var }).unwrap();
        assert_eq!(t.config.get_password(), Some(&b"first:pw"[..]));
    }

    #[test]
    fn only_postgres_schemes_are_urls() {
        assert!(is_postgres_url("postgres://h/db"));
        assert!(is_postgres_url("PostgreSQL://h/db"));
        assert!(!is_postgres_url("postgres:/h/db"));
        assert!(!is_postgres_url("./postgres"));
        assert!(!is_postgres_url("file:x.db"));
    }
}
