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
//! worker's stdin (host to worker) and stdout (worker to host) for the
//! handshake, then on Linux through shared rings beside those pipes
//! (`ring`'s module docs; [`ProcessOptions::rings`]). One
//! exchange per run, in the issue's terms: *execute* is `ToWorker::Run`,
//! a *tool call* is a `FromWorker::HostOp` with op `call` (a call that
//! finished at once is answered with its outcome, protocol 7), other
//! *tool results* travel in `ToWorker::Drain`, *done* is the host op `done` or `fail`
//! (a `FromWorker::Notice`, which the worker sends without waiting for an
//! answer), and *cancel* is the kill.
//!
//! The worker caps itself before it answers the handshake: address space,
//! no core dumps, no file writes, few descriptors (rlimits), and a heap
//! budget per run counted by [`WorkerAllocator`]; going over the budget
//! ends the process with [`EXIT_OUT_OF_MEMORY`], which the host reports as
//! ScriptMemoryError.

#[cfg(test)]
mod golden;
mod host;
#[cfg(target_os = "linux")]
mod ring;
mod worker;

pub use host::{ProcessAdapter, ProcessOptions};
use worker::sys;
pub use worker::{serve, serve_if_requested, WorkerAllocator, EXIT_NO_WORKER_ALLOCATOR};

use crate::adapter::{GlobalEval, GlobalEvalOutcome};
use crate::error::ScriptError;
use crate::limits::Limits;
use crate::primitives::{EngineFault, FaultKind};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Bumped whenever a message changes shape.
pub const PROTOCOL_VERSION: u32 = 7;

/// Where a prelude config differs from one run to the next when nothing
/// else changed: the seed and script id (see `event_loop::prelude_config`).
/// A `Run` may carry only these bytes.
pub(crate) const CONFIG_DELTA: std::ops::Range<usize> = harness_abi::run_config::RUN_PART;

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

/// Largest message either side sends or accepts: a message over
/// [`MAX_FRAME_BYTES`] (a console line, a return value or a tool's
/// arguments that large) goes as frames of parts, each a `0` byte and a
/// piece of the message, then a last frame with the rest, so that a run
/// behind the boundary meets the limits it meets in process (the line
/// cut, ReturnValueTooLargeError) instead of a dead worker.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// The first byte of a frame that holds a part of a longer message (no
/// JSON text starts with it).
const PART: u8 = 0;

/// Host to worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(crate) enum ToWorker {
    /// First frame: caps the worker applies to itself before anything runs.
    Init {
        address_space_bytes: Option<u64>,
        /// The host passed shared rings, their descriptor attached to this
        /// frame: after the handshake, frames go through them (`ring`'s
        /// module docs).
        #[serde(default)]
        rings: bool,
        /// The worker serves one session ([`crate::session`]), whose realm
        /// may hold this much: its engine thread is told
        /// `begin_session` before anything runs, and it answers each
        /// Finish with [`FromWorker::Kept`] instead of `Ready`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_memory_bytes: Option<u64>,
    },
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
        /// Kept warm and awake ([`WORKER_LINGER`]): after this run the
        /// worker polls for its next frame for a while before it blocks.
        #[serde(default)]
        linger: bool,
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
        /// The worker mapped the rings it was given: frames after this
        /// one go through them.
        #[serde(default)]
        rings: bool,
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
        /// The engine's [`crate::engine::Engine::context_id`] (the context
        /// the run is in), once loaded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context: Option<u64>,
    },
    Kind {
        kind: FaultKind,
    },
    /// After Finish: the old context is gone and the next is prepared
    /// (hardened ahead of time), so a run sent now starts at once.
    Ready,
    /// A session worker's `Ready`: what the session's runs left in its
    /// realm ([`crate::session::SessionSpec::retained_bytes`]).
    Kept {
        session_bytes: u64,
    },
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
/// CPU. A reader that spins through the short gaps of
/// an exchange keeps its CPU awake.
const PIPE_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// How long a worker told to linger (a `Run`'s `linger`: its engine is
/// kept warm and awake) polls for its next frame after the run, yielding,
/// before it blocks: a little longer than the host's rehearsals take to
/// come ([`crate::pool::REHEARSAL_PERIOD`]), so that through the keep-warm
/// window its CPU never halts, and at most this long past the window's
/// end. Its CPU, not the host thread's, is the one kept awake on 2 CPUs:
/// a run behind the boundary keeps the worker's CPU and its host thread's
/// busy, and a poller on the host thread's side held up the worker there.
pub(crate) const WORKER_LINGER: std::time::Duration =
    crate::pool::REHEARSAL_PERIOD.saturating_add(std::time::Duration::from_micros(200));

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
#[cfg(test)]
pub(crate) fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> io::Result<()> {
    write_body(w, &frame_body(msg)?)?;
    w.flush()
}

/// Lays out one frame: the body's length (`u32`, little-endian), then the
/// body. An empty body is a doorbell.
fn write_body<W: Write>(w: &mut W, body: &[u8]) -> io::Result<()> {
    w.write_all(&(body.len() as u32).to_le_bytes())?;
    w.write_all(body)
}

/// Reads one frame. End of stream before a frame is `UnexpectedEof`.
#[cfg(test)]
pub(crate) fn read_frame<R: Read, T: DeserializeOwned>(r: &mut R) -> io::Result<T> {
    parse_body(&read_body(r)?)
}

/// Reads one frame's body, unparsed (empty for an empty frame).
fn read_body<R: Read>(r: &mut R) -> io::Result<Vec<u8>> {
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
    Ok(body)
}

/// One side's end of a worker's channel: the pipes, and on Linux the
/// shared rings beside them once both sides have them (`ring`'s module
/// docs).
pub(crate) struct Link<R: Read, W: Write> {
    input: io::BufReader<R>,
    output: io::BufWriter<W>,
    #[cfg(unix)]
    input_fd: std::os::fd::RawFd,
    #[cfg(target_os = "linux")]
    rings: Option<ring::Rings>,
    /// The worker's: with its ring full, it waits for the host to read
    /// (while its parent, this pid, lives); the host's side never waits.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    patient_of: Option<u32>,
    body: Vec<u8>,
}

impl<R: Read, W: Write> std::fmt::Debug for Link<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").finish_non_exhaustive()
    }
}

impl<R: Read, W: Write> Link<R, W> {
    /// Pipes only, until [`Link::use_rings`].
    pub(crate) fn new(
        input: R,
        output: W,
        #[cfg(unix)] input_fd: std::os::fd::RawFd,
        patient_of: Option<u32>,
    ) -> Self {
        Link {
            input: io::BufReader::new(input),
            output: io::BufWriter::new(output),
            #[cfg(unix)]
            input_fd,
            #[cfg(target_os = "linux")]
            rings: None,
            patient_of,
            body: Vec::new(),
        }
    }

    /// From now on, frames go through `rings`.
    #[cfg(target_os = "linux")]
    pub(crate) fn use_rings(&mut self, rings: ring::Rings) {
        self.rings = Some(rings);
    }

    /// Sends one message: one frame, or parts and a last frame when it is
    /// over [`MAX_FRAME_BYTES`].
    pub(crate) fn send<T: Serialize>(&mut self, msg: &T) -> io::Result<()> {
        let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
        if body.len() > MAX_MESSAGE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a message of {} bytes is over the limit of {MAX_MESSAGE_BYTES}",
                    body.len()
                ),
            ));
        }
        let mut rest = &body[..];
        // The last frame keeps at least two bytes: never an empty frame
        // (a doorbell).
        while rest.len() > MAX_FRAME_BYTES {
            let (piece, tail) = rest.split_at(MAX_FRAME_BYTES - 1);
            let mut part = Vec::with_capacity(MAX_FRAME_BYTES);
            part.push(PART);
            part.extend_from_slice(piece);
            self.send_body(&part)?;
            rest = tail;
        }
        self.send_body(rest)
    }

    fn send_body(&mut self, body: &[u8]) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        if self.rings.is_some() {
            return self.send_by_ring(body);
        }
        write_body(&mut self.output, body)?;
        self.output.flush()
    }

    #[cfg(target_os = "linux")]
    fn send_by_ring(&mut self, body: &[u8]) -> io::Result<()> {
        loop {
            let rings = self.rings.as_mut().expect("rings in use");
            let (pushed, doorbell) = rings.push(body)?;
            if doorbell {
                write_body(&mut self.output, &[])?;
            }
            match pushed {
                ring::Pushed::Ring => {}
                ring::Pushed::Marker => write_body(&mut self.output, body)?,
                ring::Pushed::Full => {
                    self.wait_for_room()?;
                    continue;
                }
            }
            if doorbell || pushed == ring::Pushed::Marker {
                self.output.flush()?;
            }
            return Ok(());
        }
    }

    /// The worker's ring is full: wait for the host to read (spinning
    /// first, then in short sleeps), for as long as the host lives.
    #[cfg(target_os = "linux")]
    fn wait_for_room(&self) -> io::Result<()> {
        let (Some(parent), Some(rings)) = (self.patient_of, self.rings.as_ref()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the worker does not read its ring",
            ));
        };
        loop {
            if crate::spin::until(PIPE_SPIN, || rings.has_room()) {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
            if std::os::unix::process::parent_id() != parent {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
        }
    }

    /// Sends one frame on the pipe (a Unix socket here) with the
    /// descriptor `fd` attached: the host's `Init`, handing the worker its
    /// region (`ring::send_with_descriptor`).
    #[cfg(target_os = "linux")]
    pub(crate) fn send_with_descriptor<T: Serialize>(
        &mut self,
        msg: &T,
        fd: std::os::fd::RawFd,
    ) -> io::Result<()>
    where
        W: std::os::fd::AsRawFd,
    {
        let body = frame_body(msg)?;
        let mut frame = Vec::with_capacity(4 + body.len());
        write_body(&mut frame, &body)?;
        self.output.flush()?;
        let sent = ring::send_with_descriptor(self.output.get_ref().as_raw_fd(), &frame, fd)?;
        self.output.write_all(&frame[sent..])?;
        self.output.flush()
    }

    /// The CPU the host thread last published from, if the calling
    /// thread (the worker's) is on it now: a CPU number read and compared.
    /// The host's word is a hint the worker acts on for itself
    /// ([`worker::Apart`]); the host never acts on the worker's.
    pub(crate) fn on_host_cpu(&self) -> Option<u32> {
        #[cfg(target_os = "linux")]
        if let Some(host_cpu) = self.rings.as_ref().and_then(ring::Rings::writer_cpu) {
            return (crate::spin::current_cpu() == Some(host_cpu)).then_some(host_cpu);
        }
        None
    }

    /// Whether a frame is there to read now (or the pipe is closed).
    pub(crate) fn has_input(&self) -> bool {
        #[cfg(target_os = "linux")]
        if let Some(rings) = &self.rings {
            return rings.ready();
        }
        if !self.input.buffer().is_empty() {
            return true;
        }
        #[cfg(unix)]
        return readable(self.input_fd);
        #[cfg(not(unix))]
        false
    }

    /// Waits until a frame is there ([`Link::has_input`]), but at most
    /// [`PIPE_SPIN`], polling without blocking and yielding the CPU to
    /// anything runnable between polls; the caller then reads (blocking
    /// if the spin ran out). Says whether a frame is there.
    pub(crate) fn spin_for_input(&self) -> bool {
        self.poll_for_input(PIPE_SPIN)
    }

    /// [`Link::spin_for_input`] for up to `budget` (a worker lingering
    /// after a run, [`WORKER_LINGER`]); without Unix's way to poll a
    /// descriptor, only looks once.
    pub(crate) fn poll_for_input(&self, budget: std::time::Duration) -> bool {
        if cfg!(unix) {
            crate::spin::until(budget, || self.has_input())
        } else {
            self.has_input()
        }
    }

    /// The next message (one frame, or its parts and last frame); `spin`:
    /// poll for it first ([`Link::spin_for_input`], [`may_spin`]).
    pub(crate) fn recv<T: DeserializeOwned>(&mut self, spin: bool) -> io::Result<T> {
        if spin {
            self.spin_for_input();
        }
        let mut parts = Vec::new();
        loop {
            let message = self.with_next_body(|body| match body.split_first() {
                Some((&PART, piece)) => {
                    parts.extend_from_slice(piece);
                    None
                }
                _ if parts.is_empty() => Some(parse_body(body)),
                _ => {
                    parts.extend_from_slice(body);
                    Some(parse_body(&parts))
                }
            })?;
            if let Some(m) = message {
                return m;
            }
            if parts.len() > MAX_MESSAGE_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a message over the limit of {MAX_MESSAGE_BYTES} bytes"),
                ));
            }
        }
    }

    /// Hands the next frame's body to `f`.
    fn with_next_body<O>(&mut self, f: impl FnOnce(&[u8]) -> O) -> io::Result<O> {
        #[cfg(target_os = "linux")]
        if self.rings.is_some() {
            return self.recv_by_ring(f);
        }
        Ok(f(&read_body(&mut self.input)?))
    }

    #[cfg(target_os = "linux")]
    fn recv_by_ring<O>(&mut self, f: impl FnOnce(&[u8]) -> O) -> io::Result<O> {
        loop {
            let rings = self.rings.as_mut().expect("rings in use");
            match rings.pop(&mut self.body)? {
                ring::Popped::Frame => return Ok(f(&self.body)),
                ring::Popped::OnPipe => return Ok(f(&self.frame_from_pipe()?)),
                ring::Popped::Empty => {}
            }
            if !rings.sleep() {
                continue;
            }
            // Blocks until a doorbell, a frame sent after a marker, or
            // the end of the pipe.
            let item = read_item(&mut self.input);
            let rings = self.rings.as_mut().expect("rings in use");
            rings.awake();
            if let Some(frame) = item? {
                // Sent on the pipe after its marker, which is in the ring
                // by now.
                return match rings.pop(&mut self.body)? {
                    ring::Popped::OnPipe => Ok(f(&frame)),
                    _ => Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a frame on the pipe without its marker",
                    )),
                };
            }
        }
    }

    /// The frame a marker announced: the next one on the pipe, after any
    /// doorbells.
    #[cfg(target_os = "linux")]
    fn frame_from_pipe(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(frame) = read_item(&mut self.input)? {
                return Ok(frame);
            }
        }
    }
}

/// A frame's body: the message as JSON, within [`MAX_FRAME_BYTES`].
fn frame_body<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {} bytes is over the limit", body.len()),
        ));
    }
    Ok(body)
}

fn parse_body<T: DeserializeOwned>(body: &[u8]) -> io::Result<T> {
    serde_json::from_slice(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// One item from a pipe beside rings: a frame's body, or `None` for a
/// doorbell (an empty frame).
#[cfg(target_os = "linux")]
fn read_item<R: Read>(r: &mut R) -> io::Result<Option<Vec<u8>>> {
    let body = read_body(r)?;
    Ok((!body.is_empty()).then_some(body))
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
        let n = CONFIG_DELTA.len();
        let (a, b) = (seed(&"a".repeat(n)), seed(&"b".repeat(n)));
        let delta = config_delta(&a, &b).expect("only the run part differs");
        assert_eq!(delta, "b".repeat(n));
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

    #[test]
    fn a_message_over_the_frame_limit_goes_in_parts_and_comes_back_whole() {
        let line = "é".repeat(MAX_FRAME_BYTES / 2 + 7) + "\u{1}x";
        let mut out = Link::new(
            io::empty(),
            Vec::new(),
            #[cfg(unix)]
            -1,
            None,
        );
        let msg = FromWorker::Notice {
            op: "console".into(),
            a: "log".into(),
            b: line.clone(),
        };
        out.send(&msg).unwrap();
        out.send(&FromWorker::Ready).unwrap();
        let bytes = out.output.into_inner().unwrap();
        // More than one frame, none over the limit.
        let mut r = &bytes[..];
        let mut frames = 0;
        while !r.is_empty() {
            let len = u32::from_le_bytes(r[..4].try_into().unwrap()) as usize;
            assert!(len <= MAX_FRAME_BYTES);
            r = &r[4 + len..];
            frames += 1;
        }
        assert!(frames >= 3, "{frames} frames");
        let mut back = Link::new(
            &bytes[..],
            io::sink(),
            #[cfg(unix)]
            -1,
            None,
        );
        match back.recv::<FromWorker>(false).unwrap() {
            FromWorker::Notice { op, b, .. } => assert!(op == "console" && b == line),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            back.recv::<FromWorker>(false).unwrap(),
            FromWorker::Ready
        ));
    }
}

#[cfg(all(test, target_os = "linux"))]
mod link_tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A pipe's reading and writing ends.
    #[allow(unsafe_code)]
    fn pipe() -> (std::fs::File, std::fs::File) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors, which the Files then own.
        unsafe {
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0);
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        }
    }

    /// Two ends joined by real pipes and one region, as host and worker.
    fn joined() -> (
        Link<std::fs::File, std::fs::File>,
        Link<std::fs::File, std::fs::File>,
    ) {
        let (a_in, b_out) = pipe();
        let (b_in, a_out) = pipe();
        let (region, fd) = ring::Region::create().unwrap();
        let other = ring::Region::map(fd.as_raw_fd()).unwrap();
        let a_fd = a_in.as_raw_fd();
        let b_fd = b_in.as_raw_fd();
        let mut a = Link::new(a_in, a_out, a_fd, None);
        let mut b = Link::new(b_in, b_out, b_fd, Some(std::os::unix::process::parent_id()));
        a.use_rings(ring::Rings::host(region));
        b.use_rings(ring::Rings::worker(other));
        (a, b)
    }

    fn reply(value: String) -> ToWorker {
        ToWorker::Reply { value, spin: false }
    }

    fn value(m: ToWorker) -> String {
        match m {
            ToWorker::Reply { value, .. } => value,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn small_and_large_frames_keep_their_order_and_a_sleeper_wakes() {
        let (mut host, mut worker) = joined();
        let sizes = [10, 200_000, 5, ring::CAPACITY, 1, 3_000_000, 7];
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..sizes.len() {
                // Never spinning: every frame is waited for asleep.
                got.push(value(worker.recv(false).unwrap()).len());
            }
            got
        });
        for n in sizes {
            // Let the reader fall asleep now and then.
            std::thread::sleep(std::time::Duration::from_millis(2));
            host.send(&reply("x".repeat(n))).unwrap();
        }
        assert_eq!(reader.join().unwrap(), sizes.to_vec());
    }

    #[test]
    fn a_worker_sees_when_it_is_on_its_host_threads_cpu() {
        let (mut host, mut worker) = joined();
        assert_eq!(
            worker.on_host_cpu(),
            None,
            "the host has not said where it is"
        );
        // Host and worker on one thread, so on one CPU, unless the kernel
        // moves the thread between the send and the check.
        let seen = (0..1000).any(|_| {
            host.send(&reply(String::new())).unwrap();
            worker.recv::<ToWorker>(false).unwrap();
            worker.on_host_cpu().is_some()
        });
        assert!(seen, "on the host's CPU within 1,000 tries");
    }

    #[test]
    fn a_writer_whose_ring_is_full_waits_for_the_reader() {
        let (mut host, mut worker) = joined();
        // 3,000 frames of 100 bytes: several rings' worth, unread at first.
        let writer = std::thread::spawn(move || {
            for i in 0..3000 {
                worker.send(&reply(format!("{i:0>90}"))).unwrap();
            }
            worker
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        for i in 0..3000 {
            assert_eq!(value(host.recv(true).unwrap()), format!("{i:0>90}"));
        }
        let _worker = writer.join().unwrap();
    }

    #[test]
    fn the_end_of_the_pipe_ends_a_wait() {
        let (mut host, worker) = joined();
        let t = std::thread::spawn(move || host.recv::<ToWorker>(false));
        std::thread::sleep(std::time::Duration::from_millis(10));
        drop(worker);
        let e = t.join().unwrap().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
