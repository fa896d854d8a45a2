"""The workspace sandbox: a session directory mounted as `/app`, where a
program runs as `quickjs /app/user_code.js` on WASI-QuickJS (wasmtime,
fuel, a memory cap, nothing else of the host)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Protocol, Union, runtime_checkable

from . import _native

#: The guest shipped inside the package.
DEFAULT_WASM_BINARY = Path(__file__).resolve().parent / "bin" / "quickjs.wasm"
_BUILD_HINT = (
    "build it from the repository with scripts/build-quickjs-wasm, then reinstall the "
    "package (pip install ./bindings/python), or pass wasm_binary_path="
)
#: With no `timeout_seconds`, the wall clock still ends a run after a day
#: (fuel ends a busy program long before).
_NO_TIMEOUT_MS = 86_400_000


@dataclass
class ExecutionPolicy:
    """What a sandboxed run may use. `ExecutionPolicy()` gives the
    specification's defaults: 5 billion fuel units, 128 MB of linear
    memory, 2 MB of stdout, 1 MB of stderr, no timeout beyond fuel."""

    fuel_budget: int = 5_000_000_000
    memory_bytes: int = 128_000_000
    stdout_max_bytes: int = 2_000_000
    stderr_max_bytes: int = 1_000_000
    timeout_seconds: Optional[float] = None
    guest_mount_path: str = "/app"
    env: Dict[str, str] = field(default_factory=lambda: {"NODE_ENV": "production"})

    def __post_init__(self) -> None:
        for name in ("fuel_budget", "memory_bytes", "stdout_max_bytes", "stderr_max_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ExecutionPolicy.{name} must be a positive integer, not {value!r}")
        if self.timeout_seconds is not None and not self.timeout_seconds > 0:
            raise ValueError("ExecutionPolicy.timeout_seconds must be positive or None")
        if self.guest_mount_path != "/app":
            raise ValueError("ExecutionPolicy.guest_mount_path: the workspace is always /app")
        if set(self.env) - {"NODE_ENV"} or self.env.get("NODE_ENV", "production") != "production":
            raise ValueError("ExecutionPolicy.env: the guest's only variable is NODE_ENV=production")

    def _native_json(self) -> str:
        timeout_ms = (
            _NO_TIMEOUT_MS
            if self.timeout_seconds is None
            else max(1, int(self.timeout_seconds * 1000))
        )
        return json.dumps(
            {
                "fuel": self.fuel_budget,
                "memory_bytes": self.memory_bytes,
                "stdout_max_bytes": self.stdout_max_bytes,
                "stderr_max_bytes": self.stderr_max_bytes,
                "timeout_ms": timeout_ms,
                "node_env_production": "NODE_ENV" in self.env,
            }
        )


@dataclass
class SandboxResult:
    """What a run did. `files_created` / `files_modified` are relative to
    the session directory, sorted; `user_code.js` and `.metadata.json` are
    never listed. `metadata["runtime"]` is `"javascript"`."""

    success: bool
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    fuel_consumed: Optional[int] = None
    memory_used_bytes: int = 0
    duration_ms: float = 0.0
    workspace_path: str = ""
    files_created: List[str] = field(default_factory=list)
    files_modified: List[str] = field(default_factory=list)
    files_deleted: List[str] = field(default_factory=list)
    metadata: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


@runtime_checkable
class SandboxLoggerProtocol(Protocol):
    """What a sandbox's logger receives."""

    def log_execution_start(
        self, runtime: str, policy: ExecutionPolicy, session_id: Optional[str] = None, **extra: Any
    ) -> None: ...

    def log_execution_complete(
        self, result: SandboxResult, runtime: str, session_id: Optional[str] = None
    ) -> None: ...

    def log_security_event(self, event_type: str, details: Dict[str, Any]) -> None: ...


class SandboxLogger:
    """The default logger: structured records on the standard `logging`
    logger `script_harness.sandbox` (fields in `record.sandbox`)."""

    def __init__(self, logger: Optional[logging.Logger] = None) -> None:
        self.logger = logger or logging.getLogger("script_harness.sandbox")

    def _emit(self, level: int, message: str, **fields: Any) -> None:
        self.logger.log(level, "%s %s", message, json.dumps(fields, default=str), extra={"sandbox": fields})

    def log_execution_start(
        self, runtime: str, policy: ExecutionPolicy, session_id: Optional[str] = None, **extra: Any
    ) -> None:
        self._emit(
            logging.INFO,
            "sandbox.execution.start",
            event="execution.start",
            runtime=runtime,
            session_id=session_id,
            fuel_budget=policy.fuel_budget,
            memory_bytes=policy.memory_bytes,
            stdout_max_bytes=policy.stdout_max_bytes,
            stderr_max_bytes=policy.stderr_max_bytes,
            **extra,
        )

    def log_execution_complete(
        self, result: SandboxResult, runtime: str, session_id: Optional[str] = None
    ) -> None:
        self._emit(
            logging.INFO,
            "sandbox.execution.complete",
            event="execution.complete",
            runtime=runtime,
            session_id=session_id,
            success=result.success,
            exit_code=result.exit_code,
            fuel_consumed=result.fuel_consumed,
            memory_used_bytes=result.memory_used_bytes,
            duration_ms=result.duration_ms,
            files_created=result.files_created,
            files_modified=result.files_modified,
            stdout_truncated=result.metadata.get("stdout_truncated"),
            stderr_truncated=result.metadata.get("stderr_truncated"),
        )

    def log_security_event(self, event_type: str, details: Dict[str, Any]) -> None:
        self._emit(logging.WARNING, f"sandbox.security.{event_type}", event=f"security.{event_type}", **details)


class BaseSandbox(ABC):
    """A session's sandbox: `execute(code)` runs a program in
    `<workspace_root>/<session_id>`, `validate_code(code)` checks it
    without running it."""

    def __init__(
        self,
        policy: ExecutionPolicy,
        session_id: str,
        workspace_root: Union[str, Path],
        logger: Optional[SandboxLoggerProtocol] = None,
    ) -> None:
        self.policy = policy
        self.session_id = session_id
        self.workspace_root = Path(workspace_root)
        self.logger: SandboxLoggerProtocol = logger if logger is not None else SandboxLogger()

    @property
    def workspace(self) -> Path:
        """The session directory, `<workspace_root>/<session_id>`."""
        return self.workspace_root / self.session_id

    @abstractmethod
    def execute(self, code: str, **kwargs: Any) -> SandboxResult:
        """Runs `code`; everything the program did is in the result."""

    @abstractmethod
    def validate_code(self, code: str) -> bool:
        """Whether `code` parses; runs nothing and writes nothing."""


_TRAP_REASONS = {
    "fuel_exhausted": "out_of_fuel",
    "timeout": "timeout",
    "memory_limit": "memory_limit",
    "stack_overflow": "stack_overflow",
    "trap": "trap",
}


class JavaScriptSandbox(BaseSandbox):
    """JavaScript on QuickJS compiled to WASI. `wasm_binary_path` defaults
    to the guest shipped inside this package; a missing binary raises
    `FileNotFoundError` naming the path."""

    def __init__(
        self,
        policy: Optional[ExecutionPolicy] = None,
        session_id: Optional[str] = None,
        workspace_root: Union[str, Path] = "workspace",
        logger: Optional[SandboxLoggerProtocol] = None,
        wasm_binary_path: Union[str, Path, None] = None,
    ) -> None:
        super().__init__(
            policy if policy is not None else ExecutionPolicy(),
            session_id if session_id is not None else str(uuid.uuid4()),
            workspace_root,
            logger,
        )
        self.wasm_binary_path: Union[str, Path] = (
            wasm_binary_path if wasm_binary_path is not None else DEFAULT_WASM_BINARY
        )

    def _binary(self) -> Path:
        path = Path(self.wasm_binary_path)
        if not path.is_file():
            raise FileNotFoundError(
                f"the QuickJS WASI binary {path} does not exist; {_BUILD_HINT}"
            )
        return path

    def execute(self, code: str, **kwargs: Any) -> SandboxResult:
        """Writes `code` to `user_code.js` in the session directory and
        runs it. Raises only when the run cannot happen (missing binary:
        `FileNotFoundError`; a bad session id: `ValueError`)."""
        path = self._binary()
        self.logger.log_execution_start("javascript", self.policy, self.session_id)
        started = time.perf_counter()
        text = _native.sandbox_execute(
            self.policy._native_json(), self.session_id, str(self.workspace_root), str(path), code
        )
        duration_ms = (time.perf_counter() - started) * 1000.0
        raw = json.loads(text)
        metadata: Dict[str, Any] = dict(raw.get("metadata") or {})
        termination = metadata.get("termination", "exited")
        metadata.update(
            {
                "fuel_budget": self.policy.fuel_budget,
                "memory_limit_bytes": self.policy.memory_bytes,
                "memory_pages": -(-int(raw.get("memory_used_bytes", 0)) // 65536),
                "trapped": termination != "exited",
                "wasm_binary_path": str(path),
                "engine_duration_ms": raw.get("duration_ms"),
            }
        )
        if termination in _TRAP_REASONS:
            metadata["trap_reason"] = _TRAP_REASONS[termination]
        result = SandboxResult(
            success=bool(raw.get("success")),
            stdout=raw.get("stdout", ""),
            stderr=raw.get("stderr", ""),
            exit_code=int(raw.get("exit_code", 0)),
            fuel_consumed=raw.get("fuel_consumed"),
            memory_used_bytes=int(raw.get("memory_used_bytes", 0)),
            duration_ms=duration_ms,
            workspace_path=str(raw.get("workspace_path", self.workspace)),
            files_created=list(raw.get("files_created") or []),
            files_modified=list(raw.get("files_modified") or []),
            files_deleted=list(raw.get("files_deleted") or []),
            metadata=metadata,
        )
        if termination == "fuel_exhausted":
            self.logger.log_security_event(
                "fuel_exhaustion",
                {
                    "session_id": self.session_id,
                    "runtime": "javascript",
                    "fuel_budget": self.policy.fuel_budget,
                    "fuel_consumed": result.fuel_consumed,
                },
            )
        self.logger.log_execution_complete(result, "javascript", self.session_id)
        return result

    def validate_code(self, code: str) -> bool:
        """Whether `code` parses as a program: nothing runs, nothing is
        written (not even the session directory)."""
        path = self._binary()
        return _native.sandbox_validate(
            self.policy._native_json(), self.session_id, str(self.workspace_root), str(path), code
        )
