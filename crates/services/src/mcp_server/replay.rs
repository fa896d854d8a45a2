//! Streams a client can pick up again. A client whose connection drops
//! while a run runs reconnects with `GET` and `Last-Event-ID` (the event
//! id of the last event it saw, which every stream's first event gives
//! it). rmcp's session manager resumes a stream whose request is still
//! being answered, but forgets a request's stream once its answer went
//! out, to the dropped connection or not; so the answer of a run that
//! ended while its client was away would be lost. This manager keeps each
//! request stream's events (the latest [`KEPT_EVENTS`], for [`KEEP_FOR`]
//! after its answer) and replays those after `Last-Event-ID` when rmcp no
//! longer can.

use futures::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a request's events are kept after its answer.
pub(super) const KEEP_FOR: Duration = Duration::from_secs(60);
/// Events kept per request stream (the latest; the answer is the last).
pub(super) const KEPT_EVENTS: usize = 256;
/// How long a stream with no answer is kept after its last event.
const IDLE_FOR: Duration = Duration::from_secs(600);
/// Bytes of events kept in all; past this, the oldest answered streams
/// go first.
pub(super) const KEPT_BYTES: usize = 64 << 20;

type Events = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// One request stream's events.
#[derive(Default)]
struct Kept {
    events: VecDeque<(ServerSseMessage, usize)>,
    answered: Option<Instant>,
    /// When its last event came (a stream left unanswered, its session
    /// gone, is forgotten after [`IDLE_FOR`]).
    last: Option<Instant>,
}

impl Kept {
    /// The bytes its events hold.
    fn bytes(&self) -> usize {
        self.events.iter().map(|(_, n)| n).sum()
    }
}

/// Request streams by session and by the stream part of their event
/// ids, and the bytes their events hold.
#[derive(Default)]
struct Streams {
    by_stream: HashMap<(SessionId, String), Kept>,
    bytes: usize,
}

impl Streams {
    /// Keeps `event` (`size` bytes) in its stream; forgets what is too old
    /// or over the budget.
    fn keep(&mut self, key: (SessionId, String), event: &ServerSseMessage, size: usize) {
        let entry = self.by_stream.entry(key).or_default();
        if entry
            .events
            .iter()
            .any(|(e, _)| e.event_id == event.event_id)
        {
            return;
        }
        if entry.events.len() == KEPT_EVENTS {
            if let Some((_, n)) = entry.events.pop_front() {
                self.bytes -= n;
            }
        }
        entry.events.push_back((event.clone(), size));
        entry.last = Some(Instant::now());
        if event.message.as_deref().is_some_and(|m| {
            matches!(
                m,
                ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_)
            )
        }) {
            entry.answered = Some(Instant::now());
        }
        self.bytes += size;
        self.forget_old();
    }

    fn forget_old(&mut self) {
        let mut freed = 0;
        self.by_stream.retain(|_, k| {
            let keep = k.answered.is_none_or(|at| at.elapsed() < KEEP_FOR)
                && k.last.is_none_or(|at| at.elapsed() < IDLE_FOR);
            if !keep {
                freed += k.bytes();
            }
            keep
        });
        self.bytes -= freed;
        while self.bytes > KEPT_BYTES {
            let oldest = self
                .by_stream
                .iter()
                .filter_map(|(key, k)| k.answered.map(|at| (at, key.clone())))
                .min_by_key(|(at, _)| *at)
                .map(|(_, key)| key);
            let Some(k) = oldest.and_then(|key| self.by_stream.remove(&key)) else {
                break;
            };
            self.bytes -= k.bytes();
        }
    }

    fn forget_session(&mut self, id: &SessionId) {
        let mut freed = 0;
        self.by_stream.retain(|(session, _), k| {
            let keep = session != id;
            if !keep {
                freed += k.bytes();
            }
            keep
        });
        self.bytes -= freed;
    }
}

/// rmcp's in-memory session manager, with request streams kept for
/// replay (see the module docs).
#[derive(Default)]
pub(super) struct Replaying {
    inner: LocalSessionManager,
    kept: Arc<Mutex<Streams>>,
}

/// An event id's parts: `INDEX/STREAM` for a request's stream.
fn parts(event_id: &str) -> Option<(u64, &str)> {
    let (index, stream) = event_id.split_once('/')?;
    Some((index.parse().ok()?, stream))
}

impl SessionManager for Replaying {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        if let Ok(mut kept) = self.kept.lock() {
            kept.forget_session(id);
        }
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let inner = self.inner.create_stream(id, message).await?;
        Ok(drain(self.kept.clone(), id.clone(), inner))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_standalone_stream(id).await
    }

    /// rmcp's resumption while the request is being answered (its events
    /// kept as they go); after that, the kept events after
    /// `last_event_id`.
    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        if let Some(events) = self.replay(id, &last_event_id, true) {
            return Ok(Box::pin(futures::stream::iter(events)) as Events);
        }
        match self.inner.resume(id, last_event_id.clone()).await {
            Ok(live) if parts(&last_event_id).is_some() => {
                Ok(drain(self.kept.clone(), id.clone(), live))
            }
            Ok(live) => Ok(Box::pin(live) as Events),
            Err(e) => match self.replay(id, &last_event_id, false) {
                Some(events) => Ok(Box::pin(futures::stream::iter(events)) as Events),
                None => Err(e),
            },
        }
    }
}

impl Replaying {
    /// The kept events of `last_event_id`'s stream after it (`answered`:
    /// only once that stream's answer went out).
    fn replay(
        &self,
        id: &SessionId,
        last_event_id: &str,
        answered: bool,
    ) -> Option<Vec<ServerSseMessage>> {
        let (after, stream) = parts(last_event_id)?;
        let kept = self.kept.lock().ok()?;
        let k = kept.by_stream.get(&(id.clone(), stream.to_owned()))?;
        if answered && k.answered.is_none() {
            return None;
        }
        Some(
            k.events
                .iter()
                .map(|(e, _)| e)
                .filter(|e| {
                    e.event_id
                        .as_deref()
                        .and_then(parts)
                        .is_some_and(|(i, _)| i > after)
                })
                .cloned()
                .collect(),
        )
    }
}

/// `inner`, forwarded to the client by a task of its own that keeps each
/// event, so that the events (the answer too) outlive the client's
/// connection.
fn drain(
    kept: Arc<Mutex<Streams>>,
    session: SessionId,
    inner: impl Stream<Item = ServerSseMessage> + Send + 'static,
) -> Events {
    let mut inner = Box::pin(inner);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = inner.next().await {
            if let Some((_, stream)) = event.event_id.as_deref().and_then(parts) {
                let size = event
                    .message
                    .as_deref()
                    .map_or(0, |m| serde_json::to_vec(m).map_or(0, |v| v.len()))
                    + 64;
                if let Ok(mut kept) = kept.lock() {
                    kept.keep((session.clone(), stream.to_owned()), &event, size);
                }
            }
            let _ = tx.send(event);
        }
    });
    Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(i: usize) -> ServerSseMessage {
        let mut e = ServerSseMessage::default();
        e.event_id = Some(format!("{i}/7"));
        e
    }

    #[test]
    fn what_is_kept_is_bounded_and_its_bytes_add_up() {
        let mut s = Streams::default();
        let session: SessionId = "s".into();
        let key = (session.clone(), "7".to_owned());
        for i in 0..KEPT_EVENTS + 44 {
            s.keep(key.clone(), &event(i), 100);
        }
        // The same event twice is kept once.
        s.keep(key.clone(), &event(KEPT_EVENTS + 43), 100);
        let kept = &s.by_stream[&key];
        assert_eq!(kept.events.len(), KEPT_EVENTS);
        assert_eq!(kept.events[0].0.event_id.as_deref(), Some("44/7"));
        assert_eq!(s.bytes, KEPT_EVENTS * 100);
        assert!(kept.answered.is_none(), "no answer yet");

        // Past the byte budget, the oldest answered stream goes first.
        let mut big = Streams::default();
        for n in 0..3 {
            let k = (session.clone(), n.to_string());
            big.by_stream.entry(k.clone()).or_default().answered = Some(Instant::now());
            big.keep(k, &event(n), KEPT_BYTES / 2);
        }
        assert!(big.bytes <= KEPT_BYTES, "{}", big.bytes);
        assert!(!big
            .by_stream
            .contains_key(&(session.clone(), "0".to_owned())));

        s.forget_session(&session);
        assert_eq!((s.bytes, s.by_stream.len()), (0, 0));
    }
}
