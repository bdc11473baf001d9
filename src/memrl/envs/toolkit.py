"""Tools as plain Python methods: schema from the signature, validation by pydantic.

A domain writes its tools as methods of a :class:`Toolkit` subclass, marked with
``@tool("read" | "write" | "generic")``. The JSON schema the model sees, the
argument validation and the error text all come from the signature and the
docstring, so a tool is written once and cannot drift from its schema.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

ToolKind = Literal["read", "write", "generic"]


class ToolError(Exception):
    """A tool refused the call (bad id, wrong state...): shown to the agent as an error observation."""


def tool(kind: ToolKind | Callable[..., Any] = "generic", *, blocking: bool = False) -> Any:
    """Mark a toolkit method as a tool: ``@tool("read")``, ``@tool("write")`` (may change the database),
    ``@tool("generic")``; bare ``@tool`` is ``generic`` (it once made the method vanish from the tools).

    ``blocking``: the tool waits on something outside the process (a sandboxed command, a rating or
    embedding server), so an episode runs it in a worker thread (:meth:`Environment.step_async`) and the
    other episodes and the engine go on meanwhile. Only for tools that touch nothing shared but read-only
    data: the others run on the event loop, in the order the episodes call them.
    """

    if callable(kind):  # bare @tool
        return tool("generic", blocking=blocking)(kind)
    if kind not in ("read", "write", "generic"):
        raise ValueError(f"@tool({kind!r}): a tool's kind is 'read', 'write' or 'generic'")

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__memrl_tool__ = kind  # type: ignore[attr-defined]
        fn.__memrl_blocking__ = blocking  # type: ignore[attr-defined]
        return fn

    return mark


def _doc_parts(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {arg: description}) from a Google-style docstring."""
    doc = inspect.cleandoc(doc or "")
    head, _, rest = doc.partition("\nArgs:")
    desc = re.split(r"\n(?:Returns|Raises):", head)[0].strip()
    args: dict[str, str] = {}
    body = re.split(r"\n(?:Returns|Raises):", rest)[0]
    current = None
    for line in body.splitlines():
        m = re.match(r"\s{0,8}(\w+)\s*(?:\([^)]*\))?:\s*(.*)", line)
        if m and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = m.group(1)
            args[current] = m.group(2).strip()
        elif current and line.strip():
            args[current] += " " + line.strip()
    return " ".join(desc.split()), args


def _spec(method: Callable[..., Any]) -> tuple[str, type[BaseModel]]:
    """(description, argument model) of a tool method, from its signature and docstring."""
    from pydantic import Field

    sig = inspect.signature(method)
    hints = get_type_hints(method)
    desc, arg_docs = _doc_parts(method.__doc__ or "")
    fields: dict[str, Any] = {}
    for name, p in sig.parameters.items():
        if name == "self":
            continue
        ann = hints.get(name, Any)
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[name] = (ann, Field(default, description=arg_docs.get(name)))
    model = create_model(f"{method.__name__}_args", __config__=ConfigDict(extra="forbid", strict=False), **fields)
    return desc, model


_SPECS: dict[Callable[..., Any], tuple[str, type[BaseModel]]] = {}  # every environment reuses its class's


@dataclass
class Tool:
    """One callable tool: name, kind, description, argument model and the bound function."""

    name: str
    kind: ToolKind
    description: str
    args_model: type[BaseModel]
    fn: Callable[..., Any]

    @classmethod
    def from_method(cls, method: Callable[..., Any]) -> Tool:
        """The tool of a (bound) method; the description and argument model are built once per function."""
        fn = getattr(method, "__func__", method)
        spec = _SPECS.get(fn)
        if spec is None:
            spec = _SPECS[fn] = _spec(method)
        return cls(method.__name__, method.__memrl_tool__, spec[0], spec[1], method)  # type: ignore[attr-defined]

    def schema(self) -> dict[str, Any]:
        """OpenAI function-calling schema (``{"type": "function", "function": {...}}``)."""
        params = self.args_model.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": params}}

    def __call__(self, arguments: dict[str, Any], strict: bool = True) -> Any:
        """Run the tool. ``strict`` validates (and coerces) the arguments with pydantic first;
        otherwise they go to the method as Python keyword arguments, as τ²-bench calls its tools:
        no type checks, and a missing or extra argument is Python's own ``TypeError``."""
        if not strict:
            return self.fn(**arguments)
        try:
            args = self.args_model.model_validate(arguments)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'arguments'}: {e['msg']}"
                                 for e in err.errors())
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None
        return self.fn(**{k: getattr(args, k) for k in self.args_model.model_fields})


class Toolkit:
    """Base class of a domain's tools; ``self.db`` is the mutable database (plain dicts).

    ``strict_args``: validate arguments against the signature before the call (memrl's own
    domains). τ²-bench domains set it False so that a call behaves as in τ²-bench, which
    passes the agent's arguments to the Python method unchecked.
    """

    strict_args: bool = True
    agent_in_solo: bool = True  # a user toolkit: in solo mode the agent calls these tools itself (τ²-bench)
    # τ²-bench's class for these tools ("tau2.domains.retail.tools:RetailTools"): with schema_source "tau2" the
    # agent reads its schemas (memrl.envs.tau2_schemas); "memrl": the schemas of memrl's own docstrings
    tau2_class: str | None = None
    schema_source: str = "memrl"

    def __init__(self, db: dict[str, Any]) -> None:
        self.db = db
        self.tools: dict[str, Tool] = {}
        for name in dir(type(self)):
            attr = getattr(type(self), name)
            if callable(attr) and hasattr(attr, "__memrl_tool__"):
                self.tools[name] = Tool.from_method(getattr(self, name))

    @classmethod
    def normalize_db(cls, db: dict[str, Any]) -> dict[str, Any]:
        """The database as the benchmark's data model holds it (field order, defaults, floats).

        τ²-bench loads each database into pydantic models, so unset optional fields exist
        (as null) and declared floats are floats; a domain overrides this to match, which
        makes observations and database hashes the same as τ²-bench's. Default: unchanged.
        """
        return db

    def shown_tools(self) -> list[Tool]:
        """The tools a model is shown (a toolkit may hold tools it reveals later)."""
        return list(self.tools.values())

    def schemas(self) -> list[dict[str, Any]]:
        """The shown tools' schemas: from memrl's docstrings, or (``schema_source`` tau2) τ²-bench's own."""
        if self.schema_source == "tau2":
            from memrl.envs.tau2_schemas import tau2_schemas

            return tau2_schemas(self, [t.name for t in self.shown_tools()])
        return [t.schema() for t in self.shown_tools()]

    def blocking(self, name: str) -> bool:
        """Whether tool ``name`` is marked ``blocking`` (see :func:`tool`); False for an unknown name."""
        fn = self.tools.get(name)
        return fn is not None and bool(getattr(fn.fn, "__memrl_blocking__", False))

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run tool ``name``; unknown names fail with τ²-bench's wording."""
        fn = self.tools.get(name)
        if fn is None:
            raise ToolError(f"Tool '{name}' not found.")
        return fn(arguments, strict=self.strict_args)


@dataclass
class Raw:
    """A tool result that τ²-bench returns as a plain dict/list (not a pydantic model): its
    ``to_json_str`` then writes every nested number and boolean as a string (``{"a": "1.5"}``)."""

    value: Any


def _stringify(value: Any) -> Any:
    if isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, dict):
        return {k: _stringify(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_stringify(v) for v in value]
    return value


def to_text(value: Any) -> str:
    """A tool result as the text the agent reads: the string τ²-bench would put in the tool message.

    τ²-bench passes strings through, writes a bare number or boolean with ``str`` (``True``,
    ``5.0``) and dumps anything else with ``json.dumps`` defaults: ``", "``/``": "`` separators,
    non-ASCII escaped, unset fields as ``null``. memrl's dicts stand for τ²'s pydantic models, whose
    numbers stay numbers in the dump.
    """
    if isinstance(value, Raw):
        value = _stringify(value.value)
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return str(value)
    return json.dumps(value, default=str)
