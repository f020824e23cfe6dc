//! `pmm-turn --chat`: an interactive session over the turn library, with line editing, history
//! and the reference's slash commands (FORMATS.md §13.2), all answered in-process.

use crate::cli::Outcome;
use crate::event::Event;
use crate::llm::{self, Adapter, Config};
use crate::store::{self, Filter, Ledger, Reads};
use crate::turn::{self, Options, TurnError};
use rustyline::error::ReadlineError;
use std::io::{IsTerminal, Write};

const HELP: &str = "\
/replay [N]   the last N events (default 20), one line each
/metrics      ledger metrics (as pmm-metrics)
/diag         the last five metrics_turn events
/goals        open commitments
/rsm          the recursive self-model: tendencies, gaps, reflection count
/graph        event-graph statistics
/raw          toggle showing the raw reply (markers included)
/model [NAME] show the adapter and model, or switch model
/export FILE  write the ledger as JSON Lines to FILE (never the ledger itself)
/help         this list
/exit         leave (also Ctrl-D)";

fn one_line(e: &Event) -> String {
    let c: String = e
        .content
        .chars()
        .take(100)
        .collect::<String>()
        .replace('\n', " ");
    format!(
        "[{}] {} {}: {}",
        e.id,
        &e.ts.get(..19).unwrap_or(&e.ts),
        e.kind,
        c
    )
}

/// The visible reply: the model's text without marker lines.
fn visible(reply: &str) -> String {
    reply
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !["COMMIT:", "CLOSE:", "CLAIM:", "REFLECT:", "REF: "]
                .iter()
                .any(|p| t.starts_with(p))
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim_end()
        .to_string()
}

fn command(
    ledger: &mut Ledger,
    adapter: &mut Box<dyn Adapter>,
    cfg: &mut Config,
    raw: &mut bool,
    line: &str,
) -> anyhow::Result<Option<String>> {
    let mut words = line.split_whitespace();
    let cmd = words.next().unwrap_or("").to_lowercase();
    let arg = words.collect::<Vec<_>>().join(" ");
    let text = match cmd.as_str() {
        "/exit" | "/quit" => return Ok(None),
        "/help" => HELP.to_string(),
        "/replay" => {
            let n = arg.parse().unwrap_or(20);
            let evs = ledger.tail(&Filter::default(), n)?;
            evs.iter().map(one_line).collect::<Vec<_>>().join("\n")
        }
        "/metrics" => {
            let max = ledger.max_id()?;
            let m = super::metrics::compute(ledger.path(), max, true)?;
            serde_json::to_string_pretty(&m)?
        }
        "/diag" => {
            let evs = ledger.last_of_kind("metrics_turn", 5)?;
            evs.iter()
                .rev()
                .map(one_line)
                .collect::<Vec<_>>()
                .join("\n")
        }
        "/goals" => {
            let p = store::project(&*ledger, None, true)?.projections;
            let open = p.mirror.open_in_order();
            if open.is_empty() {
                "no open commitments".into()
            } else {
                open.iter()
                    .map(|c| {
                        format!(
                            "{}  opened at {}  ({})  {}",
                            c.cid, c.opened_at, c.origin, c.text
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        }
        "/rsm" => {
            let p = store::project(&*ledger, None, true)?.projections;
            let t: Vec<String> = p
                .rsm
                .tendencies()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!(
                "tendencies: {}\nknowledge gaps: {}\nreflection intents: {}",
                t.join(", "),
                p.rsm.knowledge_gaps().join(", "),
                p.rsm.reflection_intents().len()
            )
        }
        "/graph" => {
            let p = store::project(&*ledger, None, true)?.projections;
            serde_json::to_string(&p.graph.stats())?
        }
        "/raw" => {
            *raw = !*raw;
            format!("raw replies {}", if *raw { "on" } else { "off" })
        }
        "/model" => {
            if !arg.is_empty() {
                cfg.model = Some(arg.clone());
                *adapter = llm::adapter(cfg)?;
            }
            format!("adapter {}, model {}", adapter.provider(), adapter.model())
        }
        "/export" => {
            if arg.is_empty() {
                "usage: /export FILE".into()
            } else {
                // Never onto the ledger or its companions; written beside the target and
                // renamed into place when complete.
                let target = crate::outfile::OutputFile::create(
                    std::path::Path::new(&arg),
                    Some(ledger.path()),
                )?;
                let mut f = target.writer()?;
                let mut n = 0;
                ledger.scan(&Filter::default(), |e| {
                    f.write_all(e.to_jsonl().as_bytes())
                        .map_err(|err| crate::Error::io(&arg, err))?;
                    f.write_all(b"\n")
                        .map_err(|err| crate::Error::io(&arg, err))?;
                    n += 1;
                    Ok(true)
                })?;
                f.flush().map_err(|err| crate::Error::io(&arg, err))?;
                drop(f);
                target.commit()?;
                format!("{n} events written to {arg}")
            }
        }
        _ => format!("unknown command {cmd} (try /help)"),
    };
    Ok(Some(text))
}

/// Prints a line of the session on stdout. A closed stdout does not end the session: what
/// the user types is still appended (a writer never stops consuming its input because nobody
/// reads its output).
fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Runs the interactive session until `/exit` or end of input.
pub fn run(
    ledger: &mut Ledger,
    adapter: &mut dyn Adapter,
    cfg: Config,
    opts: &Options,
) -> anyhow::Result<Outcome> {
    // The session may switch models (/model): it owns its adapter from here on.
    let mut cfg = cfg;
    let mut own: Box<dyn Adapter> = llm::adapter(&cfg)?;
    let _ = adapter;
    // On a terminal, rustyline edits lines; from a pipe or a file, lines are read through the
    // bounded line reader (rustyline's own would grow without limit on an endless line).
    let mut rl = if std::io::stdin().is_terminal() {
        Some(rustyline::DefaultEditor::new()?)
    } else {
        None
    };
    let history = std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".pmm_history"));
    if let (Some(h), Some(rl)) = (&history, rl.as_mut()) {
        let _ = rl.load_history(h);
    }
    let mut raw = false;
    eprintln!(
        "pmm — {} (adapter {}, model {}). /help for commands, /exit to leave.",
        ledger.path().display(),
        own.provider(),
        own.model()
    );
    let mut stdin = std::io::stdin().lock();
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        let line = match rl.as_mut() {
            Some(rl) => match rl.readline("you> ") {
                Ok(l) => l,
                Err(ReadlineError::Interrupted) | Err(ReadlineError::Eof) => break,
                Err(e) => return Err(e.into()),
            },
            None => {
                n += 1;
                let at = || Some(format!("<stdin>:{n}"));
                match crate::lines::read_line_default(&mut stdin, &mut buf) {
                    Ok(0) => break,
                    Ok(_) => match std::str::from_utf8(crate::lines::trim_eol(&buf)) {
                        Ok(l) => l.to_string(),
                        Err(_) => return Err(crate::Error::bad_input(at(), "not UTF-8").into()),
                    },
                    Err(e) => {
                        let msg = match crate::lines::too_long(&e) {
                            Some(t) => t.to_string(),
                            None => e.to_string(),
                        };
                        return Err(crate::Error::bad_input(at(), msg).into());
                    }
                }
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rl) = rl.as_mut() {
            let _ = rl.add_history_entry(line.as_str());
        }
        if line.trim_start().starts_with('/') {
            match command(ledger, &mut own, &mut cfg, &mut raw, line.trim()) {
                Ok(Some(t)) => say(&t),
                Ok(None) => break,
                Err(e) => eprintln!("error: {e:#}"),
            }
            continue;
        }
        match turn::run(ledger, own.as_mut(), &line, opts) {
            Ok(o) => {
                say(&if raw {
                    o.reply.clone()
                } else {
                    visible(&o.reply)
                });
                if o.truncated {
                    say(turn::TRUNCATED);
                }
                if !o.opened.is_empty() || !o.closed.is_empty() || !o.failed_claims.is_empty() {
                    eprintln!(
                        "  [opened {:?}, closed {:?}, {} claim(s) recorded, {} failed]",
                        o.opened,
                        o.closed,
                        o.valid_claims.len(),
                        o.failed_claims.len()
                    );
                }
            }
            Err(TurnError::Generation { error, failure, .. }) => {
                eprintln!(
                    "model failed: {error} (recorded as event {}); your message is kept",
                    failure.id
                )
            }
            Err(e) => eprintln!("error: {e}"),
        }
    }
    if let (Some(h), Some(rl)) = (&history, rl.as_mut()) {
        let _ = rl.save_history(h);
    }
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visible_reply_hides_marker_lines() {
        assert_eq!(
            visible("Hello\nCOMMIT: x\n  CLAIM:a=1\nREF: a#1\nbye\n"),
            "Hello\nbye"
        );
    }
}
