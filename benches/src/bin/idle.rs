//! `idle`: what each tuning costs in CPU, while runs come at a steady
//! pace and after the last one, for every engine configuration built in.
//!
//! ```text
//! cargo run --release -p harness-benches --bin idle -- [--idle-s N] [--runs N] [--only CONFIG]
//! ```
//!
//! For each configuration (anticipation off, the baseline; the default
//! tuning, which anticipates; kept warm; kept warm and awake): `--runs` trivial runs 2 ms apart, then `--idle-s`
//! seconds with no run at all. It prints the process's CPU time (user +
//! system, worker processes included once they exit: `getrusage` of self
//! and of children) over each stretch as a share of one core. A library
//! embedded in a server must stay under 1% of a core while idle.

use harness_benches::{engines, harness, Config, TRIVIAL};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// CPU seconds this process and its waited-for children have used.
fn cpu_s() -> f64 {
    // /proc/self/stat fields 14-17: utime, stime, cutime, cstime (ticks).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: f64 = after
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|t| t.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// CPU seconds of the worker processes still running (children of this
/// process, which `getrusage` counts only once they are waited for).
fn children_cpu_s() -> f64 {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| {
            let (_, rest) = stat.rsplit_once(')')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            (f.get(1) == Some(&me.as_str())).then(|| {
                f[11..13]
                    .iter()
                    .filter_map(|t| t.parse::<f64>().ok())
                    .sum::<f64>()
                    / 100.0
            })
        })
        .sum()
}

fn total_cpu_s() -> f64 {
    cpu_s() + children_cpu_s()
}

harness::main! {
    fn main() -> ExitCode {
        let mut idle = Duration::from_secs(60);
        let mut runs = 500usize;
        let mut only: Option<String> = None;
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            // `--bench` (from `cargo bench`) takes no value; the rest take one.
            if a == "--bench" {
                continue;
            }
            match (a.as_str(), args.next()) {
                ("--idle-s", Some(v)) => match v.parse() {
                    Ok(s) => idle = Duration::from_secs(s),
                    Err(e) => return usage(&format!("--idle-s: {e}")),
                },
                ("--runs", Some(v)) => match v.parse() {
                    Ok(n) => runs = n,
                    Err(e) => return usage(&format!("--runs: {e}")),
                },
                ("--only", Some(v)) => only = Some(v),
                (other, _) => return usage(&format!("unknown argument {other}")),
            }
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let mut configs: Vec<Config> = Vec::new();
        for plain in engines() {
            configs.push(Config { asleep: true, ..plain });
            configs.push(plain);
            configs.push(Config { keep_warm: true, ..plain });
            configs.push(Config { keep_warm: true, awake: true, ..plain });
        }
        println!(
            "{runs} trivial runs 2 ms apart, then {} s idle; CPU as a share of one core\n",
            idle.as_secs()
        );
        println!("{:<28} {:>14} {:>12}", "configuration", "at a 2 ms pace", "idle");
        for config in configs {
            let name = tuning_name(&config);
            if only.as_deref().is_some_and(|o| o != name) {
                continue;
            }
            let h = harness(config);
            let pace = Duration::from_millis(2);
            let before = total_cpu_s();
            let started = Instant::now();
            for i in 0..runs {
                let r = rt.block_on(h.run(TRIVIAL));
                if !r.ok {
                    eprintln!("{name}: run {i} failed: {:?}", r.error);
                    return ExitCode::FAILURE;
                }
                std::thread::sleep(pace);
            }
            let busy = (total_cpu_s() - before) / started.elapsed().as_secs_f64();
            let before = total_cpu_s();
            let started = Instant::now();
            std::thread::sleep(idle);
            let idle_share = (total_cpu_s() - before) / started.elapsed().as_secs_f64();
            println!("{name:<28} {:>13.1}% {:>11.2}%", busy * 100.0, idle_share * 100.0);
            drop(h);
        }
        ExitCode::SUCCESS
    }
}

/// `quickjs no_anticipate`, `quickjs`, `quickjs/process keep_warm`,
/// `boa keep_warm+awake`.
fn tuning_name(c: &Config) -> String {
    let base = Config {
        keep_warm: false,
        awake: false,
        asleep: false,
        ..*c
    };
    match (c.asleep, c.keep_warm, c.awake) {
        (true, _, _) => format!("{base} no_anticipate"),
        (false, false, _) => base.to_string(),
        (false, true, false) => format!("{base} keep_warm"),
        (false, true, true) => format!("{base} keep_warm+awake"),
    }
}

fn usage(e: &str) -> ExitCode {
    eprintln!("{e}\nusage: idle [--idle-s N] [--runs N] [--only CONFIG]");
    ExitCode::from(2)
}
