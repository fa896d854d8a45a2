//! TypeScript to JavaScript by blanking: every piece of type syntax is
//! replaced by spaces (line breaks kept), so the JavaScript the engine runs
//! has each of the script's tokens at the same line and column as in the
//! TypeScript the model wrote. Stacks, syntax errors at run time and the
//! line of a tool call that asks for approval then need no source map.
//!
//! This is the approach of Node's `--experimental-strip-types` and of
//! `ts-blank-space`, done on oxc's AST. TypeScript that has run-time
//! meaning (`enum`, a `namespace` with values, constructor parameter
//! properties, `import x = require()`) cannot be blanked:
//! [`blank_types`] returns `None` and the caller falls back to oxc's
//! transformer, whose output has other line numbers.

use oxc::ast::ast::Program;
use oxc::ast::ast::{
    Class, ClassElement, Declaration, FormalParameter, MethodDefinitionType,
    PropertyDefinitionType, Statement, TSAsExpression, TSNonNullExpression, TSSatisfiesExpression,
    TSThisParameter, TSTypeAnnotation, TSTypeAssertion, TSTypeParameterDeclaration,
    TSTypeParameterInstantiation, VariableDeclarator,
};
use oxc::ast_visit::{walk, Visit};
use oxc::span::{GetSpan, Span};

/// The program's source with its types blanked, or `None` when it uses
/// TypeScript that has run-time meaning. The caller must check that the
/// result parses as JavaScript (blanking a return type that sits on its
/// own line before `=>` does not).
pub(crate) fn blank_types(source: &str, program: &Program<'_>) -> Option<String> {
    let mut b = Blanker {
        src: source,
        ranges: Vec::new(),
        unsupported: false,
    };
    b.visit_program(program);
    if b.unsupported {
        return None;
    }
    let mut out = source.as_bytes().to_vec();
    for (start, end, semi) in b.ranges {
        let (start, end) = (start as usize, (end as usize).min(out.len()));
        for byte in &mut out[start.min(end)..end] {
            if *byte != b'\n' && *byte != b'\r' {
                *byte = b' ';
            }
        }
        // A removed statement leaves an empty statement behind, so that
        // the statements around it do not merge (`a\ninterface I {}\n(b)`).
        if semi && start < end {
            out[start] = b';';
        }
    }
    // Only ASCII bytes of whole characters were replaced by spaces.
    String::from_utf8(out).ok()
}

struct Blanker<'s> {
    src: &'s str,
    /// Byte ranges to blank, and whether a `;` must stay at their start.
    ranges: Vec<(u32, u32, bool)>,
    unsupported: bool,
}

impl Blanker<'_> {
    fn blank(&mut self, span: Span) {
        self.ranges.push((span.start, span.end, false));
    }

    fn blank_statement(&mut self, span: Span) {
        self.ranges.push((span.start, span.end, true));
    }

    /// Blanks each occurrence of `ch` in `[from, to)` (the `?` of an
    /// optional parameter, the `!` of a definite assignment).
    fn blank_char_between(&mut self, from: u32, to: u32, ch: u8) {
        let bytes = self.src.as_bytes();
        let to = (to as usize).min(bytes.len());
        let from = (from as usize).min(to);
        for (i, b) in bytes[from..to].iter().enumerate() {
            if *b == ch {
                let at = (from + i) as u32;
                self.ranges.push((at, at + 1, false));
            }
        }
    }

    /// Blanks TypeScript-only modifier words in `[from, to)`: the text in
    /// front of a class member's key, or of a class.
    fn blank_modifiers(&mut self, from: u32, to: u32) {
        const TS_ONLY: &[&str] = &[
            "public",
            "private",
            "protected",
            "readonly",
            "override",
            "abstract",
            "declare",
        ];
        let to = (to as usize).min(self.src.len());
        let from = (from as usize).min(to);
        let text = &self.src[from..to];
        let mut i = 0;
        let bytes = text.as_bytes();
        while i < bytes.len() {
            if bytes[i].is_ascii_alphabetic() {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                if TS_ONLY.contains(&&text[start..i]) {
                    let s = (from + start) as u32;
                    self.ranges.push((s, s + (i - start) as u32, false));
                }
            } else {
                i += 1;
            }
        }
    }
}

fn declaration_is_type_only(d: &Declaration<'_>) -> Option<bool> {
    Some(match d {
        Declaration::TSTypeAliasDeclaration(_) | Declaration::TSInterfaceDeclaration(_) => true,
        Declaration::VariableDeclaration(v) => v.declare,
        Declaration::FunctionDeclaration(f) => f.declare || f.body.is_none(),
        Declaration::ClassDeclaration(c) => c.declare,
        Declaration::TSEnumDeclaration(e) => {
            if !e.declare {
                return None;
            }
            true
        }
        Declaration::TSNamespaceDeclaration(n) => {
            if !n.declare {
                return None;
            }
            true
        }
        Declaration::TSExternalModuleDeclaration(m) => {
            if !m.declare {
                return None;
            }
            true
        }
        Declaration::TSGlobalDeclaration(_) => true,
        Declaration::TSImportEqualsDeclaration(_) => return None,
    })
}

impl<'a> Visit<'a> for Blanker<'_> {
    fn visit_statement(&mut self, it: &Statement<'a>) {
        if let Some(d) = it.as_declaration() {
            match declaration_is_type_only(d) {
                Some(true) => return self.blank_statement(it.span()),
                Some(false) => {}
                None => {
                    self.unsupported = true;
                    return;
                }
            }
        }
        walk::walk_statement(self, it);
    }

    fn visit_ts_type_annotation(&mut self, it: &TSTypeAnnotation<'a>) {
        self.blank(it.span);
    }

    fn visit_ts_type_parameter_declaration(&mut self, it: &TSTypeParameterDeclaration<'a>) {
        self.blank(it.span);
    }

    fn visit_ts_type_parameter_instantiation(&mut self, it: &TSTypeParameterInstantiation<'a>) {
        self.blank(it.span);
    }

    fn visit_ts_this_parameter(&mut self, it: &TSThisParameter<'a>) {
        // `this: T,` goes with its comma.
        let rest = &self.src[it.span.end as usize..];
        let comma = rest
            .find(|c: char| !c.is_whitespace())
            .filter(|&i| rest.as_bytes()[i] == b',')
            .map_or(0, |i| i as u32 + 1);
        self.blank(Span::new(it.span.start, it.span.end + comma));
    }

    fn visit_ts_as_expression(&mut self, it: &TSAsExpression<'a>) {
        self.blank(Span::new(it.expression.span().end, it.span.end));
        self.visit_expression(&it.expression);
    }

    fn visit_ts_satisfies_expression(&mut self, it: &TSSatisfiesExpression<'a>) {
        self.blank(Span::new(it.expression.span().end, it.span.end));
        self.visit_expression(&it.expression);
    }

    fn visit_ts_non_null_expression(&mut self, it: &TSNonNullExpression<'a>) {
        self.blank(Span::new(it.expression.span().end, it.span.end));
        self.visit_expression(&it.expression);
    }

    fn visit_ts_type_assertion(&mut self, it: &TSTypeAssertion<'a>) {
        self.blank(Span::new(it.span.start, it.expression.span().start));
        self.visit_expression(&it.expression);
    }

    fn visit_formal_parameter(&mut self, it: &FormalParameter<'a>) {
        if it.accessibility.is_some() || it.readonly || it.r#override {
            // A parameter property assigns `this.x`: run-time meaning.
            self.unsupported = true;
            return;
        }
        if it.optional {
            let to = it
                .type_annotation
                .as_ref()
                .map(|t| t.span.start)
                .or_else(|| it.initializer.as_ref().map(|i| i.span().start))
                .unwrap_or(it.span.end);
            self.blank_char_between(it.pattern.span().end, to, b'?');
        }
        walk::walk_formal_parameter(self, it);
    }

    fn visit_variable_declarator(&mut self, it: &VariableDeclarator<'a>) {
        if it.definite {
            let to = it
                .type_annotation
                .as_ref()
                .map_or(it.span.end, |t| t.span.start);
            self.blank_char_between(it.id.span().end, to, b'!');
        }
        walk::walk_variable_declarator(self, it);
    }

    fn visit_class(&mut self, it: &Class<'a>) {
        if it.r#abstract {
            let head = it
                .id
                .as_ref()
                .map_or(it.body.span.start, |id| id.span.start);
            self.blank_modifiers(it.span.start, head);
        }
        if let (Some(first), Some(last)) = (it.implements.first(), it.implements.last()) {
            let before = &self.src[it.span.start as usize..first.span.start as usize];
            if let Some(kw) = before.rfind("implements") {
                self.blank(Span::new(it.span.start + kw as u32, last.span.end));
            }
        }
        walk::walk_class(self, it);
    }

    fn visit_class_element(&mut self, it: &ClassElement<'a>) {
        match it {
            ClassElement::TSIndexSignature(s) => return self.blank_statement(s.span),
            ClassElement::MethodDefinition(m) => {
                if m.r#type == MethodDefinitionType::TSAbstractMethodDefinition
                    || m.value.body.is_none()
                {
                    // An abstract method or an overload signature.
                    return self.blank_statement(m.span);
                }
                self.blank_modifiers(m.span.start, m.key.span().start);
                if m.optional {
                    self.blank_char_between(m.key.span().end, m.value.params.span.start, b'?');
                }
            }
            ClassElement::PropertyDefinition(p) => {
                if p.declare || p.r#type == PropertyDefinitionType::TSAbstractPropertyDefinition {
                    return self.blank_statement(p.span);
                }
                self.blank_modifiers(p.span.start, p.key.span().start);
                let to = p
                    .type_annotation
                    .as_ref()
                    .map(|t| t.span.start)
                    .or_else(|| p.value.as_ref().map(|v| v.span().start))
                    .unwrap_or(p.span.end);
                if p.optional {
                    self.blank_char_between(p.key.span().end, to, b'?');
                }
                if p.definite {
                    self.blank_char_between(p.key.span().end, to, b'!');
                }
            }
            ClassElement::AccessorProperty(a) => {
                self.blank_modifiers(a.span.start, a.key.span().start);
            }
            ClassElement::StaticBlock(_) => {}
        }
        walk::walk_class_element(self, it);
    }
}

#[cfg(test)]
mod tests {
    use crate::detect::Language;
    use crate::prepare::{prepare_with, PrepareOptions};

    fn strip(ts: &str) -> String {
        let opts = PrepareOptions {
            language: Language::Typescript,
            ..PrepareOptions::default()
        };
        prepare_with(ts.as_bytes(), opts).expect("prepares").code
    }

    /// Blanking keeps every line where it was.
    fn same_lines(ts: &str) -> String {
        let js = strip(ts);
        assert_eq!(js.len(), ts.len(), "blanked, not rewritten:\n{js}");
        assert_eq!(js.lines().count(), ts.lines().count());
        js
    }

    #[test]
    fn annotations_generics_and_assertions_become_spaces() {
        let js = same_lines(
            "const xs: number[] = [1, 2, 3];\nfunction f<T>(a: T, b?: string): T { return a }\nconst y = (xs as any) as number[];\nconst z = xs!.length;\nreturn f<number>(<number>z, 'b') satisfies number",
        );
        assert_eq!(
            js,
            "const xs           = [1, 2, 3];\nfunction f   (a   , b         )    { return a }\nconst y = (xs       )            ;\nconst z = xs .length;\nreturn f        (        z, 'b')                 "
        );
    }

    #[test]
    fn type_only_statements_leave_an_empty_statement() {
        let js = same_lines("let a = 1\ninterface I { x: number }\ntype T = string\n(a)\nreturn a");
        assert!(js.starts_with("let a = 1\n;"), "{js}");
        assert!(!js.contains("interface") && !js.contains("type "), "{js}");
    }

    #[test]
    fn class_modifiers_and_members_are_blanked() {
        let js = same_lines(
            "abstract class A implements B, C {\n  private readonly x: number = 1;\n  declare y: string;\n  z?: number;\n  [k: string]: any;\n  public static m(this: A, a: number): void {}\n  abstract n(): void;\n}\nreturn 1",
        );
        for gone in [
            "abstract",
            "implements",
            "private",
            "readonly",
            "declare",
            "public",
            "?",
            "[k",
        ] {
            assert!(!js.contains(gone), "{gone} left in:\n{js}");
        }
        assert!(
            js.contains("static m(") && js.contains(" x ") && js.contains("= 1;"),
            "{js}"
        );
    }

    #[test]
    fn runtime_typescript_falls_back_to_the_transformer() {
        let js = strip("enum Color { Red, Green }\nreturn Color.Green");
        assert!(js.contains("Color") && !js.contains("enum"), "{js}");
        let js = strip("class P { constructor(private x: number) {} }\nreturn new P(1)");
        assert!(js.contains("this.x = x"), "{js}");
    }
}
