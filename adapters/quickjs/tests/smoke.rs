use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};
use harness_quickjs::QuickJs;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke() {
    let e = QuickJs::new();
    for src in [
        "return 1+1",
        "return {a:[1,'x',null,true]}",
        "return",
        "throw new TypeError('bad')",
        "return x +",
        "while(true){}",
        "function f(){return f()} return f()",
        "let a=[]; while(true) a.push('x'.repeat(1000))",
        "return eval('1')",
        "return (function(){}).constructor('return 1')()",
        "console.log('hi', {a:1}); return typeof tools",
        "return Object.keys(context)",
        "return 1n",
        "const a={}; a.a=a; return a",
        "const e = new Error('x'); e.name='MyErr'; return e.name",
        "await tools.nope()",
        "await new Promise(()=>{})",
        "context.x = 1",
        "return typeof process + typeof require + typeof SharedArrayBuffer",
        "Object.prototype.polluted = 1; return 1",
        "return ({}).polluted",
    ] {
        let mut r = ExecutionRequest::new(src);
        r.limits.timeout_ms = 500;
        let t = std::time::Instant::now();
        let rep = e.execute(r).await;
        println!(
            "{src:60} -> ok={} value={:?} err={:?} console={:?} mem={:?} {:?}",
            rep.ok,
            rep.value,
            rep.error
                .as_ref()
                .map(|e| (e.code, &e.message, &e.stack, e.location)),
            rep.console,
            rep.metrics.memory_used_bytes,
            t.elapsed()
        );
    }
}
