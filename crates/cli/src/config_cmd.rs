//! `harness config`: the effective configuration and where each value
//! came from.

use super::*;

pub(super) fn config_command(cmd: ConfigCommand) -> ExitCode {
    match cmd {
        ConfigCommand::Show { config, json } => {
            let cfg = match load_config(&config, Overrides::new()) {
                Ok(c) => c,
                Err(code) => return code,
            };
            if json {
                let values: serde_json::Map<String, serde_json::Value> = cfg
                    .entries()
                    .iter()
                    .map(|e| {
                        (
                            e.key.clone(),
                            serde_json::json!({"value": e.value, "layer": e.layer}),
                        )
                    })
                    .collect();
                let out = serde_json::json!({
                    "file": config.config.as_ref().map(|p| p.display().to_string()),
                    "provider": cfg.provider(),
                    "providers": cfg.providers().collect::<Vec<_>>(),
                    "ceilings": cfg.ceilings(),
                    "values": values,
                });
                println!("{out}");
            } else {
                println!(
                    "# configuration: {}{}",
                    harness::config::describe_source(config.config.as_ref()),
                    cfg.provider()
                        .map(|p| format!(", provider {p}"))
                        .unwrap_or_default()
                );
                for e in cfg.entries() {
                    println!("{e}");
                }
                for (k, v) in cfg.ceilings() {
                    println!("ceilings.{k} = {v}");
                }
            }
            ExitCode::SUCCESS
        }
        ConfigCommand::Check { file } => {
            let cfg = match Config::load(&file) {
                Ok(c) => c,
                Err(e) => return usage_error(e),
            };
            let providers: Vec<String> = cfg.providers().map(str::to_owned).collect();
            for p in &providers {
                if let Err(e) = cfg.with_provider(p).and_then(|c| c.builder()) {
                    return usage_error(e);
                }
            }
            if let Err(e) = cfg.builder() {
                return usage_error(e);
            }
            println!(
                "ok: {} is valid ({} provider(s){})",
                file.display(),
                providers.len(),
                if providers.is_empty() {
                    String::new()
                } else {
                    format!(": {}", providers.join(", "))
                }
            );
            ExitCode::SUCCESS
        }
    }
}
