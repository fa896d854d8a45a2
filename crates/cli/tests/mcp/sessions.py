"""Sessions over MCP (the official Python SDK as the client), on one
engine: `open_session` gives an id whose runs keep their top-level
declarations; a second session and an unscoped run see none of them;
a second client connection naming the first one's id gets
SessionClosedError, and so does a closed session.

Usage: sessions.py HARNESS ENGINE

Prints "ok" when every check passes; any failure raises.
"""

import asyncio
import socket
import subprocess
import sys
import time

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def run(client: ClientSession, code: str, **extra) -> dict:
    r = await client.call_tool("run_script", {"code": code, **extra})
    return r.structured_content


async def opened(session: ClientSession) -> str:
    r = await session.call_tool("open_session", {})
    assert not r.is_error, r
    return r.structured_content["session"]


async def main() -> None:
    harness, engine = sys.argv[1:3]
    port = free_port()
    server = subprocess.Popen(
        [harness, "mcp", "--engine", engine, "--http", f"127.0.0.1:{port}"],
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as first:
                await first.initialize()
                a = await opened(first)
                assert len(a) == 32 and all(c in "0123456789abcdef" for c in a), a
                r = await run(first, "const data = [1, 2, 3]; return data.length", session=a)
                assert r["value"] == 3, r
                r = await run(first, "return data.map(x => x * 2)", session=a)
                assert r["value"] == [2, 4, 6], r
                b = await opened(first)
                assert (await run(first, "return typeof data", session=b))["value"] == "undefined"
                assert (await run(first, "return typeof data"))["value"] == "undefined"
                # check_script in the session: the same rules, nothing runs.
                c = await first.call_tool("check_script", {"code": "const more = data.length", "session": a})
                assert c.structured_content["ok"], c

                # Another connection cannot reach this one's session.
                async with streamable_http_client(url) as (read2, write2):
                    async with ClientSession(read2, write2) as second:
                        await second.initialize()
                        r = await second.call_tool("run_script", {"code": "return data", "session": a})
                        assert r.is_error, r
                        assert r.structured_content["error"]["code"] == "SessionClosedError", r

                # Still there for its own client; closed, it is gone.
                assert (await run(first, "return data.length", session=a))["value"] == 3
                r = await first.call_tool("close_session", {"session": a})
                assert r.structured_content["closed"] is True, r
                r = await first.call_tool("run_script", {"code": "return 1", "session": a})
                assert r.structured_content["error"]["code"] == "SessionClosedError", r
    finally:
        server.terminate()
        server.wait(timeout=10)
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
