//! The scripted adapter: replies from a file, for demos and tests. The file is JSON Lines, one
//! reply per turn: each non-blank line is a JSON string or an object `{"reply": "..."}` (JSON so
//! that a reply can hold newlines). Turn N gets the Nth reply. The whole file is read and checked
//! when the adapter is built, so a malformed line is a setup error naming `file:line` before any
//! turn starts.

use super::{Adapter, Config, LlmError, Reply, Request};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The scripted adapter.
pub(crate) struct Scripted {
    path: PathBuf,
    replies: Vec<String>,
    model: String,
}

impl Scripted {
    /// Reads and checks the script.
    pub(crate) fn new(cfg: &Config) -> Result<Scripted, LlmError> {
        let path = cfg
            .script
            .as_deref()
            .ok_or_else(|| LlmError::Config("the scripted adapter needs a replies file".into()))?;
        Ok(Scripted {
            path: path.to_path_buf(),
            replies: load(path)?,
            model: cfg.model_name().to_string(),
        })
    }
}

/// The replies in the script at `path`, in order.
fn load(path: &Path) -> Result<Vec<String>, LlmError> {
    // Through the bounded whole-file reader: a script linked to /dev/zero is refused, not
    // loaded.
    let file = std::fs::File::open(path)
        .map_err(|e| LlmError::Config(format!("{}: {e}", path.display())))?;
    let limit = crate::lines::max_line();
    let text = crate::lines::read_bounded(&mut std::io::BufReader::new(file), limit, limit)
        .map_err(|e| LlmError::Config(format!("{}: {e}", e.at(&path.display().to_string()))))?;
    let lines: Vec<&[u8]> = crate::lines::lines_of(&text).collect();
    let mut replies = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let bad = |why: String| LlmError::Config(format!("{}:{}: {why}", path.display(), i + 1));
        let Ok(line) = std::str::from_utf8(line) else {
            return Err(bad("not UTF-8".into()));
        };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(line) {
            Ok(Value::String(s)) => s,
            Ok(Value::Object(mut o)) => match o.remove("reply") {
                Some(Value::String(s)) => s,
                _ => return Err(bad(r#"an object line needs "reply": "<text>""#.into())),
            },
            Ok(_) => {
                return Err(bad(
                    r#"expected a JSON string or {"reply": "<text>"}"#.into()
                ))
            }
            Err(e) => return Err(bad(format!("not JSON ({e})"))),
        };
        replies.push(reply);
    }
    if replies.is_empty() {
        return Err(LlmError::Config(format!(
            "{}: the script holds no replies",
            path.display()
        )));
    }
    Ok(replies)
}

impl Adapter for Scripted {
    fn provider(&self) -> &str {
        "scripted"
    }

    fn endpoint(&self) -> String {
        self.path.display().to_string()
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn generate(&mut self, req: &Request) -> Result<Reply, LlmError> {
        let reply = usize::try_from(req.turn)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| self.replies.get(i))
            .ok_or_else(|| LlmError::ScriptExhausted {
                path: self.path.clone(),
                turn: req.turn,
                replies: self.replies.len(),
            })?;
        Ok(Reply {
            text: reply.clone(),
            model: self.model.clone(),
            in_tokens: None,
            out_tokens: None,
            latency_ms: 0,
            attempts: 1,
            finish_reason: None,
        })
    }
}
