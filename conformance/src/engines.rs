//! The adapters a suite runs on ([`SuiteEngines`]): any engine thread,
//! one thread for the cross-run cases, and one kept warm.

use super::*;

/// The adapters a suite runs on: one engine, in one isolation. Built
/// with [`SuiteEngines::new`] or [`SuiteEngines::for_engine`].
#[derive(Clone)]
#[non_exhaustive]
pub struct SuiteEngines {
    /// Runs every case (the cross-run cases too when `single` is `None`).
    pub any: Arc<dyn ScriptRuntimeAdapter>,
    /// The same engine with one engine thread (in process) or one worker
    /// process ([`single_engine`]): the cross-run cases run on it, so that
    /// both runs of a pair certainly meet the same engine state. Without
    /// it they run on `any`, where the pause between steps and the pools'
    /// choice of the most recently idle thread make that likely, not
    /// certain.
    pub single: Option<Arc<dyn ScriptRuntimeAdapter>>,
    /// The same engine with one engine thread (or one worker process)
    /// kept warm ([`harness_core::Tuning::keep_warm`], [`WARM_WINDOW`]),
    /// where the engine keeps warm: a cross-run case that passed on
    /// `single` runs again on it, with rehearsals between its steps
    /// (every other such case kept awake too,
    /// [`harness_core::Tuning::keep_awake`]).
    pub warm: Option<Arc<dyn ScriptRuntimeAdapter>>,
    /// Makes one session's engine of the same engine and isolation, where
    /// the engine has sessions: every cross-run case that passed runs
    /// again with its plants in one session and its probe in another
    /// session and outside any ([`SessionMaker`]).
    pub sessions: Option<SessionMaker>,
}

/// Makes a fresh session's engine (`None`: it could not be made).
pub type SessionMaker = Arc<dyn Fn() -> Option<Arc<dyn ScriptRuntimeAdapter>> + Send + Sync>;

/// How much heap a session of the suite may hold.
const SESSION_BYTES: u64 = 256 << 20;

/// How long the `warm` engine of a suite keeps warm after each run:
/// longer than the pause between a case's steps (25 ms), so that
/// the engine thread rehearses between them.
pub const WARM_WINDOW: Duration = Duration::from_millis(100);

impl std::fmt::Debug for SuiteEngines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SuiteEngines")
            .field("engine", &self.any.info().name)
            .field("single", &self.single.is_some())
            .field("warm", &self.warm.is_some())
            .finish()
    }
}

impl SuiteEngines {
    /// Every case on `any`, cross-run cases included.
    pub fn new(any: Arc<dyn ScriptRuntimeAdapter>) -> Self {
        SuiteEngines {
            any,
            single: None,
            warm: None,
            sessions: None,
        }
    }

    /// `engine` in `isolation`, with its one-thread twin for the
    /// cross-run cases ([`single_engine`]); worker processes are started
    /// from `opts` ([`ProcessOptions::current_exe`]).
    pub fn for_engine(
        engine: &EngineDescriptor,
        isolation: Isolation,
        opts: impl Fn(&str) -> std::io::Result<ProcessOptions>,
    ) -> std::io::Result<Self> {
        let any = match isolation {
            Isolation::InProcess => engine.in_process(),
            Isolation::Process => started(engine, opts(engine.name)?),
        };
        let warm = single_engine(engine, isolation, &opts)?.filter(|a| {
            a.tune(harness_core::Tuning::default().with_keep_warm(WARM_WINDOW))
                .keeps_warm
        });
        let sessions: Option<SessionMaker> = match isolation {
            _ if !engine.has_sessions() => None,
            Isolation::InProcess => {
                let engine = engine.clone();
                Some(Arc::new(move || {
                    engine
                        .in_process_session(harness_core::session::SessionSpec::new(SESSION_BYTES))
                }))
            }
            Isolation::Process => {
                let (engine, o) = (engine.clone(), opts(engine.name)?);
                Some(Arc::new(move || {
                    let spec = harness_core::session::SessionSpec::new(SESSION_BYTES);
                    ProcessAdapter::for_session(&engine, o.clone(), spec)
                        .map(|a| Arc::new(a) as Arc<dyn ScriptRuntimeAdapter>)
                }))
            }
        };
        Ok(SuiteEngines {
            any,
            single: single_engine(engine, isolation, opts)?,
            warm,
            sessions,
        })
    }

    /// The adapter `case` runs on.
    pub(super) fn for_case(&self, case: &Case) -> &dyn ScriptRuntimeAdapter {
        match &self.single {
            Some(single) if case.is_cross_run() => single.as_ref(),
            _ => self.any.as_ref(),
        }
    }
}

/// `engine` in `isolation` with one engine thread, or behind the process
/// boundary one worker process (started from `opts`), so that runs one
/// after another all meet the same engine state; `None` when the engine's
/// descriptor cannot size its in-process pool
/// ([`EngineDescriptor::with_in_process_threads`]).
pub fn single_engine(
    engine: &EngineDescriptor,
    isolation: Isolation,
    opts: impl FnOnce(&str) -> std::io::Result<ProcessOptions>,
) -> std::io::Result<Option<Arc<dyn ScriptRuntimeAdapter>>> {
    Ok(match isolation {
        Isolation::InProcess => engine.in_process_with_threads(1),
        Isolation::Process => {
            let mut o = opts(engine.name)?;
            o.max_workers = 1;
            Some(started(engine, o))
        }
    })
}

/// Workers serving `engine` from `opts`, one started now.
pub(super) fn started(
    engine: &EngineDescriptor,
    opts: ProcessOptions,
) -> Arc<dyn ScriptRuntimeAdapter> {
    let adapter = ProcessAdapter::for_engine(engine, opts);
    adapter.prewarm(1);
    Arc::new(adapter)
}
