//! How the host starts and caps worker processes ([`ProcessOptions`]):
//! plain data that the process boundary and an engine's descriptor both
//! read. Published as [`crate::process::ProcessOptions`].

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

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
    /// [`serve_if_requested`](crate::process::serve_if_requested) first thing (see
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
    /// Set by [`crate::process::ProcessAdapter::for_session`]: every
    /// worker serves one session of at most this many bytes.
    pub(crate) session_memory_bytes: Option<u64>,
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
            session_memory_bytes: None,
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
