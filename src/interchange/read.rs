//! Streaming readers with format auto-detection.

use crate::canon;
use crate::event::Event;
use crate::store::EventLog;
use crate::store::{Filter, Ledger};
use crate::{Error, Result};
use flate2::read::MultiGzDecoder;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// What a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The reference export: a JSON array of events, `meta` as a string.
    Json,
    /// One event per line, `meta` as an object (a string is accepted too).
    Jsonl,
    /// A SQLite ledger.
    Sqlite,
    /// A report of `pmm-export --format html`: its events block is read as a JSON export.
    Html,
}

/// Where events come from: a file (maybe gzipped) or stdin (`-`).
#[derive(Debug, Clone)]
pub struct Input {
    /// `None` for stdin.
    pub path: Option<PathBuf>,
}

impl Input {
    /// `-` means stdin.
    pub fn new(arg: &Path) -> Input {
        Input {
            path: (arg != Path::new("-")).then(|| arg.to_path_buf()),
        }
    }

    /// How to name this input in messages and records.
    pub fn name(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| "-".into(), |p| crate::store::shown(p))
    }

    /// The path of the input when it is a SQLite ledger file (it starts with SQLite's
    /// header), for checks that read the ledger by id beside the walk in order.
    pub fn sqlite_path(&self) -> Option<&Path> {
        let path = self.path.as_deref()?;
        let mut head = [0u8; SQLITE_MAGIC.len()];
        let mut f = File::open(path).ok()?;
        f.read_exact(&mut head).ok()?;
        (head == SQLITE_MAGIC).then_some(path)
    }

    /// The input as a PostgreSQL URL, when it is one.
    pub fn postgres_url(&self) -> Option<&str> {
        let p = self.path.as_deref()?.to_str()?;
        crate::store::is_postgres_url(p).then_some(p)
    }

    /// True if the input can be read a second time (a file, not stdin).
    pub fn rereadable(&self) -> bool {
        self.path.is_some()
    }
}

/// One event read from an input, with the meta already parsed when the reader had to parse it.
#[derive(Debug, Clone)]
pub struct Record {
    /// The event; `meta` holds the stored text (verbatim for string metas, canonical for objects).
    pub event: Event,
    /// The parsed meta, when the reader has it.
    pub meta: Option<Map<String, Value>>,
    /// 1-based line for JSONL inputs.
    pub line: Option<u64>,
}

/// What a reader yields.
#[derive(Debug, Clone)]
pub enum Item {
    /// An event.
    Event(Record),
    /// A record that is not an event. For JSONL the reader goes on with the next line; for a
    /// JSON array it cannot, and this is the last item.
    Malformed {
        /// 1-based line.
        line: Option<u64>,
        /// The id, when it could be read.
        id: Option<i64>,
        /// What is wrong.
        error: String,
    },
}

#[derive(Deserialize)]
struct Wire {
    id: i64,
    ts: String,
    kind: String,
    content: String,
    meta: Value,
    #[serde(default)]
    prev_hash: Option<String>,
    #[serde(default)]
    hash: Option<String>,
}

impl Wire {
    fn into_record(self, line: Option<u64>) -> std::result::Result<Record, (Option<i64>, String)> {
        let (meta, text) = match self.meta {
            Value::String(s) => {
                let m = if s.trim().is_empty() {
                    Map::new()
                } else {
                    canon::parse_meta(&s).map_err(|e| (Some(self.id), format!("meta: {e}")))?
                };
                (m, s)
            }
            Value::Object(m) => {
                let mut buf = Vec::with_capacity(256);
                canon::write_object(&mut buf, &m)
                    .map_err(|e| (Some(self.id), format!("meta: {e}")))?;
                // Canonical output is ASCII, hence UTF-8.
                (m, String::from_utf8(buf).unwrap_or_default())
            }
            other => {
                return Err((
                    Some(self.id),
                    format!(
                        "meta must be an object or a JSON string, not {}",
                        canon::type_name(&other)
                    ),
                ))
            }
        };
        Ok(Record {
            event: Event {
                id: self.id,
                ts: self.ts,
                kind: self.kind.into(),
                content: self.content,
                meta: text,
                prev_hash: self.prev_hash,
                hash: self.hash,
            },
            meta: Some(meta),
            line,
        })
    }
}

const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// Detects the format of what `r` starts with. Only leading white space is consumed.
pub fn detect(r: &mut dyn BufRead) -> std::io::Result<Format> {
    detect_counting(r).map(|(format, _)| format)
}

/// [`detect`], also returning how many newlines the leading white space held, so that JSONL
/// line numbers still count from the first line of the file.
fn detect_counting(r: &mut dyn BufRead) -> std::io::Result<(Format, u64)> {
    let buf = r.fill_buf()?;
    if buf.starts_with(SQLITE_MAGIC) {
        return Ok((Format::Sqlite, 0));
    }
    // Skip leading white space to see the first JSON character.
    let mut newlines = 0;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok((Format::Jsonl, newlines));
        }
        let skip = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
        if skip == 0 {
            let format = match buf[0] {
                b'[' => Format::Json,
                b'<' => Format::Html,
                _ => Format::Jsonl,
            };
            return Ok((format, newlines));
        }
        newlines += buf[..skip].iter().filter(|&&b| b == b'\n').count() as u64;
        r.consume(skip);
    }
}

/// A reader wrapper that reports bytes read (for progress bars).
struct Counting<'p, R> {
    inner: R,
    seen: u64,
    tick: &'p dyn Fn(u64),
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.seen += n as u64;
        (self.tick)(self.seen);
        Ok(n)
    }
}

/// Reads every event of `input`, calling `f` for each [`Item`]; `f` returns `false` to stop.
/// `tick` is told how many raw bytes have been read so far (for progress).
pub fn read(
    input: &Input,
    tick: &dyn Fn(u64),
    f: &mut dyn FnMut(Item) -> Result<bool>,
) -> Result<Format> {
    read_with(input, tick, &|_: &mut Item| (), &mut |item, ()| f(item))
}

/// Like [`read`], but each item first goes through `work` — on worker threads, in parallel —
/// and `f` gets the item with `work`'s result, still one at a time and in input order.
/// `work` is where per-event cost that needs nothing from earlier events belongs (parsing
/// happens there too for JSON Lines and SQLite; hashing is the caller's). Memory stays
/// bounded: only a few chunks of events are in flight at once.
pub fn read_with<T: Send>(
    input: &Input,
    tick: &dyn Fn(u64),
    work: &(dyn Fn(&mut Item) -> T + Sync),
    f: &mut dyn FnMut(Item, T) -> Result<bool>,
) -> Result<Format> {
    let name = input.name();
    if let Some(url) = input.postgres_url() {
        read_server(url, tick, work, f)?;
        return Ok(Format::Sqlite);
    }
    let (mut reader, gz) = open_input(input, &name, tick)?;
    let (format, skipped_lines) = detect_counting(&mut reader).map_err(|e| gz_err(&name, e))?;
    if format == Format::Jsonl {
        starts_with_an_object(&mut reader, &name)?;
    }
    match format {
        Format::Sqlite => {
            let Some(path) = input.path.as_ref().filter(|_| !gz) else {
                return Err(Error::bad_input(
                    Some(name),
                    "a SQLite ledger must be given as a plain file, not on stdin or gzipped",
                ));
            };
            drop(reader);
            read_sqlite(path, tick, work, f)?;
        }
        Format::Jsonl => {
            let parse = |(n, line): (u64, Vec<u8>)| parse_jsonl_line(n, &line);
            pipeline(&parse, work, f, |p| {
                read_lines(&mut reader, &name, skipped_lines, p)
            })?
        }
        Format::Json => read_json(reader, &name, &mut |mut item| {
            let t = work(&mut item);
            f(item, t)
        })?,
        Format::Html => {
            skip_to_events(&mut reader, &name)?;
            let block = UntilMarkup { inner: reader };
            read_json(BufReader::new(block), &name, &mut |mut item| {
                let t = work(&mut item);
                f(item, t)
            })?
        }
    }
    Ok(format)
}

/// How far into a report its events block may start (the page's code comes first).
const HTML_HEAD_LIMIT: u64 = 64 << 20;

/// Consumes a report up to and including the tag that opens its events block.
fn skip_to_events(r: &mut dyn BufRead, name: &str) -> Result<()> {
    let needle = super::report::EVENTS_OPEN.as_bytes();
    let mut carry: Vec<u8> = Vec::with_capacity(needle.len() * 2);
    let mut seen = 0u64;
    loop {
        let buf = r.fill_buf().map_err(|e| gz_err(name, e))?;
        if buf.is_empty() || seen > HTML_HEAD_LIMIT {
            return Err(Error::NotALedger {
                path: PathBuf::from(name),
                why: "an HTML file without the events block of a pmm report".into(),
            });
        }
        let keep = carry.len();
        carry.extend_from_slice(&buf[..buf.len().min(1 << 16)]);
        let took = carry.len() - keep;
        if let Some(at) = carry.windows(needle.len()).position(|w| w == needle) {
            // The needle ends inside this buffer: consume up to its end.
            r.consume(at + needle.len() - keep);
            return Ok(());
        }
        r.consume(took);
        seen += took as u64;
        let tail = carry.len().saturating_sub(needle.len() - 1);
        carry.drain(..tail);
    }
}

/// The events block of a report: its JSON ends at the first `<` (the writer escapes every
/// `<` inside it, so the first one is `</script>`'s).
struct UntilMarkup<R> {
    inner: R,
}

impl<R: BufRead> Read for UntilMarkup<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let buf = self.inner.fill_buf()?;
        let end = buf.iter().position(|&b| b == b'<').unwrap_or(buf.len());
        let n = end.min(out.len());
        out[..n].copy_from_slice(&buf[..n]);
        self.inner.consume(n);
        Ok(n)
    }
}

/// The input's bytes (the file, or stdin), counted for `tick` and gunzipped when they start
/// with gzip's magic; `true` with them when they were.
fn open_input<'t>(
    input: &Input,
    name: &str,
    tick: &'t dyn Fn(u64),
) -> Result<(Box<dyn BufRead + 't>, bool)> {
    let raw: Box<dyn Read> = match &input.path {
        Some(p) => Box::new(File::open(p).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::MissingLedger(p.clone())
            } else {
                Error::io(p, e)
            }
        })?),
        None => Box::new(std::io::stdin().lock()),
    };
    let mut outer = BufReader::with_capacity(
        1 << 16,
        Counting {
            inner: raw,
            seen: 0,
            tick,
        },
    );
    let io = |e: std::io::Error| Error::io(name, e);
    let gz = outer.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn BufRead + 't> = if gz {
        Box::new(BufReader::with_capacity(
            1 << 16,
            MultiGzDecoder::new(outer),
        ))
    } else {
        Box::new(outer)
    };
    Ok((reader, gz))
}

/// JSON Lines events are objects: input that starts with anything else (a text file, a
/// binary) is not a ledger at all, rather than a ledger of malformed lines (exit 2, not a list
/// of findings with exit 1).
fn starts_with_an_object(reader: &mut dyn BufRead, name: &str) -> Result<()> {
    if let Some(&b) = reader.fill_buf().map_err(|e| gz_err(name, e))?.first() {
        if b != b'{' {
            return Err(Error::NotALedger {
                path: PathBuf::from(name),
                why: "neither a SQLite ledger nor JSON events (it does not start with '{' or '[')"
                    .into(),
            });
        }
    }
    Ok(())
}

/// Reads a SQLite ledger file's events, telling `tick` the share read (per million) every
/// 1024 events.
fn read_sqlite<T: Send>(
    path: &Path,
    tick: &dyn Fn(u64),
    work: &(dyn Fn(&mut Item) -> T + Sync),
    f: &mut dyn FnMut(Item, T) -> Result<bool>,
) -> Result<()> {
    let ledger = Ledger::open_reader(path)?;
    let max = ledger.max_id()?.max(1);
    let to_item = |event: Event| {
        Item::Event(Record {
            event,
            meta: None,
            line: None,
        })
    };
    pipeline(&to_item, work, f, |p| {
        ledger.scan(&Filter::default(), &mut |event| {
            if event.id % 1024 == 0 {
                tick(per_million(event.id, max));
            }
            p.push(event)
        })
    })
}

/// Reads a PostgreSQL ledger's events from its server, as stored there (not from this
/// host's cache: a verification must see the rows themselves).
fn read_server<T: Send>(
    url: &str,
    tick: &dyn Fn(u64),
    work: &(dyn Fn(&mut Item) -> T + Sync),
    f: &mut dyn FnMut(Item, T) -> Result<bool>,
) -> Result<()> {
    use crate::store::log::EventLog;
    let log = crate::store::server_reader(url)?;
    let max = log.head()?.map_or(1, |h| h.id.max(1));
    let to_item = |event: Event| {
        Item::Event(Record {
            event,
            meta: None,
            line: None,
        })
    };
    pipeline(&to_item, work, f, |p| {
        log.stream_all(&mut |event| {
            if event.id % 1024 == 0 {
                tick(per_million(event.id, max));
            }
            p.push(event)
        })
    })
}

/// How far `id` is through ids up to `max` (≥ 1), in millionths: never more than a million,
/// whatever ids the source holds (they are input: a negative or huge one must not overflow).
fn per_million(id: i64, max: i64) -> u64 {
    let done = i128::from(id.clamp(0, max));
    u64::try_from(done * 1_000_000 / i128::from(max.max(1))).unwrap_or(1_000_000)
}

fn gz_err(name: &str, e: std::io::Error) -> Error {
    let msg = e.to_string();
    if e.kind() == std::io::ErrorKind::UnexpectedEof
        || msg.contains("corrupt deflate")
        || msg.contains("invalid gzip")
    {
        Error::bad_input(
            Some(name.to_string()),
            format!("truncated or corrupt gzip data ({msg})"),
        )
    } else {
        Error::io(name, e)
    }
}

/// Reads raw JSONL lines (numbered from the file's first line) into the pipeline.
fn read_lines(
    r: &mut dyn BufRead,
    name: &str,
    skipped_lines: u64,
    p: &mut dyn Sink<(u64, Vec<u8>)>,
) -> Result<()> {
    // Blank lines that `detect` consumed still count: line numbers are the file's.
    let mut n = skipped_lines;
    let limit = crate::lines::max_line();
    loop {
        let mut line = Vec::with_capacity(1024);
        match crate::lines::read_line(r, &mut line, limit) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) => {
                return Err(match crate::lines::too_long(&e) {
                    // An over-long line is bad input, not a malformed event to report and
                    // skip: reading on would mean holding it whole.
                    Some(t) => Error::bad_input(Some(format!("{name}:{}", n + 1)), t.to_string()),
                    None => gz_err(name, e),
                });
            }
        }
        n += 1;
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            // Blank lines between records are not events; a trailing newline is normal.
            continue;
        }
        if !p.push((n, line))? {
            return Ok(());
        }
    }
}

/// One JSONL line (numbered `n`) as an [`Item`].
fn parse_jsonl_line(n: u64, line: &[u8]) -> Item {
    match std::str::from_utf8(trim_eol(line)) {
        Err(e) => Item::Malformed {
            line: Some(n),
            id: None,
            error: format!("not UTF-8: {e}"),
        },
        Ok(s) => match serde_json::from_str::<Wire>(s) {
            Ok(w) => match w.into_record(Some(n)) {
                Ok(rec) => Item::Event(rec),
                Err((id, error)) => Item::Malformed {
                    line: Some(n),
                    id,
                    error,
                },
            },
            Err(e) => Item::Malformed {
                line: Some(n),
                id: None,
                error: describe(s, &e),
            },
        },
    }
}

/// Where a producer puts raw records; `false` means stop.
trait Sink<R> {
    fn push(&mut self, raw: R) -> Result<bool>;
}

/// Raw records per chunk handed to a worker.
const CHUNK: usize = 128;

/// The in-order, bounded parallel map behind [`read_with`]: the calling thread produces raw
/// records (`produce` pushes them), workers turn each into an [`Item`] and run `work` on it,
/// and the calling thread hands the results to `f` in order. Chunk `k` goes to worker
/// `k % workers` and is collected from that worker's output in turn, so order needs no
/// reordering buffer; at most `2 × workers` chunks are in flight.
fn pipeline<R: Send, T: Send>(
    parse: &(dyn Fn(R) -> Item + Sync),
    work: &(dyn Fn(&mut Item) -> T + Sync),
    f: &mut dyn FnMut(Item, T) -> Result<bool>,
    produce: impl FnOnce(&mut dyn Sink<R>) -> Result<()>,
) -> Result<()> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8);
    std::thread::scope(|scope| {
        let mut inputs = Vec::with_capacity(workers);
        let mut outputs = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (in_tx, in_rx) = std::sync::mpsc::channel::<Vec<R>>();
            let (out_tx, out_rx) = std::sync::mpsc::channel::<Vec<(Item, T)>>();
            scope.spawn(move || {
                for chunk in in_rx {
                    let done: Vec<(Item, T)> = chunk
                        .into_iter()
                        .map(|raw| {
                            let mut item = parse(raw);
                            let t = work(&mut item);
                            (item, t)
                        })
                        .collect();
                    if out_tx.send(done).is_err() {
                        return; // the consumer stopped early
                    }
                }
            });
            inputs.push(in_tx);
            outputs.push(out_rx);
        }
        let mut p = Pipeline {
            inputs,
            outputs,
            chunk: Vec::with_capacity(CHUNK),
            sent: 0,
            received: 0,
            f,
            stopped: false,
        };
        produce(&mut p)?;
        p.finish()
        // Dropping `p` closes the channels, so every worker ends and the scope can join.
    })
}

struct Pipeline<'f, R, T> {
    inputs: Vec<std::sync::mpsc::Sender<Vec<R>>>,
    outputs: Vec<std::sync::mpsc::Receiver<Vec<(Item, T)>>>,
    chunk: Vec<R>,
    sent: usize,
    received: usize,
    f: &'f mut dyn FnMut(Item, T) -> Result<bool>,
    stopped: bool,
}

impl<R, T> Pipeline<'_, R, T> {
    fn dispatch(&mut self) -> Result<bool> {
        let chunk = std::mem::replace(&mut self.chunk, Vec::with_capacity(CHUNK));
        let n = self.inputs.len();
        if self.inputs[self.sent % n].send(chunk).is_err() {
            return Err(Error::bad_input(None, "a worker thread ended unexpectedly"));
        }
        self.sent += 1;
        while self.sent - self.received >= 2 * n {
            if !self.consume_one()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn consume_one(&mut self) -> Result<bool> {
        let n = self.outputs.len();
        let batch = self.outputs[self.received % n]
            .recv()
            .map_err(|_| Error::bad_input(None, "a worker thread ended unexpectedly"))?;
        self.received += 1;
        for (item, t) in batch {
            if !(self.f)(item, t)? {
                self.stopped = true;
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn finish(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        if !self.chunk.is_empty() && !self.dispatch()? {
            return Ok(());
        }
        while self.received < self.sent {
            if !self.consume_one()? {
                return Ok(());
            }
        }
        Ok(())
    }
}

impl<R, T> Sink<R> for Pipeline<'_, R, T> {
    fn push(&mut self, raw: R) -> Result<bool> {
        if self.stopped {
            return Ok(false);
        }
        self.chunk.push(raw);
        if self.chunk.len() >= CHUNK {
            return self.dispatch();
        }
        Ok(true)
    }
}

fn describe(s: &str, e: &serde_json::Error) -> String {
    if e.is_data() {
        format!("not an event: {e}")
    } else {
        canon::explain_json_error(s, e)
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

struct Elements<'f> {
    f: &'f mut dyn FnMut(Item) -> Result<bool>,
    failure: Option<Error>,
    stopped: bool,
    /// Bytes read since the last element ended (see [`PerElement`]).
    since: &'f std::cell::Cell<u64>,
}

/// A JSON array's reader that refuses an element longer than the line limit, as a JSON Lines
/// line is: serde_json holds a whole element (a string without end, `["` then `/dev/zero`) in
/// memory, so each is bounded. [`Elements`] resets the count after each element.
struct PerElement<'c, R> {
    inner: R,
    since: &'c std::cell::Cell<u64>,
    limit: u64,
}

impl<R: Read> Read for PerElement<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let since = self.since.get() + n as u64;
        self.since.set(since);
        if since > self.limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                ElementTooLong { limit: self.limit },
            ));
        }
        Ok(n)
    }
}

/// An element of a JSON array longer than the limit.
#[derive(Debug, Clone, Copy)]
struct ElementTooLong {
    limit: u64,
}

impl fmt::Display for ElementTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an event of the JSON array is longer than {} bytes (raise the limit with --max-line BYTES or PMM_MAX_LINE)",
            self.limit
        )
    }
}

impl std::error::Error for ElementTooLong {}

impl<'de> Visitor<'de> for &mut Elements<'_> {
    type Value = ();

    fn expecting(&self, fm: &mut fmt::Formatter<'_>) -> fmt::Result {
        fm.write_str("a JSON array of events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(w) = seq.next_element::<Wire>()? {
            let item = match w.into_record(None) {
                Ok(rec) => Item::Event(rec),
                Err((id, error)) => Item::Malformed {
                    line: None,
                    id,
                    error,
                },
            };
            self.since.set(0);
            match (self.f)(item) {
                Ok(true) => {}
                Ok(false) => {
                    self.stopped = true;
                    return Err(serde::de::Error::custom("stopped"));
                }
                Err(e) => {
                    self.failure = Some(e);
                    return Err(serde::de::Error::custom("failed"));
                }
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for &mut Elements<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

fn read_json<R: BufRead>(r: R, name: &str, f: &mut dyn FnMut(Item) -> Result<bool>) -> Result<()> {
    let since = std::cell::Cell::new(0);
    let mut de = serde_json::Deserializer::from_reader(PerElement {
        inner: r,
        since: &since,
        limit: crate::lines::max_line(),
    });
    let mut elements = Elements {
        f,
        failure: None,
        stopped: false,
        since: &since,
    };
    let result = (&mut elements).deserialize(&mut de).and_then(|()| de.end());
    if let Some(e) = elements.failure {
        return Err(e);
    }
    if elements.stopped {
        return Ok(());
    }
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.is_io() => {
            let io: std::io::Error = e.into();
            match io
                .get_ref()
                .and_then(|i| i.downcast_ref::<ElementTooLong>())
            {
                Some(t) => Err(Error::bad_input(Some(name.to_string()), t.to_string())),
                None => Err(gz_err(name, io)),
            }
        }
        Err(e) => {
            let line = Some(e.line() as u64);
            let error = if e.is_eof() {
                format!("the JSON array ends early (truncated file?): {e}")
            } else if e.is_data() {
                format!("not an event: {e}")
            } else {
                format!("not valid JSON: {e}")
            };
            (elements.f)(Item::Malformed {
                line,
                id: None,
                error,
            })?;
            Ok(())
        }
    }
}

/// The work function for [`read_with`] that every verifying reader uses: the hash an event
/// should have (see [`crate::chain::compute`]), computed on a worker thread; the parsed meta is
/// dropped there too, since nothing after hashing needs it. `None` for malformed items.
pub fn digest(
    item: &mut Item,
) -> Option<std::result::Result<crate::chain::Digest, crate::chain::HashError>> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(4096));
    }
    match item {
        Item::Event(r) => {
            let d = SCRATCH
                .with(|s| crate::chain::compute(&mut s.borrow_mut(), &r.event, r.meta.as_ref()));
            r.meta = None;
            Some(d)
        }
        Item::Malformed { .. } => None,
    }
}
