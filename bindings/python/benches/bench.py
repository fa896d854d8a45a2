"""Per-run overhead of `Harness.run` from Python, and of a Python tool
call, beside the same runs from Rust (`examples/baseline.rs`).

    python bindings/python/benches/bench.py          # the Python side
    cargo run --release -p script-harness-python --example baseline

Build the package the same way as the baseline (`pip install
./bindings/python` is a release build) before comparing.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any, Callable, Dict, List

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
    print(f"python trivial run            {trivial:8.1f} us (median of {N})")
    print(f"python trivial run_async      {run_async:8.1f} us")
    print(f"python run + 1 tool call      {one:8.1f} us")
    print(f"python per sync tool call     {(hundred - trivial) / 100:8.1f} us (of 100 sequential)")
    print(f"python per async tool call    {(ahundred - trivial) / 100:8.1f} us (of 100 sequential, private loop)")


if __name__ == "__main__":
    main()
