"""`Harness`: runs scripts written by a model, with Python tools."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import itertools
import json
import os
import threading
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Union,
)

from . import _native
from ._report import Report, ScriptError
from ._tools import Tool, ToolContext

GUEST = Path(__file__).resolve().parent / "bin" / "quickjs.wasm"

Approvals = Callable[["ApprovalRequest"], Union[bool, str, Awaitable[Union[bool, str]]]]

#: What an `approvals` callable returns to put the run away instead of
#: answering now (a harness made with `suspend=...`, engine "wasi"): the
#: report's `suspension` then holds the continuation `Harness.resume`
#: takes.
SUSPEND = "suspend"


def _verdict(answer: Any) -> str:
    if isinstance(answer, str) and answer == SUSPEND:
        return SUSPEND
    return "true" if answer else "false"


@dataclass(frozen=True)
class ApprovalRequest:
    """What the `approvals` callable is asked: may this call run?"""

    request_id: str
    script_id: str
    call_id: int
    tool: str
    args: Any
    task_id: Optional[str] = None
    line: Optional[int] = None
    column: Optional[int] = None
    snippet: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ApprovalRequest":
        return cls(
            request_id=str(d.get("request_id", "")),
            script_id=str(d.get("script_id", "")),
            call_id=int(d.get("call_id") or 0),
            tool=str(d.get("tool", "")),
            args=d.get("args"),
            task_id=d.get("task_id"),
            line=d.get("line"),
            column=d.get("column"),
            snippet=d.get("snippet"),
        )


def _json_default(o: Any) -> Any:
    if hasattr(o, "model_dump") and callable(o.model_dump):
        return o.model_dump(mode="json")
    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


# One encoder for every result (`json.dumps` with options makes one a call).
_to_json = json.JSONEncoder(default=_json_default, allow_nan=False).encode

# Results that are surely not awaitable (skips `inspect.isawaitable`).
_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})


def _message(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class _Loops:
    """The event loops async tools run on: the loop of a `run_async` in
    flight (whose thread is not blocked in a synchronous `run`), else a
    private loop on a thread of its own, started when first needed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: Dict[asyncio.AbstractEventLoop, List[int]] = {}
        self._blocked: Dict[int, int] = {}
        self._private: Optional[asyncio.AbstractEventLoop] = None

    def enter(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            entry = self._active.setdefault(loop, [threading.get_ident(), 0])
            entry[1] += 1

    def leave(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            entry = self._active.get(loop)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._active[loop]

    # `block` and `unblock` take no lock: a thread changes only its own
    # entry, each dict operation is atomic, and `pick` only asks whether
    # a thread has one.
    def block(self) -> None:
        t = threading.get_ident()
        self._blocked[t] = self._blocked.get(t, 0) + 1

    def unblock(self) -> None:
        t = threading.get_ident()
        n = self._blocked.get(t, 0) - 1
        if n <= 0:
            self._blocked.pop(t, None)
        else:
            self._blocked[t] = n

    def pick(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            for loop, (thread, _) in self._active.items():
                if thread not in self._blocked and loop.is_running():
                    return loop
            if self._private is None or self._private.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                threading.Thread(target=serve, name="script-harness-tools", daemon=True).start()
                ready.wait()
                self._private = loop
            return self._private

    def close(self) -> None:
        with self._lock:
            loop, self._private = self._private, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)


class _Bridge:
    """What the native side calls: tool calls and approval requests."""

    def __init__(
        self, tools: Mapping[str, Tool], approvals: Optional[Approvals], loops: _Loops
    ) -> None:
        self.tools = dict(tools)
        self.approvals = approvals
        self.loops = loops

    def _settle(
        self,
        call: _native.Call,
        produce: Callable[[], Any],
        encode: Callable[[Any], str],
    ) -> None:
        """Settles `call` with what `produce()` returns (awaited on an
        event loop if it is awaitable), encoded by `encode`; an exception
        rejects it with its message."""
        try:
            out = produce()
        except BaseException as e:  # noqa: BLE001 - every failure goes to the script
            call.reject(_message(e))
            if isinstance(e, KeyboardInterrupt):
                # Ctrl-C while a `run` on the main thread made this call:
                # the run is cancelled, and `run` raises it.
                raise
            return
        if type(out) in _PLAIN or not inspect.isawaitable(out):
            try:
                call.resolve(encode(out))
            except (TypeError, ValueError) as e:
                call.reject(f"returned a value JSON cannot hold: {e}")
            return

        async def wait(aw: Awaitable[Any] = out) -> Any:
            return await aw

        fut = asyncio.run_coroutine_threadsafe(wait(), self.loops.pick())

        def done(f: "concurrent.futures.Future[Any]") -> None:
            if f.cancelled():
                call.reject("cancelled")
                return
            e = f.exception()
            if e is not None:
                call.reject(_message(e))
                return
            try:
                call.resolve(encode(f.result()))
            except (TypeError, ValueError) as e:
                call.reject(f"returned a value JSON cannot hold: {e}")

        fut.add_done_callback(done)
        call.on_cancel(fut.cancel)

    def call_tool(self, name: str, args: Any, call: _native.Call) -> None:
        tool = self.tools[name]
        ctx = ToolContext(name, call)
        self._settle(call, lambda: tool.invoke(args, ctx), _to_json)

    def approve(self, request_json: str, call: _native.Call) -> None:
        req = ApprovalRequest.from_dict(json.loads(request_json))
        tool = self.tools.get(req.tool)
        rule = tool.needs_approval if tool is not None else None
        approvals = self.approvals

        def ask() -> Any:
            if approvals is None:
                return False
            return approvals(req)

        if callable(rule):
            needed = rule(req.args)
            if inspect.isawaitable(needed):

                async def both(first: Awaitable[bool] = needed) -> Any:
                    if not await first:
                        return True
                    answer = ask()
                    if inspect.isawaitable(answer):
                        answer = await answer
                    return answer

                self._settle(call, both, _verdict)
                return
            if not needed:
                call.resolve("true")
                return
        self._settle(call, ask, _verdict)


_RUN_IDS = itertools.count(1)


class Harness:
    """Runs JavaScript or TypeScript written by a model in a sandboxed
    engine, with Python tools.

    - `engine`: `quickjs` (default) or `wasi`; `isolation`: `in_process`
      (default) or `process` (worker processes, needs the `harness` CLI
      at `HARNESS_WORKER_BIN`);
    - `limits`: a dict of limit names (`timeout_ms`, `memory_bytes`,
      `max_tool_calls`, `max_concurrent_tool_calls`, ...);
    - `tools`: `Tool`s (or functions decorated with `@tool`); `allow`: the
      names scripts may see (default: all);
    - `approvals`: called (plain or async) for each call that needs
      approval; returns True to let it run. Without it, such calls are
      denied;
    - `mode`: `enabled`, `dry-run` or `disabled`; `config`: a
      harness.toml file (its engine, limits and tool packs), `provider` its
      `[providers.NAME]` table;
    - `keep_warm_ms`: for runs a few milliseconds apart, keep the engine
      warm this long after each run (rehearsing a trivial run about every
      0.8 ms, a few per cent of a CPU meanwhile); 0 or None: off (the
      default), over the file's `[workers] keep_warm_ms`;
    - `keep_warm_awake`: with `keep_warm_ms`, the engine thread also stays
      awake through its window, polling for the next run instead of
      sleeping (a run a few ms after the last then costs about what one
      back to back does, for most of a CPU through each window); False
      turns off the file's `[workers] keep_warm_awake`;
    - `anticipate`: for runs at a steady pace (after 8 runs that each
      followed about the same pause) the engine wakes shortly before the
      next is due and waits for it awake; on by default, False turns it
      off (over the file's `[workers] anticipate`);
    - `suspend`: runs may suspend (engine "wasi"): an approval the
      `approvals` callable answers `SUSPEND`, or a call of a
      `DeferredTool`, puts the run away, and `resume` goes on with the
      report's `suspension["continuation"]`. `{"keys": [key, ...]}` seals
      with the first key (32 bytes, base64 or hex; the others only open),
      optionally with `"max_suspended_ms"`; True uses the `config` file's
      `[durable]` keys, or a key file of this user's.
    """

    def __init__(
        self,
        engine: Optional[str] = None,
        isolation: Optional[str] = None,
        limits: Optional[Mapping[str, Any]] = None,
        tools: Iterable[Tool] = (),
        allow: Optional[Sequence[str]] = None,
        approvals: Optional[Approvals] = None,
        mode: str = "enabled",
        config: Union[str, "os.PathLike[str]", None] = None,
        provider: Optional[str] = None,
        keep_warm_ms: Optional[int] = None,
        keep_warm_awake: Optional[bool] = None,
        anticipate: Optional[bool] = None,
        suspend: Union[bool, Mapping[str, Any], None] = None,
    ) -> None:
        table: Dict[str, Tool] = {}
        for t in tools:
            if not isinstance(t, Tool):
                raise TypeError(f"tools must be Tool objects (or @tool functions), not {type(t).__name__}")
            if t.name in table:
                raise ValueError(f"two tools are named {t.name!r}")
            table[t.name] = t
        if engine == "wasi" and GUEST.exists():
            os.environ.setdefault("HARNESS_QUICKJS_WASM", str(GUEST))
        options: Dict[str, Any] = {
            "engine": engine,
            "isolation": isolation,
            "limits": dict(limits) if limits is not None else None,
            "tools": [t.spec() for t in table.values()],
            "allow": list(allow) if allow is not None else None,
            "mode": mode,
            "config": os.fspath(config) if config is not None else None,
            "provider": provider,
            "keep_warm_ms": keep_warm_ms,
            "keep_warm_awake": keep_warm_awake,
            "anticipate": anticipate,
            "suspend": (dict(suspend) if isinstance(suspend, Mapping) else suspend),
        }
        options = {k: v for k, v in options.items() if v is not None}
        self._loops = _Loops()
        self._bridge = _Bridge(table, approvals, self._loops)
        self._native: Optional[_native.NativeHarness] = _native.NativeHarness(
            json.dumps(options), self._bridge
        )

    def _live(self) -> _native.NativeHarness:
        if self._native is None:
            raise RuntimeError("the harness is closed")
        return self._native

    @staticmethod
    def _options(
        context: Optional[Mapping[str, Any]],
        timeout_ms: Optional[int],
        language: Optional[str],
        session: Optional[str] = None,
    ) -> str:
        if context is None and timeout_ms is None and language is None and session is None:
            return "{}"
        return json.dumps(
            {"context": dict(context) if context is not None else None,
             "timeout_ms": timeout_ms,
             "language": language,
             "session": session}
        )

    def resume(
        self,
        continuation: str,
        *,
        approve: Optional[bool] = None,
        answers: Optional[Mapping[int, Any]] = None,
        failures: Optional[Mapping[int, str]] = None,
    ) -> Report:
        """Resumes a suspended run (its report's
        `suspension["continuation"]`) and returns its next report:
        completed, failed, or suspended again. `approve` answers every
        approval it waits on; `answers` and `failures` give deferred calls
        their result or error, by call id. A continuation that was changed,
        sealed with a key this harness lacks, expired or resumed before,
        or answers that do not fit, give `ContinuationInvalidError`."""
        native = self._live()
        given: Dict[str, Any] = {}
        if approve is not None:
            given["approve"] = bool(approve)
        if answers:
            given["answers"] = {str(int(k)): v for k, v in answers.items()}
        if failures:
            given["failures"] = {str(int(k)): str(v) for k, v in failures.items()}
        self._loops.block()
        try:
            return native.resume(continuation, json.dumps(given))
        finally:
            self._loops.unblock()

    def open_session(self) -> "Session":
        """Opens a session: its runs keep what their top level declared
        (`const`, `let`, `var`, `function`, `class`) for the session's
        later runs, and no other run sees any of it. The id is drawn by
        the harness. A closed or expired session's runs report
        `SessionClosedError`."""
        return Session(self, self._live().open_session())

    def run(
        self,
        code: str,
        *,
        context: Optional[Mapping[str, Any]] = None,
        timeout_ms: Optional[int] = None,
        language: Optional[str] = None,
        session: Optional[str] = None,
    ) -> Report:
        """Runs a script (the body of an async function) and returns its
        report; the script's own failures are in `report.error`, never
        raised. The interpreter is released while the script runs, so
        other Python threads go on; Ctrl-C cancels the run and raises
        `KeyboardInterrupt` once it has ended."""
        native = self._live()
        self._loops.block()
        try:
            options = self._options(context, timeout_ms, language, session)
            return native.run(code, options, next(_RUN_IDS))
        finally:
            self._loops.unblock()

    async def run_async(
        self,
        code: str,
        *,
        context: Optional[Mapping[str, Any]] = None,
        timeout_ms: Optional[int] = None,
        language: Optional[str] = None,
        session: Optional[str] = None,
    ) -> Report:
        """`run` for asyncio: async tools run on this event loop.
        Cancelling the awaiting task cancels the run (ScriptCancelledError
        inside; the task's `CancelledError` is raised once it has ended)."""
        native = self._live()
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[Report]" = loop.create_future()

        def settle(report: Report) -> None:
            if not fut.done():
                fut.set_result(report)

        def done(report: Report) -> None:
            try:
                loop.call_soon_threadsafe(settle, report)
            except RuntimeError:
                pass  # the loop is closed: nobody waits

        run_id = next(_RUN_IDS)
        self._loops.enter(loop)
        try:
            now = native.start(code, self._options(context, timeout_ms, language, session), run_id, done)
            if now is not None:
                # Ended within start's brief wait: no wake-up of this loop.
                report = now
            else:
                try:
                    report = await asyncio.shield(fut)
                except asyncio.CancelledError:
                    native.cancel(run_id)
                    while not fut.done():
                        try:
                            await asyncio.shield(fut)
                        except asyncio.CancelledError:
                            continue
                    raise
        finally:
            self._loops.leave(loop)
        return report

    def check(self, code: str) -> Optional[ScriptError]:
        """Syntax and banned identifiers, without running: None, or the
        error the run would end with."""
        text = self._live().check(code)
        return ScriptError.from_dict(json.loads(text)) if text is not None else None

    def typescript(self) -> str:
        """TypeScript declarations of `tools`, `context` and `console`,
        for the model's prompt."""
        return self._live().typescript()

    @property
    def tool_names(self) -> List[str]:
        """The tools scripts may call."""
        return self._live().tool_names()

    def respond(self, text: str, format: str = "items") -> List[Any]:
        """Runs the `<tool-calls>` blocks of a model response and returns
        the conversation items to send back: `items` (the harness's own),
        `openai-responses`, `chat` or `anthropic`. Async tools run on a
        private event loop; in async code use `respond_async`."""
        self._loops.block()
        try:
            out = self._live().respond(text, format)
        finally:
            self._loops.unblock()
        items: List[Any] = json.loads(out)
        return items

    async def respond_async(self, text: str, format: str = "items") -> List[Any]:
        """`respond` for asyncio: async tools run on this event loop."""
        native = self._live()
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[List[Any]]" = loop.create_future()

        def settle(items: Optional[str], error: Optional[str]) -> None:
            if fut.done():
                return
            if error is not None:
                fut.set_exception(ValueError(error))
            else:
                fut.set_result(json.loads(items or "[]"))

        def done(items: Optional[str], error: Optional[str]) -> None:
            try:
                loop.call_soon_threadsafe(settle, items, error)
            except RuntimeError:
                pass

        self._loops.enter(loop)
        try:
            native.respond_start(text, format, done)
            return await fut
        finally:
            self._loops.leave(loop)

    def close(self) -> None:
        """Cancels every run and releases the engine and the callbacks;
        later calls raise RuntimeError."""
        if self._native is not None:
            self._native.close()
            self._native = None
        self._loops.close()

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> "Harness":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._native is None else f"tools={len(self._bridge.tools)}"
        return f"Harness({state})"


class Session:
    """A session of a `Harness` (`Harness.open_session`): runs made
    through it share their top-level declarations, and nothing else sees
    them. Closed by `close`, or on leaving a `with` block."""

    def __init__(self, harness: Harness, id: str) -> None:
        self._harness = harness
        self.id = id

    def run(self, code: str, **options: Any) -> Report:
        """`Harness.run` in this session."""
        return self._harness.run(code, session=self.id, **options)

    async def run_async(self, code: str, **options: Any) -> Report:
        """`Harness.run_async` in this session."""
        return await self._harness.run_async(code, session=self.id, **options)

    def close(self) -> bool:
        """Closes the session (its state is gone); False if it was not open."""
        return self._harness._live().close_session(self.id)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

