//! Tool calls in flight: each in a [`CallSlot`] polled wherever its waker
//! finds room, and the events that wake the loop.

use super::*;

/// A tool call whose panic ends it as a tool failure: a call's in its
/// [`CallSlot`] (its first poll runs inside the script's `call` op), a
/// detached task's instead of leaving the task running and a script
/// awaiting its `done` waiting to its deadline.
pub(super) struct Unwound<F>(pub(super) std::pin::Pin<Box<F>>);

impl<F: Future<Output = CallOutcome>> Future for Unwound<F> {
    type Output = CallOutcome;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<CallOutcome> {
        let fut = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(p) => p,
            Err(_) => Poll::Ready(Err(CallFailure::new(
                ErrorCode::ToolExecutionError,
                "the tool panicked",
            ))),
        }
    }
}

/// What starting a tool call takes: where its outcome goes, and where it
/// is polled after its first poll ([`CallSlot`]).
#[derive(Debug, Clone)]
pub(super) struct Starter {
    pub(super) tx: mpsc::Sender<LoopEvent>,
    /// Set while the run's thread blocks on its event channel.
    pub(super) loop_waiting: Arc<std::sync::atomic::AtomicBool>,
    pub(super) tokio: tokio::runtime::Handle,
}

/// Events the engine thread waits on.
#[derive(Debug)]
pub(super) enum LoopEvent {
    ToolDone(u64, CallOutcome),
    /// A pending tool call was woken while the loop waited: poll it here.
    Poll(Arc<CallSlot>),
    /// A detached task ended: settle its `done` (if the script still runs).
    TaskDone(u64, CallOutcome),
    /// The watchdog saw the deadline pass or the cancel token fire.
    Stop,
}

pub(super) type CallFuture = std::pin::Pin<Box<dyn Future<Output = CallOutcome> + Send>>;

/// A tool call still pending after its first poll. Its waker hands the
/// next poll to the run's own thread when that thread is waiting for
/// events (one wake-up: the tool's answer reaches the loop directly), and
/// to a tokio worker otherwise, so that a call keeps going while the
/// script computes. Either side polls under the lock; an outcome polled on
/// tokio comes back as [`LoopEvent::ToolDone`].
pub(super) struct CallSlot {
    pub(super) id: u64,
    pub(super) fut: std::sync::Mutex<Option<CallFuture>>,
    /// The run's channel, its waiting flag and tokio.
    pub(super) to: Starter,
}

impl std::fmt::Debug for CallSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallSlot")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl CallSlot {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Option<CallFuture>> {
        self.fut
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Polls the call once (inside the tokio context the caller entered);
    /// its outcome once it has one, after which the slot is empty. A
    /// tool's panic is its outcome ([`Unwound`]).
    pub(super) fn poll_once(self: &Arc<Self>) -> Option<CallOutcome> {
        let mut fut = self.lock();
        let f = fut.as_mut()?;
        let waker = Waker::from(self.clone());
        let Poll::Ready(outcome) = f.as_mut().poll(&mut Context::from_waker(&waker)) else {
            return None;
        };
        let done = fut.take();
        drop(fut);
        drop(done);
        Some(outcome)
    }

    /// Drops the call's future: it will not be polled again.
    pub(super) fn abort(&self) {
        let f = self.lock().take();
        drop(f);
    }
}

impl std::task::Wake for CallSlot {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        // The loop clears the flag before it handles what it received, so
        // a Poll sent while it was set is always read; one spawned while it
        // is clear ends in a ToolDone the loop waits for.
        if self.to.loop_waiting.load(Ordering::Acquire) {
            let _ = self.to.tx.send(LoopEvent::Poll(self.clone()));
            return;
        }
        let armed = Unpolled(Some(self.clone()));
        self.to.tokio.spawn(async move {
            let mut armed = armed;
            let Some(slot) = armed.0.take() else { return };
            if let Some(outcome) = slot.poll_once() {
                let _ = slot.to.tx.send(LoopEvent::ToolDone(slot.id, outcome));
            }
        });
    }
}

/// Ends a call whose poll was spawned on tokio but dropped unrun (the
/// runtime is shutting down), so the loop never waits on a call that can
/// no longer finish.
pub(super) struct Unpolled(Option<Arc<CallSlot>>);

impl Drop for Unpolled {
    fn drop(&mut self) {
        let Some(slot) = self.0.take() else { return };
        let fut = slot.lock().take();
        if fut.is_some() {
            drop(fut);
            let failure =
                CallFailure::new(ErrorCode::ScriptCancelledError, "the tool call was aborted");
            let _ = slot.to.tx.send(LoopEvent::ToolDone(slot.id, Err(failure)));
        }
    }
}

/// How long a run's thread spins for the next event (a tool's answer)
/// before it blocks. Blocked, it is woken by whoever answers, and on a VM
/// whose idle CPUs halt that wake-up waits 30–40 µs for the CPU
/// (a JavaScript tool from Node); spinning keeps the
/// CPU awake for answers that come quickly.
pub(super) const LOOP_SPIN: Duration = Duration::from_micros(50);

/// Runs inside their main loop in this process.
pub(super) static DRIVING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The next event within `left`: spun for first, while every run in its
/// loop can have a CPU and another for whoever answers it
/// ([`crate::spin::allowed`], the process boundary's rule too); never
/// under load, where a spin takes the CPU another run needs.
pub(super) fn recv_spinning(
    rx: &mpsc::Receiver<LoopEvent>,
    left: Duration,
) -> Result<LoopEvent, mpsc::RecvTimeoutError> {
    let start = Instant::now();
    if crate::spin::allowed(&DRIVING) {
        let mut got = None;
        crate::spin::until(LOOP_SPIN.min(left), || match rx.try_recv() {
            Ok(ev) => {
                got = Some(Ok(ev));
                true
            }
            Err(mpsc::TryRecvError::Disconnected) => {
                got = Some(Err(mpsc::RecvTimeoutError::Disconnected));
                true
            }
            Err(mpsc::TryRecvError::Empty) => false,
        });
        if let Some(got) = got {
            return got;
        }
    }
    rx.recv_timeout(left.saturating_sub(start.elapsed()))
}
