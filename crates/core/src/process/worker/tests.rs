use super::*;

#[test]
fn a_worker_moves_only_after_a_streak_on_its_host_threads_cpu() {
    let mut a = Apart::default();
    let streak = |a: &mut Apart, n: u32| (0..n).map(|_| a.note(true)).collect::<Vec<_>>();
    // A short run on the host thread's CPU: no move.
    assert!(streak(&mut a, Apart::AFTER - 1).iter().all(|&m| !m));
    // The count is per run, and a message elsewhere breaks it.
    a.new_run();
    assert!(streak(&mut a, Apart::AFTER - 1).iter().all(|&m| !m));
    assert!(!a.note(false));
    assert!(streak(&mut a, Apart::AFTER - 1).iter().all(|&m| !m));
    // The streak's last message moves it, once; then it counts again.
    assert!(a.note(true));
    assert!(streak(&mut a, Apart::AFTER - 1).iter().all(|&m| !m));
    assert!(a.note(true));
}

#[test]
fn a_failure_gives_the_names_the_host_classifies() {
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        failure_names(r#"{"name":"RangeError","message":"x","stack":"s"}"#),
        vec![pair("RangeError", "x")]
    );
    assert_eq!(
        failure_names(
            r#"{"serialization":true,"name":"SerializationError","message":"m","error_name":"InternalError","error_message":"out of memory"}"#
        ),
        vec![
            pair("SerializationError", "m"),
            pair("InternalError", "out of memory")
        ]
    );
    // Not JSON: nothing to classify ahead (the host asks, as ever).
    assert!(failure_names("not json").is_empty());
}

#[test]
fn only_a_script_that_did_not_compile_leaves_the_engine_in_service() {
    let f = |kind| EngineFault::new(kind, "E", "m");
    // Did not compile: nothing ran.
    assert!(!taints(
        StepPhase::Start,
        Some(&f(FaultKind::Syntax)),
        false
    ));
    assert!(!taints(
        StepPhase::Start,
        Some(&f(FaultKind::StackOverflow)),
        false
    ));
    assert!(!taints(StepPhase::Jobs, None, false));
    // ... unless memory ran out, caught or not.
    assert!(taints(StepPhase::Start, Some(&f(FaultKind::Syntax)), true));
    assert!(taints(StepPhase::Jobs, None, true));
    // Any other fault, or a syntax error anywhere but compiling the script.
    for kind in FaultKind::ALL {
        assert!(taints(StepPhase::Load, Some(&f(kind)), false), "{kind:?}");
        assert!(taints(StepPhase::Jobs, Some(&f(kind)), false), "{kind:?}");
    }
    for kind in [
        FaultKind::Interrupted,
        FaultKind::OutOfFuel,
        FaultKind::OutOfMemory,
        FaultKind::Thrown,
        FaultKind::Internal,
    ] {
        assert!(taints(StepPhase::Start, Some(&f(kind)), false), "{kind:?}");
    }
}
