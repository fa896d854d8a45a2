//! `harness tools`: the tools a run would see, with their schemas.

use super::*;

pub(super) async fn tools_command(args: ToolsArgs) -> ExitCode {
    let cfg = match load_config(&args.config, Overrides::new()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let h = match described(&cfg, &args.root, &args.packs).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let mut names = h.tool_names();
    if !args.only.is_empty() {
        if let Some(missing) = args.only.iter().find(|n| !names.contains(n)) {
            return usage_error(format!("no tool `{missing}` among: {}", names.join(", ")));
        }
        names.retain(|n| args.only.contains(n));
    }
    let registry = h.registry();
    if let Some(q) = &args.search {
        let ranked = harness::declarations::search(registry, &names, q);
        if args.json {
            println!(
                "{}",
                serde_json::json!(ranked
                    .iter()
                    .map(|(n, s)| serde_json::json!({"name": n, "score": s}))
                    .collect::<Vec<_>>())
            );
        } else {
            for (n, score) in ranked {
                let d = registry
                    .get(&n)
                    .map(|t| t.description().to_owned())
                    .unwrap_or_default();
                println!("{score:.2}  {n}  {}", d.lines().next().unwrap_or(""));
            }
        }
        return ExitCode::SUCCESS;
    }
    if args.typescript {
        print!("{}", harness::declarations::declarations(registry, &names));
        return ExitCode::SUCCESS;
    }
    if args.json {
        let list: Vec<serde_json::Value> = names
            .iter()
            .filter_map(|n| registry.get(n))
            .map(|t| {
                serde_json::json!({
                    "name": t.name(),
                    "description": t.description(),
                    "schema": t.schema(),
                    "output_schema": t.output_schema(),
                    "packs": registry.pack_names().filter(|p| registry.pack(p).is_some_and(|m| m.contains(t.name()))).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::from(list));
        return ExitCode::SUCCESS;
    }
    for n in &names {
        let d = registry
            .get(n)
            .map(|t| t.description().to_owned())
            .unwrap_or_default();
        println!("{n}  {}", d.lines().next().unwrap_or(""));
    }
    ExitCode::SUCCESS
}
