//! Smoke test of every fuzz target's oracle under plain `cargo test`: the
//! seeds, pseudo-random bytes, mutated seeds and generated scripts. It
//! proves the targets' code builds and holds on a few thousand inputs;
//! the fuzzing itself is `cargo +nightly fuzz run` (fuzz/README.md).
//!
//! This binary is also the worker for the process-isolated cases, so it
//! has its own `main` (libtest-mimic) that serves workers first.

use harness::{EngineKind, Isolation};
use harness_fuzzing::*;
use libtest_mimic::{Arguments, Failed, Trial};

/// Seeds, then `n` inputs: a third random bytes, a third mutated seeds, a
/// third generated scripts.
fn inputs(n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    let mut v: Vec<Vec<u8>> = SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
    for i in 0..n {
        v.push(match i % 3 {
            0 => rng.bytes(200),
            1 => {
                let seed = SEEDS[(rng.next_u64() as usize) % SEEDS.len()];
                rng.mutate(seed)
            }
            _ => {
                let raw = rng.bytes(400);
                grammar::program(&mut arbitrary::Unstructured::new(&raw)).into_bytes()
            }
        });
    }
    v
}

fn trial(name: &str, run: impl FnOnce() + Send + 'static) -> Trial {
    Trial::test(name, move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
            .map_err(|p| Failed::from(harness::core::error::panic_message(p.as_ref())))
    })
}

// Also this binary's own worker processes (the process boundary).
harness::main! {
    fn main() {
        let mut args = Arguments::from_args();
        // The oracles time runs against their deadlines (plus a margin): one
        // trial at a time keeps a 2-core machine from failing them by load.
        args.test_threads.get_or_insert(1);
        let mut trials = vec![
            trial("continuation", || {
                for input in inputs(2_000, 4) {
                    check_continuation(&input);
                }
            }),
            trial("detect", || {
                let mut rng = Rng(1);
                for input in inputs(2_000, 1) {
                    check_detect(&input);
                }
                // Responses with blocks in them, not just noise.
                for _ in 0..2_000 {
                    let mut s = String::new();
                    for _ in 0..rng.next_u64() % 8 {
                        s.push_str(
                            [
                                "text ",
                                "\n",
                                "<tool-calls>",
                                "</tool-calls>",
                                "<thinking>",
                                "</thinking>",
                                "```ts tool-calls\n",
                                "```\n",
                                "```js\n",
                                "return 1",
                                "`",
                                "é",
                            ][(rng.next_u64() % 12) as usize],
                        );
                    }
                    check_detect(s.as_bytes());
                }
            }),
            trial("prepare", || {
                for input in inputs(600, 2) {
                    check_prepare(&input);
                }
            }),
            trial("differential", || {
                let d = Differential::new();
                let mut rng = Rng(3);
                for _ in 0..300 {
                    d.check(&rng.bytes(600));
                }
            }),
            trial("cross_run", || {
                let c = CrossRun::new();
                // The oracle compares: a second script whose report cannot
                // repeat (a fresh random number) is caught.
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    c.check_pair("return 1", "return Math.random()")
                }));
                assert!(caught.is_err(), "the cross-run oracle compared nothing");
                c.check_pair("console.log('a'); return [1, {b: 2}]", "return await tools.echo({x: 1})");
                let mut rng = Rng(5);
                for _ in 0..60 {
                    c.check(&rng.bytes(1200));
                }
                // About half the pairs ran kept warm, with rehearsals
                // between their runs.
                assert!(c.rehearsals() > 0, "no pair ran on an engine kept warm");
            }),
        ];
        for engine in EngineKind::available() {
            for (isolation, n) in [(Isolation::InProcess, 150), (Isolation::Process, 45)] {
                // In-process engines that cannot stop a script are fuzzed
                // behind the process boundary only (docs/security.md).
                if isolation == Isolation::InProcess && engine.default_isolation() == Isolation::Process
                {
                    continue;
                }
                let name = format!("execute/{engine}/{isolation:?}").to_lowercase();
                trials.push(trial(&name, move || {
                    let e = Execute::new(engine, isolation);
                    for input in inputs(n, 4) {
                        let r =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.check(&input)));
                        if let Err(p) = r {
                            eprintln!("input: {:?}", String::from_utf8_lossy(&input));
                            std::panic::resume_unwind(p);
                        }
                    }
                }));
            }
        }
        libtest_mimic::run(&args, trials).exit();
    }
}
