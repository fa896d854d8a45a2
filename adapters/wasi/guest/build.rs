//! Link options for the guest: the `harness_*` primitives are exported
//! from the command module, and the shadow stack (where QuickJS keeps its
//! frames) is large enough for the stack limits the host sets.

const EXPORTS: &[&str] = &[
    "harness_input",
    "harness_init",
    "wizer_initialize",
    "wizer_initialize_program",
    "harness_load",
    "harness_start",
    "harness_run_jobs",
    "harness_settle",
    "harness_end",
    "harness_heap_peak",
    "harness_memory_refused",
    "harness_check",
];

/// Shadow stack size; the host keeps QuickJS's stack limit below it.
const STACK_BYTES: usize = 4 * 1024 * 1024;

fn main() {
    for name in EXPORTS {
        println!("cargo:rustc-link-arg-bins=--export={name}");
    }
    println!("cargo:rustc-link-arg-bins=-zstack-size={STACK_BYTES}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../../../crates/abi/src/prelude.js");
}
