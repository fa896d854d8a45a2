//! The host side: [`ProcessAdapter`] runs scripts in worker processes.

use super::{
    Classified, FromWorker, Link, Settle, StepPhase, ToWorker, EXIT_OUT_OF_MEMORY,
    PROTOCOL_VERSION, WORKER_ARG,
};
use crate::adapter::{
    Capabilities, EngineInfo, ExecutionRequest, GlobalEval, GlobalEvalOutcome, ScriptRuntimeAdapter,
};
use crate::engine::{
    run_script, Engine, EngineDescriptor, EngineFault, EngineSetup, FaultKind, HostHandle,
    KeepWarm, Rehearsal,
};
use crate::error::ScriptError;
use crate::limits::{Isolation, Limits};
use crate::pool::WorkerPool;
use crate::report::ExecutionReport;
use crate::tuning::{Tunable, Tuned, Tuning};
use async_trait::async_trait;
use std::cell::RefCell;
use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Stack of the host threads that drive remote runs: the event loop reads
/// tool arguments and results (deeply nested JSON) on it.
const HOST_THREAD_STACK_BYTES: usize = 16 << 20;

/// How the host starts and caps worker processes. Made with
/// [`ProcessOptions::new`] or [`ProcessOptions::current_exe`], then
/// changed field by field: more fields will come, so it cannot be
/// written as a struct literal outside this crate.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProcessOptions {
    /// Engine the workers serve (`boa`, `quickjs`, …).
    pub engine: String,
    /// The worker binary; it must call
    /// [`serve_if_requested`](super::serve_if_requested) first thing (see
    /// [`crate::worker_main!`]).
    pub program: PathBuf,
    /// Arguments before `--harness-worker ENGINE`.
    pub args: Vec<OsString>,
    /// Worker processes (and runs in flight) at most; more runs queue.
    pub max_workers: usize,
    /// RLIMIT_AS of each worker (`None`: no address-space cap).
    pub address_space_bytes: Option<u64>,
    /// How long a new worker may take to answer the handshake.
    pub start_timeout: Duration,
    /// Let workers write to the host's stderr (for debugging engines).
    pub inherit_stderr: bool,
    /// Environment variables a worker gets; it starts with an empty
    /// environment otherwise (WASI-QuickJS passes its guest's path here).
    pub env: Vec<(OsString, OsString)>,
    /// Runs a worker serves before it is replaced by a fresh one
    /// (`None`: no limit). Bounds what an engine leaks over many runs
    /// (Boa 0.22 leaks some strings) at the cost of one worker start every
    /// so many runs.
    pub max_runs_per_worker: Option<u32>,
    /// On Linux, frames between the host and a worker go through a pair
    /// of rings in memory the two share (one sealed memfd per worker),
    /// with the pipes kept for waking a reader that sleeps, frames too
    /// large for a ring, and noticing a worker's death: a trivial run
    /// sends five frames, each about 2.5 µs cheaper this way. Default:
    /// on, unless `HARNESS_PROCESS_RINGS=0` is set; off, or anywhere
    /// else, frames take the pipes.
    pub rings: bool,
}

impl ProcessOptions {
    /// Workers for `engine` started from `program`.
    pub fn new(engine: &str, program: impl Into<PathBuf>) -> Self {
        ProcessOptions {
            engine: engine.to_owned(),
            program: program.into(),
            args: Vec::new(),
            max_workers: 16,
            address_space_bytes: Some(4 << 30),
            start_timeout: Duration::from_secs(10),
            inherit_stderr: false,
            max_runs_per_worker: Some(10_000),
            env: Vec::new(),
            rings: std::env::var_os("HARNESS_PROCESS_RINGS").is_none_or(|v| v != "0"),
        }
    }

    /// Workers started from this very binary (which must call
    /// `serve_if_requested`), or from `$HARNESS_WORKER_BIN` when set.
    pub fn current_exe(engine: &str) -> io::Result<Self> {
        let program = match std::env::var_os("HARNESS_WORKER_BIN") {
            Some(p) => PathBuf::from(p),
            None => std::env::current_exe()?,
        };
        Ok(Self::new(engine, program))
    }
}

/// One worker process. Dropping it kills and reaps the process.
struct Proc {
    /// The worker's process id.
    pid: u32,
    child: Arc<Mutex<Child>>,
    /// Frames from the worker's stdout; frames to its stdin (a pipe, or
    /// with rings a Unix socket).
    link: Link<ChildStdout, ToWorkerPipe>,
    stderr: Option<ChildStderr>,
    /// Set by the host just before it kills the worker.
    killed: Arc<AtomicBool>,
    /// Runs this worker has served.
    runs: u32,
    /// The config and limits of the last `Run` sent, which the worker
    /// keeps: the next `Run` carries only what changed.
    sent_config: String,
    sent_limits: Option<Limits>,
    /// Whether the next `Run` tells the worker to linger after it (kept
    /// warm and awake, [`super::WORKER_LINGER`]).
    linger: bool,
}

/// The host's end of a worker's stdin: a pipe, or with rings a Unix
/// socket (`ring`'s module docs).
#[cfg(unix)]
type ToWorkerPipe = std::fs::File;
#[cfg(not(unix))]
type ToWorkerPipe = std::process::ChildStdin;

impl Proc {
    fn spawn(opts: &ProcessOptions) -> Result<Proc, String> {
        super::sys::ignore_sigpipe();
        let what = || {
            let mut w = opts.program.display().to_string();
            for a in &opts.args {
                w.push(' ');
                w.push_str(&a.to_string_lossy());
            }
            format!("{w} {WORKER_ARG} {}", opts.engine)
        };
        // This worker's rings, and the socket that will be its stdin and
        // carry their descriptor to it alone (`ring`'s module docs).
        #[cfg(target_os = "linux")]
        let rings = opts
            .rings
            .then(|| {
                Some((
                    super::ring::Region::create().ok()?,
                    super::ring::socket_pair().ok()?,
                ))
            })
            .flatten();
        #[cfg(target_os = "linux")]
        let (stdin, rings, host_end) = match rings {
            Some(((region, region_fd), (host_end, worker_end))) => (
                Stdio::from(worker_end),
                Some((region, region_fd)),
                Some(host_end),
            ),
            None => (Stdio::piped(), None, None),
        };
        #[cfg(not(target_os = "linux"))]
        let stdin = Stdio::piped();
        let mut cmd = Command::new(&opts.program);
        cmd.args(&opts.args)
            .arg(WORKER_ARG)
            .arg(&opts.engine)
            // The engine needs nothing from the host's environment.
            .env_clear()
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            // No `current_dir`: the worker moves to `/` itself (`serve`),
            // since std can spawn into another directory only with a
            // C library that has `posix_spawn_file_actions_addchdir_np`
            // (glibc 2.29), and forks the host otherwise.
            .stdin(stdin)
            .stdout(Stdio::piped())
            // Piped and read only after the worker died: its last words say
            // whether it overflowed its stack.
            .stderr(if opts.inherit_stderr {
                Stdio::inherit()
            } else {
                Stdio::piped()
            });
        // Its own process group, so that a kill reaches anything it started
        // (whose open pipes would otherwise keep the host waiting). No
        // `pre_exec`: std then starts the worker with `posix_spawn`, not a
        // fork of this process.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("could not start the worker process `{}`: {e}", what()))?;
        // The worker's end of the socket, held by `cmd`, is closed here.
        drop(cmd);
        let stderr = child.stderr.take();
        #[cfg(unix)]
        let input = child
            .stdin
            .take()
            .map(|p| ToWorkerPipe::from(std::os::fd::OwnedFd::from(p)));
        #[cfg(not(unix))]
        let input = child.stdin.take();
        #[cfg(target_os = "linux")]
        let input = host_end.map(ToWorkerPipe::from).or(input);
        let (Some(input), Some(stdout)) = (input, child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the worker process has no pipes".to_owned());
        };
        #[cfg(unix)]
        let stdout_fd = std::os::fd::AsRawFd::as_raw_fd(&stdout);
        let pid = child.id();
        let mut proc = Proc {
            pid,
            child: Arc::new(Mutex::new(child)),
            link: Link::new(
                stdout,
                input,
                #[cfg(unix)]
                stdout_fd,
                None,
            ),
            stderr,
            killed: Arc::new(AtomicBool::new(false)),
            runs: 0,
            sent_config: String::new(),
            sent_limits: None,
            linger: false,
        };
        // A binary that is not a worker may never answer: kill it then.
        let _watch = crate::watchdog::watch(
            Instant::now() + opts.start_timeout,
            CancellationToken::new(),
            proc.killer(),
        );
        let init = |rings| ToWorker::Init {
            address_space_bytes: opts.address_space_bytes,
            rings,
        };
        #[cfg(target_os = "linux")]
        let (sent, region) = match rings {
            // The host's copy of the descriptor is closed once it is sent.
            Some((region, fd)) => (
                proc.link
                    .send_with_descriptor(&init(true), std::os::fd::AsRawFd::as_raw_fd(&fd)),
                Some(region),
            ),
            None => (proc.send(&init(false)), None),
        };
        #[cfg(not(target_os = "linux"))]
        let sent = proc.send(&init(false));
        let hello = sent.and_then(|()| proc.recv());
        match hello {
            Ok(FromWorker::Hello {
                protocol,
                engine,
                rings,
                ..
            }) if protocol == PROTOCOL_VERSION && engine == opts.engine => {
                #[cfg(target_os = "linux")]
                if let (true, Some(region)) = (rings, region) {
                    proc.link.use_rings(super::ring::Rings::host(region));
                }
                #[cfg(not(target_os = "linux"))]
                let _ = rings;
                Ok(proc)
            }
            Ok(FromWorker::Hello {
                protocol, engine, ..
            }) => Err(format!(
                "the worker `{}` speaks protocol {protocol} for engine {engine:?}; \
                 expected protocol {PROTOCOL_VERSION} for {:?}",
                what(),
                opts.engine
            )),
            Ok(_) => Err(format!(
                "the worker `{}` did not start with a handshake",
                what()
            )),
            Err(e) => {
                let death = proc.death_note();
                let words = proc.last_words();
                let words = words.trim();
                Err(if words.is_empty() {
                    format!(
                        "the worker `{}` did not answer the handshake ({e}; {death}); \
                         its main must be declared with harness_core::worker_main!",
                        what()
                    )
                } else {
                    format!(
                        "the worker `{}` did not answer the handshake ({e}; {death}): {words}",
                        what()
                    )
                })
            }
        }
    }

    fn send(&mut self, msg: &ToWorker) -> io::Result<()> {
        self.link.send(msg)
    }

    /// A `Run` for this worker: the config as a delta on the last one it
    /// was sent, and the limits left out when they are the same (a trivial
    /// run's frame shrinks from about 1.2 KB to about 100 bytes, and
    /// neither side escapes or parses the config again). Both ends keep
    /// the last ones for as long as this worker lives.
    fn run_message(
        &mut self,
        config: String,
        limits: Limits,
        timeout_ms: u64,
        source: String,
    ) -> ToWorker {
        let limits = if self.sent_limits.as_ref() == Some(&limits) {
            None
        } else {
            self.sent_limits = Some(limits.clone());
            Some(limits)
        };
        let (config, config_delta) = match super::config_delta(&self.sent_config, &config) {
            Some(delta) => {
                let delta = delta.to_owned();
                self.sent_config = config;
                (delta, true)
            }
            None => {
                self.sent_config.clone_from(&config);
                (config, false)
            }
        };
        let spin = super::may_spin();
        ToWorker::Run {
            config,
            config_delta,
            limits,
            timeout_ms,
            source,
            spin,
            // Only while the machine has CPUs to spare, as for spinning:
            // the worker's poll takes a CPU of its own.
            linger: self.linger && spin,
        }
    }

    fn recv(&mut self) -> io::Result<FromWorker> {
        self.link.recv(false)
    }

    /// The worker's next message within a run's exchange (or its `Ready`
    /// after `Finish`), where it usually answers in microseconds: spin for
    /// it first while the machine has CPUs to spare ([`super::may_spin`]).
    fn recv_in_run(&mut self) -> io::Result<FromWorker> {
        self.link.recv(super::may_spin())
    }

    /// Kills the worker (from any thread).
    fn killer(&self) -> impl FnOnce() + Send + 'static {
        let child = self.child.clone();
        let killed = self.killed.clone();
        move || {
            killed.store(true, Ordering::SeqCst);
            if let Ok(mut c) = child.lock() {
                kill_tree(&mut c);
            }
        }
    }

    fn alive(&self) -> bool {
        self.child
            .lock()
            .map(|mut c| matches!(c.try_wait(), Ok(None)))
            .unwrap_or(false)
    }

    /// Waits for the dead worker and says why it died.
    /// Waits for the worker to exit, killing it if it has not within
    /// `grace`. The lock is never held while waiting: the watchdog thread
    /// takes it to kill workers.
    fn reap(&self, grace: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + grace;
        loop {
            {
                let mut c = self.child.lock().ok()?;
                if let Ok(Some(status)) = c.try_wait() {
                    return Some(status);
                }
                if Instant::now() >= end {
                    kill_tree(&mut c);
                    return c.wait().ok();
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn death_note(&self) -> String {
        match self.reap(Duration::from_millis(200)) {
            Some(s) => describe_exit(s),
            None => "its status is unknown".to_owned(),
        }
    }

    /// The end of what the dead worker wrote to stderr (at most 8 KiB).
    fn last_words(&mut self) -> String {
        use std::io::Read;
        let mut buf = Vec::new();
        if let Some(e) = self.stderr.take() {
            let _ = e.take(8 << 10).read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// The fault for a worker whose pipe broke. A worker that closed its
    /// pipe is given `grace` to finish exiting (its exit status says why it
    /// died) before it is killed.
    fn death_fault(&mut self, grace: Duration) -> EngineFault {
        let killed_by_host = self.killed.load(Ordering::SeqCst);
        let status = self.reap(grace);
        if killed_by_host {
            return EngineFault::new(FaultKind::Interrupted, "InternalError", "interrupted");
        }
        if status.and_then(|s| s.code()) == Some(EXIT_OUT_OF_MEMORY) {
            return EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory");
        }
        if self.last_words().contains("has overflowed its stack") {
            return EngineFault::new(
                FaultKind::StackOverflow,
                "RangeError",
                "the engine overflowed its native stack",
            );
        }
        let how = status
            .map(describe_exit)
            .unwrap_or_else(|| "its status is unknown".into());
        EngineFault::new(
            FaultKind::Internal,
            "Error",
            format!("the worker process died unexpectedly ({how})"),
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(mut c) = self.child.lock() {
            kill_tree(&mut c);
            let _ = c.wait();
        }
    }
}

/// SIGKILLs the worker and its process group (anything it started).
fn kill_tree(c: &mut Child) {
    super::sys::kill_group(c.id());
    let _ = c.kill();
}

fn describe_exit(s: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = s.signal() {
            return format!("killed by signal {sig}");
        }
    }
    match s.code() {
        Some(c) => format!("exit status {c}"),
        None => "no exit status".to_owned(),
    }
}

/// What the host remembers between `load` and `start`.
struct Pending {
    config: String,
    limits: Limits,
    timeout_ms: u64,
    host: HostHandle,
}

/// An [`Engine`] whose primitives run in a worker process.
pub(crate) struct RemoteEngine {
    proc: RefCell<Option<Proc>>,
    run: Option<Pending>,
    host: Option<HostHandle>,
    settles: Vec<Settle>,
    /// The result of the jobs that ran right after `start`.
    jobs_after_start: Option<Result<(), EngineFault>>,
    memory_used: Option<u64>,
    fuel_consumed: Option<u64>,
    exhausted: bool,
    /// How the worker's engine classified the errors the script failed
    /// with, sent with its Steps: `classify` answers from these.
    kinds: Vec<Classified>,
    /// The worker's context for this run ([`Engine::context_id`]), its
    /// pid in the high half.
    context: Option<u64>,
    /// The worker died, broke the protocol or reported an internal fault.
    broken: bool,
    /// The worker was sent this run's `Run` (a run the host refused before
    /// it reached the engine, a source over the limit, leaves the worker
    /// idle, with nothing to finish).
    run_sent: bool,
    /// Finish went to the worker ([`Engine::finished`], when the run
    /// stopped needing it, or from `into_reusable` at the latest).
    finish_sent: bool,
}

impl std::fmt::Debug for RemoteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteEngine")
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl RemoteEngine {
    fn new(proc: Proc) -> Self {
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
        }
    }

    /// Sends `msg` and answers host operations until the worker's Step.
    /// `msg` is made for the worker that will receive it.
    fn exchange(
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
                            spin: super::may_spin(),
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
    fn into_reusable(mut self, limit: Duration) -> Option<Proc> {
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
            Ok(FromWorker::Ready) => Some(proc),
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
            spin: super::may_spin(),
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

/// A pool thread's worker process, kept warm between runs.
struct Slot {
    opts: Arc<ProcessOptions>,
    proc: Option<Proc>,
    /// Workers started by the whole adapter.
    started: Arc<AtomicU64>,
    /// What this thread rehearses while the adapter keeps warm, until
    /// when ([`Tuning::keep_warm`]).
    rehearsal: Option<Rehearsal>,
}

impl Slot {
    fn spawn(&self) -> Result<Proc, String> {
        let p = Proc::spawn(&self.opts)?;
        self.started.fetch_add(1, Ordering::SeqCst);
        Ok(p)
    }

    fn take(&mut self) -> Result<Proc, String> {
        match self.proc.take() {
            Some(p) if p.alive() => Ok(p),
            Some(_) => {
                // The prepared worker died while idle.
                metrics::counter!("worker_restarts_total", "engine" => self.opts.engine.clone())
                    .increment(1);
                self.spawn()
            }
            None => self.spawn(),
        }
    }

    /// Starts the next worker while nobody waits for it.
    fn prewarm(&mut self) {
        if self.proc.is_none() {
            self.proc = self.spawn().ok();
        }
    }

    /// Runs `request` on this thread's worker; `linger`: the worker polls
    /// for its next frame for a while after it ([`super::WORKER_LINGER`]).
    fn execute(
        &mut self,
        request: ExecutionRequest,
        tokio: &tokio::runtime::Handle,
        linger: bool,
        respond: impl FnOnce(ExecutionReport),
    ) {
        let mut proc = match self.take() {
            Ok(p) => p,
            Err(e) => {
                respond(ExecutionReport::failed(
                    &self.opts.engine,
                    ScriptError::internal(e),
                ));
                return;
            }
        };
        proc.linger = linger;
        let mut engine = RemoteEngine::new(proc);
        // Counted in flight until the report is ready, not through the
        // worker's tidying up (super::may_spin).
        let in_flight = super::remote_run();
        let out = run_script(&mut engine, &self.opts.engine, request, tokio);
        drop(in_flight);
        respond(out.report);
        self.keep_worker(engine);
        if let Some(p) = &mut self.proc {
            p.runs = p.runs.saturating_add(1);
            if self
                .opts
                .max_runs_per_worker
                .is_some_and(|max| p.runs >= max)
            {
                // Dropping it kills and reaps it; a fresh one follows.
                self.proc = None;
                metrics::counter!("worker_restarts_total", "engine" => self.opts.engine.clone())
                    .increment(1);
            }
        }
        self.prewarm();
    }

    /// Whether a rehearsal is due ([`WorkerPool::with_rehearsal`]).
    fn rehearsal_due(&mut self) -> bool {
        Rehearsal::due(&mut self.rehearsal)
    }

    /// Whether there is a rehearsal to run ahead of an anticipated run
    /// ([`WorkerPool::with_anticipation`]).
    fn rehearsal_ready(&mut self) -> bool {
        Rehearsal::ready(&mut self.rehearsal)
    }

    /// A rehearsal ahead of an anticipated run: the worker lingers after
    /// it (where the CPUs allow, as when kept awake), polling for the run
    /// that is due shortly instead of halting its CPU; the pool then lets
    /// the host thread poll for the run too where it has a CPU for it
    /// (`pool::anticipation_fits`: 2 CPUs with no run in flight), so that
    /// the run does not wait for the host thread's wake-up.
    fn rehearse_ahead(&mut self) {
        self.rehearse_lingering(true);
    }

    /// Drops the rehearsal plan: the host thread sleeps until its next
    /// run.
    fn forget_rehearsal(&mut self) {
        self.rehearsal = None;
    }

    /// Runs a rehearsal through this thread's worker, when one is due and
    /// the worker is there and alive: a run like any other on both sides
    /// of the boundary (the host's event loop, the frames, the worker's
    /// engine and its tidy-up), whose report nobody hears of. It is not
    /// counted against `max_runs_per_worker`. A worker that dies in it is
    /// replaced, as after a run.
    fn rehearse(&mut self) {
        let awake = self.rehearsal.as_ref().is_some_and(Rehearsal::awake);
        self.rehearse_lingering(awake);
    }

    /// [`Slot::rehearse`]; `linger`: the worker polls for its next frame
    /// after it.
    fn rehearse_lingering(&mut self, linger: bool) {
        let mut proc = match self.proc.take() {
            Some(p) if p.alive() => p,
            idle => {
                // None started, or dead: the next run replaces it (and
                // counts the restart); no rehearsal until then.
                self.proc = idle;
                self.rehearsal = None;
                return;
            }
        };
        let engine = &self.opts.engine;
        let Some((request, tokio)) = self.rehearsal.as_ref().map(|p| p.next(engine)) else {
            self.proc = Some(proc);
            return;
        };
        proc.linger = linger;
        let mut engine = RemoteEngine::new(proc);
        let in_flight = super::remote_run();
        crate::event_loop::rehearse(&mut engine, &self.opts.engine, request, &tokio);
        drop(in_flight);
        self.keep_worker(engine);
        self.prewarm();
    }

    /// Keeps the worker of a finished run (or rehearsal) for the next,
    /// once it is ready; one killed (deadline, cancel) or dead is counted
    /// as a restart, and a fresh one will replace it.
    fn keep_worker(&mut self, engine: RemoteEngine) {
        self.proc = engine.into_reusable(self.opts.start_timeout);
        if self.proc.is_none() {
            metrics::counter!("worker_restarts_total", "engine" => self.opts.engine.clone())
                .increment(1);
            tracing::info!(engine = %self.opts.engine, "worker process replaced after a kill or death");
        }
    }

    /// One request/answer exchange outside a run (check, global eval); the
    /// worker is killed if it takes longer than `limit`.
    fn ask(&mut self, msg: ToWorker, limit: Duration) -> Result<FromWorker, Asked> {
        let mut proc = self.take().map_err(Asked::Failed)?;
        let _watch = crate::watchdog::watch(
            Instant::now() + limit,
            CancellationToken::new(),
            proc.killer(),
        );
        let answer = proc.send(&msg).and_then(|()| proc.recv());
        match answer {
            Ok(a) => {
                self.proc = Some(proc);
                Ok(a)
            }
            Err(_) if proc.killed.load(Ordering::SeqCst) => Err(Asked::TimedOut),
            Err(e) => Err(Asked::Failed(format!(
                "the worker failed ({e}; {})",
                proc.death_note()
            ))),
        }
    }
}

/// Why [`Slot::ask`] got no answer.
#[derive(Debug)]
enum Asked {
    TimedOut,
    Failed(String),
}

/// Runs scripts of one engine in worker processes, one run per process at
/// a time, killed (SIGKILL) on deadline or cancel and replaced for the next
/// run. Tools, approvals and the tracker stay in the host.
#[derive(Debug, Clone)]
pub struct ProcessAdapter {
    info: EngineInfo,
    opts: Arc<ProcessOptions>,
    pool: Arc<WorkerPool<Slot>>,
    started: Arc<AtomicU64>,
    /// Whether host threads rehearse through their workers after each
    /// run ([`Tunable::tune`]); shared by clones.
    keep_warm: KeepWarm,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("warm", &self.proc.is_some())
            .finish()
    }
}

impl ProcessAdapter {
    /// `engine` is the in-process adapter's own description (name, version,
    /// capabilities); behind the boundary every engine can be stopped and
    /// held to its memory limit.
    pub fn new(engine: EngineInfo, opts: ProcessOptions) -> Self {
        Self::build(engine, opts, false)
    }

    /// [`ProcessAdapter::new`]; `long_private_tidy_up` as the engine's
    /// descriptor says ([`EngineDescriptor::with_long_private_tidy_up`]).
    fn build(engine: EngineInfo, opts: ProcessOptions, long_private_tidy_up: bool) -> Self {
        let opts = Arc::new(opts);
        let factory_opts = opts.clone();
        let started = Arc::new(AtomicU64::new(0));
        let factory_started = started.clone();
        let info = EngineInfo {
            capabilities: Capabilities {
                interrupt: true,
                memory_limit: true,
                hard_kill: true,
                // A worker that overflows its stack dies alone, and the
                // host reports StackOverflowError.
                stack_guard: true,
                ..engine.capabilities
            },
            isolation: Isolation::Process,
            ..engine
        };
        let keep_warm = KeepWarm::anticipating();
        ProcessAdapter {
            info,
            pool: Arc::new(
                WorkerPool::new(
                    &format!("harness-{}-process", opts.engine),
                    opts.max_workers,
                    HOST_THREAD_STACK_BYTES,
                    move || Slot {
                        opts: factory_opts.clone(),
                        proc: None,
                        started: factory_started.clone(),
                        rehearsal: None,
                    },
                )
                .with_rehearsal(Slot::rehearsal_due, Slot::rehearse, keep_warm.awake_flag())
                .with_anticipation(
                    Slot::rehearsal_ready,
                    Slot::rehearse_ahead,
                    Slot::forget_rehearsal,
                    keep_warm.anticipate_flag(),
                )
                // The host thread and its worker process.
                .with_cpus_per_run(2)
                .with_long_private_tidy_up(long_private_tidy_up),
            ),
            opts,
            started,
            keep_warm,
        }
    }

    /// Workers serving `engine`, after its process set-up hook has run on
    /// `opts` (see [`EngineDescriptor::with_process_setup`]).
    pub fn for_engine(engine: &EngineDescriptor, mut opts: ProcessOptions) -> Self {
        engine.prepare_process(&mut opts);
        Self::build(engine.info(), opts, engine.long_private_tidy_up)
    }

    /// Worker processes started so far (the first ones, replacements after
    /// kills and deaths, and recycling after `max_runs_per_worker`).
    pub fn workers_started(&self) -> u64 {
        self.started.load(Ordering::SeqCst)
    }

    /// Starts `n` workers now, so that the first runs find them warm.
    pub fn prewarm(&self, n: usize) {
        for _ in 0..n.min(self.opts.max_workers) {
            let _ = self.pool.submit(Slot::prewarm);
        }
    }
}

/// Tuned behind the boundary. Kept warm, the host thread rehearses a
/// trivial run through its worker process about every 0.8 ms while no run
/// comes (both sides' caches, and the worker's prepared context, stay
/// warm). Kept awake, the worker process polls for its next frame after
/// each run and rehearsal (`process::WORKER_LINGER`) on 2 or more CPUs
/// (one for it, one for its host thread and the caller), while a single
/// run is in flight; the host thread polls between rehearsals as well
/// only on a machine with CPUs for a run's two sides and its caller
/// besides that poller's (the pool decides, `can_stay_awake`: on 2, a
/// host-side poller held up the worker process). Anticipating, the host
/// thread rehearses through its worker process ahead of a run due
/// shortly, and the worker then polls for it on 2 CPUs or more; the host
/// thread polls as well while no other run is in flight there (the
/// anticipation window is short, unlike a keep-awake window).
impl Tunable for ProcessAdapter {
    fn tune(&self, tuning: Tuning) -> Tuned {
        self.keep_warm.tune(tuning, crate::spin::cores() >= 2)
    }

    fn rehearsals(&self) -> u64 {
        self.keep_warm.rehearsals()
    }
}

#[async_trait]
impl ScriptRuntimeAdapter for ProcessAdapter {
    fn info(&self) -> EngineInfo {
        self.info.clone()
    }

    async fn check_syntax(&self, source: &str) -> Result<(), ScriptError> {
        crate::body::Body::parse(source)?;
        let msg = ToWorker::Check {
            source: source.to_owned(),
        };
        let limit = self.opts.start_timeout;
        match self.pool.ask(move |s| s.ask(msg, limit)).await? {
            Ok(FromWorker::Checked { error: None }) => Ok(()),
            Ok(FromWorker::Checked { error: Some(e) }) => Err(e),
            Ok(other) => Err(ScriptError::internal(format!(
                "the worker answered a check with {other:?}"
            ))),
            Err(Asked::TimedOut) => Err(ScriptError::internal("the worker took too long to parse")),
            Err(Asked::Failed(e)) => Err(ScriptError::internal(e)),
        }
    }

    async fn execute(&self, mut request: ExecutionRequest) -> ExecutionReport {
        // Where it runs, for the run's span.
        request.limits.isolation = Some(crate::limits::Isolation::Process);
        // Kept warm: nothing is cloned for a run of an adapter that is not.
        let warm = self.keep_warm.for_run(self.pool.steady());
        self.pool
            .execute(
                &self.opts.engine,
                request,
                move |s, request, tokio, reply| {
                    // Kept awake: the worker polls between rehearsals.
                    let linger = warm.as_ref().is_some_and(KeepWarm::awake);
                    let rehearsal = warm.map(|warm| Rehearsal::after(&request, warm, tokio));
                    s.execute(request, tokio, linger, |report| reply.send(report));
                    s.rehearsal = rehearsal.map(Rehearsal::starting_now);
                },
            )
            .await
    }

    async fn eval_global(&self, eval: GlobalEval) -> GlobalEvalOutcome {
        // The worker's engine may not stop itself: kill it at the deadline.
        let limit = Duration::from_millis(eval.timeout_ms.saturating_add(100));
        match self
            .pool
            .ask(move |s| s.ask(ToWorker::EvalGlobal { eval }, limit))
            .await
        {
            Ok(Ok(FromWorker::Global { outcome })) => outcome,
            Ok(Ok(other)) => GlobalEvalOutcome::Unsupported(format!("unexpected answer {other:?}")),
            Ok(Err(Asked::TimedOut)) => GlobalEvalOutcome::TimedOut { prints: Vec::new() },
            Ok(Err(Asked::Failed(e))) => GlobalEvalOutcome::Unsupported(e),
            Err(e) => GlobalEvalOutcome::Unsupported(e.message),
        }
    }
}
