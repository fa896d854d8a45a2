//! The engine's own floor, without the harness: bare rquickjs evaluating a
//! trivial script in one reused context, back to back or GAP ms apart:
//! `bare [N] [GAP] [handoff]` (defaults 2000 and 0). Prints the median and
//! p90 of each form:
//! - `eval`: `1+1` evaluated as a global script;
//! - `async`: the shape of a harness run without its prelude: an async
//!   function compiled and called, its promise's job run, the value
//!   through `JSON.stringify`.
//!
//! With `handoff` the engine lives on its own thread, as in the harness's
//! pool: the caller sends each run over a channel and waits for the answer,
//! so each run pays the two thread wake-ups too. Comparing GAP 0 with
//! GAP 2 says what a CPU that idled between runs costs the engine alone:
//! `cargo build --release -p harness-quickjs --example bare &&
//!  target/release/examples/bare 2000 2 && target/release/examples/bare 2000 2 handoff`
use rquickjs::{Context, Runtime};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const FORMS: [(&str, &str); 2] = [
    ("eval", "1+1"),
    (
        "async",
        "var out; (async function () {\nreturn 1+1\n})().then(v => { out = JSON.stringify(v) }); undefined",
    ),
];

/// Runs one form once in `ctx`, its jobs included.
fn run_once(rt: &Runtime, ctx: &Context, source: &str) {
    ctx.with(|ctx| {
        let _: rquickjs::Value = ctx.eval(source).expect("the script runs");
    });
    while rt.execute_pending_job().expect("a job runs") {}
}

/// Times `n` calls of `one`, each after a pause of `gap`, after a tenth
/// as many untimed ones to warm up; sorted.
fn timed(n: usize, gap: Duration, mut one: impl FnMut()) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        std::thread::sleep(gap);
        let t0 = Instant::now();
        one();
        if i >= n / 10 {
            times.push(t0.elapsed());
        }
    }
    times.sort();
    times
}

fn percentile(sorted: &[Duration], p: usize) -> f64 {
    sorted[(sorted.len() - 1) * p / 100].as_secs_f64() * 1e6
}

fn main() {
    let arg = |i: usize, d: u64| -> u64 {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (n, gap) = (arg(1, 2000) as usize, Duration::from_millis(arg(2, 0)));
    let handoff = std::env::args().nth(3).as_deref() == Some("handoff");
    for (name, source) in FORMS {
        let times = if handoff {
            let (to_engine, jobs) = mpsc::channel::<()>();
            let (to_caller, answers) = mpsc::channel::<()>();
            let engine = std::thread::spawn(move || {
                let rt = Runtime::new().expect("a runtime");
                let ctx = Context::full(&rt).expect("a context");
                while jobs.recv().is_ok() {
                    run_once(&rt, &ctx, source);
                    to_caller.send(()).expect("the caller waits");
                }
            });
            let times = timed(n, gap, || {
                to_engine.send(()).expect("the engine waits");
                answers.recv().expect("an answer");
            });
            drop(to_engine);
            engine.join().expect("the engine thread ends");
            times
        } else {
            let rt = Runtime::new().expect("a runtime");
            let ctx = Context::full(&rt).expect("a context");
            timed(n, gap, || run_once(&rt, &ctx, source))
        };
        println!(
            "{name:5} gap {} ms{}: median {:.1} µs, p90 {:.1} µs over {n} runs",
            gap.as_millis(),
            if handoff {
                ", handed to an engine thread"
            } else {
                ""
            },
            percentile(&times, 50),
            percentile(&times, 90),
        );
    }
}
