//! Worker threads for engines that are not `Send`.
//!
//! Each worker owns its engine state (created on the thread by a factory)
//! and runs jobs one at a time. The pool grows on demand up to a maximum and
//! never shrinks, so a job either finds an idle worker, starts a new one, or
//! waits in the queue; it is never stranded.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;
type Factory<S> = Arc<dyn Fn() -> S + Send + Sync>;

/// A growable pool of threads, each holding one `S`.
pub struct WorkerPool<S: 'static> {
    tx: Mutex<mpsc::Sender<Job<S>>>,
    rx: Arc<Mutex<mpsc::Receiver<Job<S>>>>,
    idle: Arc<AtomicUsize>,
    threads: AtomicUsize,
    max_threads: usize,
    stack_size: usize,
    name: String,
    factory: Factory<S>,
}

impl<S> fmt::Debug for WorkerPool<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerPool")
            .field("name", &self.name)
            .field("threads", &self.threads.load(Ordering::Relaxed))
            .field("max_threads", &self.max_threads)
            .finish()
    }
}

impl<S: 'static> WorkerPool<S> {
    /// A pool whose threads have `stack_size` bytes of stack and build their
    /// state with `factory`.
    pub fn new(
        name: &str,
        max_threads: usize,
        stack_size: usize,
        factory: impl Fn() -> S + Send + Sync + 'static,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        WorkerPool {
            tx: Mutex::new(tx),
            rx: Arc::new(Mutex::new(rx)),
            idle: Arc::new(AtomicUsize::new(0)),
            threads: AtomicUsize::new(0),
            max_threads: max_threads.max(1),
            stack_size,
            name: name.to_owned(),
            factory: Arc::new(factory),
        }
    }

    /// Threads started so far.
    pub fn threads(&self) -> usize {
        self.threads.load(Ordering::Relaxed)
    }

    /// Runs `job` on a worker. A panicking job is contained: the worker
    /// rebuilds its state and carries on. Returns an error only if no
    /// worker thread could be started.
    pub fn submit(&self, job: impl FnOnce(&mut S) + Send + 'static) -> Result<(), String> {
        let reserved = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |i| i.checked_sub(1))
            .is_ok();
        if !reserved {
            let n = self.threads.fetch_add(1, Ordering::AcqRel);
            if n < self.max_threads {
                if let Err(e) = self.spawn(n) {
                    self.threads.fetch_sub(1, Ordering::AcqRel);
                    if n == 0 {
                        return Err(e);
                    }
                }
            } else {
                self.threads.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let tx = self
            .tx
            .lock()
            .map_err(|_| "worker queue poisoned".to_owned())?;
        tx.send(Box::new(job))
            .map_err(|_| "worker queue closed".to_owned())
    }

    fn spawn(&self, n: usize) -> Result<(), String> {
        let rx = self.rx.clone();
        let idle = self.idle.clone();
        let factory = self.factory.clone();
        std::thread::Builder::new()
            .name(format!("{}-{n}", self.name))
            .stack_size(self.stack_size)
            .spawn(move || {
                let mut state = factory();
                loop {
                    let job = {
                        let Ok(rx) = rx.lock() else { return };
                        rx.recv()
                    };
                    let Ok(job) = job else { return };
                    if catch_unwind(AssertUnwindSafe(|| job(&mut state))).is_err() {
                        state = factory();
                    }
                    idle.fetch_add(1, Ordering::AcqRel);
                }
            })
            .map(|_| ())
            .map_err(|e| format!("could not start a worker thread: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_jobs_and_survives_panics() {
        let pool = WorkerPool::new("t", 2, 1 << 20, || 0u32);
        let (tx, rx) = mpsc::channel();
        pool.submit(|_| panic!("boom")).unwrap();
        for i in 0..10 {
            let tx = tx.clone();
            pool.submit(move |s| {
                *s += 1;
                tx.send(i).unwrap();
            })
            .unwrap();
        }
        let mut got: Vec<i32> = (0..10).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert!(pool.threads() <= 2);
    }
}
