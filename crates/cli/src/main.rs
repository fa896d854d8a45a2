//! `harness`: run and check model-written scripts from the command line.
//!
//! Exit status: 0 when the script succeeded, 1 when it failed, 2 for usage
//! errors (bad flags, unreadable input file, unknown engine).

mod fleet_cmd;
mod mcp_server;

use async_trait::async_trait;
use clap::{Parser, Subcommand, ValueEnum};
use harness::config::{ApprovalDefault, Config, Overrides};
use harness::{
    ApprovalBridge, ApprovalDecision, ApprovalRequest, AutoApprove, AutoDeny, BuildError,
    ExecutionReport, Harness, Isolation, Mode, ScriptError, ScriptLanguage,
};
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(
    name = "harness",
    version,
    about = "Run model-written JavaScript in a sandbox, with host tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a script (the body of an async function) and report.
    Run(RunArgs),
    /// Parse a script without running it; syntax errors name line and column.
    Check(CheckArgs),
    /// Run the script blocks of a model response and print the resulting
    /// conversation items, in the response's order.
    Respond(RespondArgs),
    /// Show or check the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// List the tools a script may call: names, schemas, TypeScript
    /// declarations, or a ranked search.
    Tools(ToolsArgs),
    /// Serve script runs to MCP clients ("code mode"), on stdio or, with
    /// --http ADDR, streamable HTTP: tools run_script, check_script,
    /// search_tools, describe_tools.
    Mcp(McpArgs),
    /// Consume run requests from a Redis stream (consumer group) and answer
    /// them: a worker of a fleet on any number of machines.
    Worker(fleet_cmd::WorkerArgs),
    /// Submit run requests to a Redis stream; with --wait, print each
    /// reply as it arrives.
    Submit(fleet_cmd::SubmitArgs),
    /// Run a program in a session's workspace sandbox (WASI-QuickJS): the
    /// session directory is /app, `require('fs')` works inside it, and the
    /// result lists the files the program created or modified.
    #[cfg(feature = "wasi")]
    Sandbox(SandboxArgs),
    /// Compile the WASI guest's snapshots into the disk cache next to it.
    ///
    /// All five: the engine's, the private realm's and the sandbox's, in
    /// process and for process workers, so that no later process compiles
    /// them (seconds each). For a deploy step or a container image.
    #[cfg(feature = "wasi")]
    Warm(WarmArgs),
}

#[cfg(feature = "wasi")]
#[derive(clap::Args, Debug)]
struct WarmArgs {
    /// Print what was made as a JSON array.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct ToolsArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Root directory the built-in tools are confined to.
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// Only the tools of these packs (repeatable).
    #[arg(long = "pack", value_name = "PACK")]
    packs: Vec<String>,
    /// Print TypeScript declarations (`declare const tools: {…}`, `context`, `console`).
    #[arg(long)]
    typescript: bool,
    /// With --typescript or --json: only these tools (repeatable).
    #[arg(long = "only", value_name = "NAME")]
    only: Vec<String>,
    /// Print the tools with their schemas as JSON.
    #[arg(long)]
    json: bool,
    /// Rank the tools by how well their name and description match QUERY.
    #[arg(long, value_name = "QUERY")]
    search: Option<String>,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the effective configuration: every value and the layer it
    /// came from (default, global, provider:NAME, override).
    Show {
        #[command(flatten)]
        config: ConfigArgs,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Validate a configuration file (and each provider in it) without
    /// running anything.
    Check {
        /// The file.
        file: PathBuf,
    },
}

#[cfg(feature = "wasi")]
#[derive(clap::Args, Debug)]
struct SandboxArgs {
    /// Directory holding the sessions' workspaces.
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Session id: its workspace is ROOT/ID.
    #[arg(long, value_name = "ID")]
    session: String,
    /// Fuel budget (about one unit per wasm instruction); 0 is unlimited.
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// Memory cap of the whole guest, in MiB.
    #[arg(long, value_name = "N")]
    memory_mb: Option<u64>,
    /// Stdout kept; the rest is dropped and flagged.
    #[arg(long, value_name = "N")]
    stdout_max_bytes: Option<usize>,
    /// Stderr kept; the rest is dropped and flagged.
    #[arg(long, value_name = "N")]
    stderr_max_bytes: Option<usize>,
    /// Wall-clock limit.
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// The QuickJS WASI binary (default: bin/quickjs.wasm).
    #[arg(long, value_name = "PATH")]
    wasm: Option<PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
    /// Program file, or - for standard input.
    file: String,
}

/// The configuration file and provider, shared by every command that runs
/// or checks scripts.
#[derive(clap::Args, Debug, Clone)]
struct ConfigArgs {
    /// Configuration file (TOML; see harness.example.toml). No file is
    /// read unless named here or in HARNESS_CONFIG.
    #[arg(long, value_name = "FILE", env = "HARNESS_CONFIG")]
    config: Option<PathBuf>,
    /// Apply the file's `[providers.NAME]` table over its global settings.
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
}

/// What `run` and `respond` share: the engine, tools, approvals, limits.
#[derive(clap::Args, Debug)]
struct EngineArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Engine to run on (quickjs, boa, wasi; v8 in builds with `--features
    /// v8`). Default: the configuration's, else quickjs.
    #[arg(long)]
    engine: Option<String>,
    /// Where the script runs: in_process, or process (a worker process the
    /// host kills on timeout). Default: the engine's (quickjs, v8:
    /// in_process; boa: process).
    #[arg(long, value_name = "ISOLATION")]
    isolation: Option<Isolation>,
    /// Root directory the built-in file tools are confined to.
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// Answer approval requests (the `exec` tool); without it, ask on a
    /// terminal, deny otherwise.
    #[arg(long, value_enum)]
    approve: Option<Approve>,
    /// Wall-clock limit for the whole run, tool calls included.
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// Engine memory limit in MiB.
    #[arg(long, value_name = "N")]
    memory_mb: Option<u64>,
    /// Tool calls allowed per script.
    #[arg(long, value_name = "N")]
    max_tool_calls: Option<u32>,
    /// Fuel budget for engines that count fuel (wasi); others ignore it.
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// The context a run gets as to built-ins: shared (frozen built-ins,
    /// the fast path) or private (a context made for the run, whose
    /// built-ins the script may change). Default: chosen per script.
    #[arg(long, value_name = "REALM")]
    realm: Option<harness::Realm>,
    /// What scripts see as `context`: a JSON object with the keys
    /// conversationId, sessionId, turnId, provider, model,
    /// workingDirectory, identity, extra; or @FILE to read it from a file.
    #[arg(long, value_name = "JSON")]
    context: Option<String>,
    /// Let scripts start detached tasks with `tools.spawn.exec` (off:
    /// `tools.spawn` is undefined).
    #[arg(long)]
    enable_spawn: bool,
    /// The caller's W3C trace context (`00-<trace id>-<span id>-<flags>`):
    /// the run's spans join that trace (exported over OTLP when
    /// OTEL_EXPORTER_OTLP_ENDPOINT is set).
    #[arg(long, value_name = "TRACEPARENT", env = "TRACEPARENT")]
    traceparent: Option<String>,
    /// Expose only the tools of these packs (repeatable), instead of the
    /// configuration's `[expose]`.
    #[arg(long = "pack", value_name = "PACK")]
    packs: Vec<String>,
    /// Turn `tools.http` on and let it reach HOST (repeatable; patterns
    /// `api.example.com`, `*.example.com`, `*`). Replaces the
    /// configuration's `[http] allow_hosts`; loopback, private and
    /// cloud-metadata addresses stay refused unless the configuration
    /// allows the first two (metadata never).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// Append one JSON line per run to FILE (script id, source SHA-256,
    /// provider, outcome, durations, tool calls, approvals).
    #[arg(long, value_name = "FILE")]
    audit_log: Option<PathBuf>,
    /// How long to wait for the detached tasks scripts started before
    /// exiting; tasks still running then are cancelled.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    detached_timeout_ms: u64,
}

/// `--context` (inline JSON, or @FILE) over `base`: the camelCase keys
/// scripts see (`ScriptContext::merge_script_json`).
fn parse_context(
    arg: Option<&str>,
    base: harness::ScriptContext,
) -> Result<harness::ScriptContext, String> {
    let Some(arg) = arg else {
        return Ok(base);
    };
    let text = match arg.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --context file {path}: {e}"))?,
        None => arg.to_owned(),
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("--context is not a valid context object: {e}"))?;
    base.merge_script_json(&value)
        .map_err(|e| format!("--context is {e}"))
}

#[derive(clap::Args, Debug)]
struct McpArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Serve streamable HTTP on ADDR (e.g. 127.0.0.1:8765) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Serve Prometheus metrics on ADDR (/metrics).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Above this many bytes of declarations, run_script's description
    /// lists tool names only and points at search_tools/describe_tools.
    #[arg(long, value_name = "BYTES", default_value_t = mcp_server::DEFAULT_MAX_DESCRIPTION_BYTES)]
    max_description_bytes: usize,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// The script's language: js, ts, or auto (JavaScript if it parses,
    /// else TypeScript). Default: ts for .ts files, auto otherwise.
    #[arg(long, value_name = "LANGUAGE")]
    language: Option<ScriptLanguage>,
    /// Script file, or - for standard input.
    file: String,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    Enabled,
    DryRun,
    Disabled,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum ItemFormat {
    /// The harness's own conversation items.
    Items,
    /// OpenAI Responses input items.
    OpenaiResponses,
    /// Chat Completions messages.
    Chat,
    /// Anthropic Messages.
    Anthropic,
}

#[derive(clap::Args, Debug)]
struct RespondArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// enabled: run the blocks; dry-run: detect, prepare and check tool
    /// names, run nothing; disabled: leave blocks as text, with a notice.
    /// Default: the configuration's, else enabled.
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    #[arg(long, value_enum, default_value = "items")]
    format: ItemFormat,
    /// Stream progress events as JSON lines on stderr.
    #[arg(long)]
    events: bool,
    /// Run the blocks after a failed one.
    #[arg(long)]
    continue_on_error: bool,
    /// The model's response: plain text, or JSON in the OpenAI Responses,
    /// Chat Completions or Anthropic Messages shape; - for standard input.
    file: String,
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Also type-check the script against the tools' TypeScript
    /// declarations with `tsc` (HARNESS_TSC, else `tsc` on PATH); the
    /// script is checked as the body of an async function.
    #[arg(long)]
    types: bool,
    /// With --types: the root of the built-in tools the declarations describe.
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// With --types: only the tools of these packs.
    #[arg(long = "pack", value_name = "PACK")]
    packs: Vec<String>,
    #[arg(long)]
    engine: Option<String>,
    /// Where the parser runs: in_process or process.
    #[arg(long, value_name = "ISOLATION")]
    isolation: Option<Isolation>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Script file, or - for standard input.
    file: String,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Approve {
    Yes,
    No,
}

fn usage_error(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("harness: {msg}");
    ExitCode::from(2)
}

fn read_input(file: &str) -> std::io::Result<Vec<u8>> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(file)
    }
}

/// Reads the script; a usage error otherwise.
fn input(file: &str) -> Result<Vec<u8>, ExitCode> {
    read_input(file).map_err(|e| usage_error(format!("cannot read {file}: {e}")))
}

/// The configuration: the file (if any), its provider (if asked), and the
/// command line's flags as the override layer, checked against the
/// ceilings. Any problem is a usage error (exit 2).
fn load_config(args: &ConfigArgs, overrides: Overrides) -> Result<Config, ExitCode> {
    let cfg = match &args.config {
        Some(path) => Config::load(path).map_err(usage_error)?,
        None => Config::defaults(),
    };
    let cfg = match &args.provider {
        Some(p) => cfg.with_provider(p).map_err(usage_error)?,
        None => cfg,
    };
    cfg.with_overrides(&overrides).map_err(usage_error)
}

/// The flags of `run` and `respond` as the override layer.
fn flag_overrides(
    args: &EngineArgs,
    mode: Option<Mode>,
    language: Option<ScriptLanguage>,
) -> Result<Overrides, ExitCode> {
    let mut o = Overrides::new();
    let set = |o: Overrides, k: &str, v: serde_json::Value| o.set(k, v).map_err(usage_error);
    if let Some(e) = &args.engine {
        o = set(o, "engine", e.clone().into())?;
    }
    if let Some(i) = args.isolation {
        o = set(o, "isolation", i.as_str().into())?;
    }
    if let Some(t) = args.timeout_ms {
        o = set(o, "limits.timeout_ms", t.into())?;
    }
    if let Some(m) = args.memory_mb {
        o = set(
            o,
            "limits.memory_bytes",
            m.saturating_mul(1024 * 1024).into(),
        )?;
    }
    if let Some(n) = args.max_tool_calls {
        o = set(o, "limits.max_tool_calls", n.into())?;
    }
    if let Some(f) = args.fuel {
        o = set(o, "limits.fuel", f.into())?;
    }
    if let Some(r) = args.realm {
        o = set(o, "limits.realm", r.as_str().into())?;
    }
    if let Some(m) = mode {
        o = set(o, "mode", serde_json::to_value(m).unwrap_or_default())?;
    }
    if let Some(l) = language {
        o = set(o, "language", serde_json::to_value(l).unwrap_or_default())?;
    }
    if args.enable_spawn {
        o = set(o, "spawn.enabled", true.into())?;
    }
    if !args.allow_hosts.is_empty() {
        o = set(o, "expose.http", true.into())?;
        o = set(o, "http.allow_hosts", args.allow_hosts.clone().into())?;
    }
    if !args.packs.is_empty() {
        o = set(o, "expose.packs", args.packs.clone().into())?;
        o = set(o, "expose.tools", serde_json::json!([]))?;
    }
    Ok(o)
}

/// Asks on the controlling terminal; denies when there is none.
struct TerminalApprover;

#[async_trait]
impl ApprovalBridge for TerminalApprover {
    async fn request(&self, req: &ApprovalRequest) -> ApprovalDecision {
        let mut prompt = format!(
            "harness: approval {} for script {}",
            req.request_id, req.script_id
        );
        match (&req.task_id, req.line) {
            (Some(t), _) => prompt.push_str(&format!(", detached task {t}")),
            (None, _) => prompt.push_str(&format!(", tool call #{}", req.call_id)),
        }
        if let (Some(l), Some(c)) = (req.line, req.column) {
            prompt.push_str(&format!(" at line {l}, column {c}"));
        }
        prompt.push('\n');
        if let Some(snippet) = &req.snippet {
            prompt.push_str(snippet);
            prompt.push('\n');
        }
        prompt.push_str(&format!(
            "allow {} with arguments {}? [y/N] ",
            req.tool, req.args
        ));
        let answer = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
            let mut tty = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/tty")?;
            tty.write_all(prompt.as_bytes())?;
            tty.flush()?;
            let mut line = String::new();
            let mut byte = [0u8; 1];
            while tty.read(&mut byte)? == 1 && byte[0] != b'\n' {
                line.push(byte[0] as char);
            }
            Ok(line)
        })
        .await;
        match answer {
            Ok(Ok(a)) if matches!(a.trim(), "y" | "Y" | "yes" | "YES" | "Yes") => {
                ApprovalDecision::Approved
            }
            Ok(Ok(_)) => ApprovalDecision::Denied {
                reason: Some("denied at the terminal".into()),
            },
            _ => ApprovalDecision::Denied {
                reason: Some("no terminal to ask; pass --approve yes to allow".into()),
            },
        }
    }
}

fn has_terminal() -> bool {
    std::io::stderr().is_terminal() && std::fs::File::open("/dev/tty").is_ok()
}

/// Builds the harness `run` and `respond` use: the configuration with the
/// flags on top, built-in tools under the root, approvals from the flag,
/// the configuration or the terminal.
/// Starts the configuration's upstream MCP servers (`[mcp.servers.*]`).
async fn upstreams(cfg: &Config) -> Result<Option<harness::mcp::Upstreams>, ExitCode> {
    let servers = &cfg.settings().mcp.servers;
    if servers.is_empty() {
        return Ok(None);
    }
    harness::mcp::Upstreams::connect(servers)
        .await
        .map(Some)
        .map_err(usage_error)
}

/// The configuration with the flags on top, its MCP servers started, and
/// the harness `run` and `respond` use.
async fn configured_harness(
    args: &EngineArgs,
    mode: Option<Mode>,
    language: Option<ScriptLanguage>,
) -> Result<Harness, ExitCode> {
    let cfg = flag_overrides(args, mode, language).and_then(|o| load_config(&args.config, o))?;
    let up = upstreams(&cfg).await?;
    build_harness(args, &cfg, up)
}

fn build_harness(
    args: &EngineArgs,
    cfg: &Config,
    upstreams: Option<harness::mcp::Upstreams>,
) -> Result<Harness, ExitCode> {
    let tools = harness::builtin::registry_with(&args.root, cfg.settings().exec_policy())
        .map_err(|e| usage_error(format!("cannot open root {}: {e}", args.root.display())))?;
    // Without a configured answer the CLI asks on its terminal.
    let configured = cfg
        .entries()
        .iter()
        .find(|e| e.key == "approvals.default")
        .is_some_and(|e| e.layer != "default");
    let approvals: Arc<dyn ApprovalBridge> = match (args.approve, cfg.settings().approvals.default)
    {
        (Some(Approve::Yes), _) => Arc::new(AutoApprove),
        (Some(Approve::No), _) => Arc::new(AutoDeny::with_reason("denied by --approve no")),
        (None, ApprovalDefault::Approve) if configured => Arc::new(AutoApprove),
        (None, ApprovalDefault::Deny) if configured => Arc::new(AutoDeny::with_reason(
            "denied by the configuration (approvals.default)",
        )),
        (None, _) if has_terminal() => Arc::new(TerminalApprover),
        (None, _) => Arc::new(AutoDeny::with_reason(
            "no terminal to ask; pass --approve yes to allow",
        )),
    };
    let root = args.root.canonicalize().unwrap_or(args.root.clone());
    let base = harness::ScriptContext::default().with_working_directory(root.display().to_string());
    let mut ctx = parse_context(args.context.as_deref(), base).map_err(usage_error)?;
    if ctx.provider.is_none() {
        ctx.provider = cfg.provider().map(str::to_owned);
    }
    let mut builder = cfg.builder().map_err(usage_error)?;
    if let Some(up) = upstreams {
        builder = builder.mcp(up);
    }
    if let Some(path) = &args.audit_log {
        let log = harness::audit::AuditLog::open(path)
            .map_err(|e| usage_error(format!("cannot open audit log {}: {e}", path.display())))?;
        builder = builder.audit_log(Arc::new(log));
    }
    builder
        .tools(tools)
        .approvals(approvals)
        .context(ctx)
        .build()
        .map(|h| match &args.traceparent {
            Some(tp) => h.with_traceparent(tp.clone()),
            None => h,
        })
        .map_err(usage_error)
}

/// Waits (at most `--detached-timeout-ms`) for the detached tasks the run
/// started, then puts their final state in the report.
async fn finish_tasks(harness: &Harness, args: &EngineArgs, report: &mut ExecutionReport) {
    let (Some(tasks), false) = (harness.tasks(), report.detached_tasks.is_empty()) else {
        return;
    };
    let ids: Vec<String> = report.detached_tasks.iter().map(|t| t.id.clone()).collect();
    let timeout = std::time::Duration::from_millis(args.detached_timeout_ms);
    report.detached_tasks = tasks.wait_all(&ids, timeout).await;
}

async fn run(args: RunArgs) -> ExitCode {
    let language = args.language.or_else(|| {
        let l = ScriptLanguage::from_file_name(&args.file);
        (l != ScriptLanguage::Auto).then_some(l)
    });
    let harness = match configured_harness(&args.engine, None, language).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let source = match input(&args.file) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut report = harness.run_bytes(&source).await;
    finish_tasks(&harness, &args.engine, &mut report).await;
    if args.json {
        match serde_json::to_string(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => return usage_error(format!("cannot encode report: {e}")),
        }
    } else {
        print_summary(&report);
    }
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

async fn respond(args: RespondArgs) -> ExitCode {
    let mode = args.mode.map(|m| match m {
        ModeArg::Enabled => Mode::Enabled,
        ModeArg::DryRun => Mode::DryRun,
        ModeArg::Disabled => Mode::Disabled,
    });
    let harness = match configured_harness(&args.engine, mode, None).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let bytes = match input(&args.file) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let Ok(input) = String::from_utf8(bytes) else {
        return usage_error("the response is not valid UTF-8");
    };
    // JSON in one of the wire shapes, or plain text.
    let text = match serde_json::from_str::<serde_json::Value>(&input) {
        Ok(v) if v.is_object() || v.is_array() => {
            match harness::respond::items::response_text(&v) {
                Some(t) => t,
                None => return usage_error(
                    "JSON input is not an OpenAI Responses, Chat Completions or Anthropic response",
                ),
            }
        }
        _ => input,
    };
    let orchestrator = harness.orchestrator(args.continue_on_error);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let printer = args.events.then(|| {
        tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                if let Ok(line) = serde_json::to_string(&e) {
                    eprintln!("{line}");
                }
            }
        })
    });
    let result = orchestrator
        .respond(
            &text,
            args.events.then_some(tx),
            harness::CancellationToken::new(),
        )
        .await;
    // Detached tasks end (and are reported as events) before the items
    // are printed; those still running after the timeout are cancelled.
    if let Some(tasks) = harness.tasks() {
        let timeout = std::time::Duration::from_millis(args.engine.detached_timeout_ms);
        tasks.wait_idle(timeout).await;
    }
    drop(orchestrator);
    if let Some(p) = printer {
        let _ = p.await;
    }
    let items = match result {
        Ok(items) => items,
        Err(e) => {
            println!(
                "{}",
                serde_json::json!({"ok": false, "error": e.to_string(), "detail": e})
            );
            return ExitCode::from(1);
        }
    };
    use harness::respond::items as wire;
    let out = match args.format {
        ItemFormat::Items => serde_json::to_value(&items).unwrap_or_default(),
        ItemFormat::OpenaiResponses => serde_json::Value::from(wire::to_openai_responses(&items)),
        ItemFormat::Chat => serde_json::Value::from(wire::to_chat(&items)),
        ItemFormat::Anthropic => serde_json::Value::from(wire::to_anthropic(&items)),
    };
    match serde_json::to_string_pretty(&out) {
        Ok(s) => println!("{s}"),
        Err(e) => return usage_error(format!("cannot encode items: {e}")),
    }
    if items.iter().any(|i| i.failed()) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_summary(r: &ExecutionReport) {
    for line in &r.console {
        println!("[{}] {}", line.level.as_str(), line.text);
    }
    if r.console_dropped > 0 {
        println!(
            "[console] {} line(s) dropped by the console limits",
            r.console_dropped
        );
    }
    if r.tool_calls_dropped > 0 {
        println!(
            "[tools] {} further tool call attempt(s) refused without a record",
            r.tool_calls_dropped
        );
    }
    for c in &r.tool_calls {
        let err = c
            .error
            .as_ref()
            .map(|e| format!(" ({}: {})", e.code, e.message))
            .unwrap_or_default();
        println!(
            "tool #{} {} {:?} {:.1} ms{err}",
            c.id, c.tool, c.status, c.duration_ms
        );
    }
    for w in &r.warnings {
        println!("[warning] {}: {}", w.path, w.message);
    }
    for t in &r.detached_tasks {
        let detail = match (&t.error, &t.result) {
            (Some(e), _) => format!(" ({}: {})", e.code, e.message),
            (None, Some(v)) => format!(" {}", v),
            _ => String::new(),
        };
        println!("task {} {} {:?}{detail}", t.id, t.tool, t.status);
    }
    match (&r.error, &r.value) {
        (None, Some(v)) => {
            let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
            println!("ok: {pretty}");
        }
        (None, None) => println!("ok (no value)"),
        (Some(e), _) => print_error(e),
    }
    let mem = r
        .metrics
        .memory_used_bytes
        .map(|b| format!(", {} KiB heap", b / 1024))
        .unwrap_or_default();
    let fuel = r
        .metrics
        .fuel_consumed
        .map(|f| format!(", {f} fuel"))
        .unwrap_or_default();
    println!(
        "-- {} in {:.2} ms, {} tool call(s){mem}{fuel}",
        r.metrics.engine, r.metrics.duration_ms, r.metrics.tool_calls
    );
}

fn print_error(e: &ScriptError) {
    let tool = e
        .tool
        .as_ref()
        .map(|t| format!(" [tool {t}]"))
        .unwrap_or_default();
    println!(
        "error: {} ({}){tool}: {}",
        e.code,
        e.phase.as_str(),
        e.message
    );
    if let Some(stack) = &e.stack {
        println!("{stack}");
    }
}

async fn check(args: CheckArgs) -> ExitCode {
    let mut o = Overrides::new();
    if let Some(e) = &args.engine {
        o = match o.set("engine", e.clone()) {
            Ok(o) => o,
            Err(e) => return usage_error(e),
        };
    }
    if let Some(i) = args.isolation {
        o = match o.set("isolation", i.as_str()) {
            Ok(o) => o,
            Err(e) => return usage_error(e),
        };
    }
    let cfg = match load_config(&args.config, o) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let harness = match cfg
        .builder()
        .map_err(BuildError::from)
        .and_then(|b| b.build())
    {
        Ok(h) => h,
        Err(e) => return usage_error(e),
    };
    let bytes = match input(&args.file) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let result =
        match harness::core::source::decode_source(&bytes, harness.limits().max_source_bytes) {
            Ok(src) => match harness.check(&src).await {
                Ok(()) if args.types => match type_check(&args, &cfg, &src).await {
                    Ok(r) => r,
                    Err(code) => return code,
                },
                other => other,
            },
            Err(e) => Err(e),
        };
    if args.json {
        let v = match &result {
            Ok(()) => serde_json::json!({"ok": true}),
            Err(e) => serde_json::json!({"ok": false, "error": e}),
        };
        println!("{v}");
    } else {
        match &result {
            Ok(()) => println!("ok: no syntax errors"),
            Err(e) => print_error(e),
        }
    }
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `harness warm`: one line (or JSON object) per snapshot. A guest that is
/// missing or broken is a usage error, as for `sandbox`; a snapshot the
/// guest cannot make is reported, and its runs take the slow path.
#[cfg(feature = "wasi")]
fn warm(args: WarmArgs) -> ExitCode {
    let made = match harness::wasi::warm_caches() {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    if args.json {
        return match serde_json::to_string(&made) {
            Ok(s) => {
                println!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => usage_error(format!("cannot encode the result: {e}")),
        };
    }
    for w in &made {
        let how = match (w.ready, w.from_cache) {
            (false, _) => "not made (this guest cannot; its runs take the slow path)",
            (true, true) => "read back",
            (true, false) => "compiled",
        };
        let file = w
            .cache_file
            .as_ref()
            .map_or_else(String::new, |f| f.display().to_string());
        println!(
            "{:<8} {:<10} {how:<9} {:>9.1} ms  {file}",
            w.snapshot, w.isolation, w.millis
        );
    }
    ExitCode::SUCCESS
}

#[cfg(feature = "wasi")]
fn sandbox(args: SandboxArgs) -> ExitCode {
    use harness::wasi::{Sandbox, SandboxPolicy};
    let mut policy = SandboxPolicy::default();
    if let Some(f) = args.fuel {
        policy.fuel = (f > 0).then_some(f);
    }
    if let Some(m) = args.memory_mb {
        policy.memory_bytes = m.saturating_mul(1024 * 1024);
    }
    if let Some(n) = args.stdout_max_bytes {
        policy.stdout_max_bytes = n;
    }
    if let Some(n) = args.stderr_max_bytes {
        policy.stderr_max_bytes = n;
    }
    if let Some(t) = args.timeout_ms {
        policy.timeout_ms = t;
    }
    let code = match read_input(&args.file) {
        Ok(b) => match String::from_utf8(b) {
            Ok(s) => s,
            Err(_) => return usage_error(format!("{} is not valid UTF-8", args.file)),
        },
        Err(e) => return usage_error(format!("cannot read {}: {e}", args.file)),
    };
    let mut sandbox = match Sandbox::new(policy, args.session, args.root) {
        Ok(s) => s,
        Err(e) => return usage_error(e),
    };
    if let Some(w) = args.wasm {
        sandbox = sandbox.with_wasm_binary_path(w);
    }
    let result = match sandbox.execute(&code) {
        Ok(r) => r,
        Err(e) => return usage_error(e),
    };
    if args.json {
        match serde_json::to_string(&result) {
            Ok(s) => println!("{s}"),
            Err(e) => return usage_error(format!("cannot encode the result: {e}")),
        }
    } else {
        print!("{}", result.stdout);
        eprint!("{}", result.stderr);
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        eprintln!(
            "-- sandbox {}: exit {} ({:?}) in {:.2} ms, {} fuel, {} KiB memory{}{}; created: {}; modified: {}; deleted: {}",
            result.metadata.session_id,
            result.exit_code,
            result.metadata.termination,
            result.duration_ms,
            result.fuel_consumed,
            result.memory_used_bytes / 1024,
            if result.metadata.stdout_truncated { "; stdout truncated" } else { "" },
            if result.metadata.stderr_truncated { "; stderr truncated" } else { "" },
            list(&result.files_created),
            list(&result.files_modified),
            list(&result.files_deleted),
        );
    }
    if result.success {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The harness `tools` and `check --types` describe: the configuration's
/// tools (the built-ins under `root`), narrowed to `packs` when given.
async fn described(
    cfg: &Config,
    root: &std::path::Path,
    packs: &[String],
) -> Result<Harness, ExitCode> {
    let tools = harness::builtin::registry(root)
        .map_err(|e| usage_error(format!("cannot open root {}: {e}", root.display())))?;
    let mut b = cfg.builder().map_err(usage_error)?.tools(tools);
    if let Some(up) = upstreams(cfg).await? {
        b = b.mcp(up);
    }
    if !packs.is_empty() {
        b = b.allow(harness::Allowlist::only(packs.iter().cloned()));
    }
    b.build().map_err(usage_error)
}

/// `tsc` on the script (wrapped as an async function body) with the
/// declarations; a ScriptSyntaxError-shaped error per diagnostic.
async fn type_check(
    args: &CheckArgs,
    cfg: &Config,
    source: &str,
) -> Result<Result<(), ScriptError>, ExitCode> {
    let h = described(cfg, &args.root, &args.packs).await?;
    let tsc = std::env::var_os("HARNESS_TSC").unwrap_or_else(|| "tsc".into());
    let dir = std::env::temp_dir().join(format!("harness-types-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| usage_error(format!("cannot write {}: {e}", dir.display())))?;
    let decl = dir.join("harness.d.ts");
    let script = dir.join("script.ts");
    // No ambient types (no DOM, no @types/node): the declarations are
    // the whole world the script sees.
    let tsconfig = serde_json::json!({"compilerOptions": {
        "noEmit": true, "strict": true, "target": "es2022", "lib": ["es2022"],
        "types": [], "pretty": false, "skipLibCheck": false},
        "files": ["harness.d.ts", "script.ts"]});
    let written = std::fs::write(&decl, h.typescript())
        .and_then(|()| std::fs::write(&script, harness::declarations::wrap_for_check(source)))
        .and_then(|()| std::fs::write(dir.join("tsconfig.json"), tsconfig.to_string()));
    if let Err(e) = written {
        return Err(usage_error(format!("cannot write {}: {e}", dir.display())));
    }
    let out = std::process::Command::new(&tsc)
        .arg("-p")
        .arg(&dir)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            return Err(usage_error(format!(
                "cannot run {} ({e}): install TypeScript (npm install -g typescript) or set HARNESS_TSC",
                std::path::Path::new(&tsc).display()
            )))
        }
    };
    if out.status.success() {
        return Ok(Ok(()));
    }
    // `script.ts(L,C): error TS…`: line L of the wrapped file is line L-1 of the script.
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let first = text
        .lines()
        .find(|l| l.contains("error TS"))
        .unwrap_or("")
        .to_owned();
    let location = first
        .split_once("script.ts(")
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(lc, _)| lc.split_once(','))
        .and_then(|(l, c)| {
            Some((
                l.parse::<u32>().ok()?.saturating_sub(1).max(1),
                c.parse::<u32>().ok()?,
            ))
        });
    let message = first
        .split_once(": error ")
        .map(|(_, m)| m.to_owned())
        .unwrap_or_else(|| text.trim().to_owned());
    let mut e = ScriptError::new(
        harness::ErrorCode::ScriptSyntaxError,
        harness::Phase::Parsing,
        match location {
            Some((l, c)) => format!("type error: {message} (script.js:{l}:{c})"),
            None => format!("type error: {message}"),
        },
    )
    .with_name("TypeError");
    if let Some((line, column)) = location {
        e = e.with_location(Some(harness::Location::new(line, column)));
    }
    Ok(Err(e))
}

async fn tools_command(args: ToolsArgs) -> ExitCode {
    let cfg = match load_config(&args.config, Overrides::new()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let h = match described(&cfg, &args.root, &args.packs).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let mut names = h.tool_names();
    if !args.only.is_empty() {
        if let Some(missing) = args.only.iter().find(|n| !names.contains(n)) {
            return usage_error(format!("no tool `{missing}` among: {}", names.join(", ")));
        }
        names.retain(|n| args.only.contains(n));
    }
    let registry = h.registry();
    if let Some(q) = &args.search {
        let ranked = harness::declarations::search(registry, &names, q);
        if args.json {
            println!(
                "{}",
                serde_json::json!(ranked
                    .iter()
                    .map(|(n, s)| serde_json::json!({"name": n, "score": s}))
                    .collect::<Vec<_>>())
            );
        } else {
            for (n, score) in ranked {
                let d = registry
                    .get(&n)
                    .map(|t| t.description().to_owned())
                    .unwrap_or_default();
                println!("{score:.2}  {n}  {}", d.lines().next().unwrap_or(""));
            }
        }
        return ExitCode::SUCCESS;
    }
    if args.typescript {
        print!("{}", harness::declarations::declarations(registry, &names));
        return ExitCode::SUCCESS;
    }
    if args.json {
        let list: Vec<serde_json::Value> = names
            .iter()
            .filter_map(|n| registry.get(n))
            .map(|t| {
                serde_json::json!({
                    "name": t.name(),
                    "description": t.description(),
                    "schema": t.schema(),
                    "output_schema": t.output_schema(),
                    "packs": registry.pack_names().filter(|p| registry.pack(p).is_some_and(|m| m.contains(t.name()))).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::from(list));
        return ExitCode::SUCCESS;
    }
    for n in &names {
        let d = registry
            .get(n)
            .map(|t| t.description().to_owned())
            .unwrap_or_default();
        println!("{n}  {}", d.lines().next().unwrap_or(""));
    }
    ExitCode::SUCCESS
}

fn config_command(cmd: ConfigCommand) -> ExitCode {
    match cmd {
        ConfigCommand::Show { config, json } => {
            let cfg = match load_config(&config, Overrides::new()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            if json {
                let values: serde_json::Map<String, serde_json::Value> = cfg
                    .entries()
                    .iter()
                    .map(|e| {
                        (
                            e.key.clone(),
                            serde_json::json!({"value": e.value, "layer": e.layer}),
                        )
                    })
                    .collect();
                let out = serde_json::json!({
                    "file": config.config.as_ref().map(|p| p.display().to_string()),
                    "provider": cfg.provider(),
                    "providers": cfg.providers().collect::<Vec<_>>(),
                    "ceilings": cfg.ceilings(),
                    "values": values,
                });
                println!("{out}");
            } else {
                println!(
                    "# configuration: {}{}",
                    harness::config::describe_source(config.config.as_ref()),
                    cfg.provider()
                        .map(|p| format!(", provider {p}"))
                        .unwrap_or_default()
                );
                for e in cfg.entries() {
                    println!("{e}");
                }
                for (k, v) in cfg.ceilings() {
                    println!("ceilings.{k} = {v}");
                }
            }
            ExitCode::SUCCESS
        }
        ConfigCommand::Check { file } => {
            let cfg = match Config::load(&file) {
                Ok(c) => c,
                Err(e) => return usage_error(e),
            };
            let providers: Vec<String> = cfg.providers().map(str::to_owned).collect();
            for p in &providers {
                if let Err(e) = cfg.with_provider(p).and_then(|c| c.builder()) {
                    return usage_error(e);
                }
            }
            if let Err(e) = cfg.builder() {
                return usage_error(e);
            }
            println!(
                "ok: {} is valid ({} provider(s){})",
                file.display(),
                providers.len(),
                if providers.is_empty() {
                    String::new()
                } else {
                    format!(": {}", providers.join(", "))
                }
            );
            ExitCode::SUCCESS
        }
    }
}

async fn mcp(args: McpArgs) -> ExitCode {
    if let Some(addr) = args.metrics {
        if let Err(e) = harness::telemetry::serve_prometheus(addr) {
            return usage_error(format!("cannot serve metrics on {addr}: {e}"));
        }
    }
    let harness = match configured_harness(&args.engine, None, None).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let ask_client = args.engine.approve.is_none();
    let server = mcp_server::CodeMode::new(harness, args.max_description_bytes, ask_client);
    match args.http {
        Some(addr) => mcp_server::serve_http(server, addr).await,
        None => mcp_server::serve_stdio(server).await,
    }
}

// Also this binary's own worker processes (the process boundary).
harness::main! {
    fn main() -> ExitCode {
        harness::cli_support::main("harness", |cli: Cli| async move {
            match cli.command {
                Command::Run(a) => run(a).await,
                Command::Check(a) => check(a).await,
                Command::Respond(a) => respond(a).await,
                Command::Config(c) => config_command(c),
                Command::Tools(a) => tools_command(a).await,
                Command::Mcp(a) => mcp(a).await,
                Command::Worker(a) => fleet_cmd::worker(a).await,
                Command::Submit(a) => fleet_cmd::submit(a).await,
                #[cfg(feature = "wasi")]
                Command::Sandbox(a) => sandbox(a),
                #[cfg(feature = "wasi")]
                Command::Warm(a) => warm(a),
            }
        })
    }
}
