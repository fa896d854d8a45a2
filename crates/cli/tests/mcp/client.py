"""A real MCP client (the Python `mcp` SDK) against `harness mcp`.

Usage: client.py HARNESS CONFIG ROOT [--http]

Starts `harness mcp --config CONFIG --root ROOT` (stdio), or with --http
starts it on a free loopback port and connects over streamable HTTP; then
checks what a model would do. Prints "ok" and exits 0 when every check
passes; any failure raises.
"""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


ASKED = []
LOGGED = []


async def log_message(params) -> None:
    """The client's handler of notifications/message (MCP logging)."""
    LOGGED.append((params.level, params.logger, params.data))


async def logged(n: int) -> list:
    """LOGGED once it holds n messages. Over streamable HTTP, log messages
    travel on the session's standalone stream, not the call's, so they may
    arrive just after the call's result; over stdio they come before it."""
    deadline = time.monotonic() + 5
    while len(LOGGED) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return [(lv, d) for lv, _, d in LOGGED]


async def approve_if_polite(context, params):
    """The client's answer to an approval request (MCP elicitation)."""
    ASKED.append(params.message)
    first_line = params.message.split("\n")[0]
    return types.ElicitResult(action="accept", content={"approve": "yes-please" in first_line})


def structured(result):
    assert result.structured_content is not None, result
    return result.structured_content


async def exercise(session: ClientSession, root: str) -> None:
    await session.initialize()
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert set(tools) == {"run_script", "check_script", "search_tools", "describe_tools",
                          "open_session", "close_session"}, tools
    description = tools["run_script"].description or ""
    # The declarations are in the description: a model that reads only the
    # tool list knows the upstream tools' types.
    assert "declare const tools" in description, description[:500]
    assert "readonly mcp: {" in description and "list_directory(args:" in description, description

    # A script that lists a directory through the upstream filesystem
    # server and reads a file from it.
    script = f"""
        const listing = await tools.mcp.fs.list_directory({{path: {json.dumps(root)}}});
        const file = await tools.mcp.fs.read_text_file({{path: {json.dumps(root + "/notes.txt")}}});
        console.log("listed");
        return {{listing: listing.content, text: file.content}};
    """
    r = await session.call_tool("run_script", {"code": script})
    report = structured(r)
    assert report["ok"] is True, report
    assert "[FILE] notes.txt" in report["value"]["listing"], report
    assert report["value"]["text"] == "remember the milk\n", report
    assert not r.is_error
    assert any(c.text.startswith("ok: ") for c in r.content if c.type == "text"), r.content

    # Bad arguments to an upstream tool: a catchable ToolValidationError.
    r = await session.call_tool(
        "run_script",
        {"code": "try { await tools.mcp.fs.read_text_file({nope: 1}); } catch (e) { return e.code; }"},
    )
    assert structured(r)["value"] == "ToolValidationError", structured(r)

    # TypeScript, and a failing script is an error result with the report.
    r = await session.call_tool("run_script", {"code": "const n: number = 2; return n * 21;", "language": "ts"})
    assert structured(r)["value"] == 42, structured(r)
    r = await session.call_tool("run_script", {"code": "null.x"})
    assert r.is_error and structured(r)["error"]["code"] == "ScriptRuntimeError", r

    # Malformed arguments are a tool error that names the field (the model
    # can correct itself), not a failed request; an extra argument is
    # ignored, and `javascript` is accepted for `js`.
    r = await session.call_tool("run_script", {})
    text = r.content[0].text
    assert r.is_error and "code" in text, r
    r = await session.call_tool("run_script", {"code": "return 1", "language": "python"})
    assert r.is_error and "python" in r.content[0].text, r
    r = await session.call_tool("run_script", {"code": "return 2", "language": "javascript", "extra": 1})
    assert structured(r)["value"] == 2, structured(r)
    r = await session.call_tool("search_tools", {"query": "read", "limit": -1})
    assert r.is_error, r

    # check_script: diagnostics with line and column, nothing run.
    r = await session.call_tool("check_script", {"code": "let a = 1;\nlet = ;"})
    d = structured(r)
    assert d["ok"] is False and d["diagnostics"][0]["line"] == 2, d
    r = await session.call_tool("check_script", {"code": "return 1"})
    assert structured(r)["ok"] is True

    # One tenant's run cannot reach the next through the long-lived server
    # (issue 68): a script that closes its function to plant a
    # structuredClone that stashes what later runs pass it is refused, by
    # check_script and run_script alike, and nothing of it is there for
    # the next runs, 30 ms apart so that they meet the context it left.
    breakout = (
        "}); const stash = []; const structuredClone = (v) => { stash.push(JSON.stringify(v)); "
        "return JSON.parse(JSON.stringify(v)) }; (async function () {"
    )
    r = await session.call_tool("check_script", {"code": breakout})
    assert structured(r)["ok"] is False, structured(r)
    r = await session.call_tool("run_script", {"code": breakout})
    assert r.is_error and structured(r)["error"]["code"] == "ScriptSyntaxError", structured(r)
    await asyncio.sleep(0.03)
    r = await session.call_tool(
        "run_script",
        {"code": "return typeof structuredClone === 'function' ? structuredClone({apiKey: 'tenant-b-secret'}).apiKey.length : 15"},
    )
    assert structured(r)["value"] == 15, structured(r)
    await asyncio.sleep(0.03)
    r = await session.call_tool("run_script", {"code": "return typeof stash"})
    assert structured(r)["value"] == "undefined", structured(r)

    # search_tools and describe_tools.
    r = await session.call_tool("search_tools", {"query": "read text file", "limit": 3})
    names = [t["name"] for t in structured(r)["tools"]]
    assert "mcp.fs.read_text_file" in names, names
    r = await session.call_tool("describe_tools", {"names": ["mcp.fs.read_text_file"]})
    assert "read_text_file(args:" in structured(r)["declarations"], structured(r)

    # Progress: emitProgress arrives while the script runs; the console
    # line goes out once, as a log message, not as progress.
    seen = []

    async def on_progress(progress, total, message):
        seen.append(message)

    LOGGED.clear()
    r = await session.call_tool(
        "run_script",
        {"code": "console.log('step one'); context.telemetry.emitProgress('half way'); "
                 "await tools.mcp.fs.list_allowed_directories({}); return 1"},
        progress_callback=on_progress,
    )
    assert structured(r)["value"] == 1
    assert seen == ["half way"], seen
    assert [d for _, d in await logged(1)] == ["step one"], LOGGED

    # Approvals are asked of the client (elicitation), with the call's line.
    r = await session.call_tool(
        "run_script",
        {"code": "const a = await tools.exec({command: ['echo', 'yes-please']});\n"
                 "let b;\ntry { await tools.exec({command: ['echo', 'no-thanks']}); } catch (e) { b = e.code; }\n"
                 "return [a.stdout, b];"},
    )
    assert structured(r)["value"] == ["yes-please\n", "ApprovalDeniedError"], structured(r)
    assert len(ASKED) == 2 and "`exec`" in ASKED[0] and "line 1" in ASKED[0], ASKED
    ASKED.clear()

    # Console lines arrive as log messages while the run runs, with the
    # script id as logger, at the client's level and above (info until it
    # sets one); they are no longer progress notifications.
    LOGGED.clear()
    r = await session.call_tool(
        "run_script", {"code": "console.debug('d'); console.log('l'); console.warn('x'); return 1"}
    )
    script_id = structured(r)["script_id"]
    assert await logged(2) == [("info", "l"), ("warning", "x")], LOGGED
    assert all(logger == script_id for _, logger, _ in LOGGED), (LOGGED, script_id)
    await session.set_logging_level("debug")
    LOGGED.clear()
    await session.call_tool("run_script", {"code": "console.debug('d'); return 1"})
    assert await logged(1) == [("debug", "d")], LOGGED
    await session.set_logging_level("error")
    LOGGED.clear()
    await session.call_tool("run_script", {"code": "console.warn('w'); console.error('e'); return 1"})
    assert await logged(1) == [("error", "e")], LOGGED
    await session.set_logging_level("info")

    # Resources: the declarations, the script contract, one tool.
    listed = {str(r.uri) for r in (await session.list_resources()).resources}
    assert listed == {"harness://tools.d.ts", "harness://guide"}, listed
    templates = [t.uri_template for t in (await session.list_resource_templates()).resource_templates]
    assert templates == ["harness://tools/{name}"], templates
    d_ts = (await session.read_resource("harness://tools.d.ts")).contents[0].text
    assert "declare const tools" in d_ts and "read_text_file(args:" in d_ts, d_ts[:300]
    guide = (await session.read_resource("harness://guide")).contents[0].text
    assert "ScriptTimeoutError" in guide and "ms per run" in guide, guide
    one = json.loads((await session.read_resource("harness://tools/mcp.fs.read_text_file")).contents[0].text)
    assert one["name"] == "mcp.fs.read_text_file" and "read_text_file" in one["declaration"], one
    try:
        await session.read_resource("harness://tools/no-such-tool")
        raise AssertionError("an unknown tool was read")
    except Exception as e:
        assert "no resource" in str(e) or "not found" in str(e).lower(), e

    # Prompts: code-mode carries the declarations (narrowed on request),
    # fix-script the failed script and its error; tool names complete.
    prompts = {p.name for p in (await session.list_prompts()).prompts}
    assert prompts == {"code-mode", "fix-script"}, prompts
    p = await session.get_prompt("code-mode", {"task": "count the files"})
    text = p.messages[0].content.text
    assert "count the files" in text and "declare const tools" in text and "list_directory(args:" in text, text[:500]
    p = await session.get_prompt("code-mode", {"task": "t", "tools": "mcp.fs.read_text_file"})
    text = p.messages[0].content.text
    assert "read_text_file(args:" in text and "list_directory(args:" not in text, text
    p = await session.get_prompt("fix-script", {"code": "null.x", "error": "ScriptRuntimeError: x"})
    assert "null.x" in p.messages[0].content.text
    c = await session.complete(
        types.PromptReference(type="ref/prompt", name="code-mode"),
        {"name": "tools", "value": "mcp.fs.read_t"},
    )
    assert "mcp.fs.read_text_file" in c.completion.values, c

    # Cancelling a long run: the client gives up, the server cancels the run.
    started = time.monotonic()
    try:
        await session.call_tool("run_script", {"code": "while (true) {}"}, read_timeout_seconds=1.0)
        raise AssertionError("the endless script returned")
    except Exception as e:  # the SDK raises on its timeout and sends notifications/cancelled
        assert time.monotonic() - started < 5, e
    # The server is still there, and the next run works.
    r = await session.call_tool("run_script", {"code": "return 'still here'"})
    assert structured(r)["value"] == "still here"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main() -> None:
    harness, config, root = sys.argv[1:4]
    http = "--http" in sys.argv[4:]
    args = ["mcp", "--config", config, "--root", root, "--max-description-bytes", "1000000"]
    args += os.environ.get("HARNESS_MCP_EXTRA_ARGS", "").split()
    if not http:
        params = StdioServerParameters(command=harness, args=args, env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(
                read, write, elicitation_callback=approve_if_polite, logging_callback=log_message
            ) as session:
                await exercise(session, root)
        print("ok")
        return
    from mcp.client.streamable_http import streamable_http_client

    port = free_port()
    server = subprocess.Popen([harness, *args, "--http", f"127.0.0.1:{port}"])
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(
                read, write, elicitation_callback=approve_if_polite, logging_callback=log_message
            ) as session:
                await exercise(session, root)
        # Two clients at once, each with its own session.
        async def one(i: int):
            async with streamable_http_client(url) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    r = await s.call_tool("run_script", {"code": f"return {i} * 2"})
                    assert structured(r)["value"] == i * 2
        await asyncio.gather(*(one(i) for i in range(4)))
    finally:
        server.terminate()
        server.wait(timeout=10)
    print("ok")


if __name__ == "__main__":
    asyncio.run(main())
