//! One process-wide watchdog thread that fires a callback when a run passes
//! its deadline or its cancel token fires.
//!
//! Engines stop scripts cooperatively (interrupt handlers), but some work
//! only notices a stop late (QuickJS checks every 10,000 ticks, and long
//! native calls tick rarely); the callback lets an engine act at once, e.g.
//! halt its allocator. Registering a run costs a mutex and a push; the
//! thread is woken only when the new deadline comes before its next planned
//! wake-up, so the common case (a deadline seconds away) wakes nothing:
//! cheaper than a timer task per run, and on a small VM a thread wake-up is
//! what costs. While runs are registered the thread wakes at least every
//! 10 ms (`POLL`) to notice cancellations; idle, it backs off to 1 s (`IDLE_MAX`), so
//! a cancel is noticed within that (interrupt checks usually notice first).
//!
//! Public for adapters with a deadline of their own outside a run (the
//! WASI workspace sandbox's `execute`): one registration instead of a
//! timer thread per call.

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Longest time between two checks of the registered cancel tokens.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// Longest sleep while no run is registered.
pub(crate) const IDLE_MAX: Duration = Duration::from_secs(1);

type Callback = Box<dyn FnOnce() + Send>;

struct Entry {
    id: u64,
    deadline: Instant,
    cancel: CancellationToken,
    on_stop: Option<Callback>,
}

struct State {
    next_id: u64,
    entries: Vec<Entry>,
    /// When the thread plans to wake next.
    wake_at: Instant,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// Whether the watchdog thread was started.
static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn shared() -> &'static Arc<Shared> {
    static SHARED: OnceLock<Arc<Shared>> = OnceLock::new();
    SHARED.get_or_init(|| {
        Arc::new(Shared {
            state: Mutex::new(State {
                next_id: 0,
                entries: Vec::new(),
                wake_at: Instant::now(),
            }),
            wake: Condvar::new(),
        })
    })
}

/// Starts the thread, once ([`watch`] asks before it registers; a guard
/// dropped does not start it). A start that fails (the process is out of
/// threads) is tried again by the next registration instead of leaving
/// the process without a watchdog for good; meanwhile deadlines are still
/// enforced by the engines' interrupt checks and the event loop's own
/// timeouts (the WASI sandbox, which has neither, fails to start its own
/// thread in the same condition).
fn start(shared: &Arc<Shared>) {
    static STARTING: Mutex<()> = Mutex::new(());
    let Ok(_one) = STARTING.lock() else { return };
    if STARTED.load(std::sync::atomic::Ordering::Acquire) {
        return;
    }
    let s = shared.clone();
    let started = std::thread::Builder::new()
        .name("harness-watchdog".into())
        .spawn(move || run(&s))
        .is_ok();
    STARTED.store(started, std::sync::atomic::Ordering::Release);
}

fn run(shared: &Shared) {
    let Ok(mut state) = shared.state.lock() else {
        return;
    };
    let mut idle = POLL;
    loop {
        if state.entries.is_empty() {
            idle = (idle * 2).min(IDLE_MAX);
            state.wake_at = Instant::now() + idle;
            state = match shared.wake.wait_timeout(state, idle) {
                Ok((s, _)) => s,
                Err(_) => return,
            };
            continue;
        }
        idle = POLL;
        let now = Instant::now();
        let mut due: Vec<Callback> = Vec::new();
        for e in state.entries.iter_mut() {
            if now >= e.deadline || e.cancel.is_cancelled() {
                if let Some(cb) = e.on_stop.take() {
                    due.push(cb);
                }
            }
        }
        let next = state
            .entries
            .iter()
            .filter(|e| e.on_stop.is_some())
            .map(|e| e.deadline)
            .min();
        if !due.is_empty() {
            drop(state);
            for cb in due {
                cb();
            }
            state = match shared.state.lock() {
                Ok(s) => s,
                Err(_) => return,
            };
            continue;
        }
        let wait = next
            .map(|d| d.saturating_duration_since(now).min(POLL))
            .unwrap_or(POLL);
        state.wake_at = now + wait;
        state = match shared.wake.wait_timeout(state, wait) {
            Ok((s, _)) => s,
            Err(_) => return,
        };
    }
}

/// Keeps a run registered; dropping it unregisters the run.
#[derive(Debug)]
#[must_use = "dropping the guard unregisters the run at once"]
pub struct Watch {
    id: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(mut s) = shared().state.lock() {
            s.entries.retain(|e| e.id != self.id);
        }
    }
}

/// Calls `on_stop` once, from the watchdog thread, when `deadline` passes
/// or `cancel` fires, unless the returned guard is dropped first.
///
/// `on_stop` runs on the shared thread: it must be short and must not
/// block (move an epoch, set a flag, halt an allocator).
pub fn watch(
    deadline: Instant,
    cancel: CancellationToken,
    on_stop: impl FnOnce() + Send + 'static,
) -> Watch {
    let shared = shared();
    if !STARTED.load(std::sync::atomic::Ordering::Acquire) {
        start(shared);
    }
    let Ok(mut s) = shared.state.lock() else {
        return Watch { id: u64::MAX };
    };
    s.next_id += 1;
    let id = s.next_id;
    // Wake the thread only if it would otherwise sleep past this deadline,
    // or past one poll interval (to start watching the cancel token).
    let early = deadline.min(Instant::now() + POLL.max(IDLE_MAX / 4));
    let notify = early < s.wake_at;
    s.entries.push(Entry {
        id,
        deadline,
        cancel,
        on_stop: Some(Box::new(on_stop)),
    });
    drop(s);
    if notify {
        shared.wake.notify_one();
    }
    Watch { id }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn fires_at_the_deadline_and_on_cancel_but_not_after_drop() {
        let (tx, rx) = mpsc::channel();
        let t = tx.clone();
        let _a = watch(
            Instant::now() + Duration::from_millis(30),
            CancellationToken::new(),
            move || t.send("deadline").unwrap(),
        );
        let token = CancellationToken::new();
        let t = tx.clone();
        let _b = watch(
            Instant::now() + Duration::from_secs(60),
            token.clone(),
            move || t.send("cancel").unwrap(),
        );
        let t = tx.clone();
        let c = watch(
            Instant::now() + Duration::from_millis(20),
            CancellationToken::new(),
            move || t.send("dropped").unwrap(),
        );
        drop(c);
        token.cancel();
        let mut got = vec![
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        ];
        got.sort();
        assert_eq!(got, vec!["cancel", "deadline"]);
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    }
}
