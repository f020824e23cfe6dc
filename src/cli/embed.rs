//! The embedding flags of the programs that recall (`pmm-turn`, `pmm-tick`, `pmm-recall`,
//! `pmm-mcp`): which sentence-embedding model the dense recall source uses.
//!
//! The flags win, then the environment (`PMM_EMBED_PROVIDER`, `PMM_EMBED_MODEL`, `PMM_EMBED_URL`,
//! `PMM_EMBED_API_KEY`), then the ledger's retrieval config (`embed`, `embed_model`,
//! `embed_url`). Without any of them there is no dense source, and recall fuses the others.

use crate::llm::embed::{self, EmbedConfig, Provider, Shared};
use crate::store::EventLog;
use crate::Error;
use clap::Args;
use serde_json::Value;

/// How far back a program looks for the retrieval config's embedding keys.
const CONFIG_LOOKBACK: usize = 200;

/// The embedding flags.
#[derive(Debug, Clone, Default, Args)]
pub struct EmbedArgs {
    /// Semantic recall with a sentence-embedding model: local (a sentence-transformers
    /// directory run in this process), ollama, openai; none turns it off
    #[arg(
        long = "embed-provider",
        value_name = "PROVIDER",
        env = "PMM_EMBED_PROVIDER"
    )]
    pub embed_provider: Option<String>,
    /// The embedding model: a model directory (local, e.g. all-MiniLM-L6-v2) or a model name
    /// (ollama, openai)
    #[arg(long = "embed-model", value_name = "MODEL", env = "PMM_EMBED_MODEL")]
    pub embed_model: Option<String>,
    /// The embedding server: Ollama's host, or an OpenAI-compatible base URL up to /v1
    /// [default: $OLLAMA_HOST, or $OPENAI_BASE_URL]
    #[arg(long = "embed-url", value_name = "URL", env = "PMM_EMBED_URL")]
    pub embed_url: Option<String>,
}

impl EmbedArgs {
    /// The embedding config in force for `r` (`None`: no dense source).
    pub fn config<R: EventLog>(&self, r: &R) -> crate::Result<Option<EmbedConfig>> {
        self.config_with(&ledger_keys(r)?)
    }

    /// The embedding config of the flags and the environment alone, for a ledger that does
    /// not exist yet (so has no retrieval config).
    fn config_with(
        &self,
        ledger: &serde_json::Map<String, Value>,
    ) -> crate::Result<Option<EmbedConfig>> {
        let pick = |flag: &Option<String>, key: &str| {
            flag.clone()
                .filter(|s| !s.trim().is_empty())
                .or_else(|| ledger.get(key).and_then(Value::as_str).map(str::to_string))
        };
        let provider = pick(&self.embed_provider, "embed");
        let model = pick(&self.embed_model, "embed_model");
        let name = match (provider, &model) {
            (None, None) => return Ok(None),
            (Some(p), _) if p == "none" => return Ok(None),
            (Some(p), _) => p,
            // A model directory alone means the in-process model.
            (None, Some(_)) => "local".to_string(),
        };
        let Some(provider) = Provider::parse(&name) else {
            return Err(bad(format!(
                "--embed-provider: '{name}' is not a provider ({}, or none)",
                Provider::NAMES.join(", ")
            )));
        };
        let Some(model) = model else {
            return Err(bad(format!(
                "--embed-provider {name} needs --embed-model (a model directory for local, a model name for a server)"
            )));
        };
        let mut cfg = EmbedConfig::new(provider, &model);
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        cfg.url = pick(&self.embed_url, "embed_url").or_else(|| match provider {
            Provider::Ollama => var("OLLAMA_HOST"),
            Provider::Openai => var("OPENAI_BASE_URL"),
            Provider::Local => None,
        });
        cfg.api_key = var("PMM_EMBED_API_KEY").or_else(|| var("OPENAI_API_KEY"));
        Ok(Some(cfg))
    }

    /// The embedder in force for `r`, loaded (a missing or corrupt model directory is bad
    /// input: exit 2, before anything is written).
    pub fn open<R: EventLog>(&self, r: &R) -> crate::Result<Option<Shared>> {
        load(self.config(r)?)
    }

    /// [`EmbedArgs::open`] for a ledger that does not exist yet, before it is created: a
    /// missing or corrupt model directory then leaves no empty ledger behind.
    pub fn open_new(&self) -> crate::Result<Option<Shared>> {
        load(self.config_with(&serde_json::Map::new())?)
    }
}

fn load(cfg: Option<EmbedConfig>) -> crate::Result<Option<Shared>> {
    let Some(cfg) = cfg else {
        return Ok(None);
    };
    embed::embedder(&cfg)
        .map(|e| Some(Shared::new(e)))
        .map_err(|e| bad(e.to_string()))
}

fn bad(msg: String) -> Error {
    Error::bad_input(None, msg)
}

/// The newest retrieval config's content (an empty object without one): its `embed` keys.
/// Reads the configs newest first and stops at the first retrieval config: on a large ledger
/// the newest [`CONFIG_LOOKBACK`] configs lie far apart, and reading them all cost a tick or a
/// turn about 2 ms at 10^6 events.
fn ledger_keys<R: EventLog>(r: &R) -> crate::Result<serde_json::Map<String, Value>> {
    let mut found = serde_json::Map::new();
    let mut seen = 0;
    r.newest_of_kind(crate::event::Kind::Config, &mut |_, content| {
        seen += 1;
        if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(content) {
            if m.get("type").and_then(Value::as_str) == Some("retrieval") {
                found = m;
                return false;
            }
        }
        seen < CONFIG_LOOKBACK
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(p: Option<&str>, m: Option<&str>) -> EmbedArgs {
        EmbedArgs {
            embed_provider: p.map(Into::into),
            embed_model: m.map(Into::into),
            embed_url: None,
        }
    }

    fn ledger() -> (tempfile::TempDir, crate::store::Ledger) {
        let dir = tempfile::tempdir().unwrap();
        let l = crate::store::Ledger::open_writer(&dir.path().join("l.db"), 1000).unwrap();
        (dir, l)
    }

    #[test]
    fn flags_choose_the_provider_and_model() {
        let (_d, l) = ledger();
        assert!(args(None, None).config(&l).unwrap().is_none());
        assert!(args(Some("none"), Some("x")).config(&l).unwrap().is_none());
        let c = args(None, Some("/m")).config(&l).unwrap().unwrap();
        assert_eq!((c.provider, c.model.as_str()), (Provider::Local, "/m"));
        let c = args(Some("ollama"), Some("nomic"))
            .config(&l)
            .unwrap()
            .unwrap();
        assert_eq!(c.provider, Provider::Ollama);
        assert!(args(Some("bert"), Some("x")).config(&l).is_err());
        assert!(args(Some("ollama"), None).config(&l).is_err());
    }

    /// The newest retrieval config gives the keys, however many other configs follow it
    /// within the look-back; one further back is not looked for.
    #[test]
    fn the_newest_retrieval_config_within_the_look_back_gives_the_keys() {
        use crate::event::{Clock, Kind, NewEvent};
        let (_d, mut l) = ledger();
        let mut config = |content: &str| {
            let ev = NewEvent::new(Kind::Config, content, serde_json::Map::new()).unwrap();
            l.append_unchecked(&ev, &Clock::System).unwrap();
        };
        config(r#"{"type":"retrieval","embed_model":"old"}"#);
        config(r#"{"type":"retrieval","embed_model":"new"}"#);
        for _ in 0..CONFIG_LOOKBACK - 1 {
            config(r#"{"type":"policy"}"#);
        }
        let keys = ledger_keys(&l).unwrap();
        assert_eq!(keys.get("embed_model"), Some(&Value::from("new")));
        let ev = NewEvent::new(Kind::Config, r#"{"type":"policy"}"#, serde_json::Map::new());
        l.append_unchecked(&ev.unwrap(), &Clock::System).unwrap();
        assert!(ledger_keys(&l).unwrap().is_empty(), "past the look-back");
    }

    #[test]
    fn a_missing_model_directory_is_bad_input() {
        let (_d, l) = ledger();
        let e = args(Some("local"), Some("/nonexistent/model"))
            .open(&l)
            .unwrap_err();
        assert!(e.to_string().contains("config.json"), "{e}");
    }
}
