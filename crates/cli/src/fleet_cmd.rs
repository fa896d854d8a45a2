//! `harness worker` and `harness submit`: the Redis Streams fleet
//! (`harness_services::fleet`).

use crate::{
    build, build_harness, flag_overrides, upstreams, usage_error, Approve, ConfigArgs, EngineArgs,
};
use harness::config::Config;
use harness_services::fleet::{
    FleetClient, ResumeAnswers, RunRequest, Worker, WorkerOptions, DEFAULT_GROUP, DEFAULT_STREAM,
};
use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Redis URL (redis://host:port/db).
    #[arg(long, value_name = "URL", env = "HARNESS_REDIS_URL")]
    redis: String,
    /// The requests stream.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_STREAM)]
    stream: String,
    /// The consumer group.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_GROUP)]
    group: String,
    /// This worker's consumer name (default: host name and process id).
    #[arg(long, value_name = "NAME")]
    consumer: Option<String>,
    /// Runs at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    concurrency: usize,
    /// An entry pending this long with a worker that died is reclaimed.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    visibility_timeout_ms: u64,
    /// Deliveries before a request goes to the dead letters.
    #[arg(long, value_name = "N", default_value_t = 5)]
    max_deliveries: u64,
    /// On SIGTERM, how long runs in flight may finish.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    grace_ms: u64,
    /// Serve Prometheus metrics on ADDR (/metrics).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Let requests with `suspend: true` suspend (wasi engine), sealed
    /// with the keys in `[durable] keys_env`, which every worker of the
    /// fleet must share; required to resume them too.
    #[arg(long)]
    suspend: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct SubmitArgs {
    /// Redis URL (redis://host:port/db).
    #[arg(long, value_name = "URL", env = "HARNESS_REDIS_URL")]
    redis: String,
    /// The requests stream.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_STREAM)]
    stream: String,
    /// Wait for every reply and print them, one JSON object per line.
    #[arg(long)]
    wait: bool,
    /// With --wait: print each request's events (console, progress) before its reply.
    #[arg(long)]
    events: bool,
    /// With --wait: give up after this long (exit 1, the missing ids on stderr).
    #[arg(long, value_name = "MS", default_value_t = 600_000)]
    timeout_ms: u64,
    /// Resume request ID's suspended run (on whichever worker takes it)
    /// instead of reading FILE; answer with --approve, --answer, --fail.
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// With --resume: give (yes) or refuse (no) the approvals it waits on.
    #[arg(long, value_enum, requires = "resume")]
    approve: Option<Approve>,
    /// With --resume: a deferred call's result, CALL_ID=JSON (repeatable).
    #[arg(long = "answer", value_name = "CALL_ID=JSON", requires = "resume")]
    answers: Vec<String>,
    /// With --resume: a deferred call's failure, CALL_ID=MESSAGE (repeatable).
    #[arg(long = "fail", value_name = "CALL_ID=MESSAGE", requires = "resume")]
    failures: Vec<String>,
    /// One request as JSON, or JSON lines of many; - for standard input.
    #[arg(required_unless_present = "resume")]
    file: Option<String>,
}

fn consumer_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "worker".into());
    format!("{host}-{}", std::process::id())
}

pub(crate) async fn worker(args: WorkerArgs) -> ExitCode {
    if let Some(addr) = args.metrics {
        if let Err(e) = harness_services::telemetry::serve_prometheus(addr) {
            return usage_error(format!("cannot serve metrics on {addr}: {e}"));
        }
    }
    let flags = match flag_overrides(&args.engine, None, None) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let load = {
        let config: ConfigArgs = args.engine.config.clone();
        move |provider: Option<&str>| -> Result<Config, String> {
            let cfg = match &config.config {
                Some(p) => Config::load(p).map_err(|e| e.to_string())?,
                None => Config::defaults(),
            };
            let cfg = match provider.or(config.provider.as_deref()) {
                Some(p) => cfg.with_provider(p).map_err(|e| e.to_string())?,
                None => cfg,
            };
            cfg.with_overrides(&flags).map_err(|e| e.to_string())
        }
    };
    // The configuration and the upstream MCP servers are checked and started once.
    let base = match load(None) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    let up = match upstreams(&base).await {
        Ok(u) => u,
        Err(code) => return code,
    };
    let suspend = args.suspend;
    if suspend && base.settings().durable.keys_env.is_empty() {
        return usage_error(
            "--suspend needs [durable] keys_env: keys every worker of the fleet shares (a key file of one machine would not open on another)",
        );
    }
    let built = move |engine: &EngineArgs, cfg: &Config, up| {
        if !suspend {
            return build_harness(engine, cfg, up);
        }
        let runs = cfg
            .durable_runs()
            .map_err(|e| usage_error(format!("cannot suspend runs: {e}")))?;
        build(engine, cfg, up, Some(runs))
    };
    if let Err(code) = built(&args.engine, &base, up.clone()) {
        return code;
    }
    let engine = Arc::new(args.engine);
    let factory = move |provider: Option<&str>| {
        let cfg = load(provider)?;
        let h = built(&engine, &cfg, up.clone())
            .map_err(|_| format!("cannot build the harness for provider {provider:?}"))?;
        Ok((h, cfg))
    };
    let mut opts = WorkerOptions::new(args.consumer.unwrap_or_else(consumer_name));
    opts.stream = args.stream;
    opts.group = args.group;
    opts.concurrency = args.concurrency.max(1);
    opts.visibility_timeout_ms = args.visibility_timeout_ms;
    opts.max_deliveries = args.max_deliveries;
    opts.grace_ms = args.grace_ms;
    let worker = match Worker::new(&args.redis, opts, Arc::new(factory)) {
        Ok(w) => Arc::new(w),
        Err(e) => return usage_error(e),
    };
    let shutdown = harness::CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            #[cfg(unix)]
            {
                use tokio::signal::unix::{signal, SignalKind};
                if let Ok(mut term) = signal(SignalKind::terminate()) {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                } else {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            #[cfg(not(unix))]
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutting down: no new requests; finishing the runs in flight");
            shutdown.cancel();
        });
    }
    match worker.run(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harness worker: {e}");
            ExitCode::from(1)
        }
    }
}

/// The requests in FILE: one JSON object, or JSON lines.
fn read_requests(file: &str) -> Result<Vec<RunRequest>, ExitCode> {
    let bytes = crate::input(file)?;
    let text = String::from_utf8(bytes).map_err(|_| usage_error("the requests are not UTF-8"))?;
    if let Ok(one) = serde_json::from_str::<RunRequest>(&text) {
        return Ok(vec![one]);
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<RunRequest>(l)
                .map_err(|e| usage_error(format!("request on line {}: {e}", i + 1)))
        })
        .collect()
}

/// The resume request `--resume ID` and its answers make.
fn resume_request(id: &str, args: &SubmitArgs) -> Result<RunRequest, ExitCode> {
    let mut answers = ResumeAnswers::default();
    answers.approve = args.approve.map(|a| a == Approve::Yes);
    for a in &args.answers {
        let (call, json) = crate::call_value("--answer", a).map_err(usage_error)?;
        let v = serde_json::from_str(&json)
            .map_err(|e| usage_error(format!("--answer {call}: the result is not JSON: {e}")))?;
        answers.answers.insert(call, v);
    }
    for f in &args.failures {
        let (call, message) = crate::call_value("--fail", f).map_err(usage_error)?;
        answers.failures.insert(call, message);
    }
    Ok(RunRequest::resume(id, answers))
}

pub(crate) async fn submit(args: SubmitArgs) -> ExitCode {
    let read = match (&args.resume, &args.file) {
        (Some(id), _) => resume_request(id, &args).map(|r| vec![r]),
        (None, Some(file)) => read_requests(file),
        (None, None) => Err(usage_error("give a FILE of requests, or --resume ID")),
    };
    let mut requests = match read {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mut ids = BTreeSet::new();
    for r in &requests {
        if !ids.insert(r.id.clone()) {
            return usage_error(format!("request id {:?} appears twice", r.id));
        }
    }
    let mut client = match FleetClient::connect(&args.redis, &args.stream).await {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    let replies = format!(
        "{}:replies:{}-{}",
        args.stream,
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    if args.wait {
        if requests.iter().any(|r| r.reply_to.is_some()) {
            return usage_error(
                "with --wait, submit chooses reply_to itself; leave it out of the requests",
            );
        }
        requests = requests
            .into_iter()
            .map(|r| r.with_reply_to(replies.clone()))
            .collect();
    }
    for r in &requests {
        if let Err(e) = client.submit(r).await {
            return usage_error(e);
        }
        if !args.wait {
            println!("{}", r.id);
        }
    }
    if !args.wait {
        return ExitCode::SUCCESS;
    }
    let until = Instant::now() + Duration::from_millis(args.timeout_ms);
    let mut after = "0".to_owned();
    while !ids.is_empty() && Instant::now() < until {
        let (got, last) = match client.read_replies(&replies, &after, 1000).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("harness submit: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        after = last;
        for reply in got {
            if !ids.remove(&reply.id) {
                continue;
            }
            if args.events {
                if let Ok(events) = client.events(&reply.id).await {
                    for e in events {
                        println!("{}", serde_json::json!({"id": reply.id, "event": e}));
                    }
                }
            }
            match serde_json::to_string(&reply) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("harness submit: cannot print a reply: {e}"),
            }
        }
    }
    client.delete_stream(&replies).await;
    if ids.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "harness submit: no reply within {} ms for: {}",
            args.timeout_ms,
            ids.into_iter().collect::<Vec<_>>().join(", ")
        );
        ExitCode::from(1)
    }
}
