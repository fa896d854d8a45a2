"""An upstream MCP server whose tools change (the official Python SDK).

Usage: changing_upstream.py STATE_FILE

`grow` adds the tool `grown` and says notifications/tools/list_changed;
`die` ends the process. Started again (STATE_FILE counts the starts), it
also lists `reborn`.
"""

import os
import sys

from mcp.server.mcpserver import Context, MCPServer

state = sys.argv[1]
starts = int(open(state).read()) + 1 if os.path.exists(state) else 1
with open(state, "w") as f:
    f.write(str(starts))

server = MCPServer("changing")


@server.tool(description="Says hello.")
def hello() -> str:
    return "hello"


@server.tool(description="Adds the tool `grown` and says the tool list changed.")
async def grow(ctx: Context) -> str:
    def grown() -> str:
        return "grown"

    server.add_tool(grown, description="Added by grow.")
    await ctx.session.send_tool_list_changed()
    return "grew"


@server.tool(description="Ends this server's process.")
def die() -> str:
    os._exit(3)


if starts >= 2:

    @server.tool(description="Listed once the server was started again.")
    def reborn() -> str:
        return "reborn"


server.run()
