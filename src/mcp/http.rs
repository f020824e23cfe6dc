//! `pmm-mcp --http`: the same server over MCP's Streamable HTTP transport, behind a door.
//!
//! rmcp's [`StreamableHttpService`] speaks the transport (sessions, SSE); everything in front of
//! it is here, on a plain hyper HTTP/1.1 server, checked in this order:
//!
//! 1. `Host` (and `Origin`, when a browser sends one) must name an allowed host: the loopback
//!    names, the bound address, `--allowed-host` values (DNS rebinding) — else 403;
//! 2. `/.well-known/oauth-protected-resource` (RFC 9728) is served to anyone who got past 1;
//! 3. `/mcp` needs `Authorization: Bearer SECRET` of a token in the tokens file (re-read when
//!    it changes, so a revocation takes effect on the next request) — else 401 with
//!    `WWW-Authenticate: Bearer resource_metadata="…"`; the token ([`Caller`]) rides in the
//!    request's extensions to the tools, which refuse a read-scoped one's writes and record
//!    its name as the source of the others;
//! 4. a session belongs to the token that opened it (another token gets 404 for it), a token
//!    has at most [`Limits::sessions_per_token`] (opening one more closes its least recently
//!    used), and a session idle for [`Limits::session_idle`] ends;
//! 5. the body is read whole before anything else sees it, within [`Limits::max_body`] (413),
//!    [`Limits::body_timeout`] (408) and what all bodies may hold at once,
//!    [`Limits::body_budget`] (503); headers within [`Limits::max_headers`] and
//!    [`Limits::max_header_bytes`] (431) and [`Limits::header_timeout`] (the connection is
//!    closed);
//! 6. a POST's body must be a JSON-RPC message, read as the stdio server reads a line
//!    ([`super::framing`]): lone surrogates become U+FFFD, anything else gets the JSON-RPC
//!    error stdio would write (a parse error, `id` null when none can be read), with 400.
//!
//! Connections are admitted by [`super::gate`]: those that have not presented a valid token
//! have a budget of their own, so they can never keep out those that have.
//!
//! Nothing here logs a header's value: secrets never reach the log.

use super::framing::{self, Frame};
use super::gate::{BodyBudget, BodyShare, Budgets, Gate, Promotion, Ticket};
use super::tokens::{Caller, Tokens};
use super::Server;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{
    SessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// A response body.
pub type Body = BoxBody<Bytes, Infallible>;

/// The path of the MCP endpoint.
pub const ENDPOINT: &str = "/mcp";
/// The path of the protected-resource metadata (RFC 9728).
pub const METADATA: &str = "/.well-known/oauth-protected-resource";
const SESSION_HEADER: &str = "mcp-session-id";

/// Where the door finds the tokens (the program reads the file; see [`super::tokens`]).
pub trait TokenSource: Send + Sync {
    /// The tokens as of now, or why they cannot be read (then every request is refused).
    fn tokens(&self) -> Result<Arc<Tokens>, String>;
}

/// Who gets in.
pub enum Auth {
    /// A bearer token of this set.
    Tokens(Arc<dyn TokenSource>),
    /// Anyone (`--no-auth`, loopback only): writes as plain `mcp`.
    Nobody,
}

/// The bounds of the door.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest request body, in bytes (413 above it).
    pub max_body: usize,
    /// The most header lines in a request (431 above it).
    pub max_headers: usize,
    /// The most bytes of a request's head (431 above it).
    pub max_header_bytes: usize,
    /// How long a client may take to send a request's head (then the connection is closed).
    pub header_timeout: Duration,
    /// How long a client may take to send a request's body (408).
    pub body_timeout: Duration,
    /// What all request bodies being read may hold at once beyond their first 64 KiB, in
    /// bytes (503 beyond).
    pub body_budget: usize,
    /// Sessions a token may hold at once (one more closes its least recently used).
    pub sessions_per_token: usize,
    /// A session unused this long ends.
    pub session_idle: Duration,
    /// Authenticated connections open at once (503 beyond).
    pub max_connections: usize,
    /// Connections open at once that have not presented a valid token (yet); one more closes
    /// the oldest idle one (see [`super::gate`]).
    pub max_unauthenticated: usize,
    /// Of those, from one address other than loopback.
    pub max_unauthenticated_per_peer: usize,
    /// How long SIGTERM waits for the calls in flight.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body: 4 << 20,
            max_headers: 100,
            max_header_bytes: 64 << 10,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            body_budget: 64 << 20,
            sessions_per_token: 32,
            session_idle: Duration::from_secs(600),
            max_connections: 256,
            max_unauthenticated: 256,
            max_unauthenticated_per_peer: 64,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// The endpoint's URL as clients reach it (`--public-url`): behind a proxy that terminates TLS
/// or serves another host or port, the 401's `resource_metadata` and the metadata document's
/// `resource` name it instead of this server's own scheme and the request's `Host`.
#[derive(Debug, Clone, PartialEq)]
pub struct PublicUrl {
    /// `https://mind.example.org` (scheme and authority, no trailing slash).
    origin: String,
    /// The endpoint's path there: `/mcp` (also when the URL names no path).
    path: String,
    /// The host name, lower-cased (without brackets or port).
    pub host: String,
}

impl PublicUrl {
    /// An `http://` or `https://` URL with a host, and no user, query or fragment.
    pub fn parse(s: &str) -> Result<PublicUrl, String> {
        let bad = |why: &str| format!("'{s}' is not an http(s) URL of the endpoint ({why})");
        let uri = http::Uri::try_from(s.trim()).map_err(|e| bad(&e.to_string()))?;
        let scheme = uri.scheme_str().ok_or_else(|| bad("no scheme"))?;
        if !matches!(scheme, "http" | "https") {
            return Err(bad("the scheme is not http or https"));
        }
        let auth = uri.authority().ok_or_else(|| bad("no host"))?;
        let hp = parse_authority(auth.as_str()).ok_or_else(|| bad("not a host"))?;
        if uri.query().is_some() || s.contains('#') {
            return Err(bad("a query or fragment"));
        }
        let path = match uri.path().trim_end_matches('/') {
            "" => ENDPOINT.to_string(),
            p => p.to_string(),
        };
        Ok(PublicUrl {
            origin: format!("{scheme}://{}", auth.as_str().to_ascii_lowercase()),
            path,
            host: hp.host,
        })
    }
}

/// How the door is set up.
pub struct Door {
    /// Hosts a `Host`/`Origin` may name: `name`, `name:port`, `[v6]:port`.
    pub allowed_hosts: Vec<String>,
    /// Who gets in.
    pub auth: Auth,
    /// TLS, if the server terminates it.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// The endpoint's URL as clients see it, when a proxy stands in front.
    pub public_url: Option<PublicUrl>,
    /// The bounds.
    pub limits: Limits,
    /// Where messages for the operator go (stderr); never given a secret.
    pub log: Arc<dyn Fn(&str) + Send + Sync>,
}

struct Owner {
    token: String,
    last: Instant,
}

struct State {
    mcp: StreamableHttpService<Server, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    door: Door,
    owners: Mutex<HashMap<String, Owner>>,
    inflight: Arc<AtomicUsize>,
    gate: Arc<Gate>,
    bodies: BodyBudget,
}

fn text(status: StatusCode, msg: &str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{msg}\n"))).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A host and an optional port, as `Host`, `Origin` and the allowed list name them.
#[derive(Debug, PartialEq)]
struct HostPort {
    host: String,
    port: Option<u16>,
}

fn parse_authority(s: &str) -> Option<HostPort> {
    let a = http::uri::Authority::try_from(s.trim()).ok()?;
    if a.as_str().contains('@') {
        return None;
    }
    let host = a.host().trim_start_matches('[').trim_end_matches(']');
    Some(HostPort {
        host: host.to_ascii_lowercase(),
        port: a.port_u16(),
    })
}

fn parse_origin(s: &str) -> Option<HostPort> {
    let uri = http::Uri::try_from(s).ok()?;
    let scheme = uri.scheme_str()?;
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    let mut hp = parse_authority(uri.authority()?.as_str())?;
    hp.port = hp.port.or(Some(if scheme == "https" { 443 } else { 80 }));
    Some(hp)
}

/// The one host a request names, and it parsed: its `Host` header or, without one, the
/// authority of an absolute-form target. RFC 9112 3.2: 400 for two `Host` lines, a `Host`
/// that is not a host, none at all; and, since an absolute-form target's authority is the one
/// a server must use (3.2.2), 400 when it names another host than `Host` does (only one of
/// them would be checked).
// A refusal is the cold path: the response is built whole, once.
#[allow(clippy::result_large_err)]
fn the_host(uri: &http::Uri, h: &HeaderMap) -> Result<(String, HostPort), Response<Body>> {
    let bad = |msg: &str| text(StatusCode::BAD_REQUEST, &format!("Bad Request: {msg}"));
    let mut hosts = h.get_all(header::HOST).iter();
    let (first, second) = (hosts.next(), hosts.next());
    if second.is_some() {
        return Err(bad("more than one Host header"));
    }
    let target = uri.authority().map(|a| a.as_str().to_string());
    let host = match (first, &target) {
        (Some(v), _) => v
            .to_str()
            .ok()
            .map(str::to_string)
            .ok_or_else(|| bad("the Host header is not a host"))?,
        (None, Some(t)) => t.clone(),
        (None, None) => return Err(bad("no Host header")),
    };
    let hp = parse_authority(&host).ok_or_else(|| bad("the Host header is not a host"))?;
    if let Some(t) = &target {
        let same = parse_authority(t).is_some_and(|a| {
            a.host == hp.host && (a.port.is_none() || hp.port.is_none() || a.port == hp.port)
        });
        if !same {
            return Err(bad(
                "the request target names another host than the Host header",
            ));
        }
    }
    Ok((host, hp))
}

impl State {
    /// The door's state for `server`, and what ends rmcp's sessions.
    fn new(server: Server, door: Door) -> (Arc<State>, impl FnOnce()) {
        let limits = &door.limits;
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(limits.session_idle);
        let sessions = Arc::new(manager);
        let config = StreamableHttpServerConfig::default()
            // The door checks Host and Origin (with the bound address and --allowed-host).
            .disable_allowed_hosts()
            .with_max_request_body_bytes(limits.max_body);
        let token = config.cancellation_token.clone();
        let stop = move || token.cancel();
        let mcp = StreamableHttpService::new(move || Ok(server.clone()), sessions.clone(), config);
        let gate = Gate::new(Budgets {
            authenticated: limits.max_connections,
            unauthenticated: limits.max_unauthenticated,
            per_peer: limits.max_unauthenticated_per_peer,
        });
        // A body of --max-body always fits when nothing else is being read.
        let bodies = BodyBudget::new(limits.body_budget.max(limits.max_body));
        let state = State {
            mcp,
            sessions,
            owners: Mutex::new(HashMap::new()),
            inflight: Arc::new(AtomicUsize::new(0)),
            gate,
            bodies,
            door,
        };
        (Arc::new(state), stop)
    }

    fn allowed(&self, hp: &HostPort) -> bool {
        self.door
            .allowed_hosts
            .iter()
            .filter_map(|a| parse_authority(a))
            .any(|a| a.host == hp.host && (a.port.is_none() || a.port == hp.port))
    }

    fn scheme(&self) -> &'static str {
        if self.door.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// The `Host` of `req` when it is allowed (else the refusal), and the `Origin` checked too.
    // A refusal is the cold path: the response is built whole, once.
    #[allow(clippy::result_large_err)]
    fn check_host(&self, uri: &http::Uri, h: &HeaderMap) -> Result<String, Response<Body>> {
        let (host, hp) = the_host(uri, h)?;
        if !self.allowed(&hp) {
            return Err(text(
                StatusCode::FORBIDDEN,
                "Forbidden: the Host header names a host this server does not serve \
                 (pmm-mcp --allowed-host NAME adds one)",
            ));
        }
        if let Some(origin) = h.get(header::ORIGIN) {
            let ok = origin
                .to_str()
                .ok()
                .and_then(parse_origin)
                .is_some_and(|o| self.allowed(&o));
            if !ok {
                return Err(text(
                    StatusCode::FORBIDDEN,
                    "Forbidden: the Origin header names a site this server does not serve",
                ));
            }
        }
        Ok(host)
    }

    fn metadata_url(&self, host: &str) -> String {
        match &self.door.public_url {
            // RFC 9728 3.1: the well-known path inserted before the resource's path.
            Some(p) => format!("{}{METADATA}{}", p.origin, p.path),
            None => format!("{}://{host}{METADATA}", self.scheme()),
        }
    }

    fn resource(&self, host: &str) -> String {
        match &self.door.public_url {
            Some(p) => format!("{}{}", p.origin, p.path),
            None => format!("{}://{host}{ENDPOINT}", self.scheme()),
        }
    }

    fn unauthorized(&self, host: &str, error: Option<&str>, msg: &str) -> Response<Body> {
        let mut r = text(StatusCode::UNAUTHORIZED, msg);
        let mut v = format!("Bearer resource_metadata=\"{}\"", self.metadata_url(host));
        if let Some(e) = error {
            v.push_str(&format!(", error=\"{e}\""));
        }
        if let Ok(v) = HeaderValue::from_str(&v) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }

    // A refusal is the cold path: the response is built whole, once.
    #[allow(clippy::result_large_err)]
    fn authenticate(&self, h: &HeaderMap, host: &str) -> Result<Caller, Response<Body>> {
        let src = match &self.door.auth {
            Auth::Nobody => return Ok(Caller::anonymous()),
            Auth::Tokens(src) => src,
        };
        let Some(v) = h.get(header::AUTHORIZATION) else {
            return Err(self.unauthorized(
                host,
                None,
                "Unauthorized: send Authorization: Bearer TOKEN (pmm-mcp --new-token makes one)",
            ));
        };
        let secret = v.to_str().ok().and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
        let Some(secret) = secret else {
            return Err(self.unauthorized(
                host,
                Some("invalid_request"),
                "Unauthorized: the Authorization header is not 'Bearer TOKEN'",
            ));
        };
        let tokens = match src.tokens() {
            Ok(t) => t,
            Err(e) => {
                (self.door.log)(&format!("refusing every request: {e}"));
                return Err(text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Service Unavailable: the server cannot read its tokens (see its log)",
                ));
            }
        };
        match tokens.check(secret) {
            Some(e) => Ok(Caller::of(e)),
            None => Err(self.unauthorized(
                host,
                Some("invalid_token"),
                "Unauthorized: unknown or revoked token",
            )),
        }
    }

    fn metadata(&self, host: &str) -> Response<Body> {
        let doc = serde_json::json!({
            "resource": self.resource(host),
            "bearer_methods_supported": ["header"],
            "scopes_supported": ["read", "write", "admin"],
            "resource_name": "pmm ledger (pmm-mcp)",
        });
        let mut r = Response::new(Full::new(Bytes::from(doc.to_string())).boxed());
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }

    /// Before a new session of `caller`: forgets ended sessions, and closes the least recently
    /// used ones of `caller` beyond its bound.
    async fn make_room(&self, caller: &Caller) {
        let live: HashSet<String> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .map(|k| k.to_string())
            .collect();
        let evict: Vec<String> = {
            let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
            owners.retain(|k, _| live.contains(k));
            let mut mine: Vec<(Instant, String)> = owners
                .iter()
                .filter(|(_, o)| o.token == caller.name)
                .map(|(k, o)| (o.last, k.clone()))
                .collect();
            mine.sort();
            let extra = (mine.len() + 1).saturating_sub(self.door.limits.sessions_per_token);
            let evict: Vec<String> = mine.into_iter().take(extra).map(|(_, k)| k).collect();
            for k in &evict {
                owners.remove(k);
            }
            evict
        };
        for k in evict {
            let _ = self.sessions.close_session(&k.into()).await;
        }
    }

    /// One request through the door, in the order of the module's list: the host, the
    /// metadata document, the endpoint, the token, the session's owner, the body; then rmcp
    /// answers it.
    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        ticket: Arc<Ticket>,
    ) -> Response<Body> {
        let _serving = ticket.serving();
        let host = match self.check_host(req.uri(), req.headers()) {
            Ok(h) => h,
            Err(r) => return r,
        };
        if let Some(r) = self.route(&req, &host) {
            return r;
        }
        let caller = match self.authenticate(req.headers(), &host) {
            Ok(c) => c,
            Err(r) => return r,
        };
        if ticket.promote() == Promotion::Full {
            return busy("too many connections");
        }
        let post = req.method() == Method::POST;
        let session = match self.claim_session(req.headers(), post, &caller).await {
            Ok(s) => s,
            Err(r) => return r,
        };
        let (mut parts, body) = req.into_parts();
        // The share of the body budget is held until rmcp has read the body.
        let (bytes, _share) = match self.read_whole_body(&parts.headers, body).await {
            Ok(b) => b,
            Err(r) => return r,
        };
        let bytes = match post {
            true => match self.frame_body(bytes) {
                Ok(b) => b,
                Err(r) => return r,
            },
            false => bytes,
        };
        parts.extensions.insert(caller.clone());
        let req = Request::from_parts(parts, Full::new(bytes));
        self.forward(req, session.is_none(), &caller).await
    }

    /// A POST's body read as the stdio server reads a line ([`framing::frame`]): a message
    /// goes on (lone surrogates replaced with U+FFFD, as stdio does), anything else is
    /// answered here with the JSON-RPC error stdio would write, as `application/json` with
    /// 400 (MCP's Streamable HTTP: an input the server cannot accept), never rmcp's plain-text
    /// 415.
    // A refusal is the cold path: the response is built whole, once.
    #[allow(clippy::result_large_err)]
    fn frame_body(&self, bytes: Bytes) -> Result<Bytes, Response<Body>> {
        let bytes = match bytes.starts_with(b"\xEF\xBB\xBF") {
            true => bytes.slice(3..),
            false => bytes,
        };
        match framing::frame(&bytes) {
            Frame::Message {
                repaired: false, ..
            } => Ok(bytes),
            Frame::Message { repaired: true, .. } => {
                (self.door.log)("a request held lone UTF-16 surrogates; each was read as U+FFFD");
                let fixed = std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(framing::repair_surrogates);
                Ok(fixed.map_or(bytes, Bytes::from))
            }
            Frame::Reply(r) => Err(json_error(r)),
            Frame::Skip if bytes.iter().all(u8::is_ascii_whitespace) => {
                Err(json_error(framing::error_response(
                    serde_json::Value::Null,
                    framing::PARSE_ERROR,
                    "Parse error: the body is empty",
                )))
            }
            Frame::Skip => Err(json_error(framing::error_response(
                serde_json::Value::Null,
                framing::INVALID_REQUEST,
                "Invalid Request: not a JSON-RPC 2.0 message the server reads",
            ))),
        }
    }

    /// The answer to a request for anything but the MCP endpoint: the metadata document at the
    /// well-known path, and at it followed by the resource's path (RFC 9728 3.1; behind a proxy
    /// that path is --public-url's), 404 elsewhere; `None` for the endpoint.
    fn route(&self, req: &Request<Incoming>, host: &str) -> Option<Response<Body>> {
        let path = req.uri().path();
        if path == METADATA
            || path
                .strip_prefix(METADATA)
                .is_some_and(|p| p.starts_with('/'))
        {
            return Some(match *req.method() {
                Method::GET | Method::HEAD => self.metadata(host),
                _ => text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed"),
            });
        }
        if path != ENDPOINT {
            return Some(text(
                StatusCode::NOT_FOUND,
                "Not Found: the MCP endpoint is /mcp",
            ));
        }
        None
    }

    /// The session the request names, if any: refused (404) when another token opened it, else
    /// marked used now. A POST naming none may open one: room is made for it first.
    async fn claim_session(
        &self,
        headers: &HeaderMap,
        post: bool,
        caller: &Caller,
    ) -> Result<Option<String>, Response<Body>> {
        let session = headers
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match &session {
            Some(sid) => {
                let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(o) = owners.get_mut(sid) {
                    if o.token != caller.name {
                        return Err(text(StatusCode::NOT_FOUND, "Not Found: no such session"));
                    }
                    o.last = Instant::now();
                }
            }
            None if post => self.make_room(caller).await,
            None => {}
        }
        Ok(session)
    }

    /// The request's whole body, within [`Limits::max_body`] (413 — and the connection closed
    /// when that is found out only while reading) and [`Limits::body_timeout`] (408).
    async fn read_whole_body(
        &self,
        headers: &HeaderMap,
        body: Incoming,
    ) -> Result<(Bytes, BodyShare), Response<Body>> {
        let max = self.door.limits.max_body;
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let too_large = || {
            text(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("Payload Too Large: a request body is at most {max} bytes"),
            )
        };
        if declared.is_some_and(|n| n > max as u64) {
            return Err(too_large());
        }
        let mut share = self.bodies.share();
        // A declared length is reserved whole before a byte is read (and read into a buffer
        // of that size, not grown by doubling).
        let declared = declared.map_or(0, |n| n as usize);
        if !share.cover(declared) {
            return Err(busy("too many request bodies are being read"));
        }
        let limits = &self.door.limits;
        match read_body(body, declared, &mut share, max, limits.body_timeout).await {
            Ok(b) => Ok((b, share)),
            Err(Refused::NoRoom) => Err(busy("too many request bodies are being read")),
            Err(Refused::TooLarge) => {
                let mut r = too_large();
                r.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                Err(r)
            }
            Err(Refused::TooSlow) => Err(text(
                StatusCode::REQUEST_TIMEOUT,
                "Request Timeout: the body came too slowly",
            )),
            Err(Refused::Broken) => {
                Err(text(StatusCode::BAD_REQUEST, "Bad Request: a broken body"))
            }
        }
    }

    /// rmcp's answer to the request that passed the door; a session it opens (`new_session`:
    /// the request named none) is recorded as `caller`'s.
    async fn forward(
        &self,
        req: Request<Full<Bytes>>,
        new_session: bool,
        caller: &Caller,
    ) -> Response<Body> {
        // A POST is counted until its response's body is dropped: a call answered over SSE is
        // in flight until its answer is sent (a GET's stream is not waited for).
        let guard = (req.method() == Method::POST).then(|| InFlight::new(self.inflight.clone()));
        let delete = req.method() == Method::DELETE;
        let mut resp = self.mcp.handle(req).await;
        // A session ended: 204, as clients expect (rmcp says 202; the Python SDK warns).
        if delete && resp.status() == StatusCode::ACCEPTED {
            *resp.status_mut() = StatusCode::NO_CONTENT;
        }
        if new_session {
            if let Some(sid) = resp
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
                owners.insert(
                    sid.to_string(),
                    Owner {
                        token: caller.name.clone(),
                        last: Instant::now(),
                    },
                );
            }
        }
        resp.map(|b| {
            b.map_frame(move |f| {
                let _ = &guard;
                f
            })
            .boxed()
        })
    }
}

enum Refused {
    TooLarge,
    TooSlow,
    Broken,
    NoRoom,
}

/// How much of a refused body is read and dropped before the 413 (so a client still sending
/// reads the answer instead of a reset connection), and for how long at most.
const DRAIN_BYTES: u64 = 256 << 20;
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// The whole body, if it is at most `max` bytes, comes within `time`, and `share` of the
/// body budget can grow to hold it (`declared`: the length it announced, 0 if none).
async fn read_body(
    mut body: Incoming,
    declared: usize,
    share: &mut BodyShare,
    max: usize,
    time: Duration,
) -> Result<Bytes, Refused> {
    let deadline = tokio::time::Instant::now() + time;
    let mut buf = bytes::BytesMut::with_capacity(declared.min(max));
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(Refused::TooSlow),
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(_))) => return Err(Refused::Broken),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                break;
            }
            if !share.cover(buf.len() + data.len()) {
                return Err(Refused::NoRoom);
            }
            buf.extend_from_slice(&data);
        }
    }
    drop(buf);
    let deadline = tokio::time::Instant::now() + DRAIN_TIME;
    let mut drained = 0u64;
    while drained < DRAIN_BYTES {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(f))) => drained += f.data_ref().map_or(0, |d| d.len() as u64),
            _ => break,
        }
    }
    Err(Refused::TooLarge)
}

struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(n: Arc<AtomicUsize>) -> InFlight {
        n.fetch_add(1, Ordering::SeqCst);
        InFlight(n)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An address to listen on.
pub type Addr = std::net::SocketAddr;

/// `ADDR` of `--http`: `PORT`, `:PORT` (both on 127.0.0.1), `HOST:PORT` or `[V6]:PORT`.
pub fn resolve(addr: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let a = addr.trim();
    let port_only = a.strip_prefix(':').unwrap_or(a);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    a.to_socket_addrs()
        .map_err(|e| format!("'{a}' is not HOST:PORT ({e})"))?
        .next()
        .ok_or_else(|| format!("'{a}' names no address"))
}

/// A listener on `addr`, and the address it got (port 0: the one the system chose).
pub async fn bind(
    addr: std::net::SocketAddr,
) -> std::io::Result<(tokio::net::TcpListener, std::net::SocketAddr)> {
    let l = tokio::net::TcpListener::bind(addr).await?;
    let local = l.local_addr()?;
    Ok((l, local))
}

const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\
content-length: 42\r\nconnection: close\r\nretry-after: 1\r\n\r\n\
Service Unavailable: too many connections\n";

/// 503 for a request the server has no room for now, `why`; the connection is closed (a body
/// not read is not waited for).
fn busy(why: &str) -> Response<Body> {
    let mut r = text(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("Service Unavailable: {why}; retry shortly"),
    );
    let h = r.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// 400 with a JSON-RPC error response (one line of JSON) as the body.
fn json_error(line: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(line)).boxed());
    *r.status_mut() = StatusCode::BAD_REQUEST;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Serves `server` on `listener` until `shutdown` completes; then stops accepting, waits (up to
/// [`Limits::shutdown_grace`]) for the requests in flight, and ends the sessions. A write
/// already on the blocking pool finishes whatever happens (the runtime waits for it).
pub async fn serve(
    listener: tokio::net::TcpListener,
    server: Server,
    door: Door,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let limits = door.limits.clone();
    let (state, stop) = State::new(server, door);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_headers(limits.max_headers)
        .max_buf_size(limits.max_header_bytes.max(8192));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors and the like: wait a little rather than spin.
                    (state.door.log)(&format!("cannot accept a connection: {e}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Answers go out as they are written: without this, Nagle's algorithm holds an SSE
        // frame back until the client's delayed ACK of the head (up to 40 ms a call).
        let _ = stream.set_nodelay(true);
        // Admitted as unauthenticated, older idle ones closed to make room if need be.
        let Some(ticket) = state.gate.admit(peer.ip()) else {
            tokio::spawn(async move {
                let mut stream = stream;
                let _ = tokio::time::timeout(Duration::from_secs(2), stream.write_all(BUSY)).await;
            });
            continue;
        };
        spawn_connection(&state, stream, ticket, &http, &graceful);
        // Its task runs next, on this worker: a request already sent is read, and its
        // connection authenticated, before a flood of newer ones could push it out.
        tokio::task::yield_now().await;
    }
    drop(listener);
    // The calls in flight finish and are answered; then the sessions (and their SSE streams)
    // end, and the connections close.
    await_in_flight(&state, limits.shutdown_grace).await;
    stop();
    let _ = tokio::time::timeout(Duration::from_secs(2), graceful.shutdown()).await;
    Ok(())
}

/// Serves one accepted connection on a task of its own, after the TLS handshake when the
/// door has TLS; `ticket`, its place in the gate, is held until the connection closes, and
/// `graceful` can close it. Until a request of it presents a valid token, the connection
/// lives at most [`Limits::header_timeout`] from now (the handshake included), and the gate
/// may close it while it is idle to make room for a newer one.
fn spawn_connection(
    state: &Arc<State>,
    stream: tokio::net::TcpStream,
    ticket: Ticket,
    http: &hyper::server::conn::http1::Builder,
    graceful: &hyper_util::server::graceful::GracefulShutdown,
) {
    let ticket = Arc::new(ticket);
    let (st, t) = (state.clone(), ticket.clone());
    let svc = hyper::service::service_fn(move |req| {
        let (st, t) = (st.clone(), t.clone());
        async move { Ok::<_, Infallible>(st.handle(req, t).await) }
    });
    let http = http.clone();
    let watcher = graceful.watcher();
    let tls = state.door.tls.clone();
    let deadline = tokio::time::Instant::now() + state.door.limits.header_timeout;
    tokio::spawn(async move {
        let served = async move {
            match tls {
                None => {
                    let conn = http.serve_connection(TokioIo::new(stream), svc);
                    let _ = watcher.watch(conn).await;
                }
                Some(acceptor) => {
                    let Ok(Ok(tls)) =
                        tokio::time::timeout_at(deadline, acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let conn = http.serve_connection(TokioIo::new(tls), svc);
                    let _ = watcher.watch(conn).await;
                }
            }
        };
        while_admitted(served, &ticket, deadline).await;
    });
}

/// Runs `served` until it ends; or until the gate closes the connection for a newer one, or
/// `deadline` passes before it has authenticated (then it is dropped: the connection closes).
async fn while_admitted(
    served: impl Future<Output = ()>,
    ticket: &Ticket,
    deadline: tokio::time::Instant,
) {
    tokio::pin!(served);
    tokio::select! {
        _ = &mut served => return,
        _ = ticket.evicted() => return,
        _ = tokio::time::sleep_until(deadline) => {}
    }
    if ticket.authenticated() {
        served.await;
    }
}

/// Waits, up to `grace`, until no call is in flight (each is finished and answered).
async fn await_in_flight(state: &State, grace: Duration) {
    let deadline = Instant::now() + grace;
    while state.inflight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_origins_are_matched_by_name_and_port() {
        assert_eq!(
            parse_authority("[::1]:8080"),
            Some(HostPort {
                host: "::1".into(),
                port: Some(8080)
            })
        );
        assert_eq!(parse_authority("user@evil.com"), None);
        assert_eq!(
            parse_origin("https://Example.com").unwrap(),
            HostPort {
                host: "example.com".into(),
                port: Some(443)
            }
        );
        assert_eq!(parse_origin("null"), None);
        assert_eq!(parse_origin("file://x"), None);
    }

    #[test]
    fn a_public_url_names_the_endpoint_behind_a_proxy() {
        let p = PublicUrl::parse("https://Mind.Example.org/mcp").unwrap();
        assert_eq!(
            (p.origin.as_str(), p.path.as_str(), p.host.as_str()),
            ("https://mind.example.org", "/mcp", "mind.example.org")
        );
        let p = PublicUrl::parse("https://[::1]:8443/").unwrap();
        assert_eq!((p.path.as_str(), p.host.as_str()), ("/mcp", "::1"));
        let p = PublicUrl::parse("http://box:8080/pmm/mcp/").unwrap();
        assert_eq!(p.path, "/pmm/mcp");
        for bad in [
            "mind.example.org/mcp",
            "ftp://mind.example.org/mcp",
            "https://u:p@mind.example.org/mcp",
            "https://mind.example.org/mcp?x=1",
            "https://mind.example.org/mcp#x",
            "https:///mcp",
        ] {
            assert!(PublicUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
