//! The model-adapter flags of the programs that ask a model (`pmm-turn`, `pmm-tick`): which
//! adapter, which model, the sampling parameters and how long to wait. One clap struct,
//! flattened into each program, so that the flags, their environment variables and their
//! checks are the same everywhere.

use crate::llm::{self, Adapter, AdapterKind, Config};
use crate::Error;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// The adapter flags.
#[derive(Debug, Clone, Args)]
pub struct AdapterArgs {
    /// The model adapter: ollama, openai, cmd, scripted or dummy (a canned echo that opens a
    /// commitment, for trying pmm without a model). There is no default: pmm-turn needs one,
    /// pmm-tick asks no model without one
    #[arg(long, env = "PMM_ADAPTER", value_name = "ADAPTER", value_parser = parse_adapter)]
    pub adapter: Option<AdapterKind>,
    /// The model name (ollama default llama3.2, openai default gpt-4o-mini)
    #[arg(long, env = "PMM_MODEL")]
    pub model: Option<String>,
    /// Seed for providers that accept one
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u64))]
    pub seed: Option<u64>,
    /// Sampling temperature (a finite number, 0 to 100)
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true, value_parser = parse_temperature)]
    pub temperature: f64,
    /// Nucleus sampling (0 to 1)
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true, value_parser = parse_top_p)]
    pub top_p: f64,
    /// The most tokens a reply may have (Ollama num_predict, OpenAI max_tokens; cmd programs
    /// get it as max_tokens); recorded in the reply's meta. Unset: the server's own limit
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: Option<u32>,
    /// Seconds to wait for each model call (more than 0, at most 86400)
    #[arg(long, value_name = "SECS", default_value_t = 120.0, allow_hyphen_values = true, value_parser = parse_timeout)]
    pub timeout: f64,
    /// Retries after a connection error, 429 or 5xx (with backoff; 0 to 100)
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub retries: u32,
    /// scripted adapter: the replies file (JSON Lines: a string or {"reply": STRING} per line;
    /// line N answers the ledger's Nth turn)
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// cmd adapter: the program to run (via sh -c); it gets the prompt as JSON on stdin and
    /// answers on stdout
    #[arg(long, value_name = "COMMAND")]
    pub command: Option<String>,
}

/// The longest `--timeout`: one day per model call.
pub const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// Why a `--temperature`, `--top-p`, `--timeout` or `--adapter` value is refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum BadValue {
    /// Not a number.
    #[error("'{0}' is not a number")]
    NotANumber(String),
    /// A number outside its range (or not finite).
    #[error("'{value}' is out of range (a number from {lo} to {hi})")]
    OutOfRange {
        /// The value given.
        value: String,
        /// The least value allowed.
        lo: f64,
        /// The greatest value allowed.
        hi: f64,
    },
    /// A `--timeout` of 0.
    #[error("'{0}' is out of range (more than 0 and at most {MAX_TIMEOUT_SECS} seconds)")]
    NoTime(String),
    /// An adapter pmm does not have.
    #[error("unknown adapter '{0}' (ollama, openai, cmd, scripted, dummy)")]
    UnknownAdapter(String),
}

/// A finite number in `lo..=hi` (NaN and infinities would be sent to the model as null).
fn parse_in_range(s: &str, lo: f64, hi: f64) -> Result<f64, BadValue> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && (lo..=hi).contains(&x) => Ok(x),
        Ok(_) => Err(BadValue::OutOfRange {
            value: s.to_string(),
            lo,
            hi,
        }),
        Err(_) => Err(BadValue::NotANumber(s.to_string())),
    }
}

pub(crate) fn parse_temperature(s: &str) -> Result<f64, BadValue> {
    parse_in_range(s, 0.0, 100.0)
}

pub(crate) fn parse_top_p(s: &str) -> Result<f64, BadValue> {
    parse_in_range(s, 0.0, 1.0)
}

pub(crate) fn parse_timeout(s: &str) -> Result<f64, BadValue> {
    match parse_in_range(s, 0.0, MAX_TIMEOUT_SECS) {
        Ok(x) if x > 0.0 => Ok(x),
        Ok(_) => Err(BadValue::NoTime(s.to_string())),
        Err(e) => Err(e),
    }
}

pub(crate) fn parse_adapter(s: &str) -> Result<AdapterKind, BadValue> {
    AdapterKind::ALL
        .into_iter()
        .find(|k| k.as_str() == s)
        .ok_or_else(|| BadValue::UnknownAdapter(s.to_string()))
}

impl AdapterArgs {
    /// The adapter's configuration, or a bad-input error naming the flag; `no_adapter` is the
    /// message when none was chosen.
    pub fn config(&self, no_adapter: &str) -> anyhow::Result<Config> {
        let Some(kind) = self.adapter else {
            return Err(Error::bad_input(Some("--adapter".into()), no_adapter).into());
        };
        if !(self.timeout > 0.0 && self.timeout <= MAX_TIMEOUT_SECS) {
            return Err(Error::bad_input(
                Some("--timeout".into()),
                "must be a positive number of seconds",
            )
            .into());
        }
        if kind == AdapterKind::Scripted && self.script.is_none() {
            return Err(Error::bad_input(
                Some("--script".into()),
                "the scripted adapter needs --script FILE (one reply per turn)",
            )
            .into());
        }
        if kind == AdapterKind::Cmd && self.command.is_none() {
            return Err(Error::bad_input(
                Some("--command".into()),
                "the cmd adapter needs --command 'PROGRAM ARGS'",
            )
            .into());
        }
        let mut cfg = Config::from_env(kind);
        // An empty --model / $PMM_MODEL means "the adapter's default", not a model named "".
        if let Some(m) = self.model.as_deref().filter(|m| !m.trim().is_empty()) {
            cfg.model = Some(m.to_string());
        }
        cfg.timeout = Duration::from_secs_f64(self.timeout);
        cfg.retries = self.retries;
        if self.script.is_some() {
            cfg.script = self.script.clone();
        }
        if self.command.is_some() {
            cfg.command = self.command.clone();
        }
        Ok(cfg)
    }

    /// The adapter built from `cfg`, its setup checked: a setup error names its own cause
    /// (OPENAI_BASE_URL, --script FILE, …) and is bad input (exit 2).
    pub fn build(cfg: &Config) -> anyhow::Result<Box<dyn Adapter>> {
        Ok(llm::adapter(cfg).map_err(|e| Error::bad_input(None, e.to_string()))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_typed_and_read_as_before() {
        assert_eq!(
            parse_temperature("hot"),
            Err(BadValue::NotANumber("hot".into()))
        );
        assert_eq!(
            parse_top_p("2").unwrap_err().to_string(),
            "'2' is out of range (a number from 0 to 1)"
        );
        assert_eq!(
            parse_temperature("NaN").unwrap_err().to_string(),
            "'NaN' is out of range (a number from 0 to 100)"
        );
        assert_eq!(
            parse_timeout("0").unwrap_err().to_string(),
            "'0' is out of range (more than 0 and at most 86400 seconds)"
        );
        assert_eq!(
            parse_adapter("gpt").unwrap_err().to_string(),
            "unknown adapter 'gpt' (ollama, openai, cmd, scripted, dummy)"
        );
        assert_eq!(parse_adapter("dummy"), Ok(AdapterKind::Dummy));
    }
}
