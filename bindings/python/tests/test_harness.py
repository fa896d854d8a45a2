"""The harness from Python: runs, tools (sync and async), approvals,
cancellation, concurrency, errors and memory."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import json
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import pytest

import script_harness as h
from script_harness import ErrorCode, Harness, Report, Tool, ToolContext, tool


def test_return_value_and_report_fields() -> None:
    with Harness() as harness:
        report = harness.run("console.log('hi'); return 1 + 1")
    assert isinstance(report, Report)
    assert report.ok and report.value == 2 and report.error is None
    assert report.console[0].level == "log" and report.console[0].text == "hi"
    assert report.metrics.engine == "quickjs" and report.metrics.duration_ms > 0
    assert report.script_id.startswith("scr_")
    assert json.loads(report.to_json())["value"] == 2
    assert report.to_dict()["console"] == [{"level": "log", "text": "hi"}]
    with pytest.raises(Exception):
        report.ok = False  # type: ignore[misc]


def test_a_report_built_natively_equals_the_same_report_read_from_json() -> None:
    import copy
    import dataclasses
    import pickle

    scripts = [
        "return 1",
        "return undefined",
        "console.log('x'); console.warn('y'); return {a: [1, 2.5, 's', null, true], b: {}}",
        "return await tools.echo({x: 1})",
        "try { await tools.nope({}) } catch (e) {} return 2",
        "return 1e20",
        "return [9007199254740993, -0, 0.1, 'é\\u0000']",
        "throw new Error('boom')",
        "return () => 1",
        "console.progress('half', {n: 1}); return 3",
    ]
    with Harness(tools=[Tool("echo", "", None, lambda a: a)]) as harness:
        for script in scripts:
            report = harness.run(script)
            # Either `raw` is there, or it is made from the native report
            # when first read; either way it is what the JSON report has.
            assert ("raw" in report.__dict__) != ("_native" in report.__dict__), script
            raw = report.raw
            assert json.loads(json.dumps(raw)) == raw
            again = Report.from_json(json.dumps(raw))
            assert again == report, script
            assert again.raw == report.raw == report.to_dict(), script
            assert type(again.value) is type(report.value), script
            # `raw` shares the report's value, as `from_dict`'s does.
            if "value" in raw:
                assert raw["value"] is report.value and again.raw["value"] is again.value, script
            for copied in (pickle.loads(pickle.dumps(report)), copy.deepcopy(report)):
                assert copied == report and copied.raw == raw, script
                assert "_native" not in copied.__dict__
            assert dataclasses.asdict(report)["raw"] == raw
        fresh = harness.run("return 4")
        # Pickled before `raw` was ever read: it is made for the pickle.
        assert pickle.loads(pickle.dumps(fresh)).raw["value"] == 4
        with pytest.raises(AttributeError):
            fresh.nope  # type: ignore[attr-defined]


def test_script_errors_are_in_the_report_with_codes() -> None:
    harness = Harness(limits={"timeout_ms": 300})
    r = harness.run("throw new TypeError('boom')")
    assert not r.ok and r.error is not None
    assert r.error.code == ErrorCode.ScriptRuntimeError and r.error.code == "ScriptRuntimeError"
    assert "boom" in r.error.message and r.error.name == "TypeError"
    assert harness.run("return (").error.code == ErrorCode.ScriptSyntaxError  # type: ignore[union-attr]
    t = harness.run("while (true) {}")
    assert t.error is not None and t.error.code == ErrorCode.ScriptTimeoutError
    short = harness.run("while (true) {}", timeout_ms=50)
    assert short.error is not None and short.error.code == ErrorCode.ScriptTimeoutError
    assert harness.run("return tools.nope({})").error.code == ErrorCode.ToolNotFoundError  # type: ignore[union-attr]
    assert {c.value for c in ErrorCode} >= {"ToolExecutionError", "ApprovalDeniedError"}


def test_check_typescript_context_language() -> None:
    @tool
    def lookup(city: str, days: int = 1) -> Dict[str, Any]:
        """Looks up the weather.

        Args:
            city: The city's name.
            days: How many days ahead.
        """
        return {"city": city, "days": days}

    harness = Harness(tools=[lookup])
    assert harness.check("return 1") is None
    err = harness.check("return (")
    assert err is not None and err.code == ErrorCode.ScriptSyntaxError
    ts = harness.typescript()
    assert "lookup" in ts and "city: string" in ts and "days?: number" in ts
    assert "The city's name." in ts
    r = harness.run("return context.sessionId", context={"sessionId": "s-1"})
    assert r.value == "s-1"
    r = harness.run("const x: number = 41; return x + 1", language="ts")
    assert r.value == 42
    assert harness.tool_names == ["lookup"]


def test_sync_and_async_python_tools() -> None:
    seen: List[str] = []

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        seen.append(threading.current_thread().name)
        return a + b

    @tool
    async def slow_echo(text: str, ctx: ToolContext) -> Dict[str, Any]:
        """Echoes after a while."""
        await asyncio.sleep(0.01)
        return {"text": text, "tool": ctx.tool}

    plain = Tool("raw", "a dict in, a dict out", {"type": "object"}, lambda args: {"got": args})
    harness = Harness(tools=[add, slow_echo, plain])
    r = harness.run(
        "const [a, b, c] = await Promise.all([tools.add({a: 2, b: 3}), tools.slow_echo({text: 'x'}), tools.raw({k: [1]})]);"
        "return {a, b, c}"
    )
    assert r.ok, r.error
    assert r.value == {"a": 5, "b": {"text": "x", "tool": "slow_echo"}, "c": {"got": {"k": [1]}}}
    assert [t.status for t in r.tool_calls] == ["ok", "ok", "ok"]
    assert add(1, 2) == 3  # the decorated function is still callable
    bad = harness.run("return await tools.add({a: 'x', b: 1})")
    assert bad.error is not None and bad.error.code == ErrorCode.ToolValidationError


def test_calls_one_after_another_relayed_between_pooled_threads() -> None:
    """A pooled thread whose call was answered at once makes the script's
    next call itself when it comes within microseconds: sync tools that
    return or raise, an async tool between them, and pauses longer than
    that wait all give the answers in order."""
    counter = {"n": 0}

    @tool
    def nxt() -> int:
        """Counts."""
        counter["n"] += 1
        return counter["n"]

    @tool
    def boom() -> None:
        """Fails."""
        raise RuntimeError("no")

    @tool
    async def later() -> str:
        """Answers later."""
        await asyncio.sleep(0.001)
        return "later"

    harness = Harness(tools=[nxt, boom, later], limits={"max_tool_calls": 500})
    r = harness.run(
        "const out = [];"
        "for (let i = 0; i < 60; i++) {"
        "  out.push(await tools.nxt());"
        "  try { await tools.boom() } catch (e) { out.push(e.code) }"
        "  if (i % 20 === 0) { out.push(await tools.later()); const t = Date.now(); while (Date.now() - t < 2) {} }"
        "}"
        "return out"
    )
    assert r.ok, r.error
    want: List[Any] = []
    for i in range(60):
        want += [i + 1, "ToolExecutionError"]
        if i % 20 == 0:
            want.append("later")
    assert r.value == want
    assert len(r.tool_calls) == 123


def test_pydantic_model_argument() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Query(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        term: str
        limit: int = 3

    @tool
    def search(q: Query) -> List[str]:
        """Searches."""
        return [q.term] * q.limit

    assert search.schema["properties"]["term"]["type"] == "string"
    r = Harness(tools=[search]).run("return tools.search({term: 'a', limit: 2})")
    assert r.value == ["a", "a"], r.error


def test_a_raising_tool_is_a_tool_execution_error() -> None:
    @tool
    def broken() -> None:
        """Fails."""
        raise ValueError("the disk is on fire")

    @tool
    async def broken_async() -> None:
        """Fails later."""
        await asyncio.sleep(0)
        raise KeyError("nope")

    harness = Harness(tools=[broken, broken_async])
    r = harness.run("return await tools.broken()")
    assert r.error is not None and r.error.code == ErrorCode.ToolExecutionError
    assert "the disk is on fire" in r.error.message and "ValueError" in r.error.message
    caught = harness.run(
        "try { await tools.broken_async() } catch (e) { return [e.code, e.message] }"
    )
    assert caught.value[0] == "ToolExecutionError" and "nope" in caught.value[1]

    unserialisable = Tool("obj", "", None, lambda args: object())
    r = Harness(tools=[unserialisable]).run("return await tools.obj({})")
    assert r.error is not None and r.error.code == ErrorCode.ToolExecutionError
    assert "JSON" in r.error.message


def test_approvals_sync_async_and_denied_without_callback() -> None:
    asked: List[h.ApprovalRequest] = []

    @tool(needs_approval=True)
    def delete(path: str) -> str:
        """Deletes a file."""
        return f"deleted {path}"

    @tool(needs_approval=lambda args: args["amount"] > 100)
    def pay(amount: int) -> str:
        """Pays."""
        return f"paid {amount}"

    def approve(req: h.ApprovalRequest) -> bool:
        asked.append(req)
        return bool(req.args.get("path") != "/etc")

    harness = Harness(tools=[delete, pay], approvals=approve)
    r = harness.run("return await tools.delete({path: 'a.txt'})")
    assert r.value == "deleted a.txt", r.error
    assert asked[0].tool == "delete" and asked[0].args == {"path": "a.txt"} and asked[0].line == 1
    denied = harness.run("return await tools.delete({path: '/etc'})")
    assert denied.error is not None and denied.error.code == ErrorCode.ApprovalDeniedError
    before = len(asked)
    small = harness.run("return await tools.pay({amount: 5})")
    assert small.value == "paid 5" and len(asked) == before  # the rule said no approval needed
    big = harness.run("return await tools.pay({amount: 500})")
    assert big.value == "paid 500" and asked[-1].tool == "pay"

    async def approve_async(req: h.ApprovalRequest) -> bool:
        await asyncio.sleep(0.001)
        return False

    r = Harness(tools=[delete], approvals=approve_async).run("return await tools.delete({path: 'x'})")
    assert r.error is not None and r.error.code == ErrorCode.ApprovalDeniedError
    r = Harness(tools=[delete]).run("return await tools.delete({path: 'x'})")
    assert r.error is not None and r.error.code == ErrorCode.ApprovalDeniedError


def test_async_run_and_tools_on_the_callers_loop() -> None:
    loops: List[Any] = []

    @tool
    async def where() -> str:
        """Notes its loop."""
        loops.append(asyncio.get_running_loop())
        return "here"

    async def main() -> None:
        harness = Harness(tools=[where])
        r = await harness.run_async("return await tools.where()")
        assert r.value == "here", r.error
        assert loops == [asyncio.get_running_loop()]
        items = await harness.respond_async(
            "<tool-calls>\nreturn await tools.where()\n</tool-calls>", "items"
        )
        assert "here" in json.dumps(items) and loops[-1] is asyncio.get_running_loop()
        assert len(loops) == 2

    asyncio.run(main())


def test_cancelling_the_asyncio_task_cancels_the_run() -> None:
    cancelled_seen = threading.Event()

    @tool
    async def wait_forever(ctx: ToolContext) -> None:
        """Never answers."""
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled_seen.set()
            raise

    async def main() -> None:
        harness = Harness(tools=[wait_forever], limits={"timeout_ms": 30_000})
        task = asyncio.create_task(
            harness.run_async("console.log('started'); await tools.wait_forever(); return 1")
        )
        await asyncio.sleep(0.2)
        started = time.perf_counter()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.perf_counter() - started < 5
        # The run ended and the tool's coroutine was cancelled too.
        for _ in range(100):
            if cancelled_seen.is_set():
                break
            await asyncio.sleep(0.01)
        assert cancelled_seen.is_set()
        # The harness still works.
        assert (await harness.run_async("return 3")).value == 3

    asyncio.run(main())


def test_sync_tool_sees_cancellation_flag() -> None:
    flags: List[bool] = []

    def slow(args: Dict[str, Any], ctx: ToolContext) -> str:
        for _ in range(100):
            if ctx.cancelled:
                break
            time.sleep(0.01)
        flags.append(ctx.cancelled)
        return "late"

    harness = Harness(tools=[Tool("slow", "", None, slow)])
    r = harness.run("return await tools.slow({})", timeout_ms=150)
    assert r.error is not None and r.error.code == ErrorCode.ScriptTimeoutError
    for _ in range(200):
        if flags:
            break
        time.sleep(0.01)
    assert flags == [True]


def test_ctrl_c_cancels_a_run_and_raises_keyboard_interrupt() -> None:
    # In a child interpreter: the signal goes to the whole process.
    child = textwrap.dedent(
        """
        import os, signal, threading, time
        from script_harness import Harness, Tool
        h = Harness()
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        started = time.monotonic()
        try:
            h.run("while (true) {}", timeout_ms=20_000)
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted after", round(time.monotonic() - started, 1))
        print("next run", h.run("return 7").value)
        # Ctrl-C while this thread makes the run's tool call itself.
        def nap(args):
            time.sleep(5)
            return 1
        t = Harness(tools=[Tool("nap", "", None, nap)])
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        started = time.monotonic()
        try:
            r = t.run("return await tools.nap({})", timeout_ms=20_000)
            print("not interrupted", r.value, r.error)
        except KeyboardInterrupt:
            print("tool interrupted after", round(time.monotonic() - started, 1))
        print("next tool run", t.run("return 8").value)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0].startswith("interrupted after"), out.stdout
    assert float(lines[0].split()[-1]) < 5, out.stdout
    assert lines[1] == "next run 7", out.stdout
    assert lines[2].startswith("tool interrupted after"), out.stdout
    assert float(lines[2].split()[-1]) < 5, out.stdout
    assert lines[3] == "next tool run 8", out.stdout


def test_a_runaway_script_holds_neither_the_gil_nor_other_threads() -> None:
    harness = Harness()
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    try:
        started = time.perf_counter()
        r = harness.run("while (true) {}", timeout_ms=300)
        elapsed = time.perf_counter() - started
    finally:
        stop.set()
        t.join()
    assert r.error is not None and r.error.code == ErrorCode.ScriptTimeoutError
    assert 0.25 < elapsed < 5, elapsed
    # About one tick a millisecond: the thread ran while the script did.
    assert ticks > 50, ticks


def test_two_hundred_concurrent_runs_from_threads() -> None:
    def add(args: Dict[str, Any]) -> int:
        time.sleep(0.005)  # so that the runs overlap
        return int(args["a"]) + int(args["b"])

    harness = Harness(tools=[Tool("add", "", None, add)])
    with concurrent.futures.ThreadPoolExecutor(max_workers=200) as pool:
        reports = list(
            pool.map(lambda i: harness.run(f"return await tools.add({{a: {i}, b: 1}})"), range(200))
        )
    assert [r.value for r in reports] == [i + 1 for i in range(200)]


def test_hundred_concurrent_run_async_calls() -> None:
    @tool
    async def double(n: int) -> int:
        """Doubles."""
        await asyncio.sleep(0.005)
        return n * 2

    async def main() -> None:
        harness = Harness(tools=[double])
        reports = await asyncio.gather(
            *(harness.run_async(f"return await tools.double({{n: {i}}})") for i in range(100))
        )
        assert [r.value for r in reports] == [i * 2 for i in range(100)]

    asyncio.run(main())


def test_many_concurrent_calls_from_one_script_respect_the_limit() -> None:
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    @tool
    async def work(i: int) -> int:
        """Works."""
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        with lock:
            in_flight -= 1
        return i

    harness = Harness(tools=[work], limits={"max_concurrent_tool_calls": 4, "max_tool_calls": 100})
    r = harness.run(
        "const xs = await Promise.all(Array.from({length: 40}, (_, i) => tools.work({i})));"
        "return xs.reduce((a, b) => a + b, 0)"
    )
    assert r.value == sum(range(40)), r.error
    assert 1 <= peak <= 4


def test_respond_to_openai_responses_items() -> None:
    @tool
    def weather(city: str) -> Dict[str, Any]:
        """The weather."""
        return {"city": city, "temp": 21}

    harness = Harness(tools=[weather])
    text = (
        "Let me check.\n<tool-calls>\nconst w = await tools.weather({city: 'Oslo'});\n"
        "console.log(w.temp);\nreturn w\n</tool-calls>"
    )
    items = harness.respond(text, format="openai-responses")
    outputs = [json.loads(i["output"]) for i in items if i.get("type") == "function_call_output"]
    assert len(outputs) == 1, items
    assert outputs[0]["output"] == {"city": "Oslo", "temp": 21}, outputs
    with pytest.raises(ValueError):
        harness.respond(text, format="nope")


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown limit"):
        Harness(limits={"timeout_msec": 5})
    with pytest.raises(ValueError):
        Harness(engine="spidermonkey")
    with pytest.raises(ValueError, match="two tools"):
        Harness(tools=[Tool("a", "", None, lambda a: 1), Tool("a", "", None, lambda a: 2)])
    harness = Harness()
    harness.close()
    with pytest.raises(RuntimeError, match="closed"):
        harness.run("return 1")


def test_keep_warm_ms_runs_a_few_ms_apart_and_is_checked() -> None:
    import time

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    with Harness(tools=[add], keep_warm_ms=20) as harness:
        for i in range(5):
            r = harness.run(f"return await tools.add({{a: {i}, b: 1}})")
            assert r.value == i + 1, r.error
            time.sleep(0.003)
    for bad in (-1, 1.5, "20"):
        with pytest.raises(ValueError, match="keep_warm_ms"):
            Harness(keep_warm_ms=bad)  # type: ignore[arg-type]


def test_keep_warm_awake_runs_a_few_ms_apart_and_is_checked() -> None:
    import time

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    with Harness(tools=[add], keep_warm_ms=20, keep_warm_awake=True) as harness:
        for i in range(5):
            r = harness.run(f"return await tools.add({{a: {i}, b: 1}})")
            assert r.value == i + 1, r.error
            time.sleep(0.003)
    for bad in (1, "true"):
        with pytest.raises(ValueError, match="keep_warm_awake"):
            Harness(keep_warm_ms=20, keep_warm_awake=bad)  # type: ignore[arg-type]


def test_anticipate_steady_runs_answer_and_is_checked() -> None:
    import time

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    for anticipate in (None, False):
        with Harness(tools=[add], anticipate=anticipate) as harness:
            for i in range(12):
                r = harness.run(f"return await tools.add({{a: {i}, b: 2}})")
                assert r.value == i + 2, r.error
                time.sleep(0.005)
    for bad in (1, "false"):
        with pytest.raises(ValueError, match="anticipate"):
            Harness(anticipate=bad)  # type: ignore[arg-type]


def test_allow_and_modes() -> None:
    a = Tool("a", "", None, lambda args: "a")
    b = Tool("b", "", None, lambda args: "b")
    harness = Harness(tools=[a, b], allow=["a"])
    hidden = harness.run("return await tools.b({})")
    assert hidden.error is not None and hidden.error.code == ErrorCode.ToolNotFoundError
    assert harness.run("return await tools.a({})").value == "a"
    dry = Harness(tools=[a], mode="dry-run").run("return await tools.a({})")
    assert dry.value == {"__dryRun": True, "tool": "a", "args": {}}, dry.error


def test_wasi_engine_from_the_package_guest() -> None:
    if "wasi" not in h.engines():
        pytest.skip("the wasi engine is not compiled in")
    r = Harness(engine="wasi").run("return 6 * 7")
    assert r.value == 42 and r.metrics.engine == "wasi", r.error


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_no_leak_over_two_thousand_runs() -> None:
    @tool
    def inc(n: int) -> int:
        """Adds one."""
        return n + 1

    harness = Harness(tools=[inc])
    for i in range(300):
        harness.run("return await tools.inc({n: 1})")
    gc.collect()
    before = _rss_kib()
    for i in range(2000):
        r = harness.run("console.log('x'); return await tools.inc({n: %d})" % i)
        assert r.value == i + 1
    gc.collect()
    grown_mib = (_rss_kib() - before) / 1024
    print(f"RSS growth over 2,000 runs: {grown_mib:.1f} MiB")
    assert grown_mib < 24, f"RSS grew by {grown_mib:.1f} MiB over 2,000 runs"


def test_process_isolation_with_python_tools() -> None:
    import os
    from pathlib import Path

    worker = Path(__file__).resolve().parents[3] / "target" / "debug" / "harness"
    if not worker.exists():
        pytest.skip(f"SKIPPED: the harness CLI {worker} is not built (cargo build -p harness-cli)")
    os.environ["HARNESS_WORKER_BIN"] = str(worker)

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        return a + b

    with Harness(isolation="process", tools=[add], limits={"timeout_ms": 2000}) as harness:
        r = harness.run("return await tools.add({a: 20, b: 22})")
        assert r.value == 42, r.error
        t = harness.run("while (true) {}", timeout_ms=300)
        assert t.error is not None and t.error.code == ErrorCode.ScriptTimeoutError
        assert harness.run("return 1 + 1").value == 2


def test_sessions_keep_state_for_their_own_runs_only() -> None:
    with Harness() as harness:
        with harness.open_session() as a:
            assert len(a.id) == 32
            assert a.run("const data = [1, 2, 3]; return data.length").value == 3
            assert a.run("return data.map(x => x * 2)").value == [2, 4, 6]
            b = harness.open_session()
            assert b.run("return typeof data").value == "undefined"
            assert harness.run("return typeof data").value == "undefined"
            assert b.close() and not b.close()
            r = b.run("return 1")
            assert r.error is not None and r.error.code == ErrorCode.SessionClosedError
        r = harness.run("return 1", session=a.id)
        assert r.error is not None and r.error.code == ErrorCode.SessionClosedError


def test_a_session_from_asyncio_keeps_state_too() -> None:
    async def main() -> List[Any]:
        with Harness() as harness:
            s = harness.open_session()
            await s.run_async("let n = 40")
            first = (await s.run_async("n += 1; return n")).value
            second = (await s.run_async("return n + 1")).value
            s.close()
            return [first, second]

    assert asyncio.run(main()) == [41, 42]


def test_a_run_suspends_on_an_approval_and_a_deferred_tool_and_resumes() -> None:
    if "wasi" not in h.engines():
        pytest.skip("the wasi engine is not compiled in")
    sent: List[Any] = []

    @tool(needs_approval=True)
    def send(to: str) -> Dict[str, Any]:
        """Sends."""
        sent.append(to)
        return {"sent": to}

    key = "7f" * 32
    def make() -> Harness:
        return Harness(
            engine="wasi",
            tools=[send, h.DeferredTool("ask", "asks a person")],
            approvals=lambda req: h.SUSPEND,
            suspend={"keys": [key]},
        )

    a = make()
    r = a.run("const who = await tools.ask({q: 'to?'}); return await tools.send({to: who})")
    assert not r.ok and r.error is None and r.suspension is not None, r
    assert r.suspension["pending"][0]["kind"] == "deferred"
    # Another harness with the key (another process, another machine).
    b = make()
    r2 = b.resume(r.suspension["continuation"], answers={1: "ada"})
    assert r2.suspension is not None and r2.suspension["pending"][0]["tool"] == "send"
    assert sent == []
    done = a.resume(r2.suspension["continuation"], approve=True)
    assert done.ok and done.value == {"sent": "ada"}, done.error
    assert sent == ["ada"]
    twice = a.resume(r2.suspension["continuation"], approve=True)
    assert twice.error is not None and twice.error.code == ErrorCode.ContinuationInvalidError
    # A changed continuation, and answers that do not fit.
    r = a.run("return await tools.send({to: 'x'})")
    assert r.suspension is not None
    c = r.suspension["continuation"]
    bad = c[:40] + ("A" if c[40] != "A" else "B") + c[41:]
    for refused in (a.resume(bad, approve=True), a.resume(c, answers={1: 2})):
        assert refused.error is not None and refused.error.code == ErrorCode.ContinuationInvalidError
    assert a.resume(c, approve=False).value is None
    # Other engines refuse such a harness's runs.
    q = Harness(suspend={"keys": [key]}).run("return 1")
    assert q.error is not None and q.error.code == ErrorCode.UnsupportedError
