//! A small grammar of deterministic scripts for the differential target.
//!
//! [`program`] turns fuzzer bytes into a script every engine must run to
//! the same result: no clock, no randomness, no locale, no host-dependent
//! number formatting (no `toString(radix)` of fractions, no
//! `toPrecision`), no transcendental `Math` functions (their last bit is
//! the C library's). Loops are bounded (two levels, four turns each) and
//! `let` bindings only appear at the top level, so every variable a
//! statement names is in scope. The script returns all its variables, so
//! every intermediate value is compared.
//!
//! Generation never fails: when the bytes run out, `Unstructured` yields
//! its smallest choices, and the script ends.

use arbitrary::Unstructured;

const MAX_STATEMENTS: usize = 24;
const MAX_EXPR_DEPTH: usize = 3;
const MAX_LOOP_DEPTH: usize = 2;

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "10",
    "255",
    "0.5",
    "2.5",
    "-0",
    "0.1",
    "1e21",
    "1e-7",
    "2**53",
    "NaN",
    "Infinity",
    "-Infinity",
    "123456789",
    "0x1f",
];

const STRINGS: &[&str] = &[
    "''",
    "'a'",
    "'abc'",
    "'A b C'",
    "'42'",
    "' 7 '",
    "'1e3'",
    "'x,y,z'",
    "'é'",
    "'😀'",
    "'null'",
    "'true'",
    "'[1,2]'",
    "'{\"k\":1}'",
];

/// Calls whose `$` are replaced by generated expressions.
const CALLS: &[&str] = &[
    "String($)",
    "Number($)",
    "Boolean($)",
    "JSON.stringify($)",
    "JSON.stringify([$, $])",
    "JSON.parse(JSON.stringify({v: $})).v",
    "Math.floor($)",
    "Math.abs($)",
    "Math.max($, $)",
    "Math.min($, $)",
    "Math.sign($)",
    "Math.trunc($)",
    "Math.round($)",
    "Math.sqrt($)",
    "String($).length",
    "String($).toUpperCase()",
    "String($).split('').reverse().join('')",
    "String($).slice(1, 3)",
    "String($).indexOf('a')",
    "String($).padStart(4, '*')",
    "String($).includes('1')",
    "String($).charCodeAt(0)",
    "String($).trim()",
    "String($).replace(/[0-9]/g, '#')",
    "(String($).match(/\\d+/) ?? ['none'])[0]",
    "/a+b?/.test(String($))",
    "[$, $].join('-')",
    "[$, $, $].sort()",
    "[$, $].reverse()",
    "[$].concat([$])",
    "[$, $].indexOf($)",
    "[$, $].map(x => typeof x)",
    "[$, $, $].filter(x => x)",
    "[$, $, $].reduce((a, b) => a + b)",
    "[$, $].at(-1)",
    "Object.keys({a: $, b: $})",
    "Object.entries({k: $})",
    "Array.isArray($)",
    "Number.isInteger($)",
    "parseInt(String($))",
    "parseFloat(String($))",
    "Number($).toFixed(2)",
    "Math.trunc(Number($) % 1e6).toString(16)",
    "new Set([$, $, $]).size",
    "[...new Set([$, $])]",
    "new Map([['k', $]]).get('k')",
    "Object.assign({}, {a: $}, {b: $})",
    "((k) => Array.from({length: 3}, (_, i) => i + k))($)",
    "(await tools.echo({v: $})).v",
    "typeof $",
    "$ instanceof Array",
    "`${$}|${$}`",
    "($ ? $ : $)",
    "($)?.length",
    "($ ?? $)",
];

const BINARY: &[&str] = &[
    "+", "-", "*", "/", "%", "<", ">", "<=", ">=", "===", "!==", "==", "!=", "&", "|", "^", "<<",
    ">>", ">>>", "&&", "||",
];

const UNARY: &[&str] = &["-", "!", "~", "+", "typeof "];

/// Writes to built-ins (`$` is an expression): such a script runs in a
/// private realm, which must vanish with its run.
const PLANTS: &[&str] = &[
    "Array.prototype.planted = $;",
    "Object.prototype.planted = $;",
    "Math.planted = $;",
    "String.prototype.shout = ((x) => function () { return String(x); })($);",
    "Math.random = ((x) => () => x)($);",
    "JSON.stringify = (x) => 'patched ' + typeof x;",
    "Object.defineProperty(Number.prototype, 'planted', { value: $, configurable: true });",
];

/// Sources that close the function a script runs in (`$` is an
/// expression, and the only `$`): no engine may run any of such a script
/// ([`harness::core::body::Body`] refuses it before an engine sees it).
const BREAKOUTS: &[&str] = &[
    "}); globalThis.escaped = $; (async function () {",
    "}); let escaped = $; (async function () { //",
    "/* } */ }) /* ) */; const escaped = $; (async function () {",
    "`}`; }); let escaped = $; (async function () {",
    "/[})]/; }); var escaped = $; (async function () {",
    "x\n--> }); let escaped = $; (async function () {",
    "// \u{2028}}); let escaped = $; (async function () {",
    "}, async function () {",
    "}); let escaped = $; /*",
];

/// A deterministic script built from `u`.
pub fn program(u: &mut Unstructured<'_>) -> String {
    let mut g = Gen {
        u,
        vars: 0,
        loops: 0,
        statements: 0,
        out: String::new(),
    };
    g.out.push_str("let caught = [];\n");
    while g.statements < MAX_STATEMENTS && g.more() {
        g.statement(true);
    }
    // Now and then a breakout, last, so that the rest of the script is
    // what the same bytes always made.
    if g.more() && g.pick(8) == 0 {
        let b = BREAKOUTS[g.pick(BREAKOUTS.len())];
        let line = g.fill(b, 1);
        g.out.push_str(&line);
        g.out.push('\n');
    }
    g.out.push_str("return [caught");
    for i in 0..g.vars {
        g.out.push_str(&format!(", v{i}"));
    }
    g.out.push_str("];\n");
    g.out
}

struct Gen<'a, 'b> {
    u: &'b mut Unstructured<'a>,
    /// `v0 … v{vars-1}` are declared.
    vars: usize,
    /// Enclosing loops; `i0 … i{loops-1}` are in scope.
    loops: usize,
    statements: usize,
    out: String,
}

impl Gen<'_, '_> {
    fn more(&mut self) -> bool {
        // One chance in eight to stop after each statement.
        !self.u.is_empty() && self.u.int_in_range(0..=7u8).unwrap_or(0) != 0 || self.statements == 0
    }

    fn pick(&mut self, n: usize) -> usize {
        self.u.choose_index(n).unwrap_or(0)
    }

    fn statement(&mut self, top: bool) {
        self.statements += 1;
        if self.vars == 0 {
            return self.declare();
        }
        match self.pick(10) {
            0 if top => self.declare(),
            8 => {
                let plant = PLANTS[self.pick(PLANTS.len())];
                let line = self.fill(plant, 1);
                self.out.push_str(&line);
                self.out.push('\n');
            }
            0 | 1 => {
                let v = self.var();
                let e = self.expr(0);
                self.out.push_str(&format!("{v} = {e};\n"));
            }
            2 => {
                let v = self.var();
                let e = self.expr(0);
                self.out.push_str(&format!("{v} += {e};\n"));
            }
            3 => {
                let c = self.expr(0);
                self.out.push_str(&format!("if ({c}) {{\n"));
                self.block();
                self.out.push_str("} else {\n");
                self.block();
                self.out.push_str("}\n");
            }
            4 if self.loops < MAX_LOOP_DEPTH => {
                let i = self.loops;
                let n = self.pick(5);
                self.out
                    .push_str(&format!("for (let i{i} = 0; i{i} < {n}; i{i}++) {{\n"));
                self.loops += 1;
                self.block();
                self.loops -= 1;
                self.out.push_str("}\n");
            }
            5 => {
                self.out.push_str("try {\n");
                self.block();
                self.out.push_str(
                    "} catch (e) {\ncaught.push(e instanceof Error ? e.name : typeof e);\n}\n",
                );
            }
            6 => {
                let c = self.expr(1);
                let m = self.expr(1);
                let kind = ["Error", "TypeError", "RangeError"][self.pick(3)];
                self.out
                    .push_str(&format!("if ({c}) throw new {kind}(String({m}));\n"));
            }
            7 => {
                let e = self.expr(1);
                self.out.push_str(&format!("console.log({e});\n"));
            }
            _ => {
                let v = self.var();
                let e = self.expr(0);
                self.out
                    .push_str(&format!("{v} = (await tools.echo({{v: {e}}})).v;\n"));
            }
        }
    }

    /// `template` with each `$` placeholder replaced by a generated
    /// expression in parentheses; the `$` of a template literal's `${` is
    /// kept.
    fn fill(&mut self, template: &str, depth: usize) -> String {
        let mut s = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '$' && chars.peek() != Some(&'{') {
                // Parenthesised: `typeof $` with `2**53` must not read
                // as `typeof 2 ** 53`, a syntax error.
                s.push('(');
                s.push_str(&self.expr(depth));
                s.push(')');
            } else {
                s.push(c);
            }
        }
        s
    }

    fn declare(&mut self) {
        let e = self.expr(0);
        self.out.push_str(&format!("let v{} = {e};\n", self.vars));
        self.vars += 1;
    }

    fn block(&mut self) {
        let n = 1 + self.pick(3);
        for _ in 0..n {
            if self.statements >= MAX_STATEMENTS {
                break;
            }
            self.statement(false);
        }
    }

    fn var(&mut self) -> String {
        format!("v{}", self.pick(self.vars.max(1)))
    }

    fn leaf(&mut self) -> String {
        match self.pick(6) {
            0 | 1 if self.vars > 0 => self.var(),
            2 if self.loops > 0 => format!("i{}", self.pick(self.loops)),
            0 | 2 => NUMBERS[self.pick(NUMBERS.len())].to_owned(),
            1 | 3 => STRINGS[self.pick(STRINGS.len())].to_owned(),
            4 => ["true", "false", "null", "undefined", "[]", "{}"][self.pick(6)].to_owned(),
            _ => NUMBERS[self.pick(NUMBERS.len())].to_owned(),
        }
    }

    fn expr(&mut self, depth: usize) -> String {
        if depth >= MAX_EXPR_DEPTH || self.u.is_empty() {
            return self.leaf();
        }
        match self.pick(7) {
            0 => self.leaf(),
            1 => {
                let a = self.expr(depth + 1);
                let op = BINARY[self.pick(BINARY.len())];
                let b = self.expr(depth + 1);
                format!("({a} {op} {b})")
            }
            2 => {
                let op = UNARY[self.pick(UNARY.len())];
                let a = self.expr(depth + 1);
                format!("({op}({a}))")
            }
            3 => {
                let a = self.expr(depth + 1);
                let b = self.expr(depth + 1);
                format!("[{a}, {b}]")
            }
            4 => {
                let a = self.expr(depth + 1);
                let b = self.expr(depth + 1);
                format!("({{a: {a}, b: {b}}})")
            }
            _ => {
                let template = CALLS[self.pick(CALLS.len())];
                self.fill(template, depth + 1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_still_makes_a_script() {
        let s = program(&mut Unstructured::new(&[]));
        assert!(s.starts_with("let caught = [];\nlet v0 = "), "{s}");
        assert!(s.ends_with("return [caught, v0];\n"), "{s}");
    }

    #[test]
    fn every_script_parses_but_the_breakouts() {
        let mut rng = crate::Rng(0x9e37_79b9_7f4a_7c15);
        let mut breakouts = 0;
        for _ in 0..500 {
            let bytes = rng.fill(256);
            let s = program(&mut Unstructured::new(&bytes));
            if breaks_out(&s) {
                breakouts += 1;
                assert!(
                    harness::core::body::Body::parse(&s).is_err(),
                    "a breakout parsed:\n{s}"
                );
                continue;
            }
            if let Err(e) = harness::respond::prepare(s.as_bytes()) {
                panic!("{}: {}\n{s}", e.code, e.message);
            }
        }
        assert!(breakouts > 10, "only {breakouts} of 500 scripts break out");
    }

    fn breaks_out(s: &str) -> bool {
        BREAKOUTS
            .iter()
            .any(|b| s.contains(b.split('$').next().unwrap_or(b)))
    }

    /// Some scripts write to built-ins, so that the cross-run oracle
    /// meets private realms too; the realm check sees each of them.
    #[test]
    fn some_scripts_plant_in_built_ins_and_get_a_private_realm() {
        let mut rng = crate::Rng(0x2545_f491_4f6c_dd1d);
        let (mut planting, mut flagged) = (0, 0);
        for _ in 0..500 {
            let bytes = rng.fill(256);
            let s = program(&mut Unstructured::new(&bytes));
            if breaks_out(&s) {
                continue;
            }
            let plants = PLANTS
                .iter()
                .any(|p| s.contains(p.split('$').next().unwrap_or(p)));
            let private = harness::respond::realm::changes_builtins(&s);
            planting += usize::from(plants);
            flagged += usize::from(plants && private);
            assert!(private || !plants, "a plant the realm check missed:\n{s}");
        }
        assert!(planting > 25, "only {planting} of 500 scripts plant");
        assert_eq!(flagged, planting);
    }
}
