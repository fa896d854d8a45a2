//! Rendering suite reports: an engine-by-case matrix as text or markdown,
//! or JSON; every format ends with the line `N passed, N failed, N unsupported`.

use crate::{Status, SuiteReport};
use std::fmt::Write;

/// Totals over all engines.
pub fn totals(reports: &[SuiteReport]) -> String {
    let sum = |f: fn(&SuiteReport) -> usize| reports.iter().map(f).sum::<usize>();
    let mut s = format!(
        "{} passed, {} failed, {} unsupported",
        sum(SuiteReport::passed),
        sum(SuiteReport::failed),
        sum(SuiteReport::unsupported)
    );
    let untested = sum(SuiteReport::untested);
    if untested > 0 {
        let _ = write!(s, ", {untested} untested");
    }
    s
}

fn cell(status: &Status, markdown: bool) -> &'static str {
    match (status, markdown) {
        (Status::Passed { .. }, true) => "✅",
        (Status::Failed { .. }, true) => "❌ fail",
        (Status::Unsupported { .. }, true) => "➖ unsupported",
        (Status::Untested, true) => "·",
        (Status::Passed { .. }, false) => "pass",
        (Status::Failed { .. }, false) => "FAIL",
        (Status::Unsupported { .. }, false) => "unsupported",
        (Status::Untested, false) => "-",
    }
}

/// Notes, failures and unsupported reasons, one line each.
fn details(reports: &[SuiteReport], out: &mut String, markdown: bool) {
    let bullet = if markdown { "- " } else { "  " };
    for r in reports {
        for c in &r.results {
            let line = match &c.status {
                Status::Passed { note: Some(n) } => format!("{} {}: {n}", r.engine, c.name),
                Status::Failed { reason } => format!("{} {} FAILED: {reason}", r.engine, c.name),
                Status::Unsupported { reason } => {
                    format!("{} {} unsupported: {reason}", r.engine, c.name)
                }
                _ => continue,
            };
            let _ = writeln!(out, "{bullet}{line}");
        }
    }
}

pub fn text(reports: &[SuiteReport]) -> String {
    let mut out = String::new();
    let width = reports
        .first()
        .map(|r| r.results.iter().map(|c| c.name.len()).max().unwrap_or(4))
        .unwrap_or(4)
        .max(4);
    let _ = write!(out, "{:width$}", "case");
    for r in reports {
        let _ = write!(out, "  {:>12}", r.engine);
    }
    out.push('\n');
    if let Some(first) = reports.first() {
        for (i, c) in first.results.iter().enumerate() {
            let _ = write!(out, "{:width$}", c.name);
            for r in reports {
                let _ = write!(out, "  {:>12}", cell(&r.results[i].status, false));
            }
            out.push('\n');
        }
    }
    out.push('\n');
    details(reports, &mut out, false);
    for r in reports {
        let _ = writeln!(
            out,
            "{} ({}): {}",
            r.engine,
            r.engine_version,
            r.summary_line()
        );
    }
    out.push_str(&totals(reports));
    out.push('\n');
    out
}

pub fn markdown(reports: &[SuiteReport]) -> String {
    let mut out = String::from("| case | expected behaviour |");
    for r in reports {
        let _ = write!(out, " {} |", r.engine);
    }
    out.push_str("\n|---|---|");
    for _ in reports {
        out.push_str("---|");
    }
    out.push('\n');
    if let Some(first) = reports.first() {
        for (i, c) in first.results.iter().enumerate() {
            let _ = write!(out, "| `{}` | {} |", c.name, c.doc.replace('|', "\\|"));
            for r in reports {
                let _ = write!(out, " {} |", cell(&r.results[i].status, true));
            }
            out.push('\n');
        }
    }
    out.push('\n');
    details(reports, &mut out, true);
    out.push('\n');
    for r in reports {
        let _ = writeln!(
            out,
            "{} ({}): {}  ",
            r.engine,
            r.engine_version,
            r.summary_line()
        );
    }
    out.push('\n');
    out.push_str(&totals(reports));
    out.push('\n');
    out
}

/// Pure JSON; the caller prints the summary line to stderr.
pub fn json(reports: &[SuiteReport]) -> String {
    let v = serde_json::json!({"engines": reports, "summary": totals(reports)});
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}
