/// The oracles' leak count sees QuickJS's leak warning (target
/// `harness_quickjs`, as `RuntimeSlot::free` logs it) and nothing else,
/// and tells a leak the allocator gave back (`lost = 0`) from one it
/// did not (or a warning that does not say).
#[test]
fn a_quickjs_leak_warning_is_counted() {
    super::leaks::watch();
    let before = super::leaks::seen();
    let given_back = super::leaks::given_back();
    tracing::warn!(target: "harness_quickjs", bytes = 1, lost = 1u64, "a leak");
    tracing::warn!(target: "harness_quickjs", bytes = 1, "a leak, by an older build");
    tracing::warn!(target: "harness_quickjs", bytes = 1, lost = 0u64, "given back");
    tracing::warn!(target: "harness_core::event_loop", "not a leak");
    tracing::info!(target: "harness_quickjs", "not a warning");
    assert_eq!(super::leaks::seen(), before + 2);
    assert_eq!(super::leaks::given_back(), given_back + 1);
}
