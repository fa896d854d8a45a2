//! The workspace sandbox: a session directory `<root>/<session_id>`,
//! mounted as `/app` (and nothing else), where a script runs as
//! `quickjs /app/user_code.js` and may read and write files through
//! `require('fs')`. Each run reports what it printed (capped), how it
//! ended, what it cost, and which files it created, modified or deleted.
//!
//! ```no_run
//! use harness_wasi::{Sandbox, SandboxPolicy};
//!
//! let sandbox = Sandbox::new(SandboxPolicy::default(), "session-1", "/tmp/workspaces")?;
//! let result = sandbox.execute("require('fs').writeFileSync('out.txt', 'hi'); console.log('done')")?;
//! assert!(result.success);
//! assert_eq!(result.stdout, "done\n");
//! assert_eq!(result.files_created, vec!["out.txt".to_owned()]);
//! # Ok::<(), harness_wasi::SandboxError>(())
//! ```

use crate::module::{self, fuel_used, new_store, Entry, ModuleOptions, StopWhen};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::AsyncWrite;
use wasmtime::Trap;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

/// The script's file name in the session directory.
pub const USER_CODE_FILE: &str = "user_code.js";
/// The session's bookkeeping file.
pub const METADATA_FILE: &str = ".metadata.json";
/// What the guest sees as its working directory.
pub const GUEST_ROOT: &str = "/app";

/// What a sandboxed run may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxPolicy {
    /// Fuel (about one unit per wasm instruction); `None` is unlimited.
    pub fuel: Option<u64>,
    /// Linear memory of the whole guest (QuickJS heap, stack and data).
    pub memory_bytes: u64,
    /// Stdout kept; the rest is dropped and `stdout_truncated` set.
    pub stdout_max_bytes: usize,
    /// Stderr kept; the rest is dropped and `stderr_truncated` set.
    pub stderr_max_bytes: usize,
    /// Wall-clock limit, enforced with wasmtime's epoch interruption.
    pub timeout_ms: u64,
    /// Set `NODE_ENV=production` in the guest (its only variable).
    pub node_env_production: bool,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        SandboxPolicy {
            fuel: Some(10_000_000_000),
            memory_bytes: 128 << 20,
            stdout_max_bytes: 64 << 10,
            stderr_max_bytes: 64 << 10,
            timeout_ms: 30_000,
            node_env_production: true,
        }
    }
}

/// How a run ended, beyond its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    /// The program exited (by itself or with `process.exit`-like exits).
    Exited,
    /// Fuel ran out.
    FuelExhausted,
    /// The wall-clock limit passed.
    Timeout,
    /// Linear memory hit the policy's cap.
    MemoryLimit,
    /// The wasm stack overflowed.
    StackOverflow,
    /// Any other trap.
    Trap,
}

/// What a run reports besides its output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxMetadata {
    /// Always `"javascript"`.
    pub runtime: String,
    pub session_id: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub termination: Termination,
    /// SHA-256 of the guest binary that ran.
    pub wasm_sha256: String,
    pub engine_version: String,
    pub policy: SandboxPolicy,
}

/// The result of one sandboxed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxResult {
    /// Exit code 0 and no trap.
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
    /// The program's exit status; 1 when the host stopped it (fuel,
    /// deadline, memory, trap: see `metadata.termination`).
    pub exit_code: i32,
    pub fuel_consumed: u64,
    /// Peak linear memory of the guest.
    pub memory_used_bytes: u64,
    pub duration_ms: f64,
    /// The session directory on the host.
    pub workspace_path: PathBuf,
    /// Files the run created, relative to the session directory, sorted.
    pub files_created: Vec<String>,
    /// Files whose content changed.
    pub files_modified: Vec<String>,
    /// Files the run removed.
    pub files_deleted: Vec<String>,
    pub metadata: SandboxMetadata,
}

/// Why a run could not happen at all.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Load(#[from] module::LoadError),
    #[error("invalid session id {0:?}: use 1-128 letters, digits, '.', '_' or '-', not starting with '.'")]
    InvalidSession(String),
    #[error("workspace {path}: {source}")]
    Workspace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the sandbox could not run the guest: {0}")]
    Internal(String),
}

/// A session's sandbox. Cheap to create; the guest module is compiled
/// once per process.
#[derive(Debug, Clone)]
pub struct Sandbox {
    policy: SandboxPolicy,
    session_id: String,
    workspace_root: PathBuf,
    module: ModuleOptions,
}

fn valid_session(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl Sandbox {
    /// A sandbox for `session_id` under `workspace_root`, running the
    /// default guest (`bin/quickjs.wasm`, see [`crate::default_wasm_path`]).
    pub fn new(
        policy: SandboxPolicy,
        session_id: impl Into<String>,
        workspace_root: impl Into<PathBuf>,
    ) -> Result<Self, SandboxError> {
        let session_id = session_id.into();
        if !valid_session(&session_id) {
            return Err(SandboxError::InvalidSession(session_id));
        }
        Ok(Sandbox {
            policy,
            session_id,
            workspace_root: workspace_root.into(),
            module: ModuleOptions::cached(),
        })
    }

    /// Runs another guest binary (cached next to it).
    pub fn with_wasm_binary_path(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        self.module = ModuleOptions {
            cache_dir: path.parent().map(Path::to_path_buf),
            wasm_path: Some(path),
            bounded_memory: false,
            preinit: true,
        };
        self
    }

    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// `<workspace_root>/<session_id>`.
    pub fn workspace_path(&self) -> PathBuf {
        self.workspace_root.join(&self.session_id)
    }

    /// Whether `code` parses as a program, without running anything.
    /// False also when the guest cannot be loaded.
    pub fn validate_code(&self, code: &str) -> bool {
        match module::load_as(&self.module, Entry::Program) {
            Ok(loaded) => crate::check_source(&loaded, code, crate::CHECK_PROGRAM).is_ok(),
            Err(_) => false,
        }
    }

    /// Writes `code` to `user_code.js` in the session directory and runs it
    /// as `quickjs /app/user_code.js`.
    pub fn execute(&self, code: &str) -> Result<SandboxResult, SandboxError> {
        let loaded = module::load_as(&self.module, Entry::Program)?;
        let dir = self.workspace_path();
        let io = |source| SandboxError::Workspace {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        let dir = dir.canonicalize().map_err(io)?;
        let io = |source| SandboxError::Workspace {
            path: dir.clone(),
            source,
        };
        // One run at a time per session, across threads and processes:
        // runs share `user_code.js` and `.metadata.json`.
        let _session = lock_session(&dir).map_err(io)?;
        tracing::info!(
            target: "harness::sandbox",
            event = "start",
            session_id = %self.session_id,
            policy = ?self.policy,
            "sandbox run starting"
        );
        let before = snapshot(&dir);
        write_file(&dir.join(USER_CODE_FILE), code.as_bytes()).map_err(io)?;

        let started = Instant::now();
        let run = run_guest(&loaded, &dir, &self.policy)?;
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;

        let after = snapshot(&dir);
        let (files_created, files_modified, files_deleted) = diff(&before, &after);
        let exited_ok = run.termination == Termination::Exited && run.exit_code == 0;
        let mut stderr = run.stderr;
        if let Some(note) = termination_note(run.termination, &self.policy) {
            if !stderr.is_empty() && !stderr.ends_with('\n') {
                stderr.push('\n');
            }
            stderr.push_str(&note);
        }
        if run.termination == Termination::FuelExhausted {
            tracing::warn!(
                target: "harness::sandbox",
                event = "fuel_exhaustion",
                session_id = %self.session_id,
                policy = ?self.policy,
                fuel_consumed = run.fuel_consumed,
                "sandbox run ran out of fuel"
            );
        }
        let result = SandboxResult {
            success: exited_ok,
            stdout: run.stdout,
            stderr,
            exit_code: run.exit_code,
            fuel_consumed: run.fuel_consumed,
            memory_used_bytes: run.memory_used_bytes,
            duration_ms,
            workspace_path: dir.clone(),
            files_created,
            files_modified,
            files_deleted,
            metadata: SandboxMetadata {
                runtime: "javascript".to_owned(),
                session_id: self.session_id.clone(),
                stdout_truncated: run.stdout_truncated,
                stderr_truncated: run.stderr_truncated,
                termination: run.termination,
                wasm_sha256: loaded.sha256.clone(),
                engine_version: crate::QUICKJS_VERSION.to_owned(),
                policy: self.policy.clone(),
            },
        };
        tracing::info!(
            target: "harness::sandbox",
            event = "completion",
            session_id = %self.session_id,
            policy = ?self.policy,
            success = result.success,
            exit_code = result.exit_code,
            termination = ?result.metadata.termination,
            fuel_consumed = result.fuel_consumed,
            memory_used_bytes = result.memory_used_bytes,
            duration_ms = result.duration_ms,
            "sandbox run finished"
        );
        write_metadata(&dir, &self.session_id, &result).map_err(io)?;
        Ok(result)
    }
}

/// What the message in stderr says when the host stopped the program.
fn termination_note(t: Termination, policy: &SandboxPolicy) -> Option<String> {
    Some(match t {
        Termination::Exited => return None,
        Termination::FuelExhausted => format!(
            "Error: out of fuel: the script used its whole budget of {} fuel units\n",
            policy.fuel.unwrap_or(u64::MAX)
        ),
        Termination::Timeout => format!(
            "Error: timeout: the script ran past its limit of {} ms\n",
            policy.timeout_ms
        ),
        Termination::MemoryLimit => format!(
            "Error: out of memory: the script reached its limit of {} bytes\n",
            policy.memory_bytes
        ),
        Termination::StackOverflow => "Error: stack overflow\n".to_owned(),
        Termination::Trap => "Error: the script's engine trapped\n".to_owned(),
    })
}

/// One guest run's raw outcome.
struct GuestRun {
    stdout: String,
    stderr: String,
    stdout_truncated: bool,
    stderr_truncated: bool,
    exit_code: i32,
    termination: Termination,
    fuel_consumed: u64,
    memory_used_bytes: u64,
}

/// How long past its deadline a run waits for a guest that does not stop.
const STUCK_GRACE: Duration = Duration::from_millis(500);

/// Stack of the threads sandboxed guests run on.
const RUN_THREAD_STACK: usize = 16 << 20;

/// Runs `_start` with `/app` preopened, on a runner thread (wasmtime's
/// synchronous WASI must not run inside an async runtime), under the
/// process watchdog's deadline.
fn run_guest(
    loaded: &Arc<module::Loaded>,
    dir: &Path,
    policy: &SandboxPolicy,
) -> Result<GuestRun, SandboxError> {
    let stdout = CappedPipe::new(policy.stdout_max_bytes);
    let stderr = CappedPipe::new(policy.stderr_max_bytes);
    let mut wasi = WasiCtxBuilder::new();
    wasi.args(&["quickjs", "/app/user_code.js"])
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .allow_blocking_current_thread(true)
        .preopened_dir(dir, GUEST_ROOT, FsPerms::ReadWrite)
        .map_err(|e| SandboxError::Internal(format!("cannot preopen {}: {e}", dir.display())))?;
    if policy.node_env_production {
        wasi.env("NODE_ENV", "production");
    }
    let wasi = wasi.build_p1();
    let deadline = Instant::now() + Duration::from_millis(policy.timeout_ms);
    let stop = StopWhen {
        deadline: Some(deadline),
        cancel: None,
    };
    let memory = usize::try_from(policy.memory_bytes).unwrap_or(usize::MAX);
    let fuel = policy.fuel;
    let loaded = loaded.clone();

    // The process-wide watchdog moves the epoch at the deadline (the store
    // then sees its deadline passed and stops); a timer thread per call
    // cost a spawn and a join, about 50 µs of each `execute` on a small VM.
    let engine = loaded.engine.clone();
    let watch = harness_core::watchdog::watch(
        deadline,
        harness_core::CancellationToken::new(),
        move || engine.increment_epoch(),
    );

    let (reply, answer) = std::sync::mpsc::sync_channel(1);
    let job = Box::new(move || {
        let mut store = new_store(&loaded.engine, wasi, memory, fuel, stop);
        let result = loaded.pre.instantiate(&mut store).and_then(|instance| {
            let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
            start.call(&mut store, ())
        });
        let data = store.data();
        let (exit_code, termination) = match result {
            Ok(()) => (0, Termination::Exited),
            Err(e) => classify_exit(&e, data.limiter.refused),
        };
        let _ = reply.send((
            exit_code,
            termination,
            fuel_used(&store, fuel),
            data.limiter.peak as u64,
        ));
        // The instance goes back to wasmtime's pool after the answer, off
        // the caller's path. A panic there must not end the runner, which
        // the caller has already put back for the next run.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(store)));
    });
    let runner = runners::start(job).map_err(|e| SandboxError::Internal(e.to_string()))?;
    let wait = deadline.saturating_duration_since(Instant::now()) + STUCK_GRACE;
    let answered = answer.recv_timeout(wait);
    let answered_in_time = answered.is_ok();
    drop(watch);
    let (exit_code, termination, fuel_consumed, memory_used_bytes) = match answered {
        Ok(answer) => answer,
        // Stuck in a system call the epoch cannot interrupt (an open that
        // waits, say): the run ends without it. The thread is let go; when
        // the call returns, its first instruction past the deadline traps.
        Err(RecvTimeoutError::Timeout) => (1, Termination::Timeout, 0, 0),
        Err(RecvTimeoutError::Disconnected) => {
            return Err(SandboxError::Internal("the sandbox thread panicked".into()))
        }
    };
    // A thread that overflowed its stack keeps those pages; let it go.
    if termination != Termination::StackOverflow && answered_in_time {
        runner.release();
    }
    let (stdout, stdout_truncated) = stdout.take();
    let (stderr, stderr_truncated) = stderr.take();
    Ok(GuestRun {
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        exit_code,
        termination,
        fuel_consumed,
        memory_used_bytes,
    })
}

/// The exit status and reason of a run that did not return normally.
fn classify_exit(e: &wasmtime::Error, memory_refused: bool) -> (i32, Termination) {
    if let Some(exit) = e.downcast_ref::<I32Exit>() {
        return (exit.0, Termination::Exited);
    }
    let t = match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => Termination::FuelExhausted,
        Some(Trap::Interrupt) => Termination::Timeout,
        Some(Trap::StackOverflow) => Termination::StackOverflow,
        _ if memory_refused => Termination::MemoryLimit,
        _ => Termination::Trap,
    };
    (1, t)
}

/// The threads sandboxed programs run on, kept between runs: spawning one
/// per run (a 16 MiB stack, wasmtime's signal stack) and joining it cost
/// about 50 µs of each `execute` on a small VM. At most [`runners::KEEP`]
/// wait idle, each for at most [`runners::IDLE_FOR`]; a run never waits
/// for another: with none idle, a new thread starts.
mod runners {
    use super::RUN_THREAD_STACK;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
    use std::sync::{Mutex, MutexGuard, PoisonError};
    use std::time::Duration;

    /// One run's work: it sends its own answer.
    pub(super) type Job = Box<dyn FnOnce() + Send>;

    /// Most threads kept waiting for the next run.
    pub(super) const KEEP: usize = 4;
    /// How long an idle thread waits before it ends.
    pub(super) const IDLE_FOR: Duration = Duration::from_secs(30);

    /// A runner thread, taken for one run, or idle.
    pub(super) struct Runner {
        id: u64,
        jobs: Sender<Job>,
    }

    static IDLE: Mutex<Vec<Runner>> = Mutex::new(Vec::new());
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);

    fn idle() -> MutexGuard<'static, Vec<Runner>> {
        IDLE.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Hands `job` to the runner that last went idle, or to a new thread.
    pub(super) fn start(mut job: Job) -> std::io::Result<Runner> {
        loop {
            let Some(runner) = idle().pop() else { break };
            match runner.jobs.send(job) {
                Ok(()) => return Ok(runner),
                // Not expected (a runner leaves the list before it ends),
                // but then the job goes to another.
                Err(mpsc::SendError(back)) => job = back,
            }
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (jobs, inbox) = mpsc::channel();
        // The receiver is alive: it moves into the thread below.
        let _ = jobs.send(job);
        std::thread::Builder::new()
            .name("harness-sandbox".into())
            .stack_size(RUN_THREAD_STACK)
            .spawn(move || serve(id, inbox))?;
        Ok(Runner { id, jobs })
    }

    impl Runner {
        /// Makes the runner available to the next run (it may still be
        /// dropping this run's instance; that run's job then waits for
        /// it). Past [`KEEP`] idle, the thread ends after its job.
        pub(super) fn release(self) {
            let mut idle = idle();
            if idle.len() < KEEP {
                idle.push(self);
            }
        }
    }

    /// A runner thread: runs jobs until no one can send it more, or it
    /// has waited idle for [`IDLE_FOR`], or a job panicked.
    fn serve(id: u64, inbox: Receiver<Job>) {
        loop {
            let job = match inbox.recv_timeout(IDLE_FOR) {
                Ok(job) => job,
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {
                    let mut idle = idle();
                    match idle.iter().position(|r| r.id == id) {
                        // Still idle: no one can hand it a job from now on.
                        Some(at) => {
                            idle.remove(at);
                            return;
                        }
                        // Taken meanwhile: its job is on the way.
                        None => continue,
                    }
                }
            };
            // A job that panics has not answered, so its caller keeps
            // the runner from the idle list; the thread ends.
            if catch_unwind(AssertUnwindSafe(job)).is_err() {
                return;
            }
        }
    }
}

/// Captured output, capped: what passes the cap is dropped and flagged,
/// and the guest is never told (its writes succeed).
#[derive(Clone)]
struct CappedPipe {
    inner: Arc<Mutex<(Vec<u8>, usize)>>,
    truncated: Arc<AtomicBool>,
}

impl CappedPipe {
    fn new(cap: usize) -> Self {
        CappedPipe {
            inner: Arc::new(Mutex::new((Vec::new(), cap))),
            truncated: Arc::new(AtomicBool::new(false)),
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (buf, cap) = &mut *g;
        let room = cap.saturating_sub(buf.len());
        if bytes.len() > room {
            self.truncated.store(true, Ordering::Relaxed);
        }
        buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The text kept (a UTF-8 sequence cut by the cap is replaced) and
    /// whether anything was dropped.
    fn take(&self) -> (String, bool) {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        (
            String::from_utf8_lossy(&g.0).into_owned(),
            self.truncated.load(Ordering::Relaxed),
        )
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A file's content hash: a rewrite with the same bytes is no change.
type FileState = [u8; 32];

/// Regular files under `dir` (symlinks not followed), by relative path;
/// the script file and the metadata file are left out.
fn snapshot(dir: &Path) -> BTreeMap<String, FileState> {
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_map(Result::ok)
    {
        if !entry.file_type().is_file() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(dir) else {
            continue;
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if rel == USER_CODE_FILE || rel == METADATA_FILE {
            continue;
        }
        let mut hash = Sha256::new();
        let Some(mut file) = open_regular(entry.path()) else {
            continue;
        };
        if std::io::copy(&mut file, &mut hash).is_ok() {
            out.insert(rel, hash.finalize().into());
        }
    }
    out
}

/// (created, modified, deleted), each sorted.
fn diff(
    before: &BTreeMap<String, FileState>,
    after: &BTreeMap<String, FileState>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let created = after
        .keys()
        .filter(|k| !before.contains_key(*k))
        .cloned()
        .collect();
    let modified = after
        .iter()
        .filter(|(k, v)| before.get(*k).is_some_and(|b| b != *v))
        .map(|(k, _)| k.clone())
        .collect();
    let deleted = before
        .keys()
        .filter(|k| !after.contains_key(*k))
        .cloned()
        .collect();
    (created, modified, deleted)
}

/// An exclusive `flock` on the session directory itself (nothing a
/// program can replace or hold: the guest has no `flock`), waited for,
/// released when the returned handle is dropped.
#[cfg(unix)]
#[allow(unsafe_code)]
fn lock_session(dir: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd as _;
    let handle = std::fs::File::open(dir)?;
    loop {
        // SAFETY: `flock` takes a descriptor and a flag and touches no
        // memory; the descriptor is `handle`'s, open for this call.
        if unsafe { libc::flock(handle.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(handle);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Elsewhere runs of one session are not serialised.
#[cfg(not(unix))]
fn lock_session(dir: &Path) -> std::io::Result<()> {
    let _ = dir;
    Ok(())
}

/// The session's `.metadata.json`: when it was created and last updated,
/// how many runs it had, and how the last one went.
///
/// A plain file from an earlier run is rewritten in place. Replacing it by
/// a rename is atomic, but on ext4 a rename over an existing file starts
/// writing the new one to disk (`auto_da_alloc`): about 250 µs of every
/// `execute` on a small VM, for a file that only sums up the last run. A
/// missing file, or anything a program left in its place (a symlink, a
/// second name for another file), is replaced by a fresh file and never
/// read or written through.
fn write_metadata(dir: &Path, session_id: &str, result: &SandboxResult) -> std::io::Result<()> {
    let path = dir.join(METADATA_FILE);
    let mut plain = open_plain(&path, true);
    let old: serde_json::Value = plain
        .as_mut()
        .and_then(|(file, _)| {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).ok()?;
            serde_json::from_slice(&bytes).ok()
        })
        .unwrap_or_default();
    let now = now_rfc3339();
    let runs = old.get("runs").and_then(|v| v.as_u64()).unwrap_or(0) + 1;
    let created = old
        .get("created_at")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| now.clone());
    let meta = serde_json::json!({
        "session_id": session_id,
        "runtime": "javascript",
        "created_at": created,
        "updated_at": now,
        "runs": runs,
        "last_run": {
            "success": result.success,
            "exit_code": result.exit_code,
            "termination": result.metadata.termination,
            "duration_ms": result.duration_ms,
            "fuel_consumed": result.fuel_consumed,
            "memory_used_bytes": result.memory_used_bytes,
            "files_created": result.files_created,
            "files_modified": result.files_modified,
            "files_deleted": result.files_deleted,
        },
    });
    let text = serde_json::to_string_pretty(&meta).map_err(std::io::Error::other)?;
    if let Some((file, len)) = plain {
        return rewrite(&file, len, text.as_bytes());
    }
    let tmp = dir.join(".metadata.json.tmp");
    replace(&tmp, text.as_bytes())?;
    std::fs::rename(&tmp, &path)
}

/// Writes `bytes` as the whole content of the file at `path`, without
/// following whatever a program left there: a plain file is rewritten in
/// place (a new file costs the file system an inode: about 25 µs here);
/// anything else (say `user_code.js` -> a host file) is replaced.
fn write_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match open_plain(path, false) {
        Some((file, len)) => rewrite(&file, len, bytes),
        None => replace(path, bytes),
    }
}

/// `path` opened for writing (and reading) if it is a plain file: a
/// regular file with no other name, reached without following a symlink
/// (`O_NOFOLLOW`) and without blocking on a FIFO (`O_NONBLOCK`). `None`
/// for anything else, missing included. With its length.
#[cfg(unix)]
fn open_plain(path: &Path, read: bool) -> Option<(std::fs::File, u64)> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let file = std::fs::OpenOptions::new()
        .read(read)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    (meta.file_type().is_file() && meta.nlink() == 1).then_some((file, meta.len()))
}

/// `path` opened for reading if it is (still) a regular file: not
/// followed if it became a link, never waited on if it became a FIFO.
#[cfg(unix)]
fn open_regular(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

#[cfg(not(unix))]
fn open_regular(path: &Path) -> Option<std::fs::File> {
    std::fs::File::open(path).ok()
}

/// Elsewhere every file is replaced.
#[cfg(not(unix))]
fn open_plain(_path: &Path, _read: bool) -> Option<(std::fs::File, u64)> {
    None
}

/// Makes `bytes` the whole content of `file`, which is `len` bytes long.
/// It is cut only when it was longer: a truncation costs ext4 a journal
/// update even to the same length.
fn rewrite(file: &std::fs::File, len: u64, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = file;
    file.seek(std::io::SeekFrom::Start(0))?;
    file.write_all(bytes)?;
    let written = bytes.len() as u64;
    if written < len {
        file.set_len(written)?;
    }
    Ok(())
}

/// Writes a new file at `path`, replacing whatever was there without
/// following it: a symlink is removed, not written through.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(bytes)
}

fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}
