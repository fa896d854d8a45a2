//! `harness check`: parse a script without running it, and with `--types`
//! type-check it against the tools' declarations with `tsc`.

use super::*;

pub(super) async fn check(args: CheckArgs) -> ExitCode {
    let mut o = Overrides::new();
    if let Some(e) = &args.engine {
        o = match o.set("engine", e.clone()) {
            Ok(o) => o,
            Err(e) => return usage_error(e),
        };
    }
    if let Some(i) = args.isolation {
        o = match o.set("isolation", i.as_str()) {
            Ok(o) => o,
            Err(e) => return usage_error(e),
        };
    }
    let cfg = match load_config(&args.config, o) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let harness = match cfg
        .builder()
        .map_err(BuildError::from)
        .and_then(|b| b.build())
    {
        Ok(h) => h,
        Err(e) => return usage_error(e),
    };
    let bytes = match input(&args.file) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let result =
        match harness::core::source::decode_source(&bytes, harness.limits().max_source_bytes) {
            Ok(src) => match harness.check(&src).await {
                Ok(()) if args.types => match type_check(&args, &cfg, &src).await {
                    Ok(r) => r,
                    Err(code) => return code,
                },
                other => other,
            },
            Err(e) => Err(e),
        };
    if args.json {
        let v = match &result {
            Ok(()) => serde_json::json!({"ok": true}),
            Err(e) => serde_json::json!({"ok": false, "error": e}),
        };
        println!("{v}");
    } else {
        match &result {
            Ok(()) => println!("ok: no syntax errors"),
            Err(e) => print_error(e),
        }
    }
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `tsc` on the script (wrapped as an async function body) with the
/// declarations; a ScriptSyntaxError-shaped error per diagnostic.
pub(super) async fn type_check(
    args: &CheckArgs,
    cfg: &Config,
    source: &str,
) -> Result<Result<(), ScriptError>, ExitCode> {
    let h = described(cfg, &args.root, &args.packs).await?;
    let tsc = std::env::var_os("HARNESS_TSC").unwrap_or_else(|| "tsc".into());
    let dir = std::env::temp_dir().join(format!("harness-types-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| usage_error(format!("cannot write {}: {e}", dir.display())))?;
    let decl = dir.join("harness.d.ts");
    let script = dir.join("script.ts");
    // No ambient types (no DOM, no @types/node): the declarations are
    // the whole world the script sees.
    let tsconfig = serde_json::json!({"compilerOptions": {
        "noEmit": true, "strict": true, "target": "es2022", "lib": ["es2022"],
        "types": [], "pretty": false, "skipLibCheck": false},
        "files": ["harness.d.ts", "script.ts"]});
    let written = std::fs::write(&decl, h.typescript())
        .and_then(|()| std::fs::write(&script, harness::declarations::wrap_for_check(source)))
        .and_then(|()| std::fs::write(dir.join("tsconfig.json"), tsconfig.to_string()));
    if let Err(e) = written {
        return Err(usage_error(format!("cannot write {}: {e}", dir.display())));
    }
    let out = std::process::Command::new(&tsc)
        .arg("-p")
        .arg(&dir)
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            return Err(usage_error(format!(
                "cannot run {} ({e}): install TypeScript (npm install -g typescript) or set HARNESS_TSC",
                std::path::Path::new(&tsc).display()
            )))
        }
    };
    if out.status.success() {
        return Ok(Ok(()));
    }
    // `script.ts(L,C): error TS…`: line L of the wrapped file is line L-1 of the script.
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let first = text
        .lines()
        .find(|l| l.contains("error TS"))
        .unwrap_or("")
        .to_owned();
    let location = first
        .split_once("script.ts(")
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(lc, _)| lc.split_once(','))
        .and_then(|(l, c)| {
            Some((
                l.parse::<u32>().ok()?.saturating_sub(1).max(1),
                c.parse::<u32>().ok()?,
            ))
        });
    let message = first
        .split_once(": error ")
        .map(|(_, m)| m.to_owned())
        .unwrap_or_else(|| text.trim().to_owned());
    let mut e = ScriptError::new(
        harness::ErrorCode::ScriptSyntaxError,
        harness::Phase::Parsing,
        match location {
            Some((l, c)) => format!("type error: {message} (script.js:{l}:{c})"),
            None => format!("type error: {message}"),
        },
    )
    .with_name("TypeError");
    if let Some((line, column)) = location {
        e = e.with_location(Some(harness::Location::new(line, column)));
    }
    Ok(Err(e))
}
