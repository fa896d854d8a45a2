//! Preparation: from raw bytes to a script an engine can run, with a real
//! JavaScript/TypeScript parser ([oxc](https://oxc.rs)) instead of regexes.
//!
//! UTF-8 (a BOM is stripped), the size cap, a nesting guard in front of the
//! parser, syntax errors with line and column, banned identifiers found on
//! the AST (free references to `eval`, `Function`, `require`, `process`, …,
//! `import()` and module syntax, `__proto__` keys and member accesses;
//! never inside strings or comments, never a local binding of that name),
//! TypeScript types stripped so TS runs on every engine, and the SHA-256 of
//! the source. [`Preparer`] caches prepared scripts by hash in a bounded
//! LRU and counts hits.
//!
//! Why oxc: it parses JS and TS (scripts with top-level `return` and
//! `await`, as our scripts are), its semantic pass tells a global `eval`
//! from a local one, its transformer strips TypeScript, and it is the
//! fastest of the Rust parsers (swc's API is larger and slower to build).

use crate::detect::Language;
use harness_core::error::{ErrorCode, Phase, ScriptError};
use harness_core::source::{decode_source, location, nesting_depth};
use oxc::allocator::Allocator;
use oxc::ast::ast::{
    ComputedMemberExpression, Expression, IdentifierReference, ImportExpression, ImportMeta,
    ModuleDeclaration, ObjectProperty, PropertyKey, StaticMemberExpression, TSModuleBlock,
};
use oxc::ast_visit::{walk, Visit};
use oxc::codegen::Codegen;
use oxc::parser::{ParseOptions, Parser};
use oxc::semantic::{Scoping, SemanticBuilder};
use oxc::span::{GetSpan, SourceType, Span};
use oxc::transformer::{TransformOptions, Transformer};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Globals a script may not name. The engines block them at run time too;
/// finding them here fails fast, before anything runs, with a location.
pub const BANNED_GLOBALS: &[&str] = &[
    "eval",
    "Function",
    "require",
    "process",
    "module",
    "exports",
    "Worker",
    "SharedArrayBuffer",
    "Atomics",
    "WebAssembly",
    "importScripts",
    "Deno",
    "Bun",
];

/// Deepest bracket nesting the parser is given (oxc's parser recurses).
pub const MAX_NESTING: usize = 1_000;

/// A script ready to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Prepared {
    /// The source as written (BOM stripped).
    pub source: String,
    /// What the engine runs: the source itself for JavaScript, the source
    /// with its types stripped for TypeScript.
    pub code: String,
    pub language: Language,
    /// SHA-256 of `source`, lowercase hex.
    pub sha256: String,
    /// Tools the script names as `tools.NAME`, in order of first use.
    #[serde(default)]
    pub tools: Vec<String>,
}

/// Options for [`prepare_with`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PrepareOptions {
    /// The language the script is written in.
    pub language: Language,
    /// Longest source accepted, in bytes (ScriptTooLargeError past it).
    pub max_source_bytes: u64,
}

impl PrepareOptions {
    /// Options for a script in `language`, with the default size cap.
    pub fn new(language: Language) -> Self {
        PrepareOptions {
            language,
            ..PrepareOptions::default()
        }
    }

    /// With `max_source_bytes` as the size cap.
    pub fn with_max_source_bytes(mut self, max_source_bytes: u64) -> Self {
        self.max_source_bytes = max_source_bytes;
        self
    }
}

impl Default for PrepareOptions {
    fn default() -> Self {
        PrepareOptions {
            language: Language::Javascript,
            max_source_bytes: harness_core::Limits::default().max_source_bytes,
        }
    }
}

/// Prepares JavaScript with the default size cap. Never panics, on any
/// input (a fuzz target calls it with arbitrary bytes).
///
/// # Examples
/// ```
/// use harness_respond::prepare::prepare;
/// let p = prepare(b"const x = await tools.echo({a: 1}); return x").unwrap();
/// assert_eq!(p.sha256.len(), 64);
/// let e = prepare(b"return eval('1')").unwrap_err();
/// assert_eq!(e.code, harness_core::ErrorCode::BannedIdentifierError);
/// assert_eq!(e.location.unwrap().column, 8);
/// ```
pub fn prepare(bytes: &[u8]) -> Result<Prepared, ScriptError> {
    prepare_with(bytes, PrepareOptions::default())
}

/// Prepares a script in `opts.language`.
pub fn prepare_with(bytes: &[u8], opts: PrepareOptions) -> Result<Prepared, ScriptError> {
    let source = decode_source(bytes, opts.max_source_bytes)?;
    prepare_source(source, opts.language)
}

/// SHA-256 of `s`, lowercase hex.
pub fn sha256_hex(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// Known panics of the parser in builds with debug assertions (never in
/// release builds): oxc-project/oxc#23669, fixed only in oxc versions that
/// need a newer Rust than this project's. Found by the `prepare` fuzz target.
pub const KNOWN_PARSER_PANICS: &[&str] = &["comment.is_pure()"];

fn prepare_source(source: String, language: Language) -> Result<Prepared, ScriptError> {
    // The parser is large and fuzzed upstream, but a panic inside it must
    // not take the host down with it: it becomes HarnessInternalError.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        prepare_unguarded(source, language)
    })) {
        Ok(r) => r,
        Err(payload) => Err(ScriptError::internal(format!(
            "the JavaScript parser failed on this script: {}",
            harness_core::error::panic_message(payload.as_ref())
        ))),
    }
}

fn prepare_unguarded(source: String, language: Language) -> Result<Prepared, ScriptError> {
    if nesting_depth(&source) > MAX_NESTING {
        return Err(ScriptError::new(
            ErrorCode::StackOverflowError,
            Phase::Parsing,
            format!("the script is nested more than {MAX_NESTING} levels deep"),
        ));
    }
    let sha256 = sha256_hex(&source);
    let allocator = Allocator::default();
    let source_type = match language {
        Language::Javascript => SourceType::mjs(),
        Language::Typescript => SourceType::ts().with_module(true),
    };
    let parsed = Parser::new(&allocator, &source, source_type)
        .with_options(ParseOptions {
            allow_return_outside_function: true,
            ..ParseOptions::default()
        })
        .parse();
    if let Some(d) = parsed.diagnostics.errors().next() {
        let offset = d.labels.first().map(|l| l.offset()).unwrap_or(0);
        let loc = location(&source, offset as usize);
        return Err(ScriptError::new(
            ErrorCode::ScriptSyntaxError,
            Phase::Parsing,
            format!("{} (script.js:{}:{})", d.message, loc.line, loc.column),
        )
        .with_name("SyntaxError")
        .with_location(Some(loc)));
    }
    if parsed.panicked {
        return Err(ScriptError::new(
            ErrorCode::ScriptSyntaxError,
            Phase::Parsing,
            "the script could not be parsed",
        )
        .with_name("SyntaxError"));
    }
    let mut program = parsed.program;
    // Enum values are evaluated for the transformer (the fallback for
    // TypeScript with run-time meaning).
    let semantic = SemanticBuilder::new()
        .with_enum_eval(language == Language::Typescript)
        .build(&program);
    let scoping = semantic.semantic.into_scoping();
    let mut scan = Scan {
        scoping: &scoping,
        found: None,
        tools: Vec::new(),
        in_namespace: 0,
    };
    scan.visit_program(&program);
    if let Some((what, span)) = scan.found {
        let loc = location(&source, span.start as usize);
        return Err(ScriptError::new(
            ErrorCode::BannedIdentifierError,
            Phase::Parsing,
            format!(
                "{what} is not allowed in scripts (script.js:{}:{})",
                loc.line, loc.column
            ),
        )
        .with_location(Some(loc)));
    }
    let tools = std::mem::take(&mut scan.tools);
    let code = match language {
        Language::Javascript => source.clone(),
        Language::Typescript => match crate::typescript::blank_types(&source, &program)
            .filter(|js| parses_as_javascript(js))
        {
            Some(js) => js,
            None => strip_with_transformer(&allocator, scoping, &mut program)?,
        },
    };
    Ok(Prepared {
        source,
        code,
        language,
        sha256,
        tools,
    })
}

fn parses_as_javascript(code: &str) -> bool {
    let js = Allocator::default();
    let parsed = Parser::new(&js, code, SourceType::mjs())
        .with_options(ParseOptions {
            allow_return_outside_function: true,
            ..ParseOptions::default()
        })
        .parse();
    parsed.diagnostics.errors().next().is_none() && !parsed.panicked
}

/// TypeScript with run-time meaning (`enum`, namespaces, parameter
/// properties): oxc's transformer and code generator. The output's lines
/// differ from the source's.
fn strip_with_transformer<'a>(
    allocator: &'a Allocator,
    scoping: Scoping,
    program: &mut oxc::ast::ast::Program<'a>,
) -> Result<String, ScriptError> {
    let options = TransformOptions::default();
    let done = Transformer::new(allocator, Path::new("script.ts"), &options)
        .build_with_scoping(scoping, program);
    if let Some(d) = done.diagnostics.first() {
        return Err(ScriptError::new(
            ErrorCode::ScriptSyntaxError,
            Phase::Parsing,
            format!("TypeScript could not be stripped: {}", d.message),
        ));
    }
    let code = Codegen::new().build(program).code;
    // oxc's TypeScript parser accepts some inputs its JavaScript
    // parser rejects (the fuzzer found `\/*\e*\a` stripped to
    // ` *  * a`): what reaches the engine must be JavaScript.
    let js = Allocator::default();
    let reparsed = Parser::new(&js, &code, SourceType::mjs())
        .with_options(ParseOptions {
            allow_return_outside_function: true,
            ..ParseOptions::default()
        })
        .parse();
    if let Some(d) = reparsed.diagnostics.errors().next() {
        return Err(ScriptError::new(
            ErrorCode::ScriptSyntaxError,
            Phase::Parsing,
            format!("not valid TypeScript: once its types are stripped it does not parse as JavaScript ({})", d.message),
        )
        .with_name("SyntaxError"));
    }
    Ok(code)
}

/// Walks the AST for what scripts may not use; keeps the first finding.
struct Scan<'s> {
    scoping: &'s Scoping,
    found: Option<(String, Span)>,
    tools: Vec<String>,
    /// Inside a TypeScript `namespace` / `module` block, where `export`
    /// names a member (type stripping makes it a property), not a module
    /// export.
    in_namespace: u32,
}

impl Scan<'_> {
    fn flag(&mut self, what: String, span: Span) {
        if self.found.is_none() {
            self.found = Some((what, span));
        }
    }
}

fn is_proto_key(key: &PropertyKey<'_>) -> bool {
    match key {
        PropertyKey::StaticIdentifier(id) => id.name == "__proto__",
        PropertyKey::StringLiteral(s) => s.value == "__proto__",
        _ => false,
    }
}

impl<'a> Visit<'a> for Scan<'_> {
    fn visit_identifier_reference(&mut self, it: &IdentifierReference<'a>) {
        if BANNED_GLOBALS.contains(&it.name.as_str()) {
            let global = it
                .reference_id
                .get()
                .is_none_or(|id| self.scoping.get_reference(id).symbol_id().is_none());
            if global {
                self.flag(format!("`{}`", it.name), it.span);
            }
        }
    }

    fn visit_import_expression(&mut self, it: &ImportExpression<'a>) {
        self.flag("`import()`".to_owned(), it.span);
        walk::walk_import_expression(self, it);
    }

    fn visit_module_declaration(&mut self, it: &ModuleDeclaration<'a>) {
        let member = self.in_namespace > 0
            && matches!(
                it,
                ModuleDeclaration::ExportDeclaration(_)
                    | ModuleDeclaration::ExportNamedDeclaration(_)
            );
        if member {
            walk::walk_module_declaration(self, it);
        } else {
            self.flag("`import` / `export`".to_owned(), it.span());
        }
    }

    fn visit_ts_module_block(&mut self, it: &TSModuleBlock<'a>) {
        self.in_namespace += 1;
        walk::walk_ts_module_block(self, it);
        self.in_namespace -= 1;
    }

    fn visit_import_meta(&mut self, it: &ImportMeta) {
        self.flag("`import.meta`".to_owned(), it.span);
    }

    fn visit_static_member_expression(&mut self, it: &StaticMemberExpression<'a>) {
        if it.property.name == "__proto__" {
            self.flag("`__proto__`".to_owned(), it.property.span);
        }
        if let Expression::Identifier(obj) = &it.object {
            let name = it.property.name.as_str();
            if obj.name == "tools" && !self.tools.iter().any(|t| t == name) {
                self.tools.push(name.to_owned());
            }
        }
        walk::walk_static_member_expression(self, it);
    }

    fn visit_computed_member_expression(&mut self, it: &ComputedMemberExpression<'a>) {
        if let Expression::StringLiteral(s) = &it.expression {
            if s.value == "__proto__" {
                self.flag("`__proto__`".to_owned(), s.span);
            }
        }
        walk::walk_computed_member_expression(self, it);
    }

    fn visit_object_property(&mut self, it: &ObjectProperty<'a>) {
        if is_proto_key(&it.key) {
            self.flag("`__proto__`".to_owned(), it.key.span());
        }
        walk::walk_object_property(self, it);
    }
}

/// Hit and miss counts of a [`Preparer`]'s cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: usize,
    pub capacity: usize,
}

impl CacheStats {
    /// Hits over lookups, 0 when there were none.
    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 {
            0.0
        } else {
            self.hits as f64 / total as f64
        }
    }
}

/// One cached script: the exact bytes it was prepared from (the key is a
/// fast hash; a lookup compares the bytes, so a collision is a miss, never
/// a wrong script) and the result.
#[derive(Debug)]
struct Entry {
    language: Language,
    bytes: Box<[u8]>,
    result: Result<Arc<Prepared>, ScriptError>,
}

/// Prepares scripts and keeps the last `capacity` results (successes and
/// failures alike), keyed by a hash of language and source. A hit costs a
/// fast hash and a comparison of the bytes (no parsing, no SHA-256).
/// Shareable across threads.
#[derive(Debug)]
pub struct Preparer {
    max_source_bytes: u64,
    cache: Mutex<lru::LruCache<u64, Entry>>,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Default for Preparer {
    fn default() -> Self {
        Self::new(256, harness_core::Limits::default().max_source_bytes)
    }
}

fn cache_key(language: Language, bytes: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write_u8(language as u8);
    h.write(bytes);
    h.finish()
}

impl Preparer {
    /// A cache of `capacity` scripts (at least 1) of at most
    /// `max_source_bytes` each.
    pub fn new(capacity: usize, max_source_bytes: u64) -> Self {
        let cap = NonZeroUsize::new(capacity.max(1)).expect("at least 1");
        Preparer {
            max_source_bytes,
            cache: Mutex::new(lru::LruCache::new(cap)),
            capacity: cap.get(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Prepares `bytes` as `language`, from the cache when the same script
    /// was prepared before.
    ///
    /// # Examples
    /// ```
    /// use harness_respond::{detect::Language, prepare::Preparer};
    /// let p = Preparer::default();
    /// let a = p.prepare(b"let n: number = 1; return n", Language::Typescript).unwrap();
    /// let b = p.prepare(b"let n: number = 1; return n", Language::Typescript).unwrap();
    /// assert_eq!(a.code, b.code);
    /// assert_eq!(p.stats().hits, 1);
    /// ```
    pub fn prepare(&self, bytes: &[u8], language: Language) -> Result<Arc<Prepared>, ScriptError> {
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        let key = cache_key(language, bytes);
        if let Ok(mut cache) = self.cache.lock() {
            if let Some(e) = cache.get(&key) {
                if e.language == language && *e.bytes == *bytes {
                    self.hits.fetch_add(1, Ordering::Relaxed);
                    return e.result.clone();
                }
            }
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let result = decode_source(bytes, self.max_source_bytes)
            .and_then(|source| prepare_source(source, language))
            .map(Arc::new);
        // Oversized inputs are not kept: the cache holds at most
        // `capacity` scripts of at most the size cap.
        if bytes.len() as u64 <= self.max_source_bytes {
            if let Ok(mut cache) = self.cache.lock() {
                cache.put(
                    key,
                    Entry {
                        language,
                        bytes: bytes.into(),
                        result: result.clone(),
                    },
                );
            }
        }
        result
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self.cache.lock().map(|c| c.len()).unwrap_or(0),
            capacity: self.capacity,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(src: &str) -> Option<ErrorCode> {
        prepare(src.as_bytes()).err().map(|e| e.code)
    }

    #[test]
    fn scripts_with_top_level_return_and_await_prepare() {
        let p = prepare(b"\xEF\xBB\xBFconst r = await tools.x({}); return r").unwrap();
        assert_eq!(p.source, "const r = await tools.x({}); return r");
        assert_eq!(p.code, p.source);
        assert_eq!(
            p.sha256,
            sha256_hex("const r = await tools.x({}); return r")
        );
    }

    #[test]
    fn typescript_namespaces_with_values_are_not_module_syntax() {
        let opts = PrepareOptions::new(Language::Typescript);
        for src in [
            "namespace N { export const x = 1 } return N.x",
            "namespace A.B { export function f() { return 2 } } return A.B.f()",
            "declare module \"m\" { export function g(): void }\nreturn 1",
        ] {
            let p = prepare_with(src.as_bytes(), opts).unwrap_or_else(|e| panic!("{src}: {e:?}"));
            assert!(!p.code.contains("export "), "{src}: {}", p.code);
        }
        // Module syntax is still refused, inside a namespace too.
        for src in [
            "export const x = 1",
            "namespace N { export * from 'm' }",
            "namespace N { import x from 'm' }",
        ] {
            let e = prepare_with(src.as_bytes(), opts).unwrap_err();
            assert!(
                matches!(
                    e.code,
                    ErrorCode::BannedIdentifierError | ErrorCode::ScriptSyntaxError
                ),
                "{src}: {e:?}"
            );
        }
    }

    #[test]
    fn syntax_errors_have_line_and_column() {
        let e = prepare(b"const a = 1;\nreturn a +").unwrap_err();
        assert_eq!(e.code, ErrorCode::ScriptSyntaxError);
        assert_eq!(e.phase, Phase::Parsing);
        let loc = e.location.unwrap();
        assert_eq!(loc.line, 2);
        assert!(e.message.contains("script.js:2:"), "{}", e.message);
    }

    #[test]
    fn banned_globals_are_found_on_the_ast_only() {
        for src in [
            "eval('1')",
            "return new Function('return 1')()",
            "const fs = require('fs')",
            "return process.env",
            "new Worker('x')",
            "new SharedArrayBuffer(8)",
            "await import('x')",
            "import x from 'y'",
            "export const a = 1",
            "return import.meta",
            "const o = {}; o.__proto__ = null",
            "const o = {}; o['__proto__'] = null",
            "return {__proto__: null}",
        ] {
            assert_eq!(code(src), Some(ErrorCode::BannedIdentifierError), "{src}");
        }
        for src in [
            "return 'eval(1) and require(x) in a string'",
            "// eval('x')\n/* process.exit() */ return 1",
            "const process = (x) => x; return process(1)",
            "function f(eval2) { return eval2 } return f(1)",
            "return data.process + obj.eval + obj.require",
            "return `Function ${1}`",
        ] {
            assert_eq!(code(src), None, "{src}");
        }
    }

    #[test]
    fn banned_identifier_locations_point_at_the_name() {
        let e = prepare(b"const a = 1;\n  return eval('a')").unwrap_err();
        let loc = e.location.unwrap();
        assert_eq!((loc.line, loc.column), (2, 10));
    }

    #[test]
    fn the_tools_a_script_names_are_listed() {
        let p = prepare(
            b"await tools.a({}); const x = 'tools.fake'; await tools.b({}); await tools.a({})",
        )
        .unwrap();
        assert_eq!(p.tools, ["a", "b"]);
    }

    #[test]
    fn a_parser_panic_is_an_internal_error_not_a_crash() {
        // oxc 0.146's debug assertion (oxc-project/oxc#23669), found by the
        // `prepare` fuzz target; release builds do not assert.
        let r = prepare(b"foro ((( requireei =ogirei[wh(en?//@__PURE__.())K//@i");
        if cfg!(debug_assertions) {
            let e = r.unwrap_err();
            assert_eq!(e.code, ErrorCode::HarnessInternalError);
            assert!(e.message.contains("comment.is_pure()"), "{}", e.message);
        } else {
            assert_eq!(r.unwrap_err().code, ErrorCode::ScriptSyntaxError);
        }
    }

    #[test]
    fn typescript_that_strips_to_invalid_javascript_is_a_syntax_error() {
        // Found by the `prepare` fuzz target: oxc's TypeScript parser took
        // this, and its output did not parse as JavaScript.
        let e = prepare_with(
            br"\/*\e*\awai<<i<<B<<srai<<i<<B<<rtx<sie",
            PrepareOptions {
                language: Language::Typescript,
                ..PrepareOptions::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::ScriptSyntaxError);
    }

    #[test]
    fn typescript_types_are_stripped() {
        let ts = "interface P { x: number }\ntype Q = P | null;\nconst p: P = {x: 1} as P;\nfunction f<T>(v: T): T { return v }\nreturn f<number>(p.x)";
        let p = prepare_with(
            ts.as_bytes(),
            PrepareOptions {
                language: Language::Typescript,
                ..PrepareOptions::default()
            },
        )
        .unwrap();
        assert!(!p.code.contains("interface"), "{}", p.code);
        assert!(!p.code.contains(": number"), "{}", p.code);
        assert!(p.code.contains("return f        (p.x)"), "{}", p.code);
        // Types are a syntax error in JavaScript.
        assert_eq!(code(ts), Some(ErrorCode::ScriptSyntaxError));
    }

    #[test]
    fn bad_bytes_sizes_and_nesting_are_refused() {
        assert_eq!(code("return '\u{0}'"), None);
        assert_eq!(
            prepare(b"return \xFF").unwrap_err().code,
            ErrorCode::ScriptSyntaxError
        );
        let big = "x".repeat(30_000);
        assert_eq!(code(&big), Some(ErrorCode::ScriptTooLargeError));
        let deep = format!("return {}", "[".repeat(5_000));
        assert_eq!(code(&deep), Some(ErrorCode::StackOverflowError));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
        #[test]
        fn never_panics_on_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = prepare(&bytes);
            let _ = prepare_with(&bytes, PrepareOptions { language: Language::Typescript, ..PrepareOptions::default() });
        }

        #[test]
        fn never_panics_on_script_like_text(s in "[a-z(){}\\[\\];=.'\"`<>:?! \n]{0,200}") {
            let _ = prepare(s.as_bytes());
            let _ = prepare_with(s.as_bytes(), PrepareOptions { language: Language::Typescript, ..PrepareOptions::default() });
        }
    }

    #[test]
    fn the_cache_hits_on_the_same_script_and_language() {
        let p = Preparer::new(2, 1 << 20);
        p.prepare(b"return 1", Language::Javascript).unwrap();
        p.prepare(b"return 1", Language::Javascript).unwrap();
        p.prepare(b"return 1", Language::Typescript).unwrap();
        assert!(p.prepare(b"return eval(1)", Language::Javascript).is_err());
        assert!(p.prepare(b"return eval(1)", Language::Javascript).is_err());
        let s = p.stats();
        assert_eq!((s.hits, s.misses, s.entries, s.capacity), (2, 3, 2, 2));
        assert!((s.hit_rate() - 0.4).abs() < 1e-9);
    }
}
