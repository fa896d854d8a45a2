//! `tools.http` against a real HTTP server on loopback (allowed explicitly
//! for these tests): every refusal sends nothing, and no secret reaches
//! the script, the report, the console or an error.

#![cfg(feature = "http")]

use harness::http::HttpPolicy;
use harness::Harness;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const SECRET: &str = "s3cr3t-value-9f8e7d";

/// A small HTTP/1.1 server on 127.0.0.1: counts connections and keeps
/// every request it reads.
///
/// - `/echo`: the request head and body as the response body, and the
///   authorization header echoed back as `x-echo`;
/// - `/redirect?to=URL`: 302 to URL;
/// - `/big`: 64 KiB of `a`.
struct Server {
    port: u16,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (c, r) = (connections.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                c.fetch_add(1, Ordering::SeqCst);
                let r = r.clone();
                std::thread::spawn(move || serve(stream, &r));
            }
        });
        Server {
            port,
            connections,
            requests,
        }
    }
    fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }
    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, log: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    let mut length = 0usize;
    let mut auth = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("authorization:") {
            auth = line["authorization:".len()..].trim().to_owned();
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let request = format!("{head}{}", String::from_utf8_lossy(&body));
    log.lock().unwrap().push(request.clone());
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let (status, extra, body) = if let Some(to) = target.strip_prefix("/redirect?to=") {
        ("302 Found", format!("location: {to}\r\n"), String::new())
    } else if target == "/big" {
        ("200 OK", String::new(), "a".repeat(64 * 1024))
    } else {
        ("200 OK", format!("x-echo: {auth}\r\n"), request)
    };
    let mut out = stream;
    let _ = write!(
        out,
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
        body.len()
    );
}

fn loopback() -> HttpPolicy {
    HttpPolicy::new().allow_loopback(true)
}

async fn run(policy: HttpPolicy, script: &str) -> harness::ExecutionReport {
    let h = Harness::builder().http(policy).build().unwrap();
    h.run(script).await
}

/// Runs `tools.http(args)` and returns the error message the script caught.
async fn refusal(policy: HttpPolicy, args: Value) -> String {
    let script = format!(
        "try {{ await tools.http({args}); return 'sent'; }} catch (e) {{ return e.code + ': ' + e.message; }}"
    );
    let r = run(policy, &script).await;
    let msg = r.value.unwrap().as_str().unwrap().to_owned();
    assert!(msg.starts_with("ToolExecutionError: "), "{msg}");
    msg
}

#[tokio::test]
async fn off_by_default_and_on_with_a_policy() {
    let h = Harness::builder().build().unwrap();
    let r = h.run("return [typeof tools.http, 'http' in tools]").await;
    assert_eq!(r.value, Some(json!(["undefined", false])));
    let h = Harness::builder()
        .http(HttpPolicy::new())
        .allow(harness::Allowlist::only(["nothing"]))
        .build()
        .unwrap();
    let r = h.run("return [typeof tools.http, 'http' in tools]").await;
    assert_eq!(r.value, Some(json!(["function", true])));
    let d = h.typescript();
    assert!(d.contains("http(args: {"), "{d}");
    assert!(d.contains("[key: string]: string;"), "{d}");
    assert!(d.contains("truncated: boolean"), "{d}");
}

#[tokio::test]
async fn a_request_to_an_allowed_loopback_host() {
    let s = Server::start();
    let p = loopback().allow_host("127.0.0.1");
    let script = format!(
        r#"const r = await tools.http({{url: "{}", method: "post", headers: {{"X-A": "1"}}, body: {{n: 1}}}});
           return r;"#,
        s.url("127.0.0.1", "/echo")
    );
    let r = run(p, &script).await;
    assert!(r.ok, "{:?}", r.error);
    let v = r.value.unwrap();
    assert_eq!(v["status"], 200);
    assert_eq!(v["truncated"], false);
    assert_eq!(v["redirects"], 0);
    let body = v["body"].as_str().unwrap();
    assert!(body.starts_with("POST /echo HTTP/1.1"), "{body}");
    assert!(body.contains("x-a: 1"), "{body}");
    assert!(body.contains("content-type: application/json"), "{body}");
    assert!(body.ends_with(r#"{"n":1}"#), "{body}");
    assert_eq!(v["headers"]["content-length"], body.len().to_string());
    assert_eq!(s.connections(), 1);
}

#[tokio::test]
async fn every_refusal_names_its_rule_and_sends_nothing() {
    let s = Server::start();
    let echo = s.url("127.0.0.1", "/echo");
    let cases: Vec<(HttpPolicy, Value, &str)> = vec![
        // No host allowed.
        (loopback(), json!({"url": echo}), "(rule host)"),
        // Allowed host, but loopback is not allowed by default.
        (
            HttpPolicy::new().allow_host("127.0.0.1"),
            json!({"url": echo}),
            "(rule loopback)",
        ),
        // A name that resolves to loopback.
        (
            HttpPolicy::new().allow_host("localhost"),
            json!({"url": s.url("localhost", "/echo")}),
            "(rule loopback)",
        ),
        (
            loopback().allow_host("*").schemes(["https"]),
            json!({"url": echo}),
            "(rule scheme)",
        ),
        (
            loopback().allow_host("*").methods(["GET"]),
            json!({"url": echo, "method": "DELETE"}),
            "(rule method)",
        ),
        (
            loopback().allow_host("*"),
            json!({"url": echo, "headers": {"authorization": "{{secret:NOPE}}"}}),
            "(rule secret)",
        ),
        // A secret bound to another host: refused, in a header or the URL.
        (
            loopback()
                .allow_host("*")
                .secret("TOKEN", SECRET, ["localhost"]),
            json!({"url": echo, "headers": {"authorization": "Bearer {{secret:TOKEN}}"}}),
            "(rule secret)",
        ),
        (
            loopback()
                .allow_host("*")
                .secret("TOKEN", SECRET, ["localhost"]),
            json!({"url": format!("{echo}?key={{{{secret:TOKEN}}}}")}),
            "(rule secret)",
        ),
        // Metadata, whatever the policy allows.
        (
            loopback().allow_private(true).allow_host("*"),
            json!({"url": "http://169.254.169.254/latest/meta-data/"}),
            "(rule metadata)",
        ),
        (
            loopback().allow_private(true).allow_host("*"),
            json!({"url": "http://[::ffff:169.254.169.254]/"}),
            "(rule metadata)",
        ),
        (
            loopback().allow_host("*"),
            json!({"url": "http://metadata.google.internal/computeMetadata/v1/"}),
            "(rule metadata)",
        ),
        (
            loopback().allow_host("*"),
            json!({"url": "http://10.0.0.1/"}),
            "(rule private)",
        ),
        (
            loopback().allow_host("*"),
            json!({"url": "http://[fe80::1]/"}),
            "(rule link-local)",
        ),
        (
            loopback().allow_host("*"),
            json!({"url": "http://0.0.0.0:1/"}),
            "(rule unspecified)",
        ),
    ];
    for (policy, args, rule) in cases {
        let msg = refusal(policy, args.clone()).await;
        assert!(msg.contains(rule), "{args}: {msg}");
        assert!(!msg.contains(SECRET), "{msg}");
    }
    assert_eq!(s.connections(), 0, "a refused request reached the server");
}

#[tokio::test]
async fn a_secret_is_sent_to_its_host_only_and_never_seen() {
    let s = Server::start();
    let p = loopback()
        .allow_host("localhost")
        .allow_host("127.0.0.1")
        .secret("TOKEN", SECRET, ["localhost"]);
    // The header and the URL both carry the placeholder; the server echoes
    // both (body and x-echo); the script logs and returns all it got.
    let script = format!(
        r#"const r = await tools.http({{url: "{}?key={{{{secret:TOKEN}}}}",
                                        headers: {{authorization: "Bearer {{{{secret:TOKEN}}}}"}}}});
           console.log(JSON.stringify(r));
           context.emitProgress(r.body);
           return r;"#,
        s.url("localhost", "/echo")
    );
    let r = run(p, &script).await;
    assert!(r.ok, "{:?}", r.error);
    // The server got the real value, in the header and the query.
    let seen = s.requests();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].contains(&format!("authorization: Bearer {SECRET}")),
        "{}",
        seen[0]
    );
    assert!(seen[0].contains(&format!("?key={SECRET}")), "{}", seen[0]);
    // The script saw placeholders only.
    let v = r.value.clone().unwrap();
    assert_eq!(v["headers"]["x-echo"], "Bearer {{secret:TOKEN}}");
    assert!(v["body"].as_str().unwrap().contains("{{secret:TOKEN}}"));
    assert!(v["url"]
        .as_str()
        .unwrap()
        .ends_with("?key={{secret:TOKEN}}"));
    // Nowhere in the report: value, console, progress, tool-call records.
    let report = serde_json::to_string(&r).unwrap();
    assert!(
        !report.contains(SECRET),
        "the secret leaked into the report"
    );
    assert!(report.contains("{{secret:TOKEN}}"));
}

#[tokio::test]
async fn redirects_are_checked_at_every_hop() {
    let s = Server::start();
    let p = || {
        loopback()
            .allow_host("localhost")
            .allow_host("127.0.0.1")
            .secret("TOKEN", SECRET, ["localhost"])
    };
    // Followed within the policy.
    let to = s.url("127.0.0.1", "/echo");
    let script = format!(
        r#"return await tools.http({{url: "{}"}})"#,
        s.url("127.0.0.1", &format!("/redirect?to={to}"))
    );
    let r = run(p(), &script).await;
    let v = r.value.unwrap();
    assert_eq!(
        (v["status"].as_u64(), v["redirects"].as_u64()),
        (Some(200), Some(1))
    );
    assert_eq!(s.connections(), 2);
    // To a host outside the policy, to metadata, and (the secret echoed in
    // Location by a bound host) to a host the secret is not bound to.
    let cases = [
        (
            s.url("127.0.0.1", "/redirect?to=http://example.invalid/"),
            "(rule host)",
        ),
        (
            s.url("127.0.0.1", "/redirect?to=http://169.254.169.254/"),
            "(rule metadata)",
        ),
        (
            s.url(
                "localhost",
                &format!(
                    "/redirect?to={}?k={{{{secret:TOKEN}}}}",
                    s.url("127.0.0.1", "/echo")
                ),
            ),
            "(rule secret)",
        ),
    ];
    for (url, rule) in cases {
        let before = s.connections();
        let msg = refusal(p(), json!({ "url": url })).await;
        assert!(msg.contains(rule), "{url}: {msg}");
        assert!(!msg.contains(SECRET), "{msg}");
        assert_eq!(s.connections(), before + 1, "only the first hop was sent");
    }
    // Too many hops.
    let msg = refusal(
        p().max_redirects(0),
        json!({"url": s.url("127.0.0.1", &format!("/redirect?to={to}"))}),
    )
    .await;
    assert!(msg.contains("(rule redirects)"), "{msg}");
}

#[tokio::test]
async fn responses_are_cut_at_the_cap() {
    let s = Server::start();
    let p = loopback().allow_host("127.0.0.1").max_response_bytes(1000);
    let script = format!(
        r#"const r = await tools.http({{url: "{}"}}); return [r.body.length, r.truncated]"#,
        s.url("127.0.0.1", "/big")
    );
    let r = run(p, &script).await;
    assert_eq!(r.value, Some(json!([1000, true])));
}

#[tokio::test]
async fn bad_arguments_and_dead_hosts_are_clear_errors() {
    let p = || loopback().allow_host("*");
    let msg = refusal(p(), json!({"url": "not a url"})).await;
    assert!(msg.contains("is not an absolute URL"), "{msg}");
    // Nothing listens on this port: a connection error, not a hang.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let msg = refusal(p(), json!({"url": format!("http://127.0.0.1:{port}/")})).await;
    assert!(msg.contains("request to 127.0.0.1 failed"), "{msg}");
    let r = run(
        p(),
        r#"return await tools.http({url: "http://x/", bogus: 1})"#,
    )
    .await;
    assert_eq!(
        r.error.unwrap().code,
        harness::ErrorCode::ToolValidationError
    );
}
