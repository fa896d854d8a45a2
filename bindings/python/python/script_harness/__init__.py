"""script-harness: run JavaScript/TypeScript written by a language model in
a sandboxed engine, with Python tools, and get one structured report back.

```python
import script_harness as h
print(h.Harness().run("return 1 + 1").value)  # 2
```
"""

from ._harness import SUSPEND, ApprovalRequest, Harness, Session
from ._report import (
    ApprovalRecord,
    ConsoleEntry,
    ErrorCode,
    Location,
    Metrics,
    ProgressEvent,
    Report,
    ScriptError,
    ToolCallRecord,
)
from ._sandbox import (
    DEFAULT_WASM_BINARY,
    BaseSandbox,
    ExecutionPolicy,
    JavaScriptSandbox,
    SandboxLogger,
    SandboxLoggerProtocol,
    SandboxResult,
)
from ._tools import DeferredTool, Tool, ToolContext, schema_for, tool
from ._native import __version__, engines

__all__ = [
    "ApprovalRecord",
    "ApprovalRequest",
    "BaseSandbox",
    "ConsoleEntry",
    "DEFAULT_WASM_BINARY",
    "DeferredTool",
    "ErrorCode",
    "ExecutionPolicy",
    "Harness",
    "JavaScriptSandbox",
    "Location",
    "Metrics",
    "ProgressEvent",
    "Report",
    "SandboxLogger",
    "SandboxLoggerProtocol",
    "SandboxResult",
    "SUSPEND",
    "Session",
    "ScriptError",
    "Tool",
    "ToolCallRecord",
    "ToolContext",
    "__version__",
    "engines",
    "schema_for",
    "tool",
]
