//! Scale-out on Redis Streams: [`Worker`]s take run requests from a
//! stream through a consumer group, any number of them on any number of
//! machines; a [`FleetClient`] submits requests, waits for replies, reads
//! events and cancels.
//!
//! Keys, for a stream named `S` (default `harness:runs`):
//!
//! | key | type | what |
//! |---|---|---|
//! | `S` | stream | requests: one field `request`, a [`RunRequest`] as JSON |
//! | `S:done:ID` | string, TTL | set when request `ID` was answered (idempotency) |
//! | `S:reply:ID` | string, TTL | the [`RunReply`] when the request names no `reply_to` |
//! | `reply_to` | stream | fields `id` and `reply` (a [`RunReply`]) |
//! | `S:events:ID` | stream, TTL | console lines and progress while `ID` runs, then `end` |
//! | `S:cancelled:ID` | string, TTL | a cancel that arrived before the run started |
//! | `S:cancel` | pub/sub channel | request ids to cancel wherever they run |
//! | `S:dead` | stream | requests given up on: fields `id`, `entry`, `request`, `error` |
//! | `S:session:ID` | string, TTL | the consumer that owns session `ID` |
//! | `S:worker:CONSUMER` | stream | requests of that consumer's sessions (the client routes them there) |
//! | `S:alive:CONSUMER` | string, TTL | that consumer is alive (renewed while it runs) |
//! | `S:workers` | set | consumers that may own sessions |
//! | `S:suspended:ID` | string, TTL | request `ID` suspended: its sealed continuation and what it ran under |
//! | `S:resumed:ID` | string, TTL | the stream entry that resumes `ID` (`SET NX`: one resume) |
//!
//! Durable runs (protocol 3): a request with `suspend: true`, on a worker
//! started with `--suspend` (keys in `[durable] keys_env`, the same on
//! every worker), may suspend on an approval or a deferred tool. The
//! worker stores its continuation under `S:suspended:ID` and sends an
//! interim reply (`interim: true`, the report's `suspension`) that does
//! not mark `ID` answered. A request with the same `id` and `resume`
//! (answers) goes on from it on whichever worker takes it; its reply is
//! the final one, exactly once. A second resume of the same suspension is
//! dropped (it sees the first one's reply).
//!
//! Sessions (protocol 2): a request with `session: "new"` opens one on
//! the worker that takes it, whose reply names it; requests naming it are
//! sent by [`FleetClient::submit`] to that worker's own stream. A session
//! whose worker is gone (its `alive` key expired) is `SessionClosedError`:
//! the client answers so when it finds the worker gone, and live workers
//! answer so for what is left in a dead worker's stream.
//!
//! Delivery is at least once (a worker that dies mid-run leaves its entries
//! pending; live workers claim them after the visibility timeout), and
//! answering is exactly once: the reply and the `S:done:ID` marker are
//! written by one Lua script only if the marker is absent, and the marker
//! is checked before a run starts, so a request already answered is never
//! run again and never answered twice. An entry is acknowledged only after
//! its answer is written.

use harness::{Allowlist, ExecutionReport, Harness, RunObserver, ScriptLanguage};
use redis::aio::ConnectionManager;
use redis::streams::{StreamAutoClaimOptions, StreamId, StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

mod client;
mod worker;

pub use client::FleetClient;
pub use worker::{HarnessFactory, Worker};

/// The version of [`RunRequest`] and [`RunReply`]: 2 added sessions, 3
/// durable runs (`suspend`, `resume`, `interim`); versions 1 and 2 are
/// still accepted.
pub const PROTOCOL_VERSION: u32 = 3;
/// `RunRequest::session` that opens a session.
pub const NEW_SESSION: &str = "new";
/// The stream requests go to by default.
pub const DEFAULT_STREAM: &str = "harness:runs";
/// The consumer group workers read with by default.
pub const DEFAULT_GROUP: &str = "harness";

/// Why the fleet could not do what was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// Redis refused, or could not be reached.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A value could not be encoded or decoded.
    #[error("bad JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A request is not valid (the client checks before submitting).
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// One run request, as JSON in the stream's `request` field. Only
/// `version`, `id` and `script` are required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RunRequest {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The caller's id for the request: replies, events and idempotency
    /// are keyed by it.
    pub id: String,
    /// The script.
    pub script: String,
    /// `js`, `ts` or `auto` (default: the worker's configuration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<ScriptLanguage>,
    /// The context object, in the camelCase keys scripts see
    /// (`conversationId`, `sessionId`, `turnId`, `provider`, `model`,
    /// `workingDirectory`, `identity`, `extra`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    /// Limits by their snake_case names (`timeout_ms`, …), bounded by the
    /// worker configuration's ceilings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Map<String, Value>>,
    /// The configuration's `[providers.NAME]` to run under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Tools and packs the script may call, within what the worker exposes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// A stream to add the reply to; default: the key `S:reply:ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Run in a session: [`NEW_SESSION`] opens one (the reply names it),
    /// an id a reply named continues it (protocol 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The run may suspend (protocol 3; a worker started with `--suspend`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Resume request `id`'s suspended run with these answers instead of
    /// running `script` (protocol 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeAnswers>,
}

/// The answers a resume gives the calls a suspended run waits on:
/// `approve` (every approval), `answers` and `failures` (deferred calls,
/// by id).
pub type ResumeAnswers = harness::durable::Answers;

impl RunRequest {
    /// A request with the required fields.
    pub fn new(id: impl Into<String>, script: impl Into<String>) -> Self {
        RunRequest {
            version: PROTOCOL_VERSION,
            id: id.into(),
            script: script.into(),
            language: None,
            context: None,
            limits: None,
            provider: None,
            tools: None,
            reply_to: None,
            session: None,
            suspend: false,
            resume: None,
        }
    }

    /// A request that resumes request `id`'s suspended run.
    pub fn resume(id: impl Into<String>, answers: ResumeAnswers) -> Self {
        RunRequest {
            resume: Some(answers),
            ..RunRequest::new(id, "")
        }
    }

    /// That may suspend.
    pub fn suspending(mut self) -> Self {
        self.suspend = true;
        self
    }

    /// In session `session` ([`NEW_SESSION`] opens one).
    pub fn with_session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// With replies added to the stream `reply_to`.
    pub fn with_reply_to(mut self, reply_to: impl Into<String>) -> Self {
        self.reply_to = Some(reply_to.into());
        self
    }

    /// With limits (snake_case names).
    pub fn with_limits(mut self, limits: Map<String, Value>) -> Self {
        self.limits = Some(limits);
        self
    }
}

/// Why a request was answered without a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RequestError {
    /// `InvalidRequest`, `RequestTooLarge`, `UnsupportedVersion`,
    /// `ToolsNotExposed`, `InvalidLimits`, `UnknownProvider`, `Cancelled`,
    /// `DeadLetter`.
    pub code: String,
    /// What is wrong.
    pub message: String,
}

/// The answer to one request: a report, or a request error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunReply {
    /// [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The request's id.
    pub id: String,
    /// The run's report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ExecutionReport>,
    /// Why there is no report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RequestError>,
    /// The worker (consumer name) that answered.
    pub worker: String,
    /// How many times the request was delivered (more than 1: reclaimed
    /// from a worker that died or stalled).
    pub deliveries: u64,
    /// The session the run ran in (a new one's id, for `session: "new"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Not the last reply: the run suspended (its report's `suspension`),
    /// and a resume's reply follows.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interim: bool,
}

impl RunReply {
    /// The reply to request `id` when its session is closed, expired or
    /// gone with its worker: a report with `SessionClosedError`.
    pub(crate) fn session_closed(id: &str, worker: &str, why: &str) -> RunReply {
        let error = harness::ScriptError::new(
            harness::ErrorCode::SessionClosedError,
            harness::Phase::Executing,
            why,
        )
        .with_name("SessionClosedError");
        RunReply {
            version: PROTOCOL_VERSION,
            id: id.to_owned(),
            report: Some(ExecutionReport::failed("", error)),
            error: None,
            worker: worker.to_owned(),
            deliveries: 1,
            session: None,
            interim: false,
        }
    }
}

/// How a worker reads, runs and answers.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// The requests stream.
    pub stream: String,
    /// The consumer group.
    pub group: String,
    /// This worker's consumer name (unique per worker).
    pub consumer: String,
    /// Runs at once.
    pub concurrency: usize,
    /// An entry pending this long with another consumer is claimed.
    pub visibility_timeout_ms: u64,
    /// A request delivered more often than this goes to the dead letters.
    pub max_deliveries: u64,
    /// How long replies, markers and events are kept.
    pub ttl_s: u64,
    /// The largest request accepted (bytes of JSON).
    pub max_request_bytes: usize,
    /// On shutdown, how long runs in flight may finish before they are
    /// cancelled (and left to other workers, unanswered).
    pub grace_ms: u64,
    /// How long an answer is retried while Redis is away.
    pub answer_retry_ms: u64,
}

impl WorkerOptions {
    /// Defaults for the consumer `consumer`: stream `harness:runs`, group
    /// `harness`, 4 runs at once, 30 s visibility, 5 deliveries, replies
    /// kept a day, 1 MiB requests, 30 s grace, answers retried 5 minutes.
    pub fn new(consumer: impl Into<String>) -> Self {
        WorkerOptions {
            stream: DEFAULT_STREAM.into(),
            group: DEFAULT_GROUP.into(),
            consumer: consumer.into(),
            concurrency: 4,
            visibility_timeout_ms: 30_000,
            max_deliveries: 5,
            ttl_s: 86_400,
            max_request_bytes: 1024 * 1024,
            grace_ms: 30_000,
            answer_retry_ms: 300_000,
        }
    }
}

fn key(stream: &str, kind: &str, id: &str) -> String {
    format!("{stream}:{kind}:{id}")
}

/// Writes `reply` with [`ANSWER`] (once): true if this call answered.
async fn write_answer(
    conn: &mut ConnectionManager,
    stream: &str,
    ttl_s: u64,
    reply: &RunReply,
    reply_to: Option<&str>,
) -> redis::RedisResult<bool> {
    write_with(ANSWER, conn, stream, ttl_s, reply, reply_to).await
}

/// Writes an interim reply with [`INTERIM`]: not the done marker, and
/// only while the request is not answered.
async fn write_interim(
    conn: &mut ConnectionManager,
    stream: &str,
    ttl_s: u64,
    reply: &RunReply,
    reply_to: Option<&str>,
) -> redis::RedisResult<bool> {
    write_with(INTERIM, conn, stream, ttl_s, reply, reply_to).await
}

/// Runs `script` (one of [`ANSWER`], [`INTERIM`]) on the request's done
/// marker and its reply target: true if it wrote.
async fn write_with(
    script: &str,
    conn: &mut ConnectionManager,
    stream: &str,
    ttl_s: u64,
    reply: &RunReply,
    reply_to: Option<&str>,
) -> redis::RedisResult<bool> {
    let json = serde_json::to_string(reply).map_err(|e| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "cannot encode a reply",
            e.to_string(),
        ))
    })?;
    let done = key(stream, "done", &reply.id);
    let (target, mode) = match reply_to {
        Some(s) => (s.to_owned(), "stream"),
        None => (key(stream, "reply", &reply.id), "key"),
    };
    let written: i64 = redis::Script::new(script)
        .key(&done)
        .key(&target)
        .arg(ttl_s)
        .arg(&json)
        .arg(mode)
        .arg(&reply.id)
        .invoke_async(conn)
        .await?;
    Ok(written == 1)
}

const INTERIM: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if ARGV[3] == 'stream' then
  redis.call('XADD', KEYS[2], '*', 'id', ARGV[4], 'reply', ARGV[2])
else
  redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[1])
end
return 1
"#;

/// Writes the reply and the done marker together, only if the marker is
/// absent: 1 if this call answered, 0 if the request was answered before.
const ANSWER: &str = r#"
if redis.call('SET', KEYS[1], ARGV[4], 'NX', 'EX', ARGV[1]) then
  if ARGV[3] == 'stream' then
    redis.call('XADD', KEYS[2], '*', 'id', ARGV[4], 'reply', ARGV[2])
  else
    redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[1])
  end
  return 1
end
return 0
"#;
