"""τ³'s *discoverable* tools: callable methods that stay out of the tool list until unlocked.

The knowledge base names them (``unlock_discoverable_agent_tool('close_bank_account_7392')``); the
agent unlocks one, learns its parameters from the description built out of its docstring, and
calls it through ``call_discoverable_agent_tool`` with JSON arguments. User discoverable tools go
the other way: the agent hands one to the user, who calls it through ``call_discoverable_user_tool``.

A discoverable tool is still a toolkit tool (τ² can call it by name), so it carries memrl's tool
mark too; :func:`discoverable` also gives it τ³'s qualified name, which Python puts in the text of
a bad call (``KnowledgeTools.x() missing 1 required positional argument``), so those errors read
as τ³'s.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

from memrl.envs.domains.banking_knowledge import records
from memrl.envs.toolkit import Tool, Toolkit, ToolKind, tool

DISCOVERABLE = "__banking_discoverable__"
_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\(([^)]+)\))?\s*:\s*(.+?)$", re.MULTILINE)


def discoverable(kind: ToolKind, owner: str = "KnowledgeTools") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method as a discoverable tool of kind ``kind`` ("write": it changes the database and is
    replayed when an episode is graded), named as a method of τ³'s class ``owner``."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = tool(kind)(fn)
        setattr(fn, DISCOVERABLE, True)
        fn.__qualname__ = f"{owner}.{fn.__name__}"
        return fn

    return mark


def is_discoverable(fn: Any) -> bool:
    return bool(getattr(fn, DISCOVERABLE, False))


def describe(fn: Callable[..., Any]) -> dict[str, Any]:
    """Name, description, parameters and success hint read from the docstring, as τ³ reads them.

    The description is the text before ``Args:``; each ``name (type[, optional]): text`` line is a
    parameter (type ``string`` when absent); the first line after ``Returns:`` is the success hint.
    """
    doc = inspect.getdoc(fn) or ""
    head, *rest = re.split(r"\n\s*Args:\s*\n", doc, maxsplit=1)
    info: dict[str, Any] = {"name": fn.__name__, "description": head.strip(), "parameters": {},
                            "success_message": "Action completed successfully."}
    if not rest:
        return info
    args, *returns = re.split(r"\n\s*Returns:\s*\n", rest[0], maxsplit=1)
    if returns:
        info["success_message"] = returns[0].strip().split("\n")[0].strip()
    for m in _ARG_LINE.finditer(args):
        type_info = m.group(2) or "string"
        kind = re.sub(r",?\s*optional", "", type_info, flags=re.IGNORECASE).strip() or "string"
        info["parameters"][m.group(1)] = {"type": kind, "description": m.group(3).strip(),
                                          "required": "optional" not in type_info.lower()}
    return info


def card(info: dict[str, Any]) -> str:
    """The tool card shown to the agent when it unlocks a tool."""
    params = [f"  - {name}: {p.get('type', 'string')} {'(required)' if p.get('required', True) else '(optional)'}"
              f" - {p.get('description', '')}" for name, p in info.get("parameters", {}).items()]
    body = "\n".join(params) if params else "  (no parameters)"
    return f"Tool: {info['name']}\nDescription: {info['description']}\nParameters:\n{body}"


def tau_order(cls: type) -> list[str]:
    """Tool names in the order τ² lists a toolkit's tools: each class's own tools in definition order,
    the class itself first, then its bases along the MRO."""
    names: list[str] = []
    for klass in cls.__mro__:
        names += [n for n, v in vars(klass).items() if hasattr(v, "__memrl_tool__") and n not in names]
    return names


class BankingToolkit(Toolkit):
    """What the agent's and the user's banking toolkits share: τ³'s unchecked calls, its database
    model, its tool order, and discoverable tools that stay out of the schemas."""

    strict_args = False

    def __init__(self, db: dict[str, Any]) -> None:
        super().__init__(db)
        self.tools = {n: self.tools[n] for n in tau_order(type(self)) if n in self.tools}

    @classmethod
    def normalize_db(cls, db: dict[str, Any]) -> dict[str, Any]:
        return records.normalize_db(db)

    def discoverable_tools(self) -> dict[str, Any]:
        return {n: t.fn for n, t in self.tools.items() if is_discoverable(t.fn)}

    def shown_tools(self) -> list[Tool]:
        """The tools a model is shown: discoverable ones are left out until the knowledge base names them."""
        return [t for t in self.tools.values() if not is_discoverable(t.fn)]
