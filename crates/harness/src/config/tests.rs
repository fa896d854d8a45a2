//! The layers, the ceilings and the key checks.

use super::*;

const ISSUE_FILE: &str = "[limits]\ntimeout_ms = 30000\n\n[ceilings]\ntimeout_ms = 60000\n\n[providers.fast.limits]\ntimeout_ms = 5000\n";

fn entry<'a>(c: &'a Config, key: &str) -> &'a Entry {
    c.entries().iter().find(|e| e.key == key).expect(key)
}

#[test]
fn layers_stack_and_say_where_each_value_came_from() {
    let c = Config::from_toml_str(ISSUE_FILE, "f.toml").unwrap();
    assert_eq!(entry(&c, "limits.timeout_ms").layer, "global");
    assert_eq!(entry(&c, "limits.memory_bytes").layer, "default");
    let fast = c.with_provider("fast").unwrap();
    assert_eq!(fast.settings().limits.timeout_ms, 5000);
    assert_eq!(entry(&fast, "limits.timeout_ms").layer, "provider:fast");
    let turn = fast
        .with_overrides(&Overrides::new().set("limits.timeout_ms", 2000).unwrap())
        .unwrap();
    assert_eq!(turn.settings().limits.timeout_ms, 2000);
    assert_eq!(entry(&turn, "limits.timeout_ms").layer, "override");
    assert!(c.entries().iter().all(|e| e.key != "limits.isolation"));
}

#[test]
fn ceilings_refuse_and_never_clamp() {
    let c = Config::from_toml_str(ISSUE_FILE, "f.toml").unwrap();
    let e = c
        .with_overrides(&Overrides::new().set("limits.timeout_ms", 100_000).unwrap())
        .unwrap_err();
    assert_eq!(
        e,
        ConfigError::OverCeiling {
            key: "limits.timeout_ms".into(),
            asked: 100_000,
            ceiling: 60_000,
            layer: "override".into()
        }
    );
    let e = Config::from_toml_str(
        "[ceilings]\ntimeout_ms = 10\n[providers.p.limits]\ntimeout_ms = 5\n",
        "f.toml",
    )
    .unwrap_err();
    // The default (30000) is over the ceiling too: said, not clamped.
    assert!(
        matches!(e, ConfigError::OverCeiling { ref layer, .. } if layer == "default"),
        "{e}"
    );
    let e =
        Config::from_toml_str("[providers.p.ceilings]\ntimeout_ms = 1\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("root only"), "{e}");
}

#[test]
fn unknown_keys_name_the_table_and_suggest() {
    let e = Config::from_toml_str("[limits]\ntimout_ms = 1\n", "f.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown key `timout_ms` in [limits] of f.toml; did you mean `timeout_ms`?"
    );
    let e = Config::from_toml_str("[providers.x.spawn]\nenabeld = true\n", "f.toml").unwrap_err();
    assert!(
        e.to_string().contains("[providers.x.spawn]") && e.to_string().contains("`enabled`"),
        "{e}"
    );
    let e = Config::from_toml_str("modes = 'enabled'\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("`mode`"), "{e}");
    let e = Config::from_toml_str("[tools.exec]\ntimeout = 1\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("[tools.exec]"), "{e}");
    let e = Config::from_toml_str("[limits]\ntimeout_ms = 'soon'\n", "f.toml").unwrap_err();
    assert!(matches!(e, ConfigError::Invalid { .. }), "{e}");
    assert!(Overrides::new().set("limits.nope", 1).is_err());
    assert!(Config::from_toml_str("[limits\n", "f.toml").is_err());
}

#[test]
fn mcp_servers_are_checked_and_their_env_is_not_shown() {
    let c = Config::from_toml_str(
        "[mcp.servers.gh]\ncommand = \"gh-mcp\"\nenv = { TOKEN = \"t0ken\" }\n",
        "f.toml",
    )
    .unwrap();
    assert_eq!(c.settings().mcp.servers["gh"].env["TOKEN"], "t0ken");
    let shown = c
        .entries()
        .iter()
        .find(|e| e.key == "mcp.servers.gh.env.TOKEN")
        .unwrap();
    assert_eq!(shown.value, "<redacted>");
    for (bad, why) in [
        (
            "[mcp.servers.gh]\ncommand = \"x\"\nurl = \"http://a\"\n",
            "either",
        ),
        ("[mcp.servers.gh]\nargs = []\n", "either"),
        (
            "[mcp.servers.gh]\ncommand = \"x\"\nauth = \"oauth\"\n",
            "`auth` is for a server reached by `url`",
        ),
        (
            "[mcp.servers.gh]\nurl = \"http://a\"\nauth = \"basic\"\n",
            "auth",
        ),
        ("[mcp.servers.\"my-gh\"]\ncommand = \"x\"\n", "identifier"),
        (
            "[mcp.servers.gh]\ncommand = \"x\"\ncomand = \"y\"\n",
            "`command`",
        ),
    ] {
        let e = Config::from_toml_str(bad, "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
}

#[test]
fn the_example_file_loads_with_every_provider() {
    let c = Config::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../harness.example.toml"
    ))
    .unwrap();
    for p in c.providers().map(str::to_owned).collect::<Vec<_>>() {
        let with = c.with_provider(&p).unwrap();
        with.builder().unwrap();
    }
    assert_eq!(c.settings().tools["exec"].timeout_ms, Some(120_000));
    assert_eq!(
        c.with_provider("fast")
            .unwrap()
            .settings()
            .limits
            .timeout_ms,
        5000
    );
}

/// The keys each table takes, as they were written out by hand before
/// they were derived from the structs: a renamed or dropped field fails
/// here (a renamed key needs a deprecated alias and a CHANGELOG line).
#[test]
fn the_keys_are_the_struct_fields_and_none_was_lost() {
    use super::keys::keys_of;
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let want = |v: &[&str]| sorted(v.iter().map(|s| s.to_string()).collect());
    let tables: [(&str, Vec<String>, &[&str]); 12] = [
        (
            "root",
            keys_of::<Settings>(),
            &[
                "mode",
                "engine",
                "isolation",
                "language",
                "retry_internal_errors",
                "limits",
                "expose",
                "spawn",
                "workers",
                "approvals",
                "tools",
                "http",
                "exec",
                "mcp",
                "sessions",
                "durable",
            ],
        ),
        (
            "durable",
            keys_of::<crate::durable::DurableSettings>(),
            &["keys_env", "state_dir", "max_suspended_ms"],
        ),
        (
            "sessions",
            keys_of::<crate::session::SessionLimits>(),
            &["max", "idle_ms", "memory_bytes", "total_memory_bytes"],
        ),
        (
            "mcp.servers.NAME",
            keys_of::<McpServerSettings>(),
            &[
                "command",
                "args",
                "env",
                "url",
                "tools",
                "needs_approval",
                "timeout_ms",
                "auth",
                "client_id",
                "client_secret_env",
                "client_metadata_url",
                "scopes",
                "token_file",
                "redirect_port",
            ],
        ),
        ("mcp", keys_of::<McpSettings>(), &["servers"]),
        (
            "exec",
            keys_of::<ExecSettings>(),
            &["confine", "allow_network", "env_allow"],
        ),
        ("expose", keys_of::<Expose>(), &["tools", "packs", "http"]),
        (
            "http",
            keys_of::<HttpSettings>(),
            &[
                "allow_hosts",
                "schemes",
                "methods",
                "max_response_bytes",
                "timeout_ms",
                "max_redirects",
                "allow_loopback",
                "allow_private",
                "secrets",
            ],
        ),
        (
            "http.secrets.NAME",
            keys_of::<HttpSecret>(),
            &["env", "hosts"],
        ),
        (
            "spawn",
            keys_of::<SpawnSettings>(),
            &["enabled", "max_per_run", "max_running", "timeout_ms"],
        ),
        (
            "workers",
            keys_of::<Workers>(),
            &[
                "max_workers",
                "max_runs_per_worker",
                "max_threads",
                "keep_warm_ms",
                "keep_warm_awake",
                "anticipate",
            ],
        ),
        (
            "tools.NAME",
            keys_of::<ToolSettings>(),
            &[
                "timeout_ms",
                "needs_approval",
                "max_output_bytes",
                "deferred",
            ],
        ),
    ];
    for (table, derived, before) in tables {
        assert_eq!(sorted(derived), want(before), "[{table}]");
    }
    assert_eq!(keys_of::<Approvals>(), ["default"]);
    // Every limit is a key of [limits] and [ceilings], the optional ones too.
    let limits = keys_of::<crate::Limits>();
    for key in ["timeout_ms", "memory_bytes", "fuel", "realm", "isolation"] {
        assert!(limits.iter().any(|k| k == key), "{key}: {limits:?}");
    }
}

/// Every key a default settings value writes out is a key the check
/// takes: a layer made of the whole default configuration loads.
#[test]
fn the_whole_default_configuration_is_a_valid_layer() {
    let Value::Object(mut all) = serde_json::to_value(Settings::default()).unwrap() else {
        panic!("settings serialise to a table");
    };
    if let Some(Value::Object(limits)) = all.get_mut("limits") {
        limits.remove("isolation");
    }
    keys::validate_layer(&all, "the root table", "defaults").expect("every key is known");
}
