//! The process boundary: a worker process runs an engine, the host keeps
//! everything else.
//!
//! The host runs the one event loop ([`crate::engine::run_script`]) as
//! always, with a `RemoteEngine` whose primitives (load, start, run jobs,
//! settle) are messages to a worker process. The worker runs a real engine
//! behind [`serve`]; when the script calls the engine's one native function
//! (`host(op, a, b)`: a tool call, console, progress, the outcome) the
//! worker asks the host and waits for the answer. So tools, approvals, the
//! promise tracker, console and progress never leave the host: when the
//! host kills the worker (SIGKILL, on deadline or cancel) the report still
//! has every tool call, console line and approval made so far.
//!
//! Frames are a 4-byte little-endian length and a JSON message, over the
//! worker's stdin (host to worker) and stdout (worker to host). One
//! exchange per run, in the issue's terms: *execute* is `ToWorker::Run`,
//! a *tool call* is a `FromWorker::HostOp` with op `call`, *tool results*
//! travel in `ToWorker::Drain`, *done* is the host op `done` or `fail`
//! (a `FromWorker::Notice`, which the worker sends without waiting for an
//! answer), and *cancel* is the kill.
//!
//! The worker caps itself before it answers the handshake: address space,
//! no core dumps, no file writes, few descriptors (rlimits), and a heap
//! budget per run counted by [`WorkerAllocator`]; going over the budget
//! ends the process with [`EXIT_OUT_OF_MEMORY`], which the host reports as
//! ScriptMemoryError.

mod host;
mod worker;

pub use host::{ProcessAdapter, ProcessOptions};
use worker::sys;
pub use worker::{serve, serve_if_requested, WorkerAllocator, EXIT_NO_WORKER_ALLOCATOR};

use crate::adapter::{GlobalEval, GlobalEvalOutcome};
use crate::engine::{EngineFault, FaultKind};
use crate::error::ScriptError;
use crate::limits::Limits;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Bumped whenever a message changes shape.
pub const PROTOCOL_VERSION: u32 = 4;

/// Where a prelude config differs from one run to the next when nothing
/// else changed: the seed and script id after `{"run":"` (see
/// `event_loop::prelude_config`). A `Run` may carry only these bytes.
pub(crate) const CONFIG_DELTA: std::ops::Range<usize> = 8..60;

/// `next` as a delta on `last` (the bytes at [`CONFIG_DELTA`]), when
/// everything else in the two is the same; `None` otherwise. Exact for
/// any two strings: [`apply_config_delta`] on `last` gives back `next`.
pub(crate) fn config_delta<'a>(last: &str, next: &'a str) -> Option<&'a str> {
    let (a, b) = (last.as_bytes(), next.as_bytes());
    let r = CONFIG_DELTA;
    (a.len() == b.len()
        && b.len() > r.end
        && next.is_char_boundary(r.start)
        && next.is_char_boundary(r.end)
        && a[..r.start] == b[..r.start]
        && a[r.end..] == b[r.end..])
        .then(|| &next[r])
}

/// The config a delta stands for: `last` with the bytes at
/// [`CONFIG_DELTA`] replaced. `None` when the delta cannot apply (no
/// earlier config, or one of another shape): a broken protocol.
pub(crate) fn apply_config_delta(last: &mut String, delta: &str) -> Option<()> {
    let r = CONFIG_DELTA;
    if delta.len() != r.len()
        || last.len() <= r.end
        || !last.is_char_boundary(r.start)
        || !last.is_char_boundary(r.end)
    {
        return None;
    }
    last.replace_range(r, delta);
    Some(())
}

/// The argument that turns a binary into a worker: `PROGRAM --harness-worker ENGINE`.
pub const WORKER_ARG: &str = "--harness-worker";

/// Exit status of a worker that went over its memory budget.
pub const EXIT_OUT_OF_MEMORY: i32 = 86;

/// Largest frame either side accepts (a corrupt or hostile length must not
/// make the reader allocate gigabytes).
pub const MAX_FRAME_BYTES: usize = 64 << 20;

/// Host to worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(crate) enum ToWorker {
    /// First frame: caps the worker applies to itself before anything runs.
    Init { address_space_bytes: Option<u64> },
    /// Execute: load a fresh context with `config`, start `source` (already
    /// wrapped), run jobs; answered with one [`FromWorker::Step`].
    Run {
        /// The prelude's config, whole; or, with `config_delta`, only the
        /// bytes at [`CONFIG_DELTA`] (the run's seed and id), the rest
        /// being the same as in this worker's last `Run`.
        config: String,
        #[serde(default)]
        config_delta: bool,
        /// `None`: the same as in this worker's last `Run`.
        limits: Option<Limits>,
        timeout_ms: u64,
        source: String,
        /// The worker may spin for the host's next answer ([`may_spin`]);
        /// every message of a run's exchange says it anew.
        #[serde(default)]
        spin: bool,
    },
    /// Tool results: settle these calls, then run jobs; answered with a Step.
    Drain {
        settles: Vec<Settle>,
        /// The worker may spin for the host's next answer ([`may_spin`]).
        #[serde(default)]
        spin: bool,
    },
    /// Map an error the script saw to a fault kind; answered with Kind.
    Classify { name: String, message: String },
    /// The answer to a [`FromWorker::HostOp`].
    Reply {
        value: String,
        /// The worker may spin for the host's next answer ([`may_spin`]).
        #[serde(default)]
        spin: bool,
    },
    /// The run is over: drop the context, get ready for the next;
    /// answered with Ready once the worker is.
    Finish,
    /// Parse only; answered with Checked.
    Check { source: String },
    /// Global code (test262); answered with Global.
    EvalGlobal { eval: GlobalEval },
}

/// One settled tool call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Settle {
    pub(crate) id: u64,
    pub(crate) ok: bool,
    pub(crate) payload: String,
}

/// Which engine primitive a [`FromWorker::Step`] reports on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepPhase {
    Load,
    Start,
    Jobs,
}

/// An error's name and message and the fault kind the engine gave them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Classified {
    pub(crate) name: String,
    pub(crate) message: String,
    pub(crate) kind: FaultKind,
}

/// Worker to host.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(crate) enum FromWorker {
    Hello {
        protocol: u32,
        engine: String,
        version: String,
    },
    /// The script called `host(op, a, b)`; the worker waits for a Reply.
    HostOp {
        op: String,
        a: String,
        b: String,
    },
    /// The script called `host(op, a, b)` for a notice
    /// ([`crate::engine::HostOp::NOTICES`]), whose answer is always empty:
    /// the worker goes on without waiting, and the host sends no Reply.
    Notice {
        op: String,
        a: String,
        b: String,
    },
    /// The end of a Run or Drain: `fault` is where it failed, if it did.
    Step {
        phase: StepPhase,
        fault: Option<EngineFault>,
        memory_used: Option<u64>,
        exhausted: bool,
        /// Fuel the engine consumed so far, for engines that count it.
        #[serde(default)]
        fuel_consumed: Option<u64>,
        /// The engine's [`crate::engine::Engine::classify`] of each error
        /// the script failed with in this step (the `fail` notice's name
        /// and message pairs), so that the host need not ask
        /// ([`ToWorker::Classify`] is one more round trip).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kinds: Vec<Classified>,
    },
    Kind {
        kind: FaultKind,
    },
    /// After Finish: the old context is gone and the next is prepared
    /// (hardened ahead of time), so a run sent now starts at once.
    Ready,
    Checked {
        error: Option<ScriptError>,
    },
    Global {
        outcome: GlobalEvalOutcome,
    },
}

/// How long a reader spins for the other side's next frame before it
/// blocks in `read`, within a run's exchange. A reader blocked on a pipe is
/// woken by the writer, and on a VM whose idle CPUs halt that wake-up is
/// slow: with the host and its worker on different CPUs, 10 sequential tool
/// calls behind the boundary took 0.4 ms median but 1.3–1.7 ms at p90 on
/// the development VM, and 0.45 ms at p90 with both processes pinned to one
/// CPU (docs/performance.md). A reader that spins through the short gaps of
/// an exchange keeps its CPU awake.
const PIPE_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Remote runs in flight in this (host) process.
static REMOTE_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts one remote run in flight while it lives.
pub(crate) fn remote_run() -> crate::spin::Counted {
    crate::spin::Counted::begin(&REMOTE_RUNS)
}

/// Whether the readers of runs' exchanges (the host's, and the workers',
/// told in every message of the exchange) may spin: only while every run
/// in flight can have both its sides on a CPU of their own
/// ([`crate::spin::allowed`]).
pub(crate) fn may_spin() -> bool {
    crate::spin::allowed(&REMOTE_RUNS)
}

/// Waits until `fd` is readable, but at most [`PIPE_SPIN`], polling it
/// without blocking and yielding the CPU to anything runnable between
/// polls; the caller then reads (blocking if the spin ran out). Says
/// whether there is something to read.
#[cfg(unix)]
pub(crate) fn spin_until_readable(fd: std::os::fd::RawFd) -> bool {
    crate::spin::until(PIPE_SPIN, || readable(fd))
}

/// Whether `fd` has something to read now (or is closed), without waiting.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn readable(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid `pollfd` and a zero timeout: poll only reads the
    // descriptor's state.
    unsafe { libc::poll(&mut p, 1, 0) != 0 }
}

/// Writes one frame and flushes.
pub(crate) fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {} bytes is over the limit", body.len()),
        ));
    }
    w.write_all(&(body.len() as u32).to_le_bytes())?;
    w.write_all(&body)?;
    w.flush()
}

/// Reads one frame. End of stream before a frame is `UnexpectedEof`.
pub(crate) fn read_frame<R: Read, T: DeserializeOwned>(r: &mut R) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes announced; the limit is {MAX_FRAME_BYTES}"),
        ));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_spin_only_while_runs_leave_cpus_free() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // As many runs as CPUs: each needs a CPU for its worker and one
        // for its host thread, so nobody may spin.
        let runs: Vec<_> = (0..cores).map(|_| remote_run()).collect();
        assert!(!may_spin());
        drop(runs);
    }

    #[test]
    fn a_config_delta_gives_back_the_whole_config_or_nothing() {
        let seed = |s: &str| format!(r#"{{"run":"{s}","static":{{"tools":["echo"]}}}}"#);
        let (a, b) = (seed(&"a".repeat(52)), seed(&"b".repeat(52)));
        let delta = config_delta(&a, &b).expect("only the run part differs");
        assert_eq!(delta, "b".repeat(52));
        let mut kept = a.clone();
        apply_config_delta(&mut kept, delta).expect("applies");
        assert_eq!(kept, b);
        // Anything else differing, or another length: the whole config.
        let other_tools = b.replace("echo", "ecko");
        assert_eq!(config_delta(&a, &other_tools), None);
        assert_eq!(config_delta(&a, &format!("{b} ")), None);
        assert_eq!(config_delta("", &a), None);
        assert_eq!(config_delta(&a[..40], &b[..40]), None);
        // A multi-byte character across the edge is never split.
        let wide = format!(r#"{{"run":"{}é","static":{{}}}}"#, "a".repeat(51));
        let wide2 = format!(r#"{{"run":"{}é","static":{{}}}}"#, "b".repeat(51));
        assert_eq!(config_delta(&wide, &wide2), None);
        // A delta with nothing to apply to, or of the wrong size, is refused.
        assert_eq!(apply_config_delta(&mut String::new(), delta), None);
        assert_eq!(apply_config_delta(&mut a.clone(), "short"), None);
    }

    #[test]
    fn frames_round_trip_and_bad_lengths_are_refused() {
        let mut buf = Vec::new();
        write_frame(
            &mut buf,
            &ToWorker::Reply {
                value: "x".into(),
                spin: false,
            },
        )
        .unwrap();
        write_frame(&mut buf, &ToWorker::Finish).unwrap();
        let mut r = &buf[..];
        assert!(matches!(
            read_frame::<_, ToWorker>(&mut r).unwrap(),
            ToWorker::Reply { value, .. } if value == "x"
        ));
        assert!(matches!(
            read_frame::<_, ToWorker>(&mut r).unwrap(),
            ToWorker::Finish
        ));
        let e = read_frame::<_, ToWorker>(&mut r).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);

        let huge = (u32::MAX).to_le_bytes();
        let e = read_frame::<_, ToWorker>(&mut &huge[..]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let mut junk = 5u32.to_le_bytes().to_vec();
        junk.extend_from_slice(b"hello");
        let e = read_frame::<_, ToWorker>(&mut &junk[..]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
