"""`harness mcp` follows its upstream servers' tools (the official Python
SDK as the client).

Usage: catalogue.py HARNESS CONFIG

The upstream (changing_upstream.py) gains a tool and says so, then dies
and comes back with another: each time the client hears
notifications/tools/list_changed and, for the resource it subscribed to,
notifications/resources/updated; run_script's description and
harness://tools.d.ts then declare the new tool, and scripts can call it.
A client of protocol 2026-07-28 hears the same through
`subscriptions/listen`. Prints "ok" when every check passes; any failure
raises.
"""

import asyncio
import sys
import time

from mcp import Client, ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

HEARD = []


async def on_message(message) -> None:
    if isinstance(message, types.ToolListChangedNotification):
        HEARD.append("tools")
    elif isinstance(message, types.ResourceUpdatedNotification):
        HEARD.append(str(message.params.uri))


async def heard(what: list) -> None:
    deadline = time.monotonic() + 10
    while not all(w in HEARD for w in what) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert all(w in HEARD for w in what), (what, HEARD)
    HEARD.clear()


async def run(session: ClientSession, code: str):
    r = await session.call_tool("run_script", {"code": code})
    return r.structured_content


async def description(session: ClientSession) -> str:
    tools = {t.name: t for t in (await session.list_tools()).tools}
    return tools["run_script"].description or ""


async def declarations(session: ClientSession) -> str:
    r = await session.read_resource("harness://tools.d.ts")
    return r.contents[0].text


async def exercise(session: ClientSession) -> None:
    init = await session.initialize()
    assert init.capabilities.tools.list_changed, init.capabilities
    assert init.capabilities.resources.subscribe, init.capabilities
    await session.subscribe_resource("harness://tools.d.ts")
    assert "grown(" not in await description(session)

    # The upstream says its tools changed.
    assert (await run(session, "return (await tools.mcp.up.grow({})).result"))["value"] == "grew"
    await heard(["tools", "harness://tools.d.ts"])
    assert "grown(" in await description(session)
    assert "grown(" in await declarations(session)
    assert (await run(session, "return (await tools.mcp.up.grown({})).result"))["value"] == "grown"

    # The upstream dies; the next call starts it again, and it lists more.
    died = await run(session, "try { await tools.mcp.up.die({}) } catch (e) { return e.message }")
    assert "exited" in died["value"], died
    assert "reborn(" not in await declarations(session)
    assert (await run(session, "return (await tools.mcp.up.hello({})).result"))["value"] == "hello"
    await heard(["tools", "harness://tools.d.ts"])
    assert "reborn(" in await declarations(session)
    assert (await run(session, "return (await tools.mcp.up.reborn({})).result"))["value"] == "reborn"

    # Unsubscribed, the resource is not updated again.
    await session.unsubscribe_resource("harness://tools.d.ts")
    assert (await run(session, "return (await tools.mcp.up.grow({})).result"))["value"] == "grew"
    await heard(["tools"])
    await asyncio.sleep(0.3)
    assert "harness://tools.d.ts" not in HEARD, HEARD


async def listening(params: StdioServerParameters) -> None:
    """The same for a client of protocol 2026-07-28: subscriptions/listen."""
    async with Client(params) as client:
        assert client.session.protocol_version == "2026-07-28", client.session.protocol_version
        uri = "harness://tools.d.ts"
        async with client.listen(tools_list_changed=True, resource_subscriptions=[uri]) as sub:
            assert sub.honored.tools_list_changed, sub.honored
            r = await client.call_tool("run_script", {"code": "return (await tools.mcp.up.grow({})).result"})
            assert r.structured_content["value"] == "grew", r
            events = []

            async def two() -> None:
                async for event in sub:
                    events.append(type(event).__name__)
                    if len(events) == 2:
                        return

            await asyncio.wait_for(two(), 10)
            assert sorted(events) == ["ResourceUpdated", "ToolsListChanged"], events
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "grown(" in (tools["run_script"].description or "")


async def main() -> None:
    harness, config = sys.argv[1:3]
    params = StdioServerParameters(command=harness, args=["mcp", "--config", config])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            await exercise(session)
    await listening(params)
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
