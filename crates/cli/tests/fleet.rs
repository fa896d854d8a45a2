//! The Redis Streams fleet against a real `redis-server` (Debian's, which
//! scripts/test installs), started per test on a free loopback port with
//! no persistence, and real `harness worker` processes.

use harness_services::fleet::{FleetClient, RunReply, RunRequest, NEW_SESSION};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server of this test's own; killed on drop.
struct Redis {
    port: u16,
    dir: tempfile::TempDir,
    child: Child,
}

impl Redis {
    fn start() -> Option<Redis> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("HARNESS_REQUIRE_REDIS").is_none(),
                "redis-server is not installed (scripts/test installs it)"
            );
            println!("SKIPPED: redis-server is not installed (scripts/test installs it)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let child = Self::spawn(port, dir.path());
        Some(Redis { port, dir, child })
    }

    fn spawn(port: u16, dir: &Path) -> Child {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server keeping its data (SHUTDOWN SAVE), then starts it
    /// again on the same port from that snapshot after `down`.
    fn restart(&mut self, down: Duration) {
        let _ = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "shutdown", "save"])
            .output();
        let _ = self.child.wait();
        std::thread::sleep(down);
        self.child = Self::spawn(self.port, self.dir.path());
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `harness worker` process; killed on drop.
struct WorkerProc(Child);

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(redis: &Redis, name: &str, root: &Path, extra: &[&str]) -> WorkerProc {
    WorkerProc(
        Command::new(env!("CARGO_BIN_EXE_harness"))
            .args([
                "worker",
                "--redis",
                &redis.url(),
                "--consumer",
                name,
                "--root",
            ])
            .arg(root)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn kill(w: &mut WorkerProc) {
    let _ = w.0.kill();
    let _ = w.0.wait();
}

/// Every reply on `stream`, until `n` distinct ids are answered or `timeout`.
async fn replies(
    client: &mut FleetClient,
    stream: &str,
    n: usize,
    timeout: Duration,
) -> Vec<RunReply> {
    let until = Instant::now() + timeout;
    let mut after = "0".to_owned();
    let mut all: Vec<RunReply> = Vec::new();
    loop {
        let distinct: std::collections::HashSet<&str> = all.iter().map(|r| r.id.as_str()).collect();
        if distinct.len() >= n || Instant::now() > until {
            break;
        }
        if let Ok((got, last)) = client.read_replies(stream, &after, 200).await {
            after = last;
            all.extend(got);
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // A short grace to catch a duplicate answer, were there one.
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Ok((got, _)) = client.read_replies(stream, &after, 10).await {
        all.extend(got);
    }
    all
}

fn counts(replies: &[RunReply]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for r in replies {
        *m.entry(r.id.clone()).or_insert(0) += 1;
    }
    m
}

fn busy(ms: u64) -> String {
    format!("const t = Date.now(); while (Date.now() - t < {ms}) {{}} return 'done'")
}

async fn client(redis: &Redis) -> FleetClient {
    FleetClient::connect(&redis.url(), harness_services::fleet::DEFAULT_STREAM)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_answer_500_mixed_requests_exactly_once() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "hi").unwrap();
    let _workers: Vec<WorkerProc> = (0..3)
        .map(|i| {
            worker(
                &redis,
                &format!("w{i}"),
                root.path(),
                &["--concurrency", "4"],
            )
        })
        .collect();
    let mut c = client(&redis).await;
    let started = Instant::now();
    for i in 0..500 {
        let script = match i % 4 {
            0 => format!("return {i}"),
            1 => "return (await tools.read_file({path: 'a.txt'})).content".to_owned(),
            2 => "null.x".to_owned(),
            _ => "while (true) {}".to_owned(),
        };
        let mut r = RunRequest::new(format!("r{i}"), script).with_reply_to("test:replies");
        if i % 4 == 3 {
            r = r.with_limits(json!({"timeout_ms": 50}).as_object().unwrap().clone());
        }
        c.submit(&r).await.unwrap();
    }
    let all = replies(&mut c, "test:replies", 500, Duration::from_secs(240)).await;
    let elapsed = started.elapsed();
    let per_id = counts(&all);
    assert_eq!(per_id.len(), 500, "answered {} of 500", per_id.len());
    assert!(
        per_id.values().all(|&n| n == 1),
        "some request was answered twice"
    );
    for r in &all {
        let i: usize = r.id[1..].parse().unwrap();
        let report = r.report.as_ref().expect("a report");
        let code = report.error.as_ref().map(|e| e.code.as_str());
        match i % 4 {
            0 => assert_eq!(report.value, Some(json!(i))),
            1 => assert_eq!(report.value, Some(json!("hi"))),
            2 => assert_eq!(code, Some("ScriptRuntimeError")),
            _ => assert_eq!(code, Some("ScriptTimeoutError")),
        }
    }
    let workers: std::collections::HashSet<&str> = all.iter().map(|r| r.worker.as_str()).collect();
    assert_eq!(workers.len(), 3, "every worker took requests");
    println!("500 requests through 3 workers in {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_run_loses_nothing_and_runs_nothing_twice() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let fast = ["--concurrency", "4", "--visibility-timeout-ms", "600"];
    let mut a = worker(&redis, "doomed", root.path(), &fast);
    let mut c = client(&redis).await;
    for i in 0..12 {
        let r = RunRequest::new(format!("k{i}"), busy(400)).with_reply_to("test:replies");
        c.submit(&r).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    kill(&mut a);
    let _b = worker(&redis, "b", root.path(), &fast);
    let _c = worker(&redis, "c", root.path(), &fast);
    let all = replies(&mut c, "test:replies", 12, Duration::from_secs(60)).await;
    let per_id = counts(&all);
    let twice = per_id.values().filter(|&&n| n > 1).count();
    let reclaimed = all.iter().filter(|r| r.deliveries > 1).count();
    println!(
        "kill test: answered {} of 12, lost {}, answered twice {twice}, reclaimed {reclaimed}",
        per_id.len(),
        12 - per_id.len()
    );
    assert_eq!(per_id.len(), 12);
    assert_eq!(twice, 0);
    assert!(
        reclaimed >= 1,
        "the killed worker's requests were reclaimed"
    );
    assert!(all
        .iter()
        .all(|r| r.worker != "doomed" || r.deliveries == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_run_every_request_is_answered() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let _w: Vec<WorkerProc> = (0..2)
        .map(|i| {
            worker(
                &redis,
                &format!("r{i}"),
                root.path(),
                &["--concurrency", "4"],
            )
        })
        .collect();
    {
        let mut c = client(&redis).await;
        for i in 0..60 {
            let r = RunRequest::new(format!("q{i}"), busy(50)).with_reply_to("test:replies");
            c.submit(&r).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.restart(Duration::from_millis(800));
    let mut c = client(&redis).await;
    let all = replies(&mut c, "test:replies", 60, Duration::from_secs(90)).await;
    let per_id = counts(&all);
    assert_eq!(per_id.len(), 60, "answered {} of 60", per_id.len());
    assert!(per_id.values().all(|&n| n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_request_ends_in_the_dead_letters() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let opts = [
        "--concurrency",
        "1",
        "--visibility-timeout-ms",
        "300",
        "--max-deliveries",
        "2",
    ];
    let mut c = client(&redis).await;
    // It kills every worker that runs it (the test does the killing).
    let poison = RunRequest::new("poison", "while (true) {}")
        .with_limits(json!({"timeout_ms": 60000}).as_object().unwrap().clone())
        .with_reply_to("test:replies");
    c.submit(&poison).await.unwrap();
    for name in ["p1", "p2"] {
        let mut w = worker(&redis, name, root.path(), &opts);
        tokio::time::sleep(Duration::from_millis(900)).await;
        kill(&mut w);
    }
    let _w3 = worker(&redis, "p3", root.path(), &opts);
    let all = replies(&mut c, "test:replies", 1, Duration::from_secs(30)).await;
    assert_eq!(all.len(), 1, "{all:?}");
    let error = all[0].error.as_ref().expect("a request error");
    assert_eq!(error.code, "DeadLetter", "{error:?}");
    assert_eq!(all[0].deliveries, 3);
    let dead = c.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0, "poison");
    assert!(dead[0].1.contains("delivered 3 times"), "{}", dead[0].1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_run_and_a_request_not_yet_started() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let _w = worker(&redis, "c1", root.path(), &[]);
    let mut c = client(&redis).await;
    // Cancelled before it is submitted: answered Cancelled, never run.
    c.cancel("early").await.unwrap();
    c.submit(&RunRequest::new("early", "return 1").with_reply_to("test:replies"))
        .await
        .unwrap();
    // Cancelled while it runs.
    c.submit(
        &RunRequest::new("late", "console.log('started'); while (true) {}")
            .with_limits(json!({"timeout_ms": 60000}).as_object().unwrap().clone())
            .with_reply_to("test:replies"),
    )
    .await
    .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !c
        .events("late")
        .await
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "console")
    {
        assert!(Instant::now() < until, "the run never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let asked = Instant::now();
    c.cancel("late").await.unwrap();
    let all = replies(&mut c, "test:replies", 2, Duration::from_secs(20)).await;
    let by_id: HashMap<&str, &RunReply> = all.iter().map(|r| (r.id.as_str(), r)).collect();
    assert_eq!(by_id["early"].error.as_ref().unwrap().code, "Cancelled");
    let late = by_id["late"].report.as_ref().unwrap();
    assert_eq!(
        late.error.as_ref().unwrap().code.as_str(),
        "ScriptCancelledError"
    );
    assert!(asked.elapsed() < Duration::from_secs(10));
    // The events stream: the console line, then the end.
    let events = c.events("late").await.unwrap();
    assert_eq!(events.first().unwrap()["text"], "started");
    assert_eq!(events.last().unwrap()["kind"], "end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_runs_in_flight() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let mut w = worker(
        &redis,
        "t1",
        root.path(),
        &["--concurrency", "3", "--grace-ms", "10000"],
    );
    let mut c = client(&redis).await;
    for i in 0..3 {
        c.submit(&RunRequest::new(format!("t{i}"), busy(600)).with_reply_to("test:replies"))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    Command::new("kill")
        .args(["-TERM", &w.0.id().to_string()])
        .status()
        .unwrap();
    let status = w.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let all = replies(&mut c, "test:replies", 3, Duration::from_secs(5)).await;
    assert_eq!(
        counts(&all).len(),
        3,
        "every run in flight was finished and answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_answered_with_a_clear_error() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("harness.toml");
    std::fs::write(
        &config,
        "[ceilings]\ntimeout_ms = 60000\n\n[expose]\npacks = [\"fs\"]\n",
    )
    .unwrap();
    let _w = worker(
        &redis,
        "b1",
        root.path(),
        &["--config", config.to_str().unwrap()],
    );
    let mut c = client(&redis).await;
    let raw = [
        json!({"version": 1, "id": "shape", "script": 1, "reply_to": "test:replies"}),
        json!({"version": 4, "id": "future", "script": "return 1", "reply_to": "test:replies"}),
        json!({"version": 1, "id": "tools", "script": "return 1", "tools": ["exec"], "reply_to": "test:replies"}),
        json!({"version": 1, "id": "ceiling", "script": "return 1", "limits": {"timeout_ms": 100000}, "reply_to": "test:replies"}),
        json!({"version": 1, "id": "big", "script": "x".repeat(1_100_000), "reply_to": "test:replies"}),
        json!({"version": 1, "id": "fine", "script": "return typeof tools.read_file", "tools": ["read_file"], "reply_to": "test:replies"}),
    ];
    for r in &raw {
        c.submit_raw(&r.to_string()).await.unwrap();
    }
    c.submit_raw("not json at all").await.unwrap();
    let all = replies(&mut c, "test:replies", raw.len(), Duration::from_secs(30)).await;
    let by_id: HashMap<&str, &RunReply> = all.iter().map(|r| (r.id.as_str(), r)).collect();
    let code = |id: &str| by_id[id].error.as_ref().map(|e| e.code.clone());
    assert_eq!(code("shape").as_deref(), Some("InvalidRequest"));
    assert_eq!(code("future").as_deref(), Some("UnsupportedVersion"));
    assert_eq!(code("tools").as_deref(), Some("ToolsNotExposed"));
    assert_eq!(code("ceiling").as_deref(), Some("InvalidLimits"));
    assert_eq!(code("big").as_deref(), Some("RequestTooLarge"));
    assert_eq!(
        by_id["fine"].report.as_ref().unwrap().value,
        Some(json!("function"))
    );
    // No id: nothing to answer, so it is a dead letter.
    let dead = c.dead_letters().await.unwrap();
    assert!(
        dead.iter()
            .any(|(id, e)| id.is_empty() && e.contains("no `id`")),
        "{dead:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_reply_to_the_reply_is_a_key_and_wait_finds_it() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let _w = worker(&redis, "k1", root.path(), &[]);
    let mut c = client(&redis).await;
    let id = c
        .submit(&RunRequest::new(
            "keyed",
            "context.telemetry.emitProgress('half'); return 7",
        ))
        .await
        .unwrap();
    let reply = c
        .wait(&id, Duration::from_secs(20))
        .await
        .unwrap()
        .expect("a reply");
    assert_eq!(reply.report.unwrap().value, Some(json!(7)));
    let events = c.events(&id).await.unwrap();
    assert_eq!(events[0]["kind"], "progress");
    assert_eq!(events[0]["message"], "half");
    // Submitted again with the same id: answered already, never run twice.
    c.submit(&RunRequest::new("keyed", "return 8"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = c.wait(&id, Duration::from_secs(1)).await.unwrap().unwrap();
    assert_eq!(again.report.unwrap().value, Some(json!(7)));
    assert!(c
        .wait("nobody", Duration::from_millis(50))
        .await
        .unwrap()
        .is_none());
}

/// Waits for the reply to `request` (submitted without `reply_to`).
async fn answer(c: &mut FleetClient, request: RunRequest) -> RunReply {
    let id = c.submit(&request).await.unwrap();
    c.wait(&id, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no reply to {id}"))
}

fn code_of(reply: &RunReply) -> Option<String> {
    let e = reply.report.as_ref()?.error.as_ref()?;
    Some(e.code.as_str().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stays_on_its_worker_and_ends_with_it() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let fast = ["--concurrency", "2", "--visibility-timeout-ms", "600"];
    let mut workers = HashMap::new();
    for name in ["sa", "sb"] {
        workers.insert(name.to_owned(), worker(&redis, name, root.path(), &fast));
    }
    let mut c = client(&redis).await;
    let opened = answer(
        &mut c,
        RunRequest::new("s0", "let n = 41; return n").with_session(NEW_SESSION),
    )
    .await;
    assert_eq!(opened.report.as_ref().unwrap().value, Some(json!(41)));
    let sid = opened.session.clone().expect("the reply names the session");
    let owner = opened.worker.clone();
    for i in 1..=5 {
        let r = answer(
            &mut c,
            RunRequest::new(format!("s{i}"), "n += 1; return n").with_session(&sid),
        )
        .await;
        assert_eq!(
            r.report.as_ref().unwrap().value,
            Some(json!(41 + i)),
            "{r:?}"
        );
        assert_eq!(r.worker, owner, "every run of the session on its worker");
        assert_eq!(r.session.as_deref(), Some(sid.as_str()));
    }
    // Outside the session nothing of it is seen, on either worker.
    for i in 0..4 {
        let r = answer(&mut c, RunRequest::new(format!("u{i}"), "return typeof n")).await;
        assert_eq!(r.report.unwrap().value, Some(json!("undefined")));
    }
    // An unknown session, and `session` in a version 1 request.
    let r = answer(
        &mut c,
        RunRequest::new("x1", "return 1").with_session("0".repeat(32)),
    )
    .await;
    assert_eq!(code_of(&r).as_deref(), Some("SessionClosedError"), "{r:?}");
    let mut old = RunRequest::new("x2", "return 1").with_session(NEW_SESSION);
    old.version = 1;
    let r = answer(&mut c, old).await;
    assert_eq!(
        r.error.map(|e| e.code).as_deref(),
        Some("UnsupportedVersion")
    );
    // The owner dies: a request sent at once lands in its stream and is
    // answered by the live worker once the owner's alive key expired; one
    // sent later is answered by the client. Both SessionClosedError.
    let mut doomed = workers.remove(&owner).unwrap();
    kill(&mut doomed);
    let r = answer(&mut c, RunRequest::new("d1", "return n").with_session(&sid)).await;
    assert_eq!(code_of(&r).as_deref(), Some("SessionClosedError"), "{r:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = answer(&mut c, RunRequest::new("d2", "return n").with_session(&sid)).await;
    assert_eq!(code_of(&r).as_deref(), Some("SessionClosedError"), "{r:?}");
    assert!(r.report.unwrap().error.unwrap().message.contains("gone"));
}

#[test]
fn submit_wait_prints_one_reply_per_request() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let _w = worker(&redis, "s1", root.path(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let file: PathBuf = dir.path().join("reqs.jsonl");
    let lines: Vec<String> = (0..5)
        .map(|i| json!({"version": 1, "id": format!("s{i}"), "script": format!("console.log('n', {i}); return {i} * 10")}).to_string())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["submit", "--redis", &redis.url(), "--wait", "--events"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let replies: Vec<&Value> = printed
        .iter()
        .filter(|v| v.get("report").is_some())
        .collect();
    assert_eq!(replies.len(), 5);
    for r in replies {
        let i: i64 = r["id"].as_str().unwrap()[1..].parse().unwrap();
        assert_eq!(r["report"]["value"], json!(i * 10));
    }
    assert_eq!(
        printed
            .iter()
            .filter(|v| v["event"]["kind"] == "console")
            .count(),
        5
    );
}

/// Throughput through Redis with 1, 2 and 4 worker processes, and the
/// latency one request adds against an in-process run. A measurement, not
/// a check: `cargo test -p harness-cli --test fleet -- --ignored --nocapture fleet_bench`
/// (FLEET_BENCH_N sets the request count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn fleet_bench() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let n: usize = std::env::var("FLEET_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let mut c = client(&redis).await;
    for workers in [1usize, 2, 4] {
        let procs: Vec<WorkerProc> = (0..workers)
            .map(|i| {
                worker(
                    &redis,
                    &format!("b{workers}-{i}"),
                    root.path(),
                    &["--concurrency", "2"],
                )
            })
            .collect();
        // Warm up: every worker has started and run once.
        let warm = format!("warm{workers}");
        for i in 0..workers * 4 {
            c.submit(&RunRequest::new(format!("{warm}-{i}"), "return 1").with_reply_to(&warm))
                .await
                .unwrap();
        }
        replies(&mut c, &warm, workers * 4, Duration::from_secs(60)).await;
        let stream = format!("bench{workers}");
        let started = Instant::now();
        for i in 0..n {
            c.submit(
                &RunRequest::new(format!("{stream}-{i}"), "return 1+1").with_reply_to(&stream),
            )
            .await
            .unwrap();
        }
        let got = replies(&mut c, &stream, n, Duration::from_secs(600)).await;
        // `replies` waits 300 ms for duplicates after the last one.
        let secs = started.elapsed().as_secs_f64() - 0.3;
        assert_eq!(counts(&got).len(), n);
        println!("fleet_bench: {workers} worker(s) x concurrency 2: {n} trivial scripts in {secs:.2} s = {:.0} scripts/s", n as f64 / secs);
        drop(procs);
    }
    // One request at a time: submit, then read its reply.
    let _w = worker(&redis, "lat", root.path(), &["--concurrency", "1"]);
    let mut lat = Vec::new();
    for i in 0..300 {
        let stream = "latency";
        let t = Instant::now();
        c.submit(&RunRequest::new(format!("l{i}"), "return 1+1").with_reply_to(stream))
            .await
            .unwrap();
        let mut after = "0".to_owned();
        loop {
            let (got, last) = c.read_replies(stream, &after, 1000).await.unwrap();
            after = last;
            if got.iter().any(|r| r.id == format!("l{i}")) {
                break;
            }
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        c.delete_stream(stream).await;
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "fleet_bench: one request at a time through Redis: median {:.2} ms, p90 {:.2} ms (the run itself is reported in the reply)",
        lat[lat.len() / 2],
        lat[lat.len() * 9 / 10]
    );
}

/// A run suspends on worker A; A is SIGKILLed; `harness submit --resume`
/// is answered by worker B with the completed value, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_run_resumes_on_another_worker_exactly_once() {
    let Some(redis) = Redis::start() else { return };
    let root = tempfile::tempdir().unwrap();
    let cfg = root.path().join("durable.toml");
    std::fs::write(&cfg, "[durable]\nkeys_env = [\"FLEET_TEST_KEY\"]\n").unwrap();
    let key = "ab".repeat(32);
    let spawn = |name: &str| {
        WorkerProc(
            Command::new(env!("CARGO_BIN_EXE_harness"))
                .args(["worker", "--redis", &redis.url(), "--consumer", name])
                .args([
                    "--engine",
                    "wasi",
                    "--suspend",
                    "--visibility-timeout-ms",
                    "600",
                ])
                .arg("--config")
                .arg(&cfg)
                .arg("--root")
                .arg(root.path())
                .env("FLEET_TEST_KEY", &key)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    // Without a key the worker refuses to start.
    let refused = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "worker",
            "--redis",
            &redis.url(),
            "--engine",
            "wasi",
            "--suspend",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("keys_env"));

    let mut a = spawn("wa");
    let mut c = client(&redis).await;
    let script = r#"const r = await tools.exec({command: ["echo", "hi"]}); return r.stdout.trim()"#;
    let interim = answer(&mut c, RunRequest::new("d1", script).suspending()).await;
    assert!(interim.interim, "{interim:?}");
    assert_eq!(interim.worker, "wa");
    let s = interim
        .report
        .as_ref()
        .unwrap()
        .suspension
        .clone()
        .expect("suspended");
    assert_eq!(s.pending[0].tool, "exec");
    // A plain request on this worker does not suspend: the approval it
    // cannot ask is refused.
    let plain = answer(&mut c, RunRequest::new("p1", script)).await;
    assert_eq!(
        code_of(&plain).as_deref(),
        Some("ApprovalDeniedError"),
        "{plain:?}"
    );
    // A session's run suspends with its session.
    let opened = answer(
        &mut c,
        RunRequest::new("s0", "let n = 41; return n").with_session(NEW_SESSION),
    )
    .await;
    let sid = opened.session.clone().expect("a session");
    let in_session =
        "n += 1; const r = await tools.exec({command: ['echo', 'x']}); return [n, r.stdout.trim()]";
    let parked = answer(
        &mut c,
        RunRequest::new("s1", in_session)
            .with_session(&sid)
            .suspending(),
    )
    .await;
    assert!(parked.interim, "{parked:?}");
    kill(&mut a);

    let _b = spawn("wb");
    let resume = |timeout: &str| {
        Command::new(env!("CARGO_BIN_EXE_harness"))
            .args([
                "submit",
                "--redis",
                &redis.url(),
                "--resume",
                "d1",
                "--approve",
                "yes",
            ])
            .args(["--wait", "--timeout-ms", timeout])
            .output()
            .unwrap()
    };
    let out = resume("30000");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["worker"], json!("wb"));
    assert_eq!(reply["report"]["value"], json!("hi"), "{reply}");
    assert!(reply.get("interim").is_none());
    // The final reply is the only one: another resume is not answered.
    let again = resume("1500");
    assert_eq!(
        again.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert!(again.stdout.is_empty());
    // The session moved to worker B under a new id, with its state.
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "submit",
            "--redis",
            &redis.url(),
            "--resume",
            "s1",
            "--approve",
            "yes",
        ])
        .args(["--wait", "--timeout-ms", "30000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["report"]["value"], json!([42, "x"]), "{reply}");
    assert_eq!(reply["worker"], json!("wb"));
    let moved = reply["session"]
        .as_str()
        .expect("the new session")
        .to_owned();
    assert_ne!(moved, sid);
    let r = answer(
        &mut c,
        RunRequest::new("s2", "return n").with_session(&moved),
    )
    .await;
    assert_eq!(r.report.unwrap().value, Some(json!(42)));
    assert_eq!(r.worker, "wb");
    let r = answer(&mut c, RunRequest::new("s3", "return n").with_session(&sid)).await;
    assert_eq!(code_of(&r).as_deref(), Some("SessionClosedError"), "{r:?}");
}
