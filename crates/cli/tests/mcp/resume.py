"""A client whose stream drops while a run runs gets the answer by
resuming it (`GET` with `Last-Event-ID`), whether the run is still going
or ended meanwhile. Raw HTTP, so that the connection can be cut.

Usage: resume.py HARNESS

Prints "ok" when every check passes; any failure raises.
"""

import http.client
import json
import socket
import subprocess
import sys
import time

VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, harness: str):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [harness, "mcp", "--http", f"127.0.0.1:{self.port}"], stderr=subprocess.DEVNULL
        )
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        self.headers = {"content-type": "application/json", "accept": ACCEPT}
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {},
            "clientInfo": {"name": "resume", "version": "1"}}})
        session = r.getheader("mcp-session-id")
        r.read()
        assert session, "no session id"
        self.headers.update({"mcp-session-id": session, "mcp-protocol-version": VERSION})
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).read()

    def post(self, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("POST", "/mcp", json.dumps(body), self.headers)
        return c.getresponse()

    def resume(self, last_event_id: str):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = dict(self.headers, **{"last-event-id": last_event_id, "accept": "text/event-stream"})
        c.request("GET", "/mcp", headers=headers)
        return c.getresponse()


def first_event_id(response) -> str:
    seen = b""
    while b"\n\n" not in seen:
        chunk = response.read1(256)
        assert chunk, seen
        seen += chunk
    ids = [l.split(b":", 1)[1].strip() for l in seen.split(b"\n") if l.startswith(b"id:")]
    assert ids, seen
    return ids[0].decode()


def answer(response, call_id: int) -> dict:
    """The JSON-RPC answer to call_id on an SSE stream."""
    buf = b""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        chunk = response.read1(4096)
        if not chunk:
            break
        buf += chunk
        for block in buf.split(b"\n\n"):
            for line in block.split(b"\n"):
                if line.startswith(b"data:") and line[5:].strip():
                    msg = json.loads(line[5:])
                    if msg.get("id") == call_id:
                        return msg
    raise AssertionError(f"no answer to {call_id} on the resumed stream: {buf[:500]!r}")


def run_then_drop(server: Server, call_id: int) -> str:
    code = "let t = Date.now(); while (Date.now() - t < 1000) {} return 'done'"
    r = server.post({"jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                     "params": {"name": "run_script", "arguments": {"code": code}}})
    assert r.status == 200 and r.getheader("content-type").startswith("text/event-stream")
    last = first_event_id(r)
    r.fp.raw._sock.close() if hasattr(r.fp, "raw") else None
    r.close()
    return last


def main() -> None:
    server = Server(sys.argv[1])
    try:
        # The run ends while the client is away: its answer is kept.
        last = run_then_drop(server, 2)
        time.sleep(2)
        msg = answer(server.resume(last), 2)
        assert msg["result"]["structuredContent"]["value"] == "done", msg
        # The client comes back while the run still runs.
        last = run_then_drop(server, 3)
        msg = answer(server.resume(last), 3)
        assert msg["result"]["structuredContent"]["value"] == "done", msg
    finally:
        server.proc.terminate()
        server.proc.wait(timeout=10)
    print("ok")


if __name__ == "__main__":
    main()
