//! One run's engine ([`V8Run`]): a context on the engine thread's
//! isolate, and the primitives the event loop drives.

use super::*;

/// The prelude's controller for one run, and the context it runs in.
pub(super) struct RunHandles {
    pub(super) start: v8::Global<v8::Function>,
    pub(super) settle: v8::Global<v8::Function>,
    pub(super) end: v8::Global<v8::Function>,
    pub(super) context: v8::Global<v8::Context>,
    /// The prelude's `install`, kept to hand the context on.
    pub(super) install: v8::Global<v8::Function>,
    pub(super) generation: u64,
    /// The context's [`Engine::context_id`].
    pub(super) id: u64,
    /// The context's probe cache ([`Warm::probe`]).
    pub(super) probe: Option<(String, v8::Global<v8::Value>)>,
}

/// One run's engine: a hardened context on the worker's isolate.
pub(super) struct V8Run<'w> {
    pub(super) worker: &'w mut V8Thread,
    pub(super) handles: Option<RunHandles>,
    /// Peak of heap in use plus ArrayBuffer bytes, sampled after each
    /// entry into V8.
    pub(super) peak: u64,
    /// The microtask queue is empty: the last entry into V8 was a
    /// checkpoint that ran to its end. V8 has no public call that says
    /// whether microtasks are queued, and a checkpoint runs until the
    /// queue is dry, so every other entry (install, start, settle) clears
    /// this and only a finished checkpoint sets it.
    pub(super) drained: bool,
    /// The run has a private realm, never reused ([`harness_core::Realm`]).
    pub(super) private: bool,
    /// The shared context a private realm's run did not use, handed back.
    pub(super) spare: Option<Warm>,
    /// What `end_run` checks after the run ([`Body::end_check`]).
    pub(super) end_check: EndCheck,
    /// The run is a session's: its realm (the thread's `warm`, none
    /// before the first run) is kept after it, with no end-of-run probe.
    pub(super) session: bool,
    /// `load` ran: a run refused before it leaves the realm as it was.
    pub(super) loaded: bool,
}

impl V8Run<'_> {
    /// Ends the installed run and takes its context back if it may serve
    /// another run: no microtask is queued and the prelude's `end` closed
    /// the run and found nothing of it pending. Any doubt (no run
    /// installed, `end` failing or terminated) drops it.
    pub(super) fn end_run(&mut self) -> Option<Warm> {
        let mut handles = self.handles.take()?;
        if !self.drained {
            return None;
        }
        let slot = self.worker.slot.as_mut()?;
        if slot.stop_fault().is_some() {
            return None;
        }
        let check = std::mem::replace(&mut self.end_check, EndCheck::Nothing);
        let clean = in_context!(&mut slot.isolate, &handles.context, |tc| {
            let end = v8::Local::new(tc, &handles.end);
            let recv: v8::Local<v8::Value> = v8::undefined(tc).into();
            // The probe is sloppy global code (harness_core::end_check).
            let (list, probed) = match (&check, &handles.probe) {
                (EndCheck::Nothing, _) => (None, true),
                (EndCheck::Probe(text), Some((cached, list))) if cached == text => {
                    (Some(v8::Local::new(tc, list)), true)
                }
                (EndCheck::Probe(text), _) => {
                    match compile_run!(tc, text.as_str(), "end-check.js") {
                        Ok(list) => {
                            handles.probe = Some((text.clone(), v8::Global::new(tc, list)));
                            (Some(list), true)
                        }
                        Err(_) => (None, false),
                    }
                }
                _ => (None, false),
            };
            let args: &[v8::Local<v8::Value>] = match &list {
                Some(list) => std::slice::from_ref(list),
                None => &[],
            };
            let ended = end.call(tc, recv, args).is_some_and(|v| v.is_true());
            probed && ended
        });
        (clean && !self.private).then_some(Warm {
            install: handles.install,
            context: handles.context,
            id: handles.id,
            probe: handles.probe,
        })
    }

    pub(super) fn slot(&mut self) -> Result<&mut IsolateSlot, EngineFault> {
        self.worker
            .slot
            .as_mut()
            .ok_or_else(|| internal("no isolate"))
    }

    /// The current run's handles and its isolate.
    pub(super) fn run_parts(&mut self) -> Result<(&RunHandles, &mut IsolateSlot), EngineFault> {
        let handles = self
            .handles
            .as_ref()
            .ok_or_else(|| internal("not loaded"))?;
        let slot = self
            .worker
            .slot
            .as_mut()
            .ok_or_else(|| internal("no isolate"))?;
        Ok((handles, slot))
    }

    /// After an entry into V8: a termination is the heap limit or the
    /// watchdog, whatever V8 reported; and the memory sample.
    pub(super) fn finish<R>(&mut self, r: Result<R, EngineFault>) -> Result<R, EngineFault> {
        let slot = self.slot()?;
        let stats = slot.isolate.get_heap_statistics();
        let heap_used = stats.used_heap_size() as u64;
        let used = heap_used + slot.buffers.used() as u64;
        // V8 lets the first object in its young large-object space through
        // whatever the heap limit (one flat string of 256 MiB under a
        // 96 MiB limit, without calling the near-heap-limit callback): a
        // heap found above its limit is out of memory all the same, and the
        // isolate is dropped with the run (a fault taints it).
        let stop = slot
            .stop_fault()
            .or_else(|| (heap_used > slot.key.heap_bytes).then(out_of_memory));
        self.peak = self.peak.max(used);
        match (r, stop) {
            (_, Some(f)) => Err(f),
            (Err(f), None) if self.classify(&f.name, &f.message) == FaultKind::OutOfMemory => {
                Err(out_of_memory())
            }
            (r, None) => r,
        }
    }
}

impl Engine for V8Run<'_> {
    fn load(&mut self, setup: &EngineSetup<'_>, host: HostHandle) -> Result<(), EngineFault> {
        debug_assert_eq!(setup.prelude, PRELUDE);
        self.loaded = true;
        let mut key = IsolateKey::of(setup.limits);
        let mut first_of_session = false;
        if let Some(s) = &mut self.worker.session {
            // One isolate for the session's life, sized for the session.
            key.heap_bytes = s.thread.spec.memory_bytes.max(MIN_HEAP_BYTES);
            first_of_session = s.key.is_none();
            key = *s.key.get_or_insert(key);
        }
        self.worker.slot_for(key);
        let mut pre = self.worker.warm.take();
        if self.session && !first_of_session && pre.is_none() {
            return Err(internal("the session's realm is gone"));
        }
        self.private = !self.session && setup.limits.private_realm();
        if self.private {
            self.spare = pre.take();
        }
        let private = self.private;
        let session = self.session;
        let spec = self.worker.session.as_ref().map(|s| s.thread.spec.clone());
        let slot = self.slot()?;
        let limit = match &spec {
            Some(spec) => {
                let used = slot.isolate.get_heap_statistics().used_heap_size() as u64;
                spec.run_limit(used, setup.limits.memory_bytes)
            }
            None => setup.limits.memory_bytes,
        };
        let generation = slot.arm(limit);
        if let Some(h) = slot.isolate.get_slot::<HostSlot>() {
            *h.0.borrow_mut() = Some(host);
        }
        let warm = match pre {
            Some(w) => w,
            None => {
                let r = new_realm(slot, private, session);
                self.finish(r)?
            }
        };
        if let (true, Some(spec)) = (first_of_session, &spec) {
            let slot = self.slot()?;
            spec.set_baseline_bytes(slot.isolate.get_heap_statistics().used_heap_size() as u64);
        }
        let slot = self.slot()?;
        let r = in_context!(&mut slot.isolate, &warm.context, |tc| (|| {
            let install = v8::Local::new(tc, &warm.install);
            let config = v8::String::new(tc, setup.config_json).ok_or_else(out_of_memory)?;
            let recv: v8::Local<v8::Value> = v8::undefined(tc).into();
            let controller = install
                .call(tc, recv, &[config.into()])
                .ok_or_else(|| caught_fault(tc))?;
            let start = function_prop(tc, controller, "start")
                .ok_or_else(|| internal("the prelude controller is incomplete"))?;
            let settle = function_prop(tc, controller, "settle")
                .ok_or_else(|| internal("the prelude controller is incomplete"))?;
            let end = function_prop(tc, controller, "end")
                .ok_or_else(|| internal("the prelude controller is incomplete"))?;
            Ok(RunHandles {
                start: v8::Global::new(tc, start),
                settle: v8::Global::new(tc, settle),
                end: v8::Global::new(tc, end),
                context: warm.context.clone(),
                install: warm.install.clone(),
                generation,
                id: warm.id,
                probe: warm.probe.clone(),
            })
        })());
        let handles = self.finish(r)?;
        self.handles = Some(handles);
        self.drained = false;
        Ok(())
    }

    fn start(&mut self, body: &Body) -> Result<(), EngineFault> {
        if !self.session {
            self.end_check = body.end_check();
        }
        let wrapped_source = body.wrapped();
        self.drained = false;
        let r = (|| {
            let (handles, slot) = self.run_parts()?;
            in_context!(&mut slot.isolate, &handles.context, |tc| {
                let source = strict_source(wrapped_source);
                let script_fn = compile_run!(tc, &source, harness_core::error::SCRIPT_FILE)?;
                let start = v8::Local::new(tc, &handles.start);
                let recv: v8::Local<v8::Value> = v8::undefined(tc).into();
                match start.call(tc, recv, &[script_fn]) {
                    Some(_) => Ok(()),
                    None => Err(caught_fault(tc)),
                }
            })
        })();
        self.finish(r)
    }

    fn run_jobs(&mut self) -> Result<(), EngineFault> {
        let r = (|| {
            let (handles, slot) = self.run_parts()?;
            in_context!(&mut slot.isolate, &handles.context, |tc| {
                tc.perform_microtask_checkpoint();
                if tc.has_terminated() {
                    Err(interrupted())
                } else {
                    Ok(())
                }
            })
        })();
        let r = self.finish(r);
        self.drained = r.is_ok();
        r
    }

    fn settle(&mut self, id: u64, ok: bool, payload: &str) -> Result<(), EngineFault> {
        self.drained = false;
        let r = (|| {
            let (handles, slot) = self.run_parts()?;
            in_context!(&mut slot.isolate, &handles.context, |tc| {
                let settle = v8::Local::new(tc, &handles.settle);
                let id = v8::Number::new(tc, id as f64);
                let ok = v8::Boolean::new(tc, ok);
                // Longer than V8's maximum string: out of memory, as the
                // script could not have held it either.
                let payload = v8::String::new(tc, payload).ok_or_else(out_of_memory)?;
                let recv: v8::Local<v8::Value> = v8::undefined(tc).into();
                match settle.call(tc, recv, &[id.into(), ok.into(), payload.into()]) {
                    Some(_) => Ok(()),
                    None => Err(caught_fault(tc)),
                }
            })
        })();
        self.finish(r)
    }

    fn context_id(&self) -> Option<u64> {
        self.handles.as_ref().map(|h| h.id)
    }

    fn memory_used(&mut self) -> Option<u64> {
        let buffers_peak = self.slot().map(|s| s.buffers.peak() as u64).unwrap_or(0);
        Some(self.peak.max(buffers_peak))
    }

    fn memory_exhausted(&mut self) -> bool {
        self.slot()
            .map(|s| s.heap.oom.load(Ordering::SeqCst) || s.buffers.refused())
            .unwrap_or(false)
    }

    /// Terminates the isolate from the watchdog thread.
    fn stopper(&self) -> Option<Box<dyn FnOnce() + Send>> {
        let slot = self.worker.slot.as_ref()?;
        let generation = self.handles.as_ref()?.generation;
        Some(stopper_for(slot, generation))
    }

    fn in_session(&self) -> bool {
        self.session
    }

    fn classify(&self, name: &str, message: &str) -> FaultKind {
        let refused = self
            .worker
            .slot
            .as_ref()
            .is_some_and(|s| s.buffers.refused());
        if refused && name == "RangeError" && message.contains("Array buffer allocation failed") {
            FaultKind::OutOfMemory
        } else {
            classify(name, message)
        }
    }
}
