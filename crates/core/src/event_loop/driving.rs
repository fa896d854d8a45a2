//! The main loop of one run ([`LoopControl`]): load, start, then jobs,
//! tool calls and settles until the script ends or is stopped.

use super::*;

/// How the main loop ended.
#[derive(Debug)]
pub(super) enum End {
    Settled,
    Fault(EngineFault),
    /// Compiling the script failed (syntax, or nesting too deep).
    ParseFailed(EngineFault),
    /// The source is not one function body ([`Body::parse`]); no engine saw it.
    Refused(ScriptError),
    Timeout,
    Cancelled,
    Deadlock,
    /// Only calls waiting on answers from outside are left: the run may
    /// be put away ([`crate::durable`]).
    Suspended,
    /// The engine could not go on from the continuation's image.
    Unresumable(EngineFault),
}

pub(super) struct LoopControl<'a, E: Engine + ?Sized> {
    pub(super) engine: &'a mut E,
    pub(super) host: Rc<RefCell<HostState>>,
    pub(super) tx: mpsc::Sender<LoopEvent>,
    pub(super) tokio: &'a tokio::runtime::Handle,
    pub(super) deadline: Instant,
    pub(super) cancel: CancellationToken,
    /// Registered with the watchdog for the whole run.
    pub(super) watch: Option<crate::watchdog::Watch>,
    /// Set while the loop blocks on its event channel ([`CallSlot`]).
    pub(super) loop_waiting: Arc<std::sync::atomic::AtomicBool>,
}

impl<E: Engine + ?Sized> LoopControl<'_, E> {
    pub(super) fn drive(
        &mut self,
        setup: &EngineSetup<'_>,
        source: &str,
        rx: &mpsc::Receiver<LoopEvent>,
        resume: Option<&Resume>,
    ) -> End {
        let _driving = crate::spin::Counted::begin(&DRIVING);
        let begun = match resume {
            Some(r) => self.resume(setup, r),
            None => self.begin(setup, source),
        };
        if let Err(end) = begun {
            return end;
        }
        self.run_loop(rx)
    }

    /// A resumed run: the engine goes on from the image, and each call
    /// that waited gets its answer.
    fn resume(&mut self, setup: &EngineSetup<'_>, r: &Resume) -> Result<(), End> {
        if let Err(f) = self
            .engine
            .resume(setup, self.host.clone() as HostHandle, &r.image)
        {
            return Err(End::Unresumable(f));
        }
        self.arm_watchdog();
        let facade = self.host.borrow().facade.clone();
        for w in &r.header.host.waiting {
            let id = w.call.call_id;
            let denied = |reason: &Option<String>| {
                let msg = match reason {
                    Some(r) => format!("approval denied for {}: {r}", w.call.tool),
                    None => format!("approval denied for {}", w.call.tool),
                };
                Err(CallFailure::new(ErrorCode::ApprovalDeniedError, msg))
            };
            let outcome = match r.answers.get(&id) {
                Some(Answer::Approve) => {
                    facade.record_answer(w, crate::approval::ApprovalOutcome::Approved, None);
                    let token = self.host.borrow().tracker.token(id).unwrap_or_default();
                    let at = w.line.map(|line| Location { line, column: 0 });
                    let args = w.call.args.to_string();
                    let first = self.host.borrow_mut().start_admitted(
                        id,
                        &w.call.tool,
                        &args,
                        at,
                        token,
                        Admission::Approved,
                    );
                    if let Some(outcome) = first {
                        self.host.borrow_mut().finished.push((id, outcome));
                    }
                    continue;
                }
                Some(Answer::Deny { reason }) => {
                    let how = crate::approval::ApprovalOutcome::Denied;
                    facade.record_answer(w, how, reason.clone());
                    denied(reason)
                }
                Some(Answer::Result { value }) => Ok(value.to_string()),
                Some(Answer::Error { message }) => Err(CallFailure::new(
                    ErrorCode::ToolExecutionError,
                    format!("{} failed: {message}", w.call.tool),
                )),
                None => denied(&Some("no answer was given".to_owned())),
            };
            if let Err(f) = self.complete(id, outcome) {
                return Err(self.fault_end(f));
            }
        }
        Ok(())
    }

    /// The watchdog, for the whole run: at the deadline or a cancel it
    /// stops the engine and wakes the loop.
    fn arm_watchdog(&mut self) {
        let stopper = self.engine.stopper();
        let tx = self.tx.clone();
        let at_deadline = crate::pool::take_at_deadline();
        self.watch = Some(crate::watchdog::watch(
            self.deadline,
            self.cancel.clone(),
            move || {
                if let Some(stop) = stopper {
                    stop();
                }
                let _ = tx.send(LoopEvent::Stop);
                if let Some(f) = at_deadline {
                    f();
                }
            },
        ));
    }

    /// A new run: parse, load, start.
    fn begin(&mut self, setup: &EngineSetup<'_>, source: &str) -> Result<(), End> {
        // Nothing reaches an engine but a source parsed as one function
        // body: a source that would close its wrapper never runs.
        let parsed = if self.engine.in_session() {
            Body::parse_session(source)
        } else {
            Body::parse(source)
        };
        let body = match parsed {
            Ok(body) => body,
            Err(e) => return Err(End::Refused(e)),
        };
        if let Err(f) = self.engine.load(setup, self.host.clone() as HostHandle) {
            return Err(self.fault_end(f));
        }
        self.arm_watchdog();
        if let Err(f) = self.engine.start(&body) {
            // Script code runs inside the prelude's async wrapper, so a
            // stack overflow escaping `start` happened while parsing.
            return Err(if is_parse_failure(&f) {
                End::ParseFailed(f)
            } else {
                self.fault_end(f)
            });
        }
        Ok(())
    }

    /// Jobs, tool calls and settles until the script ends, is stopped,
    /// or waits only on answers from outside.
    fn run_loop(&mut self, rx: &mpsc::Receiver<LoopEvent>) -> End {
        loop {
            if let Err(f) = self.engine.run_jobs() {
                return self.fault_end(f);
            }
            let finished = self.finished_calls();
            if !finished.is_empty() {
                for (id, outcome) in finished {
                    if let Err(f) = self.complete(id, outcome) {
                        return self.fault_end(f);
                    }
                }
                // Calls a resume started, or made once the run was past
                // its deadline or cancelled (`HostState::answer`): a script
                // looping over them never waits below, so check here too.
                if self.cancel.is_cancelled() {
                    return End::Cancelled;
                }
                if Instant::now() >= self.deadline {
                    return End::Timeout;
                }
                // Their promises settled: let the script react first.
                continue;
            }
            let (settled, pending, waiting) = {
                let h = self.host.borrow();
                (
                    h.outcome.is_some(),
                    h.tracker.pending_count() + h.tasks_live,
                    h.waiting.len(),
                )
            };
            if settled {
                return End::Settled;
            }
            if waiting > 0 && pending == waiting {
                return End::Suspended;
            }
            if pending == 0 {
                return self.stalled();
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return End::Timeout;
            }
            self.loop_waiting
                .store(true, std::sync::atomic::Ordering::Release);
            let received = recv_spinning(rx, left);
            self.loop_waiting
                .store(false, std::sync::atomic::Ordering::Release);
            let first = match received {
                Ok(ev) => ev,
                Err(mpsc::RecvTimeoutError::Timeout) => return End::Timeout,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return End::Fault(EngineFault::new(
                        FaultKind::Internal,
                        "Error",
                        "event channel closed",
                    ))
                }
            };
            // Take everything that is ready before running jobs again.
            let mut next = Some(first);
            while let Some(ev) = next.take().or_else(|| rx.try_recv().ok()) {
                match ev {
                    LoopEvent::Stop => {
                        if self.cancel.is_cancelled() {
                            return End::Cancelled;
                        }
                        if Instant::now() >= self.deadline {
                            return End::Timeout;
                        }
                    }
                    LoopEvent::ToolDone(id, outcome) => {
                        if let Err(f) = self.complete(id, outcome) {
                            return self.fault_end(f);
                        }
                    }
                    LoopEvent::Poll(slot) => {
                        let outcome = {
                            let _rt = self.tokio.enter();
                            slot.poll_once()
                        };
                        if let Some(outcome) = outcome {
                            if let Err(f) = self.complete(slot.id, outcome) {
                                return self.fault_end(f);
                            }
                        }
                    }
                    LoopEvent::TaskDone(settle, outcome) => {
                        {
                            let mut h = self.host.borrow_mut();
                            h.tasks_live = h.tasks_live.saturating_sub(1);
                        }
                        if let Err(f) = self.settle(settle, &outcome) {
                            return self.fault_end(f);
                        }
                    }
                }
            }
        }
    }

    /// Nothing is pending and the script has not settled. Usually the
    /// script awaits a promise nothing can settle; but an engine may also
    /// swallow its own interrupt or out-of-memory error into an unobserved
    /// promise (quickjs-ng does, inside promise reaction jobs), so look at
    /// why the engine stopped first.
    pub(super) fn stalled(&mut self) -> End {
        if self.engine.memory_exhausted() {
            return End::Fault(EngineFault::new(
                FaultKind::OutOfMemory,
                "InternalError",
                "out of memory",
            ));
        }
        if self.cancel.is_cancelled() {
            return End::Cancelled;
        }
        if Instant::now() >= self.deadline {
            return End::Timeout;
        }
        End::Deadlock
    }

    pub(super) fn fault_end(&mut self, mut f: EngineFault) -> End {
        // Whatever the engine threw once its heap is exhausted (often a bare
        // value, or an interrupt the engine uses to stop the script) is an
        // out-of-memory.
        if matches!(
            f.kind,
            FaultKind::Interrupted | FaultKind::Thrown | FaultKind::Internal
        ) && self.engine.memory_exhausted()
        {
            f.kind = FaultKind::OutOfMemory;
        }
        if f.kind == FaultKind::Interrupted {
            if self.cancel.is_cancelled() {
                return End::Cancelled;
            }
            if Instant::now() >= self.deadline {
                return End::Timeout;
            }
        }
        End::Fault(f)
    }

    /// The calls that finished on their first poll since the last look
    /// but were not answered inside the op ([`HostState::answer`]).
    pub(super) fn finished_calls(&mut self) -> Vec<(u64, CallOutcome)> {
        std::mem::take(&mut self.host.borrow_mut().finished)
    }

    pub(super) fn settle(&mut self, id: u64, outcome: &CallOutcome) -> Result<(), EngineFault> {
        match outcome {
            Ok(json) => self.engine.settle(id, true, json),
            Err(f) => self.engine.settle(id, false, &f.payload()),
        }
    }

    /// Records a finished call and settles its promise in the engine.
    pub(super) fn complete(&mut self, id: u64, outcome: CallOutcome) -> Result<(), EngineFault> {
        if let Err(CallFailure {
            waiting: Some(w), ..
        }) = &outcome
        {
            // Not settled: it waits on an answer from outside.
            self.host.borrow_mut().waiting.push((**w).clone());
            return Ok(());
        }
        if !self.host.borrow_mut().record(id, &outcome) {
            return Ok(());
        }
        self.settle(id, &outcome)
    }

    /// Turns how the loop ended into the report's value and error.
    pub(super) fn conclude(
        &self,
        end: End,
        limits: &Limits,
        memory_exhausted: bool,
        source: &str,
    ) -> (Option<Value>, Option<ScriptError>) {
        match end {
            End::Timeout => (None, Some(timeout_error(limits))),
            End::Cancelled => (None, Some(cancelled_error())),
            End::Deadlock => (
                None,
                Some(ScriptError::new(
                    ErrorCode::ScriptRuntimeError,
                    Phase::Executing,
                    "the script is waiting on a promise that nothing can settle \
                     (no tool call is pending and there are no timers)",
                )),
            ),
            End::ParseFailed(f) => (None, Some(parse_error(&f, source))),
            End::Refused(e) => (None, Some(e)),
            // `run` reports it before it concludes.
            End::Unresumable(f) => (None, Some(ScriptError::internal(f.message))),
            End::Suspended => (
                None,
                Some(ScriptError::internal(
                    "the run suspended without a continuation",
                )),
            ),
            End::Fault(f) => (None, Some(fault_error(&f, limits))),
            End::Settled => {
                let outcome = self.host.borrow().outcome.clone();
                match outcome {
                    Some(Outcome::Done(None)) => (None, None),
                    Some(Outcome::Done(Some(json))) => parse_return(&json, limits),
                    Some(Outcome::Failed(desc)) => (
                        None,
                        Some(self.described_error(&desc, limits, memory_exhausted)),
                    ),
                    None => (
                        None,
                        Some(ScriptError::internal("script settled without an outcome")),
                    ),
                }
            }
        }
    }

    pub(super) fn described_error(
        &self,
        desc: &str,
        limits: &Limits,
        memory_exhausted: bool,
    ) -> ScriptError {
        let failure = Failure::parse(desc);
        let d = &failure.0;
        let s = |k: &str| failure.text(k).to_owned();
        let non_error = failure.flag("non_error");
        if memory_exhausted {
            return self.kind_error(
                FaultKind::OutOfMemory,
                "InternalError",
                "out of memory",
                limits,
            );
        }
        let stack = sanitize_stack(&s("stack"), WRAPPER_LINE_OFFSET);
        if let Some((error_name, error_message)) = failure.serialization_error() {
            match self.engine.classify(error_name, error_message) {
                FaultKind::Thrown | FaultKind::Syntax => {
                    return ScriptError::new(
                        ErrorCode::SerializationError,
                        Phase::Finalizing,
                        s("message"),
                    )
                }
                kind => return self.kind_error(kind, error_name, error_message, limits),
            }
        }
        if failure.flag("host") {
            if let Some(code) = ErrorCode::parse(&s("code")) {
                let mut e =
                    ScriptError::new(code, Phase::Executing, s("message")).with_stack(stack);
                if let Some(tool) = d.get("tool").and_then(Value::as_str) {
                    e = e.with_tool(tool, d.get("call_id").and_then(Value::as_u64));
                }
                e.stderr = d.get("stderr").and_then(Value::as_str).map(str::to_owned);
                return e;
            }
        }
        let (name, message) = failure.error();
        let (name, message) = (name.to_owned(), message.to_owned());
        let kind = match self.engine.classify(&name, &message) {
            // Only the host knows whether it stopped the run: a script's
            // own `throw new InternalError('interrupted')` is its error.
            FaultKind::Interrupted
                if !self.cancel.is_cancelled() && Instant::now() < self.deadline =>
            {
                FaultKind::Thrown
            }
            kind => kind,
        };
        match kind {
            FaultKind::Thrown | FaultKind::Syntax => {
                let message = if non_error {
                    message
                } else {
                    uncaught(&name, &message)
                };
                ScriptError::new(ErrorCode::ScriptRuntimeError, Phase::Executing, message)
                    .with_name(name)
                    .with_stack(stack)
            }
            kind => self
                .kind_error(kind, &name, &message, limits)
                .with_stack(stack),
        }
    }

    pub(super) fn kind_error(
        &self,
        kind: FaultKind,
        name: &str,
        message: &str,
        limits: &Limits,
    ) -> ScriptError {
        if kind == FaultKind::Interrupted {
            if self.cancel.is_cancelled() {
                return cancelled_error();
            }
            return timeout_error(limits);
        }
        fault_error(
            &EngineFault {
                kind,
                name: name.to_owned(),
                message: message.to_owned(),
                stack: None,
            },
            limits,
        )
    }
}
