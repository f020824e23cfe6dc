//! The dummy adapter: the reference's canned reply, which echoes the user and opens one
//! commitment, so that a turn exercises the marker path without a model.

use super::{Adapter, Config, LlmError, Reply, Request};

/// The dummy adapter.
pub(crate) struct Dummy {
    model: String,
}

impl Dummy {
    /// Takes only the model name, which the reference leaves empty.
    pub(crate) fn new(cfg: &Config) -> Dummy {
        Dummy {
            model: cfg.model_name().to_string(),
        }
    }
}

impl Adapter for Dummy {
    fn provider(&self) -> &str {
        "dummy"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn generate(&mut self, req: &Request) -> Result<Reply, LlmError> {
        Ok(Reply {
            text: format!("Echo: {}\nCOMMIT: note this item", req.user),
            model: self.model.clone(),
            in_tokens: None,
            out_tokens: None,
            latency_ms: 0,
            attempts: 1,
            finish_reason: None,
        })
    }
}
