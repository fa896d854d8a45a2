//! Shared workloads for the criterion benches: the same scripts and tools
//! for every engine, driven through the `ScriptRuntimeAdapter` trait.

pub mod chart;

use harness::{EngineKind, FnTool, Harness, Isolation, ToolRegistry};
use serde_json::json;

/// The `p` quantile (0 to 1) of `sorted` (ascending, not empty): the
/// sample at `(len - 1) * p`, rounded down. Every figure the benches and
/// their diagnostics print uses it.
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// CPU time the hypervisor gave to others while this VM's vCPUs wanted
/// it (steal, the eighth figure of `/proc/stat`'s `cpu` line), in
/// seconds since boot; `None` where there is no such figure. On the
/// development VM it is what runs 2 ms apart behind the process boundary
/// meet most of, so `compare` and `split` say how much of it fell into their
/// runs.
pub fn steal_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let ticks: f64 = line.split_whitespace().nth(8)?.parse().ok()?;
    // USER_HZ: 100 on every Linux ABI in use.
    Some(ticks / 100.0)
}

/// `return 1+1`, end to end: prepare, fresh hardened context, run, report.
pub const TRIVIAL: &str = "return 1+1";

/// A trivial script that patches a built-in: the facade gives it a private
/// realm (a context made for the run, dropped after it).
pub const POLYFILL: &str =
    "Array.prototype.last = function () { return this[this.length - 1]; }; return [1, 2].last()";

/// A trivial script in TypeScript, as a model told to write TypeScript
/// writes one: the facade (language `auto`, the default) finds the types
/// and strips them before the engine runs it.
pub const TYPESCRIPT: &str = "const xs: number[] = [1, 2]; const add = (a: number, b: number): number => a + b; return add(xs[0], xs[1])";

/// A script as a model writes one (about 0.6 KiB): tool calls, JSON, `Math`,
/// `Object.keys`, array methods; it changes no built-in.
pub const TYPICAL: &str = r#"const files = await tools.glob({ pattern: "src/**/*.ts" });
const sizes = {};
for (const f of files.slice(0, 20)) {
  const text = await tools.read({ path: f });
  sizes[f] = text.split("\n").length;
}
const total = Object.values(sizes).reduce((a, b) => a + b, 0);
const largest = Object.keys(sizes).sort((a, b) => sizes[b] - sizes[a]).slice(0, 3);
const summary = largest.map((f) => `${f}: ${sizes[f]} lines`).join("\n");
console.log(JSON.stringify({ total, largest }));
return { total, mean: Math.round(total / Math.max(1, files.length)), summary };
"#;

/// `n` sequential calls to `echo`.
pub fn sequential_calls(n: usize) -> String {
    format!("let last; for (let i = 0; i < {n}; i++) last = await tools.echo({{i}}); return last.i")
}

/// `n` calls through `Promise.all`.
pub fn parallel_calls(n: usize) -> String {
    format!("const r = await Promise.all(Array.from({{length: {n}}}, (_, i) => tools.echo({{i}}))); return r.length")
}

/// A loop of 10^6 additions.
pub const CPU_BOUND: &str = "let s = 0; for (let i = 0; i < 1e6; i++) s += i; return s";

/// Build, stringify and return a ~100 KiB object (1,850 rows: about
/// 102 KiB of JSON, under the default 128 KiB cap on return values).
pub const JSON_HEAVY: &str = "const rows = []; for (let i = 0; i < 1850; i++) rows.push({id: i, name: 'row ' + i, tags: ['a', 'b'], ok: i % 2 === 0}); const s = JSON.stringify(rows); if (s.length < 100 * 1024) throw new Error('only ' + s.length + ' bytes'); return rows";

/// One engine in one isolation, as benched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub engine: EngineKind,
    pub isolation: Isolation,
    /// The engine kept warm between runs ([`KEEP_WARM`]).
    pub keep_warm: bool,
    /// Kept warm and awake (`HarnessBuilder::keep_warm_awake`): the idle
    /// engine thread polls instead of sleeping through its window.
    pub awake: bool,
    /// Anticipation turned off (`HarnessBuilder::anticipate(false)`): the
    /// engine thread sleeps until each run wakes it, as before
    /// anticipation was the default.
    pub asleep: bool,
}

/// The window of `HarnessBuilder::keep_warm` in a configuration with
/// `keep_warm` (the examples' OPTIONS word `keep_warm`, compare's
/// `quickjs+warm` row).
pub const KEEP_WARM: std::time::Duration = std::time::Duration::from_millis(50);

impl std::fmt::Display for Config {
    /// `quickjs`, `quickjs/process`, `boa`, `boa/process`, and
    /// `+warm` after it when kept warm, `+awake` when kept awake too,
    /// `+asleep` when it does not anticipate.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.isolation {
            Isolation::InProcess => write!(f, "{}", self.engine)?,
            Isolation::Process => write!(f, "{}/process", self.engine)?,
        }
        if self.awake {
            f.write_str("+awake")?;
        } else if self.keep_warm {
            f.write_str("+warm")?;
        }
        if self.asleep {
            f.write_str("+asleep")?;
        }
        Ok(())
    }
}

impl Config {
    /// The examples' OPTIONS argument, a comma-separated list: an
    /// engine's name (`boa`, `wasi`, …; else QuickJS), `process` for the
    /// process boundary (else in process), `keep_warm` for the engine kept
    /// warm ([`KEEP_WARM`]), `awake` for kept warm and awake, `asleep`
    /// for anticipation turned off; other words
    /// are left to
    /// [`script_from_options`].
    pub fn from_options(options: &str) -> Config {
        let has = |o: &str| options.split(',').any(|x| x == o);
        Config {
            engine: options
                .split(',')
                .find_map(|o| o.parse::<EngineKind>().ok())
                .unwrap_or(EngineKind::QuickJs),
            isolation: if has("process") {
                Isolation::Process
            } else {
                Isolation::InProcess
            },
            keep_warm: has("keep_warm") || has("awake"),
            awake: has("awake"),
            asleep: has("asleep"),
        }
    }
}

/// The examples' script for their OPTIONS argument: [`POLYFILL`] (a
/// private realm) with `polyfill` in the list, [`TYPESCRIPT`] with
/// `typescript`, else [`TRIVIAL`].
pub fn script_from_options(options: &str) -> &'static str {
    let has = |o: &str| options.split(',').any(|x| x == o);
    if has("polyfill") {
        POLYFILL
    } else if has("typescript") {
        TYPESCRIPT
    } else {
        TRIVIAL
    }
}

/// Runs each of the throughput row's callers makes per window.
pub const RUNS_PER_CALLER: usize = 16;

/// One window of the throughput row: `callers` tasks on `rt`, each
/// running `runs` trivial scripts on `h` one after another, so that
/// `callers` runs are in flight the whole time; returns when all are done.
pub fn throughput_window(rt: &tokio::runtime::Runtime, h: &Harness, callers: usize, runs: usize) {
    rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..callers {
            let h = h.clone();
            set.spawn(async move {
                for _ in 0..runs {
                    let r = h.run(TRIVIAL).await;
                    assert!(r.ok, "{} throughput: {r:?}", h.engine().name);
                }
            });
        }
        while let Some(r) = set.join_next().await {
            r.expect("a run task");
        }
    })
}

/// A multi-threaded tokio runtime with `worker_threads` workers, timers
/// and I/O on, as the benches and examples drive the harness.
pub fn runtime(worker_threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The examples' numeric argument `i` (from 1), or `default` when it is
/// absent or not a number.
pub fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// A harness for `config` with an `echo` tool and budgets large enough
/// for the workloads. Process workers are this very binary, which must
/// call `harness::serve_worker_if_requested` first in `main`.
pub fn harness(config: Config) -> Harness {
    harness_with(config, |_| {})
}

/// [`harness()`], with the tools `more` registers beside `echo`.
pub fn harness_with(config: Config, more: impl FnOnce(&mut ToolRegistry)) -> Harness {
    let mut tools = ToolRegistry::new();
    tools
        .register(FnTool::new(
            "echo",
            "returns its arguments",
            json!({"type": "object"}),
            |a, _| async move { Ok(a) },
        ))
        .expect("echo registers");
    more(&mut tools);
    let limits = harness::Limits::default()
        .with_isolation(Some(config.isolation))
        .with_max_tool_calls(1000)
        .with_max_concurrent_tool_calls(32);
    let mut b = Harness::builder()
        .engine(config.engine)
        .tools(tools)
        .limits(limits);
    if config.keep_warm {
        b = b.keep_warm(KEEP_WARM).keep_warm_awake(config.awake);
    }
    if config.asleep {
        b = b.anticipate(false);
    }
    b.build().expect("engine is built in")
}

/// Every engine compiled into this build, in both isolations.
pub fn engines() -> Vec<Config> {
    EngineKind::available()
        .into_iter()
        .flat_map(|engine| {
            [Isolation::InProcess, Isolation::Process].map(|isolation| Config {
                engine,
                isolation,
                keep_warm: false,
                awake: false,
                asleep: false,
            })
        })
        .collect()
}

/// A realistic script of just under 20 KiB (the default source cap):
/// helpers, loops, tool calls, template strings, and (for TypeScript)
/// interfaces and annotations.
pub fn script_20kib(typescript: bool) -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < 19_000 {
        if typescript {
            s.push_str(&format!(
                "interface Row{i} {{ id: number; name: string; tags: string[] }}\n\
                 async function step{i}(rows: Row{i}[], limit: number): Promise<number> {{\n  \
                 let total: number = 0;\n  for (const r of rows) {{ if (r.id < limit) total += r.tags.length; }}\n  \
                 const res = await tools.echo({{ step: {i}, total }});\n  \
                 console.log(`step {i}: ${{res.total}}`);\n  return res.total as number;\n}}\n"
            ));
        } else {
            s.push_str(&format!(
                "async function step{i}(rows, limit) {{\n  let total = 0;\n  \
                 for (const r of rows) {{ if (r.id < limit) total += r.tags.length; }}\n  \
                 const res = await tools.echo({{ step: {i}, total }});\n  \
                 console.log(`step {i}: ${{res.total}}`);\n  return res.total;\n}}\n"
            ));
        }
        i += 1;
    }
    s.push_str("return await step0([{id: 1, name: 'a', tags: ['x']}], 10);\n");
    s
}

/// A model response of about 20 KiB holding the script in a block.
pub fn response_20kib() -> String {
    format!(
        "I will run the steps now.\n<thinking>\nPlan the steps.\n</thinking>\n<tool-calls>\n{}</tool-calls>\nDone.",
        script_20kib(false)
    )
}
