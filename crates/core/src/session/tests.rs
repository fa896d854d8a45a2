use crate::body::Body;
use crate::error::ErrorCode;

/// The rewritten source inside a session body.
fn rewritten(source: &str) -> String {
    let body = Body::parse_session(source).unwrap_or_else(|e| panic!("{source:?}: {e:?}"));
    assert!(body.in_session());
    body.source().to_owned()
}

fn head(source: &str) -> String {
    let body = Body::parse_session(source).unwrap();
    let wrapped = body.wrapped();
    wrapped[..wrapped.find('\n').unwrap()].to_owned()
}

#[test]
fn declarations_become_calls_of_the_scope() {
    assert_eq!(rewritten("let x = 1"), "__harness_session.d(1,\"x\",1);");
    assert_eq!(
        rewritten("const a = 1, b = f(a);"),
        "__harness_session.d(2,\"a\",1), __harness_session.d(2,\"b\",f(a));"
    );
    assert_eq!(
        rewritten("var v; let w;"),
        "void 0; __harness_session.d(1,\"w\");"
    );
    assert_eq!(
        rewritten("const {a, b: [c]} = o"),
        "__harness_session.p(2,[\"a\",\"c\"],({a, b: [c]}) => [a,c],o);"
    );
    assert_eq!(
        rewritten("class C {} return C"),
        "__harness_session.d(1,\"C\",class C {}); return C"
    );
    assert_eq!(rewritten("function f() {}"), "function f() {}");
    assert!(head("function f() {} let x").contains("__harness_session.f(\"f\", f);"));
    assert!(head("var v; let w; const k = 1; class C {}")
        .contains("enter([0,\"v\",1,\"w\",2,\"k\",1,\"C\"])"));
}

#[test]
fn only_the_top_level_is_rewritten() {
    for s in [
        "{ let x = 1 }",
        "for (let i = 0; i < 3; i++) {}",
        "if (a) { var v = 1 }",
        "const f = () => { const inner = 1; return inner }",
        "return 1",
    ] {
        let out = rewritten(s);
        assert_eq!(
            out.matches("__harness_session").count(),
            s.starts_with("const f") as usize,
            "{s:?} -> {out:?}"
        );
    }
}

#[test]
fn lines_stay_where_they_were() {
    let s = "const a =\n  1;\nconst {\n  x,\n  y\n} = o\nreturn a";
    let out = rewritten(s);
    assert_eq!(out.lines().count(), s.lines().count(), "{out}");
    assert_eq!(out.lines().last(), Some("return a"));
}

#[test]
fn a_declaration_without_its_semicolon_does_not_join_the_next_line() {
    // `let x` then `(f)()` on the next line: two statements, as before.
    let out = rewritten("let x\n(f)()");
    assert_eq!(out, "__harness_session.d(1,\"x\");\n(f)()");
}

#[test]
fn the_scope_name_is_refused_and_breakouts_stay_refused() {
    let e = Body::parse_session("return __harness_session").unwrap_err();
    assert_eq!(e.code, ErrorCode::ScriptSyntaxError);
    let e = Body::parse_session("}); (async function () {").unwrap_err();
    assert_eq!(e.code, ErrorCode::ScriptSyntaxError);
}

#[test]
fn names_are_written_as_ascii_strings() {
    assert_eq!(super::js_string("é\"\\"), "\"\\u00e9\\\"\\\\\"");
    assert!(head("let é = 1").contains("\"\\u00e9\""));
}

#[test]
fn a_worker_reads_a_session_body_back() {
    let body = Body::parse_session("let x = 1\nreturn x").unwrap();
    let back = Body::trusted(body.wrapped().to_owned());
    assert_eq!(back.source(), body.source());
    assert!(back.in_session());
    let plain = Body::parse("return 1").unwrap();
    assert_eq!(
        Body::trusted(plain.wrapped().to_owned()).source(),
        "return 1"
    );
}
