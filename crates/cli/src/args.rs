//! The command line: every command, flag and value clap parses.

use super::*;

#[derive(Parser, Debug)]
#[command(
    name = "harness",
    version,
    about = "Run model-written JavaScript in a sandbox, with host tools"
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Run a script (the body of an async function) and report.
    Run(RunArgs),
    /// Resume a run that `run --suspend-to FILE` put away: answer the
    /// calls it waits on (`--approve`, `--answer`, `--fail`) and report.
    /// Exit 3 when it suspends again (the new continuation replaces FILE,
    /// or goes to --suspend-to).
    Resume(ResumeArgs),
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
    /// Explore the sandbox interactively: each input runs in one session,
    /// so what it declares at its top level stays for the next input.
    /// Multi-line input continues until the script is complete; `.help`
    /// lists the commands, `.exit` (or Ctrl-D) leaves.
    Repl(ReplArgs),
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
pub(super) struct WarmArgs {
    /// Print what was made as a JSON array.
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(clap::Args, Debug)]
pub(super) struct ToolsArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Root directory the built-in tools are confined to.
    #[arg(long, default_value = ".")]
    pub(super) root: PathBuf,
    /// Only the tools of these packs (repeatable).
    #[arg(long = "pack", value_name = "PACK")]
    pub(super) packs: Vec<String>,
    /// Print TypeScript declarations (`declare const tools: {…}`, `context`, `console`).
    #[arg(long)]
    pub(super) typescript: bool,
    /// With --typescript or --json: only these tools (repeatable).
    #[arg(long = "only", value_name = "NAME")]
    pub(super) only: Vec<String>,
    /// Print the tools with their schemas as JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// Rank the tools by how well their name and description match QUERY.
    #[arg(long, value_name = "QUERY")]
    pub(super) search: Option<String>,
}

#[derive(Subcommand, Debug)]
pub(super) enum ConfigCommand {
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
pub(super) struct SandboxArgs {
    /// Directory holding the sessions' workspaces.
    #[arg(long, value_name = "DIR")]
    pub(super) root: PathBuf,
    /// Session id: its workspace is ROOT/ID.
    #[arg(long, value_name = "ID")]
    pub(super) session: String,
    /// Fuel budget (about one unit per wasm instruction); 0 is unlimited.
    #[arg(long, value_name = "N")]
    pub(super) fuel: Option<u64>,
    /// Memory cap of the whole guest, in MiB.
    #[arg(long, value_name = "N")]
    pub(super) memory_mb: Option<u64>,
    /// Stdout kept; the rest is dropped and flagged.
    #[arg(long, value_name = "N")]
    pub(super) stdout_max_bytes: Option<usize>,
    /// Stderr kept; the rest is dropped and flagged.
    #[arg(long, value_name = "N")]
    pub(super) stderr_max_bytes: Option<usize>,
    /// Wall-clock limit.
    #[arg(long, value_name = "N")]
    pub(super) timeout_ms: Option<u64>,
    /// The QuickJS WASI binary (default: bin/quickjs.wasm).
    #[arg(long, value_name = "PATH")]
    pub(super) wasm: Option<PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub(super) json: bool,
    /// Program file, or - for standard input.
    pub(super) file: String,
}

/// The configuration file and provider, shared by every command that runs
/// or checks scripts.
#[derive(clap::Args, Debug, Clone)]
pub(super) struct ConfigArgs {
    /// Configuration file (TOML; see harness.example.toml). No file is
    /// read unless named here or in HARNESS_CONFIG.
    #[arg(long, value_name = "FILE", env = "HARNESS_CONFIG")]
    pub(super) config: Option<PathBuf>,
    /// Apply the file's `[providers.NAME]` table over its global settings.
    #[arg(long, value_name = "NAME")]
    pub(super) provider: Option<String>,
}

/// What `run` and `respond` share: the engine, tools, approvals, limits.
#[derive(clap::Args, Debug)]
pub(super) struct EngineArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Engine to run on (quickjs, boa, wasi; v8 in builds with `--features
    /// v8`). Default: the configuration's, else quickjs.
    #[arg(long)]
    pub(super) engine: Option<String>,
    /// Where the script runs: in_process, or process (a worker process the
    /// host kills on timeout). Default: the engine's (quickjs, v8:
    /// in_process; boa: process).
    #[arg(long, value_name = "ISOLATION")]
    pub(super) isolation: Option<Isolation>,
    /// Root directory the built-in file tools are confined to.
    #[arg(long, default_value = ".")]
    pub(super) root: PathBuf,
    /// Answer approval requests (the `exec` tool); without it, ask on a
    /// terminal, deny otherwise.
    #[arg(long, value_enum)]
    pub(super) approve: Option<Approve>,
    /// Wall-clock limit for the whole run, tool calls included.
    #[arg(long, value_name = "N")]
    pub(super) timeout_ms: Option<u64>,
    /// Engine memory limit in MiB.
    #[arg(long, value_name = "N")]
    pub(super) memory_mb: Option<u64>,
    /// Tool calls allowed per script.
    #[arg(long, value_name = "N")]
    pub(super) max_tool_calls: Option<u32>,
    /// Fuel budget for engines that count fuel (wasi); others ignore it.
    #[arg(long, value_name = "N")]
    pub(super) fuel: Option<u64>,
    /// The context a run gets as to built-ins: shared (frozen built-ins,
    /// the fast path) or private (a context made for the run, whose
    /// built-ins the script may change). Default: chosen per script.
    #[arg(long, value_name = "REALM")]
    pub(super) realm: Option<harness::Realm>,
    /// What scripts see as `context`: a JSON object with the keys
    /// conversationId, sessionId, turnId, provider, model,
    /// workingDirectory, identity, extra; or @FILE to read it from a file.
    #[arg(long, value_name = "JSON")]
    pub(super) context: Option<String>,
    /// Let scripts start detached tasks with `tools.spawn.exec` (off:
    /// `tools.spawn` is undefined).
    #[arg(long)]
    pub(super) enable_spawn: bool,
    /// The caller's W3C trace context (`00-<trace id>-<span id>-<flags>`):
    /// the run's spans join that trace (exported over OTLP when
    /// OTEL_EXPORTER_OTLP_ENDPOINT is set).
    #[arg(long, value_name = "TRACEPARENT", env = "TRACEPARENT")]
    pub(super) traceparent: Option<String>,
    /// Expose only the tools of these packs (repeatable), instead of the
    /// configuration's `[expose]`.
    #[arg(long = "pack", value_name = "PACK")]
    pub(super) packs: Vec<String>,
    /// Turn `tools.http` on and let it reach HOST (repeatable; patterns
    /// `api.example.com`, `*.example.com`, `*`). Replaces the
    /// configuration's `[http] allow_hosts`; loopback, private and
    /// cloud-metadata addresses stay refused unless the configuration
    /// allows the first two (metadata never).
    #[arg(long = "allow-host", value_name = "HOST")]
    pub(super) allow_hosts: Vec<String>,
    /// Append one JSON line per run to FILE (script id, source SHA-256,
    /// provider, outcome, durations, tool calls, approvals).
    #[arg(long, value_name = "FILE")]
    pub(super) audit_log: Option<PathBuf>,
    /// How long to wait for the detached tasks scripts started before
    /// exiting; tasks still running then are cancelled.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub(super) detached_timeout_ms: u64,
}

/// `--context` (inline JSON, or @FILE) over `base`: the camelCase keys
/// scripts see (`ScriptContext::merge_script_json`).
pub(super) fn parse_context(
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
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct McpArgs {
    #[command(subcommand)]
    pub(super) action: Option<McpCommand>,
    #[command(flatten)]
    pub(super) engine: EngineArgs,
    /// Serve streamable HTTP on ADDR (e.g. 127.0.0.1:8765) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub(super) http: Option<std::net::SocketAddr>,
    /// Serve Prometheus metrics on ADDR (/metrics).
    #[arg(long, value_name = "ADDR")]
    pub(super) metrics: Option<std::net::SocketAddr>,
    /// Above this many bytes of declarations, run_script's description
    /// lists tool names only and points at search_tools/describe_tools.
    #[arg(long, value_name = "BYTES", default_value_t = harness_services::mcp_server::DEFAULT_MAX_DESCRIPTION_BYTES)]
    pub(super) max_description_bytes: usize,
}

#[derive(Subcommand, Debug)]
pub(super) enum McpCommand {
    /// Authorise the harness with an upstream MCP server that has `auth =
    /// "oauth"`: prints the URL to open in a browser, waits for it to come
    /// back to a loopback redirect, and stores the tokens (mode 0600) for
    /// every later run and worker.
    Login(McpLoginArgs),
}

#[derive(clap::Args, Debug)]
pub(super) struct McpLoginArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// The server's name: `[mcp.servers.NAME]` of the configuration.
    pub(super) name: String,
}

#[derive(clap::Args, Debug)]
pub(super) struct ReplArgs {
    #[command(flatten)]
    pub(super) engine: EngineArgs,
    /// Where the input history is kept (default:
    /// $XDG_STATE_HOME/harness/repl_history, else
    /// ~/.local/state/harness/repl_history).
    #[arg(long, value_name = "FILE")]
    pub(super) history: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub(super) struct RunArgs {
    #[command(flatten)]
    pub(super) engine: EngineArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub(super) json: bool,
    /// The script's language: js, ts, or auto (JavaScript if it parses,
    /// else TypeScript). Default: ts for .ts files, auto otherwise.
    #[arg(long, value_name = "LANGUAGE")]
    pub(super) language: Option<ScriptLanguage>,
    /// Script file, or - for standard input.
    pub(super) file: String,
    /// Let the run suspend (wasi engine): an approval not answered by
    /// --approve, or a call of a deferred tool, puts it away in FILE
    /// (sealed) and exits 3; `harness resume FILE` goes on.
    #[arg(long, value_name = "FILE")]
    pub(super) suspend_to: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub(super) struct ResumeArgs {
    #[command(flatten)]
    pub(super) engine: EngineArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub(super) json: bool,
    /// A deferred call's result: CALL_ID=JSON (repeatable).
    #[arg(long = "answer", value_name = "CALL_ID=JSON")]
    pub(super) answers: Vec<String>,
    /// A deferred call's failure: CALL_ID=MESSAGE (repeatable); the
    /// script sees ToolExecutionError.
    #[arg(long = "fail", value_name = "CALL_ID=MESSAGE")]
    pub(super) failures: Vec<String>,
    /// Where the continuation goes if the run suspends again (default:
    /// FILE itself).
    #[arg(long, value_name = "FILE")]
    pub(super) suspend_to: Option<PathBuf>,
    /// The continuation `run --suspend-to` wrote.
    pub(super) file: PathBuf,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum ModeArg {
    Enabled,
    DryRun,
    Disabled,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum ItemFormat {
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
pub(super) struct RespondArgs {
    #[command(flatten)]
    pub(super) engine: EngineArgs,
    /// enabled: run the blocks; dry-run: detect, prepare and check tool
    /// names, run nothing; disabled: leave blocks as text, with a notice.
    /// Default: the configuration's, else enabled.
    #[arg(long, value_enum)]
    pub(super) mode: Option<ModeArg>,
    #[arg(long, value_enum, default_value = "items")]
    pub(super) format: ItemFormat,
    /// Stream progress events as JSON lines on stderr.
    #[arg(long)]
    pub(super) events: bool,
    /// Run the blocks after a failed one.
    #[arg(long)]
    pub(super) continue_on_error: bool,
    /// The model's response: plain text, or JSON in the OpenAI Responses,
    /// Chat Completions or Anthropic Messages shape; - for standard input.
    pub(super) file: String,
}

#[derive(clap::Args, Debug)]
pub(super) struct CheckArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Also type-check the script against the tools' TypeScript
    /// declarations with `tsc` (HARNESS_TSC, else `tsc` on PATH); the
    /// script is checked as the body of an async function.
    #[arg(long)]
    pub(super) types: bool,
    /// With --types: the root of the built-in tools the declarations describe.
    #[arg(long, default_value = ".")]
    pub(super) root: PathBuf,
    /// With --types: only the tools of these packs.
    #[arg(long = "pack", value_name = "PACK")]
    pub(super) packs: Vec<String>,
    #[arg(long)]
    pub(super) engine: Option<String>,
    /// Where the parser runs: in_process or process.
    #[arg(long, value_name = "ISOLATION")]
    pub(super) isolation: Option<Isolation>,
    /// Print the result as JSON.
    #[arg(long)]
    pub(super) json: bool,
    /// Script file, or - for standard input.
    pub(super) file: String,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Approve {
    Yes,
    No,
}
