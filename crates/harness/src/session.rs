//! Sessions: runs that share state, and never share it with anyone else.
//!
//! A [`Session`] is a realm of its own on an engine thread of its own.
//! Its runs see what earlier runs of the session declared at their top
//! level (`const`, `let`, `var`, `function`, `class`), with their live
//! values; runs of another session, and runs outside any session, see
//! none of it. The rules of those declarations are in
//! `harness_core::session` and docs/user-guide.md ("Sessions").
//!
//! Ids are made here (128 random bits), never chosen by a caller, and a
//! closed, expired or unknown id is `SessionClosedError` with the reason,
//! never a fresh start. A run that times out, runs out of memory, is
//! cancelled or faults ends its session. Limits come from `[sessions]`
//! ([`SessionLimits`]).

use harness_core::session::SessionSpec;
use harness_core::ScriptRuntimeAdapter;
use harness_core::{ErrorCode, ExecutionReport, ExecutionRequest, Phase, ScriptError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `[sessions]`: how many sessions a harness keeps and how much they hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct SessionLimits {
    /// Live sessions per harness at most; opening one more closes the
    /// least recently used.
    pub max: usize,
    /// A session no run used for this long is closed.
    pub idle_ms: u64,
    /// Heap one session's realm may hold (its bindings and a run's work);
    /// a run's own `limits.memory_bytes` still caps what the run adds.
    pub memory_bytes: u64,
    /// Heap all sessions of a harness may hold together; past it, the
    /// least recently used others are closed.
    pub total_memory_bytes: u64,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max: 64,
            idle_ms: 30 * 60 * 1000,
            memory_bytes: 256 << 20,
            total_memory_bytes: 1 << 30,
        }
    }
}

impl SessionLimits {
    /// With `max` live sessions at most.
    pub fn with_max(mut self, max: usize) -> Self {
        self.max = max;
        self
    }

    /// Closing sessions idle for `ms`.
    pub fn with_idle_ms(mut self, ms: u64) -> Self {
        self.idle_ms = ms;
        self
    }

    /// With `bytes` of heap per session at most.
    pub fn with_memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// With `bytes` of heap for all sessions together at most.
    pub fn with_total_memory_bytes(mut self, bytes: u64) -> Self {
        self.total_memory_bytes = bytes;
        self
    }
}

/// Why a session cannot be opened or reached.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// This harness's engine (or its isolation) has no sessions.
    #[error("sessions are not available on {0}")]
    Unsupported(String),
    /// The session is closed, expired or unknown.
    #[error("{0}")]
    Closed(String),
}

impl SessionError {
    /// The error a run of such a session reports: `SessionClosedError`
    /// for a closed one.
    pub fn to_script_error(&self) -> ScriptError {
        match self {
            SessionError::Closed(why) => {
                ScriptError::new(ErrorCode::SessionClosedError, Phase::Executing, why.clone())
                    .with_name("SessionClosedError")
            }
            SessionError::Unsupported(_) => ScriptError::new(
                ErrorCode::SessionClosedError,
                Phase::Executing,
                self.to_string(),
            )
            .with_name("SessionClosedError"),
        }
    }
}

/// Builds one session's engine, or says the engine has none.
pub(crate) type SessionEngine =
    Arc<dyn Fn(SessionSpec) -> Option<Arc<dyn ScriptRuntimeAdapter>> + Send + Sync>;

/// A live session's engine, and its turn: runs of one session go one at
/// a time.
type Reached = (Arc<dyn ScriptRuntimeAdapter>, Arc<tokio::sync::Mutex<()>>);

/// One live session.
struct Live {
    adapter: Arc<dyn ScriptRuntimeAdapter>,
    spec: SessionSpec,
    last_used: Instant,
    /// Runs of one session go one at a time.
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// A harness's sessions: the live ones, and the ids of closed ones for
/// as long as their idle time could still have run (so that a late run
/// gets the reason).
pub(crate) struct Sessions {
    limits: SessionLimits,
    engine: Option<SessionEngine>,
    engine_name: String,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    live: HashMap<String, Live>,
    closed: HashMap<String, (Instant, String)>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("limits", &self.limits)
            .field(
                "live",
                &self.table.lock().map(|t| t.live.len()).unwrap_or(0),
            )
            .finish()
    }
}

impl Sessions {
    pub(crate) fn new(
        limits: SessionLimits,
        engine: Option<SessionEngine>,
        engine_name: &str,
    ) -> Self {
        Sessions {
            limits,
            engine,
            engine_name: engine_name.to_owned(),
            table: Mutex::new(Table::default()),
        }
    }

    fn idle(&self) -> Duration {
        Duration::from_millis(self.limits.idle_ms)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session: a new id and an engine thread of its own.
    pub(crate) fn open(&self) -> Result<String, SessionError> {
        let engine = self
            .engine
            .as_ref()
            .ok_or_else(|| SessionError::Unsupported(self.engine_name.clone()))?;
        let spec = SessionSpec::new(self.limits.memory_bytes);
        let adapter = engine(spec.clone())
            .ok_or_else(|| SessionError::Unsupported(self.engine_name.clone()))?;
        let adapter: Arc<dyn ScriptRuntimeAdapter> =
            Arc::new(harness_respond::language::TypeScriptAware::new(adapter));
        let id = new_id();
        let mut table = self.lock();
        self.sweep(&mut table, Instant::now());
        while table.live.len() >= self.limits.max.max(1) {
            let Some(oldest) = least_recent(&table, None) else {
                break;
            };
            close_in(
                &mut table,
                &oldest,
                "the session was closed to make room for a newer one ([sessions] max)",
                self.idle(),
            );
        }
        table.live.insert(
            id.clone(),
            Live {
                adapter,
                spec,
                last_used: Instant::now(),
                turn: Arc::default(),
            },
        );
        publish(&table);
        Ok(id)
    }

    /// The session's engine and turn, if it is live; its reason otherwise.
    fn reach(&self, id: &str) -> Result<Reached, SessionError> {
        let mut table = self.lock();
        let now = Instant::now();
        self.sweep(&mut table, now);
        if let Some(live) = table.live.get_mut(id) {
            live.last_used = now;
            return Ok((live.adapter.clone(), live.turn.clone()));
        }
        Err(SessionError::Closed(closed_reason(&table, id)))
    }

    /// `Ok` when `id` names a live session; why not otherwise.
    pub(crate) fn find(&self, id: &str) -> Result<(), SessionError> {
        self.reach(id).map(|_| ())
    }

    /// Runs `request` in session `id`.
    pub(crate) async fn execute(&self, id: &str, request: ExecutionRequest) -> ExecutionReport {
        let engine = self.engine_name.clone();
        let (adapter, turn) = match self.reach(id) {
            Ok(reached) => reached,
            Err(e) => return ExecutionReport::failed(&engine, e.to_script_error()),
        };
        let _turn = turn.lock().await;
        // Closed while this run waited for its turn.
        if let Err(e) = self.reach(id) {
            return ExecutionReport::failed(&engine, e.to_script_error());
        }
        let report = adapter.execute(request).await;
        let mut table = self.lock();
        if report.suspension.is_some() {
            let why = "the session is closed: its run suspended, and the session with it; resuming the continuation goes on in a new session";
            close_in(&mut table, id, why, self.idle());
        }
        if let Some(code) = report.error.as_ref().map(|e| e.code) {
            if let Some(why) = ends_session(code) {
                close_in(&mut table, id, why, self.idle());
            }
        }
        if let Some(live) = table.live.get_mut(id) {
            live.last_used = Instant::now();
        }
        self.within_total(&mut table, id);
        publish(&table);
        report
    }

    /// Closes session `id`; returns whether it was live.
    pub(crate) fn close(&self, id: &str) -> bool {
        let mut table = self.lock();
        let was = table.live.contains_key(id);
        close_in(&mut table, id, "the session was closed", self.idle());
        publish(&table);
        was
    }

    /// Live sessions, and the heap their realms hold together.
    pub(crate) fn stats(&self) -> (usize, u64) {
        let table = self.lock();
        (table.live.len(), total_retained(&table))
    }

    /// Closes the sessions idle past `idle_ms`, and forgets closed ids
    /// whose idle time is over.
    fn sweep(&self, table: &mut Table, now: Instant) {
        let idle = self.idle();
        let expired: Vec<String> = table
            .live
            .iter()
            .filter(|(_, l)| now.duration_since(l.last_used) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            close_in(
                table,
                &id,
                "the session expired: no run used it for [sessions] idle_ms",
                idle,
            );
        }
        table.closed.retain(|_, (until, _)| *until > now);
    }

    /// Past `total_memory_bytes`, closes the least recently used sessions
    /// other than `current`.
    fn within_total(&self, table: &mut Table, current: &str) {
        while total_retained(table) > self.limits.total_memory_bytes {
            let Some(oldest) = least_recent(table, Some(current)) else {
                return;
            };
            close_in(
                table,
                &oldest,
                "the session was closed: all sessions together held more than [sessions] total_memory_bytes",
                self.idle(),
            );
        }
    }
}

/// Whether a run that ended with `code` ends its session, and why: its
/// realm could be half-way through something.
fn ends_session(code: ErrorCode) -> Option<&'static str> {
    match code {
        ErrorCode::ScriptTimeoutError => Some("the session is closed: a run in it timed out"),
        ErrorCode::ScriptMemoryError => {
            Some("the session is closed: a run in it ran out of memory")
        }
        ErrorCode::ScriptCancelledError => Some("the session is closed: a run in it was cancelled"),
        ErrorCode::StackOverflowError => {
            Some("the session is closed: a run in it overflowed the stack")
        }
        ErrorCode::HarnessInternalError => {
            Some("the session is closed: its engine failed during a run")
        }
        ErrorCode::DetachedPromiseError => {
            Some("the session is closed: a run in it left tool calls pending")
        }
        _ => None,
    }
}

fn closed_reason(table: &Table, id: &str) -> String {
    match table.closed.get(id) {
        Some((_, why)) => why.clone(),
        None => "no such session: it was closed, expired or never opened here".to_owned(),
    }
}

fn close_in(table: &mut Table, id: &str, why: &str, idle: Duration) {
    if table.live.remove(id).is_some() {
        table
            .closed
            .insert(id.to_owned(), (Instant::now() + idle, why.to_owned()));
    }
}

fn least_recent(table: &Table, except: Option<&str>) -> Option<String> {
    table
        .live
        .iter()
        .filter(|(id, _)| Some(id.as_str()) != except)
        .min_by_key(|(_, l)| l.last_used)
        .map(|(id, _)| id.clone())
}

fn total_retained(table: &Table) -> u64 {
    table.live.values().map(|l| l.spec.retained_bytes()).sum()
}

/// The gauges, with no per-session label.
fn publish(table: &Table) {
    metrics::gauge!("sessions_live").set(table.live.len() as f64);
    metrics::gauge!("session_memory_bytes").set(total_retained(table) as f64);
}

/// 128 random bits from the operating system, as 32 hex digits.
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No randomness from the OS: std's per-process random keys.
        use std::hash::{BuildHasher, Hasher};
        for half in bytes.chunks_mut(8) {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A session of a [`Harness`](crate::Harness): cheap to clone; every
/// clone names the same session.
#[derive(Clone)]
pub struct Session {
    id: String,
    harness: crate::Harness,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).finish()
    }
}

impl Session {
    pub(crate) fn new(id: String, harness: crate::Harness) -> Self {
        Session { id, harness }
    }

    /// The session's id: 32 hex digits the harness drew at random.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Runs `source` in the session.
    pub async fn run(&self, source: &str) -> ExecutionReport {
        self.execute(self.harness.request(source)).await
    }

    /// Runs a request (made with [`crate::Harness::request`]) in the
    /// session. A HarnessInternalError is not run again: it ends the
    /// session instead.
    pub async fn execute(&self, request: ExecutionRequest) -> ExecutionReport {
        self.harness.execute_in_session(&self.id, request).await
    }

    /// Parses `source` as a run of this session would be parsed (the
    /// engine's syntax and the session's rewrite of its declarations),
    /// without running any of it; `SessionClosedError` if the session is
    /// not live.
    pub async fn check(&self, source: &str) -> Result<(), ScriptError> {
        self.harness
            .find_session(&self.id)
            .map_err(|e| e.to_script_error())?;
        self.harness.check(source).await?;
        harness_core::body::Body::parse_session(source).map(|_| ())
    }

    /// Closes the session: its realm and engine thread go, and later runs
    /// naming it are `SessionClosedError`. Returns whether it was live.
    pub fn close(&self) -> bool {
        self.harness.close_session(&self.id)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_32_hex_digits_and_differ() {
        let a = super::new_id();
        let b = super::new_id();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
