//! `harness run`: one script, its report.

use super::*;

pub(super) async fn run(args: RunArgs) -> ExitCode {
    let language = args.language.or_else(|| {
        let l = ScriptLanguage::from_file_name(&args.file);
        (l != ScriptLanguage::Auto).then_some(l)
    });
    let harness = match configured_harness(&args.engine, None, language).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let source = match input(&args.file) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut report = harness.run_bytes(&source).await;
    finish_tasks(&harness, &args.engine, &mut report).await;
    if args.json {
        match serde_json::to_string(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => return usage_error(format!("cannot encode report: {e}")),
        }
    } else {
        print_summary(&report);
    }
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
