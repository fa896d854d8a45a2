//! The metrics operators build dashboards on, read from a real Prometheus
//! scrape over loopback after a few runs.

use harness::{AutoDeny, FnTool, Harness, TaskLimits, ToolRegistry};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

fn scrape(addr: SocketAddr) -> String {
    for _ in 0..50 {
        if let Ok(mut s) = TcpStream::connect(addr) {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut body = String::new();
            s.read_to_string(&mut body).unwrap();
            return body;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on {addr}");
}

/// The value of the sample `name{labels…}` whose labels include all of `with`.
fn sample(text: &str, name: &str, with: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| with.iter().all(|w| l.contains(w)))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_the_runs_made() {
    let addr = free_port();
    harness_services::telemetry::serve_prometheus(addr).unwrap();

    let mut tools = ToolRegistry::new();
    tools
        .register(FnTool::new(
            "echo",
            "echo",
            json!({"type": "object"}),
            |a, _| async move { Ok(a) },
        ))
        .unwrap();
    tools
        .register(
            FnTool::new(
                "guarded",
                "needs approval",
                json!({"type": "object"}),
                |a, _| async move { Ok(a) },
            )
            .requiring_approval(|_| true),
        )
        .unwrap();
    tools
        .register(FnTool::new(
            "sleep",
            "sleeps",
            json!({"type": "object"}),
            |_, ctx| async move {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(5)) => Ok(json!(1)),
                    _ = ctx.cancel.cancelled() => Err(harness::ToolError::cancelled()),
                }
            },
        ))
        .unwrap();
    let h = Harness::builder()
        .tools(tools)
        .approvals(Arc::new(AutoDeny::default()))
        .enable_spawn(TaskLimits::default())
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(h.run("await tools.echo({}); return 1").await.ok);
    }
    assert!(!h.run("null.x").await.ok);
    assert!(!h.run("await tools.guarded({})").await.ok);
    // An orphan: the call is cancelled when the script returns.
    let r = h.run("tools.sleep({}); return 1").await;
    assert_eq!(r.code(), Some(harness::ErrorCode::DetachedPromiseError));
    // A detached task that keeps running while we scrape.
    let r = h.run("tools.spawn.exec('sleep', {}); return 1").await;
    assert!(r.ok);

    let text = scrape(addr);
    assert_eq!(
        sample(&text, "script_runs_total", &["outcome=\"ok\""]),
        4.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "script_runs_total",
            &["outcome=\"ScriptRuntimeError\""]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "script_runs_total",
            &["outcome=\"ApprovalDeniedError\""]
        ),
        1.0
    );
    assert_eq!(
        sample(&text, "script_runs_total", &["engine=\"quickjs\""]),
        7.0
    );
    assert_eq!(
        sample(&text, "script_execution_duration_ms_count", &[]),
        7.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "tool_calls_total",
            &["tool=\"echo\"", "outcome=\"ok\""]
        ),
        3.0
    );
    assert_eq!(
        sample(&text, "tool_call_duration_ms_count", &["tool=\"echo\""]),
        3.0
    );
    assert_eq!(sample(&text, "approval_request_count", &[]), 1.0);
    assert_eq!(
        sample(&text, "approval_denial_count", &["outcome=\"denied\""]),
        1.0
    );
    assert_eq!(sample(&text, "orphaned_promise_count", &[]), 1.0);
    assert_eq!(sample(&text, "detached_tasks_running", &[]), 1.0);
    let id = r.detached_tasks[0].id.clone();
    assert!(h.cancel_task(&id));
    h.wait_task(&id).await;
    assert_eq!(sample(&scrape(addr), "detached_tasks_running", &[]), 0.0);
}
