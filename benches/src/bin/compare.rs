//! `compare`: our engines and the peer (QuickJS through quickjs-emscripten,
//! `benches/peers/bench.mjs`) on the same workloads, timed the same way,
//! with the ratios. Run it through `benches/compare`, which installs the
//! peer first.
//!
//! ```text
//! cargo run --release -p harness-benches --bin compare -- [--iters N] [--warmup-ms N] [--gap-ms N] [--markdown] [--json]
//! ```
//!
//! Method, for both sides: each workload is run for `--warmup-ms`, then
//! `--iters` runs are timed one by one, end to end (ours: `Harness::run`,
//! i.e. prepare, install in a hardened context, run, report; the peer: fresh
//! runtime and context with limits, `console` and `tools`, run, dump,
//! dispose). Medians are compared; p90 (and p99, ours) is shown for the tail. The
//! `throughput` row is CPU time per script with as many runs in flight as
//! cores, sustained (one caller per core, each running scripts back to
//! back; wall time × cores ÷ runs); the peer runs one script at a
//! time on one core, so its row is its trivial time. `--gap-ms`
//! idles that long before each timed run (not timed), as between a
//! model's turns: engines that prepare work ahead (our hardened contexts)
//! then find it ready, as in production.

use harness_benches::{
    engines, harness, parallel_calls, sequential_calls, throughput_window, Config, POLYFILL,
    RUNS_PER_CALLER, TRIVIAL,
};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// The workloads both sides run: name, our script, expected value.
fn workloads() -> Vec<(String, String, Value)> {
    let mut w = vec![
        ("trivial".to_string(), TRIVIAL.to_string(), Value::from(2)),
        // Patches a built-in: a private realm made for each run, as the
        // peer makes a context for every run.
        ("polyfill".to_string(), POLYFILL.to_string(), Value::from(2)),
    ];
    for n in [1usize, 10, 100] {
        w.push((
            format!("sequential_{n}"),
            sequential_calls(n),
            Value::from(n - 1),
        ));
    }
    w.push((
        "promise_all_32".to_string(),
        parallel_calls(32),
        Value::from(32),
    ));
    w
}

struct Options {
    iters: usize,
    warmup: Duration,
    gap: Duration,
    markdown: bool,
    json: bool,
    peer_dir: PathBuf,
    /// Only this workload (`trivial`, `sequential_10`, …).
    only: Option<String>,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        iters: 300,
        warmup: Duration::from_millis(500),
        gap: Duration::ZERO,
        only: None,
        markdown: false,
        json: false,
        peer_dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--iters" => {
                o.iters = value("--iters")?
                    .parse()
                    .map_err(|e| format!("--iters: {e}"))?
            }
            "--warmup-ms" => {
                let ms: u64 = value("--warmup-ms")?
                    .parse()
                    .map_err(|e| format!("--warmup-ms: {e}"))?;
                o.warmup = Duration::from_millis(ms);
            }
            "--gap-ms" => {
                let ms: u64 = value("--gap-ms")?.parse().map_err(|e| format!("--gap-ms: {e}"))?;
                o.gap = Duration::from_millis(ms);
            }
            "--peer-dir" => o.peer_dir = PathBuf::from(value("--peer-dir")?),
            "--only" => o.only = Some(value("--only")?),
            "--markdown" => o.markdown = true,
            "--json" => o.json = true,
            // cargo bench passes --bench to every target.
            "--bench" => {}
            "-h" | "--help" => return Err(
                "usage: compare [--iters N] [--warmup-ms N] [--gap-ms N] [--only WORKLOAD] [--peer-dir DIR] [--markdown] [--json]"
                    .into(),
            ),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    Ok(o)
}

/// One measured (workload, configuration).
#[derive(Debug, Clone)]
struct Row {
    workload: String,
    config: String,
    median_us: f64,
    p90_us: f64,
    /// Ours only (the peer's script reports p90); NaN where unknown.
    p99_us: f64,
    mean_us: f64,
}

fn summarise(workload: &str, config: &str, mut samples: Vec<f64>) -> Row {
    samples.sort_by(f64::total_cmp);
    let q = |p: f64| harness_benches::quantile(&samples, p);
    Row {
        workload: workload.to_string(),
        config: config.to_string(),
        median_us: q(0.5),
        p90_us: q(0.9),
        p99_us: q(0.99),
        mean_us: samples.iter().sum::<f64>() / samples.len() as f64,
    }
}

/// Runs `once` for the warm-up, then times `--iters` calls of it one by
/// one (each after `--gap-ms` of idling), in µs.
fn timed(o: &Options, once: impl Fn()) -> Vec<f64> {
    let until = Instant::now() + o.warmup;
    while Instant::now() < until {
        once();
    }
    (0..o.iters)
        .map(|_| {
            if !o.gap.is_zero() {
                std::thread::sleep(o.gap);
            }
            let t = Instant::now();
            once();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// The rows measured again with the engine kept warm.
const WARM_ROWS: [&str; 2] = ["trivial", "sequential_100"];

fn measure_ours(config: Config, o: &Options, rt: &tokio::runtime::Runtime) -> Vec<Row> {
    let h = harness(config);
    let mut rows = Vec::new();
    for (name, src, expect) in workloads() {
        // Kept warm: the trivial and `sequential_100` rows only, to set
        // beside the plain ones.
        if o.only.as_ref().is_some_and(|w| *w != name)
            || (config.keep_warm && !WARM_ROWS.contains(&name.as_str()))
        {
            continue;
        }
        let once = || {
            let r = rt.block_on(h.run(&src));
            assert!(
                r.ok && r.value.as_ref() == Some(&expect),
                "{config} {name}: {r:?}"
            );
        };
        let samples = timed(o, once);
        rows.push(summarise(&name, &config.to_string(), samples));
    }
    if o.only.as_ref().is_none_or(|w| w == THROUGHPUT) && !config.keep_warm {
        rows.push(throughput_per_core(&h, config, o, rt));
    }
    #[cfg(feature = "wasi")]
    if config.to_string() == "wasi" && o.only.as_ref().is_none_or(|w| w == SANDBOX) {
        rows.push(sandbox_execute(o));
    }
    rows
}

/// The workspace sandbox's row's name.
const SANDBOX: &str = "sandbox_execute";

/// The workspace sandbox (WASI): `execute("console.log(1+1)")` end to end:
/// the session directory, `user_code.js` written, a fresh instance of the
/// guest as a program (`quickjs /app/user_code.js`, from the snapshot of
/// its pre-initialised runtime),
/// stdout back, the files created and modified. The peer has no such
/// thing; its row is its trivial time.
#[cfg(feature = "wasi")]
fn sandbox_execute(o: &Options) -> Row {
    use harness::wasi::{Sandbox, SandboxPolicy};
    let root = std::env::temp_dir().join(format!("harness-compare-{}", std::process::id()));
    let sandbox = Sandbox::new(SandboxPolicy::default(), "compare", &root).expect("a sandbox");
    let once = || {
        let r = sandbox
            .execute("console.log(1+1)")
            .expect("the sandbox runs");
        assert!(r.success && r.stdout == "2\n", "sandbox: {r:?}");
    };
    let samples = timed(o, once);
    let _ = std::fs::remove_dir_all(&root);
    summarise(SANDBOX, "wasi", samples)
}

/// The throughput row's name.
const THROUGHPUT: &str = "throughput";

/// Throughput per core, as CPU time per trivial script: as many callers
/// as there are cores, each running [`RUNS_PER_CALLER`] scripts one after
/// another, so that as many runs are in flight as there are cores the
/// whole time (a batch that waits for its slowest run idles a core); each
/// sample is its wall time × cores ÷ runs. The peer runs one script at a
/// time on one core, so its row is its trivial median, and `peer/ours`
/// compares scripts/s per core.
fn throughput_per_core(
    h: &harness::Harness,
    config: Config,
    o: &Options,
    rt: &tokio::runtime::Runtime,
) -> Row {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let window = || throughput_window(rt, h, cores, RUNS_PER_CALLER);
    // cores × wall ÷ (cores × RUNS_PER_CALLER) runs.
    let samples = timed(o, window)
        .into_iter()
        .map(|us| us / RUNS_PER_CALLER as f64)
        .collect();
    summarise(THROUGHPUT, &config.to_string(), samples)
}

/// Runs the Node peer; its rows and a one-line description.
fn measure_peer(o: &Options) -> Result<(Vec<Row>, String), String> {
    let script = o.peer_dir.join("bench.mjs");
    if !o
        .peer_dir
        .join("node_modules")
        .join("quickjs-emscripten")
        .exists()
    {
        return Err(format!(
            "quickjs-emscripten is not installed in {}: run `npm ci` there (benches/compare does)",
            o.peer_dir.display()
        ));
    }
    let out = Command::new("node")
        .arg(&script)
        .args(["--json", "--iters", &o.iters.to_string()])
        .args(["--warmup-ms", &o.warmup.as_millis().to_string()])
        .args(["--gap-ms", &o.gap.as_millis().to_string()])
        // The peer's throughput and sandbox rows are its trivial row.
        .args(o.only.iter().flat_map(|w| {
            [
                "--only",
                if w == THROUGHPUT || w == SANDBOX {
                    "trivial"
                } else {
                    w.as_str()
                },
            ]
        }))
        .current_dir(&o.peer_dir)
        .output()
        .map_err(|e| {
            format!("cannot run node (Node.js 18 or later is needed for the peer): {e}")
        })?;
    if !out.status.success() {
        return Err(format!(
            "the peer bench failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("peer output is not JSON: {e}"))?;
    let meta = &v["meta"];
    let about = format!(
        "{} {} on node {}",
        meta["peer"].as_str().unwrap_or("?"),
        meta["version"].as_str().unwrap_or("?"),
        meta["node"].as_str().unwrap_or("?")
    );
    let mut rows: Vec<Row> = v["results"]
        .as_array()
        .ok_or("peer output has no results")?
        .iter()
        .map(|r| Row {
            workload: r["workload"].as_str().unwrap_or("?").to_string(),
            config: r["config"].as_str().unwrap_or("?").to_string(),
            median_us: r["median_us"].as_f64().unwrap_or(f64::NAN),
            p90_us: r["p90_us"].as_f64().unwrap_or(f64::NAN),
            p99_us: r["p99_us"].as_f64().unwrap_or(f64::NAN),
            mean_us: r["mean_us"].as_f64().unwrap_or(f64::NAN),
        })
        .collect();
    // Rows the peer has no workload of its own for are its trivial rows:
    // one script at a time on one core (its CPU time per script), and no
    // sandbox at all.
    let trivial: Vec<Row> = rows
        .iter()
        .filter(|r| r.workload == "trivial")
        .cloned()
        .collect();
    for derived in [THROUGHPUT, SANDBOX] {
        if o.only.as_ref().is_none_or(|w| w == derived) {
            rows.extend(trivial.iter().map(|r| Row {
                workload: derived.to_string(),
                ..r.clone()
            }));
        }
    }
    if let Some(only @ (THROUGHPUT | SANDBOX)) = o.only.as_deref() {
        rows.retain(|r| r.workload == only);
    }
    Ok((rows, about))
}

/// The npm package script-harness beside the peer in one Node process
/// (`bench.mjs --in-process`), when its addon is built.
fn print_in_process(o: &Options) {
    // The release addon beside this (release) binary: the copy in
    // bindings/node/native is whatever `scripts/test` left there, a dev
    // build, whose figures would mean nothing.
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
        .unwrap_or_default();
    let lib = dir.join("libscript_harness_node.so");
    if !lib.exists() {
        println!(
            "\nin one Node process: not run (build the release addon: cargo build --release -p script-harness-node; \
             the dev build that scripts/test puts in bindings/node/native is not measured)"
        );
        return;
    }
    // Node loads a native addon only from a `.node` file.
    let addon = dir.join("script-harness-compare.node");
    let _ = std::fs::remove_file(&addon);
    if std::fs::hard_link(&lib, &addon).is_err() {
        if let Err(e) = std::fs::copy(&lib, &addon) {
            println!(
                "\nin one Node process: not run (cannot copy {}: {e})",
                lib.display()
            );
            return;
        }
    }
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let me = std::env::current_exe().ok().and_then(|p| modified(&p));
    if let (Some(l), Some(me)) = (modified(&lib), me) {
        if l < me {
            println!(
                "\nnote: {} is older than this binary; rebuild it for current figures",
                lib.display()
            );
        }
    }
    let out = Command::new("node")
        .arg(o.peer_dir.join("bench.mjs"))
        .args(["--in-process", "--iters", &o.iters.to_string()])
        .args(["--warmup-ms", &o.warmup.as_millis().to_string()])
        .args(["--gap-ms", &o.gap.as_millis().to_string()])
        .env("SCRIPT_HARNESS_NATIVE", &addon)
        .current_dir(&o.peer_dir)
        .output();
    match out {
        Ok(out) if out.status.success() => {
            println!("\n{}", String::from_utf8_lossy(&out.stdout).trim_end());
        }
        Ok(out) => println!(
            "\nin one Node process: failed: {}",
            String::from_utf8_lossy(&out.stderr).trim_end()
        ),
        Err(e) => println!("\nin one Node process: cannot run node: {e}"),
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn print_table(ours: &[Row], peer: &[Row], o: &Options) {
    let (sep, head, rule) = if o.markdown {
        (" | ", "| ", "|---|---|---:|---:|---:|---|---:|---:|---:|")
    } else {
        ("  ", "", "")
    };
    let line = |cells: [String; 9]| {
        let body = cells.join(sep);
        if o.markdown {
            println!("{head}{body} |");
        } else {
            println!("{body}");
        }
    };
    line([
        format!("{:<15}", "workload"),
        format!("{:<16}", "ours"),
        format!("{:>11}", "median µs"),
        format!("{:>9}", "p90 µs"),
        format!("{:>9}", "p99 µs"),
        format!("{:<28}", "peer"),
        format!("{:>11}", "median µs"),
        format!("{:>9}", "p90 µs"),
        format!("{:>9}", "peer/ours"),
    ]);
    if !rule.is_empty() {
        println!("{rule}");
    }
    for r in ours {
        let peers: Vec<&Row> = peer.iter().filter(|p| p.workload == r.workload).collect();
        if peers.is_empty() {
            line([
                format!("{:<15}", r.workload),
                format!("{:<16}", r.config),
                format!("{:>11.1}", r.median_us),
                format!("{:>9.1}", r.p90_us),
                format!("{:>9.1}", r.p99_us),
                format!("{:<28}", "-"),
                format!("{:>11}", "-"),
                format!("{:>9}", "-"),
                format!("{:>9}", "-"),
            ]);
        }
        for p in peers {
            line([
                format!("{:<15}", r.workload),
                format!("{:<16}", r.config),
                format!("{:>11.1}", r.median_us),
                format!("{:>9.1}", r.p90_us),
                format!("{:>9.1}", r.p99_us),
                format!("{:<28}", p.config),
                format!("{:>11.1}", p.median_us),
                format!("{:>9.1}", p.p90_us),
                format!("{:>8.2}x", p.median_us / r.median_us),
            ]);
        }
    }
}

// Also this binary's own worker processes (the process boundary).
harness::main! {
    fn main() -> ExitCode {
        let o = match parse_args() {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        };
        // Tokio's default: a worker thread per core, as in a service, so
        // that the callers of the throughput row are not what limits it on
        // a machine with more than two cores.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let started = Instant::now();
        // QuickJS kept warm (`HarnessBuilder::keep_warm`), in process and
        // behind the boundary: rows of their own beside the default ones.
        let plain = engines();
        let warm = ["quickjs", "quickjs,process"].map(|c| Config {
            keep_warm: true,
            ..Config::from_options(c)
        });
        let warm = warm.into_iter().filter(|w| {
            plain.contains(&Config {
                keep_warm: false,
                ..*w
            })
        });
        let ours: Vec<Row> = plain
            .clone()
            .into_iter()
            .chain(warm)
            .flat_map(|c| measure_ours(c, &o, &rt))
            .collect();
        let peer = measure_peer(&o);
        let (peer_rows, about) = match &peer {
            Ok((rows, about)) => (rows.clone(), about.clone()),
            Err(_) => (Vec::new(), "not run".to_string()),
        };
        if o.json {
            let rows = |rs: &[Row]| -> Vec<Value> {
                rs.iter()
                    .map(|r| {
                        serde_json::json!({"workload": r.workload, "config": r.config,
                            "median_us": r.median_us, "p90_us": r.p90_us, "p99_us": r.p99_us, "mean_us": r.mean_us})
                    })
                    .collect()
            };
            let doc = serde_json::json!({"cpu": cpu_model(), "iters": o.iters,
                "gap_ms": o.gap.as_millis() as u64, "peer": about,
                "ours": rows(&ours), "peer_results": rows(&peer_rows)});
            println!("{doc}");
        } else {
            println!(
                "{} runs per row, {} ms apart, after {} ms of warm-up; {}; peer: {about}; measured in {:.0} s\n",
                o.iters,
                o.gap.as_millis(),
                o.warmup.as_millis(),
                cpu_model(),
                started.elapsed().as_secs_f64()
            );
            print_table(&ours, &peer_rows, &o);
            print_in_process(&o);
        }
        match peer {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("peer not measured: {e}");
                ExitCode::FAILURE
            }
        }
    }
}
