use super::*;

#[test]
fn the_lean_prelude_is_the_prelude_without_comment_lines() {
    let lean = prelude_source();
    assert!(lean.len() < PRELUDE.len());
    assert!(!lean.lines().any(|l| l.starts_with("//")));
    // Still a working prelude, hardened on a thread with the stack
    // engine threads get (Boa's debug-build parser recurses deeply).
    let ok = std::thread::Builder::new()
        .stack_size(descriptor().thread_stack_bytes)
        .spawn(|| harden().is_ok())
        .unwrap()
        .join()
        .unwrap();
    assert!(ok);
}

#[test]
fn an_idle_thread_collects_and_warms_its_context_up_again() {
    let on_big_stack = || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut thread = BoaThread::default();
        let run = |thread: &mut BoaThread, source: &str| {
            let mut report = None;
            thread.lend(&mut |engine| {
                let request = harness_core::ExecutionRequest::new(source);
                harness_core::event_loop::run_lent(engine, "boa", request, rt.handle(), |r| {
                    report = Some(r);
                })
            });
            report.expect("a report")
        };
        for _ in 0..IDLE_GC_RUNS {
            assert_eq!(run(&mut thread, "return 1 + 1").value, Some(2.into()));
        }
        assert_eq!(thread.since_gc, IDLE_GC_RUNS);
        // The warm-up itself ends clean, so the context is handed on.
        let config = thread.last_config.clone().expect("a config");
        let mut engine = thread.engine();
        thread.warm = Some(warm_up(&mut engine, &config).expect("warmed up"));
        thread.idle();
        assert_eq!(thread.since_gc, 0);
        assert!(thread.warm.is_some() && thread.last_config.is_none());
        // The next run sees itself, not the warm-up.
        let r = run(&mut thread, "return context.scriptId");
        assert_eq!(r.value, Some(r.script_id.clone().into()));
        assert_eq!(thread.since_gc, 1);
    };
    std::thread::Builder::new()
        .stack_size(descriptor().thread_stack_bytes)
        .spawn(on_big_stack)
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn parser_positions_are_read() {
    assert_eq!(
        parse_position("expected token ';', got 'x' at line 3, col 14"),
        Some((3, 14))
    );
    assert_eq!(parse_position("no position"), None);
}
