"""Tools written in Python: `Tool`, the `@tool` decorator and the JSON
schema it derives from type hints (or from a pydantic model)."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import sys
import typing
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Tuple,
    Union,
    overload,
)

from . import _native

JsonSchema = Dict[str, Any]
NeedsApproval = Union[bool, Callable[[Any], Union[bool, Awaitable[bool]]], None]


class ToolContext:
    """What a tool gets besides its arguments: the tool's name and whether
    the script still needs the answer."""

    __slots__ = ("tool", "_call")

    def __init__(self, tool: str, call: Optional[_native.Call]) -> None:
        self.tool = tool
        self._call = call

    @property
    def cancelled(self) -> bool:
        """True once the script no longer needs the result (timeout,
        cancellation, a lost `Promise.race`, the script ended). Long tools
        should check it and return early."""
        return self._call is not None and self._call.cancelled

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """Runs `callback()` once, on another thread, when the call is
        cancelled (at once if it already is)."""
        if self._call is not None:
            self._call.on_cancel(callback)


def _takes_context(fn: Callable[..., Any]) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in positional)


class Tool:
    """A tool scripts call as `tools.<name>(args)`.

    `fn(args)` or `fn(args, ctx)` receives the validated arguments (a
    dict) and, when it takes two arguments, a `ToolContext`; it may be a
    plain or an `async def` function and returns anything JSON can hold
    (dataclasses and pydantic models are converted). An exception becomes
    the script's ToolExecutionError with its message. `needs_approval` is
    True (every call asks the harness's `approvals` callable) or a
    function of the arguments deciding per call.
    """

    def __init__(
        self,
        name: str,
        description: str,
        schema: Optional[Mapping[str, Any]],
        fn: Callable[..., Any],
        needs_approval: NeedsApproval = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("a tool needs a name")
        if not callable(fn):
            raise TypeError(f"tool {name}: fn must be callable")
        self.name = name
        self.description = description or ""
        self.schema: JsonSchema = dict(schema) if schema is not None else {"type": "object"}
        self.fn = fn
        self.needs_approval = needs_approval
        self._with_context = _takes_context(fn)
        self._original: Callable[..., Any] = fn

    def invoke(self, args: Any, ctx: ToolContext) -> Any:
        """Calls the function: its result, or an awaitable of it."""
        if self._with_context:
            return self.fn(args, ctx)
        return self.fn(args)

    #: Results arrive from outside, at `Harness.resume` (see `DeferredTool`).
    deferred = False

    def spec(self) -> Dict[str, Any]:
        """What the native side needs to know (no function)."""
        # The tool spec every binding sends (harness::embed::tool_from_spec).
        spec: Dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.schema,
            "needsApproval": self.needs_approval is not None and self.needs_approval is not False,
        }
        if self.deferred:
            spec["deferred"] = True
        return spec

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The underlying function, for calling it from Python directly."""
        return self._original(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"


class DeferredTool(Tool):
    """A tool whose results arrive from outside (a person, a webhook,
    another agent): a call suspends a run of a harness made with
    `suspend=...` (engine "wasi"), and its answer is given to
    `Harness.resume(..., answers={call_id: result})`. In any other run the
    call fails with ToolExecutionError."""

    deferred = True

    def __init__(self, name: str, description: str = "", schema: Optional[Mapping[str, Any]] = None) -> None:
        def never(_args: Any) -> Any:
            raise RuntimeError(f"{name} is deferred: its result arrives at resume")

        super().__init__(name, description, schema, never)


# --- schemas from type hints -------------------------------------------------

_NONE = type(None)


def _is_pydantic_model(tp: Any) -> bool:
    return (
        inspect.isclass(tp)
        and hasattr(tp, "model_json_schema")
        and hasattr(tp, "model_validate")
    )


def _is_typeddict(tp: Any) -> bool:
    return inspect.isclass(tp) and issubclass(tp, dict) and hasattr(tp, "__annotations__") and hasattr(
        tp, "__total__"
    )


def schema_for(tp: Any) -> JsonSchema:
    """The JSON schema of a Python type annotation."""
    if tp is inspect.Parameter.empty or tp is Any or tp is object:
        return {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        inner = schema_for(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                inner = {**inner, "description": extra}
        return inner
    if tp is _NONE or tp is None:
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is Union or (origin is not None and getattr(origin, "__name__", "") == "UnionType"):
        members = [a for a in args if a is not _NONE]
        schemas = [schema_for(a) for a in members]
        if len(members) < len(args):
            schemas.append({"type": "null"})
        return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    if inspect.isclass(tp) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if _is_pydantic_model(tp):
        return dict(tp.model_json_schema())
    if dataclasses.is_dataclass(tp) and inspect.isclass(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        props = {f.name: schema_for(hints.get(f.name, Any)) for f in dataclasses.fields(tp)}
        required = [
            f.name
            for f in dataclasses.fields(tp)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        return {"type": "object", "properties": props, "required": required}
    if _is_typeddict(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        required_keys = getattr(tp, "__required_keys__", frozenset(hints))
        return {
            "type": "object",
            "properties": {k: schema_for(v) for k, v in hints.items()},
            "required": sorted(required_keys),
        }
    if origin in (list, List, tuple, Tuple, set, frozenset) or tp in (list, tuple, set, frozenset):
        if origin in (tuple, Tuple) and args and not (len(args) == 2 and args[1] is Ellipsis):
            return {"type": "array", "prefixItems": [schema_for(a) for a in args], "minItems": len(args), "maxItems": len(args)}
        item = schema_for(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    import collections.abc as cabc

    if origin in (cabc.Sequence, cabc.Iterable, cabc.Set):
        return {"type": "array", "items": schema_for(args[0])} if args else {"type": "array"}
    if origin in (dict, Dict, cabc.Mapping) or tp in (dict,):
        if len(args) == 2:
            value = schema_for(args[1])
            return {"type": "object", "additionalProperties": value} if value else {"type": "object"}
        return {"type": "object"}
    raise TypeError(f"no JSON schema for the annotation {tp!r}")


def _doc_parts(fn: Callable[..., Any]) -> Tuple[str, Dict[str, str]]:
    """The docstring's summary and the `Args:` section's descriptions."""
    doc = inspect.getdoc(fn) or ""
    summary_lines: List[str] = []
    params: Dict[str, str] = {}
    lines = doc.splitlines()
    i = 0
    while i < len(lines) and lines[i].strip():
        summary_lines.append(lines[i].strip())
        i += 1
    in_args = False
    current: Optional[str] = None
    for line in lines[i:]:
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Parameters):", stripped):
            in_args = True
            continue
        if in_args:
            if not stripped:
                continue
            if not line.startswith((" ", "\t")):
                in_args = False
                continue
            m = re.match(r"\s*(\w+)\s*(\([^)]*\))?\s*:\s*(.*)", line)
            if m and (line.startswith("    ") and not line.startswith("        ")):
                current = m.group(1)
                params[current] = m.group(3).strip()
            elif current:
                params[current] = (params[current] + " " + stripped).strip()
    return " ".join(summary_lines), params


def _is_context(p: inspect.Parameter, hints: Mapping[str, Any]) -> bool:
    return hints.get(p.name) is ToolContext or p.name in ("ctx", "context") and p.name not in hints


def _from_function(
    fn: Callable[..., Any],
    name: Optional[str],
    description: Optional[str],
    needs_approval: NeedsApproval,
    localns: Optional[Mapping[str, Any]] = None,
) -> Tool:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except NameError:
        # `from __future__ import annotations` with a type defined in the
        # function that applied the decorator: look there too.
        hints = typing.get_type_hints(fn, localns=dict(localns or {}), include_extras=True)
    summary, param_docs = _doc_parts(fn)
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    ctx_param = next((p.name for p in params if _is_context(p, hints)), None)
    params = [p for p in params if p.name != ctx_param]
    is_async = inspect.iscoroutinefunction(fn)

    model = None
    if len(params) == 1 and _is_pydantic_model(hints.get(params[0].name)):
        model = hints[params[0].name]
        schema = dict(model.model_json_schema())
    else:
        props: Dict[str, Any] = {}
        required: List[str] = []
        for p in params:
            s = schema_for(hints.get(p.name, inspect.Parameter.empty))
            if p.name in param_docs and "description" not in s:
                s = {**s, "description": param_docs[p.name]}
            if p.default is not inspect.Parameter.empty:
                try:
                    import json

                    json.dumps(p.default)
                    s = {**s, "default": p.default}
                except (TypeError, ValueError):
                    pass
            else:
                required.append(p.name)
            props[p.name] = s
        schema = {"type": "object", "properties": props, "additionalProperties": False}
        if required:
            schema["required"] = required

    def call_args(args: Mapping[str, Any], ctx: ToolContext) -> Dict[str, Any]:
        if model is not None:
            kwargs: Dict[str, Any] = {params[0].name: model.model_validate(dict(args))}
        else:
            kwargs = dict(args)
        if ctx_param is not None:
            kwargs[ctx_param] = ctx
        return kwargs

    if is_async:

        async def run_async(args: Mapping[str, Any], ctx: ToolContext) -> Any:
            return await fn(**call_args(args, ctx))

        wrapper: Callable[..., Any] = run_async
    else:

        def run_sync(args: Mapping[str, Any], ctx: ToolContext) -> Any:
            return fn(**call_args(args, ctx))

        wrapper = run_sync

    t = Tool(
        name or fn.__name__,
        description if description is not None else summary,
        schema,
        wrapper,
        needs_approval,
    )
    t.__doc__ = fn.__doc__
    # Calling the Tool from Python calls the decorated function itself.
    t._original = fn
    return t


@overload
def tool(fn: Callable[..., Any]) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    needs_approval: NeedsApproval = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Optional[Callable[..., Any]] = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    needs_approval: NeedsApproval = None,
) -> Union[Tool, Callable[[Callable[..., Any]], Tool]]:
    """Makes a `Tool` of a function, its schema derived from the type
    hints (or from the pydantic model that is its only parameter), its
    description from the docstring's first paragraph and each argument's
    from an `Args:` section. A parameter annotated `ToolContext` (or named
    `ctx`) receives the call's context.

    ```python
    @tool
    def add(a: int, b: int = 1) -> int:
        '''Adds two numbers.'''
        return a + b
    ```
    """

    caller = sys._getframe(1)
    localns = dict(caller.f_locals) if caller.f_code.co_name != "<module>" else None
    del caller

    def make(f: Callable[..., Any]) -> Tool:
        return _from_function(f, name, description, needs_approval, localns)

    if fn is not None:
        return make(fn)
    return make
