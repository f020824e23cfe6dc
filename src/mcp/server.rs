//! The MCP face of [`super::tools`]: an `rmcp` server handler listing the tools (without the
//! writing ones under `--read-only`) and the resources `pmm://state` and `pmm://event/{id}`.
//!
//! Each call runs on tokio's blocking pool (SQLite is synchronous), so a call waiting for
//! another writer's lock never stalls the reading of further requests. A tool that fails
//! answers with an `isError` result carrying the reason; only an unknown tool is a JSON-RPC
//! error (as the protocol asks).

use super::tokens::{Caller, Scope};
use super::tools::{self, Config, ToolError, ToolName};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::Arc;

/// The URI of the state resource.
pub const STATE_URI: &str = "pmm://state";
/// The URI template of single events.
pub const EVENT_TEMPLATE: &str = "pmm://event/{id}";
const EVENT_PREFIX: &str = "pmm://event/";

const INSTRUCTIONS: &str = "This server is the agent's long-term memory: an append-only, \
hash-chained pmm ledger shared with other programs. Use recall to search it before answering \
from memory, remember to keep something worth recalling later, commit/close for undertakings, \
state for identity and open commitments, events to read the history, verify to check its \
integrity.";

/// The `pmm-mcp` server: the tools and resources over one ledger.
#[derive(Clone)]
pub struct Server {
    cfg: Arc<Config>,
}

impl Server {
    /// A server for `cfg`.
    pub fn new(cfg: Config) -> Server {
        Server { cfg: Arc::new(cfg) }
    }

    /// The tools as MCP lists them (without the writing ones under `--read-only`).
    pub fn tools(&self) -> Vec<Tool> {
        self.tools_for(None)
    }

    /// The tools `caller` may call (a read-scoped token: only the reading ones; the admin
    /// tools only to an admin token or a caller without one).
    fn tools_for(&self, caller: Option<&Caller>) -> Vec<Tool> {
        let read_only = self.cfg.read_only || caller.is_some_and(|c| c.scope == Scope::Read);
        // The admin tools are listed to the callers that may call them (a token of another
        // scope that calls one anyway is refused, and the attempt recorded).
        let admin = caller.is_none_or(|c| c.scope == Scope::Admin);
        tools::specs()
            .into_iter()
            .filter(|s| !(s.writes && read_only))
            .filter(|s| admin || !super::admin::is_admin(s.name))
            .map(|s| {
                let schema = match s.schema {
                    Value::Object(m) => m,
                    _ => serde_json::Map::new(),
                };
                let mut t = Tool::new(s.name.as_str(), s.description, Arc::new(schema));
                t.title = Some(s.title.to_string());
                t.annotations = Some(
                    ToolAnnotations::with_title(s.title)
                        .read_only(!s.writes)
                        .destructive(s.name == ToolName::Forget)
                        .idempotent(!s.writes)
                        .open_world(false),
                );
                t
            })
            .collect()
    }

    /// Runs `f` on the blocking pool; a panic in it is a failed call, not a dead server.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Config) -> Result<T, ToolError> + Send + 'static,
    ) -> Result<T, ToolError> {
        let cfg = self.cfg.clone();
        match tokio::task::spawn_blocking(move || f(&cfg)).await {
            Ok(r) => r,
            Err(e) => Err(ToolError(format!("internal error: {e}"))),
        }
    }
}

/// The token a request over HTTP came with (the door puts it in the request's extensions);
/// `None` on stdio.
fn caller(context: &RequestContext<RoleServer>) -> Option<Caller> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
}

fn error_result(e: &ToolError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.0.clone())])
}

fn json_resource(uri: &str, v: &Value) -> ReadResourceResult {
    ReadResourceResult::new(vec![
        ResourceContents::text(v.to_string(), uri).with_mime_type("application/json")
    ])
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(
            Implementation::new("pmm-mcp", env!("CARGO_PKG_VERSION")).with_title("pmm ledger"),
        )
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.tools_for(caller(&context).as_ref()),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller(&context);
        let name = request.name.to_string();
        if !tools::specs().iter().any(|s| s.name.as_str() == name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool '{name}'"),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        let result = self
            .blocking(move |cfg| tools::call_as(cfg, caller.as_ref(), &name, args))
            .await;
        Ok(match result {
            Ok(v) => CallToolResult::structured(v),
            Err(e) => error_result(&e),
        }
        .into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![Resource::new(
            STATE_URI, "state",
        )
        .with_title("Agent state")
        .with_description(
            "Identity, open commitments, self-model and thresholds as of the newest event \
             (pmm-replay --state)",
        )
        .with_mime_type("application/json")]))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(EVENT_TEMPLATE, "event")
                .with_title("One ledger event")
                .with_description(
                    "The event with this id: id, ts, kind, content, meta, prev_hash, hash",
                )
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let value = if uri == STATE_URI {
            self.blocking(tools::current_state).await
        } else if let Some(id) = uri.strip_prefix(EVENT_PREFIX) {
            let Ok(id) = id.parse::<i64>() else {
                return Err(ErrorData::invalid_params(
                    format!("'{uri}': the event id must be a number (pmm://event/42)"),
                    None,
                ));
            };
            self.blocking(move |cfg| tools::event_by_id(cfg, id)).await
        } else {
            return Err(ErrorData::resource_not_found(
                format!("no resource '{uri}' (pmm://state, pmm://event/{{id}})"),
                None,
            ));
        };
        match value {
            Ok(v) => Ok(json_resource(&uri, &v).into()),
            Err(e) => Err(ErrorData::resource_not_found(e.0, None)),
        }
    }
}
