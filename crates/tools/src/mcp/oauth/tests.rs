use super::*;

fn settings(dir: &Path) -> McpServerSettings {
    McpServerSettings {
        url: Some("http://127.0.0.1:9/mcp".into()),
        auth: Some(McpAuth::Oauth),
        token_file: Some(dir.join("state/mcp/s.json")),
        ..McpServerSettings::default()
    }
}

fn credentials() -> StoredCredentials {
    StoredCredentials::new("client".into(), None, vec!["mcp:basic".into()], Some(1))
}

#[test]
fn the_token_file_is_the_users_alone_and_bound_to_its_url() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path());
    let file = TokenFile::new("s", &s, "http://127.0.0.1:9/mcp").unwrap();
    assert!(file.read().unwrap().credentials.is_none(), "no file yet");
    file.update(|saved| saved.credentials = Some(credentials()))
        .unwrap();
    let path = dir.path().join("state/mcp/s.json");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert_eq!(
        file.read().unwrap().credentials.unwrap().granted_scopes,
        ["mcp:basic"]
    );
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["s.json"]);

    // The same file, configured for another URL: its tokens are not used.
    let elsewhere = TokenFile::new("s", &s, "http://127.0.0.1:10/mcp").unwrap();
    assert!(elsewhere.read().unwrap().credentials.is_none());

    // A file others may read is refused, naming the fix.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = file.read().unwrap_err();
    assert!(err.contains("chmod 600"), "{err}");
}

#[tokio::test]
async fn a_run_without_stored_tokens_names_the_login_command() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path());
    let err = transport("s", &s, "http://127.0.0.1:9/mcp")
        .await
        .err()
        .unwrap();
    assert!(matches!(err, McpError::Unauthorized { .. }), "{err:?}");
    assert!(
        err.to_string().contains("run `harness mcp login s`"),
        "{err}"
    );
}

#[test]
fn a_refusal_for_want_of_scope_is_remembered_for_the_next_login() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path());
    let url = "http://127.0.0.1:9/mcp";
    let said = refusal(
        "s",
        &s,
        url,
        r#"Bearer error="insufficient_scope", scope="mcp:basic mcp:write""#,
    );
    assert!(said.contains("`mcp:basic mcp:write`"), "{said}");
    assert!(said.contains("harness mcp login s"), "{said}");
    let file = TokenFile::new("s", &s, url).unwrap();
    assert_eq!(file.read().unwrap().step_up, ["mcp:basic", "mcp:write"]);

    let said = refusal("s", &s, url, r#"Bearer error="invalid_token""#);
    assert!(said.contains("no longer accepts"), "{said}");
}

#[tokio::test]
async fn login_is_only_for_servers_with_oauth() {
    let s = McpServerSettings {
        command: Some("x".into()),
        ..McpServerSettings::default()
    };
    let err = login("s", &s, |_| panic!("no URL to show"))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Unsupported { .. }), "{err:?}");
}
