//! [`RemoteEngine`]: an engine whose primitives run in a worker process,
//! driven by the same event loop as an engine in this process.

use super::*;

/// What the host remembers between `load` and `start`.
pub(super) struct Pending {
    pub(super) config: String,
    pub(super) limits: Limits,
    pub(super) timeout_ms: u64,
    pub(super) host: HostHandle,
}

/// An [`Engine`] whose primitives run in a worker process.
pub(crate) struct RemoteEngine {
    pub(super) proc: RefCell<Option<Proc>>,
    pub(super) run: Option<Pending>,
    pub(super) host: Option<HostHandle>,
    pub(super) settles: Vec<Settle>,
    /// The result of the jobs that ran right after `start`.
    pub(super) jobs_after_start: Option<Result<(), EngineFault>>,
    pub(super) memory_used: Option<u64>,
    pub(super) fuel_consumed: Option<u64>,
    pub(super) exhausted: bool,
    /// How the worker's engine classified the errors the script failed
    /// with, sent with its Steps: `classify` answers from these.
    pub(super) kinds: Vec<Classified>,
    /// The worker's context for this run ([`Engine::context_id`]), its
    /// pid in the high half.
    pub(super) context: Option<u64>,
    /// The worker died, broke the protocol or reported an internal fault.
    pub(super) broken: bool,
    /// The worker was sent this run's `Run` (a run the host refused before
    /// it reached the engine, a source over the limit, leaves the worker
    /// idle, with nothing to finish).
    pub(super) run_sent: bool,
    /// Finish went to the worker ([`Engine::finished`], when the run
    /// stopped needing it, or from `into_reusable` at the latest).
    pub(super) finish_sent: bool,
    /// The worker serves this session: its runs are parsed as a
    /// session's, and its `Kept` says what the realm holds.
    pub(super) session: Option<crate::session::SessionSpec>,
}

impl std::fmt::Debug for RemoteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEngine")
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl RemoteEngine {
    pub(super) fn new(proc: Proc) -> Self {
        RemoteEngine {
            proc: RefCell::new(Some(proc)),
            run: None,
            host: None,
            settles: Vec::new(),
            jobs_after_start: None,
            memory_used: None,
            fuel_consumed: None,
            exhausted: false,
            kinds: Vec::new(),
            context: None,
            broken: false,
            run_sent: false,
            finish_sent: false,
            session: None,
        }
    }

    /// Sends `msg` and answers host operations until the worker's Step.
    /// `msg` is made for the worker that will receive it.
    pub(super) fn exchange(
        &mut self,
        msg: impl FnOnce(&mut Proc) -> ToWorker,
    ) -> Result<StepPhase, (StepPhase, EngineFault)> {
        let host = self.host.clone();
        let mut slot = self.proc.borrow_mut();
        let Some(proc) = slot.as_mut() else {
            self.broken = true;
            return Err((
                StepPhase::Load,
                EngineFault::new(FaultKind::Internal, "Error", "no worker"),
            ));
        };
        let msg = msg(proc);
        let mut result = proc.send(&msg).and_then(|()| proc.recv_in_run());
        loop {
            match result {
                Ok(FromWorker::HostOp { op, a, b }) => {
                    let value = host
                        .as_ref()
                        .map(|h| h.call(&op, &a, &b))
                        .unwrap_or_default();
                    result = proc
                        .send(&ToWorker::Reply {
                            value,
                            spin: crate::process::may_spin(),
                        })
                        .and_then(|()| proc.recv_in_run());
                }
                Ok(FromWorker::Notice { op, a, b }) => {
                    // Its answer is always empty (checked where it is made).
                    if let Some(h) = &host {
                        h.call(&op, &a, &b);
                    }
                    result = proc.recv_in_run();
                }
                Ok(FromWorker::Step {
                    phase,
                    fault,
                    memory_used,
                    exhausted,
                    fuel_consumed,
                    kinds,
                    context,
                }) => {
                    self.kinds.extend(kinds);
                    // Ids count contexts within a worker: with its pid, unique on the host.
                    if let Some(c) = context {
                        self.context = Some(u64::from(proc.pid) << 32 | (c & 0xffff_ffff));
                    }
                    self.memory_used = memory_used.or(self.memory_used);
                    self.fuel_consumed = fuel_consumed.or(self.fuel_consumed);
                    self.exhausted |= exhausted;
                    return match fault {
                        None => Ok(phase),
                        Some(f) => {
                            self.broken |= f.kind == FaultKind::Internal;
                            Err((phase, f))
                        }
                    };
                }
                Ok(other) => {
                    self.broken = true;
                    (proc.killer())();
                    return Err((
                        StepPhase::Jobs,
                        EngineFault::new(
                            FaultKind::Internal,
                            "Error",
                            format!("the worker broke the protocol ({other:?})"),
                        ),
                    ));
                }
                Err(e) => {
                    self.broken = true;
                    // A bad frame comes from a live worker: kill it now.
                    let bad_frame = e.kind() == io::ErrorKind::InvalidData;
                    let grace = if bad_frame {
                        Duration::ZERO
                    } else {
                        Duration::from_secs(2)
                    };
                    let mut f = proc.death_fault(grace);
                    if f.kind == FaultKind::Internal && bad_frame {
                        f.message = format!("the worker sent a bad frame: {e}");
                    }
                    if f.kind == FaultKind::OutOfMemory {
                        self.exhausted = true;
                    }
                    return Err((StepPhase::Jobs, f));
                }
            }
        }
    }

    /// The worker, if it can take another run: the run is finished, and
    /// this waits until the worker has prepared its next context. A run
    /// sent meanwhile queues for this thread (`crate::pool`'s module
    /// docs): the wait is microseconds as a rule, and at most `limit`,
    /// after which the worker is killed and replaced.
    pub(super) fn into_reusable(mut self, limit: Duration) -> Option<Proc> {
        // Finish, if the run did not send it already (`Engine::finished`).
        self.finished();
        let mut proc = self.proc.get_mut().take()?;
        if self.broken || proc.killed.load(Ordering::SeqCst) {
            return None;
        }
        if !self.run_sent {
            // Idle as it was: it was sent no Finish, and owes no Ready.
            return Some(proc);
        }
        let _watch = crate::watchdog::watch(
            Instant::now() + limit,
            CancellationToken::new(),
            proc.killer(),
        );
        // Tidying up usually takes the worker microseconds.
        match proc.recv_in_run() {
            Ok(FromWorker::Ready) if self.session.is_none() => Some(proc),
            Ok(FromWorker::Kept { session_bytes }) => {
                let spec = self.session.as_ref()?;
                spec.set_retained_bytes(session_bytes);
                Some(proc)
            }
            _ => None,
        }
    }
}

impl Engine for RemoteEngine {
    fn load(&mut self, setup: &EngineSetup<'_>, host: HostHandle) -> Result<(), EngineFault> {
        // The worker's own deadline falls just after the host's: the host
        // decides that a run timed out (and kills the worker), so an
        // engine that stops itself must not stop before that.
        let timeout_ms = setup
            .deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64
            + 2;
        self.run = Some(Pending {
            config: setup.config_json.to_owned(),
            limits: setup.limits.clone(),
            timeout_ms,
            host: host.clone(),
        });
        self.host = Some(host);
        Ok(())
    }

    fn start(&mut self, body: &crate::body::Body) -> Result<(), EngineFault> {
        let Some(run) = self.run.take() else {
            return Err(EngineFault::new(FaultKind::Internal, "Error", "not loaded"));
        };
        self.host = Some(run.host);
        self.run_sent = true;
        let msg = |proc: &mut Proc| {
            proc.run_message(
                run.config,
                run.limits,
                run.timeout_ms,
                body.wrapped().to_owned(),
            )
        };
        match self.exchange(msg) {
            Ok(_) => {
                self.jobs_after_start = Some(Ok(()));
                Ok(())
            }
            // Jobs ran after a clean start: report their fault from run_jobs.
            Err((StepPhase::Jobs, f)) => {
                self.jobs_after_start = Some(Err(f));
                Ok(())
            }
            Err((StepPhase::Load, mut f)) => {
                // Only compiling the script is a parse failure.
                if matches!(f.kind, FaultKind::Syntax | FaultKind::StackOverflow) {
                    f.kind = FaultKind::Internal;
                }
                Err(f)
            }
            Err((StepPhase::Start, f)) => Err(f),
        }
    }

    fn run_jobs(&mut self) -> Result<(), EngineFault> {
        if let Some(r) = self.jobs_after_start.take() {
            if self.settles.is_empty() || r.is_err() {
                return r;
            }
        }
        if self.settles.is_empty() {
            return Ok(());
        }
        let settles = std::mem::take(&mut self.settles);
        self.exchange(|_| ToWorker::Drain {
            settles,
            spin: crate::process::may_spin(),
        })
        .map(|_| ())
        .map_err(|(_, f)| f)
    }

    fn settle(&mut self, id: u64, ok: bool, payload: &str) -> Result<(), EngineFault> {
        self.settles.push(Settle {
            id,
            ok,
            payload: payload.to_owned(),
        });
        Ok(())
    }

    fn memory_used(&mut self) -> Option<u64> {
        self.memory_used
    }

    fn in_session(&self) -> bool {
        self.session.is_some()
    }

    fn context_id(&self) -> Option<u64> {
        self.context
    }

    fn fuel_consumed(&mut self) -> Option<u64> {
        self.fuel_consumed
    }

    fn memory_exhausted(&mut self) -> bool {
        self.exhausted
    }

    /// Sends Finish now, not after the report: the worker tidies up and
    /// prepares its next context while the host builds the report and
    /// answers, and its Ready is usually waiting by the time the host looks
    /// for it (`into_reusable`), rather than last on the way to the next
    /// run back to back.
    fn finished(&mut self) {
        let mut slot = self.proc.borrow_mut();
        let Some(proc) = slot.as_mut() else { return };
        if self.broken || !self.run_sent || self.finish_sent || proc.killed.load(Ordering::SeqCst) {
            return;
        }
        match proc.send(&ToWorker::Finish) {
            Ok(()) => self.finish_sent = true,
            // The worker is gone: `into_reusable` replaces it.
            Err(_) => self.broken = true,
        }
    }

    /// Kills the worker: the hard stop at the deadline or on cancel.
    fn stopper(&self) -> Option<Box<dyn FnOnce() + Send>> {
        let proc = self.proc.borrow();
        proc.as_ref()
            .map(|p| Box::new(p.killer()) as Box<dyn FnOnce() + Send>)
    }

    /// As the worker's engine classified it with the Step that reported
    /// the failure, else asked (a round trip).
    fn classify(&self, name: &str, message: &str) -> FaultKind {
        if let Some(c) = self
            .kinds
            .iter()
            .find(|c| c.name == name && c.message == message)
        {
            return c.kind;
        }
        let mut slot = self.proc.borrow_mut();
        let Some(proc) = slot.as_mut() else {
            return FaultKind::Thrown;
        };
        let asked = proc
            .send(&ToWorker::Classify {
                name: name.to_owned(),
                message: message.to_owned(),
            })
            .and_then(|()| proc.recv());
        match asked {
            Ok(FromWorker::Kind { kind }) => kind,
            _ => FaultKind::Thrown,
        }
    }
}
