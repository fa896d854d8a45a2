//! A test262 runner: runs a checkout of tc39/test262 (or files in its
//! format) against an engine through [`ScriptRuntimeAdapter::eval_global`].
//!
//! For each test: parse the YAML front matter (`includes`, `flags`,
//! `negative`, `features`); skip modules and tests using a skipped feature;
//! prepend `harness/assert.js`, `harness/sta.js`, `harness/doneprintHandle.js`
//! for async tests and the listed includes (none for `raw` tests); run
//! non-flagged tests in strict and sloppy mode; compare with the expected
//! outcome. `raw: true` in [`Options`] runs without the hardening prelude,
//! so what hardening costs in conformance shows up as the difference.

use harness_core::{GlobalEval, GlobalEvalOutcome, ScriptRuntimeAdapter};
use harness_respond::realm;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use yaml_rust2::{Yaml, YamlLoader};

/// Printed first by every non-raw test, so a SyntaxError seen without it
/// happened at parse time.
const STARTED: &str = "Test262:Started";

/// Features skipped by default: removed by the hardening prelude or not in
/// the engine.
pub const DEFAULT_SKIP_FEATURES: &[&str] = &[
    "SharedArrayBuffer",
    "Atomics",
    "Atomics.waitAsync",
    "FinalizationRegistry",
    "cross-realm",
    "IsHTMLDDA",
    "host-gc-required",
];

#[derive(Debug, Clone)]
pub struct Options {
    /// The checkout: holds `harness/` and `test/`.
    pub dir: PathBuf,
    /// A path prefix under `test/`, e.g. `built-ins/Array`.
    pub filter: Option<String>,
    /// Run without the hardening prelude.
    pub raw: bool,
    pub skip_features: Vec<String>,
    pub timeout_ms: u64,
}

impl Options {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Options {
            dir: dir.into(),
            filter: None,
            raw: false,
            skip_features: DEFAULT_SKIP_FEATURES
                .iter()
                .map(|s| s.to_string())
                .collect(),
            timeout_ms: 10_000,
        }
    }
}

/// Pass / fail / skip counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub pass: usize,
    pub fail: usize,
    pub skip: usize,
}

/// Counts per directory (relative to `test/`), and why each failure failed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub engine: String,
    pub hardened: bool,
    pub directories: BTreeMap<String, Counts>,
    pub failures: Vec<(String, String)>,
    pub skipped: Vec<(String, String)>,
    /// When hardened: the failed tests that pass once more with everything
    /// but the intrinsics hardened ([`GlobalEval::unfrozen`]), so lost to
    /// frozen intrinsics and to nothing else hardening does.
    pub frozen_only: Vec<String>,
    /// When hardened: the tests that ran in a private realm, as a run of
    /// the same script would ([`harness_respond::realm`]: the script may
    /// change a built-in, or asks whether one is frozen, so it gets a
    /// context of its own whose intrinsics are not frozen).
    pub private_realm: Vec<String>,
}

impl Report {
    pub fn total(&self) -> Counts {
        self.directories
            .values()
            .fold(Counts::default(), |a, c| Counts {
                pass: a.pass + c.pass,
                fail: a.fail + c.fail,
                skip: a.skip + c.skip,
            })
    }

    /// Per-directory table and a closing `N passed, N failed, N skipped` line.
    pub fn render(&self) -> String {
        let mut out = format!(
            "test262 on {} ({})\n",
            self.engine,
            if self.hardened { "hardened" } else { "raw" }
        );
        for (dir, c) in &self.directories {
            out.push_str(&format!(
                "{dir:50} {:>6} pass {:>6} fail {:>6} skip\n",
                c.pass, c.fail, c.skip
            ));
        }
        let frozen: std::collections::HashSet<&str> =
            self.frozen_only.iter().map(String::as_str).collect();
        for (test, why) in &self.failures {
            let mark = if frozen.contains(test.as_str()) {
                " [passes with the intrinsics unfrozen]"
            } else {
                ""
            };
            out.push_str(&format!("FAIL {test}: {why}{mark}\n"));
        }
        let t = self.total();
        if self.hardened {
            let private: std::collections::HashSet<&str> =
                self.private_realm.iter().map(String::as_str).collect();
            let failed_private = self
                .failures
                .iter()
                .filter(|(t, _)| private.contains(t.as_str()))
                .count();
            out.push_str(&format!(
                "{} tests ran in a private realm (they change a built-in or ask whether one is frozen), {} of them failed\n",
                self.private_realm.len(),
                failed_private
            ));
            out.push_str(&format!(
                "of the {} failures, {} pass with the intrinsics unfrozen (lost to freezing), {} fail for another reason\n",
                t.fail,
                self.frozen_only.len(),
                t.fail - self.frozen_only.len()
            ));
        }
        out.push_str(&format!(
            "{} passed, {} failed, {} skipped\n",
            t.pass, t.fail, t.skip
        ));
        out
    }
}

/// What a test's front matter says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    pub includes: Vec<String>,
    pub flags: Vec<String>,
    pub features: Vec<String>,
    /// `(phase, type)`, e.g. `("parse", "SyntaxError")`.
    pub negative: Option<(String, String)>,
}

impl Meta {
    fn flag(&self, f: &str) -> bool {
        self.flags.iter().any(|x| x == f)
    }
}

/// Parses the `/*--- … ---*/` YAML front matter.
pub fn parse_meta(source: &str) -> Result<Meta, String> {
    let Some(start) = source.find("/*---") else {
        return Ok(Meta::default());
    };
    let rest = &source[start + 5..];
    let end = rest.find("---*/").ok_or("front matter is not closed")?;
    let docs =
        YamlLoader::load_from_str(&rest[..end]).map_err(|e| format!("bad front matter: {e}"))?;
    let Some(doc) = docs.first() else {
        return Ok(Meta::default());
    };
    let list = |key: &str| -> Vec<String> {
        match &doc[key] {
            Yaml::Array(items) => items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    };
    let negative = match (&doc["negative"]["phase"], &doc["negative"]["type"]) {
        (Yaml::String(p), Yaml::String(t)) => Some((p.clone(), t.clone())),
        _ => None,
    };
    Ok(Meta {
        includes: list("includes"),
        flags: list("flags"),
        features: list("features"),
        negative,
    })
}

/// Every `.js` test under `dir/test/filter`, sorted; fixtures excluded.
fn tests(opts: &Options) -> Result<Vec<PathBuf>, String> {
    let root = opts.dir.join("test");
    let base = match &opts.filter {
        Some(f) => root.join(f),
        None => root.clone(),
    };
    if !base.exists() {
        return Err(format!("{} does not exist", base.display()));
    }
    let mut out: Vec<PathBuf> = walkdir::WalkDir::new(&base)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .filter(|p| p.extension().is_some_and(|x| x == "js"))
        .filter(|p| !p.to_string_lossy().contains("_FIXTURE"))
        .collect();
    out.sort();
    Ok(out)
}

struct Harness {
    dir: PathBuf,
    cache: HashMap<String, String>,
    hardened: bool,
}

/// test262's own helpers that build code from strings, which a hardened
/// context refuses (no `eval`, no `Function` constructor), and what a
/// hardened run uses instead: the same values, made without code
/// generation. The test bodies are never changed; without this, every
/// test that includes one of these helpers fails for a reason that is
/// not its own (69 in `built-ins/Array` alone).
const HARDENED_HELPERS: &[(&str, &str, &str)] = &[
    (
        "resizableArrayBufferUtils.js",
        "return new Function('return class My' + type + ' extends ' + type + ' {}')();",
        "const name = 'My' + type; const Base = globalThis[type]; \
         return ({ [name]: class extends Base {} })[name];",
    ),
    (
        "fnGlobalObject.js",
        "Function(\"return this;\")()",
        "globalThis",
    ),
];

impl Harness {
    fn file(&mut self, name: &str) -> Result<String, String> {
        if let Some(s) = self.cache.get(name) {
            return Ok(s.clone());
        }
        let path = self.dir.join("harness").join(name);
        let mut s = std::fs::read_to_string(&path)
            .map_err(|e| format!("include {}: {e}", path.display()))?;
        if self.hardened {
            for (file, from, to) in HARDENED_HELPERS {
                if *file == name {
                    s = s.replace(from, to);
                }
            }
        }
        self.cache.insert(name.to_owned(), s.clone());
        Ok(s)
    }

    fn prefix(&mut self, meta: &Meta) -> Result<String, String> {
        let mut names = vec!["assert.js".to_owned(), "sta.js".to_owned()];
        if meta.flag("async") {
            names.push("doneprintHandle.js".to_owned());
        }
        names.extend(meta.includes.iter().cloned());
        let mut out = String::new();
        for n in names {
            out.push_str(&self.file(&n)?);
            out.push('\n');
        }
        Ok(out)
    }
}

/// Judges one variant's outcome against the test's expectations.
fn judge(meta: &Meta, outcome: &GlobalEvalOutcome, raw_test: bool) -> Result<(), String> {
    let started = |prints: &[String]| raw_test || prints.iter().any(|p| p == STARTED);
    match (&meta.negative, outcome) {
        (_, GlobalEvalOutcome::Unsupported(why)) => Err(format!("unsupported: {why}")),
        (_, GlobalEvalOutcome::TimedOut { .. }) => Err("timed out".into()),
        (Some((phase, ty)), GlobalEvalOutcome::ParseError { name, .. }) => {
            if (phase == "parse" || phase == "early") && name == ty {
                Ok(())
            } else {
                Err(format!("expected {phase} {ty}, got parse error {name}"))
            }
        }
        (
            Some((phase, ty)),
            GlobalEvalOutcome::Threw {
                name,
                message,
                prints,
            },
        ) => {
            let at_parse = !started(prints) && !raw_test;
            let ok = name == ty
                && match phase.as_str() {
                    "parse" | "early" => at_parse || (raw_test && name == "SyntaxError"),
                    _ => !at_parse,
                };
            if ok {
                Ok(())
            } else {
                Err(format!("expected {phase} {ty}, got {name}: {message}"))
            }
        }
        (Some((phase, ty)), GlobalEvalOutcome::Completed { .. }) => {
            Err(format!("expected {phase} {ty}, but the test completed"))
        }
        (None, GlobalEvalOutcome::ParseError { name, message }) => {
            Err(format!("parse error {name}: {message}"))
        }
        (None, GlobalEvalOutcome::Threw { name, message, .. }) => {
            Err(format!("threw {name}: {message}"))
        }
        (None, GlobalEvalOutcome::Completed { prints }) => {
            if !meta.flag("async") {
                return Ok(());
            }
            if let Some(f) = prints
                .iter()
                .find(|p| p.starts_with("Test262:AsyncTestFailure:"))
            {
                return Err(f.clone());
            }
            if prints.iter().any(|p| p == "Test262:AsyncTestComplete") {
                Ok(())
            } else {
                Err("async test never called $DONE".into())
            }
        }
        (_, outcome) => Err(format!("an outcome this runner does not know: {outcome:?}")),
    }
}

fn directory_of(root: &Path, test: &Path) -> String {
    test.parent()
        .and_then(|p| p.strip_prefix(root).ok())
        .map(|p| p.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ".".to_owned())
}

/// Why a test did not pass.
enum Lost {
    /// The engine cannot run it.
    Unsupported(String),
    /// It failed, in the mode named.
    Failed(String),
}

/// One test, ready to run in each of its modes.
struct Test<'a> {
    meta: &'a Meta,
    source: &'a str,
    /// The harness files, or nothing for a `raw` test.
    prefix: &'a str,
    /// Strict (`true`) and/or sloppy.
    variants: &'a [bool],
}

impl Test<'_> {
    /// Runs each mode until one does not pass; with `unfrozen`, hardened
    /// but for the intrinsics.
    async fn run(
        &self,
        adapter: &dyn ScriptRuntimeAdapter,
        opts: &Options,
        unfrozen: bool,
    ) -> Result<(), Lost> {
        let raw_test = self.meta.flag("raw");
        for &strict in self.variants {
            let code = if raw_test {
                self.source.to_owned()
            } else {
                let directive = if strict { "\"use strict\";\n" } else { "" };
                format!(
                    "{directive}print('{STARTED}');\n{}{}",
                    self.prefix, self.source
                )
            };
            let outcome = adapter
                .eval_global(GlobalEval::new(code, !opts.raw, opts.timeout_ms).unfrozen(unfrozen))
                .await;
            if let GlobalEvalOutcome::Unsupported(why) = outcome {
                return Err(Lost::Unsupported(why));
            }
            if let Err(why) = judge(self.meta, &outcome, raw_test) {
                let mode = if strict { "strict" } else { "sloppy" };
                return Err(Lost::Failed(format!("{mode}: {why}")));
            }
        }
        Ok(())
    }
}

/// Runs the selected tests on `adapter`.
pub async fn run(adapter: &dyn ScriptRuntimeAdapter, opts: &Options) -> Result<Report, String> {
    let root = opts.dir.join("test");
    let mut harness = Harness {
        dir: opts.dir.clone(),
        cache: HashMap::new(),
        hardened: !opts.raw,
    };
    let mut report = Report {
        engine: adapter.info().name,
        hardened: !opts.raw,
        ..Report::default()
    };
    for path in tests(opts)? {
        let rel = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        let counts = report
            .directories
            .entry(directory_of(&root, &path))
            .or_default();
        let source = match std::fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) => {
                counts.fail += 1;
                report.failures.push((rel, format!("unreadable: {e}")));
                continue;
            }
        };
        let meta = match parse_meta(&source) {
            Ok(m) => m,
            Err(e) => {
                counts.fail += 1;
                report.failures.push((rel, e));
                continue;
            }
        };
        let skip = if meta.flag("module") {
            Some("modules are not supported".to_owned())
        } else {
            meta.features
                .iter()
                .find(|f| opts.skip_features.contains(f))
                .map(|f| format!("feature {f} is skipped"))
        };
        if let Some(why) = skip {
            counts.skip += 1;
            report.skipped.push((rel, why));
            continue;
        }
        let raw_test = meta.flag("raw");
        let variants: &[bool] = if raw_test || meta.flag("noStrict") {
            &[false]
        } else if meta.flag("onlyStrict") {
            &[true]
        } else {
            &[true, false]
        };
        let prefix = if raw_test {
            String::new()
        } else {
            match harness.prefix(&meta) {
                Ok(p) => p,
                Err(e) => {
                    counts.fail += 1;
                    report.failures.push((rel, e));
                    continue;
                }
            }
        };
        let test = Test {
            meta: &meta,
            source: &source,
            prefix: &prefix,
            variants,
        };
        // As a run of this script would: a script that changes a built-in
        // gets a private realm, whose intrinsics are not frozen.
        let private = !opts.raw && realm::changes_builtins(&format!("{prefix}{source}"));
        if private {
            report.private_realm.push(rel.clone());
        }
        let result = test.run(adapter, opts, private).await;
        let counts = report
            .directories
            .entry(directory_of(&root, &path))
            .or_default();
        match result {
            Ok(()) => counts.pass += 1,
            Err(Lost::Unsupported(why)) => {
                counts.skip += 1;
                report
                    .skipped
                    .push((rel, format!("the engine cannot run it: {why}")));
            }
            Err(Lost::Failed(why)) => {
                counts.fail += 1;
                // Lost to frozen intrinsics, or to something else?
                if !opts.raw && !private && test.run(adapter, opts, true).await.is_ok() {
                    report.frozen_only.push(rel.clone());
                }
                report.failures.push((rel, why));
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_parsed() {
        let src = "// c\n/*---\ndescription: x\nincludes: [compareArray.js]\nflags: [onlyStrict, async]\nfeatures:\n  - Symbol\nnegative:\n  phase: parse\n  type: SyntaxError\n---*/\nfoo();";
        let m = parse_meta(src).unwrap();
        assert_eq!(m.includes, vec!["compareArray.js"]);
        assert_eq!(m.flags, vec!["onlyStrict", "async"]);
        assert_eq!(m.features, vec!["Symbol"]);
        assert_eq!(m.negative, Some(("parse".into(), "SyntaxError".into())));
        assert_eq!(parse_meta("no meta").unwrap(), Meta::default());
        assert!(parse_meta("/*--- flags: [a").is_err());
    }
}
