//! Helpers for fuzzing by hand (fuzz/README.md):
//!
//! ```sh
//! cargo run -p harness-fuzzing --example fuzz-tool -- seed fuzz/corpus
//! cargo run -p harness-fuzzing --example fuzz-tool -- replay execute_quickjs CRASH_FILE
//! cargo run -p harness-fuzzing --example fuzz-tool -- show CRASH_FILE
//! cargo run -p harness-fuzzing --example fuzz-tool -- sample 5
//! ```
//!
//! `replay` runs one target's oracle on one input outside libFuzzer (a
//! plain debug build: gdb and `RUST_BACKTRACE=1` work); `show` prints the
//! script a differential input becomes and what each engine made of it;
//! `sample` does that for pseudo-random inputs.

use harness::{EngineKind, Isolation};
use harness_fuzzing::*;
use std::path::Path;

const TARGETS: &[&str] = &[
    "detect",
    "prepare",
    "execute_quickjs",
    "execute_boa",
    "differential",
    "cross_run",
];

fn replay(target: &str, data: &[u8]) {
    match target {
        "detect" => check_detect(data),
        "prepare" => check_prepare(data),
        "execute_quickjs" => Execute::new(EngineKind::QuickJs, Isolation::InProcess).check(data),
        "execute_boa" => Execute::new(EngineKind::Boa, Isolation::Process).check(data),
        "differential" => {
            Differential::new().check(data);
        }
        "cross_run" => {
            let (first, second) = CrossRun::new().check(data);
            println!("--- first\n{first}\n--- second\n{second}");
        }
        _ => usage(),
    }
    println!("{target}: the oracle holds on this input");
}

fn show(data: &[u8]) {
    let d = Differential::new();
    let source = grammar::program(&mut arbitrary::Unstructured::new(data));
    println!("--- script\n{source}");
    for (engine, outcome) in d.outcomes(&source) {
        println!("--- {engine}\n{outcome:?}");
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: fuzz-tool seed DIR | replay TARGET FILE | show FILE | sample N\ntargets: {}",
        TARGETS.join(", ")
    );
    std::process::exit(2)
}

// Also this binary's own worker processes (the process boundary).
harness::main! {
    fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let read = |p: &str| std::fs::read(p).unwrap_or_else(|e| panic!("{p}: {e}"));
        match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["seed", dir] => {
                for target in TARGETS {
                    let d = Path::new(dir).join(target);
                    std::fs::create_dir_all(&d).expect("corpus directory");
                    for (i, s) in SEEDS.iter().enumerate() {
                        std::fs::write(d.join(format!("seed-{i:02}")), s).expect("seed file");
                    }
                }
                println!(
                    "{} seeds for each of {} targets in {dir}",
                    SEEDS.len(),
                    TARGETS.len()
                );
            }
            ["replay", target, file] => replay(target, &read(file)),
            ["show", file] => show(&read(file)),
            ["sample", n] => {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d);
                for _ in 0..n.parse::<usize>().unwrap_or(5) {
                    let bytes = rng.fill(400);
                    show(&bytes);
                }
            }
            _ => usage(),
        }
    }
}
