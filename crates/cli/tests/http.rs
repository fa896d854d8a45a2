//! `tools.http` from the command line: `--allow-host`, the `[http]` table,
//! and a secret that stays out of stdout, stderr (at `RUST_LOG=trace`) and
//! the audit log.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Output;

mod common;
use common::json as report;

fn harness(args: &[&str], script: &str, env: &[(&str, &str)]) -> Output {
    common::harness(args, script, None, env)
}

#[test]
fn metadata_is_refused_even_with_every_host_allowed() {
    let script = r#"try { await tools.http({url: "http://169.254.169.254/latest/meta-data/"}); return "sent"; }
                    catch (e) { return e.message; }"#;
    let o = harness(&["run", "--json", "--allow-host", "*", "-"], script, &[]);
    let r = report(&o);
    let msg = r["value"].as_str().unwrap();
    assert!(msg.contains("(rule metadata)"), "{msg}");
    // Without the flag there is no tools.http at all.
    let o = harness(&["run", "--json", "-"], "return typeof tools.http", &[]);
    assert_eq!(report(&o)["value"], "undefined");
}

#[test]
fn a_configured_secret_is_used_and_never_printed() {
    const SECRET: &str = "cli-s3cr3t-4242";
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // One request: answer with the authorization header it carried.
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut auth = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("authorization:") {
                auth = line[line.len() - v.len()..].trim().to_owned();
            }
        }
        let mut out = stream;
        let _ = write!(
            out,
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{auth}",
            auth.len()
        );
        auth
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("harness.toml");
    std::fs::write(
        &config,
        "[expose]\nhttp = true\n\n[http]\nallow_hosts = [\"localhost\"]\nallow_loopback = true\n\n\
         [http.secrets.TOKEN]\nenv = \"HARNESS_TEST_TOKEN\"\nhosts = [\"localhost\"]\n",
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let script = format!(
        r#"const r = await tools.http({{url: "http://localhost:{port}/", headers: {{authorization: "Bearer {{{{secret:TOKEN}}}}"}}}});
           console.log(r.body);
           return r.body;"#
    );
    let o = harness(
        &[
            "run",
            "--json",
            "--config",
            config.to_str().unwrap(),
            "--audit-log",
            audit.to_str().unwrap(),
            "-",
        ],
        &script,
        &[("HARNESS_TEST_TOKEN", SECRET), ("RUST_LOG", "trace")],
    );
    let r = report(&o);
    assert_eq!(r["value"], "Bearer {{secret:TOKEN}}", "{r}");
    assert_eq!(server.join().unwrap(), format!("Bearer {SECRET}"));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.is_empty(), "RUST_LOG=trace logged nothing");
    for (what, text) in [
        ("stdout", String::from_utf8_lossy(&o.stdout).into_owned()),
        ("stderr", stderr.into_owned()),
        ("audit log", std::fs::read_to_string(&audit).unwrap()),
    ] {
        assert!(!text.contains(SECRET), "the secret is in {what}");
    }
    // The configuration shows the variable's name, never its value.
    let o = harness(
        &["config", "show", "--config", config.to_str().unwrap()],
        "",
        &[("HARNESS_TEST_TOKEN", SECRET)],
    );
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        shown.contains("HARNESS_TEST_TOKEN") && !shown.contains(SECRET),
        "{shown}"
    );
}
