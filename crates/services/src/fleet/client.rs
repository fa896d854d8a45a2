//! The fleet's client: submits requests and reads the answers.

use super::*;

/// Submits requests and reads what the fleet answers.
#[derive(Clone)]
pub struct FleetClient {
    pub(super) conn: ConnectionManager,
    pub(super) stream: String,
    pub(super) ttl_s: u64,
}

impl std::fmt::Debug for FleetClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetClient")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl FleetClient {
    /// Connects to Redis `url`, for the requests stream `stream`.
    pub async fn connect(url: &str, stream: &str) -> Result<FleetClient, FleetError> {
        let client = redis::Client::open(url)?;
        // Blocking reads (read_replies) wait up to their block_ms: the
        // response timeout must be longer.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(60)));
        Ok(FleetClient {
            conn: ConnectionManager::new_with_config(client, config).await?,
            stream: stream.to_owned(),
            ttl_s: 86_400,
        })
    }

    /// Adds `request` to the stream; returns its id. A request of an
    /// existing session goes to the stream of the worker that owns it;
    /// where that worker is gone (or the session unknown), the client
    /// answers it itself with `SessionClosedError`, as a worker would.
    pub async fn submit(&mut self, request: &RunRequest) -> Result<String, FleetError> {
        if request.id.is_empty() || request.id.len() > 256 {
            return Err(FleetError::Invalid("the id must be 1 to 256 bytes".into()));
        }
        let json = serde_json::to_string(request)?;
        let target = match request.session.as_deref() {
            Some(sid) if sid != NEW_SESSION => match self.owner(sid).await? {
                Ok(consumer) => key(&self.stream, "worker", &consumer),
                Err(why) => {
                    let reply = RunReply::session_closed(&request.id, "client", &why);
                    write_answer(
                        &mut self.conn,
                        &self.stream,
                        self.ttl_s,
                        &reply,
                        request.reply_to.as_deref(),
                    )
                    .await?;
                    return Ok(request.id.clone());
                }
            },
            _ => self.stream.clone(),
        };
        let _: String = self.conn.xadd(&target, "*", &[("request", json)]).await?;
        Ok(request.id.clone())
    }

    /// The live worker that owns session `sid`, or why there is none.
    async fn owner(&mut self, sid: &str) -> Result<Result<String, String>, FleetError> {
        let consumer: Option<String> = self.conn.get(key(&self.stream, "session", sid)).await?;
        let Some(consumer) = consumer else {
            return Ok(Err(
                "no such session: it was closed, expired or never opened in this fleet".to_owned(),
            ));
        };
        let alive: bool = self
            .conn
            .exists(key(&self.stream, "alive", &consumer))
            .await?;
        Ok(if alive {
            Ok(consumer)
        } else {
            Err(format!(
                "the session's worker ({consumer}) is gone, and its sessions with it"
            ))
        })
    }

    /// Adds a raw JSON request (checked by the worker, not here).
    pub async fn submit_raw(&mut self, json: &str) -> Result<(), FleetError> {
        let _: String = self
            .conn
            .xadd(&self.stream, "*", &[("request", json)])
            .await?;
        Ok(())
    }

    /// Waits up to `timeout` for the reply to a request submitted without
    /// `reply_to` (polls its reply key).
    pub async fn wait(
        &mut self,
        id: &str,
        timeout: Duration,
    ) -> Result<Option<RunReply>, FleetError> {
        let k = key(&self.stream, "reply", id);
        let until = Instant::now() + timeout;
        let mut delay = Duration::from_millis(5);
        loop {
            let v: Option<String> = self.conn.get(&k).await?;
            if let Some(v) = v {
                return Ok(Some(serde_json::from_str(&v)?));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            tokio::time::sleep(delay.min(until.saturating_duration_since(Instant::now()))).await;
            delay = (delay * 2).min(Duration::from_millis(100));
        }
    }

    /// Reads replies from the stream `reply_to`, after the entry id
    /// `after` (`"0"` for all), waiting up to `block_ms` (under 60 s);
    /// returns them with the id to read after next time.
    pub async fn read_replies(
        &mut self,
        reply_to: &str,
        after: &str,
        block_ms: usize,
    ) -> Result<(Vec<RunReply>, String), FleetError> {
        let opts = StreamReadOptions::default().block(block_ms).count(1000);
        let r: Option<StreamReadReply> = self
            .conn
            .xread_options(&[reply_to], &[after], &opts)
            .await?;
        let mut last = after.to_owned();
        let mut out = Vec::new();
        for k in r.map(|r| r.keys).unwrap_or_default() {
            for e in k.ids {
                last = e.id.clone();
                if let Some(j) = e.get::<String>("reply") {
                    out.push(serde_json::from_str(&j)?);
                }
            }
        }
        Ok((out, last))
    }

    /// The events of request `id` so far (console lines, progress, `end`).
    pub async fn events(&mut self, id: &str) -> Result<Vec<Value>, FleetError> {
        let r: redis::streams::StreamRangeReply = self
            .conn
            .xrange_all(key(&self.stream, "events", id))
            .await?;
        Ok(r.ids
            .into_iter()
            .filter_map(|e| e.get::<String>("event"))
            .filter_map(|s| serde_json::from_str(&s).ok())
            .collect())
    }

    /// Cancels request `id`: a run in progress stops (ScriptCancelledError),
    /// one not started yet is answered `Cancelled`.
    pub async fn cancel(&mut self, id: &str) -> Result<(), FleetError> {
        let _: () = self
            .conn
            .set_ex(key(&self.stream, "cancelled", id), 1, self.ttl_s)
            .await?;
        let _: i64 = self
            .conn
            .publish(format!("{}:cancel", self.stream), id)
            .await?;
        Ok(())
    }

    /// Deletes a stream (a private reply stream, once its replies are read).
    pub async fn delete_stream(&mut self, stream: &str) {
        let _: redis::RedisResult<i64> = self.conn.del(stream).await;
    }

    /// The dead letters: (id, error) of each.
    pub async fn dead_letters(&mut self) -> Result<Vec<(String, String)>, FleetError> {
        let r: redis::streams::StreamRangeReply = self
            .conn
            .xrange_all(format!("{}:dead", self.stream))
            .await?;
        Ok(r.ids
            .into_iter()
            .map(|e| {
                (
                    e.get::<String>("id").unwrap_or_default(),
                    e.get::<String>("error").unwrap_or_default(),
                )
            })
            .collect())
    }
}
