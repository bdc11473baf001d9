"""Every config field as a row: dotted key, type, default, bounds, choices, description.

What ``memrl config schema`` prints and what a docs generator can render: the rows are read from
the pydantic models, so they cannot drift from what the loader accepts. A field validated
against a registry (``algorithm.adv_estimator``, ``engine.kind``) lists the registered names with
the first line of each one's docstring; a ``Literal`` field lists its values.
"""

from __future__ import annotations

import json
import types
import typing
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from memrl.config.registry import NameRegistry, field_registry

_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


@dataclass(frozen=True)
class FieldRow:
    """One leaf field of the config (or of a workflow's options)."""

    key: str
    type: str
    default: Any
    description: str = ""
    bounds: str = ""
    choices: dict[str, str] = field(default_factory=dict)  # name -> one-line summary ("" when none)
    workflow: str | None = None  # workflow.options rows: the workflow whose Options model declares it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def spell_type(annotation: Any) -> str:
    """``int``, ``str``, ``float or None``, ``list[int]``, ``one of "a", "b"``: short and stable."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return spell_type(args[0])
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(spell_type(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(spell_type(a) for a in args)}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def default_of(info: FieldInfo) -> Any:
    """The default as plain JSON data (a factory is called; ``"required"`` when there is none)."""
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else json.loads(json.dumps(value,
                                                                                                      default=str))


def registry_choices(registry: NameRegistry) -> dict[str, str]:
    """Each registered name with the first line of its function's docstring (an alias says whose)."""
    out: dict[str, str] = {}
    first: dict[int, str] = {}
    for name in registry.names:
        entry = registry.get(name)
        if id(entry) in first:
            out[name] = f"same as {first[id(entry)]}"
            continue
        first[id(entry)] = name
        fn = getattr(entry, "fn", None) or getattr(entry, "build", None) or entry
        doc = (getattr(fn, "__doc__", None) or "").strip()
        out[name] = doc.splitlines()[0] if doc else ""
    return out


def _row(key: str, info: FieldInfo, workflow: str | None) -> FieldRow:
    registry = field_registry(info.metadata)
    bounds = ", ".join(f"{sign} {getattr(m, attr)}" for m in info.metadata for attr, sign in _BOUNDS
                       if getattr(m, attr, None) is not None)
    choices = registry_choices(registry) if registry is not None else {}
    kind = "str (registered name or import path)" if registry is not None else spell_type(info.annotation)
    return FieldRow(key, kind, default_of(info), " ".join((info.description or "").split()), bounds, choices,
                    workflow)


def _section(info: FieldInfo) -> type[BaseModel] | None:
    ann = info.annotation
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def field_rows(model: type[BaseModel], prefix: str = "", workflow: str | None = None) -> list[FieldRow]:
    """The leaf fields of ``model`` in schema order, nested sections flattened to dotted keys."""
    rows: list[FieldRow] = []
    for name, info in model.model_fields.items():
        name = info.alias or name  # the key a file uses (trainer.async)
        key = f"{prefix}.{name}" if prefix else name
        sub = _section(info)
        rows += field_rows(sub, key, workflow) if sub is not None else [_row(key, info, workflow)]
    return rows
