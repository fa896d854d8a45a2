//! Where a fresh Boa context's time goes: `cargo run --profile bench -p harness-boa --example harden_cost`.
fn main() {
    harness_boa::print_harden_cost(200);
}
