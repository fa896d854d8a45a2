//! `harness mcp`: the harness as an MCP server ("code mode"). A client
//! sees four tools: `run_script` (whose description carries the
//! TypeScript declarations of every tool a script may call), `check_script`,
//! `search_tools` and `describe_tools`.

use harness::{ConsoleLevel, Harness, RunObserver, ScriptLanguage};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Above this many bytes of declarations, `run_script`'s description lists
/// names and summaries only, and points at `search_tools`/`describe_tools`.
pub(crate) const DEFAULT_MAX_DESCRIPTION_BYTES: usize = 16 * 1024;

/// The server: one harness, shared by every client and run.
#[derive(Clone)]
pub(crate) struct CodeMode {
    harness: Harness,
    tools: Arc<Vec<Tool>>,
    /// Ask the client (MCP elicitation) when a call needs approval and the
    /// client can be asked; off when `--approve` answers for everyone.
    ask_client: bool,
}

fn schema(v: Value) -> Arc<Map<String, Value>> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(Map::new()),
    }
}

impl CodeMode {
    pub(crate) fn new(
        harness: Harness,
        max_description_bytes: usize,
        ask_client: bool,
    ) -> CodeMode {
        let names = harness.tool_names();
        let declarations = harness.typescript();
        let limits = harness.limits();
        let api = if declarations.len() <= max_description_bytes {
            format!("The globals a script can use:\n\n```ts\n{declarations}```")
        } else {
            let registry = harness.registry();
            let list: Vec<String> = names
                .iter()
                .map(|n| {
                    let first = registry
                        .get(n)
                        .map(|t| t.description().lines().next().unwrap_or("").to_owned())
                        .unwrap_or_default();
                    format!("- tools.{n}: {first}")
                })
                .collect();
            format!(
                "The tools ({} of them; their TypeScript declarations are too long for this \
                 description: call `describe_tools` with the names you need, or `search_tools`):\n{}",
                names.len(),
                list.join("\n")
            )
        };
        let run = format!(
            "Runs a JavaScript or TypeScript script in a sandbox ({engine}) and returns its report \
             (value, console, tool calls, error). The script is the body of an async function: \
             use `await`, and `return` the result (it must be JSON-serialisable). Call tools as \
             `await tools.NAME(args)` (upstream MCP tools as `tools.mcp.SERVER.TOOL(args)`); \
             several calls can run at once with Promise.all. Limits: {timeout} ms, {calls} tool \
             calls, {mem} MiB. No network, no filesystem except through tools.\n\n{api}",
            engine = harness.engine().name,
            timeout = limits.timeout_ms,
            calls = limits.max_tool_calls,
            mem = limits.memory_bytes / (1024 * 1024),
        );
        let code = json!({"type": "string", "description": "The script."});
        let language = json!({"type": "string", "enum": ["js", "ts"],
            "description": "The script's language (default: JavaScript if it parses, else TypeScript)."});
        let tools = vec![
            Tool::new(
                "run_script",
                run,
                schema(json!({"type": "object", "properties": {"code": code, "language": language},
                              "required": ["code"], "additionalProperties": false})),
            ),
            Tool::new(
                "check_script",
                "Checks a script without running it: syntax and banned identifiers, with line and column.",
                schema(json!({"type": "object", "properties": {"code": code, "language": language},
                              "required": ["code"], "additionalProperties": false})),
            ),
            Tool::new(
                "search_tools",
                "Ranks the tools a script may call by name and description; returns names, scores and summaries.",
                schema(json!({"type": "object", "properties": {
                    "query": {"type": "string", "description": "Words to look for."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "At most this many (default 10)."}},
                    "required": ["query"], "additionalProperties": false})),
            ),
            Tool::new(
                "describe_tools",
                "The TypeScript declarations of the named tools (names as in `tools.NAME`, upstream MCP tools as `mcp.SERVER.TOOL`).",
                schema(json!({"type": "object", "properties": {
                    "names": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
                    "required": ["names"], "additionalProperties": false})),
            ),
        ];
        CodeMode {
            harness,
            tools: Arc::new(tools),
            ask_client,
        }
    }

    async fn run_script(
        &self,
        args: &Map<String, Value>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let code = string_arg(args, "code")?;
        let mut request = self.harness.request(code);
        request.language = language(args)?.unwrap_or(request.language);
        // A client's notifications/cancelled cancels the run.
        request.cancel = ctx.ct.clone();
        // Approvals go to the client where it can answer them.
        let can_elicit = ctx
            .peer
            .peer_info()
            .is_some_and(|i| i.capabilities.elicitation.is_some());
        if self.ask_client && can_elicit {
            request.tools.approvals = Arc::new(AskClient(ctx.peer.clone()));
        }
        // Console lines and progress as MCP progress notifications, sent
        // while the script runs, when the client asked for them.
        let forward = ctx.meta.get_progress_token().map(|token| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            let peer = ctx.peer.clone();
            let task = tokio::spawn(async move {
                let mut n = 0.0;
                while let Some(message) = rx.recv().await {
                    n += 1.0;
                    let mut p = ProgressNotificationParam::new(token.clone(), n);
                    p.message = Some(message);
                    if peer.notify_progress(p).await.is_err() {
                        break;
                    }
                }
            });
            (tx, task)
        });
        if let Some((tx, _)) = &forward {
            request.observer = Some(harness::Observer::new(Arc::new(Progress(tx.clone()))));
        }
        let report = self.harness.execute(request).await;
        if let Some((tx, task)) = forward {
            drop(tx);
            let _ = task.await;
        }
        let summary = match (&report.value, &report.error) {
            (_, Some(e)) => format!("error: {}: {}", e.code.as_str(), e.message),
            (Some(v), None) => {
                let mut s = v.to_string();
                if s.len() > 2000 {
                    let mut end = 2000;
                    while !s.is_char_boundary(end) {
                        end -= 1;
                    }
                    s.truncate(end);
                    s.push('…');
                }
                format!("ok: {s}")
            }
            (None, None) => "ok (no value)".into(),
        };
        let summary = format!(
            "{summary}\n({} tool call(s), {} console line(s), {:.1} ms)",
            report.tool_calls.len(),
            report.console.len(),
            report.metrics.duration_ms
        );
        let value = serde_json::to_value(&report).unwrap_or(Value::Null);
        let mut result = CallToolResult::structured(value);
        result.content = vec![ContentBlock::text(summary)];
        result.is_error = Some(!report.ok);
        Ok(result)
    }

    /// Syntax (JavaScript, or TypeScript with types stripped) and banned
    /// identifiers, as the engine would see them; nothing runs.
    async fn check_script(&self, args: &Map<String, Value>) -> Result<CallToolResult, ErrorData> {
        let code = string_arg(args, "code")?;
        let _ = language(args)?;
        Ok(match self.harness.check(code).await {
            Ok(()) => diagnostics(Vec::new()),
            Err(e) => diagnostics(vec![diagnostic(&e)]),
        })
    }

    fn search_tools(&self, args: &Map<String, Value>) -> Result<CallToolResult, ErrorData> {
        let query = string_arg(args, "query")?;
        let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(10) as usize;
        let registry = self.harness.registry();
        let found: Vec<Value> =
            harness::declarations::search(registry, &self.harness.tool_names(), query)
                .into_iter()
                .take(limit)
                .map(|(name, score)| {
                    let summary = registry
                        .get(&name)
                        .map(|t| t.description().lines().next().unwrap_or("").to_owned())
                        .unwrap_or_default();
                    json!({"name": name, "score": score, "summary": summary})
                })
                .collect();
        Ok(CallToolResult::structured(json!({ "tools": found })))
    }

    fn describe_tools(&self, args: &Map<String, Value>) -> Result<CallToolResult, ErrorData> {
        let names: Vec<String> = args
            .get("names")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let known = self.harness.tool_names();
        if let Some(missing) = names.iter().find(|n| !known.contains(n)) {
            return Err(ErrorData::invalid_params(
                format!("no tool `{missing}`; search_tools lists them"),
                None,
            ));
        }
        let d = harness::declarations::declarations(self.harness.registry(), &names);
        let mut result = CallToolResult::success(vec![ContentBlock::text(d.clone())]);
        result.structured_content = Some(json!({ "declarations": d }));
        Ok(result)
    }
}

fn string_arg<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, ErrorData> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{key}` (a string) is required"), None))
}

fn language(args: &Map<String, Value>) -> Result<Option<ScriptLanguage>, ErrorData> {
    match args.get("language").and_then(Value::as_str) {
        None => Ok(None),
        Some("js" | "javascript") => Ok(Some(ScriptLanguage::JavaScript)),
        Some("ts" | "typescript") => Ok(Some(ScriptLanguage::TypeScript)),
        Some(other) => Err(ErrorData::invalid_params(
            format!("language `{other}`: use js or ts"),
            None,
        )),
    }
}

fn diagnostic(e: &harness::ScriptError) -> Value {
    let mut d = json!({"code": e.code.as_str(), "message": e.message});
    if let Some(l) = &e.location {
        d["line"] = json!(l.line);
        d["column"] = json!(l.column);
    }
    d
}

fn diagnostics(list: Vec<Value>) -> CallToolResult {
    let ok = list.is_empty();
    let text = if ok {
        "no problems found".to_owned()
    } else {
        list.iter()
            .map(|d| {
                format!(
                    "{}{}: {}",
                    d["code"].as_str().unwrap_or(""),
                    d.get("line")
                        .map(|l| format!(" at line {l}, column {}", d["column"]))
                        .unwrap_or_default(),
                    d["message"].as_str().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut r = CallToolResult::structured(json!({"ok": ok, "diagnostics": list}));
    r.content = vec![ContentBlock::text(text)];
    r
}

/// Asks the MCP client to approve a call (form elicitation with one
/// boolean); a decline, a cancel or no answer denies.
struct AskClient(rmcp::service::Peer<RoleServer>);

#[async_trait::async_trait]
impl harness::ApprovalBridge for AskClient {
    async fn request(&self, req: &harness::ApprovalRequest) -> harness::ApprovalDecision {
        let mut message = format!(
            "Allow the script to call `{}` with arguments {}?",
            req.tool, req.args
        );
        if let (Some(l), Some(c)) = (req.line, req.column) {
            message.push_str(&format!(" (line {l}, column {c})"));
        }
        if let Some(snippet) = &req.snippet {
            message.push_str("\n\n");
            message.push_str(snippet);
        }
        let schema = serde_json::from_value(json!({"type": "object",
            "properties": {"approve": {"type": "boolean", "title": "Allow this call", "default": false}},
            "required": ["approve"]}));
        let Ok(schema) = schema else {
            return harness::ApprovalDecision::Denied {
                reason: Some("cannot build the approval form".into()),
            };
        };
        let params = rmcp::model::ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        };
        match self.0.create_elicitation(params).await {
            Ok(r)
                if r.action == rmcp::model::ElicitationAction::Accept
                    && r.content
                        .as_ref()
                        .and_then(|c| c.get("approve"))
                        .and_then(Value::as_bool)
                        == Some(true) =>
            {
                harness::ApprovalDecision::Approved
            }
            Ok(_) => harness::ApprovalDecision::Denied {
                reason: Some("denied by the MCP client".into()),
            },
            Err(e) => harness::ApprovalDecision::Denied {
                reason: Some(format!("the MCP client could not be asked: {e}")),
            },
        }
    }
}

/// Forwards console lines and progress events to the progress task.
struct Progress(tokio::sync::mpsc::UnboundedSender<String>);

impl RunObserver for Progress {
    fn progress(&self, message: &str, _data: Option<&Value>) {
        let _ = self.0.send(message.to_owned());
    }
    fn console(&self, level: ConsoleLevel, text: &str) {
        let level = serde_json::to_value(level)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = self.0.send(format!("console.{level}: {text}"));
    }
}

impl ServerHandler for CodeMode {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("harness", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "Write one script that calls the tools (see run_script's description) instead of \
             calling tools one by one; return the result."
                .into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let result = match request.name.as_ref() {
            "run_script" => self.run_script(&args, context).await?,
            "check_script" => self.check_script(&args).await?,
            "search_tools" => self.search_tools(&args)?,
            "describe_tools" => self.describe_tools(&args)?,
            other => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "no tool `{other}`: run_script, check_script, search_tools, describe_tools"
                    ),
                    None,
                ))
            }
        };
        Ok(result.into())
    }
}

/// Serves one client on stdin/stdout until it disconnects.
pub(crate) async fn serve_stdio(server: CodeMode) -> std::process::ExitCode {
    use rmcp::ServiceExt;
    match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => {
            let _ = running.waiting().await;
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness mcp: the client did not initialize: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Serves streamable HTTP on `addr` (the MCP endpoint is `/mcp`; any path
/// is accepted) until the process is stopped. Each client session gets
/// its own handler; all share the harness, and runs are isolated as always.
pub(crate) async fn serve_http(
    server: CodeMode,
    addr: std::net::SocketAddr,
) -> std::process::ExitCode {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto::Builder;
    use hyper_util::service::TowerToHyperService;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::StreamableHttpService;
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("harness mcp: cannot listen on {addr}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let service = TowerToHyperService::new(StreamableHttpService::new(
        move || Ok(server.clone()),
        LocalSessionManager::default().into(),
        Default::default(),
    ));
    eprintln!(
        "harness mcp: serving streamable HTTP on http://{}/mcp",
        listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default()
    );
    loop {
        let io = tokio::select! {
            _ = tokio::signal::ctrl_c() => return std::process::ExitCode::SUCCESS,
            accept = listener.accept() => match accept {
                Ok((stream, _)) => TokioIo::new(stream),
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            }
        };
        let service = service.clone();
        tokio::spawn(async move {
            let _ = Builder::new(TokioExecutor::default())
                .serve_connection(io, service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `tools/list` answers, pinned: the four tools' names,
    /// descriptions and input schemas are what clients and models see.
    /// `UPDATE_GOLDEN=1` rewrites the file.
    #[test]
    fn tools_list_is_pinned() {
        let mut tools = harness::ToolRegistry::new();
        tools
            .register(harness::FnTool::new(
                "add",
                "Adds two numbers.",
                json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}),
                |args, _ctx| async move { Ok(args) },
            ))
            .unwrap();
        let harness = Harness::builder().tools(tools).build().unwrap();
        let listed = |max| {
            let server = CodeMode::new(harness.clone(), max, false);
            serde_json::to_value(server.tools.to_vec()).unwrap()
        };
        let got = json!({"full": listed(DEFAULT_MAX_DESCRIPTION_BYTES), "summarised": listed(10)});
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/mcp_tools.json");
        let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(path, &text).unwrap();
        }
        let want = std::fs::read_to_string(path).expect("run with UPDATE_GOLDEN=1 to write it");
        assert_eq!(
            text, want,
            "tools/list changed; UPDATE_GOLDEN=1 rewrites {path}"
        );
    }
}
