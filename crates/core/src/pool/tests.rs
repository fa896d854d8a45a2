use super::*;

#[test]
fn an_idle_worker_does_its_idle_work_and_survives_a_panic_there() {
    // State: (jobs since idle, idle calls). Idle panics on its second
    // call; the state is then rebuilt.
    static IDLE_CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    fn idle(s: &mut (u32, u32)) {
        IDLE_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        s.1 += 1;
        assert!(s.1 != 2, "idle panics");
        s.0 = 0;
    }
    let pool = ThreadPool::new("t", 1, 1 << 20, || (0u32, 0u32)).with_idle(idle);
    let ask = |pool: &ThreadPool<(u32, u32)>| {
        let (tx, rx) = mpsc::channel();
        pool.submit(move |s| {
            s.0 += 1;
            tx.send(*s).unwrap();
        })
        .unwrap();
        rx.recv().unwrap()
    };
    // Waits for the worker's `n`th idle call to begin; a job sent then
    // waits for it to end.
    let settle = |n: u32| {
        while IDLE_CALLS.load(std::sync::atomic::Ordering::SeqCst) < n {
            std::thread::yield_now();
        }
    };
    assert_eq!(ask(&pool), (1, 0));
    settle(1);
    assert_eq!(ask(&pool), (1, 1), "idle ran once between the jobs");
    settle(2);
    // The second idle call panicked: a fresh state.
    assert_eq!(ask(&pool), (1, 0));
    settle(3);
    assert_eq!(ask(&pool), (1, 1));
    assert_eq!(pool.threads(), 1);
}

/// A worker's state for the rehearsal tests: rehearsals since the
/// last job, and how many more are due (the test sets it).
struct Rehearsing {
    rehearsals: u32,
    due: Arc<std::sync::atomic::AtomicU32>,
}

/// A one-thread pool of [`Rehearsing`], awake or not between
/// rehearsals, and its count of rehearsals still due.
fn rehearsing_pool(
    awake: Arc<std::sync::atomic::AtomicBool>,
) -> (ThreadPool<Rehearsing>, Arc<std::sync::atomic::AtomicU32>) {
    rehearsing_pool_on(awake, None, 1)
}

/// [`rehearsing_pool`] as if on `cores` CPUs (else this machine's),
/// each run keeping `cpus_per_run` busy.
fn rehearsing_pool_on(
    awake: Arc<std::sync::atomic::AtomicBool>,
    cores: Option<usize>,
    cpus_per_run: usize,
) -> (ThreadPool<Rehearsing>, Arc<std::sync::atomic::AtomicU32>) {
    use std::sync::atomic::Ordering;
    fn due(s: &mut Rehearsing) -> bool {
        s.due.load(Ordering::SeqCst) > 0
    }
    fn rehearse(s: &mut Rehearsing) {
        s.rehearsals += 1;
        let _ = s
            .due
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| d.checked_sub(1));
    }
    let still_due = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let for_state = still_due.clone();
    let pool = ThreadPool::new("t", 1, 1 << 20, move || Rehearsing {
        rehearsals: 0,
        due: for_state.clone(),
    })
    .with_rehearsal(due, rehearse, awake)
    .with_cpus_per_run(cpus_per_run);
    let pool = match cores {
        Some(n) => pool.with_cores(n),
        None => pool,
    };
    (pool, still_due)
}

/// Runs a job on `pool`: the rehearsals since the last one.
fn rehearsals_since_last_job(pool: &ThreadPool<Rehearsing>) -> u32 {
    let (tx, rx) = mpsc::channel();
    pool.submit(move |s| tx.send(std::mem::take(&mut s.rehearsals)).unwrap())
        .unwrap();
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the job ran")
}

/// Waits (10 s at most) until `what` holds.
fn wait_for(what: impl Fn() -> bool) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !what() {
        assert!(std::time::Instant::now() < end, "timed out");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn an_idle_worker_rehearses_while_due_and_takes_a_job_meanwhile() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (pool, due) = rehearsing_pool(Arc::new(AtomicBool::new(false)));
    let ask = rehearsals_since_last_job;
    assert_eq!(ask(&pool), 0, "nothing due: no rehearsal");
    due.store(3, Ordering::SeqCst);
    // The worker is asleep with nothing due: it rehearses after its
    // next job, three times, then sleeps.
    assert_eq!(ask(&pool), 0);
    wait_for(|| due.load(Ordering::SeqCst) == 0);
    assert_eq!(ask(&pool), 3, "three rehearsals, then none");
    // Due for a long time (about 800 s of rehearsals): a job sent
    // meanwhile is taken at its next wait, not after the window.
    due.store(1_000_000, Ordering::SeqCst);
    assert_eq!(ask(&pool), 0);
    wait_for(|| due.load(Ordering::SeqCst) <= 999_998);
    assert!(ask(&pool) >= 2, "the job came between rehearsals");
    due.store(0, Ordering::SeqCst);
}

#[test]
fn an_awake_worker_polls_between_rehearsals_holding_the_spinning_flag() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let awake = Arc::new(AtomicBool::new(true));
    let (pool, due) = rehearsing_pool(awake.clone());
    let ask = rehearsals_since_last_job;
    let spinning = || pool.shared.spinning.load(Ordering::Acquire);
    assert_eq!(ask(&pool), 0);
    // Due for a long time: the worker stays awake (with a CPU free
    // besides its own) and rehearses every period meanwhile.
    due.store(1_000_000, Ordering::SeqCst);
    assert_eq!(ask(&pool), 0);
    wait_for(|| due.load(Ordering::SeqCst) <= 999_997);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores > 1 {
        wait_for(spinning);
    }
    // A job sent meanwhile is taken at once, rehearsals counted.
    assert!(ask(&pool) >= 3, "the job came between rehearsals");
    // Nothing due: the worker lets the flag go and sleeps.
    due.store(0, Ordering::SeqCst);
    wait_for(|| !spinning());
    // Awake turned off: rehearsals asleep, the flag never taken.
    awake.store(false, Ordering::Relaxed);
    assert_eq!(ask(&pool), 0);
    due.store(1_000_000, Ordering::SeqCst);
    assert_eq!(ask(&pool), 0);
    wait_for(|| due.load(Ordering::SeqCst) <= 999_997);
    assert!(!spinning(), "asleep between rehearsals");
    due.store(0, Ordering::SeqCst);
}

/// Jobs sent to an anticipating pool of [`Rehearsing`] after each of
/// `pauses` (ms): the rehearsals each found since the last.
fn anticipated(on: bool, pauses: &[u64]) -> Vec<u32> {
    use std::sync::atomic::AtomicBool;
    fn ready(_: &mut Rehearsing) -> bool {
        true
    }
    fn rehearse(s: &mut Rehearsing) {
        s.rehearsals += 1;
    }
    let (pool, _) = rehearsing_pool(Arc::new(AtomicBool::new(false)));
    let pool = pool.with_anticipation(ready, rehearse, |_| {}, Arc::new(AtomicBool::new(on)));
    rehearsals_since_last_job(&pool);
    pauses
        .iter()
        .map(|&ms| {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            rehearsals_since_last_job(&pool)
        })
        .collect()
}

#[test]
fn steady_runs_are_anticipated_and_lone_or_irregular_ones_are_not() {
    // Runs every 30 ms: once 8 pauses agree (give or take 14.5 ms,
    // half the pause less the awake stretch's margins: room for a
    // loaded machine's late wake-ups), the worker rehearses ahead of
    // each.
    let steady = anticipated(true, &[30; 24]);
    assert!(
        steady[..crate::anticipate::SAMPLES].iter().all(|&n| n == 0),
        "no anticipation before {} pauses: {steady:?}",
        crate::anticipate::SAMPLES
    );
    assert!(
        steady[crate::anticipate::SAMPLES..].iter().any(|&n| n > 0),
        "steady runs anticipated: {steady:?}"
    );
    // Turned off: never.
    assert!(anticipated(false, &[30; 12]).iter().all(|&n| n == 0));
    // Pauses that disagree (2 and 40 ms by turns): never.
    let irregular: Vec<u64> = (0..14).map(|i| if i % 2 == 0 { 2 } else { 40 }).collect();
    assert!(anticipated(true, &irregular).iter().all(|&n| n == 0));
}

/// Whether an anticipating worker of a pool as if on `cores` CPUs,
/// each run keeping `cpus_per_run` busy, polled for its next job (held
/// the spinning flag) in the last 8 ms before any of 16 jobs sent
/// 30 ms apart after 8 such pauses: the spin after a job is over by
/// then, so only the anticipation window holds the flag there.
fn polls_ahead(cores: usize, cpus_per_run: usize) -> bool {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    fn ready(_: &mut Rehearsing) -> bool {
        true
    }
    fn rehearse(s: &mut Rehearsing) {
        s.rehearsals += 1;
    }
    let (pool, _) = rehearsing_pool_on(Arc::new(AtomicBool::new(false)), Some(cores), cpus_per_run);
    let pool = pool.with_anticipation(ready, rehearse, |_| {}, Arc::new(AtomicBool::new(true)));
    let pace = Duration::from_millis(30);
    let mut polled = false;
    for k in 0..crate::anticipate::SAMPLES + 16 {
        let sent = Instant::now();
        rehearsals_since_last_job(&pool);
        let watch = sent + pace - Duration::from_millis(8);
        std::thread::sleep(watch.saturating_duration_since(Instant::now()));
        while Instant::now() < sent + pace {
            polled |=
                k >= crate::anticipate::SAMPLES && pool.shared.spinning.load(Ordering::Acquire);
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    polled
}

/// An anticipating worker polls for the run wherever it has a CPU of
/// its own besides the busy runs': behind the process boundary (two
/// CPUs a run) on 2 CPUs too, where a worker kept awake would not.
#[test]
fn an_anticipating_worker_polls_where_it_has_a_cpu_of_its_own() {
    for (cores, cpus_per_run, polls) in [(2, 1, true), (2, 2, true), (1, 1, false)] {
        assert_eq!(
            polls_ahead(cores, cpus_per_run),
            polls,
            "{cores} CPUs, {cpus_per_run} per run"
        );
    }
}

/// A worker stays awake only where the CPUs allow: its run (two CPUs
/// behind the process boundary) and a caller's besides its own.
#[test]
fn a_worker_stays_awake_only_with_cpus_for_its_run_and_a_caller() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for (cores, cpus_per_run, stays) in [(2, 1, true), (1, 1, false), (2, 2, false), (3, 2, true)] {
        let (pool, due) =
            rehearsing_pool_on(Arc::new(AtomicBool::new(true)), Some(cores), cpus_per_run);
        let what = format!("{cores} CPUs, {cpus_per_run} per run");
        assert_eq!(pool.can_stay_awake(), stays, "{what}");
        assert_eq!(rehearsals_since_last_job(&pool), 0);
        due.store(1_000_000, Ordering::SeqCst);
        assert_eq!(rehearsals_since_last_job(&pool), 0);
        // Three rehearsals in, the worker is awake between them or not.
        wait_for(|| due.load(Ordering::SeqCst) <= 999_997);
        if stays {
            wait_for(|| pool.shared.spinning.load(Ordering::Acquire));
        } else {
            assert!(!pool.shared.spinning.load(Ordering::Acquire), "{what}");
        }
        due.store(0, Ordering::SeqCst);
    }
}

/// An engine thread that dies outside a job's `catch_unwind` (here its
/// state's factory, rebuilding after a job panicked) leaves the pool's
/// books right: a pool of one thread runs the next jobs on a new one,
/// and the runs queued meanwhile are not stranded.
#[test]
fn a_worker_thread_that_dies_is_replaced_and_strands_no_run() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;
    static MADE: AtomicU32 = AtomicU32::new(0);
    // The second state panics as it is made: after the first job's
    // panic, so the thread dies.
    let pool = ThreadPool::new("t", 1, 1 << 20, || {
        let n = MADE.fetch_add(1, Ordering::SeqCst);
        assert!(n != 1, "the factory panics");
        n
    });
    let (tx, rx) = mpsc::channel();
    let (go, wait) = mpsc::channel::<()>();
    // Held until the jobs below are queued behind it.
    pool.submit(move |_| {
        let _ = wait.recv();
        panic!("the job panics");
    })
    .unwrap();
    for i in 0..3 {
        let tx = tx.clone();
        pool.submit(move |s| tx.send((i, *s)).unwrap()).unwrap();
    }
    go.send(()).unwrap();
    let mut got: Vec<(i32, u32)> = (0..3)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(10))
                .expect("a queued run ran")
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![(0, 2), (1, 2), (2, 2)],
        "on the new thread's state"
    );
    wait_for(|| pool.threads() == 1);
    let tx = tx.clone();
    pool.submit(move |s| tx.send((3, *s)).unwrap()).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), (3, 2));
}

#[test]
fn runs_jobs_and_survives_panics() {
    let pool = ThreadPool::new("t", 2, 1 << 20, || 0u32);
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

#[test]
fn jobs_past_the_maximum_wait_and_all_run() {
    let pool = ThreadPool::new("t", 2, 1 << 20, || ());
    let (tx, rx) = mpsc::channel();
    for i in 0..50 {
        let tx = tx.clone();
        pool.submit(move |_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            tx.send(i).unwrap();
        })
        .unwrap();
    }
    let mut got: Vec<i32> = (0..50)
        .map(|_| rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap())
        .collect();
    got.sort();
    assert_eq!(got, (0..50).collect::<Vec<_>>());
    assert_eq!(pool.threads(), 2);
}

#[test]
fn the_next_run_waits_for_the_worker_tidying_up() {
    next_run_waits_for_the_worker_tidying_up(false);
}

/// After a run in a private realm, whose tidy-up is long, the next run
/// goes to another worker while a CPU is free, so that the tidy-up
/// overlaps it; with every CPU busy it waits for the first worker done
/// rather than starting a thread (and an engine) more.
#[test]
fn after_a_private_run_the_next_goes_to_another_worker() {
    next_run_waits_for_the_worker_tidying_up(true);
}

fn next_run_waits_for_the_worker_tidying_up(private: bool) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = ThreadPool::new("t", 4, 1 << 20, || ()).with_long_private_tidy_up(true);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let realm = private.then_some(crate::limits::Realm::Private);
    let run = |tidy_ms: u64| {
        let tx = tx.clone();
        let mut request = ExecutionRequest::new("1");
        request.limits = request.limits.with_realm(realm);
        rt.block_on(pool.execute("t", request, move |_, _, _, reply| {
            tx.send(std::thread::current().id()).unwrap();
            reply.send(ExecutionReport::failed("t", ScriptError::internal("done")));
            // Tidying up after the answer.
            std::thread::sleep(std::time::Duration::from_millis(tidy_ms));
        }))
    };
    for _ in 0..5 {
        run(30);
    }
    let threads: Vec<_> = (0..5).map(|_| rx.recv().unwrap()).collect();
    if cores >= 2 && !private {
        // Each run came while the last one's worker tidied up: it
        // waited for that worker instead of starting another.
        assert_eq!(pool.threads(), 1);
        assert!(threads.iter().all(|t| *t == threads[0]));
    }
    if cores >= 2 && private {
        // The second run did not wait for the first one's worker;
        // later ones go to whichever worker is done first.
        assert_ne!(
            threads[0], threads[1],
            "a run queued for a worker's long tidy-up: {threads:?}"
        );
        // A thread per CPU (at most the pool's 4), not one per run.
        assert_eq!(pool.threads(), cores.min(4));
    }
    // Once the last worker is done tidying, nobody counts as finishing.
    let t = std::time::Instant::now();
    while pool.shared.finishing.count() != (0, 0) && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(pool.shared.finishing.count(), (0, 0));
}

#[test]
fn a_run_whose_job_panics_while_its_caller_waits_awake_fails_cleanly() {
    // The caller waits awake for a run given to a worker still
    // tidying up after the last one (`behind`), or spinning for it
    // (`hot`); a job that panics drops its reply there, and the
    // caller must report that, not poll a spent receiver (tokio's
    // "called after complete" panic, seen before this test).
    let pool = ThreadPool::new("t", 1, 1 << 20, || ());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for round in 0..50 {
        let ok = rt.block_on(
            pool.execute("t", ExecutionRequest::new("1"), |_, _, _, reply| {
                reply.send(ExecutionReport::failed(
                    "t",
                    ScriptError::internal("answered"),
                ));
            }),
        );
        assert!(ok.error.is_some_and(|e| e.message == "answered"));
        let panicked =
            rt.block_on(
                pool.execute("t", ExecutionRequest::new("1"), move |_, _, _, _reply| {
                    if round % 2 == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(20));
                    }
                    panic!("the engine panicked");
                }),
            );
        let e = panicked.error.expect("a failed report");
        assert!(e.message.contains("stopped before answering"), "{e:?}");
    }
    assert_eq!(pool.threads(), 1);
}

#[test]
fn callers_wait_awake_about_as_long_as_runs_take() {
    let a = std::sync::atomic::AtomicU64::new(0);
    assert_eq!(answer_budget(&a), SPIN, "nothing known yet");
    note_answer(&a, std::time::Duration::from_micros(60));
    assert_eq!(a.load(std::sync::atomic::Ordering::Relaxed), 60);
    assert_eq!(answer_budget(&a), std::time::Duration::from_micros(90));
    for _ in 0..64 {
        note_answer(&a, std::time::Duration::from_micros(10));
    }
    assert_eq!(answer_budget(&a), SPIN, "short runs: the floor");
    for _ in 0..64 {
        note_answer(&a, std::time::Duration::from_millis(5));
    }
    assert_eq!(answer_budget(&a), SPIN, "long runs: no longer than before");
    note_answer(&a, std::time::Duration::from_secs(3600));
    assert!(a.load(std::sync::atomic::Ordering::Relaxed) <= 10_000);
    for _ in 0..64 {
        note_answer(&a, std::time::Duration::from_micros(150));
    }
    assert_eq!(answer_budget(&a), ANSWER_SPIN_MAX, "capped");
}

#[test]
fn dropping_the_pool_ends_its_threads() {
    struct Alive(Arc<std::sync::atomic::AtomicUsize>);
    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let alive = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let a = alive.clone();
    let pool = ThreadPool::new("t", 4, 1 << 20, move || {
        a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Alive(a.clone())
    });
    let (tx, rx) = mpsc::channel();
    for _ in 0..4 {
        let tx = tx.clone();
        pool.submit(move |_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            tx.send(()).unwrap();
        })
        .unwrap();
    }
    for _ in 0..4 {
        rx.recv().unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(alive.load(std::sync::atomic::Ordering::SeqCst) > 0);
    drop(pool);
    let t = std::time::Instant::now();
    while alive.load(std::sync::atomic::Ordering::SeqCst) > 0 && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(
        alive.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "engine threads outlived the pool"
    );
}
