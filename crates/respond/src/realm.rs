//! Which realm a script needs: does it change a built-in?
//!
//! Runs share one hardened context per engine thread, and what makes that
//! safe is that its built-ins (`Array`, `Object.prototype`, `Promise`, …)
//! are deeply frozen: a script that writes to one gets a `TypeError`. A
//! script that means to change one (a polyfill, a patched prototype, most
//! of test262) is better served by a context of its own, whose built-ins
//! are not frozen and which is dropped when the run ends
//! ([`Realm::Private`]). [`changes_builtins`] tells the two apart on the
//! syntax tree (oxc, with scopes), before the run.
//!
//! The check decides speed and conformance, never isolation: a script it
//! passes over runs in the shared context, where its write to a built-in
//! fails as it always did, and a script it flags gets a context nobody
//! else uses. So it may err either way, and errs towards flagging.
//!
//! A script is flagged when it
//! - writes to, or deletes, a property of something that reaches a
//!   built-in (`Array.prototype.last = …`, `delete Math.max`,
//!   `[].constructor.from = …`, `Object.getPrototypeOf(x).y = …`,
//!   `const P = Array.prototype; P.y = …`), or assigns to a global
//!   binding it did not declare;
//! - passes such a thing to `Object.defineProperty`, `defineProperties`,
//!   `setPrototypeOf`, `assign`, `Reflect.set`, `defineProperty`,
//!   `deleteProperty`, `setPrototypeOf`, or calls `__defineGetter__` /
//!   `__defineSetter__` on it;
//! - calls a mutating method on it (`Array.prototype.push(1)`), or any
//!   method with it as `this` (`f.call(Array.prototype)`);
//! - passes it to a function the script declared (`patch(Array)`);
//! - asks whether it is frozen, sealed or extensible (`Object.isFrozen`,
//!   `isSealed`, `isExtensible`, `Reflect.isExtensible`), or for its
//!   property descriptors (`Object.getOwnPropertyDescriptor(s)`,
//!   `Reflect.getOwnPropertyDescriptor`). The shared realm's answer is the
//!   hardening's, not the language's (frozen; `writable: false`; an
//!   accessor pair where the override mistake is tamed): a private realm
//!   answers as an unhardened engine does, and is as true of the realm
//!   the script runs in. So what the shared realm does to built-ins shows
//!   only through aliases this check cannot follow. A caller who wants to
//!   see the shared realm itself pins [`Realm::Shared`].
//!
//! "Reaches a built-in" means: a global the script did not declare (other
//! than the per-run `tools`, `context` and `console`), anything read
//! through `constructor` or `__proto__`, `Object.getPrototypeOf(…)`, a
//! property of any of these, or a local variable first set to one.

use harness_core::source::nesting_depth;
pub use harness_core::Realm;
use oxc::allocator::Allocator;
use oxc::ast::ast::{
    Argument, AssignmentExpression, AssignmentTarget, CallExpression, ChainElement, Expression,
    IdentifierReference, MemberExpression, Program, SimpleAssignmentTarget, UnaryExpression,
    UnaryOperator, VariableDeclarator,
};
use oxc::ast_visit::{walk, Visit};
use oxc::parser::{ParseOptions, Parser};
use oxc::semantic::{Scoping, SemanticBuilder, SymbolId};
use oxc::span::SourceType;
use std::collections::HashSet;

/// Globals that are the run's own, not built-ins.
const PER_RUN: &[&str] = &[
    "tools",
    "context",
    "console",
    "arguments",
    "undefined",
    "NaN",
    "Infinity",
];

/// `Object.X` and `Reflect.X` that change their first argument.
const REFLECTIVE_WRITERS: &[&str] = &[
    "defineProperty",
    "defineProperties",
    "setPrototypeOf",
    "assign",
    "set",
    "deleteProperty",
];

/// `Object.X` and `Reflect.X` whose answer about their argument shows the
/// shared realm's hardening: whether it is frozen, sealed or extensible,
/// and its properties' descriptors (`writable: false`, and the accessor
/// pairs that tame the override mistake where the language has a value).
const HARDENING_QUERIES: &[&str] = &[
    "isExtensible",
    "isFrozen",
    "isSealed",
    "getOwnPropertyDescriptor",
    "getOwnPropertyDescriptors",
];

/// Methods that change their receiver (arrays, maps, sets, typed arrays)
/// or define on it.
const MUTATING_METHODS: &[&str] = &[
    "push",
    "pop",
    "shift",
    "unshift",
    "splice",
    "sort",
    "reverse",
    "fill",
    "copyWithin",
    "set",
    "add",
    "delete",
    "clear",
    "__defineGetter__",
    "__defineSetter__",
    "call",
    "apply",
];

/// The realm `source` needs: [`Realm::Private`] when it may change a
/// built-in, [`Realm::Shared`] otherwise (also when it does not parse: the
/// engine reports that).
pub fn realm_for(source: &str) -> Realm {
    verdict(source).realm
}

/// Whether `source` (JavaScript or TypeScript, a script body that may use
/// top-level `return` and `await`) may change a built-in. See the module
/// docs for the rule.
pub fn changes_builtins(source: &str) -> bool {
    verdict(source).realm == Realm::Private
}

/// What the check learnt about a script: the realm it needs, and whether
/// it parsed only as TypeScript (so that running it as JavaScript first
/// would fail; `crate::language` strips it at once then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) realm: Realm,
    pub(crate) typescript_only: bool,
}

impl Verdict {
    /// Not parsed (nothing to flag, too deep, or no parse at all).
    pub(crate) const UNKNOWN: Verdict = Verdict {
        realm: Realm::Shared,
        typescript_only: false,
    };
}

fn verdict(source: &str) -> Verdict {
    if !may_flag(source) || nesting_depth(source) > crate::prepare::MAX_NESTING {
        return Verdict::UNKNOWN;
    }
    // A parser panic (a known debug-build one: prepare.rs) is a "no".
    std::panic::catch_unwind(|| check(source)).unwrap_or(Verdict::UNKNOWN)
}

/// Whether `source` has anything the check could flag, decided without
/// parsing: every flagged form has one of these, and `return 1 + 1` has
/// none. (Nesting deeper than the parser is let go is not parsed either:
/// prepare refuses it.)
fn may_flag(source: &str) -> bool {
    source
        .as_bytes()
        .iter()
        .any(|b| matches!(b, b'=' | b'(' | b'`'))
        || source.contains("++")
        || source.contains("--")
        || source.contains("delete")
}

/// [`realm_for`], remembering its verdicts for the last scripts it
/// checked: a host that sends the same script again (a retry, a loop over
/// inputs, a benchmark) pays a fast hash and a comparison instead of a
/// parse (6 µs for a typical 0.6 KiB script, 160 µs at the 20 KiB size
/// cap). Scripts with nothing the check could flag are not kept. The key
/// is a fast hash and a hit compares the whole source, so a collision is
/// a miss; and a wrong verdict could only cost speed or conformance,
/// never isolation (module docs). Shareable across threads; [`TypeScriptAware`]
/// (`crate::language`) keeps one for every script the facade runs.
///
/// # Examples
/// ```
/// use harness_respond::realm::{Realm, RealmCache};
/// let cache = RealmCache::new(64);
/// assert_eq!(cache.realm_for("Array.prototype.last = 1"), Realm::Private);
/// // The same script again: its verdict, without a parse.
/// assert_eq!(cache.realm_for("Array.prototype.last = 1"), Realm::Private);
/// assert_eq!(cache.realm_for("const a = [1]; return a"), Realm::Shared);
/// ```
///
/// [`TypeScriptAware`]: crate::language::TypeScriptAware
pub struct RealmCache {
    verdicts: std::sync::Mutex<lru::LruCache<u64, (Box<str>, Verdict)>>,
}

impl RealmCache {
    /// A cache of the last `capacity` verdicts (at least 1).
    pub fn new(capacity: usize) -> Self {
        let cap = std::num::NonZeroUsize::new(capacity.max(1)).expect("at least 1");
        RealmCache {
            verdicts: std::sync::Mutex::new(lru::LruCache::new(cap)),
        }
    }

    /// The realm `source` needs, as [`realm_for`] says.
    pub fn realm_for(&self, source: &str) -> Realm {
        self.verdict(source).realm
    }

    /// The check's [`Verdict`] on `source`, kept or found now.
    pub(crate) fn verdict(&self, source: &str) -> Verdict {
        if !may_flag(source) {
            return Verdict::UNKNOWN;
        }
        let key = {
            use std::hash::Hasher;
            let mut h = rustc_hash::FxHasher::default();
            h.write(source.as_bytes());
            h.finish()
        };
        if let Ok(mut verdicts) = self.verdicts.lock() {
            if let Some((kept, found)) = verdicts.get(&key) {
                if **kept == *source {
                    return *found;
                }
            }
        }
        let found = verdict(source);
        if let Ok(mut verdicts) = self.verdicts.lock() {
            verdicts.put(key, (source.into(), found));
        }
        found
    }

    /// How many verdicts are kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.verdicts.lock().map(|v| v.len()).unwrap_or(0)
    }
}

impl std::fmt::Debug for RealmCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let len = self.verdicts.lock().map(|v| v.len()).unwrap_or(0);
        f.debug_struct("RealmCache").field("entries", &len).finish()
    }
}

fn check(source: &str) -> Verdict {
    for (typescript_only, source_type) in [
        (false, SourceType::mjs()),
        (true, SourceType::ts().with_module(true)),
    ] {
        let allocator = Allocator::default();
        let parsed = Parser::new(&allocator, source, source_type)
            .with_options(ParseOptions {
                allow_return_outside_function: true,
                ..ParseOptions::default()
            })
            .parse();
        if parsed.panicked || parsed.diagnostics.errors().next().is_some() {
            continue;
        }
        let realm = if flags(&parsed.program) {
            Realm::Private
        } else {
            Realm::Shared
        };
        return Verdict {
            realm,
            typescript_only,
        };
    }
    Verdict::UNKNOWN
}

fn flags(program: &Program<'_>) -> bool {
    let semantic = SemanticBuilder::new().build(program);
    let scoping = semantic.semantic.into_scoping();
    let mut walk = Walk {
        scoping: &scoping,
        aliases: HashSet::new(),
        collecting: true,
        grew: false,
        found: false,
        functions: 0,
    };
    // Aliases first (twice, for one declared before what it copies),
    // then the writes.
    for _ in 0..2 {
        walk.grew = false;
        walk.visit_program(program);
        if !walk.grew {
            break;
        }
    }
    walk.collecting = false;
    walk.visit_program(program);
    walk.found
}

struct Walk<'s> {
    scoping: &'s Scoping,
    /// Local variables set to something that reaches a built-in.
    aliases: HashSet<SymbolId>,
    collecting: bool,
    grew: bool,
    found: bool,
    /// Non-arrow functions around the node: `this` outside all of them is
    /// the global object in global code.
    functions: usize,
}

impl Walk<'_> {
    fn symbol(&self, id: &IdentifierReference<'_>) -> Option<SymbolId> {
        id.reference_id
            .get()
            .and_then(|r| self.scoping.get_reference(r).symbol_id())
    }

    /// Whether `id` names a built-in (an undeclared global) or an alias of
    /// one.
    fn names_builtin(&self, id: &IdentifierReference<'_>) -> bool {
        match self.symbol(id) {
            Some(s) => self.aliases.contains(&s),
            None => !PER_RUN.contains(&id.name.as_str()),
        }
    }

    fn member_reaches(&self, m: &MemberExpression<'_>) -> bool {
        matches!(m.static_property_name(), Some("constructor" | "__proto__"))
            || self.reaches(m.object())
    }

    /// Whether `e` may evaluate to a built-in (see the module docs).
    fn reaches(&self, e: &Expression<'_>) -> bool {
        let inner = e.get_inner_expression();
        if let Some(m) = inner.as_member_expression() {
            return self.member_reaches(m);
        }
        match inner {
            Expression::Identifier(id) => self.names_builtin(id),
            Expression::ChainExpression(c) => match &c.expression {
                ChainElement::CallExpression(call) => self.call_reaches(call),
                ChainElement::TSNonNullExpression(n) => self.reaches(&n.expression),
                other => other
                    .as_member_expression()
                    .is_some_and(|m| self.member_reaches(m)),
            },
            Expression::CallExpression(call) => self.call_reaches(call),
            Expression::ThisExpression(_) => self.functions == 0,
            Expression::SequenceExpression(s) => {
                s.expressions.last().is_some_and(|l| self.reaches(l))
            }
            Expression::ConditionalExpression(c) => {
                self.reaches(&c.consequent) || self.reaches(&c.alternate)
            }
            Expression::LogicalExpression(l) => self.reaches(&l.left) || self.reaches(&l.right),
            Expression::AssignmentExpression(a) => self.reaches(&a.right),
            _ => false,
        }
    }

    /// `Object.getPrototypeOf(x)` and `Reflect.getPrototypeOf(x)`, and a
    /// built-in's property descriptors (whose `value`, `get` and `set`
    /// are built-ins).
    fn call_reaches(&self, call: &CallExpression<'_>) -> bool {
        let name = call
            .callee
            .get_inner_expression()
            .as_member_expression()
            .and_then(|m| m.static_property_name());
        match name {
            Some("getPrototypeOf") => true,
            Some("getOwnPropertyDescriptor" | "getOwnPropertyDescriptors") => {
                call.arguments.first().is_some_and(|a| self.arg_reaches(a))
            }
            _ => false,
        }
    }

    fn arg_reaches(&self, a: &Argument<'_>) -> bool {
        match a {
            Argument::SpreadElement(s) => self.reaches(&s.argument),
            other => other.as_expression().is_some_and(|e| self.reaches(e)),
        }
    }

    fn target_flags(&self, t: &SimpleAssignmentTarget<'_>) -> bool {
        match t {
            SimpleAssignmentTarget::AssignmentTargetIdentifier(id) => self.symbol(id).is_none(),
            SimpleAssignmentTarget::TSAsExpression(e) => self.reaches(&e.expression),
            SimpleAssignmentTarget::TSSatisfiesExpression(e) => self.reaches(&e.expression),
            SimpleAssignmentTarget::TSNonNullExpression(e) => self.reaches(&e.expression),
            SimpleAssignmentTarget::TSTypeAssertion(e) => self.reaches(&e.expression),
            // What is written to is the member's object: `a.constructor =
            // C` writes to `a`, `[].constructor.x = 1` to `Array`.
            other => other
                .as_member_expression()
                .is_some_and(|m| self.reaches(m.object())),
        }
    }

    fn call_flags(&self, call: &CallExpression<'_>) -> bool {
        let first = || call.arguments.first().is_some_and(|a| self.arg_reaches(a));
        match call.callee.get_inner_expression() {
            // A function the script declared, given a built-in.
            Expression::Identifier(id) => {
                self.symbol(id).is_some() && call.arguments.iter().any(|a| self.arg_reaches(a))
            }
            callee => {
                let Some(m) = callee.as_member_expression() else {
                    return false;
                };
                let name = m.static_property_name();
                let reflective = matches!(
                    m.object().get_inner_expression(),
                    Expression::Identifier(o) if (o.name == "Object" || o.name == "Reflect")
                        && self.symbol(o).is_none()
                );
                if reflective
                    && name.is_some_and(|n| {
                        REFLECTIVE_WRITERS.contains(&n) || HARDENING_QUERIES.contains(&n)
                    })
                {
                    return first();
                }
                match name {
                    Some("call" | "apply") => first(),
                    Some(n) if MUTATING_METHODS.contains(&n) => self.reaches(m.object()),
                    _ => false,
                }
            }
        }
    }

    fn found(&mut self, yes: bool) {
        if !self.collecting && yes {
            self.found = true;
        }
    }
}

impl<'a> Visit<'a> for Walk<'_> {
    fn visit_function(
        &mut self,
        it: &oxc::ast::ast::Function<'a>,
        flags: oxc::semantic::ScopeFlags,
    ) {
        self.functions += 1;
        walk::walk_function(self, it, flags);
        self.functions -= 1;
    }

    fn visit_variable_declarator(&mut self, it: &VariableDeclarator<'a>) {
        if self.collecting {
            if let (Some(id), Some(init)) = (it.id.get_binding_identifier(), &it.init) {
                if let Some(s) = id.symbol_id.get() {
                    if !self.aliases.contains(&s) && self.reaches(init) {
                        self.aliases.insert(s);
                        self.grew = true;
                    }
                }
            }
        }
        walk::walk_variable_declarator(self, it);
    }

    fn visit_assignment_expression(&mut self, it: &AssignmentExpression<'a>) {
        if self.collecting {
            if let AssignmentTarget::AssignmentTargetIdentifier(id) = &it.left {
                if let Some(s) = self.symbol(id) {
                    if !self.aliases.contains(&s) && self.reaches(&it.right) {
                        self.aliases.insert(s);
                        self.grew = true;
                    }
                }
            }
        }
        walk::walk_assignment_expression(self, it);
    }

    fn visit_simple_assignment_target(&mut self, it: &SimpleAssignmentTarget<'a>) {
        let yes = !self.found && self.target_flags(it);
        self.found(yes);
        walk::walk_simple_assignment_target(self, it);
    }

    fn visit_unary_expression(&mut self, it: &UnaryExpression<'a>) {
        if it.operator == UnaryOperator::Delete {
            let yes = !self.found
                && it
                    .argument
                    .get_inner_expression()
                    .as_member_expression()
                    .is_some_and(|m| self.reaches(m.object()));
            self.found(yes);
        }
        walk::walk_unary_expression(self, it);
    }

    fn visit_call_expression(&mut self, it: &CallExpression<'a>) {
        let yes = !self.found && !self.collecting && self.call_flags(it);
        self.found(yes);
        walk::walk_call_expression(self, it);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_that_change_a_builtin_are_flagged() {
        for src in [
            "Array.prototype.last = function () { return this[this.length - 1]; };",
            "String.prototype.capitalize = function () { return this; }; return 'a'.capitalize();",
            "Array.prototype[0] = 1;",
            "Math.max = () => 0;",
            "delete Math.max;",
            "Array.prototype.x++;",
            "[Array.prototype.x] = [1];",
            "for (Object.prototype.k in {a: 1}) {}",
            "[].constructor.from = null;",
            "({}).__proto__.polluted = true;",
            "Object.getPrototypeOf([][Symbol.iterator]()).next = null;",
            "const P = Array.prototype; P.sum = function () {};",
            "let P; P = Object.prototype; P.x = 1;",
            "Object.defineProperty(Array.prototype, 'x', { value: 1 });",
            "Object.defineProperty(globalThis, 'y', { value: 1 });",
            "Reflect.set(Promise.prototype, 'then', null);",
            "Object.assign(Math, { tau: 6.28 });",
            "Object.setPrototypeOf(Array.prototype, null);",
            "Array.prototype.push(1);",
            "Array.prototype.__defineGetter__('x', () => 1);",
            "[].push.call(Array.prototype, 1);",
            "function patch(C) { C.prototype.x = 1; } patch(Array);",
            "globalThis.answer = 42;",
            "Array[Symbol.species] = undefined;",
            "(Array.prototype as any).last = 1;",
            "const p: any = Object.prototype; p.x = 1; return 1 as number;",
            "Array = null;",
            "this.Array = null;",
            "const d = Object.getOwnPropertyDescriptor(Array, Symbol.species); d.get.x = 1;",
            "return Object.isExtensible(Array.fromAsync);",
            "return [Object.isFrozen(Object.prototype), Object.isSealed(Math)];",
            "return Reflect.isExtensible([].constructor);",
            "return Object.getOwnPropertyDescriptor(Array.prototype, 'map').writable;",
            "return Object.getOwnPropertyDescriptors(Math);",
        ] {
            assert!(changes_builtins(src), "not flagged: {src}");
        }
    }

    #[test]
    fn everyday_scripts_share_the_context() {
        for src in [
            "return 1 + 1",
            "",
            "const r = await tools.read({ path: 'a' }); return JSON.parse(r).x;",
            "const o = { a: 1 }; const out = {}; for (const k of Object.keys(o)) out[k] = o[k]; return out;",
            "const a = []; a.push(1); a.sort(); return a.filter(Boolean).map(Number);",
            "const o = Object.assign({}, { a: 1 }); delete o.a; o.b = 2; return o;",
            "function F() {} F.prototype.x = 1; return new F().x;",
            "var G = function () {}; G.prototype.y = 2;",
            "class C { constructor() { this.n = 1; } } return new C();",
            "console.log('x'); context.seen = 1;",
            "const m = new Map(); m.set('a', 1); m.delete('a'); return Math.max(1, 2);",
            "Object.defineProperty(obj, 'x', { value: 1 }); const obj = {};",
            "const o = { k: 1 }; return Object.prototype.hasOwnProperty.call(o, 'k');",
            "return Array.prototype.slice.call(arguments);",
            "const e = new Error('x'); e.code = 1; throw e;",
            "let x: number = 1; x += 2; return x;",
            "this is not javascript (",
            "function F() { this.x = 1; } class K { m() { this.y = 2; } }",
            "const a = []; a.constructor = null; delete a.constructor; const o = {}; o.__proto__ = null;",
            "const d = Object.getOwnPropertyDescriptor({ a: 1 }, 'a'); d.value = 2;",
            "const r = await tools.echo({}); return [Object.isFrozen(r), Object.isFrozen(context), Object.isExtensible({})];",
        ] {
            assert!(!changes_builtins(src), "flagged: {src}");
        }
    }

    #[test]
    fn the_realm_follows_the_check() {
        assert_eq!(realm_for("Math.x = 1"), Realm::Private);
        assert_eq!(realm_for("return 1"), Realm::Shared);
    }

    #[test]
    fn the_cache_gives_the_checks_verdicts_and_keeps_only_parsed_scripts() {
        let cache = RealmCache::new(2);
        for _ in 0..2 {
            assert_eq!(cache.realm_for("Math.x = 1"), Realm::Private);
            assert_eq!(cache.realm_for("const a = [1]; return a"), Realm::Shared);
        }
        assert_eq!(cache.len(), 2);
        // Nothing to flag: not kept.
        assert_eq!(cache.realm_for("return 1"), Realm::Shared);
        assert_eq!(cache.len(), 2);
        // The oldest goes; its verdict is found again by parsing.
        assert_eq!(cache.realm_for("Array.prototype.y = 2"), Realm::Private);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.realm_for("Math.x = 1"), Realm::Private);
        // Same length, one character apart: never the other's verdict.
        assert_eq!(cache.realm_for("Math.x = 2"), Realm::Private);
        assert_eq!(cache.realm_for("math.x = 2"), Realm::Private);
        assert_eq!(cache.realm_for("let m = {}; m.x = 2"), Realm::Shared);
    }

    #[test]
    fn the_verdict_says_when_only_typescript_parses() {
        let only_ts = |src: &str| RealmCache::new(4).verdict(src).typescript_only;
        assert!(only_ts("const n: number = 1; return n"));
        assert!(only_ts("(Array.prototype as any).x = 1"));
        assert!(!only_ts("const n = 1; return n"));
        // Neither parses, or nothing was parsed: not known.
        assert!(!only_ts("const n: = ; return n"));
        assert!(!only_ts("return 1 as number"));
        let v = RealmCache::new(4).verdict("(Array.prototype as any).x = 1");
        assert_eq!(v.realm, Realm::Private);
    }

    #[test]
    fn deep_or_odd_input_is_a_quiet_no() {
        assert!(!changes_builtins(&"[".repeat(10_000)));
        assert!(!changes_builtins("\u{0}=\u{feff}("));
    }
}
