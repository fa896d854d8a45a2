"""The run report, as frozen dataclasses with the JSON report's field names."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple, Type, TypeVar

_T = TypeVar("_T")


class ErrorCode(str, Enum):
    """The stable error codes of `ScriptError.code` (docs/errors.md)."""

    ScriptSyntaxError = "ScriptSyntaxError"
    BannedIdentifierError = "BannedIdentifierError"
    ScriptTooLargeError = "ScriptTooLargeError"
    ScriptRuntimeError = "ScriptRuntimeError"
    ScriptTimeoutError = "ScriptTimeoutError"
    ScriptMemoryError = "ScriptMemoryError"
    StackOverflowError = "StackOverflowError"
    ScriptCancelledError = "ScriptCancelledError"
    ToolNotFoundError = "ToolNotFoundError"
    ToolValidationError = "ToolValidationError"
    ToolBudgetExceededError = "ToolBudgetExceededError"
    ConcurrencyLimitError = "ConcurrencyLimitError"
    ApprovalDeniedError = "ApprovalDeniedError"
    ApprovalTimeoutError = "ApprovalTimeoutError"
    ToolExecutionError = "ToolExecutionError"
    DetachedPromiseError = "DetachedPromiseError"
    SerializationError = "SerializationError"
    ReturnValueTooLargeError = "ReturnValueTooLargeError"
    HarnessInternalError = "HarnessInternalError"
    SessionClosedError = "SessionClosedError"
    ContinuationInvalidError = "ContinuationInvalidError"
    UnsupportedError = "UnsupportedError"

    def __str__(self) -> str:
        return self.value


def _code(value: Any) -> str:
    """An `ErrorCode` where the code is known, the plain string otherwise
    (a newer native module may add codes)."""
    try:
        return ErrorCode(value)
    except ValueError:
        return str(value)


def _frozen(cls: Type[_T], fields: Dict[str, Any]) -> _T:
    """An instance of the frozen dataclass `cls` with every one of its
    fields given: what its `__init__` makes, without a guarded
    `object.__setattr__` call per field (a report has 19; this halves the
    Python side of a trivial run)."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def _opt_int(value: Any) -> Optional[int]:
    return int(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class Location:
    """Where in the script (1-based line and column)."""

    line: int
    column: int


@dataclass(frozen=True)
class ScriptError:
    """Why a run failed. `code` is an `ErrorCode` (a `str`)."""

    code: str
    message: str
    phase: str = "executing"
    name: Optional[str] = None
    stack: Optional[str] = None
    tool: Optional[str] = None
    call_id: Optional[int] = None
    location: Optional[Location] = None
    stderr: Optional[str] = None
    metadata: Optional[Mapping[str, Any]] = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ScriptError":
        loc = d.get("location")
        return cls(
            code=_code(d.get("code", "HarnessInternalError")),
            message=str(d.get("message", "")),
            phase=str(d.get("phase", "executing")),
            name=d.get("name"),
            stack=d.get("stack"),
            tool=d.get("tool"),
            call_id=_opt_int(d.get("call_id")),
            location=Location(int(loc.get("line", 0)), int(loc.get("column", 0)))
            if isinstance(loc, Mapping)
            else None,
            stderr=d.get("stderr"),
            metadata=d.get("metadata"),
            raw=dict(d),
        )

    def to_dict(self) -> Dict[str, Any]:
        """The error as the JSON report has it."""
        return dict(self.raw)

    def to_json(self) -> str:
        return json.dumps(self.raw)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(frozen=True)
class ConsoleEntry:
    """One console line: `level` is log, info, warn, error or debug."""

    level: str
    text: str


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call: `status` is ok, error, cancelled, pending or detached."""

    id: int
    tool: str
    status: str
    duration_ms: float
    error: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class ApprovalRecord:
    """One approval request and its outcome."""

    call_id: int
    tool: str
    args: Any
    outcome: str
    duration_ms: float
    request_id: Optional[str] = None
    line: Optional[int] = None


@dataclass(frozen=True)
class ProgressEvent:
    """A `console.progress(...)` event."""

    message: str
    kind: Optional[str] = None
    data: Any = None
    elapsed_ms: Optional[float] = None


@dataclass(frozen=True)
class Metrics:
    """What the run cost."""

    engine: str
    duration_ms: float
    tool_calls: int
    memory_used_bytes: Optional[int] = None
    fuel_consumed: Optional[int] = None


@dataclass(frozen=True)
class Report:
    """A run's report: the fields of `harness run --json`."""

    ok: bool
    value: Any
    error: Optional[ScriptError]
    console: Tuple[ConsoleEntry, ...]
    console_dropped: int
    tool_calls: Tuple[ToolCallRecord, ...]
    tool_calls_dropped: int
    approvals: Tuple[ApprovalRecord, ...]
    progress: Tuple[ProgressEvent, ...]
    progress_dropped: int
    metrics: Metrics
    script_id: str
    warnings: Tuple[Mapping[str, Any], ...] = ()
    detached_tasks: Tuple[Mapping[str, Any], ...] = ()
    retried: bool = False
    #: Present only when the run suspended: `continuation` (for
    #: `Harness.resume`), `id`, `pending` (the calls it waits on) and
    #: `expires_at`.
    suspension: Optional[Mapping[str, Any]] = None
    #: The session a resumed session run went on in (a new one).
    session: Optional[str] = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Report":
        err = d.get("error")
        m = d.get("metrics") or {}
        console = d.get("console")
        calls = d.get("tool_calls")
        approvals = d.get("approvals")
        progress = d.get("progress")
        return _frozen(
            cls,
            {
                "ok": bool(d.get("ok")),
                "value": d.get("value"),
                "error": ScriptError.from_dict(err) if isinstance(err, Mapping) else None,
                "console": tuple(
                    ConsoleEntry(str(c.get("level", "log")), str(c.get("text", "")))
                    for c in console
                )
                if console
                else (),
                "console_dropped": int(d.get("console_dropped") or 0),
                "tool_calls": tuple(
                    ToolCallRecord(
                        id=int(t.get("id", 0)),
                        tool=str(t.get("tool", "")),
                        status=str(t.get("status", "")),
                        duration_ms=float(t.get("duration_ms") or 0.0),
                        error=t.get("error"),
                    )
                    for t in calls
                )
                if calls
                else (),
                "tool_calls_dropped": int(d.get("tool_calls_dropped") or 0),
                "approvals": tuple(
                    ApprovalRecord(
                        call_id=int(a.get("call_id", 0)),
                        tool=str(a.get("tool", "")),
                        args=a.get("args"),
                        outcome=str(a.get("outcome", "")),
                        duration_ms=float(a.get("duration_ms") or 0.0),
                        request_id=a.get("request_id"),
                        line=_opt_int(a.get("line")),
                    )
                    for a in approvals
                )
                if approvals
                else (),
                "progress": tuple(
                    ProgressEvent(
                        message=str(p.get("message", "")),
                        kind=p.get("kind"),
                        data=p.get("data"),
                        elapsed_ms=p.get("elapsed_ms"),
                    )
                    for p in progress
                )
                if progress
                else (),
                "progress_dropped": int(d.get("progress_dropped") or 0),
                "metrics": _frozen(
                    Metrics,
                    {
                        "engine": str(m.get("engine", "")),
                        "duration_ms": float(m.get("duration_ms") or 0.0),
                        "tool_calls": int(m.get("tool_calls") or 0),
                        "memory_used_bytes": _opt_int(m.get("memory_used_bytes")),
                        "fuel_consumed": _opt_int(m.get("fuel_consumed")),
                    },
                ),
                "script_id": str(d.get("script_id", "")),
                "warnings": tuple(d.get("warnings") or ()),
                "detached_tasks": tuple(d.get("detached_tasks") or ()),
                "retried": bool(d.get("retried", False)),
                "suspension": d.get("suspension"),
                "session": d.get("session"),
                "raw": dict(d),
            },
        )

    @classmethod
    def from_json(cls, text: str) -> "Report":
        return cls.from_dict(json.loads(text))

    if not TYPE_CHECKING:  # not a catch-all for type checkers

        def __getattr__(self, name: str) -> Any:
            # A report the native side built keeps its `raw` there until
            # it is first read (with this report's value, as `from_dict`).
            native = self.__dict__.get("_native") if name == "raw" else None
            if native is None:
                raise AttributeError(f"'Report' object has no attribute {name!r}")
            raw = native.plain(self.value)
            self.__dict__["raw"] = raw
            return raw

    def __getstate__(self) -> Dict[str, Any]:
        """Pickled with `raw` as plain values (never the native report)."""
        state = dict(self.__dict__)
        state["raw"] = self.raw
        state.pop("_native", None)
        return state

    def to_dict(self) -> Dict[str, Any]:
        """The report as `harness run --json` prints it."""
        return dict(self.raw)

    def to_json(self) -> str:
        return json.dumps(self.raw)
