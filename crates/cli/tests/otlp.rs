//! Spans of a run reach an OTLP collector (a loopback one, started and
//! stopped by the test) inside the caller's trace (`--traceparent`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Accepts OTLP/HTTP posts; sends each body to `tx`.
fn collector() -> (String, mpsc::Receiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0u8; len];
            if reader.read_exact(&mut body).is_ok() {
                let _ = tx.send(body);
            }
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
        }
    });
    (url, rx)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn spans_reach_a_collector_inside_the_callers_trace() {
    let (url, bodies) = collector();
    let dir = tempfile::tempdir().unwrap();
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--json", "--traceparent", &traceparent, "-"])
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &url)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"await tools.list_dir({path: '.'}); return 1")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut all = Vec::new();
    while let Ok(b) = bodies.recv_timeout(Duration::from_secs(10)) {
        all.extend(b);
        if contains(&all, b"script_run") && contains(&all, b"tool_call") {
            break;
        }
    }
    assert!(contains(&all, b"script_run"), "no script_run span received");
    assert!(contains(&all, b"tool_call"), "no tool_call span received");
    let raw_trace: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&trace_id[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    assert!(
        contains(&all, &raw_trace),
        "the spans are not in the caller's trace"
    );
}
