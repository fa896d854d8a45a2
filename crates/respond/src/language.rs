//! TypeScript on every engine: [`TypeScriptAware`] wraps any adapter and
//! strips types before the adapter sees a script.
//!
//! With [`ScriptLanguage::Auto`] (the default) a script first runs as it
//! is: JavaScript that parses pays nothing. Only when the engine rejects
//! the script as a syntax error, before anything of it ran, is the source
//! parsed as TypeScript (oxc, cached by hash in a [`Preparer`]); if that
//! parses, the stripped script runs instead, else the engine's own syntax
//! error (line and column of the original source) stands. The realm check
//! ([`crate::realm`]) parses most scripts anyway (any with `=`, `(`, …);
//! when it found that a script parses only as TypeScript, the script is
//! stripped at once, without the doomed first run (which behind the
//! process boundary is a round trip to the worker, and for a script that
//! needs a private realm a whole realm).
//! [`ScriptLanguage::TypeScript`] strips first; [`ScriptLanguage::JavaScript`]
//! never does.

use crate::detect::Language;
use crate::prepare::Preparer;
use crate::realm::{RealmCache, Verdict};
use async_trait::async_trait;
use harness_core::{
    ErrorCode, ExecutionReport, ExecutionRequest, Layer, Phase, ScriptError, ScriptLanguage,
    ScriptRuntimeAdapter,
};
use std::sync::Arc;

/// An adapter that accepts TypeScript as well as JavaScript (see the
/// [module docs](self)).
///
/// # Examples
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};
/// use harness_respond::language::TypeScriptAware;
/// use std::sync::Arc;
/// let engine = TypeScriptAware::new(Arc::new(harness_quickjs::QuickJs::new()));
/// let r = engine.execute(ExecutionRequest::new("const xs: number[] = [1, 2]; return xs.length")).await;
/// assert_eq!(r.value, Some(serde_json::json!(2)));
/// # });
/// ```
#[derive(Clone)]
pub struct TypeScriptAware {
    inner: Arc<dyn ScriptRuntimeAdapter>,
    preparer: Arc<Preparer>,
    realms: Arc<RealmCache>,
}

impl std::fmt::Debug for TypeScriptAware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypeScriptAware")
            .field("engine", &self.inner.info().name)
            .field("cache", &self.preparer.stats())
            .field("realms", &self.realms)
            .finish()
    }
}

impl TypeScriptAware {
    /// Wraps `inner`, with a cache of 256 stripped scripts and one of the
    /// realm check's verdicts for 64 scripts.
    pub fn new(inner: Arc<dyn ScriptRuntimeAdapter>) -> Self {
        TypeScriptAware {
            inner,
            preparer: Arc::new(Preparer::new(256, u64::MAX)),
            realms: Arc::new(RealmCache::new(64)),
        }
    }

    /// The wrapped adapter.
    pub fn inner(&self) -> &Arc<dyn ScriptRuntimeAdapter> {
        &self.inner
    }

    /// The source with its types stripped (from the cache when this
    /// script was stripped before).
    fn strip(&self, source: &str) -> Result<String, ScriptError> {
        self.preparer
            .prepare(source.as_bytes(), Language::Typescript)
            .map(|p| p.code.clone())
    }

    /// A script that may change a built-in gets a private realm
    /// (`crate::realm`), unless the caller chose.
    fn choose_realm(&self, request: &mut ExecutionRequest) {
        if request.limits.realm.is_none() {
            self.check(request);
        }
    }

    /// The realm check's verdict on the request's script (kept for the
    /// last scripts); sets the realm it needs unless the caller chose one.
    fn check(&self, request: &mut ExecutionRequest) -> Verdict {
        // A script over the size cap is refused before it runs: not worth
        // parsing here.
        let within = request.source.len() as u64 <= request.limits.max_source_bytes;
        let verdict = if within {
            self.realms.verdict(&request.source)
        } else {
            Verdict::UNKNOWN
        };
        request.limits.realm.get_or_insert(verdict.realm);
        verdict
    }

    /// Whether a failed run is a syntax error of the whole script, found
    /// before any of it ran.
    fn rejected_unparsed(report: &ExecutionReport) -> bool {
        report
            .error
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::ScriptSyntaxError && e.phase == Phase::Parsing)
            && report.tool_calls.is_empty()
            && report.console.is_empty()
    }
}

#[async_trait]
impl Layer for TypeScriptAware {
    fn inner(&self) -> &dyn ScriptRuntimeAdapter {
        &*self.inner
    }

    async fn check_syntax(&self, source: &str) -> Result<(), ScriptError> {
        match self.inner.check_syntax(source).await {
            Err(e) if e.code == ErrorCode::ScriptSyntaxError => match self.strip(source) {
                Ok(js) if js != source => self.inner.check_syntax(&js).await,
                Ok(_) => Err(e),
                Err(ts) if later(&ts, &e) => Err(ts),
                Err(_) => Err(e),
            },
            other => other,
        }
    }

    async fn execute(&self, mut request: ExecutionRequest) -> ExecutionReport {
        if request.resume.is_some() {
            // A resumed run goes on from its continuation: it has no source.
            return self.inner.execute(request).await;
        }
        match request.language {
            ScriptLanguage::JavaScript => {
                self.choose_realm(&mut request);
                self.inner.execute(request).await
            }
            // Checked once stripped: the check then parses JavaScript at
            // its first try, instead of failing on the types first.
            ScriptLanguage::TypeScript => match self.strip(&request.source) {
                Ok(js) => {
                    request.source = js;
                    self.choose_realm(&mut request);
                    self.inner.execute(request).await
                }
                Err(e) => ExecutionReport::failed(&self.inner.info().name, e),
            },
            _ => {
                if self.check(&mut request).typescript_only {
                    // Parsed as TypeScript only: as JavaScript, the first
                    // try would fail.
                    if let Ok(js) = self.strip(&request.source) {
                        request.source = js;
                        return self.inner.execute(request).await;
                    }
                }
                let retry = request.clone();
                let report = self.inner.execute(request).await;
                if !Self::rejected_unparsed(&report) {
                    return report;
                }
                match self.strip(&retry.source) {
                    Ok(js) if js != retry.source => {
                        let mut retry = retry;
                        retry.source = js;
                        self.inner.execute(retry).await
                    }
                    Ok(_) => report,
                    Err(ts) => further_error(report, ts),
                }
            }
        }
    }
}

/// Whether syntax error `a` is further into the script than `b`.
pub(crate) fn later(a: &ScriptError, b: &ScriptError) -> bool {
    match (a.location, b.location) {
        (Some(a), Some(b)) => (a.line, a.column) > (b.line, b.column),
        _ => false,
    }
}

/// The script is neither JavaScript nor TypeScript. The parser that got
/// further into it is the better guide: a JavaScript error at the first
/// type annotation of a TypeScript script says less than the TypeScript
/// parser's error further on.
fn further_error(mut report: ExecutionReport, mut ts: ScriptError) -> ExecutionReport {
    let replace = ts.code == ErrorCode::ScriptSyntaxError
        && report.error.as_ref().is_some_and(|js| later(&ts, js));
    if replace {
        ts.metadata = report.error.as_ref().and_then(|e| e.metadata.clone());
        report.error = Some(ts);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// QuickJS, counting the runs it is asked for.
    struct Counting {
        inner: harness_quickjs::QuickJs,
        runs: AtomicUsize,
    }

    #[async_trait]
    impl Layer for Counting {
        fn inner(&self) -> &dyn ScriptRuntimeAdapter {
            &self.inner
        }
        async fn execute(&self, request: ExecutionRequest) -> ExecutionReport {
            self.runs.fetch_add(1, Ordering::SeqCst);
            self.inner.execute(request).await
        }
    }

    async fn runs(source: &str) -> (ExecutionReport, usize) {
        let counting = Arc::new(Counting {
            inner: harness_quickjs::QuickJs::new(),
            runs: AtomicUsize::new(0),
        });
        let engine = TypeScriptAware::new(counting.clone());
        let report = ScriptRuntimeAdapter::execute(&engine, ExecutionRequest::new(source)).await;
        (report, counting.runs.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn typescript_the_realm_check_parsed_runs_once_stripped() {
        // Parsed by the check (it has `=`): only TypeScript parses it.
        let (r, n) = runs("const xs: number[] = [1, 2]; return xs.length").await;
        assert_eq!((r.value, n), (Some(serde_json::json!(2)), 1));
        // JavaScript: once, as it is.
        let (r, n) = runs("const xs = [1, 2]; return xs.length").await;
        assert_eq!((r.value, n), (Some(serde_json::json!(2)), 1));
        // Neither: the engine's syntax error, from one run.
        let (r, n) = runs("const xs = ; return xs").await;
        assert_eq!(r.error.map(|e| e.code), Some(ErrorCode::ScriptSyntaxError));
        assert_eq!(n, 1);
        // Nothing the check parses (no `=`, `(`, …): JavaScript first, as ever.
        let (r, n) = runs("return 1 as number").await;
        assert_eq!((r.value, n), (Some(serde_json::json!(1)), 2));
    }
}
