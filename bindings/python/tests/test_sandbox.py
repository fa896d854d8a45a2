"""The workspace-sandbox specification's scenarios, from Python."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from script_harness import (
    DEFAULT_WASM_BINARY,
    BaseSandbox,
    ExecutionPolicy,
    JavaScriptSandbox,
    SandboxResult,
)


class CaptureLogger:
    def __init__(self) -> None:
        self.events: List[Tuple[str, Any]] = []

    def log_execution_start(
        self, runtime: str, policy: ExecutionPolicy, session_id: Optional[str] = None, **extra: Any
    ) -> None:
        self.events.append(("start", (runtime, session_id)))

    def log_execution_complete(
        self, result: SandboxResult, runtime: str, session_id: Optional[str] = None
    ) -> None:
        self.events.append(("complete", result))

    def log_security_event(self, event_type: str, details: Dict[str, Any]) -> None:
        self.events.append((event_type, details))


@pytest.fixture
def sandbox(tmp_path: Path) -> JavaScriptSandbox:
    return JavaScriptSandbox(ExecutionPolicy(), "s1", tmp_path)


def test_contract_and_defaults(tmp_path: Path) -> None:
    assert issubclass(JavaScriptSandbox, BaseSandbox)
    with pytest.raises(TypeError):
        BaseSandbox(ExecutionPolicy(), "x", tmp_path)  # type: ignore[abstract]
    p = ExecutionPolicy()
    assert (p.fuel_budget, p.memory_bytes, p.stdout_max_bytes, p.stderr_max_bytes, p.timeout_seconds) == (
        5_000_000_000,
        128_000_000,
        2_000_000,
        1_000_000,
        None,
    )
    with pytest.raises(ValueError):
        ExecutionPolicy(fuel_budget=0)
    sb = JavaScriptSandbox(session_id="abc", workspace_root=tmp_path)
    assert sb.wasm_binary_path == DEFAULT_WASM_BINARY and DEFAULT_WASM_BINARY.is_file()
    assert sb.workspace == tmp_path / "abc" and sb.logger is not None
    assert JavaScriptSandbox(workspace_root=tmp_path).session_id  # a fresh uuid


def test_hello(sandbox: JavaScriptSandbox) -> None:
    r = sandbox.execute("console.log('Hello from QuickJS')")
    assert isinstance(r, SandboxResult)
    assert r.success is True and r.exit_code == 0
    assert r.stdout == "Hello from QuickJS\n" and r.stderr == ""
    assert r.fuel_consumed is not None and r.fuel_consumed > 0
    assert r.metadata["runtime"] == "javascript" and r.metadata["session_id"] == "s1"
    assert r.metadata["stdout_truncated"] is False and r.metadata["stderr_truncated"] is False


def test_file_io_and_deltas(sandbox: JavaScriptSandbox) -> None:
    r = sandbox.execute(
        "const fs = require('fs'); fs.writeFileSync('/app/output.txt', 'data');"
        "fs.mkdirSync('sub/dir', {recursive: true}); fs.writeFileSync('sub/dir/b.txt', 'b');"
        "console.log(fs.readFileSync('output.txt', 'utf8'))"
    )
    assert r.success, r.stderr
    assert r.stdout == "data\n"
    assert r.files_created == ["output.txt", "sub/dir/b.txt"] and r.files_modified == []
    assert (sandbox.workspace / "output.txt").read_text() == "data"
    assert "user_code.js" not in r.files_created
    r2 = sandbox.execute(
        "const fs = require('fs'); fs.writeFileSync('output.txt', 'changed');"
        "fs.writeFileSync('sub/dir/b.txt', 'b'); fs.writeFileSync('new.txt', 'n')"
    )
    assert r2.files_created == ["new.txt"] and r2.files_modified == ["output.txt"]
    assert all(not Path(p).is_absolute() for p in r2.files_created + r2.files_modified)


def test_errors_go_to_stderr_in_order(sandbox: JavaScriptSandbox) -> None:
    r = sandbox.execute("console.log('a'); console.error('b'); console.log('c'); console.warn('d')")
    assert r.success and r.stdout == "a\nc\n" and r.stderr == "b\nd\n"
    only = sandbox.execute("console.error('only stderr')")
    assert only.stdout == "" and only.stderr == "only stderr\n" and only.success


def test_syntax_and_runtime_errors(sandbox: JavaScriptSandbox) -> None:
    s = sandbox.execute("const x = ;")
    assert not s.success and s.exit_code != 0 and "SyntaxError" in s.stderr
    r = sandbox.execute("console.log('before'); throw new Error('Intentional error')")
    assert not r.success and r.exit_code == 1
    assert r.stdout == "before\n" and "Intentional error" in r.stderr


def test_validate_code_has_no_side_effects(tmp_path: Path) -> None:
    sb = JavaScriptSandbox(ExecutionPolicy(), "v", tmp_path)
    assert sb.validate_code("const f = (a, b) => a + b; class X { #p = 1 }") is True
    assert sb.validate_code("const x = ;") is False
    assert sb.validate_code("require('fs').writeFileSync('x', 'y')") is True
    assert not (tmp_path / "v").exists()


def test_metrics(sandbox: JavaScriptSandbox) -> None:
    started = time.perf_counter()
    r = sandbox.execute("let s = 0; for (let i = 0; i < 1e5; i++) s += i; console.log(s)")
    wall_ms = (time.perf_counter() - started) * 1000
    assert r.stdout == "4999950000\n"
    assert 0 < r.duration_ms <= wall_ms + 1
    assert r.memory_used_bytes > 0 and r.metadata["memory_pages"] > 0
    assert r.metadata["fuel_budget"] == 5_000_000_000
    assert r.metadata["memory_limit_bytes"] == 128_000_000
    assert r.workspace_path == str((sandbox.workspace).resolve())


@pytest.mark.parametrize("path", ["/etc/passwd", "/app/../etc/passwd", "../other/x"])
def test_paths_outside_the_workspace_are_refused(sandbox: JavaScriptSandbox, path: str) -> None:
    r = sandbox.execute(
        f"try {{ require('fs').readFileSync({json.dumps(path)}, 'utf8'); console.log('READ') }}"
        "catch (e) { console.log(e.code) }"
    )
    assert r.stdout == "EACCES\n", (r.stdout, r.stderr)


def test_fuel_exhaustion_is_a_security_event(tmp_path: Path) -> None:
    log = CaptureLogger()
    sb = JavaScriptSandbox(ExecutionPolicy(fuel_budget=50_000_000), "f", tmp_path, logger=log)
    r = sb.execute("while (true) {}")
    assert not r.success and r.exit_code != 0
    assert r.metadata["trap_reason"] == "out_of_fuel" and r.metadata["trapped"] is True
    assert "fuel" in r.stderr
    kinds = [k for k, _ in log.events]
    assert kinds == ["start", "fuel_exhaustion", "complete"]
    assert log.events[0][1] == ("javascript", "f")
    assert log.events[-1][1] is r
    assert log.events[1][1]["fuel_budget"] == 50_000_000


def test_memory_limit(tmp_path: Path) -> None:
    sb = JavaScriptSandbox(ExecutionPolicy(memory_bytes=32 << 20), "m", tmp_path)
    r = sb.execute("const xs = []; while (true) xs.push(new Array(1e6).fill(1))")
    assert not r.success
    assert "out of memory" in r.stderr.lower() or r.metadata.get("trap_reason") == "memory_limit"
    assert r.memory_used_bytes <= 32 << 20
    assert sb.execute("console.log('fine')").stdout == "fine\n"


def test_output_caps(tmp_path: Path) -> None:
    sb = JavaScriptSandbox(ExecutionPolicy(stdout_max_bytes=100, stderr_max_bytes=50), "o", tmp_path)
    r = sb.execute("for (let i = 0; i < 1000; i++) { console.log('x'.repeat(10)); console.error('y'.repeat(10)) }")
    assert len(r.stdout.encode()) <= 100 and len(r.stderr.encode()) <= 50
    assert r.metadata["stdout_truncated"] is True and r.metadata["stderr_truncated"] is True


def test_timeout(tmp_path: Path) -> None:
    sb = JavaScriptSandbox(ExecutionPolicy(timeout_seconds=0.2, fuel_budget=10**15), "t", tmp_path)
    r = sb.execute("while (true) {}")
    assert not r.success and r.metadata["trap_reason"] == "timeout"


def test_sessions_are_isolated(tmp_path: Path) -> None:
    a = JavaScriptSandbox(ExecutionPolicy(), "alice", tmp_path)
    b = JavaScriptSandbox(ExecutionPolicy(), "bob", tmp_path)
    a.execute("require('fs').writeFileSync('secret.txt', 'a')")
    r = b.execute(
        "const fs = require('fs'); console.log(fs.existsSync('secret.txt'));"
        "try { fs.readFileSync('../alice/secret.txt') } catch (e) { console.log(e.code) }"
    )
    assert r.stdout == "false\nEACCES\n"
    with pytest.raises(ValueError):
        JavaScriptSandbox(ExecutionPolicy(), "../alice", tmp_path).execute("1")


def test_metadata_json_updated_at(sandbox: JavaScriptSandbox) -> None:
    sandbox.execute("1")
    meta_path = sandbox.workspace / ".metadata.json"
    first = json.loads(meta_path.read_text())
    time.sleep(1.1)
    r = sandbox.execute("2")
    second = json.loads(meta_path.read_text())
    assert first["session_id"] == "s1" and second["runs"] == first["runs"] + 1
    assert second["updated_at"] > first["updated_at"] and second["created_at"] == first["created_at"]
    assert ".metadata.json" not in r.files_created + r.files_modified


def test_custom_and_missing_binary(tmp_path: Path) -> None:
    custom = tmp_path / "bin" / "my-quickjs.wasm"
    custom.parent.mkdir()
    shutil.copy(DEFAULT_WASM_BINARY, custom)
    sb = JavaScriptSandbox(ExecutionPolicy(), "c", tmp_path / "ws", wasm_binary_path=str(custom))
    assert sb.execute("console.log(1+1)").stdout == "2\n"
    missing = JavaScriptSandbox(ExecutionPolicy(), "n", tmp_path, wasm_binary_path="bin/nope.wasm")
    with pytest.raises(FileNotFoundError, match="bin/nope.wasm") as info:
        missing.execute("console.log(1)")
    assert "build-quickjs-wasm" in str(info.value)
    with pytest.raises(FileNotFoundError):
        missing.validate_code("1")


def test_default_logger_uses_logging(sandbox: JavaScriptSandbox, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with caplog.at_level(logging.INFO, logger="script_harness.sandbox"):
        sandbox.execute("console.log(1)")
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("sandbox.execution.start") for m in messages)
    assert any(m.startswith("sandbox.execution.complete") for m in messages)
