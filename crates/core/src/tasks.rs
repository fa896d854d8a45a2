//! Detached tasks: tool calls a script starts with `tools.spawn.exec` that
//! outlive the script.
//!
//! A spawned call passes the same tool facade as any call (allowlist,
//! schema, budget, approval) and counts against the run's budget, but it
//! is not cancelled when the script ends and is never a
//! DetachedPromiseError. It runs under its own deadline (the tool's own
//! timeout, at most [`TaskLimits::timeout_ms`]) and the caps on tasks per
//! run and per registry. The host owns the [`DetachedTasks`] registry: it
//! can read, await or cancel a task by id after the run, and subscribe to
//! tasks ending.

use crate::report::CallError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use crate::report::{DetachedTask, TaskStatus};

/// The caps on detached tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct TaskLimits {
    /// Tasks one run may start.
    pub max_per_run: u32,
    /// Tasks running at once in the registry (all runs).
    pub max_running: u32,
    /// Longest a task may run; tools with a shorter timeout of their own
    /// stop sooner.
    pub timeout_ms: u64,
}

impl Default for TaskLimits {
    fn default() -> Self {
        TaskLimits {
            max_per_run: 8,
            max_running: 32,
            timeout_ms: 600_000,
        }
    }
}

impl TaskLimits {
    /// With at most `n` tasks per run.
    pub fn with_max_per_run(mut self, n: u32) -> Self {
        self.max_per_run = n;
        self
    }
    /// With at most `n` tasks running at once.
    pub fn with_max_running(mut self, n: u32) -> Self {
        self.max_running = n;
        self
    }
    /// With tasks stopped after `ms` milliseconds.
    pub fn with_timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = ms;
        self
    }
}

struct Entry {
    state: watch::Sender<DetachedTask>,
    cancel: CancellationToken,
}

/// The detached tasks of a host (a `Harness`): shared by its runs, kept
/// after they end. Finished tasks are kept (the last 1024) so the host can
/// read them after the run.
#[derive(Default)]
pub struct DetachedTasks {
    limits: TaskLimits,
    next: AtomicU64,
    tasks: Mutex<HashMap<String, Entry>>,
    /// Finished task ids, oldest first, for pruning.
    finished: Mutex<std::collections::VecDeque<String>>,
    listeners: Mutex<Vec<mpsc::UnboundedSender<DetachedTask>>>,
}

const KEPT_FINISHED: usize = 1024;

impl std::fmt::Debug for DetachedTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DetachedTasks")
            .field("limits", &self.limits)
            .field("running", &self.running())
            .finish()
    }
}

/// Why a task could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused(pub(crate) String);

impl DetachedTasks {
    /// A registry with these caps.
    pub fn new(limits: TaskLimits) -> Self {
        DetachedTasks {
            limits,
            ..DetachedTasks::default()
        }
    }

    /// The caps.
    pub fn limits(&self) -> TaskLimits {
        self.limits
    }

    /// Tasks still running.
    pub fn running(&self) -> usize {
        self.tasks
            .lock()
            .map(|t| {
                t.values()
                    .filter(|e| e.state.borrow().status == TaskStatus::Running)
                    .count()
            })
            .unwrap_or(0)
    }

    /// The task `id` as it stands now.
    pub fn get(&self, id: &str) -> Option<DetachedTask> {
        let tasks = self.tasks.lock().ok()?;
        tasks.get(id).map(|e| e.state.borrow().clone())
    }

    /// Waits until task `id` has ended and returns it (`None` for an
    /// unknown id).
    pub async fn wait(&self, id: &str) -> Option<DetachedTask> {
        let mut rx = {
            let tasks = self.tasks.lock().ok()?;
            tasks.get(id)?.state.subscribe()
        };
        let ended = rx
            .wait_for(|t| t.status != TaskStatus::Running)
            .await
            .map(|t| t.clone());
        match ended {
            Ok(t) => Some(t),
            // The sender is gone only if the entry was pruned.
            Err(_) => self.get(id),
        }
    }

    /// Waits for each of `ids` to end, at most `timeout` in all; cancels
    /// those still running then, and returns every one as it ended.
    pub async fn wait_all(&self, ids: &[String], timeout: Duration) -> Vec<DetachedTask> {
        let all = async {
            for id in ids {
                self.wait(id).await;
            }
        };
        if tokio::time::timeout(timeout, all).await.is_err() {
            for id in ids {
                self.cancel(id);
            }
            for id in ids {
                // Cancelled tools end promptly; do not wait on one that
                // ignores its token for more than a moment.
                let _ = tokio::time::timeout(Duration::from_millis(500), self.wait(id)).await;
            }
        }
        ids.iter().filter_map(|id| self.get(id)).collect()
    }

    /// Waits, at most `timeout`, for every task running now to end;
    /// cancels the rest then. Returns them as they ended.
    pub async fn wait_idle(&self, timeout: Duration) -> Vec<DetachedTask> {
        let ids: Vec<String> = self
            .tasks
            .lock()
            .map(|t| {
                t.iter()
                    .filter(|(_, e)| e.state.borrow().status == TaskStatus::Running)
                    .map(|(id, _)| id.clone())
                    .collect()
            })
            .unwrap_or_default();
        self.wait_all(&ids, timeout).await
    }

    /// Cancels task `id`. Returns whether it was running.
    pub fn cancel(&self, id: &str) -> bool {
        let Ok(tasks) = self.tasks.lock() else {
            return false;
        };
        match tasks.get(id) {
            Some(e) if e.state.borrow().status == TaskStatus::Running => {
                e.cancel.cancel();
                true
            }
            _ => false,
        }
    }

    /// A channel that receives every task as it ends (from now on).
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<DetachedTask> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut l) = self.listeners.lock() {
            l.push(tx);
        }
        rx
    }

    /// Registers a new running task, unless a cap is reached. `started`
    /// is how many this run started before.
    pub(crate) fn register(
        &self,
        tool: &str,
        script_id: &str,
        started: u32,
    ) -> Result<(String, CancellationToken), Refused> {
        if started >= self.limits.max_per_run {
            return Err(Refused(format!(
                "a script may start at most {} detached tasks",
                self.limits.max_per_run
            )));
        }
        if self.running() >= self.limits.max_running as usize {
            return Err(Refused(format!(
                "{} detached tasks are already running; wait for one to end",
                self.limits.max_running
            )));
        }
        let id = format!("task_{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let cancel = CancellationToken::new();
        let (state, _) = watch::channel(DetachedTask {
            id: id.clone(),
            tool: tool.to_owned(),
            script_id: script_id.to_owned(),
            status: TaskStatus::Running,
            result: None,
            error: None,
            duration_ms: None,
        });
        let mut tasks = self.tasks.lock().map_err(|_| Refused("poisoned".into()))?;
        tasks.insert(
            id.clone(),
            Entry {
                state,
                cancel: cancel.clone(),
            },
        );
        metrics::gauge!("detached_tasks_running").increment(1.0);
        Ok((id, cancel))
    }

    /// Records how task `id` ended and tells the listeners.
    pub(crate) fn finish(
        &self,
        id: &str,
        status: TaskStatus,
        result: Option<Value>,
        error: Option<CallError>,
        duration_ms: f64,
    ) {
        let ended = {
            let Ok(tasks) = self.tasks.lock() else {
                return;
            };
            let Some(e) = tasks.get(id) else {
                return;
            };
            // Before the end is published: a waiter woken by it (on
            // another thread) must not see the task still counted as
            // running (a metrics test caught that under load).
            metrics::gauge!("detached_tasks_running").decrement(1.0);
            e.state.send_modify(|t| {
                t.status = status;
                t.result = result;
                t.error = error;
                t.duration_ms = Some(duration_ms);
            });
            let ended = e.state.borrow().clone();
            ended
        };
        self.prune(id);
        if let Ok(mut l) = self.listeners.lock() {
            l.retain(|tx| tx.send(ended.clone()).is_ok());
        }
    }

    fn prune(&self, id: &str) {
        let Ok(mut finished) = self.finished.lock() else {
            return;
        };
        finished.push_back(id.to_owned());
        while finished.len() > KEPT_FINISHED {
            if let (Some(old), Ok(mut tasks)) = (finished.pop_front(), self.tasks.lock()) {
                tasks.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_are_capped_awaited_and_cancelled() {
        let reg = DetachedTasks::new(TaskLimits::default().with_max_per_run(2));
        let (a, _) = reg.register("exec", "scr_1", 0).unwrap();
        let (b, token) = reg.register("exec", "scr_1", 1).unwrap();
        assert!(reg.register("exec", "scr_1", 2).is_err());
        assert_eq!(reg.running(), 2);
        let mut events = reg.subscribe();
        reg.finish(&a, TaskStatus::Ok, Some(serde_json::json!(1)), None, 1.0);
        assert_eq!(reg.wait(&a).await.unwrap().status, TaskStatus::Ok);
        assert_eq!(events.recv().await.unwrap().id, a);
        assert!(reg.cancel(&b));
        assert!(token.is_cancelled());
        assert!(!reg.cancel(&a), "an ended task is not cancelled");
        reg.finish(&b, TaskStatus::Cancelled, None, None, 2.0);
        let all = reg.wait_all(&[a, b], Duration::from_secs(1)).await;
        assert_eq!(all.len(), 2);
        assert_eq!(reg.running(), 0);
        assert!(reg.get("task_99").is_none());
    }
}
