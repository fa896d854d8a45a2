//! One run's engine ([`QjsRun`]): a fresh context on the engine
//! thread's runtime, and the primitives the event loop drives.

use super::*;

/// One run's engine: a fresh context on the worker's runtime.
pub(super) struct QjsRun<'w> {
    // Field order is drop order: JS handles before the context, the context
    // before the runtime it lives in.
    pub(super) start_fn: Option<Persistent<Function<'static>>>,
    pub(super) settle_fn: Option<Persistent<Function<'static>>>,
    pub(super) end_fn: Option<Persistent<Function<'static>>>,
    pub(super) ctx: Option<Warm>,
    /// A context hardened ahead of time, used by `load` if present (not
    /// by a private realm's run, which hands it back).
    pub(super) pre: Option<Warm>,
    /// A private realm made ahead of time, used by `load` for a private
    /// run if present (handed back otherwise).
    pub(super) pre_private: Option<Warm>,
    /// The heap bytes `pre_private` holds.
    pub(super) pre_private_bytes: usize,
    /// The run has a private realm: its context is never reused.
    pub(super) private: bool,
    /// The run is a session's: its realm (`pre`, none before the first
    /// run) is kept after it, bounded by the spec.
    pub(super) session: Option<SessionSpec>,
    /// A fault of the script's first steps, for `run_jobs` to report.
    pub(super) deferred: Option<EngineFault>,
    /// What `end_run` checks after the run ([`Body::end_check`]).
    pub(super) end_check: EndCheck,
    pub(super) slot: &'w RuntimeSlot,
}

/// The prelude's per-run controller: `start`, `settle`, `end`.
pub(super) type Controller<'js> = (Function<'js>, Function<'js>, Function<'js>);

pub(super) fn internal(msg: &str) -> EngineFault {
    EngineFault::new(FaultKind::Internal, "Error", msg)
}

/// Maps QuickJS's own error messages to fault kinds (shared with the WASI
/// engine and its guest, which run the same QuickJS).
pub use harness_abi::classify_quickjs as classify;

impl QjsRun<'_> {
    /// Ends the installed run and takes its context back if it may serve
    /// another run: the prelude's `end` closed the run and found nothing
    /// of it pending. Any doubt (no run installed, `end` failing) drops it.
    pub(super) fn end_run(&mut self) -> Option<Warm> {
        self.start_fn = None;
        self.settle_fn = None;
        let end = self.end_fn.take();
        let mut warm = self.ctx.take()?;
        // The run's host handle goes whatever happens next.
        warm.host.borrow_mut().take();
        let end = end?;
        if self.session.is_some() {
            // A session's realm is kept when the run left nothing pending.
            let clean = warm.ctx.with(|ctx| {
                end.restore(&ctx)
                    .and_then(|f| f.call::<_, bool>(()))
                    .unwrap_or(false)
            });
            return clean.then_some(warm);
        }
        if self.private {
            // Still ended, so that nothing of the run is left pending.
            let _ = warm
                .ctx
                .with(|ctx| end.restore(&ctx).and_then(|f| f.call::<_, bool>(())));
            return None;
        }
        let Warm {
            ctx: context,
            probe: cache,
            ..
        } = &mut warm;
        let clean = context.with(|ctx| {
            let Ok(end) = end.restore(&ctx) else {
                return false;
            };
            match &self.end_check {
                EndCheck::Nothing => end_run(&ctx, &end, None),
                EndCheck::Probe(text) => {
                    let list = cached_probe(&ctx, cache, text);
                    end_run(&ctx, &end, Some(list))
                }
                _ => {
                    end_run(&ctx, &end, None);
                    false
                }
            }
        });
        clean.then_some(warm)
    }

    /// Turns an rquickjs error into a fault, reading the pending exception.
    pub(super) fn fault(&self, ctx: &Ctx<'_>, err: rquickjs::Error) -> EngineFault {
        match err {
            rquickjs::Error::Exception => exception_fault(ctx.catch()),
            rquickjs::Error::Allocation => {
                EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory")
            }
            other => internal(&other.to_string()),
        }
    }

    /// Classifies an engine error. While the allocator is halted (deadline
    /// or cancel) allocations fail, and QuickJS reports that as out of
    /// memory or, when it cannot even build that message, as
    /// `InternalError: Invalid error message`: both are the stop at work.
    pub(super) fn kind_of(&self, name: &str, message: &str) -> FaultKind {
        let kind = classify(name, message);
        // Past a refusal the interrupt handler stops the script with
        // `interrupted`: that stop is the memory limit at work.
        if self.memory_refused() && matches!(kind, FaultKind::Interrupted | FaultKind::OutOfMemory)
        {
            return FaultKind::OutOfMemory;
        }
        let halted = self.slot.alloc.halted() && !self.slot.alloc.refused();
        if halted && (kind == FaultKind::OutOfMemory || name == "InternalError") {
            FaultKind::Interrupted
        } else {
            kind
        }
    }

    /// Whether the allocator refused an allocation during this run.
    pub(super) fn memory_refused(&self) -> bool {
        self.slot.alloc.refused()
    }

    /// Runs `f` in the context. The runtime is locked meanwhile, so faults
    /// are finished (memory check) only after leaving it.
    pub(super) fn with<R>(
        &self,
        f: impl FnOnce(&Ctx<'_>) -> Result<R, EngineFault>,
    ) -> Result<R, EngineFault> {
        let warm = self.ctx.as_ref().ok_or_else(|| internal("no context"))?;
        warm.ctx
            .with(|ctx| f(&ctx))
            .map_err(|f| self.finish_fault(f))
    }

    /// QuickJS throws a bare value (not an error object) only when it could
    /// not allocate one: near the memory limit that is an out-of-memory.
    pub(super) fn finish_fault(&self, mut f: EngineFault) -> EngineFault {
        if f.kind == FaultKind::Thrown && f.name.is_empty() {
            if self.memory_refused() {
                f = EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory");
            } else if self.slot.alloc.halted() {
                f = EngineFault::new(FaultKind::Interrupted, "InternalError", "interrupted");
            }
        }
        if matches!(
            f.kind,
            FaultKind::OutOfMemory | FaultKind::Thrown | FaultKind::Interrupted
        ) {
            f.kind = self.kind_of(&f.name, &f.message);
        }
        f
    }
}

/// Reads the pending exception. A non-object is reported with an empty
/// name, for [`QjsRun::finish_fault`] to judge.
pub(super) fn exception_fault(v: Value<'_>) -> EngineFault {
    let e = read_exception(v);
    let mut f = EngineFault::new(e.kind, e.name, e.message);
    f.stack = e.stack;
    f
}

impl QjsRun<'_> {
    /// A session's run: its realm, made by the first run; the run's
    /// memory limit is what the realm holds plus the run's own limit, at
    /// most the session's.
    fn load_session(
        &mut self,
        setup: &EngineSetup<'_>,
        host: HostHandle,
        spec: SessionSpec,
    ) -> Result<(), EngineFault> {
        let warm = match self.pre.take() {
            Some(w) => w,
            None => {
                let w = harden_session(&self.slot.rt).map_err(|f| self.finish_fault(f))?;
                spec.set_baseline_bytes(self.slot.alloc.used() as u64);
                w
            }
        };
        let used = self.slot.alloc.used() as u64;
        let limit = spec.run_limit(used, setup.limits.memory_bytes);
        self.slot
            .alloc
            .arm(usize::try_from(limit).unwrap_or(usize::MAX));
        let stack = setup
            .limits
            .stack_bytes
            .min(THREAD_STACK_BYTES as u64 - STACK_MARGIN_BYTES);
        self.slot.rt.set_max_stack_size(stack as usize);
        self.install(setup, host, warm)
    }

    /// Installs the run in `warm` and keeps the prelude's controller.
    fn install(
        &mut self,
        setup: &EngineSetup<'_>,
        host: HostHandle,
        warm: Warm,
    ) -> Result<(), EngineFault> {
        *warm.host.borrow_mut() = Some(host);
        // Kept even if the install fails, so that it is dropped in order.
        self.ctx = Some(warm);
        let warm = self.ctx.as_ref().ok_or_else(|| internal("no context"))?;
        // The context keeps the tools and context its last install made
        // from the same static part: then only the run's part crosses.
        let split = harness_abi::run_config::split_static(setup.config_json);
        let kept = match split {
            Some((head, static_json))
                if !warm.installed_static.is_empty() && warm.installed_static == static_json =>
            {
                Some(head)
            }
            _ => None,
        };
        let installed = warm
            .ctx
            .with(|ctx| {
                let run = || -> rquickjs::Result<Controller<'_>> {
                    let install = warm.install.clone().restore(&ctx)?;
                    let controller: Object = match kept {
                        Some(head) => install.call((head, true))?,
                        None => install.call((setup.config_json,))?,
                    };
                    Ok((
                        controller.get("start")?,
                        controller.get("settle")?,
                        controller.get("end")?,
                    ))
                };
                match run() {
                    Ok((s, t, e)) => Ok((
                        Persistent::save(&ctx, s),
                        Persistent::save(&ctx, t),
                        Persistent::save(&ctx, e),
                    )),
                    Err(e) => Err(self.fault(&ctx, e)),
                }
            })
            .map_err(|f| self.finish_fault(f));
        if let Some(warm) = self.ctx.as_mut() {
            match (&installed, kept, split) {
                (Ok(_), Some(_), _) => {}
                (Ok(_), None, Some((_, static_json))) => {
                    warm.installed_static.clear();
                    warm.installed_static.push_str(static_json);
                }
                _ => warm.installed_static.clear(),
            }
        }
        let (start, settle, end) = installed?;
        self.start_fn = Some(start);
        self.settle_fn = Some(settle);
        self.end_fn = Some(end);
        Ok(())
    }
}

impl Engine for QjsRun<'_> {
    fn load(&mut self, setup: &EngineSetup<'_>, host: HostHandle) -> Result<(), EngineFault> {
        {
            let mut i = self
                .slot
                .interrupt
                .lock()
                .map_err(|_| internal("interrupt state poisoned"))?;
            i.deadline = Some(setup.deadline);
            i.cancel = Some(setup.cancel.clone());
        }
        let rt = &self.slot.rt;
        // `setup.prelude` is the same core PRELUDE the bytecode was built from.
        debug_assert_eq!(setup.prelude, PRELUDE);
        // A context hardened now, when none was hardened ahead of time,
        // is hardened as it would have been then: without the run's limit.
        // The engine's own set-up is not the script's memory, a run must
        // not fail or pass depending on whether the worker had time to
        // prepare a context after the run before it, and QuickJS leaks
        // when hardening runs out of memory at certain points (it
        // realises lazy built-ins whose initialisation drops its
        // arguments on failure: `js_bytecode_eval`).
        self.slot.alloc.disarm();
        if let Some(spec) = &self.session {
            return self.load_session(setup, host, spec.clone());
        }
        self.private = setup.limits.private_realm();
        let warm = if self.private {
            match self.pre_private.take() {
                Some(w) => w,
                None => harden_as(rt, true).map_err(|f| self.finish_fault(f))?,
            }
        } else {
            match self.pre.take() {
                Some(w) => w,
                None => harden(rt).map_err(|f| self.finish_fault(f))?,
            }
        };
        let mut limit = usize::try_from(setup.limits.memory_bytes).unwrap_or(usize::MAX);
        if self.pre_private.is_some() {
            // Kept for a later run, not this one's memory.
            limit = limit.saturating_add(self.pre_private_bytes);
        }
        // The counting allocator enforces `limit`. QuickJS's own malloc
        // limit stays unset: it checks before calling the allocator, so a
        // huge request refused there would leave no trace of the OOM.
        self.slot.alloc.arm(limit);
        let stack = setup
            .limits
            .stack_bytes
            .min(THREAD_STACK_BYTES as u64 - STACK_MARGIN_BYTES);
        rt.set_max_stack_size(stack as usize);
        self.install(setup, host, warm)
    }

    fn start(&mut self, body: &Body) -> Result<(), EngineFault> {
        self.end_check = body.end_check();
        let start = self
            .start_fn
            .clone()
            .ok_or_else(|| internal("not loaded"))?;
        // A private realm is dropped after its run: nothing to keep.
        let keep = !self.private;
        let mut cache = self.ctx.as_mut().and_then(|w| w.script.take());
        let started = self.with(|ctx| {
            let script = script_function(ctx, &mut cache, body, keep);
            let script: Function = match script {
                Ok(f) => f,
                Err(e) => {
                    let mut f = self.fault(ctx, e);
                    if f.kind == FaultKind::Thrown && f.name == "SyntaxError" {
                        f.kind = FaultKind::Syntax;
                    }
                    return Err(f);
                }
            };
            let start = start.restore(ctx).map_err(|e| self.fault(ctx, e))?;
            Ok(start
                .call::<_, ()>((script,))
                .err()
                .map(|e| self.fault(ctx, e)))
        });
        if let Some(w) = self.ctx.as_mut() {
            w.script = cache;
        }
        // The script's own first steps failed (a stack overflow in its
        // synchronous part that the prelude could not catch): a fault of
        // the run, reported by `run_jobs`, never taken for one of compiling.
        started.map(|deferred| self.deferred = deferred)
    }

    fn run_jobs(&mut self) -> Result<(), EngineFault> {
        if let Some(f) = self.deferred.take() {
            return Err(self.finish_fault(f));
        }
        let mut n: u32 = 0;
        loop {
            match self.slot.rt.execute_pending_job() {
                Ok(true) => {
                    n = n.wrapping_add(1);
                    // A flood of tiny jobs may never reach the interrupt
                    // counter; check the deadline ourselves now and then.
                    if n.is_multiple_of(1024) {
                        let stop = self
                            .slot
                            .interrupt
                            .lock()
                            .map(|s| s.should_stop())
                            .unwrap_or(true);
                        if stop {
                            return Err(EngineFault::new(
                                FaultKind::Interrupted,
                                "InternalError",
                                "interrupted",
                            ));
                        }
                    }
                }
                Ok(false) => return Ok(()),
                Err(job) => {
                    let f = job.0.with(|ctx| exception_fault(ctx.catch()));
                    return Err(self.finish_fault(f));
                }
            }
        }
    }

    fn settle(&mut self, id: u64, ok: bool, payload: &str) -> Result<(), EngineFault> {
        let settle = self
            .settle_fn
            .clone()
            .ok_or_else(|| internal("not loaded"))?;
        self.with(|ctx| {
            let f = settle.restore(ctx).map_err(|e| self.fault(ctx, e))?;
            f.call::<_, ()>((id as f64, ok, payload))
                .map_err(|e| self.fault(ctx, e))
        })
    }

    /// Peak heap during the run, as the allocator saw it.
    fn context_id(&self) -> Option<u64> {
        self.ctx.as_ref().map(|w| w.id)
    }

    fn memory_used(&mut self) -> Option<u64> {
        Some(self.slot.alloc.peak() as u64)
    }

    fn memory_exhausted(&mut self) -> bool {
        self.memory_refused()
    }

    /// Halts the allocator: heavy native work then fails at once and the
    /// next interrupt check stops the script.
    fn stopper(&self) -> Option<Box<dyn FnOnce() + Send>> {
        let alloc = self.slot.alloc.clone();
        let generation = alloc.generation();
        Some(Box::new(move || alloc.halt(generation)))
    }

    fn in_session(&self) -> bool {
        self.session.is_some()
    }

    /// A session's heap as the run left it, garbage included, until the
    /// collection after the run says better.
    fn finished(&mut self) {
        if let Some(spec) = &self.session {
            spec.set_retained_bytes(self.slot.alloc.used() as u64);
        }
    }

    fn classify(&self, name: &str, message: &str) -> FaultKind {
        self.kind_of(name, message)
    }
}
