//! Upstream MCP servers as tools: every tool of a configured server is
//! `tools.mcp.SERVER.TOOL(args)` in a script, named `mcp.SERVER.TOOL` in
//! allowlists, `[tools."mcp.SERVER.TOOL"]` settings, `context.capabilities`
//! and reports; and `listMcpResources`, `listMcpResourceTemplates`,
//! `readMcpResource` reach their resources.
//!
//! [`Upstreams::connect`] starts the servers (`[mcp.servers.NAME]` of the
//! configuration: `command`/`args`/`env` over stdio, or `url` over
//! streamable HTTP), lists their tools
//! (every page) and `harness::HarnessBuilder::mcp` puts them in the
//! registry. A call goes through the facade like any tool (allowlist, the
//! upstream's input schema, budget, concurrency, approvals); a cancelled
//! call drops its request, which tells the server with
//! `notifications/cancelled`. A server that dies fails the calls in flight
//! with an error that says so, and is started again by the next call
//! (at most [`MAX_RESTARTS`] times). A server started again, or one that
//! says `notifications/tools/list_changed`, is listed again; when its
//! listing changed, [`Upstreams::changes`] says so, and a harness rebuilt
//! from [`Upstreams::register`] has the new tools. A server with
//! `auth = "oauth"` is
//! reached with the tokens `harness mcp login` stored ([`oauth`]).

pub mod oauth;

use crate::{McpAuth, McpServerSettings};
use harness_core::{Tool, ToolContext, ToolError, ToolRegistry};
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceExt};
use rmcp::transport::TokioChildProcess;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many times one server is started again after it died.
pub const MAX_RESTARTS: u32 = 5;
/// How long starting a server (spawn + initialize + listing) may take.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the upstream servers could not be reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A server could not be started or did not answer.
    #[error("MCP server `{server}`: {message}")]
    Start {
        /// The server's name in the configuration.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The server wants an authorization the harness does not hold (or
    /// holds no longer): a person runs `harness mcp login NAME`.
    #[error("MCP server `{server}` needs authorization: {message}")]
    Unauthorized {
        /// The server's name.
        server: String,
        /// Why, and what to run.
        message: String,
    },
    /// The configuration does not say how to reach the server.
    #[error("MCP server `{server}`: {message}")]
    Unsupported {
        /// The server's name.
        server: String,
        /// Why.
        message: String,
    },
}

type Client = RunningService<RoleClient, Handler>;

/// The calls in flight on one upstream server, each with its context:
/// where an elicitation from that server goes.
#[derive(Debug, Default)]
struct InFlight(std::sync::Mutex<Vec<(u64, String, ToolContext)>>);

/// Takes a call off [`InFlight`] when it ends, however it ends.
struct Flying<'a>(&'a InFlight, u64);

impl InFlight {
    fn enter(&self, tool: &str, ctx: &ToolContext) -> Flying<'_> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let key = NEXT.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut calls) = self.0.lock() {
            calls.push((key, tool.to_owned(), ctx.clone()));
        }
        Flying(self, key)
    }
}

impl Drop for Flying<'_> {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.0 .0.lock() {
            calls.retain(|(key, ..)| *key != self.1);
        }
    }
}

/// The client side of one upstream connection: what it says in
/// `initialize`, and its answer to the server's elicitation requests.
struct Handler {
    in_flight: Arc<InFlight>,
    upstream: std::sync::Weak<Upstream>,
}

impl rmcp::ClientHandler for Handler {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        client_config()
    }

    /// The server's tools changed: list them again (off the notification's
    /// path, which must not wait on a request to the same server).
    async fn on_tool_list_changed(&self, context: rmcp::service::NotificationContext<RoleClient>) {
        if let Some(up) = self.upstream.upgrade() {
            tokio::spawn(async move { up.relist(&context.peer).await });
        }
    }

    /// A form elicitation asks the run's approvals, as the call that is
    /// waiting on it (`tools.mcp.SERVER.TOOL`, with the message and the
    /// form as its arguments); approved, the answer is the form's
    /// defaults. With no call or several in flight on this server, it
    /// cannot tell whose run to ask, and declines.
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
        let decline = Ok(ElicitResult::new(ElicitationAction::Decline));
        let calls = self
            .in_flight
            .0
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        let [(_, tool, ctx)] = calls.as_slice() else {
            tracing::warn!(
                calls = calls.len(),
                "an upstream elicitation with no single call to ask for: declined"
            );
            return decline;
        };
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return decline;
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
        match ctx
            .ask(tool, json!({"elicitation": message, "form": schema}))
            .await
        {
            Ok(()) => {
                Ok(ElicitResult::new(ElicitationAction::Accept).with_content(defaults(&schema)))
            }
            Err(_) => decline,
        }
    }
}

/// The answer a form gets when a person approves it as it stands: each
/// field's `default`.
fn defaults(schema: &Value) -> Value {
    let mut out = Map::new();
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (name, field) in props {
            if let Some(d) = field.get("default") {
                out.insert(name.clone(), d.clone());
            }
        }
    }
    Value::Object(out)
}

/// What the harness tells an upstream server in `initialize`: its name and
/// version, and the newest protocol version that has that handshake (a
/// newer one has none to answer).
fn client_config() -> rmcp::model::ClientConfig {
    let mut config = rmcp::model::ClientConfig::default();
    config.protocol_version = rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE;
    config.client_info = rmcp::model::Implementation::new("harness", env!("CARGO_PKG_VERSION"));
    config.capabilities.elicitation = Some(
        rmcp::model::ElicitationCapability::new()
            .with_form(rmcp::model::FormElicitationCapability::default()),
    );
    config
}

/// What the upstream servers list: each server's tools, and a count of
/// the changes to that listing.
#[derive(Debug)]
struct Catalogue {
    listing: std::sync::Mutex<BTreeMap<String, Vec<rmcp::model::Tool>>>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl Default for Catalogue {
    fn default() -> Self {
        Catalogue {
            listing: Default::default(),
            changes: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Catalogue {
    /// Records `server`'s listing; counts a change when it differs.
    fn set(&self, server: &str, tools: Vec<rmcp::model::Tool>) {
        let Ok(mut listing) = self.listing.lock() else {
            return;
        };
        let first = !listing.contains_key(server);
        if listing.get(server) == Some(&tools) {
            return;
        }
        listing.insert(server.to_owned(), tools);
        if !first {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    fn tools(&self, server: &str) -> Vec<rmcp::model::Tool> {
        self.listing
            .lock()
            .ok()
            .and_then(|l| l.get(server).cloned())
            .unwrap_or_default()
    }
}

/// One upstream server: its settings and, while it lives, its session.
struct Upstream {
    name: String,
    settings: McpServerSettings,
    session: tokio::sync::Mutex<Option<Client>>,
    restarts: AtomicU32,
    in_flight: Arc<InFlight>,
    catalogue: Arc<Catalogue>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Upstream {
    fn handler(self: &Arc<Self>) -> Handler {
        Handler {
            in_flight: self.in_flight.clone(),
            upstream: Arc::downgrade(self),
        }
    }

    /// The tools the server lists (every page) that scripts may call.
    async fn listed(&self, peer: &Peer<RoleClient>) -> Result<Vec<rmcp::model::Tool>, String> {
        let listed = tokio::time::timeout(START_TIMEOUT, peer.list_all_tools())
            .await
            .map_err(|_| "tools/list timed out".to_owned())?
            .map_err(|e| format!("tools/list failed: {e}"))?;
        Ok(listed
            .into_iter()
            .filter(|t| {
                self.settings
                    .tools
                    .as_ref()
                    .is_none_or(|allow| allow.iter().any(|a| a == t.name.as_ref()))
            })
            .collect())
    }

    /// Lists the server's tools again into the catalogue.
    async fn relist(&self, peer: &Peer<RoleClient>) {
        match self.listed(peer).await {
            Ok(tools) => self.catalogue.set(&self.name, tools),
            Err(e) => tracing::warn!(server = %self.name, "listing the tools again failed: {e}"),
        }
    }

    async fn start(self: &Arc<Self>) -> Result<Client, McpError> {
        let fail = |message: String| McpError::Start {
            server: self.name.clone(),
            message,
        };
        if let Some(url) = &self.settings.url {
            // rmcp's HTTPS client takes the process's crypto provider.
            let _ = rustls::crypto::ring::default_provider().install_default();
            if self.settings.auth == Some(McpAuth::Oauth) {
                let transport = oauth::transport(&self.name, &self.settings, url).await?;
                return self.initialized(url, transport).await;
            }
            let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
            return self.initialized(url, transport).await;
        }
        let Some(program) = &self.settings.command else {
            return Err(fail("neither `command` nor `url` is set".into()));
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(&self.settings.args).envs(&self.settings.env);
        #[cfg(unix)]
        cmd.process_group(0);
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| fail(format!("cannot start `{program}`: {e}")))?;
        self.initialized(&format!("`{program}`"), transport).await
    }

    /// The session over `transport` once `initialize` is done, within
    /// [`START_TIMEOUT`]; `what` names the server in errors.
    async fn initialized<T, E, A>(
        self: &Arc<Self>,
        what: &str,
        transport: T,
    ) -> Result<Client, McpError>
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let fail = |message: String| McpError::Start {
            server: self.name.clone(),
            message,
        };
        match tokio::time::timeout(START_TIMEOUT, self.handler().serve(transport)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) if e.auth_challenge().is_some() => Err(McpError::Unauthorized {
                server: self.name.clone(),
                message: format!(
                    "{what} refused the stored authorization; run `harness mcp login {}`",
                    self.name
                ),
            }),
            Ok(Err(e)) => Err(fail(format!("{what} did not initialize: {e}"))),
            Err(_) => Err(fail(format!(
                "{what} did not initialize within {} s",
                START_TIMEOUT.as_secs()
            ))),
        }
    }

    /// The live session's peer, starting the server again if it died.
    async fn peer(self: &Arc<Self>) -> Result<Peer<RoleClient>, ToolError> {
        let mut session = self.session.lock().await;
        if let Some(s) = session.as_ref() {
            if !s.peer().is_transport_closed() {
                return Ok(s.peer().clone());
            }
        }
        *session = None;
        let n = self.restarts.fetch_add(1, Ordering::SeqCst);
        if n >= MAX_RESTARTS {
            return Err(ToolError::new(format!(
                "MCP server `{}` died and was restarted {MAX_RESTARTS} times; it is not started again",
                self.name
            )));
        }
        tracing::warn!(server = %self.name, restart = n + 1, "restarting MCP server");
        let client = self.start().await.map_err(|e| match e {
            McpError::Unauthorized { .. } => ToolError::new(e.to_string()),
            e => ToolError::new(format!("MCP server `{}` is down: {e}", self.name)),
        })?;
        let peer = client.peer().clone();
        *session = Some(client);
        drop(session);
        // A server started again may offer other tools than before.
        self.relist(&peer).await;
        Ok(peer)
    }

    /// A failed request: if the session is gone, say the server died.
    fn failure(
        &self,
        what: &str,
        e: rmcp::service::ServiceError,
        peer: &Peer<RoleClient>,
    ) -> ToolError {
        if let (Some(challenge), Some(url)) = (e.auth_challenge(), &self.settings.url) {
            return ToolError::new(oauth::refusal(&self.name, &self.settings, url, challenge));
        }
        if peer.is_transport_closed() || matches!(e, rmcp::service::ServiceError::TransportClosed) {
            ToolError::new(format!(
                "MCP server `{}` exited during {what}; the next call starts it again",
                self.name
            ))
        } else {
            ToolError::new(format!("MCP server `{}`: {what} failed: {e}", self.name))
        }
    }
}

/// Runs `fut` until it ends, the call is cancelled (the request is
/// dropped, which sends `notifications/cancelled`) or time runs out.
async fn bounded<T>(
    fut: impl std::future::Future<Output = Result<T, ToolError>>,
    ctx: &ToolContext,
    timeout_ms: Option<u64>,
) -> Result<T, ToolError> {
    let mut until = ctx.deadline;
    if let Some(ms) = timeout_ms {
        until = until.min(Instant::now() + Duration::from_millis(ms));
    }
    tokio::select! {
        r = fut => r,
        _ = ctx.cancel.cancelled() => Err(ToolError::cancelled()),
        _ = tokio::time::sleep_until(until.into()) => Err(ToolError::new("the MCP call timed out")),
    }
}

/// The connected upstream servers and the tools they offer.
#[derive(Debug, Clone, Default)]
pub struct Upstreams {
    servers: Vec<Arc<Upstream>>,
    catalogue: Arc<Catalogue>,
}

impl Upstreams {
    /// Starts every server of `servers` (in parallel) and lists its tools.
    /// A server that cannot be started is an error naming it.
    pub async fn connect(servers: &BTreeMap<String, McpServerSettings>) -> Result<Self, McpError> {
        let catalogue = Arc::new(Catalogue::default());
        let starts = servers.iter().map(|(name, settings)| {
            let catalogue = catalogue.clone();
            async move {
                if settings.command.is_some() == settings.url.is_some() {
                    return Err(McpError::Unsupported {
                        server: name.clone(),
                        message: "give either `command` (stdio) or `url` (streamable HTTP)".into(),
                    });
                }
                if settings.auth.is_some() && settings.url.is_none() {
                    return Err(McpError::Unsupported {
                        server: name.clone(),
                        message: "`auth` is for a server reached by `url`".into(),
                    });
                }
                let up = Arc::new(Upstream {
                    name: name.clone(),
                    settings: settings.clone(),
                    session: tokio::sync::Mutex::new(None),
                    restarts: AtomicU32::new(0),
                    in_flight: Arc::default(),
                    catalogue,
                });
                let client = up.start().await?;
                let tools = up
                    .listed(client.peer())
                    .await
                    .map_err(|message| McpError::Start {
                        server: name.clone(),
                        message,
                    })?;
                up.catalogue.set(name, tools);
                *up.session.lock().await = Some(client);
                Ok::<_, McpError>(up)
            }
        });
        let mut servers_up = Vec::new();
        for r in futures::future::join_all(starts).await {
            servers_up.push(r?);
        }
        Ok(Upstreams {
            servers: servers_up,
            catalogue,
        })
    }

    /// Whether no server is configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The registry names of the upstream tools (`mcp.SERVER.TOOL`), as
    /// the servers list them now.
    pub fn tool_names(&self) -> Vec<String> {
        self.servers
            .iter()
            .flat_map(|up| {
                self.catalogue
                    .tools(&up.name)
                    .into_iter()
                    .map(move |t| format!("mcp.{}.{}", up.name, t.name))
            })
            .collect()
    }

    /// How many times a server's listing changed since [`Self::connect`]
    /// (a server started again with other tools, or one that said its
    /// tools changed and listed others).
    pub fn generation(&self) -> u64 {
        *self.catalogue.changes.borrow()
    }

    /// Says when [`Self::generation`] goes up.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.catalogue.changes.subscribe()
    }

    /// Adds the upstream tools as the servers list them now, and the three
    /// resource tools, to `registry` (nothing when no server is
    /// configured).
    pub fn register(&self, registry: &mut ToolRegistry) -> Result<(), harness_core::RegistryError> {
        if self.servers.is_empty() {
            return Ok(());
        }
        for up in &self.servers {
            let mut members = Vec::new();
            for t in self.catalogue.tools(&up.name) {
                let tool = Arc::new(upstream_tool(up.clone(), t));
                members.push(tool.name().to_owned());
                registry.register_harness_tool(tool)?;
            }
            // `mcp.SERVER` names a server's tools in allowlists.
            registry.define_pack(&format!("mcp.{}", up.name), members)?;
        }
        for tool in resource_tools(&self.servers) {
            registry.register(tool)?;
        }
        Ok(())
    }
}

/// One upstream tool, as a tool of the registry named `mcp.SERVER.TOOL`.
fn upstream_tool(server: Arc<Upstream>, t: rmcp::model::Tool) -> harness_core::FnTool {
    let upstream_name = t.name.to_string();
    let full_name = format!("mcp.{}.{}", server.name, upstream_name);
    let mut schema = Value::Object((*t.input_schema).clone());
    // An upstream schema the validator cannot compile must not take the
    // whole server down: the tool then checks only that it gets an object.
    if jsonschema::validator_for(&schema).is_err() {
        tracing::warn!(server = %server.name, tool = %upstream_name,
            "upstream input schema does not compile; accepting any object");
        schema = json!({"type": "object"});
    }
    let description = t
        .description
        .map(|d| d.to_string())
        .or(t.title)
        .unwrap_or_default();
    let needs_approval = server
        .settings
        .needs_approval
        .iter()
        .any(|a| a == "*" || *a == upstream_name);
    let name = full_name.clone();
    let tool = harness_core::FnTool::new(&full_name, description, schema, move |args, ctx| {
        let up = server.clone();
        let upstream_name = upstream_name.clone();
        let full_name = name.clone();
        async move {
            let call = async {
                let peer = up.peer().await?;
                let mut params = CallToolRequestParams::new(upstream_name.clone());
                if let Value::Object(m) = args {
                    params = params.with_arguments(m);
                }
                let _flying = up.in_flight.enter(&full_name, &ctx);
                let result = peer
                    .call_tool(params)
                    .await
                    .map_err(|e| up.failure(&format!("the call to {upstream_name}"), e, &peer))?;
                let text = content_text(&result.content);
                if result.is_error == Some(true) {
                    return Err(ToolError::new(if text.is_empty() {
                        format!("{full_name} reported an error")
                    } else {
                        text
                    }));
                }
                Ok(match result.structured_content {
                    Some(v) => v,
                    None if !text.is_empty() || result.content.is_empty() => Value::String(text),
                    // Only non-text content (images, resources): as MCP gives it.
                    None => serde_json::to_value(&result.content).unwrap_or(Value::Null),
                })
            };
            bounded(call, &ctx, up.settings.timeout_ms).await
        }
    });
    let tool = match t.output_schema {
        Some(s) => tool.with_output_schema(Value::Object((*s).clone())),
        None => tool,
    };
    if needs_approval {
        tool.requiring_approval(|_| true)
    } else {
        tool
    }
}

/// The text parts of a result, joined by newlines.
fn content_text(content: &[rmcp::model::ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|c| {
            let v = serde_json::to_value(c).ok()?;
            (v.get("type")? == "text")
                .then(|| v.get("text")?.as_str().map(str::to_owned))
                .flatten()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `listMcpResources`, `listMcpResourceTemplates`, `readMcpResource`.
fn resource_tools(servers: &[Arc<Upstream>]) -> Vec<harness_core::FnTool> {
    let names: Vec<Value> = servers.iter().map(|s| json!(s.name)).collect();
    let by_name: Arc<BTreeMap<String, Arc<Upstream>>> = Arc::new(
        servers
            .iter()
            .map(|s| (s.name.clone(), s.clone()))
            .collect(),
    );
    let server_arg = json!({"type": "string", "enum": names,
        "description": "The MCP server (default: every server)."});
    let pick = |by_name: &BTreeMap<String, Arc<Upstream>>, args: &Value| -> Vec<Arc<Upstream>> {
        match args.get("server").and_then(Value::as_str) {
            Some(s) => by_name.get(s).cloned().into_iter().collect(),
            None => by_name.values().cloned().collect(),
        }
    };
    let list = |name: &str, description: &str, key: &'static str, templates: bool| {
        let by_name = by_name.clone();
        harness_core::FnTool::new(
            name,
            description,
            json!({"type": "object", "properties": {"server": server_arg.clone()},
                   "additionalProperties": false}),
            move |args, ctx| {
                let servers = pick(&by_name, &args);
                async move {
                    let work = async {
                        let mut all = Vec::new();
                        for up in servers {
                            let peer = up.peer().await?;
                            let items: Vec<Value> = if templates {
                                peer.list_all_resource_templates()
                                    .await
                                    .map_err(|e| up.failure("resources/templates/list", e, &peer))?
                                    .into_iter()
                                    .filter_map(|r| serde_json::to_value(r).ok())
                                    .collect()
                            } else {
                                peer.list_all_resources()
                                    .await
                                    .map_err(|e| up.failure("resources/list", e, &peer))?
                                    .into_iter()
                                    .filter_map(|r| serde_json::to_value(r).ok())
                                    .collect()
                            };
                            for mut item in items {
                                if let Value::Object(m) = &mut item {
                                    m.insert("server".into(), json!(up.name));
                                }
                                all.push(item);
                            }
                        }
                        Ok(json!({ key: all }))
                    };
                    bounded(work, &ctx, None).await
                }
            },
        )
        .with_output_schema(
            json!({"type": "object", "properties": {key: {"type": "array",
            "items": {"type": "object", "properties": {"server": {"type": "string"},
                "uri": {"type": "string"}, "uriTemplate": {"type": "string"},
                "name": {"type": "string"}, "description": {"type": "string"},
                "mimeType": {"type": "string"}}}}}, "required": [key]}),
        )
    };
    let read = {
        let by_name = by_name.clone();
        harness_core::FnTool::new(
            "readMcpResource",
            "Reads one resource of an MCP server by its URI. Returns {contents: [{uri, mimeType?, text?, blob?}]}.",
            json!({"type": "object", "properties": {"server": server_arg.clone(),
                       "uri": {"type": "string", "minLength": 1, "description": "The resource's URI."}},
                   "required": ["server", "uri"], "additionalProperties": false}),
            move |args, ctx| {
                let up = pick(&by_name, &args).into_iter().next();
                let uri = args["uri"].as_str().unwrap_or_default().to_owned();
                async move {
                    let up = up.ok_or_else(|| ToolError::new("no such MCP server"))?;
                    let work = async {
                        let peer = up.peer().await?;
                        let r = peer
                            .read_resource(ReadResourceRequestParams::new(uri))
                            .await
                            .map_err(|e| up.failure("resources/read", e, &peer))?;
                        let contents = serde_json::to_value(&r.contents).unwrap_or(Value::Null);
                        let mut m = Map::new();
                        m.insert("contents".into(), contents);
                        Ok(Value::Object(m))
                    };
                    bounded(work, &ctx, up.settings.timeout_ms).await
                }
            },
        )
        .with_output_schema(json!({"type": "object", "properties": {"contents": {"type": "array",
            "items": {"type": "object", "properties": {"uri": {"type": "string"},
                "mimeType": {"type": "string"}, "text": {"type": "string"},
                "blob": {"type": "string"}}, "required": ["uri"]}}}, "required": ["contents"]}))
    };
    vec![
        list(
            "listMcpResources",
            "Lists the resources of the MCP servers (or of one). Returns {resources: [{server, uri, name, description?, mimeType?}]}.",
            "resources",
            false,
        ),
        list(
            "listMcpResourceTemplates",
            "Lists the resource templates of the MCP servers (or of one). Returns {resourceTemplates: [{server, uriTemplate, name, description?, mimeType?}]}.",
            "resourceTemplates",
            true,
        ),
        read,
    ]
}
