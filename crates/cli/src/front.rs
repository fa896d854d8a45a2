//! What the commands share: reading input and configuration, building
//! the harness, asking for approvals on the terminal, printing a report.

use super::*;

pub(super) fn usage_error(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("harness: {msg}");
    ExitCode::from(2)
}

pub(super) fn read_input(file: &str) -> std::io::Result<Vec<u8>> {
    if file == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(file)
    }
}

/// Reads the script; a usage error otherwise.
pub(super) fn input(file: &str) -> Result<Vec<u8>, ExitCode> {
    read_input(file).map_err(|e| usage_error(format!("cannot read {file}: {e}")))
}

/// The configuration: the file (if any), its provider (if asked), and the
/// command line's flags as the override layer, checked against the
/// ceilings. Any problem is a usage error (exit 2).
pub(super) fn load_config(args: &ConfigArgs, overrides: Overrides) -> Result<Config, ExitCode> {
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
pub(super) fn flag_overrides(
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
pub(super) struct TerminalApprover;

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

pub(super) fn has_terminal() -> bool {
    std::io::stderr().is_terminal() && std::fs::File::open("/dev/tty").is_ok()
}

/// Builds the harness `run` and `respond` use: the configuration with the
/// flags on top, built-in tools under the root, approvals from the flag,
/// the configuration or the terminal.
/// Starts the configuration's upstream MCP servers (`[mcp.servers.*]`).
pub(super) async fn upstreams(cfg: &Config) -> Result<Option<harness::mcp::Upstreams>, ExitCode> {
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
pub(super) async fn configured_harness(
    args: &EngineArgs,
    mode: Option<Mode>,
    language: Option<ScriptLanguage>,
) -> Result<Harness, ExitCode> {
    let cfg = flag_overrides(args, mode, language).and_then(|o| load_config(&args.config, o))?;
    let up = upstreams(&cfg).await?;
    build_harness(args, &cfg, up)
}

/// [`configured_harness`] whose runs may suspend (`--suspend-to`,
/// `harness resume`): sealed with `[durable]`'s keys, approvals not
/// answered by `--approve` suspend the run instead of asking.
pub(super) async fn suspending_harness(
    args: &EngineArgs,
    language: Option<ScriptLanguage>,
) -> Result<Harness, ExitCode> {
    let cfg = flag_overrides(args, None, language).and_then(|o| load_config(&args.config, o))?;
    let up = upstreams(&cfg).await?;
    let runs = cfg
        .durable_runs()
        .map_err(|e| usage_error(format!("cannot suspend runs: {e}")))?;
    build(args, &cfg, up, Some(runs))
}

/// Answers every approval `Suspend`: under `--suspend-to` the CLI never
/// asks on the terminal.
struct SuspendBridge;

#[async_trait]
impl ApprovalBridge for SuspendBridge {
    async fn request(&self, _: &ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Suspend
    }
}

pub(super) fn build_harness(
    args: &EngineArgs,
    cfg: &Config,
    upstreams: Option<harness::mcp::Upstreams>,
) -> Result<Harness, ExitCode> {
    build(args, cfg, upstreams, None)
}

pub(super) fn build(
    args: &EngineArgs,
    cfg: &Config,
    upstreams: Option<harness::mcp::Upstreams>,
    suspend: Option<harness::durable::DurableRuns>,
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
        (None, _) if suspend.is_some() => Arc::new(SuspendBridge),
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
    if let Some(runs) = suspend {
        builder = builder.suspend(runs);
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
pub(super) async fn finish_tasks(
    harness: &Harness,
    args: &EngineArgs,
    report: &mut ExecutionReport,
) {
    let (Some(tasks), false) = (harness.tasks(), report.detached_tasks.is_empty()) else {
        return;
    };
    let ids: Vec<String> = report.detached_tasks.iter().map(|t| t.id.clone()).collect();
    let timeout = std::time::Duration::from_millis(args.detached_timeout_ms);
    report.detached_tasks = tasks.wait_all(&ids, timeout).await;
}

pub(super) fn print_summary(r: &ExecutionReport) {
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
        _ if r.suspension.is_some() => println!("suspended (no value yet)"),
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

pub(super) fn print_error(e: &ScriptError) {
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

/// The harness `tools` and `check --types` describe: the configuration's
/// tools (the built-ins under `root`), narrowed to `packs` when given.
pub(super) async fn described(
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
