//! One run's engine ([`BoaRun`]): a hardened context, fresh or handed
//! on by the last run, and the primitives the event loop drives.

use super::*;

/// One run's engine: a hardened context, fresh or handed on by the last run.
pub(super) struct BoaRun {
    pub(super) ctx: Option<Context>,
    /// The loaded context's [`Engine::context_id`].
    pub(super) context: Option<u64>,
    /// The prelude's `install`, kept to hand the context on.
    pub(super) install: Option<JsObject>,
    pub(super) start_fn: Option<JsObject>,
    pub(super) settle_fn: Option<JsObject>,
    pub(super) end_fn: Option<JsObject>,
    /// A context hardened ahead of time, used by `load` if present.
    pub(super) pre: Option<Warm>,
    /// A private realm made ahead of time, used by a private run's `load`
    /// if present (and handed back by a shared run).
    pub(super) pre_private: Option<Warm>,
    /// A fault raised by the script itself during `start` (after it
    /// compiled), reported by the next `run_jobs` so that it is not taken
    /// for a parse failure.
    pub(super) deferred: Option<EngineFault>,
    /// The configuration `load` installed, kept for [`warm_up`].
    pub(super) config: Option<String>,
    /// The run has a private realm: its context is never reused, and the
    /// shared one in `pre` goes back unused.
    pub(super) private: bool,
    /// The run is a session's: its realm (`pre`, none before the first
    /// run) is kept after it, with no end-of-run probe.
    pub(super) session: bool,
    /// What `end_run` checks after the run ([`Body::end_check`]).
    pub(super) end_check: EndCheck,
    /// The loaded context's probe cache ([`Warm::probe`]).
    pub(super) probe: Option<(String, JsValue)>,
}

impl BoaRun {
    /// Ends the installed run and takes its context back if it may serve
    /// another run: the prelude's `end` found nothing of the run pending
    /// and no job is queued. Any doubt drops it.
    pub(super) fn end_run(&mut self) -> Option<Warm> {
        let mut ctx = self.ctx.take()?;
        ctx.insert_data(HostSlot(None));
        let (end, install) = (self.end_fn.take()?, self.install.take()?);
        let mut check = std::mem::replace(&mut self.end_check, EndCheck::Nothing);
        if self.private || self.session {
            // Never reused, or a session's (whose bindings are the point):
            // nothing to check but what `end` checks.
            check = EndCheck::Nothing;
        }
        let clean = guarded(|| {
            // The probe is sloppy global code (harness_core::end_check).
            let list = match &check {
                EndCheck::Probe(text) => match &self.probe {
                    Some((cached, list)) if cached == text => Some(Ok(list.clone())),
                    _ => {
                        ctx.strict(false);
                        let list = ctx.eval(Source::from_bytes(text.as_str()));
                        ctx.strict(true);
                        if let Ok(list) = &list {
                            self.probe = Some((text.clone(), list.clone()));
                        }
                        Some(list.map_err(|e| error_fault(&e, &mut ctx)))
                    }
                },
                _ => None,
            };
            let args = match &list {
                Some(Ok(list)) => std::slice::from_ref(list),
                _ => &[],
            };
            let ended = end
                .call(&JsValue::undefined(), args, &mut ctx)
                .map_err(|e| error_fault(&e, &mut ctx))?;
            let probed = match check {
                EndCheck::Nothing => true,
                EndCheck::Probe(_) => list.is_some_and(|l| l.is_ok()),
                _ => false,
            };
            Ok(probed && ended.as_boolean() == Some(true))
        })
        .unwrap_or(false);
        if self.private {
            return None;
        }
        let queued = ctx.get_data::<Jobs>().is_none_or(|j| j.0.queued.get());
        let id = self.context.take()?;
        let probe = self.probe.take();
        (clean && !queued).then_some(Warm {
            ctx,
            install,
            id,
            probe,
        })
    }

    pub(super) fn ctx(&mut self) -> Result<&mut Context, EngineFault> {
        self.ctx.as_mut().ok_or_else(|| internal("not loaded"))
    }

    pub(super) fn call(&mut self, f: &JsObject, args: &[JsValue]) -> Result<(), EngineFault> {
        let ctx = self.ctx()?;
        guarded(|| {
            f.call(&JsValue::undefined(), args, ctx)
                .map(|_| ())
                .map_err(|e| error_fault(&e, ctx))
        })
    }
}

impl Engine for BoaRun {
    fn load(&mut self, setup: &EngineSetup<'_>, host: HostHandle) -> Result<(), EngineFault> {
        debug_assert_eq!(setup.prelude, PRELUDE);
        self.private = !self.session && setup.limits.private_realm();
        let warm = if self.session {
            match self.pre.take() {
                Some(w) => w,
                None => harden_session()?,
            }
        } else if self.private {
            match self.pre_private.take() {
                Some(w) => w,
                None => harden_as(true)?,
            }
        } else {
            match self.pre.take() {
                Some(w) => w,
                None => harden()?,
            }
        };
        let Warm {
            mut ctx,
            install,
            id,
            probe,
        } = warm;
        self.context = Some(id);
        self.probe = probe;
        let limits = ctx.runtime_limits_mut();
        let stack = setup.limits.stack_bytes;
        limits.set_recursion_limit(((stack / BYTES_PER_FRAME) as usize).clamp(64, 100_000));
        limits.set_stack_size_limit(((stack / BYTES_PER_SLOT) as usize).clamp(1024, 1 << 22));
        // No loop limit: a loop count is no stand-in for the deadline,
        // which the process boundary enforces.
        limits.set_loop_iteration_limit(u64::MAX);
        ctx.insert_data(HostSlot(Some(host)));
        let config = JsValue::from(JsString::from(setup.config_json));
        let controller = guarded(|| {
            install
                .call(&JsValue::undefined(), &[config], &mut ctx)
                .map_err(|e| error_fault(&e, &mut ctx))
        })?;
        let get = |ctx: &mut Context, k: &str| -> Result<JsObject, EngineFault> {
            let obj = controller
                .as_object()
                .ok_or_else(|| internal("install did not return an object"))?;
            obj.get(JsString::from(k), ctx)
                .ok()
                .and_then(|v| v.as_callable())
                .ok_or_else(|| internal("the prelude controller is incomplete"))
        };
        self.start_fn = Some(get(&mut ctx, "start")?);
        self.settle_fn = Some(get(&mut ctx, "settle")?);
        self.end_fn = Some(get(&mut ctx, "end")?);
        self.ctx = Some(ctx);
        self.install = Some(install);
        self.config = Some(setup.config_json.to_owned());
        Ok(())
    }

    fn start(&mut self, body: &Body) -> Result<(), EngineFault> {
        self.end_check = body.end_check();
        let wrapped_source = body.wrapped();
        guard_nesting(wrapped_source)?;
        let start = self
            .start_fn
            .clone()
            .ok_or_else(|| internal("not loaded"))?;
        let ctx = self.ctx()?;
        let script_fn = guarded(|| {
            ctx.strict(true);
            let path = Path::new(harness_core::error::SCRIPT_FILE);
            let source = Source::from_bytes(wrapped_source).with_path(path);
            let script = Script::parse(source, None, ctx).map_err(|e| syntax_fault(&e, ctx))?;
            script.evaluate(ctx).map_err(|e| syntax_fault(&e, ctx))
        })?;
        if let Err(f) = self.call(&start, &[script_fn]) {
            self.deferred = Some(f);
        }
        Ok(())
    }

    fn run_jobs(&mut self) -> Result<(), EngineFault> {
        if let Some(f) = self.deferred.take() {
            return Err(f);
        }
        let ctx = self.ctx()?;
        guarded(|| ctx.run_jobs().map_err(|e| error_fault(&e, ctx)))
    }

    fn settle(&mut self, id: u64, ok: bool, payload: &str) -> Result<(), EngineFault> {
        let settle = self
            .settle_fn
            .clone()
            .ok_or_else(|| internal("not loaded"))?;
        let args = [
            JsValue::from(id as f64),
            JsValue::from(ok),
            JsValue::from(JsString::from(payload)),
        ];
        self.call(&settle, &args)
    }

    /// Boa does not count its heap; behind the process boundary the
    /// worker's allocator does.
    fn context_id(&self) -> Option<u64> {
        self.context
    }

    fn memory_used(&mut self) -> Option<u64> {
        None
    }

    fn in_session(&self) -> bool {
        self.session
    }

    fn classify(&self, name: &str, message: &str) -> FaultKind {
        classify(name, message)
    }
}
