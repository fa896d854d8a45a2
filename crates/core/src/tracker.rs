//! Promise tracking: every tool call is registered with its cancellation
//! token, so that nothing a script started outlives the run unnoticed.

use crate::error::ErrorCode;
use crate::facade::CallOutcome;
use crate::report::{CallError, CallStatus, ToolCallRecord};
use crate::sinks::ms;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Debug)]
struct Tracked {
    id: u64,
    tool: String,
    started: Instant,
    duration: Option<Duration>,
    status: CallStatus,
    error: Option<CallError>,
    cancel: CancellationToken,
    /// Drops a call still running on its own (see `event_loop::CallSlot`).
    task: Option<Abort>,
    /// Cancelled on purpose (a lost `Promise.race`), so not an orphan.
    released: bool,
}

/// Stops a pending call's future for good.
pub(crate) struct Abort(pub(crate) Box<dyn FnOnce() + Send>);

impl std::fmt::Debug for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Abort")
    }
}

/// All tool calls of one run.
#[derive(Debug, Default)]
pub(crate) struct PromiseTracker {
    calls: Vec<Tracked>,
}

impl PromiseTracker {
    fn get_mut(&mut self, id: u64) -> Option<&mut Tracked> {
        // ids are dense from 1, so the index is id - 1.
        let i = usize::try_from(id).ok()?.checked_sub(1)?;
        self.calls.get_mut(i).filter(|c| c.id == id)
    }

    /// Calls registered so far.
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }

    /// Registers a new pending call; returns its cancellation token.
    pub(crate) fn register(&mut self, tool: &str) -> (u64, CancellationToken) {
        let id = self.calls.len() as u64 + 1;
        let cancel = CancellationToken::new();
        self.calls.push(Tracked {
            id,
            tool: tool.to_owned(),
            started: Instant::now(),
            duration: None,
            status: CallStatus::Pending,
            error: None,
            cancel: cancel.clone(),
            task: None,
            released: false,
        });
        (id, cancel)
    }

    /// Records a call that failed before it could start (unknown tool).
    pub(crate) fn register_failed(&mut self, tool: &str, code: ErrorCode, message: String) -> u64 {
        let (id, _) = self.register(tool);
        let c = self.get_mut(id).expect("just registered");
        c.status = CallStatus::Error;
        c.duration = Some(Duration::ZERO);
        c.error = Some(CallError {
            code,
            message,
            stderr: None,
        });
        id
    }

    pub(crate) fn attach_task(&mut self, id: u64, task: Abort) {
        if let Some(c) = self.get_mut(id) {
            c.task = Some(task);
        }
    }

    /// Marks a call finished; returns false when it was no longer pending.
    pub(crate) fn complete(&mut self, id: u64, outcome: &CallOutcome) -> bool {
        let Some(c) = self.get_mut(id) else {
            return false;
        };
        if c.status != CallStatus::Pending {
            return false;
        }
        c.duration = Some(c.started.elapsed());
        c.task = None;
        match outcome {
            Ok(_) => c.status = CallStatus::Ok,
            Err(f) => {
                c.status = if f.code == ErrorCode::ScriptCancelledError {
                    CallStatus::Cancelled
                } else {
                    CallStatus::Error
                };
                c.error = Some(CallError {
                    code: f.code,
                    message: f.message.clone(),
                    stderr: f.stderr.clone(),
                });
            }
        }
        true
    }

    /// Cancels a call the script let go of on purpose (a lost race).
    pub(crate) fn release(&mut self, id: u64) {
        if let Some(c) = self.get_mut(id) {
            if c.status == CallStatus::Pending {
                c.released = true;
                c.cancel.cancel();
            }
        }
    }

    pub(crate) fn pending_count(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| c.status == CallStatus::Pending)
            .count()
    }

    /// Pending calls the script neither awaited nor released: `tool#id`.
    pub(crate) fn orphans(&self) -> Vec<String> {
        self.calls
            .iter()
            .filter(|c| c.status == CallStatus::Pending && !c.released)
            .map(|c| format!("{}#{}", c.tool, c.id))
            .collect()
    }

    /// Fires the cancellation token of every pending call.
    pub(crate) fn cancel_all_pending(&self) {
        for c in self
            .calls
            .iter()
            .filter(|c| c.status == CallStatus::Pending)
        {
            c.cancel.cancel();
        }
    }

    /// Abandons calls still running after the grace period: their tasks are
    /// aborted and they are reported as detached. Returns their ids.
    pub(crate) fn detach_remaining(&mut self) -> Vec<u64> {
        let mut detached = Vec::new();
        for c in self
            .calls
            .iter_mut()
            .filter(|c| c.status == CallStatus::Pending)
        {
            if let Some(Abort(abort)) = c.task.take() {
                abort();
            }
            c.status = CallStatus::Detached;
            c.duration = Some(c.started.elapsed());
            c.error = Some(CallError {
                code: ErrorCode::DetachedPromiseError,
                message: format!(
                    "{} did not stop within the grace period after cancellation and was abandoned",
                    c.tool
                ),
                stderr: None,
            });
            detached.push(c.id);
        }
        detached
    }

    /// A resumed run's calls as the suspended run left them: those that
    /// ended, as they ended; those still pending start their clock again.
    pub(crate) fn restore(records: &[ToolCallRecord]) -> Self {
        let calls = records
            .iter()
            .map(|r| Tracked {
                id: r.id,
                tool: r.tool.clone(),
                started: Instant::now(),
                duration: (r.status != CallStatus::Pending)
                    .then(|| Duration::from_secs_f64(r.duration_ms.max(0.0) / 1e3)),
                status: r.status,
                error: r.error.clone(),
                cancel: CancellationToken::new(),
                task: None,
                released: false,
            })
            .collect();
        PromiseTracker { calls }
    }

    /// The cancellation token of call `id`.
    pub(crate) fn token(&self, id: u64) -> Option<CancellationToken> {
        let i = usize::try_from(id).ok()?.checked_sub(1)?;
        self.calls
            .get(i)
            .filter(|c| c.id == id)
            .map(|c| c.cancel.clone())
    }

    pub(crate) fn records(&self) -> Vec<ToolCallRecord> {
        self.calls
            .iter()
            .map(|c| ToolCallRecord {
                id: c.id,
                tool: c.tool.clone(),
                status: c.status,
                duration_ms: ms(c.duration.unwrap_or_else(|| c.started.elapsed())),
                error: c.error.clone(),
            })
            .collect()
    }
}
