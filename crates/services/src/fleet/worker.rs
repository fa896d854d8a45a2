//! The fleet's worker: consumes the stream, runs each request once,
//! answers, and takes over what a dead worker left.

use super::*;

/// Builds the harness a request runs on, for its provider (`None`: the
/// configuration's global settings).
pub type HarnessFactory =
    dyn Fn(Option<&str>) -> Result<(Harness, harness::config::Config), String> + Send + Sync;

/// A worker: consumes a stream until shut down.
pub struct Worker {
    pub(super) opts: WorkerOptions,
    pub(super) client: redis::Client,
    pub(super) factory: Arc<HarnessFactory>,
    pub(super) harnesses: Mutex<HashMap<Option<String>, (Harness, harness::config::Config)>>,
    pub(super) running: Mutex<HashMap<String, CancellationToken>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

/// What became of one delivered entry.
pub(super) enum Outcome {
    /// Answered (now or before): acknowledge it.
    Done,
    /// Cancelled by shutdown: leave it pending for another worker.
    Abandoned,
}

impl Worker {
    /// A worker on Redis `url`, building harnesses with `factory`.
    pub fn new(
        url: &str,
        opts: WorkerOptions,
        factory: Arc<HarnessFactory>,
    ) -> Result<Worker, FleetError> {
        Ok(Worker {
            opts,
            client: redis::Client::open(url)?,
            factory,
            harnesses: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
        })
    }

    pub(super) async fn connect(&self) -> ConnectionManager {
        let mut backoff = Backoff::new(None);
        // Longer than the blocking read's BLOCK, so that it is never cut.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(10)));
        loop {
            match ConnectionManager::new_with_config(self.client.clone(), config.clone()).await {
                Ok(c) => return c,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reach redis; retrying");
                    backoff.wait().await;
                }
            }
        }
    }

    /// Reads, runs and answers until `shutdown` fires; then stops reading,
    /// lets runs in flight finish within the grace period, cancels the
    /// rest (unanswered and unacknowledged, for another worker) and returns.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<(), FleetError> {
        // Two connections: commands are multiplexed on one, and the
        // blocking XREADGROUP would hold every other command up behind it.
        let mut conn = self.connect().await;
        let mut reader = self.connect().await;
        let created: redis::RedisResult<()> = conn
            .xgroup_create_mkstream(&self.opts.stream, &self.opts.group, "0")
            .await;
        if let Err(e) = created {
            if e.code() != Some("BUSYGROUP") {
                return Err(e.into());
            }
        }
        let own = self.own_stream();
        let created: redis::RedisResult<()> = conn
            .xgroup_create_mkstream(&own, &self.opts.group, "0")
            .await;
        if let Err(e) = created {
            if e.code() != Some("BUSYGROUP") {
                return Err(e.into());
            }
        }
        self.heartbeat(&mut conn).await;
        let listener = tokio::spawn(self.clone().listen_for_cancels(shutdown.clone()));
        let slots = Arc::new(tokio::sync::Semaphore::new(self.opts.concurrency.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        let run_cancel = CancellationToken::new();
        let mut last_claim = Instant::now() - Duration::from_secs(3600);
        let claim_every = Duration::from_millis((self.opts.visibility_timeout_ms / 2).max(50));
        while !shutdown.is_cancelled() {
            while tasks.try_join_next().is_some() {}
            let free = slots.available_permits();
            if free == 0 {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tasks.join_next() => {}
                }
                continue;
            }
            let mut batch: Vec<(StreamId, u64, String)> = Vec::new();
            if last_claim.elapsed() >= claim_every {
                last_claim = Instant::now();
                self.heartbeat(&mut conn).await;
                self.close_dead_workers_sessions(&mut conn).await;
                match self.claim(&mut reader, free).await {
                    Ok(claimed) => batch.extend(
                        claimed
                            .into_iter()
                            .map(|(e, n)| (e, n, self.opts.stream.clone())),
                    ),
                    Err(e) => tracing::warn!(error = %e, "claiming pending entries failed"),
                }
            }
            if batch.is_empty() {
                let opts = StreamReadOptions::default()
                    .group(&self.opts.group, &self.opts.consumer)
                    .count(free)
                    .block(500);
                // The shared stream, and this worker's own (its sessions').
                let streams = [self.opts.stream.as_str(), own.as_str()];
                let read: redis::RedisResult<Option<StreamReadReply>> = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    r = reader.xread_options(&streams, &[">", ">"], &opts) => r,
                };
                match read {
                    Ok(Some(reply)) => {
                        for k in reply.keys {
                            let stream = k.key.clone();
                            batch.extend(k.ids.into_iter().map(|e| (e, 1, stream.clone())));
                        }
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the stream failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        // The stream or its group was deleted (or Redis restarted empty).
                        if e.code() == Some("NOGROUP") {
                            for s in [&self.opts.stream, &own] {
                                let _: redis::RedisResult<()> =
                                    conn.xgroup_create_mkstream(s, &self.opts.group, "0").await;
                            }
                        }
                    }
                }
            }
            for (entry, deliveries, stream) in batch {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    break;
                };
                let me = self.clone();
                let conn = conn.clone();
                let cancel = run_cancel.child_token();
                tasks.spawn(async move {
                    me.deliver(conn, entry, deliveries, cancel, &stream).await;
                    drop(permit);
                });
            }
        }
        // Drain: finish within the grace period, then cancel what is left.
        let grace = Duration::from_millis(self.opts.grace_ms);
        let drained =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            run_cancel.cancel();
            while tasks.join_next().await.is_some() {}
        }
        listener.abort();
        // Gone: the sessions this worker owned end with it (clients find
        // no `alive` key and answer SessionClosedError).
        let _: redis::RedisResult<i64> = conn
            .del(key(&self.opts.stream, "alive", &self.opts.consumer))
            .await;
        Ok(())
    }

    /// This worker's own stream: the requests of the sessions it owns.
    pub(super) fn own_stream(&self) -> String {
        key(&self.opts.stream, "worker", &self.opts.consumer)
    }

    /// How long this worker's `alive` key lives unless renewed: three
    /// claim periods, at least 3 s.
    fn alive_ttl_s(&self) -> u64 {
        (self.opts.visibility_timeout_ms * 3 / 2 / 1000).max(3)
    }

    /// Says this worker is alive, and may own sessions.
    async fn heartbeat(&self, conn: &mut ConnectionManager) {
        let alive = key(&self.opts.stream, "alive", &self.opts.consumer);
        let r: redis::RedisResult<()> = redis::pipe()
            .set_ex(&alive, 1, self.alive_ttl_s())
            .ignore()
            .sadd(format!("{}:workers", self.opts.stream), &self.opts.consumer)
            .ignore()
            .query_async(conn)
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "cannot renew this worker's alive key");
        }
    }

    /// Answers what is left in the streams of workers that are gone
    /// (their `alive` key expired) with SessionClosedError: their
    /// sessions died with them. Each such request is answered once.
    async fn close_dead_workers_sessions(&self, conn: &mut ConnectionManager) {
        let workers = format!("{}:workers", self.opts.stream);
        let members: Vec<String> = conn.smembers(&workers).await.unwrap_or_default();
        for consumer in members.into_iter().filter(|c| *c != self.opts.consumer) {
            let alive: bool = conn
                .exists(key(&self.opts.stream, "alive", &consumer))
                .await
                .unwrap_or(true);
            if alive {
                continue;
            }
            let stream = key(&self.opts.stream, "worker", &consumer);
            let Ok(left) = conn
                .xrange_all::<_, redis::streams::StreamRangeReply>(&stream)
                .await
            else {
                continue;
            };
            let why =
                format!("the session's worker ({consumer}) is gone, and its sessions with it");
            for entry in left.ids {
                let raw: Option<String> = entry.get("request");
                let parsed: Option<Value> = raw.and_then(|r| serde_json::from_str(&r).ok());
                let field = |k: &str| {
                    parsed
                        .as_ref()
                        .and_then(|v| v.get(k).and_then(Value::as_str).map(str::to_owned))
                };
                if let Some(id) = field("id") {
                    let reply = RunReply::session_closed(&id, &self.opts.consumer, &why);
                    self.answer(conn, &reply, field("reply_to").as_deref())
                        .await;
                }
            }
            let _: redis::RedisResult<i64> = conn.del(&stream).await;
            let _: redis::RedisResult<i64> = conn.srem(&workers, &consumer).await;
        }
    }

    /// Claims entries idle longer than the visibility timeout, with their
    /// delivery counts.
    pub(super) async fn claim(
        &self,
        conn: &mut ConnectionManager,
        count: usize,
    ) -> redis::RedisResult<Vec<(StreamId, u64)>> {
        let opts = StreamAutoClaimOptions::default().count(count);
        let reply: redis::streams::StreamAutoClaimReply = conn
            .xautoclaim_options(
                &self.opts.stream,
                &self.opts.group,
                &self.opts.consumer,
                self.opts.visibility_timeout_ms,
                "0-0",
                opts,
            )
            .await?;
        let mut out = Vec::new();
        for entry in reply.claimed {
            let pending: redis::streams::StreamPendingCountReply = conn
                .xpending_count(&self.opts.stream, &self.opts.group, &entry.id, &entry.id, 1)
                .await?;
            let deliveries = pending
                .ids
                .first()
                .map(|p| p.times_delivered as u64)
                .unwrap_or(1);
            out.push((entry, deliveries));
        }
        Ok(out)
    }

    pub(super) async fn listen_for_cancels(self: Arc<Self>, shutdown: CancellationToken) {
        use futures::StreamExt;
        let channel = format!("{}:cancel", self.opts.stream);
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let Ok(mut pubsub) = self.client.get_async_pubsub().await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            if pubsub.subscribe(&channel).await.is_err() {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let mut messages = pubsub.on_message();
            loop {
                let msg = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    m = messages.next() => m,
                };
                let Some(msg) = msg else { break };
                let Ok(id) = msg.get_payload::<String>() else {
                    continue;
                };
                if let Some(token) = self.running.lock().ok().and_then(|r| r.get(&id).cloned()) {
                    token.cancel();
                }
            }
        }
    }

    /// Handles one delivered entry, then acknowledges it unless the run was
    /// abandoned by shutdown.
    pub(super) async fn deliver(
        self: Arc<Self>,
        mut conn: ConnectionManager,
        entry: StreamId,
        deliveries: u64,
        shutdown: CancellationToken,
        stream: &str,
    ) {
        let outcome = self.handle(&mut conn, &entry, deliveries, shutdown).await;
        if let Outcome::Done = outcome {
            let mut backoff = Backoff::new(Some(self.answer_retry()));
            loop {
                let acked: redis::RedisResult<i64> =
                    conn.xack(stream, &self.opts.group, &[&entry.id]).await;
                match acked {
                    Ok(_) => break,
                    // Unacknowledged, the entry is claimed later and found
                    // answered: acknowledging is only bookkeeping.
                    Err(_) if backoff.expired() => break,
                    Err(_) => backoff.wait().await,
                }
            }
        }
    }

    pub(super) async fn handle(
        &self,
        conn: &mut ConnectionManager,
        entry: &StreamId,
        deliveries: u64,
        shutdown: CancellationToken,
    ) -> Outcome {
        let raw: Option<String> = entry.get("request");
        let raw = raw.unwrap_or_default();
        // The id first, so that even a bad request can be answered.
        let parsed: Option<Value> = serde_json::from_str(&raw).ok();
        let field = |k: &str| {
            parsed
                .as_ref()
                .and_then(|v| v.get(k).and_then(Value::as_str).map(str::to_owned))
        };
        let id = field("id").filter(|id| !id.is_empty() && id.len() <= 256);
        let Some(id) = id else {
            self.dead_letter(
                conn,
                entry,
                "",
                &raw,
                "the request has no `id` (or is not JSON)",
            )
            .await;
            return Outcome::Done;
        };
        let reply_to = field("reply_to");
        let answer = |error: Option<RequestError>, report: Option<ExecutionReport>| RunReply {
            version: PROTOCOL_VERSION,
            id: id.clone(),
            report,
            error,
            worker: self.opts.consumer.clone(),
            deliveries,
            session: None,
            interim: false,
        };
        let err = |code: &str, message: String| {
            Some(RequestError {
                code: code.into(),
                message,
            })
        };
        if deliveries > self.opts.max_deliveries {
            let why = format!(
                "delivered {deliveries} times without an answer (its workers died or stalled); max_deliveries is {}",
                self.opts.max_deliveries
            );
            self.dead_letter(conn, entry, &id, &raw, &why).await;
            self.answer(
                conn,
                &answer(err("DeadLetter", why), None),
                reply_to.as_deref(),
            )
            .await;
            return Outcome::Done;
        }
        // Registered before the checks: a cancel published from here on
        // finds the token, and one published earlier left its key.
        let token = CancellationToken::new();
        if let Ok(mut r) = self.running.lock() {
            r.insert(id.clone(), token.clone());
        }
        let _registered = Registered {
            running: &self.running,
            id: id.clone(),
        };
        // Answered already? Cancelled already? One round trip.
        // Retried while Redis is away (a restart); if it stays away, the
        // entry is left pending: not knowing whether it was answered, it
        // must not run, and it is claimed again after the visibility timeout.
        let mut backoff = Backoff::new(Some(self.answer_retry()));
        let (done, cancelled) = loop {
            let checked: redis::RedisResult<(i64, i64)> = redis::pipe()
                .exists(key(&self.opts.stream, "done", &id))
                .exists(key(&self.opts.stream, "cancelled", &id))
                .query_async(conn)
                .await;
            match checked {
                Ok((d, c)) => break (d > 0, c > 0),
                Err(e) if backoff.expired() || shutdown.is_cancelled() => {
                    tracing::warn!(id, error = %e, "cannot check whether the request was answered; leaving it pending");
                    return Outcome::Abandoned;
                }
                Err(_) => backoff.wait().await,
            }
        };
        if done {
            return Outcome::Done;
        }
        if raw.len() > self.opts.max_request_bytes {
            let why = format!(
                "the request is {} bytes; the worker takes at most {}",
                raw.len(),
                self.opts.max_request_bytes
            );
            self.answer(
                conn,
                &answer(err("RequestTooLarge", why), None),
                reply_to.as_deref(),
            )
            .await;
            return Outcome::Done;
        }
        // Typed from the text (not from `parsed`): serde's errors then say
        // where in the request the problem is.
        let request: RunRequest = match serde_json::from_str(&raw) {
            Ok(r) => r,
            Err(e) => {
                self.answer(
                    conn,
                    &answer(err("InvalidRequest", e.to_string()), None),
                    reply_to.as_deref(),
                )
                .await;
                return Outcome::Done;
            }
        };
        let durable = request.suspend || request.resume.is_some();
        let supported = request.version == PROTOCOL_VERSION
            || (request.version == 2 && !durable)
            || (request.version == 1 && request.session.is_none() && !durable);
        if !supported {
            let why = if durable && request.version < PROTOCOL_VERSION {
                "`suspend` and `resume` need protocol version 3".to_owned()
            } else if request.version == 1 {
                "`session` needs protocol version 2".to_owned()
            } else {
                format!(
                    "version {} is not supported (this worker speaks 1 and {PROTOCOL_VERSION})",
                    request.version
                )
            };
            self.answer(
                conn,
                &answer(err("UnsupportedVersion", why), None),
                reply_to.as_deref(),
            )
            .await;
            return Outcome::Done;
        }
        if cancelled {
            self.answer(
                conn,
                &answer(err("Cancelled", "cancelled before it started".into()), None),
                reply_to.as_deref(),
            )
            .await;
            return Outcome::Done;
        }
        if request.resume.is_some() {
            return self
                .resume(conn, entry, &request, deliveries, token, shutdown)
                .await;
        }
        let prepared = match self.prepare(&request) {
            Ok(p) => p,
            Err(e) => {
                self.answer(conn, &answer(Some(e), None), reply_to.as_deref())
                    .await;
                return Outcome::Done;
            }
        };
        let (harness, mut exec) = prepared;
        exec.cancel = token.clone();
        if !request.suspend {
            exec.durable = None;
        } else if exec.durable.is_none() {
            let why = "this worker does not suspend runs: start it with --suspend and keys in [durable] keys_env".to_owned();
            self.answer(
                conn,
                &answer(err("SuspendUnavailable", why), None),
                reply_to.as_deref(),
            )
            .await;
            return Outcome::Done;
        }
        let session = match request.session.as_deref() {
            None => None,
            Some(NEW_SESSION) => match harness.open_session() {
                Ok(s) => Some(s),
                Err(e) => {
                    self.answer(
                        conn,
                        &answer(err("InvalidRequest", e.to_string()), None),
                        reply_to.as_deref(),
                    )
                    .await;
                    return Outcome::Done;
                }
            },
            Some(sid) => match harness.session(sid) {
                Ok(s) => Some(s),
                Err(e) => {
                    let closed = RunReply::session_closed(&id, &self.opts.consumer, &e.to_string());
                    self.answer(
                        conn,
                        &RunReply {
                            deliveries,
                            ..closed
                        },
                        reply_to.as_deref(),
                    )
                    .await;
                    return Outcome::Done;
                }
            },
        };
        if let Some(s) = &session {
            // Clients route the session's requests to this worker.
            let _: redis::RedisResult<()> = conn
                .set_ex(
                    key(&self.opts.stream, "session", s.id()),
                    &self.opts.consumer,
                    self.opts.ttl_s,
                )
                .await;
        }
        let observed = self.observed(conn, &id, exec, &token, &shutdown, |exec| async {
            match &session {
                Some(s) => s.execute(exec).await,
                None => harness.execute(exec).await,
            }
        });
        let Some(report) = observed.await else {
            return Outcome::Abandoned;
        };
        if report.suspension.is_some() {
            self.put_away(
                conn,
                &request,
                report,
                deliveries,
                request.reply_to.as_deref(),
            )
            .await;
            return Outcome::Done;
        }
        let reply = RunReply {
            session: session.as_ref().map(|s| s.id().to_owned()),
            ..answer(None, Some(report))
        };
        self.answer(conn, &reply, request.reply_to.as_deref()).await;
        Outcome::Done
    }

    /// Runs `run(exec)` with its console lines and progress written to
    /// `S:events:ID` (then `end`); on shutdown the run is cancelled and
    /// `None` says it was abandoned (left for another worker).
    async fn observed<F, Fut>(
        &self,
        conn: &ConnectionManager,
        id: &str,
        mut exec: harness::ExecutionRequest,
        token: &CancellationToken,
        shutdown: &CancellationToken,
        run: F,
    ) -> Option<ExecutionReport>
    where
        F: FnOnce(harness::ExecutionRequest) -> Fut,
        Fut: std::future::Future<Output = ExecutionReport>,
    {
        let events = key(&self.opts.stream, "events", id);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
        exec.observer = Some(harness::Observer::new(Arc::new(Events(tx.clone()))));
        let writer = tokio::spawn(write_events(conn.clone(), events, rx, self.opts.ttl_s));
        let run = run(exec);
        tokio::pin!(run);
        let mut abandoned = false;
        let report = tokio::select! {
            r = &mut run => r,
            _ = shutdown.cancelled() => {
                abandoned = true;
                token.cancel();
                run.await
            }
        };
        let _ = tx.send(json!({"kind": "end", "ok": report.ok}));
        drop(tx);
        let _ = writer.await;
        (!abandoned).then_some(report)
    }

    /// A run that suspended: its continuation (and what it ran under) to
    /// `S:suspended:ID`, the resume claim cleared for the next resume,
    /// and an interim reply.
    async fn put_away(
        &self,
        conn: &mut ConnectionManager,
        request: &RunRequest,
        report: ExecutionReport,
        deliveries: u64,
        reply_to: Option<&str>,
    ) {
        let Some(s) = &report.suspension else { return };
        let base = RunRequest {
            script: String::new(),
            reply_to: None,
            resume: None,
            ..request.clone()
        };
        let stored = json!({"request": base, "continuation": s.continuation});
        let ttl = self.suspended_ttl_s();
        let id = &request.id;
        let mut backoff = Backoff::new(Some(self.answer_retry()));
        loop {
            let r: redis::RedisResult<()> = redis::pipe()
                .set_ex(
                    key(&self.opts.stream, "suspended", id),
                    stored.to_string(),
                    ttl,
                )
                .ignore()
                .del(key(&self.opts.stream, "resumed", id))
                .ignore()
                .query_async(conn)
                .await;
            match r {
                Ok(()) => break,
                Err(e) if backoff.expired() => {
                    tracing::error!(id, error = %e, "cannot store a suspended run; it is lost");
                    break;
                }
                Err(_) => backoff.wait().await,
            }
        }
        let reply = RunReply {
            version: PROTOCOL_VERSION,
            id: id.clone(),
            report: Some(report),
            error: None,
            worker: self.opts.consumer.clone(),
            deliveries,
            session: None,
            interim: true,
        };
        if let Err(e) =
            write_interim(conn, &self.opts.stream, self.opts.ttl_s, &reply, reply_to).await
        {
            tracing::warn!(id, error = %e, "cannot write the interim reply of a suspended run");
        }
    }

    /// How long a suspended run is kept: its continuation's own limit.
    fn suspended_ttl_s(&self) -> u64 {
        let ms = self
            .harnesses
            .lock()
            .ok()
            .and_then(|c| {
                c.values()
                    .next()
                    .map(|(_, cfg)| cfg.settings().durable.max_suspended_ms)
            })
            .unwrap_or(harness::durable::DEFAULT_MAX_SUSPENDED_MS);
        (ms / 1000).max(1)
    }

    /// A request that resumes request `ID`'s suspended run: the stored
    /// continuation, taken once (`SET NX` on `S:resumed:ID`, by this
    /// stream entry, so that a redelivery of the same entry goes on), run
    /// under what the suspended run ran under; its reply is final, or
    /// interim again if it suspends again.
    async fn resume(
        &self,
        conn: &mut ConnectionManager,
        entry: &StreamId,
        request: &RunRequest,
        deliveries: u64,
        token: CancellationToken,
        shutdown: CancellationToken,
    ) -> Outcome {
        let id = &request.id;
        let reply_to = request.reply_to.as_deref();
        let reply = |report: ExecutionReport| RunReply {
            version: PROTOCOL_VERSION,
            id: id.clone(),
            report: Some(report),
            error: None,
            worker: self.opts.consumer.clone(),
            deliveries,
            session: None,
            interim: false,
        };
        let invalid = |why: String| {
            ExecutionReport::failed(
                "",
                harness::ScriptError::new(
                    harness::ErrorCode::ContinuationInvalidError,
                    harness::Phase::Parsing,
                    why,
                )
                .with_name("ContinuationInvalidError"),
            )
        };
        let stored: redis::RedisResult<Option<String>> =
            conn.get(key(&self.opts.stream, "suspended", id)).await;
        let stored = match stored {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(id, error = %e, "cannot read a suspended run; leaving the resume pending");
                return Outcome::Abandoned;
            }
        };
        let Some(stored) = stored.and_then(|s| serde_json::from_str::<Value>(&s).ok()) else {
            let why = format!("request {id} has no suspended run (it expired, or never suspended)");
            self.answer(conn, &reply(invalid(why)), reply_to).await;
            return Outcome::Done;
        };
        let claim = key(&self.opts.stream, "resumed", id);
        let taken: redis::RedisResult<bool> = redis::cmd("SET")
            .arg(&claim)
            .arg(&entry.id)
            .arg("NX")
            .arg("EX")
            .arg(self.suspended_ttl_s())
            .query_async::<Option<String>>(conn)
            .await
            .map(|r| r.is_some());
        match taken {
            Ok(true) => {}
            Ok(false) => {
                let by: Option<String> = conn.get(&claim).await.ok().flatten();
                if by.as_deref() != Some(entry.id.as_str()) {
                    tracing::warn!(
                        id,
                        "a second resume of one suspension; dropped (the first one answers)"
                    );
                    return Outcome::Done;
                }
            }
            Err(e) => {
                tracing::warn!(id, error = %e, "cannot claim the resume; leaving it pending");
                return Outcome::Abandoned;
            }
        }
        let base: Option<RunRequest> = serde_json::from_value(stored["request"].clone()).ok();
        let continuation = stored["continuation"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let Some(base) = base else {
            self.answer(
                conn,
                &reply(invalid("the stored run is unreadable".into())),
                reply_to,
            )
            .await;
            return Outcome::Done;
        };
        let (harness, mut exec) = match self.prepare(&base) {
            Ok(p) => p,
            Err(e) => {
                let r = RunReply {
                    error: Some(e),
                    report: None,
                    ..reply(invalid(String::new()))
                };
                self.answer(conn, &r, reply_to).await;
                return Outcome::Done;
            }
        };
        exec.cancel = token.clone();
        let answers = harness
            .pending(&continuation)
            .map_err(|e| e.message)
            .and_then(|p| request.resume.clone().unwrap_or_default().for_calls(&p));
        let answers = match answers {
            Ok(a) => a,
            Err(why) => {
                // Not final: a resume with the right answers may follow.
                let _: redis::RedisResult<i64> = conn.del(&claim).await;
                let r = RunReply {
                    error: Some(RequestError {
                        code: "InvalidRequest".into(),
                        message: why,
                    }),
                    report: None,
                    interim: true,
                    ..reply(invalid(String::new()))
                };
                let _ = write_interim(conn, &self.opts.stream, self.opts.ttl_s, &r, reply_to).await;
                return Outcome::Done;
            }
        };
        let observed = self.observed(conn, id, exec, &token, &shutdown, |exec| {
            harness.resume_with(exec, &continuation, answers)
        });
        let Some(report) = observed.await else {
            return Outcome::Abandoned;
        };
        // A session's run went on in a new session, on this worker now.
        let moved = report.session.clone();
        if let Some(sid) = &moved {
            let _: redis::RedisResult<()> = conn
                .set_ex(
                    key(&self.opts.stream, "session", sid),
                    &self.opts.consumer,
                    self.opts.ttl_s,
                )
                .await;
        }
        if report.suspension.is_some() {
            self.put_away(conn, &base, report, deliveries, reply_to)
                .await;
            return Outcome::Done;
        }
        let r = RunReply {
            session: moved,
            ..reply(report)
        };
        self.answer(conn, &r, reply_to).await;
        let _: redis::RedisResult<i64> = conn
            .del(&[key(&self.opts.stream, "suspended", id), claim])
            .await;
        Outcome::Done
    }

    /// The harness and the request to run, or why not.
    pub(super) fn prepare(
        &self,
        request: &RunRequest,
    ) -> Result<(Harness, harness::ExecutionRequest), RequestError> {
        let fail = |code: &str, message: String| RequestError {
            code: code.into(),
            message,
        };
        let (harness, config) = {
            let mut cache = self.harnesses.lock().map_err(|_| {
                fail(
                    "InvalidRequest",
                    "the worker's harness cache is poisoned".into(),
                )
            })?;
            let k = request.provider.clone();
            if let Some(h) = cache.get(&k) {
                h.clone()
            } else {
                let built = (self.factory)(request.provider.as_deref())
                    .map_err(|e| fail("UnknownProvider", e))?;
                cache.insert(k, built.clone());
                built
            }
        };
        let mut exec = harness.request(&request.script);
        if let Some(l) = request.language {
            exec.language = l;
        }
        if let Some(limits) = &request.limits {
            let mut o = harness::config::Overrides::new();
            for (k, v) in limits {
                o = o
                    .set(&format!("limits.{k}"), v.clone())
                    .map_err(|e| fail("InvalidLimits", e.to_string()))?;
            }
            let c = config
                .with_overrides(&o)
                .map_err(|e| fail("InvalidLimits", e.to_string()))?;
            exec.limits = c
                .settings()
                .limits
                .clone()
                .with_isolation(exec.limits.isolation);
        }
        if let Some(tools) = &request.tools {
            let registry = harness.registry();
            let exposed: BTreeSet<String> = harness.tool_names().into_iter().collect();
            let asked: BTreeSet<String> = Allowlist::only(tools.iter().cloned())
                .resolve(registry)
                .into_iter()
                .collect();
            let unknown: Vec<&String> = tools
                .iter()
                .filter(|t| registry.get(t).is_none() && registry.pack(t).is_none())
                .collect();
            let beyond: Vec<&String> = asked.difference(&exposed).collect();
            if !unknown.is_empty() || !beyond.is_empty() {
                let names: Vec<String> = unknown
                    .into_iter()
                    .chain(beyond)
                    .map(|s| s.to_string())
                    .collect();
                return Err(fail(
                    "ToolsNotExposed",
                    format!(
                        "the request asks for {} which this worker does not expose (it exposes: {})",
                        names.join(", "),
                        exposed.into_iter().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            exec.tools.allow = Allowlist::only(tools.iter().cloned());
        }
        if let Some(ctx) = &request.context {
            exec.context = exec
                .context
                .clone()
                .merge_script_json(ctx)
                .map_err(|e| fail("InvalidRequest", format!("context: {e}")))?;
        }
        Ok((harness, exec))
    }

    /// Writes `reply` (once: see [`ANSWER`]), retrying while Redis is away.
    pub(super) async fn answer(
        &self,
        conn: &mut ConnectionManager,
        reply: &RunReply,
        reply_to: Option<&str>,
    ) {
        let mut backoff = Backoff::new(Some(self.answer_retry()));
        loop {
            let r = write_answer(conn, &self.opts.stream, self.opts.ttl_s, reply, reply_to).await;
            match r {
                Ok(true) => {
                    return;
                }
                Ok(false) => {
                    tracing::info!(id = %reply.id, "the request was answered already; not answering twice");
                    return;
                }
                Err(e) if backoff.expired() => {
                    tracing::error!(id = %reply.id, error = %e, "gave up writing an answer; the entry stays pending and will run again");
                    return;
                }
                Err(e) => {
                    tracing::warn!(id = %reply.id, error = %e, "cannot write the answer yet; keeping it");
                    backoff.wait().await;
                }
            }
        }
    }

    pub(super) fn answer_retry(&self) -> Duration {
        Duration::from_millis(self.opts.answer_retry_ms)
    }

    pub(super) async fn dead_letter(
        &self,
        conn: &mut ConnectionManager,
        entry: &StreamId,
        id: &str,
        raw: &str,
        why: &str,
    ) {
        let dead = format!("{}:dead", self.opts.stream);
        let r: redis::RedisResult<String> = conn
            .xadd(
                &dead,
                "*",
                &[
                    ("id", id),
                    ("entry", entry.id.as_str()),
                    ("request", raw),
                    ("error", why),
                ],
            )
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "cannot write to the dead-letter stream");
        }
        tracing::warn!(id, entry = %entry.id, why, "request sent to the dead letters");
    }
}

/// The waits between retries while Redis is away: 100 ms, doubling up to
/// 5 s; `expired` once `bound` has passed since the first try.
pub(super) struct Backoff {
    pub(super) delay: Duration,
    pub(super) started: Instant,
    pub(super) bound: Option<Duration>,
}

impl Backoff {
    pub(super) fn new(bound: Option<Duration>) -> Self {
        Backoff {
            delay: Duration::from_millis(100),
            started: Instant::now(),
            bound,
        }
    }
    pub(super) fn expired(&self) -> bool {
        self.bound.is_some_and(|b| self.started.elapsed() > b)
    }
    pub(super) async fn wait(&mut self) {
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(Duration::from_secs(5));
    }
}

/// Takes a run's cancel token out of the running map when the delivery
/// is handled, whichever way it ends.
pub(super) struct Registered<'a> {
    pub(super) running: &'a Mutex<HashMap<String, CancellationToken>>,
    pub(super) id: String,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Ok(mut r) = self.running.lock() {
            r.remove(&self.id);
        }
    }
}

/// Console lines and progress, to the events stream.
pub(super) struct Events(tokio::sync::mpsc::UnboundedSender<Value>);

impl RunObserver for Events {
    fn progress(&self, message: &str, data: Option<&Value>) {
        let _ = self
            .0
            .send(json!({"kind": "progress", "message": message, "data": data}));
    }
    fn console(&self, level: harness::ConsoleLevel, text: &str) {
        let _ = self
            .0
            .send(json!({"kind": "console", "level": level, "text": text}));
    }
}

pub(super) async fn write_events(
    mut conn: ConnectionManager,
    stream: String,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Value>,
    ttl_s: u64,
) {
    let mut first = true;
    while let Some(event) = rx.recv().await {
        let r: redis::RedisResult<String> = conn
            .xadd_maxlen(
                &stream,
                redis::streams::StreamMaxlen::Approx(10_000),
                "*",
                &[("event", event.to_string())],
            )
            .await;
        if r.is_ok() && first {
            first = false;
            let _: redis::RedisResult<bool> = conn.expire(&stream, ttl_s as i64).await;
        }
    }
}
