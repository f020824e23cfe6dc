//! `pmm-mcp`: the ledger as memory for any Model Context Protocol client, on stdio or
//! (`http`) over Streamable HTTP with bearer tokens.

mod http;

use crate::cli::{self, ClockArgs, CommonArgs, Exit, LedgerArgs, Program, WriteArgs};
use crate::mcp::framing::{self, Frame};
use crate::mcp::{Config, Server};
use crate::store::Ledger;
use anyhow::Context;
use rmcp::service::{RxJsonRpcMessage, ServerInitializeError, TxJsonRpcMessage};
use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
use rmcp::transport::Transport;
use rmcp::{RoleServer, ServiceExt};
use std::io::{self, BufRead, Write};
use tokio::sync::{mpsc, oneshot};

const AFTER_HELP: &str = "\
EXAMPLES:
  Serve a ledger to an MCP client (the client starts the program and talks on its stdio):
    pmm-mcp --db ~/agent.db
  Claude Code:
    claude mcp add pmm -- pmm-mcp --db ~/agent.db
  Claude Desktop, Cursor, VS Code: see docs/mcp.md for the configuration snippets, e.g.
    {\"mcpServers\": {\"pmm\": {\"command\": \"pmm-mcp\", \"args\": [\"--db\", \"/home/me/agent.db\"]}}}
  Let a client read and search but never write:
    pmm-mcp --db ~/agent.db --read-only
  The same ledger, shared: cron ticks, turns and CI go on beside the server:
    */1 * * * * pmm-tick --db ~/agent.db
    pmm-turn --db ~/agent.db 'what did we decide yesterday?'
    pmm-verify --db ~/agent.db
  What a client remembered through the server (over HTTP: mcp:TOKEN-NAME):
    pmm-replay --db ~/agent.db | jq -c 'select(.meta.source|startswith(\"mcp\")) | {id, kind, content}'
  Remote clients over HTTP (docs/mcp.md, \"Remote clients\"): a token each, then serve:
    pmm-mcp --tokens ~/.config/pmm/tokens.json --new-token laptop --scope write
    pmm-mcp --db ~/agent.db --http 8765 --tokens ~/.config/pmm/tokens.json
    claude mcp add --transport http pmm https://mind.example.org/mcp \\
      --header \"Authorization: Bearer pmm_...\"
  HTTPS on every interface, and a token revoked while it runs:
    pmm-mcp --db ~/agent.db --http 0.0.0.0:8443 --tokens t.json --tls-cert cert.pem \\
      --tls-key key.pem --allowed-host mind.example.org
    pmm-mcp --tokens t.json --revoke laptop

TOOLS:
  recall(query, k?, budget?, kinds?)     the events recalled, best first, with score and via
  remember(text, kind?)                  append a reflection (a note, the default),
                                         user_message or assistant_message; meta.source \"mcp\"
  commit(text)                           open a commitment (commitment_open, cid from the text)
  close(cid)                             close an open commitment (commitment_close)
  state(at?)                             pmm-replay --state: identity, open commitments, rsm, ...
  events(since?, until?, kind?, limit?)  events in id order (limit 100 by default, 10000 at most)
  prove(id, size?)                       pmm-verify --prove: the RFC 9162 inclusion proof of an event
  verify(deep?)                          pmm-verify [--deep]: the summary and the first 100 findings
  Resources: pmm://state, and the template pmm://event/{id}.
  Limits: text and query 1 MiB, k 1000, budget 1000000, limit 10000. A refused or failed call
  is an isError result naming the cause (a write the policy forbids appends its violation
  event, as pmm-append does); the server goes on serving. --read-only lists only recall,
  state, events, prove and verify, and refuses the others.

PROTOCOL:
  JSON-RPC 2.0 on stdin and stdout, one message a line (MCP stdio transport); stdout carries
  nothing else. Messages on stderr. Every request line is answered: a lone UTF-16 surrogate
  escape (\\ud83d, a JavaScript string cut mid-emoji) is read as U+FFFD, as JavaScript's
  TextEncoder does; a line that is not JSON (invalid UTF-8, garbage, cut short) gets a parse
  error (-32700), JSON that is not a request an invalid request (-32600), and a line longer
  than --max-line (default here 16M) an invalid request too, each with the request's id when
  it can be read, else null. The server ends when stdin closes. Every write is one
  BEGIN IMMEDIATE transaction through the write policy, as pmm-append's; none is held between
  calls, so pmm-turn, pmm-tick and pmm-append can write to the same ledger meanwhile.

HTTP:
  --http ADDR serves MCP's Streamable HTTP transport at http://ADDR/mcp (https with --tls-cert).
  Every request needs Authorization: Bearer TOKEN of --tokens FILE (else 401 with
  WWW-Authenticate: Bearer resource_metadata=.../.well-known/oauth-protected-resource); a
  read token gets recall, state, events, verify, prove; writes record meta.source
  \"mcp:NAME\". Host/Origin not loopback, the bound address or --allowed-host: 403. Bodies
  over --max-body: 413; a body slower than 30 s: 408; over 100 headers or 64 KiB of head: 431;
  a head slower than 10 s: the connection is closed; over 256 authenticated connections, or
  64 MiB of bodies being read at once: 503. Connections without a valid token (yet) have a
  budget of their own: a new one closes the oldest idle of them, so idle sockets keep no
  client out. A body that is not a JSON-RPC message gets stdio's JSON-RPC error, with 400.
  The tokens file must be this user's and not writable by group or others (as ssh's key
  files); it, --tls-cert and --tls-key are read up to 1 MiB. SIGTERM lets the calls in
  flight finish, then exits 0.

EXIT STATUS:
  0  the client closed stdin (the session ended); --http: SIGTERM or SIGINT ended the server;
     --new-token, --revoke: done
  2  bad arguments (--http off loopback in plain HTTP without --insecure-http, without
     --tokens; a token name taken or unknown; an address that cannot be bound), a ledger
     that cannot be opened (--read-only: a missing ledger), or the protocol could not start
     (stdin is not an MCP client)

ENVIRONMENT:
  PMM_DB    the ledger when --db is not given (default .data/pmmdb/pmm.db)
  PMM_NOW   pin the clock of the events written (RFC 3339)
  PMM_EMBED_PROVIDER, PMM_EMBED_MODEL, PMM_EMBED_URL, PMM_EMBED_API_KEY
            an embedding model: the recall tool also recalls by meaning (see pmm-recall
            --help); a server that fails leaves it to the other sources
            (\"dense_unavailable\" in the answer)
  RAYON_NUM_THREADS
            threads of the in-process embedding model (1 unless set)";

/// Serve the ledger as memory to any Model Context Protocol client, over stdio or HTTP.
///
/// An MCP server (JSON-RPC on stdin/stdout) whose tools recall from the whole ledger, remember
/// notes and messages, open and close commitments, and read the state, the events and the
/// verification of the chain; pmm://state and pmm://event/{id} are resources clients can
/// attach. Writes go through the same policy, transaction and hash chain as pmm-append, so the
/// ledger stays shared with pmm-turn, cron ticks and CI verification.
#[derive(Debug, clap::Parser)]
#[command(name = "pmm-mcp", version, after_long_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    write: WriteArgs,
    #[command(flatten)]
    clock: ClockArgs,
    #[command(flatten)]
    embed: crate::cli::embed::EmbedArgs,

    /// Serve only the reading tools (recall, state, events, prove, verify); the writing ones are not
    /// listed and are refused if called. The ledger must exist
    #[arg(long)]
    read_only: bool,

    #[command(flatten)]
    http: http::HttpArgs,
}

impl Program for Args {
    fn common(&self) -> &CommonArgs {
        &self.common
    }
    fn embeds_single_texts(&self) -> bool {
        true
    }
}

/// Runs `pmm-mcp`.
pub fn run(args: Args) -> anyhow::Result<Exit> {
    // Before any connection: the sessions of one server read on connections of their own at
    // once, and must not queue on SQLite's allocation counter.
    crate::store::without_memory_statistics();
    if http::manage_tokens(&args.http, &args.clock.clock())? {
        return Ok(Exit::Success);
    }
    let http = http::plan(&args.http)?;
    let path = args.ledger.path();
    // Opened once before serving: a ledger that cannot be used is a usage error now, not a
    // failure of every call later. A writer creates it and brings its index up to date.
    let embedder = if args.read_only {
        args.embed.open(&Ledger::open_reader(&path)?)?
    } else {
        args.embed.open(&cli::open_writer(
            &path,
            args.write.busy_timeout,
            args.common.quiet,
        )?)?
    };
    let mut cfg = Config::new(
        path.clone(),
        args.read_only,
        args.write.busy_timeout,
        args.clock.clock(),
    );
    cfg.embedder = embedder;
    if let Some(plan) = http {
        http::serve(&args.http, plan, cfg, args.common.quiet)?;
        return Ok(Exit::Success);
    }
    if !args.common.quiet {
        eprintln!(
            "pmm-mcp: serving {}{} on stdio",
            crate::store::shown(&path),
            if args.read_only { " (read-only)" } else { "" }
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    // One JSON-RPC message a line; a longer line is answered with an error (16 MiB, rmcp's
    // default cap, well above the 1 MiB a tool takes; --max-line sets it).
    let max_line = args.common.max_line.map_or(DEFAULT_MAX_LINE_LENGTH, |n| {
        n.min(usize::MAX as u64) as usize
    });
    rt.block_on(async {
        let transport = Stdio::start(max_line);
        let service = match Server::new(cfg).serve(transport).await {
            Ok(s) => s,
            // The client went away before the session began: nothing to serve.
            Err(ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
            Err(e) => {
                return Err(crate::Error::bad_input(
                    Some("<stdin>".into()),
                    format!("the MCP session could not start: {e}"),
                )
                .into())
            }
        };
        service
            .waiting()
            .await
            .context("the MCP session ended abnormally")?;
        anyhow::Ok(())
    })?;
    // Blocking reads of stdin may still be parked on the pool; they end with the process.
    rt.shutdown_background();
    Ok(Exit::Success)
}

/// A line for stdout, and who waits for it to be written.
type Outgoing = (Vec<u8>, Option<oneshot::Sender<io::Result<()>>>);

/// The stdio transport of `pmm-mcp`: a thread reads stdin a bounded line at a time and hands
/// each line to [`framing::frame`] (a message goes to the protocol, a repaired one too, an
/// unreadable one gets its error response), and a thread writes stdout, one whole line at a
/// time in the order they were sent, so an error response never splits another message.
struct Stdio {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    out: std::sync::mpsc::Sender<Outgoing>,
}

impl Stdio {
    fn start(max_line: usize) -> Stdio {
        let (out, lines) = std::sync::mpsc::channel::<Outgoing>();
        std::thread::spawn(move || {
            let mut stdout = io::stdout().lock();
            for (line, done) in lines {
                let wrote = stdout.write_all(&line).and_then(|()| stdout.flush());
                if let Some(done) = done {
                    let _ = done.send(wrote);
                }
            }
        });
        let (tx, incoming) = mpsc::channel(16);
        let replies = out.clone();
        std::thread::spawn(move || read_stdin(&mut io::stdin().lock(), max_line, &tx, &replies));
        Stdio { incoming, out }
    }
}

/// Reads `input` line by line until it ends (or the session does), sending messages on `tx`
/// and error responses on `replies`. A line over `max_line` bytes is read no further than
/// that: its first bytes are kept to find its id, the rest skipped.
fn read_stdin(
    input: &mut impl BufRead,
    max_line: usize,
    tx: &mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    replies: &std::sync::mpsc::Sender<Outgoing>,
) {
    // Waits until the response is written: the session may end with the next line.
    let reply = |text: String| {
        let mut line = text.into_bytes();
        line.push(b'\n');
        let (done, written) = oneshot::channel();
        replies.send((line, Some(done))).is_ok() && written.blocking_recv().is_ok_and(|w| w.is_ok())
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut over = false;
        let ended = loop {
            let buf = match input.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            if buf.is_empty() {
                // The end of input: a last line without its newline is a cut message.
                return;
            }
            let newline = buf.iter().position(|&b| b == b'\n');
            let take = newline.map_or(buf.len(), |i| i + 1);
            let keep = if over {
                0
            } else if line.len() + take > max_line.saturating_add(1) {
                over = true;
                framing::ID_SEARCH_BYTES
                    .saturating_sub(line.len())
                    .min(take)
            } else {
                take
            };
            line.extend_from_slice(&buf[..keep]);
            input.consume(take);
            if newline.is_some() {
                break over;
            }
        };
        if ended {
            line.truncate(framing::ID_SEARCH_BYTES);
            if !reply(framing::too_long(&line, max_line)) {
                return;
            }
            continue;
        }
        let text = crate::lines::trim_eol(&line);
        match framing::frame(text) {
            Frame::Message { message, repaired } => {
                if repaired {
                    eprintln!(
                        "pmm-mcp: a request held lone UTF-16 surrogates; each was read as U+FFFD"
                    );
                }
                if tx.blocking_send(*message).is_err() {
                    return;
                }
            }
            Frame::Reply(r) => {
                if !reply(r) {
                    return;
                }
            }
            Frame::Skip => {}
        }
    }
}

impl Transport<RoleServer> for Stdio {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl std::future::Future<Output = Result<(), io::Error>> + Send + 'static {
        let out = self.out.clone();
        let line = serde_json::to_vec(&item).map(|mut l| {
            l.push(b'\n');
            l
        });
        async move {
            let (done, written) = oneshot::channel();
            out.send((line?, Some(done)))
                .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed"))?;
            written.await.unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "stdout is closed",
                ))
            })
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        self.incoming.close();
        Ok(())
    }
}
