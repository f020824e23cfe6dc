//! The cmd adapter: any program as a model. Each turn runs `sh -c <command>` (so quoting, pipes
//! and `$VARS` work as typed), writes the request as one JSON object and a newline on its stdin
//! and takes its stdout as the reply, less one final line ending (`echo` and most programs add
//! one that is not part of the reply; any further newlines are kept). A non-zero exit is an
//! error carrying the first line of its stderr. The whole run is bounded by the timeout; after
//! it the program and everything it started are killed, as they are when the call is cancelled
//! (Ctrl-C, SIGTERM). Never retried: the program may have side effects. The program inherits
//! the environment, keys and all: what it says (the reply, the stderr line of an error) has
//! every secret pmm knows of scrubbed from it (see `scrub`).

use super::cancel::POLL;
use super::scrub::Secrets;
use super::{millis, Adapter, Cancel, Config, LlmError, Reply, Request, TextSink};
use serde_json::json;
use std::io::{self, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Most stdout taken as a reply (ureq's limit for HTTP bodies, for the same reason).
const MAX_STDOUT: u64 = 10 * 1024 * 1024;
/// Most stderr kept: only its first line is shown.
const MAX_STDERR: u64 = 64 * 1024;
/// Longest stderr line quoted in an error, in characters.
const MAX_STDERR_LINE: usize = 200;

/// The cmd adapter.
pub(crate) struct Cmd {
    command: String,
    /// The first word of the command: what errors name, since the rest may hold secrets.
    program: String,
    model: String,
    timeout: Duration,
    /// The key, the URLs' credentials and the environment's secrets: the program may print
    /// any of them.
    secrets: Secrets,
}

impl Cmd {
    /// Checks that there is a command.
    pub(crate) fn new(cfg: &Config) -> Result<Cmd, LlmError> {
        let command = cfg
            .command
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| LlmError::Config("the cmd adapter needs a command to run".into()))?;
        Ok(Cmd {
            command: command.to_string(),
            program: command
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string(),
            model: cfg.model_name().to_string(),
            timeout: cfg.timeout,
            secrets: Secrets::of_with_env(cfg),
        })
    }

    /// A [`LlmError::Command`], its detail (which may quote the program) scrubbed.
    fn error(&self, detail: impl Into<String>) -> LlmError {
        LlmError::Command {
            program: self.program.clone(),
            detail: self.secrets.redact(&detail.into()),
        }
    }

    /// Kills the program and everything it started, and reports the timeout.
    fn kill(&self, child: Child) -> LlmError {
        kill_group(child);
        LlmError::Timeout {
            provider: "cmd".into(),
            endpoint: self.program.clone(),
            timeout: self.timeout,
            attempts: 1,
        }
    }

    /// Kills the program and everything it started when `cancel` is raised.
    fn cancelled(&self, child: Child, cancel: Option<&Cancel>) -> Result<Child, LlmError> {
        match cancel.map(|c| c.check("cmd", &self.program)) {
            Some(Err(e)) => {
                kill_group(child);
                Err(e)
            }
            _ => Ok(child),
        }
    }
}

/// Kills a program spawned as the leader of its own process group, and everything it started.
fn kill_group(mut child: Child) {
    #[cfg(unix)]
    if let Ok(pgid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) has no memory effects; the child leads its own process group
        // (set at spawn), so -pgid reaches it and its descendants and nothing else.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Which pipe a reader thread drained.
enum Pipe {
    Out,
    Err,
}

/// What a reader thread got: up to its limit, and whether there was more.
type Drained = io::Result<(Vec<u8>, bool)>;

/// Reads up to `limit` bytes from `pipe`, then discards the rest so that the program never
/// blocks on a full pipe.
fn drain(mut pipe: impl Read, limit: u64) -> Drained {
    let mut kept = Vec::new();
    (&mut pipe).take(limit).read_to_end(&mut kept)?;
    let more = io::copy(&mut pipe, &mut io::sink())? > 0;
    Ok((kept, more))
}

impl Adapter for Cmd {
    fn provider(&self) -> &str {
        "cmd"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn endpoint(&self) -> String {
        self.program.clone()
    }

    fn generate(&mut self, req: &Request) -> Result<Reply, LlmError> {
        self.generate_with(req, None, None)
    }

    fn generate_with(
        &mut self,
        req: &Request,
        sink: Option<&TextSink>,
        cancel: Option<&Cancel>,
    ) -> Result<Reply, LlmError> {
        if let Some(c) = cancel {
            c.check("cmd", &self.program)?;
        }
        let reply = self.run(req, cancel)?;
        if let Some(sink) = sink {
            sink.send(&reply.text);
        }
        Ok(reply)
    }
}

/// What the reader threads brought back from the program's stdout and stderr (`None`: that
/// pipe's thread never reported).
#[derive(Default)]
struct Piped {
    stdout: Option<Drained>,
    stderr: Option<Drained>,
}

impl Cmd {
    /// Runs the program for `req`, killing it when `cancel` is raised.
    fn run(&mut self, req: &Request, cancel: Option<&Cancel>) -> Result<Reply, LlmError> {
        let input = self.input(req);
        let started = Instant::now();
        let deadline = started + self.timeout;
        let (child, rx) = self.spawn(&input)?;
        let (child, piped) = self.collect(child, &rx, deadline, cancel)?;
        let status = self.wait(child, deadline, cancel)?;
        let latency_ms = millis(started.elapsed());
        self.reply(status, piped, latency_ms)
    }

    /// The JSON object the program reads on its stdin for `req`.
    fn input(&self, req: &Request) -> serde_json::Value {
        json!({
            "system": req.system,
            "user": req.user,
            "model": self.model,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "seed": req.seed,
            "max_tokens": req.max_tokens,
            "turn": req.turn,
            "messages": req.messages(),
        })
    }

    /// Starts `sh -c <command>` in its own process group, writes `input` and a newline to its
    /// stdin and drains its stdout and stderr, each from a thread that reports on the channel
    /// returned.
    fn spawn(
        &self,
        input: &serde_json::Value,
    ) -> Result<(Child, mpsc::Receiver<(Pipe, Drained)>), LlmError> {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(&self.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The ledger's own credentials are not the program's: a PostgreSQL `PMM_DB` that holds
        // a password, and libpq's `PGPASSWORD`, are not inherited (what it prints is scrubbed
        // of them besides).
        if std::env::var("PMM_DB").is_ok_and(|db| !super::scrub::url_passwords(&db).is_empty()) {
            command.env_remove("PMM_DB");
        }
        command.env_remove("PGPASSWORD");
        if crate::llm::embed::threads_var_is_ours() {
            // Set for this process's embedding model only, not the user's command.
            command.env_remove(crate::llm::embed::THREADS_VAR);
        }
        #[cfg(unix)]
        {
            // Its own process group, so that a timeout can kill the whole pipeline, not just
            // the shell (whose children would keep the pipes open).
            use std::os::unix::process::CommandExt;
            command.process_group(0);
        }
        let mut child = command
            .spawn()
            .map_err(|e| self.error(format!("cannot run sh: {e}")))?;

        // Every pipe gets its own thread: a program that writes before it has read all its
        // input must not deadlock against us. The threads are not joined after a kill; they end
        // when the killed processes' pipes close.
        if let Some(mut stdin) = child.stdin.take() {
            let bytes = format!("{input}\n").into_bytes();
            // A program that ignores its input closes the pipe early: not an error.
            thread::spawn(move || stdin.write_all(&bytes));
        }
        let (tx, rx) = mpsc::channel::<(Pipe, Drained)>();
        if let Some(out) = child.stdout.take() {
            let tx = tx.clone();
            thread::spawn(move || tx.send((Pipe::Out, drain(out, MAX_STDOUT))));
        }
        if let Some(err) = child.stderr.take() {
            thread::spawn(move || tx.send((Pipe::Err, drain(err, MAX_STDERR))));
        }
        Ok((child, rx))
    }

    /// Waits for both reader threads, killing the program at `deadline` or when `cancel` is
    /// raised.
    fn collect(
        &self,
        mut child: Child,
        rx: &mpsc::Receiver<(Pipe, Drained)>,
        deadline: Instant,
        cancel: Option<&Cancel>,
    ) -> Result<(Child, Piped), LlmError> {
        let mut piped = Piped::default();
        while piped.stdout.is_none() || piped.stderr.is_none() {
            child = self.cancelled(child, cancel)?;
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(POLL)) {
                Ok((Pipe::Out, r)) => piped.stdout = Some(r),
                Ok((Pipe::Err, r)) => piped.stderr = Some(r),
                Err(mpsc::RecvTimeoutError::Timeout) if left <= POLL => {
                    return Err(self.kill(child))
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok((child, piped))
    }

    /// Waits for the program to exit once its pipes are closed; still bounded by `deadline`
    /// and `cancel`.
    fn wait(
        &self,
        mut child: Child,
        deadline: Instant,
        cancel: Option<&Cancel>,
    ) -> Result<ExitStatus, LlmError> {
        loop {
            child = self.cancelled(child, cancel)?;
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() >= deadline => return Err(self.kill(child)),
                Ok(None) => thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(self.error(format!("cannot wait for it: {e}"))),
            }
        }
    }

    /// The reply from an exited program: its stdout less one line ending, or the error its
    /// exit status, stderr or stdout makes it.
    fn reply(&self, status: ExitStatus, piped: Piped, latency_ms: u64) -> Result<Reply, LlmError> {
        if !status.success() {
            let stderr = match piped.stderr {
                Some(Ok((bytes, _))) => first_line(&bytes),
                _ => String::new(),
            };
            let sep = if stderr.is_empty() { "" } else { ": " };
            return Err(self.error(format!("{}{sep}{stderr}", describe(status))));
        }
        let (bytes, more) = match piped.stdout {
            Some(Ok(out)) => out,
            Some(Err(e)) => return Err(self.error(format!("cannot read its stdout: {e}"))),
            None => (Vec::new(), false),
        };
        if more {
            return Err(self.error(format!(
                "wrote more than {} MB to stdout",
                MAX_STDOUT / 1024 / 1024
            )));
        }
        let text = String::from_utf8(bytes).map_err(|e| LlmError::BadResponse {
            provider: "cmd".into(),
            endpoint: self.program.clone(),
            detail: format!("stdout is not UTF-8 ({e})"),
        })?;
        Ok(Reply {
            // A program that prints `$OPENAI_API_KEY` must not get it into the ledger.
            text: self.secrets.text(&strip_line_ending(text)),
            model: self.model.clone(),
            in_tokens: None,
            out_tokens: None,
            latency_ms,
            attempts: 1,
            finish_reason: None,
        })
    }
}

/// `text` less one final `\n` or `\r\n`.
fn strip_line_ending(mut text: String) -> String {
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    text
}

/// The first non-blank line of `stderr`, trimmed and shortened.
fn first_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    match line.char_indices().nth(MAX_STDERR_LINE) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

/// "exited with status 3" or "killed by signal 9".
fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("killed by signal {signal}");
        }
    }
    format!("failed ({status})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_line_ending_is_dropped() {
        assert_eq!(strip_line_ending("hi\n".into()), "hi");
        assert_eq!(strip_line_ending("hi\r\n".into()), "hi");
        assert_eq!(strip_line_ending("hi\n\n".into()), "hi\n");
        assert_eq!(strip_line_ending("hi".into()), "hi");
        assert_eq!(strip_line_ending(String::new()), "");
    }

    #[test]
    fn stderr_is_quoted_by_its_first_line() {
        assert_eq!(first_line(b"\n  boom: no model\nmore\n"), "boom: no model");
        assert_eq!(first_line(b""), "");
        assert_eq!(first_line("é".repeat(300).as_bytes()).chars().count(), 201);
    }

    #[test]
    fn a_blank_command_is_a_config_error() {
        let mut cfg = Config::new(crate::llm::AdapterKind::Cmd);
        assert!(Cmd::new(&cfg).err().unwrap().is_config());
        cfg.command = Some("  ".into());
        assert!(Cmd::new(&cfg).err().unwrap().is_config());
        cfg.command = Some("./model.sh --key sk-1".into());
        assert_eq!(Cmd::new(&cfg).unwrap().program, "./model.sh");
    }

    #[test]
    fn the_input_carries_the_request_and_the_model() {
        let mut cfg = Config::new(crate::llm::AdapterKind::Cmd);
        cfg.command = Some("cat".into());
        cfg.model = Some("m1".into());
        let cmd = Cmd::new(&cfg).unwrap();
        let req = Request {
            system: "sys".into(),
            user: "hi".into(),
            seed: Some(7),
            turn: 3,
            ..Request::default()
        };
        let v = cmd.input(&req);
        assert_eq!(v["system"], "sys");
        assert_eq!(v["user"], "hi");
        assert_eq!(v["model"], "m1");
        assert_eq!(v["seed"], 7);
        assert_eq!(v["turn"], 3);
        assert!(v["max_tokens"].is_null());
        assert_eq!(v["messages"], req.messages());
    }

    #[cfg(unix)]
    #[test]
    fn an_exited_program_makes_a_reply_or_an_error() {
        use std::os::unix::process::ExitStatusExt;
        let mut cfg = Config::new(crate::llm::AdapterKind::Cmd);
        cfg.command = Some("./model.sh --key sk-1".into());
        let cmd = Cmd::new(&cfg).unwrap();
        let piped = |out: &[u8], more: bool, err: &[u8]| Piped {
            stdout: Some(Ok((out.to_vec(), more))),
            stderr: Some(Ok((err.to_vec(), false))),
        };
        let ok = ExitStatus::from_raw(0);
        let r = cmd.reply(ok, piped(b"hello\n", false, b""), 12).unwrap();
        assert_eq!(
            (r.text.as_str(), r.latency_ms, r.attempts),
            ("hello", 12, 1)
        );
        let e = cmd.reply(
            ExitStatus::from_raw(3 << 8),
            piped(b"", false, b"\nboom\n"),
            0,
        );
        assert_eq!(
            e.unwrap_err().to_string(),
            cmd.error("exited with status 3: boom").to_string()
        );
        let e = cmd.reply(ok, piped(b"x", true, b""), 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            cmd.error("wrote more than 10 MB to stdout").to_string()
        );
        assert!(cmd.reply(ok, piped(&[0xff], false, b""), 0).is_err());
        let none = cmd.reply(ok, Piped::default(), 0).unwrap();
        assert_eq!(none.text, "");
    }
}
