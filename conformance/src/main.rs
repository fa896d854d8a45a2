//! `conformance`: runs the shared suite on the engines built in and prints
//! an engine-by-case matrix; `conformance test262 --dir PATH` runs test262.
//!
//! Exit status: 0 when every case passed (or was unsupported with a
//! reason), 1 when a case failed, 2 for usage errors.

use clap::{Parser, Subcommand, ValueEnum};
use harness::core::process::ProcessOptions;
use harness::{EngineKind, Isolation};
use harness_conformance::{all_cases, format, run_suite_on, test262, SuiteEngines};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "conformance",
    version,
    about = "The shared conformance and security suite"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Engines to run (repeatable); default: every engine built in.
    #[arg(long = "engine", global = true)]
    engines: Vec<String>,
    /// Isolations to run each engine in (repeatable: in_process, process);
    /// default: both, side by side.
    #[arg(long = "isolation")]
    isolations: Vec<Isolation>,
    /// Run only cases whose name contains this (e.g. `security::` or `tools::budget`).
    #[arg(long)]
    filter: Option<String>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// List the cases with their expected behaviour and exit.
    #[arg(long)]
    list: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a test262 checkout (or files in its format).
    Test262 {
        /// The checkout (holds `harness/` and `test/`).
        #[arg(long)]
        dir: PathBuf,
        /// Path prefix under `test/`, e.g. `built-ins/Array`.
        #[arg(long)]
        filter: Option<String>,
        /// Run without the hardening prelude.
        #[arg(long)]
        raw: bool,
        /// Also skip tests using this feature (repeatable).
        #[arg(long = "skip-feature")]
        skip_features: Vec<String>,
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
    Markdown,
}

fn engines(names: &[String]) -> Result<Vec<EngineKind>, String> {
    if names.is_empty() {
        let all = EngineKind::available();
        if all.is_empty() {
            return Err(
                "no engine is built in (enable an engine feature such as `quickjs`)".into(),
            );
        }
        return Ok(all);
    }
    names
        .iter()
        .map(|n| n.parse::<EngineKind>().map_err(|e| e.to_string()))
        .collect()
}

/// Says why the engine cannot be built, and the exit code for it.
fn cannot_build(e: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("conformance: {e}");
    ExitCode::from(2)
}

fn adapter(
    kind: EngineKind,
    isolation: Isolation,
) -> Result<std::sync::Arc<dyn harness::ScriptRuntimeAdapter>, ExitCode> {
    kind.adapter_with(isolation, ProcessOptions::current_exe)
        .map_err(|e| cannot_build(&e))
}

/// The engine in `isolation`, with its one-thread twin for the cross-run
/// cases.
fn adapters(kind: EngineKind, isolation: Isolation) -> Result<SuiteEngines, ExitCode> {
    let engine = kind.descriptor().map_err(|e| cannot_build(&e))?;
    SuiteEngines::for_engine(&engine, isolation, ProcessOptions::current_exe)
        .map_err(|e| cannot_build(&format!("cannot start a worker process: {e}")))
}

async fn suite(cli: Cli, kinds: Vec<EngineKind>) -> ExitCode {
    let cases = all_cases();
    if cli.list {
        for c in &cases {
            println!("{:45} {}", c.name, c.doc);
        }
        println!("{} cases", cases.len());
        return ExitCode::SUCCESS;
    }
    let isolations = if cli.isolations.is_empty() {
        vec![Isolation::InProcess, Isolation::Process]
    } else {
        cli.isolations.clone()
    };
    let mut reports = Vec::new();
    for kind in kinds {
        for &isolation in &isolations {
            let engines = match adapters(kind, isolation) {
                Ok(a) => a,
                Err(code) => return code,
            };
            reports.push(run_suite_on(engines, &cases, cli.filter.as_deref()).await);
        }
    }
    match cli.format {
        Format::Text => print!("{}", format::text(&reports)),
        Format::Markdown => print!("{}", format::markdown(&reports)),
        Format::Json => {
            print!("{}", format::json(&reports));
            eprintln!("{}", format::totals(&reports));
        }
    }
    let reuse = harness_conformance::REUSE.summary();
    if let Some((line, _)) = &reuse {
        eprintln!("{line}");
    }
    if reports.iter().any(|r| r.failed() > 0) || reuse.is_some_and(|(_, holds)| !holds) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

async fn run(cli: Cli) -> ExitCode {
    let kinds = match engines(&cli.engines) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("conformance: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(Command::Test262 {
        dir,
        filter,
        raw,
        skip_features,
        timeout_ms,
        json,
    }) = cli.command
    else {
        return suite(cli, kinds).await;
    };
    let mut opts = test262::Options::new(dir);
    opts.filter = filter;
    opts.raw = raw;
    opts.timeout_ms = timeout_ms;
    opts.skip_features.extend(skip_features);
    for kind in kinds {
        let isolation = cli
            .isolations
            .first()
            .copied()
            .unwrap_or_else(|| kind.default_isolation());
        let adapter = match adapter(kind, isolation) {
            Ok(a) => a,
            Err(code) => return code,
        };
        match test262::run(adapter.as_ref(), &opts).await {
            Ok(r) if json => println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default()),
            Ok(r) => print!("{}", r.render()),
            Err(e) => {
                eprintln!("conformance: {e}");
                return ExitCode::from(2);
            }
        }
    }
    ExitCode::SUCCESS
}

// Also this binary's own worker processes (the process boundary).
harness::main! {
    fn main() -> ExitCode {
        harness_services::cli_support::main("conformance", run)
    }
}
