//! `compare`: our engines and the peer (QuickJS through quickjs-emscripten,
//! `benches/peers/bench.mjs`) on the same workloads, timed the same way,
//! with the ratios. Run it through `benches/compare`, which installs the
//! peer first.
//!
//! ```text
//! cargo run --release -p harness-benches --bin compare -- [--iters N] [--rounds N] [--warmup-ms N] [--gap-ms N] [--markdown] [--json] [--svg FILE]
//! ```
//!
//! `--svg FILE` also writes the run's chart there (`harness_benches::chart`).
//!
//! Method, for both sides: each workload is run for `--warmup-ms`, then
//! `--iters` runs are timed one by one, end to end (ours: `Harness::run`,
//! i.e. prepare, install in a hardened context, run, report; the peer: fresh
//! runtime and context with limits, `console` and `tools`, run, dump,
//! dispose), in `--rounds` rounds in which the rows and the peer take
//! turns ([`measure`]). Medians are compared; p90 and p99 are shown for the tail. The
//! `throughput` row is CPU time per script with as many runs in flight as
//! cores, sustained (one caller per core, each running scripts back to
//! back; wall time × cores ÷ runs); the peer runs one script at a
//! time on one core, so its row is its trivial time. `--gap-ms`
//! idles that long before each timed run (not timed), as between a
//! model's turns: engines that prepare work ahead (our hardened contexts)
//! then find it ready, as in production; it also times the `trivial` and
//! `sequential_100` rows back to back in the same rounds ([`TWIN_ROWS`])
//! and prints them beside the spaced ones.

use harness_benches::{
    engines, harness, parallel_calls, sequential_calls, throughput_window, Config, POLYFILL,
    RUNS_PER_CALLER, TRIVIAL,
};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

mod table;
use table::{bars, print_table, print_twins};

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
    /// The timed runs of every row are taken in this many rounds, the
    /// rows (and the peer) taking turns ([`measure`]).
    rounds: usize,
    warmup: Duration,
    gap: Duration,
    markdown: bool,
    json: bool,
    /// Where to write the chart, if anywhere.
    svg: Option<PathBuf>,
    peer_dir: PathBuf,
    /// Only this workload (`trivial`, `sequential_10`, …).
    only: Option<String>,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        iters: 300,
        rounds: 5,
        warmup: Duration::from_millis(500),
        gap: Duration::ZERO,
        only: None,
        markdown: false,
        json: false,
        svg: None,
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
            "--rounds" => {
                o.rounds = value("--rounds")?
                    .parse()
                    .map_err(|e| format!("--rounds: {e}"))?
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
            // Absolute: the peer runs with its directory as the working
            // directory, where a relative path would name another place.
            "--peer-dir" => {
                let dir = value("--peer-dir")?;
                o.peer_dir = std::path::absolute(&dir).map_err(|e| format!("--peer-dir {dir}: {e}"))?
            }
            "--only" => o.only = Some(value("--only")?),
            "--markdown" => o.markdown = true,
            "--json" => o.json = true,
            "--svg" => o.svg = Some(PathBuf::from(value("--svg")?)),
            // cargo bench passes --bench to every target.
            "--bench" => {}
            "-h" | "--help" => return Err(
                "usage: compare [--iters N] [--rounds N] [--warmup-ms N] [--gap-ms N] [--only WORKLOAD] [--peer-dir DIR] [--markdown] [--json] [--svg FILE]"
                    .into(),
            ),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.iters == 0 {
        return Err("--iters must be at least 1".into());
    }
    if o.rounds == 0 || o.rounds > o.iters {
        return Err(format!(
            "--rounds must be between 1 and --iters ({})",
            o.iters
        ));
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

/// Untimed runs at the timed runs' pace after a warm-up, with `--gap-ms`:
/// the warm-up runs back to back, and a pool anticipates a steady pace
/// only once 8 pauses agree, so without them the first runs of every
/// round measured the change of pace instead of the pace (2026-11-29: the
/// first 10 of each round's 100 spaced runs took 85 against 22 µs on
/// QuickJS, 134 against 53 on Boa, and took Boa's 99th percentile from
/// 112 to 153 µs). The peer's script settles the same way.
const SETTLE: usize = 16;

/// Runs `once` for `warmup` and then, with a `gap`, [`SETTLE`] more times
/// at that pace, then times `n` calls of it one by one (each after `gap`
/// of idling: `--gap-ms`, or none for a back-to-back twin), in µs.
fn timed(gap: Duration, warmup: Duration, n: usize, mut once: impl FnMut()) -> Vec<f64> {
    let until = Instant::now() + warmup;
    while Instant::now() < until {
        once();
    }
    if !gap.is_zero() {
        for _ in 0..SETTLE {
            std::thread::sleep(gap);
            once();
        }
    }
    (0..n)
        .map(|_| {
            if !gap.is_zero() {
                std::thread::sleep(gap);
            }
            let t = Instant::now();
            once();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// How many of the `--iters` timed runs round `round` takes: an equal
/// share, the first rounds one more where they do not divide.
fn share(o: &Options, round: usize) -> usize {
    o.iters / o.rounds + usize::from(round < o.iters % o.rounds)
}

/// A warm-up after the first round's: a row's engine was warmed then and
/// only needs its caches back, but the warm-up also has to outlast the
/// last row's keep-warm window ([`harness_benches::KEEP_WARM`], 50 ms),
/// whose rehearsals would otherwise share the CPUs with this row's
/// timed runs.
const REWARM_MIN: Duration = Duration::from_millis(100);

/// The warm-up before round `round`'s timed runs of a row.
fn warmup(o: &Options, round: usize) -> Duration {
    if round == 0 {
        o.warmup
    } else {
        (o.warmup / o.rounds as u32).max(REWARM_MIN).min(o.warmup)
    }
}

/// The rows measured again with the engine kept warm.
const WARM_ROWS: [&str; 2] = ["trivial", "sequential_100"];

/// The rows that, with `--gap-ms`, are also timed back to back in the
/// same rounds (their twins), for the targets that set a spaced figure
/// beside a back-to-back one: on a VM whose speed drifts for minutes,
/// two `compare` runs minutes apart compare the minutes as much as the
/// code.
const TWIN_ROWS: [&str; 2] = ["trivial", "sequential_100"];

/// What a row of ours runs.
enum Work {
    /// A script through `Harness::run`, and the value it must return.
    Script(String, Value),
    /// [`throughput_window`]s ([`THROUGHPUT`]).
    Throughput,
    /// The workspace sandbox's `execute` ([`SANDBOX`]).
    #[cfg(feature = "wasi")]
    Sandbox,
}

/// One row of ours: what it runs on which harness, and its samples so far.
struct Cell {
    config: Config,
    /// Index of its harness in [`measure`]'s list.
    harness: usize,
    workload: String,
    work: Work,
    /// The idle time before each timed run: `--gap-ms`, or none for the
    /// back-to-back twin of a [`TWIN_ROWS`] row.
    gap: Duration,
    samples: Vec<f64>,
}

/// A row of ours measured with `--gap-ms`, beside its back-to-back twin
/// timed in the same rounds.
struct Twin {
    spaced: Row,
    back_to_back: Row,
}

/// The rows of ours for `configs` that `--only` leaves, in the order
/// they print.
fn cells(configs: &[Config], o: &Options) -> Vec<Cell> {
    let wanted = |name: &str| o.only.as_ref().is_none_or(|w| w == name);
    let mut cells = Vec::new();
    for (harness, &config) in configs.iter().enumerate() {
        let cell = |workload: &str, work: Work, gap: Duration| Cell {
            config,
            harness,
            workload: workload.to_string(),
            work,
            gap,
            samples: Vec::with_capacity(o.iters),
        };
        let plain = !config.keep_warm && !config.asleep;
        for (name, src, expect) in workloads() {
            // Kept warm: the trivial and `sequential_100` rows only, to
            // set beside the plain ones.
            if wanted(&name) && (!config.keep_warm || WARM_ROWS.contains(&name.as_str())) {
                if plain && !o.gap.is_zero() && TWIN_ROWS.contains(&name.as_str()) {
                    let twin = Work::Script(src.clone(), expect.clone());
                    cells.push(cell(&name, twin, Duration::ZERO));
                }
                cells.push(cell(&name, Work::Script(src, expect), o.gap));
            }
        }
        if wanted(THROUGHPUT) && !config.keep_warm {
            cells.push(cell(THROUGHPUT, Work::Throughput, o.gap));
        }
        #[cfg(feature = "wasi")]
        if config.to_string() == "wasi" && wanted(SANDBOX) {
            cells.push(cell(SANDBOX, Work::Sandbox, o.gap));
        }
    }
    cells
}

/// The peer's rows and a one-line description of it, or why it was not
/// measured.
type Peer<R> = Result<(Vec<R>, String), String>;

/// Measures our rows for `configs` and the peer's, in `--rounds` rounds:
/// each round times its [`share`] of every row's runs, row after row
/// (starting one row further on each round), and runs the peer for the
/// same share, after ours in even rounds and before them in odd ones.
/// Each row's samples are pooled over the rounds. This VM's speed changes
/// by up to 2× for seconds at a time: with every row measured in one stretch, a ratio between
/// two rows said as much about the minute each was measured in as about
/// the code; taking turns spreads every row over the whole run. Every
/// harness lives for the whole run, so that a row keeps its engine (and
/// its worker processes) from one round to the next.
fn measure(
    configs: &[Config],
    o: &Options,
    rt: &tokio::runtime::Runtime,
) -> (Vec<Row>, Vec<Twin>, Peer<Row>) {
    let mut cells = cells(configs, o);
    let harnesses: Vec<Option<harness::Harness>> = configs
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            cells
                .iter()
                .any(|cell| cell.harness == i)
                .then(|| harness(c))
        })
        .collect();
    #[cfg(feature = "wasi")]
    let sandbox = SandboxRow::new(&cells);
    let mut peer: Peer<PeerRow> = Ok((Vec::new(), String::new()));
    let peer_round = |round: usize, peer: &mut Peer<PeerRow>| {
        let Ok((rows, about)) = peer else { return };
        match measure_peer(o, share(o, round)) {
            Ok((more, a)) => {
                *about = a;
                pool_peer(rows, more);
            }
            Err(e) => *peer = Err(e),
        }
    };
    for round in 0..o.rounds {
        let peer_first = round % 2 == 1;
        if peer_first {
            peer_round(round, &mut peer);
        }
        let n = cells.len();
        for i in 0..n {
            let cell = &mut cells[(i + round) % n];
            let h = harnesses[cell.harness].as_ref().expect("a harness per row");
            let (config, workload) = (cell.config, cell.workload.as_str());
            let more = match &cell.work {
                Work::Script(src, expect) => {
                    timed(cell.gap, warmup(o, round), share(o, round), || {
                        let r = rt.block_on(h.run(src));
                        assert!(
                            r.ok && r.value.as_ref() == Some(expect),
                            "{config} {workload}: {r:?}"
                        );
                    })
                }
                Work::Throughput => throughput_per_core(h, o, round, rt),
                #[cfg(feature = "wasi")]
                Work::Sandbox => sandbox.timed(o, round),
            };
            cell.samples.extend(more);
        }
        if !peer_first {
            peer_round(round, &mut peer);
        }
    }
    let (twins, cells): (Vec<Cell>, Vec<Cell>) = cells.into_iter().partition(|c| c.gap != o.gap);
    let ours: Vec<Row> = cells
        .into_iter()
        .map(|c| summarise(&c.workload, &c.config.to_string(), c.samples))
        .collect();
    let twins = twins
        .into_iter()
        .filter_map(|c| {
            let back_to_back = summarise(&c.workload, &c.config.to_string(), c.samples);
            let spaced = ours
                .iter()
                .find(|r| r.workload == back_to_back.workload && r.config == back_to_back.config)?
                .clone();
            Some(Twin {
                spaced,
                back_to_back,
            })
        })
        .collect();
    let peer = peer.map(|(rows, about)| (peer_rows(rows, o), about));
    (ours, twins, peer)
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
struct SandboxRow {
    /// The sandbox and its root directory, if the row is measured.
    sandbox: Option<(harness::wasi::Sandbox, PathBuf)>,
}

#[cfg(feature = "wasi")]
impl SandboxRow {
    fn new(cells: &[Cell]) -> Self {
        use harness::wasi::{Sandbox, SandboxPolicy};
        let wanted = cells.iter().any(|c| matches!(c.work, Work::Sandbox));
        let sandbox = wanted.then(|| {
            let root = std::env::temp_dir().join(format!("harness-compare-{}", std::process::id()));
            let sandbox =
                Sandbox::new(SandboxPolicy::default(), "compare", &root).expect("a sandbox");
            (sandbox, root)
        });
        SandboxRow { sandbox }
    }

    fn timed(&self, o: &Options, round: usize) -> Vec<f64> {
        let (sandbox, _) = self.sandbox.as_ref().expect("made for its row");
        timed(o.gap, warmup(o, round), share(o, round), || {
            let r = sandbox
                .execute("console.log(1+1)")
                .expect("the sandbox runs");
            assert!(r.success && r.stdout == "2\n", "sandbox: {r:?}");
        })
    }
}

#[cfg(feature = "wasi")]
impl Drop for SandboxRow {
    fn drop(&mut self) {
        if let Some((_, root)) = &self.sandbox {
            let _ = std::fs::remove_dir_all(root);
        }
    }
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
    o: &Options,
    round: usize,
    rt: &tokio::runtime::Runtime,
) -> Vec<f64> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let window = || throughput_window(rt, h, cores, RUNS_PER_CALLER);
    // cores × wall ÷ (cores × RUNS_PER_CALLER) runs.
    timed(o.gap, warmup(o, round), share(o, round), window)
        .into_iter()
        .map(|us| us / RUNS_PER_CALLER as f64)
        .collect()
}

/// One workload on the peer, with its samples pooled over the rounds.
struct PeerRow {
    workload: String,
    config: String,
    samples: Vec<f64>,
}

/// Adds one round's samples to the peer's rows (a new row for a workload
/// not seen yet).
fn pool_peer(rows: &mut Vec<PeerRow>, more: Vec<PeerRow>) {
    for m in more {
        match rows
            .iter_mut()
            .find(|r| r.workload == m.workload && r.config == m.config)
        {
            Some(r) => r.samples.extend(m.samples),
            None => rows.push(m),
        }
    }
}

/// The peer's rows from its pooled samples, with the rows it has no
/// workload of its own for: one script at a time on one core (its CPU
/// time per script), and no sandbox at all, so its trivial rows.
fn peer_rows(pooled: Vec<PeerRow>, o: &Options) -> Vec<Row> {
    let mut rows: Vec<Row> = pooled
        .into_iter()
        .map(|r| summarise(&r.workload, &r.config, r.samples))
        .collect();
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
    rows
}

/// Runs the Node peer for `iters` timed runs of each workload (after its
/// full warm-up: each round is a fresh Node process); its rows' samples
/// and a one-line description.
fn measure_peer(o: &Options, iters: usize) -> Peer<PeerRow> {
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
        .args(["--json", "--iters", &iters.to_string()])
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
    let rows = v["results"]
        .as_array()
        .ok_or("peer output has no results")?
        .iter()
        .map(|r| {
            let samples: Option<Vec<f64>> = r["samples_us"]
                .as_array()
                .and_then(|s| s.iter().map(Value::as_f64).collect());
            Ok(PeerRow {
                workload: r["workload"].as_str().unwrap_or("?").to_string(),
                config: r["config"].as_str().unwrap_or("?").to_string(),
                samples: samples
                    .filter(|s| !s.is_empty())
                    .ok_or("peer results have no samples_us")?,
            })
        })
        .collect::<Result<_, String>>()?;
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
    if let Some(changed) = changed_since_built(&lib) {
        println!(
            "\nnote: {} was built before {} of its sources changed (such as {}); \
             rebuild it (cargo build --release -p script-harness-node) for current figures",
            lib.display(),
            changed.len(),
            changed[0].display()
        );
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
        let steal_before = harness_benches::steal_s();
        // QuickJS kept warm (`HarnessBuilder::keep_warm`), and kept awake
        // too (`keep_warm_awake`), in process and behind the boundary, and
        // in process without anticipation (`anticipate(false)`): rows of
        // their own beside the default ones.
        let plain = engines();
        let warm = [
            "quickjs,asleep",
            "quickjs,keep_warm",
            "quickjs,process,keep_warm",
            "quickjs,awake",
            "quickjs,process,awake",
        ]
        .map(Config::from_options);
        let warm = warm.into_iter().filter(|w| {
            plain.contains(&Config {
                keep_warm: false,
                awake: false,
                asleep: false,
                ..*w
            })
        });
        let configs: Vec<Config> = plain.clone().into_iter().chain(warm).collect();
        let (ours, twins, peer) = measure(&configs, &o, &rt);
        let steal = steal_before.zip(harness_benches::steal_s()).map(|(a, b)| b - a);
        let steal_line = steal.map_or_else(
            || "hypervisor steal: unknown".to_string(),
            |s| format!("hypervisor steal: {s:.2} s of CPU"),
        );
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
            let back_to_back: Vec<Row> = twins.iter().map(|t| t.back_to_back.clone()).collect();
            let doc = serde_json::json!({"cpu": cpu_model(), "iters": o.iters, "rounds": o.rounds,
                "gap_ms": o.gap.as_millis() as u64, "peer": about, "steal_s": steal,
                "ours": rows(&ours), "peer_results": rows(&peer_rows),
                "back_to_back": rows(&back_to_back)});
            println!("{doc}");
        } else {
            // One round: no warm-up again, and nothing to take turns.
            let rounds = if o.rounds == 1 {
                "in one round".to_string()
            } else {
                format!(
                    "in {} rounds (warmed {} ms again in each after the first)",
                    o.rounds,
                    warmup(&o, 1).as_millis()
                )
            };
            println!(
                "{} runs per row {rounds}, {} ms apart, after {} ms of warm-up; {}; peer: {about}; measured in {:.0} s ({steal_line})\n",
                o.iters,
                o.gap.as_millis(),
                o.warmup.as_millis(),
                cpu_model(),
                started.elapsed().as_secs_f64()
            );
            print_table(&ours, &peer_rows, &o);
            print_twins(&twins, &o);
            print_in_process(&o);
        }
        if let Some(path) = &o.svg {
            let title = format!(
                "{}; {} runs per row, {} ms apart; peer: {about}",
                cpu_model(),
                o.iters,
                o.gap.as_millis()
            );
            let svg = harness_benches::chart::svg(&bars(&ours, &peer_rows), &title);
            if let Err(e) = std::fs::write(path, svg) {
                eprintln!("--svg {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
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

/// The sources `lib` was built from (Cargo's dep-info file beside it,
/// `NAME.d`) that changed after it was built, newest first; `None` when
/// none did or there is no dep-info to tell.
fn changed_since_built(lib: &std::path::Path) -> Option<Vec<PathBuf>> {
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let built = modified(lib)?;
    let info = std::fs::read_to_string(lib.with_extension("d")).ok()?;
    // `TARGET: SOURCE SOURCE …`, a space inside a path escaped as `\ `.
    let (_, sources) = info.lines().next()?.split_once(": ")?;
    let mut changed: Vec<(std::time::SystemTime, PathBuf)> = sources
        .replace("\\ ", "\u{0}")
        .split_whitespace()
        .map(|p| PathBuf::from(p.replace('\u{0}', " ")))
        .filter_map(|p| Some((modified(&p)?, p)))
        .filter(|(m, _)| *m > built)
        .collect();
    changed.sort_by_key(|c| std::cmp::Reverse(c.0));
    (!changed.is_empty()).then(|| changed.into_iter().map(|(_, p)| p).collect())
}
