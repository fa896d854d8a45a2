"""Per-run overhead of `Harness.run` from Python, and of a Python tool
call, beside the same runs from Rust (`examples/baseline.rs`), and beside
the Python peers where they are installed (`pip install zapcode
pydantic-monty`): Zapcode (a TypeScript-subset interpreter; host calls by
snapshot and resume) and pydantic-monty (a Python-subset interpreter; a
checked-out session's `feed_run`), each in its fastest configuration.

    python bindings/python/benches/bench.py          # the Python side
    cargo run --release -p script-harness-python --example baseline

The trivial run is also split, in rounds alternating with the same run
made from Rust in this process (`NativeHarness.bench_rust`).

Build the package the same way as the baseline (`pip install
./bindings/python` is a release build) before comparing.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import script_harness as sh

N = int(os.environ.get("BENCH_N", "2000"))


def median_us(f: Callable[[], Any], n: int = N) -> float:
    for _ in range(200):
        f()
    xs: List[float] = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        xs.append((time.perf_counter() - t) * 1e6)
    return statistics.median(xs)


def main() -> None:
    echo = sh.Tool("echo", "returns its arguments", {"type": "object"}, lambda args: args)

    async def aecho(args: Dict[str, Any]) -> Dict[str, Any]:
        return args

    aecho_tool = sh.Tool("aecho", "returns its arguments", {"type": "object"}, aecho)
    h = sh.Harness(tools=[echo, aecho_tool], limits={"max_tool_calls": 1000})
    trivial = median_us(lambda: h.run("return 1"))
    one = median_us(lambda: h.run("return await tools.echo({x: 1})"))
    hundred = median_us(
        lambda: h.run("for (let i = 0; i < 100; i++) await tools.echo({i}); return 1"), n=max(50, N // 20)
    )
    ahundred = median_us(
        lambda: h.run("for (let i = 0; i < 100; i++) await tools.aecho({i}); return 1"), n=max(50, N // 20)
    )

    async def many() -> float:
        loop_n = max(100, N // 4)
        for _ in range(100):
            await h.run_async("return 1")
        xs: List[float] = []
        for _ in range(loop_n):
            t = time.perf_counter()
            await h.run_async("return 1")
            xs.append((time.perf_counter() - t) * 1e6)
        return statistics.median(xs)

    run_async = asyncio.run(many())
    ten = median_us(lambda: h.run(SEQUENTIAL_10), n=max(200, N // 4))
    rust, interleaved = split(h)
    print(f"python trivial run            {trivial:8.1f} us (median of {N})")
    print(f"python trivial run_async      {run_async:8.1f} us ({run_async - trivial:+.1f} over run)")
    print(
        f"python run over rust          {interleaved - rust:+8.1f} us"
        f" (in the alternating rounds: {interleaved:.1f} against rust's {rust:.1f} us)"
    )
    print(f"python run + 1 tool call      {one:8.1f} us")
    print(f"python per sync tool call     {(hundred - trivial) / 100:8.1f} us (of 100 sequential)")
    print(f"python per async tool call    {(ahundred - trivial) / 100:8.1f} us (of 100 sequential, private loop)")
    peers(trivial, ten)


# Ten sequential calls of a plain Python tool that returns its argument.
SEQUENTIAL_10 = "let last; for (let i = 0; i < 10; i++) last = await tools.echo({i}); return last.i"


def split(h: sh.Harness, rounds: int = 5) -> Tuple[float, float]:
    """Where a trivial run's time goes, in rounds that alternate with the
    same run made from Rust (`bench_rust`: this process, these engine
    threads); prints the medians of the rounds' medians, in µs, and
    returns Rust's and Python's."""
    native = h._live()
    code = "return 1"
    options = h._options(None, None, None)
    n = max(200, N // 4)
    rows: Dict[str, List[float]] = {
        "rust Harness::run (wall)": [],
        "python Harness.run": [],
        "native run (to the Report)": [],
        "inside the event loop (duration_ms)": [],
    }
    for _ in range(rounds):
        rows["rust Harness::run (wall)"].append(native.bench_rust(code, n))
        rows["python Harness.run"].append(median_us(lambda: h.run(code), n))
        rows["native run (to the Report)"].append(median_us(lambda: native.run(code, options, 1), n))
        inside = [h.run(code).metrics.duration_ms * 1e3 for _ in range(n)]
        rows["inside the event loop (duration_ms)"].append(statistics.median(inside))
    print(f"trivial run, {rounds} alternating rounds of {n}, medians in us:")
    for name, xs in rows.items():
        print(f"  {name:38} {statistics.median(xs):8.1f}")
    return statistics.median(rows["rust Harness::run (wall)"]), statistics.median(rows["python Harness.run"])


def zapcode_rows() -> Optional[Dict[str, float]]:
    try:
        import zapcode  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None

    def trivial() -> None:
        assert zapcode.Zapcode("1 + 1").run()["output"] == 2

    def ten() -> None:
        z = zapcode.Zapcode(
            "let last; for (let i = 0; i < 10; i++) { last = await echo({i}); } last.i",
            external_functions=["echo"],
        )
        state = z.start()
        while state.get("suspended"):
            state = state["snapshot"].resume(state["args"][0])
        assert state["output"] == 9

    return {"trivial": median_us(trivial), "sequential_10": median_us(ten, n=max(200, N // 4))}


def monty_rows() -> Optional[Dict[str, float]]:
    try:
        import pydantic_monty  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    with pydantic_monty.Monty() as monty, monty.checkout() as session:
        return {"trivial": median_us(lambda: session.feed_run("1 + 1"))}


def peers(trivial: float, ten: float) -> None:
    """Our rows beside each installed peer's; ratios against the fastest."""
    rows = {"script-harness Harness.run": {"trivial": trivial, "sequential_10": ten}}
    for name, measure in [("zapcode (start/resume)", zapcode_rows), ("pydantic-monty session feed_run", monty_rows)]:
        got = measure()
        if got is None:
            print(f"{name}: not installed")
            continue
        rows[name] = got
    print()
    print("| workload | " + " | ".join(rows) + " | ours / fastest peer |")
    print("|---|" + "---:|" * (len(rows) + 1))
    for workload in ["trivial", "sequential_10"]:
        cells = [rows[r].get(workload) for r in rows]
        peer = [v for r, v in rows.items() if r != "script-harness Harness.run" and workload in v]
        fastest = min((v[workload] for v in peer), default=None)
        ratio = f"{rows['script-harness Harness.run'][workload] / fastest:.2f}" if fastest else "-"
        shown = [f"{c:.1f} us" if c is not None else "-" for c in cells]
        print(f"| {workload} | " + " | ".join(shown) + f" | {ratio} |")


if __name__ == "__main__":
    main()
