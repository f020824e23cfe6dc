//! `pmm-mcp`'s HTTP half: the `--http` flags, the tokens file (`--new-token`, `--revoke`,
//! `--tokens`), TLS files, and the runtime that serves [`crate::mcp::http`] until SIGTERM.

use crate::mcp::http::{self, Auth, Door, Limits, TokenSource};
use crate::mcp::tokens::{Scope, Tokens};
use crate::mcp::{Config, Server};
use anyhow::Context;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The flags of `pmm-mcp --http` and of the tokens file.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "HTTP (Streamable HTTP transport, for remote clients)")]
pub struct HttpArgs {
    /// Serve MCP's Streamable HTTP transport at http://ADDR/mcp instead of stdio. ADDR is PORT
    /// (on 127.0.0.1), HOST:PORT (an IPv6 HOST in brackets); port 0 takes a free one (the address is printed
    /// on stderr). Needs --tokens (or --no-auth on loopback)
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,

    /// The tokens file: who may call and with which scope (only sha256 hashes of the secrets).
    /// Read again when it changes, so --new-token and --revoke take effect at the next request
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<PathBuf>,

    /// Make a token NAME in --tokens FILE (created if missing, mode 0600), print
    /// {"name","scope","token"} once on stdout and exit. Only its hash is stored: a lost
    /// secret is revoked and made anew
    #[arg(long, value_name = "NAME", requires = "scope", conflicts_with_all = ["http", "revoke"])]
    pub new_token: Option<String>,

    /// The scope of --new-token: read (recall, state, events, verify, prove, the resources),
    /// write (everything but the admin tools) or admin (everything, correct and forget too)
    #[arg(long, value_parser = ["read", "write", "admin"], requires = "new_token")]
    pub scope: Option<String>,

    /// Remove the token NAME from --tokens FILE and exit; a running server refuses it from its
    /// next request
    #[arg(long, value_name = "NAME", conflicts_with = "http")]
    pub revoke: Option<String>,

    /// DANGEROUS: serve --http with no authentication at all; anyone who can reach the port reads
    /// and writes the ledger. Only on a loopback address
    #[arg(long = "no-auth", conflicts_with = "tokens")]
    pub no_auth: bool,

    /// Serve plain HTTP on an address that is not loopback. Bearer tokens then cross the wire in
    /// clear, readable by anyone on the path: prefer --tls-cert/--tls-key or a TLS proxy in front
    #[arg(long)]
    pub insecure_http: bool,

    /// One more host name (or HOST:PORT) clients may use in Host and Origin (repeatable). The
    /// loopback names and the bound address are always allowed; others get 403 (DNS rebinding)
    #[arg(long, value_name = "HOST")]
    pub allowed_host: Vec<String>,

    /// Serve HTTPS with this certificate chain (PEM); with --tls-key
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// The endpoint's URL as clients reach it through a proxy in front (e.g.
    /// `https://mind.example.org/mcp`): the 401's resource_metadata and the metadata document
    /// name it instead of this server's scheme and the request's Host; its host is allowed
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,

    /// The largest request body in bytes (K, M suffixes); larger ones get 413
    #[arg(long, value_name = "BYTES", default_value = "4M", value_parser = parse_size)]
    pub max_body: usize,

    /// Sessions one token may hold at once; opening one more ends its least recently used
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub sessions_per_token: u32,

    /// A session unused this many seconds ends (the client initializes anew)
    #[arg(long, value_name = "SECS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub session_idle: u64,

    /// A client gets this many seconds to send a request's head (and, with TLS, to finish the
    /// handshake); a slower one's connection is closed. An idle kept-alive connection too
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout: u64,

    /// A client gets this many seconds to send a request's body; a slower one gets 408
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_timeout: u64,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1usize << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .filter(|n| (1..=(1usize << 30)).contains(n))
        .ok_or_else(|| format!("'{s}' is not a size from 1 to 1G (e.g. 4M)"))
}

fn bad(msg: impl std::fmt::Display) -> anyhow::Error {
    crate::Error::bad_input(None, msg).into()
}

/// `--new-token` and `--revoke`: done here, and the program exits.
pub fn manage_tokens(a: &HttpArgs, clock: &crate::event::Clock) -> anyhow::Result<bool> {
    if a.new_token.is_none() && a.revoke.is_none() {
        return Ok(false);
    }
    let Some(file) = &a.tokens else {
        return Err(bad("--new-token and --revoke need --tokens FILE"));
    };
    let mut tokens = read_tokens(file, true)?;
    if let Some(name) = &a.new_token {
        let scope = Scope::parse(a.scope.as_deref().unwrap_or("read")).map_err(bad)?;
        let secret = tokens.add(name, scope, clock.ts()).map_err(bad)?;
        write_tokens(file, &tokens)?;
        let line = serde_json::json!({"name": name, "scope": scope.as_str(), "token": secret});
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|_| out.flush())?;
    } else if let Some(name) = &a.revoke {
        if !tokens.revoke(name) {
            return Err(bad(format!("{}: no token named '{name}'", file.display())));
        }
        write_tokens(file, &tokens)?;
    }
    Ok(true)
}

fn read_tokens(file: &Path, missing_ok: bool) -> anyhow::Result<Tokens> {
    match tokens_text(file) {
        Ok(t) => Tokens::parse(&t).map_err(|e| bad(format!("{}: {e}", file.display()))),
        Err(crate::Error::Io { source, .. })
            if missing_ok && source.kind() == std::io::ErrorKind::NotFound =>
        {
            Ok(Tokens::default())
        }
        Err(e) => Err(e.into()),
    }
}

/// The tokens file's text, read as ssh reads an `authorized_keys` file: a regular file, owned
/// by this user (or root), that neither group nor others may write, in a directory they may
/// not write either (unless it is sticky, as `/tmp`); else anyone who can write it could add a
/// token of their own. At most [`crate::lines::MAX_SMALL_FILE`] bytes (about 7,000 tokens)
/// are read: a file linked to `/dev/zero` or grown without end is refused, not loaded. The
/// checks are made on the opened file, so it cannot be swapped between them and the read.
fn tokens_text(file: &Path) -> crate::Result<String> {
    let refuse = |why: String| -> crate::Result<String> {
        Err(crate::Error::bad_input(
            Some(file.display().to_string()),
            format!("{why}; refused, as ssh refuses such a key file"),
        ))
    };
    let f = std::fs::File::open(file).map_err(|e| crate::Error::io(file, e))?;
    let m = f.metadata().map_err(|e| crate::Error::io(file, e))?;
    if !m.is_file() {
        return refuse("not a regular file".into());
    }
    if let Some(why) = writable_by_others(m.mode(), m.uid(), false) {
        return refuse(format!(
            "{why} (mode {:04o}): chmod 600 {}",
            m.mode() & 0o7777,
            file.display()
        ));
    }
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let d = std::fs::metadata(dir).map_err(|e| crate::Error::io(dir, e))?;
    if let Some(why) = writable_by_others(d.mode(), d.uid(), true) {
        return refuse(format!(
            "its directory {} is {why} (mode {:04o}): chmod go-w {}",
            dir.display(),
            d.mode() & 0o7777,
            dir.display()
        ));
    }
    let limit = crate::lines::MAX_SMALL_FILE;
    let text = crate::lines::read_bounded(&mut std::io::BufReader::new(f), u64::MAX, limit)
        .map_err(|e| {
            if e.over_limit() {
                crate::Error::bad_input(Some(file.display().to_string()), e.to_string())
            } else {
                crate::Error::io(file, e.error)
            }
        })?;
    String::from_utf8(text).map_err(|_| crate::Error::NotUtf8 {
        at: file.display().to_string(),
    })
}

/// Why a file (or, `dir`, a directory) of this `mode` and owner `uid` lets someone else
/// change the tokens: another owner than this user or root, or write permission for group or
/// others (on a directory, unless it is sticky: then only a file's owner may replace it).
fn writable_by_others(mode: u32, uid: u32, dir: bool) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if uid != me && uid != 0 {
        return Some(format!(
            "owned by user {uid}, not by this user ({me}) or root"
        ));
    }
    let sticky = dir && mode & 0o1000 != 0;
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        _ if sticky => None,
        (_, true) => Some("writable by others".into()),
        (true, false) => Some("writable by its group".into()),
        (false, false) => None,
    }
}

/// Written to a temporary file beside it (mode 0600) and renamed over it: never half a file,
/// never readable by others.
fn write_tokens(file: &Path, tokens: &Tokens) -> anyhow::Result<()> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| crate::Error::io(dir, e))?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(|e| crate::Error::io(file, e))?;
    tmp.write_all(tokens.to_text().as_bytes())
        .and_then(|_| tmp.as_file().sync_all())
        .map_err(|e| crate::Error::io(file, e))?;
    tmp.persist(file)
        .map_err(|e| crate::Error::io(file, e.error))?;
    Ok(())
}

/// What identifies a version of the tokens file: inode, size, mtime (s, ns), mode, owner.
type Stamp = (u64, u64, i64, i64, u32, u32);

/// The tokens file, read again whenever it changes (inode, size or mtime).
struct FileTokens {
    path: PathBuf,
    cache: Mutex<Option<(Stamp, Arc<Tokens>)>>,
}

impl TokenSource for FileTokens {
    fn tokens(&self) -> Result<Arc<Tokens>, String> {
        let m =
            std::fs::metadata(&self.path).map_err(|e| format!("{}: {e}", self.path.display()))?;
        // The mode and owner too: a file made writable by others is refused from then on.
        let stamp = (
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.mode(),
            m.uid(),
        );
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, t)) = cache.as_ref() {
            if *s == stamp {
                return Ok(t.clone());
            }
        }
        let text = tokens_text(&self.path).map_err(|e| e.to_string())?;
        let t =
            Arc::new(Tokens::parse(&text).map_err(|e| format!("{}: {e}", self.path.display()))?);
        *cache = Some((stamp, t.clone()));
        Ok(t)
    }
}

fn tls(cert: &Path, key: &Path) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    // Through the bounded reader: `/dev/zero` is refused after 1 MiB, not read until memory
    // runs out.
    let cert_pem = crate::cli::read_small_file(cert)?;
    let key_pem = crate::cli::read_small_file(key)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| {
            bad(format!(
                "{}: not a PEM certificate chain ({e})",
                cert.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(bad(format!("{}: no certificate in it", cert.display())));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| bad(format!("{}: not a PEM private key ({e})", key.display())))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map(|b| b.with_no_client_auth())
    .and_then(|b| b.with_single_cert(certs, key))
    .map_err(|e| bad(format!("the TLS certificate and key: {e}")))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

/// What `--http` will serve, checked before the ledger is opened.
pub struct Plan {
    addr: http::Addr,
    auth: Auth,
    tls: Option<tokio_rustls::TlsAcceptor>,
    public_url: Option<http::PublicUrl>,
}

/// The checked `--http` flags, or `None` for stdio.
pub fn plan(a: &HttpArgs) -> anyhow::Result<Option<Plan>> {
    let Some(addr) = &a.http else {
        for (set, flag) in [
            (a.no_auth, "--no-auth"),
            (a.insecure_http, "--insecure-http"),
            (!a.allowed_host.is_empty(), "--allowed-host"),
            (a.tls_cert.is_some(), "--tls-cert"),
            (a.public_url.is_some(), "--public-url"),
        ] {
            if set {
                return Err(bad(format!("{flag} goes with --http ADDR")));
            }
        }
        return Ok(None);
    };
    let addr = http::resolve(addr).map_err(|e| bad(format!("--http {e}")))?;
    let public_url = a
        .public_url
        .as_deref()
        .map(http::PublicUrl::parse)
        .transpose()
        .map_err(|e| bad(format!("--public-url {e}")))?;
    let loopback = addr.ip().is_loopback();
    let auth = match (&a.tokens, a.no_auth) {
        (Some(file), false) => {
            // Read now: a missing or broken file is a usage error, not 503 on every request.
            read_tokens(file, false)?;
            Auth::Tokens(Arc::new(FileTokens {
                path: file.clone(),
                cache: Mutex::new(None),
            }))
        }
        (None, true) if loopback => Auth::Nobody,
        (None, true) => {
            return Err(bad(format!(
                "--no-auth serves only a loopback address (not {addr}): use --tokens FILE"
            )))
        }
        _ => {
            return Err(bad(
                "--http needs --tokens FILE (make one: pmm-mcp --new-token NAME --scope read \
                 --tokens FILE), or --no-auth on a loopback address",
            ))
        }
    };
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(c), Some(k)) => Some(tls(c, k)?),
        _ => None,
    };
    if !loopback && tls.is_none() && !a.insecure_http {
        return Err(bad(format!(
            "--http {addr} is not a loopback address and serves plain HTTP: bearer tokens would \
             cross the network in clear. Add --tls-cert/--tls-key, put a TLS proxy in front and \
             bind 127.0.0.1, or say --insecure-http"
        )));
    }
    Ok(Some(Plan {
        addr,
        auth,
        tls,
        public_url,
    }))
}

/// Serves `cfg` over HTTP as `plan` says until SIGTERM or SIGINT; the writes in flight finish.
pub fn serve(a: &HttpArgs, plan: Plan, cfg: Config, quiet: bool) -> anyhow::Result<()> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    if !plan.addr.ip().is_unspecified() {
        hosts.push(plan.addr.ip().to_string());
    }
    hosts.extend(a.allowed_host.iter().cloned());
    if let Some(p) = &plan.public_url {
        hosts.push(if p.host.contains(':') {
            format!("[{}]", p.host)
        } else {
            p.host.clone()
        });
    }
    let limits = Limits {
        max_body: a.max_body,
        sessions_per_token: a.sessions_per_token as usize,
        session_idle: std::time::Duration::from_secs(a.session_idle),
        header_timeout: std::time::Duration::from_secs(a.header_timeout),
        body_timeout: std::time::Duration::from_secs(a.body_timeout),
        ..Limits::default()
    };
    let scheme = if plan.tls.is_some() { "https" } else { "http" };
    let no_auth = matches!(plan.auth, Auth::Nobody);
    let door = Door {
        allowed_hosts: hosts,
        auth: plan.auth,
        tls: plan.tls,
        public_url: plan.public_url,
        limits,
        log: Arc::new(|m: &str| eprintln!("pmm-mcp: {m}")),
    };
    let db = cfg.db.clone();
    let read_only = cfg.read_only;
    // A worker per core: the sessions' HTTP, JSON and SSE work in parallel, beside the tool
    // calls on the blocking pool (one thread for all of it halved the throughput of 8
    // clients against 8 stdio servers).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(async {
        let (listener, local) = http::bind(plan.addr)
            .await
            .map_err(|e| bad(format!("--http {}: cannot listen ({e})", plan.addr)))?;
        if !quiet {
            eprintln!(
                "pmm-mcp: serving {}{} on {scheme}://{local}/mcp{}",
                crate::store::shown(&db),
                if read_only { " (read-only)" } else { "" },
                if no_auth {
                    " WITHOUT AUTHENTICATION (--no-auth)"
                } else {
                    ""
                }
            );
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot catch SIGTERM")?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        http::serve(listener, Server::new(cfg), door, shutdown)
            .await
            .context("the HTTP server failed")?;
        if !quiet {
            eprintln!("pmm-mcp: stopped; the calls in flight were finished");
        }
        anyhow::Ok(())
    })?;
    // Dropping the runtime waits for the writes still on the blocking pool.
    drop(rt);
    Ok(())
}
