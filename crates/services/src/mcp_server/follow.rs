//! The catalogue, followed: when the upstream MCP servers' tools change
//! (a server started again with others, or one that said so), the server's
//! harness is relisted and every client session is told:
//! `notifications/tools/list_changed` (run_script's description changed),
//! and `notifications/resources/updated` for the subscribed resources that
//! declare the tools. Sessions of protocol 2026-07-28 hear the same
//! through `subscriptions/listen`.

use harness::Harness;
use rmcp::model::{ResourceUpdatedNotificationParam, SubscriptionFilter};
use rmcp::service::{Peer, RoleServer, SubscriptionContext};
use rmcp::ErrorData;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};

/// Subscriptions one session may hold.
const MAX_SUBSCRIPTIONS: usize = 256;
/// The longest URI one may name.
const MAX_URI_BYTES: usize = 2048;

/// Whether the resource `uri` changes with the catalogue.
fn follows_the_catalogue(uri: &str) -> bool {
    uri == "harness://tools.d.ts" || uri.starts_with("harness://tools/")
}

/// What every session of one server shares.
pub(super) struct Shared {
    /// The harness, and `run_script`'s description of its tools.
    harness: RwLock<(Harness, Arc<str>)>,
    /// Above this many bytes of declarations, that description lists
    /// names and summaries only.
    max_description_bytes: usize,
    /// The sessions told of changes by notifications of their own
    /// (`resources/subscribe` and before).
    sessions: Mutex<Vec<(Peer<RoleServer>, Subscriptions)>>,
    /// Goes up when the harness was relisted.
    relisted: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    pub(super) fn new(harness: Harness, max_description_bytes: usize) -> Self {
        let description = super::run_description(&harness, max_description_bytes).into();
        Shared {
            harness: RwLock::new((harness, description)),
            max_description_bytes,
            sessions: Mutex::default(),
            relisted: tokio::sync::watch::channel(0).0,
        }
    }

    pub(super) fn harness(&self) -> Harness {
        match self.harness.read() {
            Ok(h) => h.0.clone(),
            Err(poisoned) => poisoned.into_inner().0.clone(),
        }
    }

    /// `run_script`'s description, made when the harness was (re)listed.
    pub(super) fn description(&self) -> Arc<str> {
        match self.harness.read() {
            Ok(h) => h.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        }
    }

    /// A session finished `initialize`: it hears of changes from now on.
    pub(super) fn joined(&self, peer: Peer<RoleServer>, subscriptions: Subscriptions) {
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.retain(|(p, _)| !p.is_transport_closed());
            sessions.push((peer, subscriptions));
        }
    }

    /// Follows the upstream servers' listings until the result is dropped
    /// (nothing to follow without upstream servers).
    pub(super) fn follow(self: &Arc<Self>) -> Option<Following> {
        let mut changes = self.harness().catalogue_changes()?;
        let shared = self.clone();
        Some(Following(tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                shared.relist().await;
            }
        })))
    }

    async fn relist(&self) {
        let relisted = match self.harness().relisted() {
            Ok(Some(h)) => h,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "the upstream tools changed, but the harness could not list them again");
                return;
            }
        };
        let description = super::run_description(&relisted, self.max_description_bytes).into();
        match self.harness.write() {
            Ok(mut h) => *h = (relisted, description),
            Err(poisoned) => *poisoned.into_inner() = (relisted, description),
        }
        self.relisted.send_modify(|n| *n += 1);
        let sessions = match self.sessions.lock() {
            Ok(mut s) => {
                s.retain(|(p, _)| !p.is_transport_closed());
                s.clone()
            }
            Err(_) => return,
        };
        for (peer, subscriptions) in sessions {
            let _ = peer.notify_tool_list_changed().await;
            for uri in subscriptions.following() {
                let _ = peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await;
            }
        }
    }

    /// One `subscriptions/listen` stream: told of each relisting until the
    /// client cancels it.
    pub(super) async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let mut relisted = self.relisted.subscribe();
        let accepted = context.accepted().clone();
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                changed = relisted.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    if accepted.tools_list_changed == Some(true) {
                        let _ = context.sink().notify_tool_list_changed().await;
                    }
                    for uri in accepted.resource_subscriptions.iter().flatten() {
                        let _ = context.sink().notify_resource_updated(uri.clone()).await;
                    }
                }
            }
        }
    }
}

/// What a `subscriptions/listen` request gets of what it asked for: the
/// tool list, and the resources that change with it.
pub(super) fn accepted(requested: &SubscriptionFilter) -> SubscriptionFilter {
    let mut f = SubscriptionFilter::new();
    f.tools_list_changed = requested.tools_list_changed;
    f.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
        uris.iter()
            .filter(|u| follows_the_catalogue(u))
            .take(MAX_SUBSCRIPTIONS)
            .cloned()
            .collect()
    });
    f
}

/// The resources one session subscribed to (any URI is accepted, as the
/// protocol has it; only ours are ever updated).
#[derive(Debug, Clone, Default)]
pub(super) struct Subscriptions(Arc<Mutex<BTreeSet<String>>>);

impl Subscriptions {
    pub(super) fn add(&self, uri: String) -> Result<(), ErrorData> {
        if uri.len() > MAX_URI_BYTES {
            return Err(ErrorData::invalid_params(
                format!("a resource URI has at most {MAX_URI_BYTES} bytes"),
                None,
            ));
        }
        let mut set = self
            .0
            .lock()
            .map_err(|_| ErrorData::internal_error("", None))?;
        if !set.contains(&uri) && set.len() >= MAX_SUBSCRIPTIONS {
            return Err(ErrorData::invalid_params(
                format!("a session holds at most {MAX_SUBSCRIPTIONS} subscriptions"),
                None,
            ));
        }
        set.insert(uri);
        Ok(())
    }

    pub(super) fn remove(&self, uri: &str) {
        if let Ok(mut set) = self.0.lock() {
            set.remove(uri);
        }
    }

    /// The subscribed resources that change with the catalogue.
    fn following(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|u| follows_the_catalogue(u))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Following the catalogue; dropping it stops.
pub(super) struct Following(tokio::task::JoinHandle<()>);

impl Drop for Following {
    fn drop(&mut self) {
        self.0.abort();
    }
}
