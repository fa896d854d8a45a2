//! Durable runs: a run that waits only on calls someone outside must
//! answer (an approval the bridge answered [`ApprovalDecision::Suspend`],
//! a [`Tool::deferred`] tool) is put away as a continuation, holds
//! nothing meanwhile, and resumes later, in another process or on another
//! machine with the same guest build.
//!
//! Core makes and reads the continuation's plain bytes; a [`Sealer`]
//! (the `harness` crate's, with zstd and authenticated encryption) seals
//! them, and whoever resumes opens them before [`Resume::new`]. The plain
//! bytes are a header (this run's host-side state, as JSON) and the
//! engine's image of the run ([`Engine::suspend`]).
//!
//! [`ApprovalDecision::Suspend`]: crate::approval::ApprovalDecision::Suspend
//! [`Tool::deferred`]: crate::tool::Tool::deferred
//! [`Engine::suspend`]: crate::engine::Engine::suspend

use crate::approval::ApprovalRecord;
use crate::report::{
    ConsoleEntry, PendingCall, PendingKind, ProgressEvent, ToolCallRecord, Warning,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// How long a continuation may wait, unless configured
/// (`durable.max_suspended_ms`): 24 hours.
pub const DEFAULT_MAX_SUSPENDED_MS: u64 = 24 * 60 * 60 * 1000;

/// The plain format's version; a continuation of another is refused.
const FORMAT: u32 = 1;

/// Seals a continuation's plain bytes (and its id) so that nobody can
/// read or change them without a key.
pub trait Sealer: Send + Sync + fmt::Debug {
    /// The sealed continuation of `plain`, whose id is `id`.
    fn seal(&self, id: &str, plain: &[u8]) -> Result<Vec<u8>, String>;
}

/// What a run that may suspend carries: who seals its continuation, and
/// how long that may wait.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Durable {
    /// Seals the continuation.
    pub sealer: Arc<dyn Sealer>,
    /// How long a continuation may wait before it expires.
    pub max_suspended_ms: u64,
}

impl Durable {
    /// Runs that suspend under `sealer`, for at most a day.
    pub fn new(sealer: Arc<dyn Sealer>) -> Self {
        Durable {
            sealer,
            max_suspended_ms: DEFAULT_MAX_SUSPENDED_MS,
        }
    }

    /// The same, expiring after `ms`.
    pub fn with_max_suspended_ms(mut self, ms: u64) -> Self {
        self.max_suspended_ms = ms;
        self
    }
}

/// The answer to one pending call of a suspended run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Answer {
    /// The approval is given: the call runs.
    Approve,
    /// The approval is refused: the script sees ApprovalDeniedError.
    Deny {
        /// Why, to show the script.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A deferred tool's result.
    Result {
        /// The result, as the script gets it.
        value: Value,
    },
    /// A deferred tool's failure: the script sees ToolExecutionError.
    Error {
        /// The message the script sees.
        message: String,
    },
}

impl Answer {
    fn fits(&self, kind: PendingKind) -> bool {
        matches!(
            (self, kind),
            (Answer::Approve | Answer::Deny { .. }, PendingKind::Approval)
                | (
                    Answer::Result { .. } | Answer::Error { .. },
                    PendingKind::Deferred
                )
        )
    }
}

/// An opened continuation with an answer for each call it waits on:
/// what an [`ExecutionRequest`](crate::ExecutionRequest) carries to
/// resume.
#[derive(Clone)]
#[non_exhaustive]
pub struct Resume {
    pub(crate) header: Header,
    pub(crate) image: Arc<[u8]>,
    pub(crate) answers: BTreeMap<u64, Answer>,
}

impl fmt::Debug for Resume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resume")
            .field("id", &self.header.id)
            .field("answers", &self.answers)
            .finish_non_exhaustive()
    }
}

impl Resume {
    /// Reads an opened continuation (`plain`: what its [`Sealer`] sealed)
    /// and checks that `answers` answer every call it waits on, each in
    /// kind, and nothing else. The error says why not.
    pub fn new(plain: &[u8], answers: BTreeMap<u64, Answer>) -> Result<Resume, String> {
        let (header, image) = decode(plain)?;
        for w in &header.host.waiting {
            let call = &w.call;
            match answers.get(&call.call_id) {
                None => {
                    return Err(format!(
                        "no answer for call {} ({} {})",
                        call.call_id,
                        call.tool,
                        kind_name(call.kind)
                    ))
                }
                Some(a) if !a.fits(call.kind) => {
                    return Err(format!(
                        "call {} ({}) waits on {}, and the answer given does not fit it",
                        call.call_id,
                        call.tool,
                        kind_name(call.kind)
                    ))
                }
                Some(_) => {}
            }
        }
        if let Some(extra) = answers
            .keys()
            .find(|id| !header.host.waiting.iter().any(|w| w.call.call_id == **id))
        {
            return Err(format!("call {extra} is not waiting on an answer"));
        }
        Ok(Resume {
            header,
            image: Arc::from(image),
            answers,
        })
    }

    /// The continuation's id.
    pub fn id(&self) -> &str {
        &self.header.id
    }

    /// The calls it waits on.
    pub fn pending(&self) -> Vec<PendingCall> {
        self.header
            .host
            .waiting
            .iter()
            .map(|w| w.call.clone())
            .collect()
    }

    /// When it expires, in milliseconds since the Unix epoch.
    pub fn expires_at_ms(&self) -> u64 {
        self.header.expires_at_ms
    }

    /// Whether the suspended run was a session's: it resumes as the first
    /// run of a new session, which then holds what the old one held.
    pub fn in_session(&self) -> bool {
        self.header.host.session
    }
}

/// The pending calls of an opened continuation, for a caller that asks
/// someone before it resumes.
pub fn pending_calls(plain: &[u8]) -> Result<Vec<PendingCall>, String> {
    let (header, _) = decode(plain)?;
    Ok(header.host.waiting.into_iter().map(|w| w.call).collect())
}

fn kind_name(kind: PendingKind) -> &'static str {
    match kind {
        PendingKind::Approval => "approval",
        PendingKind::Deferred => "deferred result",
    }
}

/// A call waiting on an answer, with what its approval record needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Waiting {
    pub call: PendingCall,
    /// The approval request's id.
    #[serde(default)]
    pub request_id: String,
    #[serde(default)]
    pub line: Option<u32>,
}

/// The host-side state of a suspended run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct HostSnapshot {
    pub script_id: String,
    /// Run time before the suspension.
    pub elapsed_ms: f64,
    /// What was left of `timeout_ms`.
    pub left_ms: u64,
    pub calls: Vec<ToolCallRecord>,
    pub console: Vec<ConsoleEntry>,
    pub console_dropped: u32,
    pub progress: Vec<ProgressEvent>,
    pub progress_dropped: u32,
    pub approvals: Vec<ApprovalRecord>,
    pub approvals_asked: u32,
    pub budget_used: u32,
    pub calls_dropped: u32,
    pub warnings: Vec<Warning>,
    pub waiting: Vec<Waiting>,
    /// The run was a session's: its image holds the session's realm.
    #[serde(default)]
    pub session: bool,
}

/// The plain continuation's header.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Header {
    pub format: u32,
    pub id: String,
    pub engine: String,
    pub expires_at_ms: u64,
    /// What the run was allowed ([`fingerprint`]); a resume under anything
    /// else is refused.
    pub fingerprint: String,
    pub host: HostSnapshot,
}

impl Header {
    pub(crate) fn new(
        id: String,
        engine: &str,
        expires_at_ms: u64,
        fingerprint: String,
        host: HostSnapshot,
    ) -> Self {
        Header {
            format: FORMAT,
            id,
            engine: engine.to_owned(),
            expires_at_ms,
            fingerprint,
            host,
        }
    }
}

/// The plain bytes: the header's length (u32, little-endian), the header
/// as JSON, the engine's image.
pub(crate) fn encode(header: &Header, image: &[u8]) -> Result<Vec<u8>, String> {
    let json = serde_json::to_vec(header).map_err(|e| e.to_string())?;
    let len = u32::try_from(json.len()).map_err(|_| "the run's state is too large".to_owned())?;
    let mut out = Vec::with_capacity(4 + json.len() + image.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(image);
    Ok(out)
}

fn decode(plain: &[u8]) -> Result<(Header, &[u8]), String> {
    let bad = || "the continuation is not one this harness makes".to_owned();
    let len = plain.get(..4).ok_or_else(bad)?;
    let len = u32::from_le_bytes(len.try_into().map_err(|_| bad())?) as usize;
    let json = plain.get(4..4usize.saturating_add(len)).ok_or_else(bad)?;
    let header: Header = serde_json::from_slice(json).map_err(|_| bad())?;
    if header.format != FORMAT {
        return Err(format!(
            "the continuation's format is {}; this harness reads {FORMAT}",
            header.format
        ));
    }
    Ok((header, &plain[4 + len..]))
}

/// What a run was allowed, as text: its limits (but not the realm, which
/// the harness infers from the source), mode (`mode`, as the caller
/// names it), and the tools it could call (`visible`, from `registry`)
/// with their schemas and flags.
pub(crate) fn fingerprint(
    limits: &crate::limits::Limits,
    mode: &str,
    registry: &crate::tool::ToolRegistry,
    visible: &[String],
) -> String {
    let limits = limits.clone().with_realm(None);
    let tools: Vec<Value> = visible
        .iter()
        .map(|name| match registry.get(name) {
            Some(t) => serde_json::json!({
                "name": name,
                "schema": t.schema(),
                "deferred": t.deferred(),
            }),
            None => serde_json::json!({"name": name}),
        })
        .collect();
    serde_json::json!({"limits": limits, "mode": mode, "tools": tools}).to_string()
}

/// A new continuation id: `cnt_` and 32 random hex digits.
pub(crate) fn new_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::from("cnt_");
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `ms` since the Unix epoch as RFC 3339 (UTC, milliseconds).
pub(crate) fn rfc3339(ms: u64) -> String {
    let t = time::OffsetDateTime::UNIX_EPOCH + time::Duration::milliseconds(ms as i64);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(id: u64, kind: PendingKind) -> Waiting {
        Waiting {
            call: PendingCall {
                call_id: id,
                tool: "exec".into(),
                args: serde_json::json!({}),
                kind,
                line: None,
            },
            request_id: String::new(),
            line: None,
        }
    }

    fn plain(waits: Vec<Waiting>) -> Vec<u8> {
        let host = HostSnapshot {
            waiting: waits,
            ..HostSnapshot::default()
        };
        let h = Header::new("cnt_1".into(), "wasi", 0, String::new(), host);
        encode(&h, b"image").unwrap()
    }

    #[test]
    fn a_resume_needs_one_fitting_answer_per_pending_call() {
        let p = plain(vec![
            waiting(1, PendingKind::Approval),
            waiting(2, PendingKind::Deferred),
        ]);
        let ok = BTreeMap::from([
            (1, Answer::Approve),
            (
                2,
                Answer::Result {
                    value: serde_json::json!(3),
                },
            ),
        ]);
        let r = Resume::new(&p, ok).unwrap();
        assert_eq!(&*r.image, b"image");
        assert_eq!(r.id(), "cnt_1");
        let missing = Resume::new(&p, BTreeMap::from([(1, Answer::Approve)])).unwrap_err();
        assert!(missing.contains("no answer for call 2"), "{missing}");
        let wrong = BTreeMap::from([(1, Answer::Approve), (2, Answer::Approve)]);
        assert!(Resume::new(&p, wrong).unwrap_err().contains("does not fit"));
        let extra = BTreeMap::from([
            (1, Answer::Approve),
            (
                2,
                Answer::Error {
                    message: "x".into(),
                },
            ),
            (9, Answer::Approve),
        ]);
        assert!(Resume::new(&p, extra).unwrap_err().contains("call 9"));
    }

    #[test]
    fn plain_bytes_that_are_not_a_continuation_are_refused() {
        for bad in [&b""[..], b"\xff\xff\xff\xff{}", b"\x02\x00\x00\x00{}"] {
            assert!(Resume::new(bad, BTreeMap::new()).is_err());
        }
        let mut p = plain(vec![]);
        let text = String::from_utf8_lossy(&p).replace("\"format\":1", "\"format\":9");
        p = text.into_bytes();
        assert!(Resume::new(&p, BTreeMap::new())
            .unwrap_err()
            .contains("format is 9"));
    }

    #[test]
    fn expiry_reads_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_500), "1970-01-01T00:00:01.5Z");
    }
}
