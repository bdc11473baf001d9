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


def tool(kind: ToolKind) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a toolkit method as a tool. ``write`` tools may change the database."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__memrl_tool__ = kind  # type: ignore[attr-defined]
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
        sig = inspect.signature(method)
        hints = get_type_hints(method)
        desc, arg_docs = _doc_parts(method.__doc__ or "")
        fields: dict[str, Any] = {}
        for name, p in sig.parameters.items():
            if name == "self":
                continue
            ann = hints.get(name, Any)
            default = ... if p.default is inspect.Parameter.empty else p.default
            from pydantic import Field

            fields[name] = (ann, Field(default, description=arg_docs.get(name)))
        model = create_model(f"{method.__name__}_args", __config__=ConfigDict(extra="forbid", strict=False),
                             **fields)
        return cls(method.__name__, method.__memrl_tool__, desc, model, method)  # type: ignore[attr-defined]

    def schema(self) -> dict[str, Any]:
        """OpenAI function-calling schema (``{"type": "function", "function": {...}}``)."""
        params = self.args_model.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": params}}

    def __call__(self, arguments: dict[str, Any]) -> Any:
        try:
            args = self.args_model.model_validate(arguments)
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'arguments'}: {e['msg']}"
                                 for e in err.errors())
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None
        return self.fn(**{k: getattr(args, k) for k in self.args_model.model_fields})


class Toolkit:
    """Base class of a domain's tools; ``self.db`` is the mutable database (plain dicts)."""

    def __init__(self, db: dict[str, Any]) -> None:
        self.db = db
        self.tools: dict[str, Tool] = {}
        for name in dir(type(self)):
            attr = getattr(type(self), name)
            if callable(attr) and hasattr(attr, "__memrl_tool__"):
                self.tools[name] = Tool.from_method(getattr(self, name))

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]


def to_text(value: Any) -> str:
    """A tool result as the text the agent reads (JSON for structures, as τ²-bench shows them)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
