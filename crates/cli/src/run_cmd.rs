//! `harness run`: one script, its report; `harness resume`: a suspended
//! run's next report.

use super::*;
use std::collections::BTreeMap;

/// Exit status of a run that suspended.
const SUSPENDED: u8 = 3;

pub(super) async fn run(args: RunArgs) -> ExitCode {
    let language = args.language.or_else(|| {
        let l = ScriptLanguage::from_file_name(&args.file);
        (l != ScriptLanguage::Auto).then_some(l)
    });
    let built = match &args.suspend_to {
        Some(_) => suspending_harness(&args.engine, language).await,
        None => configured_harness(&args.engine, None, language).await,
    };
    let harness = match built {
        Ok(h) => h,
        Err(code) => return code,
    };
    let source = match input(&args.file) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut report = harness.run_bytes(&source).await;
    finish_tasks(&harness, &args.engine, &mut report).await;
    conclude(&report, args.json, args.suspend_to.as_deref())
}

pub(super) async fn resume(mut args: ResumeArgs) -> ExitCode {
    // Continuations come from the wasi engine.
    if args.engine.engine.is_none() {
        args.engine.engine = Some("wasi".to_owned());
    }
    let harness = match suspending_harness(&args.engine, None).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let sealed = match std::fs::read(&args.file) {
        Ok(b) => b,
        Err(e) => return usage_error(format!("cannot read {}: {e}", args.file.display())),
    };
    let pending = match harness.pending(&sealed) {
        Ok(p) => p,
        Err(e) => {
            return conclude(
                &ExecutionReport::failed(&harness.engine().name, e),
                args.json,
                None,
            )
        }
    };
    let answers = match answers(&pending, &args) {
        Ok(a) => a,
        Err(msg) => return usage_error(msg),
    };
    let mut report = harness.resume(&sealed, answers).await;
    finish_tasks(&harness, &args.engine, &mut report).await;
    let to = args.suspend_to.as_deref().unwrap_or(&args.file);
    conclude(&report, args.json, Some(to))
}

/// An answer for each call the continuation waits on, from the flags.
fn answers(
    pending: &[harness::PendingCall],
    args: &ResumeArgs,
) -> Result<BTreeMap<u64, harness::durable::Answer>, String> {
    let mut given = harness::durable::Answers::default();
    given.approve = args.engine.approve.map(|a| a == Approve::Yes);
    for a in &args.answers {
        let (id, json) = call_value("--answer", a)?;
        let value = serde_json::from_str(&json)
            .map_err(|e| format!("--answer {id}: the result is not JSON: {e}"))?;
        given.answers.insert(id, value);
    }
    for f in &args.failures {
        let (id, message) = call_value("--fail", f)?;
        given.failures.insert(id, message);
    }
    given.for_calls(pending).map_err(|e| {
        format!("{e}: pass --approve yes|no for approvals, --answer CALL_ID=JSON or --fail CALL_ID=MESSAGE for deferred calls")
    })
}

/// `CALL_ID=VALUE` of flag `flag`.
pub(super) fn call_value(flag: &str, s: &str) -> Result<(u64, String), String> {
    let (id, rest) = s
        .split_once('=')
        .ok_or_else(|| format!("{flag} takes CALL_ID=VALUE, not {s:?}"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("{flag}: {id:?} is not a call id"))?;
    Ok((id, rest.to_owned()))
}

/// Prints the report and picks the exit status; a suspended run's
/// continuation goes to `suspend_to`.
fn conclude(
    report: &ExecutionReport,
    json: bool,
    suspend_to: Option<&std::path::Path>,
) -> ExitCode {
    if let (Some(s), Some(to)) = (&report.suspension, suspend_to) {
        if let Err(e) = write_continuation(to, &s.continuation) {
            return usage_error(format!(
                "cannot write the continuation to {}: {e}",
                to.display()
            ));
        }
    }
    if json {
        match serde_json::to_string(report) {
            Ok(s) => println!("{s}"),
            Err(e) => return usage_error(format!("cannot encode report: {e}")),
        }
    } else {
        print_summary(report);
        if let (Some(s), Some(to)) = (&report.suspension, suspend_to) {
            for p in &s.pending {
                let what = match p.kind {
                    harness::PendingKind::Approval => "an approval",
                    _ => "a deferred result",
                };
                println!(
                    "waiting: call #{} {} {} on {what}",
                    p.call_id, p.tool, p.args
                );
            }
            println!(
                "suspended: continuation {} in {} (expires {}); go on with `harness resume {}`",
                s.id,
                to.display(),
                s.expires_at,
                to.display()
            );
        }
    }
    if report.suspension.is_some() {
        ExitCode::from(SUSPENDED)
    } else if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The sealed continuation, written whole (a temporary file renamed over
/// `to`), readable by its owner only.
fn write_continuation(to: &std::path::Path, base64_text: &str) -> std::io::Result<()> {
    let bytes = harness::durable::continuation_bytes(base64_text.as_bytes());
    let dir = to
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        to.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("continuation"),
        std::process::id()
    ));
    {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.mode(0o600);
        }
        let mut f = o.open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, to)
}
