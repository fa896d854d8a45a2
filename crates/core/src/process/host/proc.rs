//! One worker process from the host's side ([`Proc`]): started, spoken
//! to through its pipes and rings, killed and reaped.

use super::*;

/// One worker process. Dropping it kills and reaps the process.
pub(super) struct Proc {
    /// The worker's process id.
    pub(super) pid: u32,
    pub(super) child: Arc<Mutex<Child>>,
    /// Frames from the worker's stdout; frames to its stdin (a pipe, or
    /// with rings a Unix socket).
    pub(super) link: Link<ChildStdout, ToWorkerPipe>,
    pub(super) stderr: Option<ChildStderr>,
    /// Set by the host just before it kills the worker.
    pub(super) killed: Arc<AtomicBool>,
    /// Runs this worker has served.
    pub(super) runs: u32,
    /// The config and limits of the last `Run` sent, which the worker
    /// keeps: the next `Run` carries only what changed.
    pub(super) sent_config: String,
    pub(super) sent_limits: Option<Limits>,
    /// Whether the next `Run` tells the worker to linger after it (kept
    /// warm and awake, [`crate::process::WORKER_LINGER`]).
    pub(super) linger: bool,
}

/// The host's end of a worker's stdin: a pipe, or with rings a Unix
/// socket (`ring`'s module docs).
#[cfg(unix)]
pub(super) type ToWorkerPipe = std::fs::File;
#[cfg(not(unix))]
pub(super) type ToWorkerPipe = std::process::ChildStdin;

impl Proc {
    pub(super) fn spawn(opts: &ProcessOptions) -> Result<Proc, String> {
        crate::process::sys::ignore_sigpipe();
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
                    crate::process::ring::Region::create().ok()?,
                    crate::process::ring::socket_pair().ok()?,
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
            session_memory_bytes: opts.session_memory_bytes,
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
                    proc.link
                        .use_rings(crate::process::ring::Rings::host(region));
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

    pub(super) fn send(&mut self, msg: &ToWorker) -> io::Result<()> {
        self.link.send(msg)
    }

    /// A `Run` for this worker: the config as a delta on the last one it
    /// was sent, and the limits left out when they are the same (a trivial
    /// run's frame shrinks from about 1.2 KB to about 100 bytes, and
    /// neither side escapes or parses the config again). Both ends keep
    /// the last ones for as long as this worker lives.
    pub(super) fn run_message(
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
        let (config, config_delta) = match crate::process::config_delta(&self.sent_config, &config)
        {
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
        let spin = crate::process::may_spin();
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

    pub(super) fn recv(&mut self) -> io::Result<FromWorker> {
        self.link.recv(false)
    }

    /// The worker's next message within a run's exchange (or its `Ready`
    /// after `Finish`), where it usually answers in microseconds: spin for
    /// it first while the machine has CPUs to spare ([`crate::process::may_spin`]).
    pub(super) fn recv_in_run(&mut self) -> io::Result<FromWorker> {
        self.link.recv(crate::process::may_spin())
    }

    /// Kills the worker (from any thread).
    pub(super) fn killer(&self) -> impl FnOnce() + Send + 'static {
        let child = self.child.clone();
        let killed = self.killed.clone();
        move || {
            killed.store(true, Ordering::SeqCst);
            if let Ok(mut c) = child.lock() {
                kill_tree(&mut c);
            }
        }
    }

    pub(super) fn alive(&self) -> bool {
        self.child
            .lock()
            .map(|mut c| matches!(c.try_wait(), Ok(None)))
            .unwrap_or(false)
    }

    /// Waits for the dead worker and says why it died.
    /// Waits for the worker to exit, killing it if it has not within
    /// `grace`. The lock is never held while waiting: the watchdog thread
    /// takes it to kill workers.
    pub(super) fn reap(&self, grace: Duration) -> Option<ExitStatus> {
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

    pub(super) fn death_note(&self) -> String {
        match self.reap(Duration::from_millis(200)) {
            Some(s) => describe_exit(s),
            None => "its status is unknown".to_owned(),
        }
    }

    /// The end of what the dead worker wrote to stderr (at most 8 KiB).
    pub(super) fn last_words(&mut self) -> String {
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
    pub(super) fn death_fault(&mut self, grace: Duration) -> EngineFault {
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
pub(super) fn kill_tree(c: &mut Child) {
    crate::process::sys::kill_group(c.id());
    let _ = c.kill();
}

pub(super) fn describe_exit(s: ExitStatus) -> String {
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
