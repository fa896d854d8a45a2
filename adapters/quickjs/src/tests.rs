use super::*;

/// What `RuntimeSlot::free` reports: nothing for a runtime whose
/// contexts were all dropped, the leaked bytes for one in which an
/// object outlived them (without aborting: `NDEBUG`). A forgotten
/// reference is what QuickJS's leaks on failed allocations leave: the
/// object, its prototype chain and the whole context stay alive. The
/// allocator gives those bytes back: nothing stays allocated.
#[test]
fn freeing_a_runtime_gives_back_what_quickjs_leaked() {
    let used = |leak: bool| {
        let slot = RuntimeSlot::new().unwrap();
        let alloc = slot.alloc.clone();
        let ctx = Context::full(&slot.rt).unwrap();
        ctx.with(|ctx| {
            let obj: Object = ctx
                .eval("({a: [1, 2, 3], s: 'x'.repeat(100), big: 'y'.repeat(100000)})")
                .unwrap();
            if leak {
                std::mem::forget(Persistent::save(&ctx, obj));
            }
        });
        drop(ctx);
        let left = slot.free();
        (left, alloc.used(), alloc.reclaimed())
    };
    assert_eq!(used(false), (0, 0, 0));
    let (left, used_after, reclaimed) = used(true);
    assert!(left > 100_000, "the context and the big string: {left}");
    assert_eq!(used_after, 0, "nothing stays allocated");
    assert_eq!(reclaimed, left);
}

/// A private realm (test262's unfrozen mode, a `Realm::Private` run)
/// leaves the intrinsics as they are and hardens the rest; it serves
/// one run, and its global object is sealed as ever. The hardening every
/// other run gets freezes them.
#[test]
fn a_private_realm_hardens_all_but_the_intrinsics_and_serves_one_run() {
    let slot = RuntimeSlot::new().unwrap();
    for unfrozen in [false, true] {
        let warm = harden_as(&slot.rt, unfrozen).unwrap();
        warm.ctx.with(|ctx| {
            let seen: String = ctx
                .eval(
                    "const r = [Object.isFrozen(Array.prototype), Object.isFrozen(Math)];\n\
                     try { eval('1'); r.push('eval ran'); } catch (e) { r.push(e.name); }\n\
                     r.join(' ')",
                )
                .unwrap();
            let frozen = !unfrozen;
            assert_eq!(seen, format!("{frozen} {frozen} BannedIdentifierError"));
            let install = warm.install.clone().restore(&ctx).unwrap();
            let config = r#"{"run":{"scriptId":"a"},"static":{"tools":[],"sited":[],"spawn":false,"lineOffset":0,"context":{"sandbox":{"timeoutMs":1,"memoryMb":1,"maxConcurrentToolCalls":1,"mode":"enabled"},"limits":{}}}}"#;
            let first = install.call::<_, Object>((config,));
            assert!(first.is_ok(), "{:?}", first.err().map(|_| exception_fault(ctx.catch())));
            let global_frozen: bool = ctx.eval("Object.isFrozen(globalThis)").unwrap();
            assert!(global_frozen, "install seals the global object in either");
            if unfrozen {
                let end: Function = first.unwrap().get("end").unwrap();
                let _: bool = end.call(()).unwrap();
                let second = install.call::<_, rquickjs::Value>((config,));
                assert!(matches!(second, Err(rquickjs::Error::Exception)));
                let e = exception_fault(ctx.catch());
                assert!(e.message.contains("serves one run"), "{e:?}");
            }
        });
        drop(warm);
    }
    assert_eq!(slot.free(), 0, "nothing leaked");
}

/// A context keeps its last script compiled: the same text run again is
/// not compiled again, yet each run's function is a new closure with its
/// own objects. Another text takes the place; a private realm's run
/// (`keep` false), a script with a template literal and one too long are
/// never kept.
#[test]
fn a_context_keeps_its_last_script_compiled_and_each_run_gets_a_fresh_function() {
    let slot = RuntimeSlot::new().unwrap();
    let warm = harden(&slot.rt).unwrap();
    warm.ctx.with(|ctx| {
        let mut cache: ProbeCache = None;
        let body = Body::parse("return 1 + 1").unwrap();
        let first = script_function(&ctx, &mut cache, &body, true).unwrap();
        assert_eq!(
            cache.as_ref().map(|(t, _)| t.as_str()),
            Some(body.wrapped())
        );
        let again = script_function(&ctx, &mut cache, &body, true).unwrap();
        assert!(
            first.as_value() != again.as_value(),
            "one closure for two runs"
        );
        first.set("planted", 1).unwrap();
        let seen: rquickjs::Value = again.get("planted").unwrap();
        assert!(
            seen.is_undefined(),
            "one run's function holds what another planted"
        );

        let other = Body::parse("return 2").unwrap();
        script_function(&ctx, &mut cache, &other, true).unwrap();
        assert_eq!(
            cache.as_ref().map(|(t, _)| t.as_str()),
            Some(other.wrapped())
        );

        for never in [
            Body::parse("return String.raw`a`").unwrap(),
            Body::parse(&format!("return '{}'", "x".repeat(KEPT_SCRIPT_BYTES))).unwrap(),
        ] {
            let mut cache: ProbeCache = None;
            script_function(&ctx, &mut cache, &never, true).unwrap();
            assert!(cache.is_none());
        }
        let mut cache: ProbeCache = None;
        script_function(&ctx, &mut cache, &body, false).unwrap();
        assert!(cache.is_none(), "kept for a run that keeps nothing");
    });
    drop(warm);
    assert_eq!(slot.free(), 0, "nothing leaked");
}
