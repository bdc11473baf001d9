"""An environment instance: a database, the tools acting on it, and their observations.

``step`` never raises for a bad call: unknown tools, malformed arguments and
tool refusals come back as error observations, because an agent under RL
produces all of these and must see (and be penalised through) the result.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from memrl.envs.messages import Message, ToolCall
from memrl.envs.tasks import EnvAssertion, EnvFunctionCall, InitialState
from memrl.envs.toolkit import ToolError, Toolkit, to_text


def db_hash(db: dict[str, Any] | None) -> str:
    """Hash of a database's canonical JSON (key order does not matter)."""
    text = json.dumps(db, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def deep_update(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Merge ``patch`` into ``target`` recursively (τ²-bench initialization_data)."""
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            deep_update(target[key], value)
        else:
            target[key] = value


class Environment:
    """Agent tools (and, for dual-control domains, user tools) over in-memory databases."""

    def __init__(self, domain: str, policy: str, tools: Toolkit, user_tools: Toolkit | None = None,
                 solo: bool = False) -> None:
        self.domain = domain
        self.policy = policy
        self.tools = tools
        self.user_tools = user_tools
        self.solo = solo
        self._calls = 0

    # -- acting -------------------------------------------------------------------------------
    def toolkit(self, requestor: str) -> Toolkit:
        if requestor == "user":
            if self.user_tools is None:
                raise ToolError(f"domain {self.domain} has no user tools")
            return self.user_tools
        return self.tools

    def call(self, call: ToolCall) -> Any:
        """Run a call and return the raw result; raises ToolError/ValueError on refusal."""
        kit = self.toolkit(call.requestor)
        fn = kit.tools.get(call.name)
        if fn is None:
            raise ToolError(f"unknown tool {call.name!r}; available: {', '.join(sorted(kit.tools))}")
        if not isinstance(call.arguments, dict):
            raise ToolError(f"arguments of {call.name} must be a JSON object")
        return fn(call.arguments)

    def step(self, call: ToolCall) -> Message:
        """Run one tool call; the observation is the result, or ``Error: ...`` with ``error=True``."""
        self._calls += 1
        call_id = call.id or f"call_{self._calls}"
        try:
            return Message("tool", to_text(self.call(call)), call_id=call_id)
        except (ToolError, ValueError, KeyError, TypeError) as err:
            return Message("tool", f"Error: {err}", error=True, call_id=call_id)

    def is_write(self, name: str, requestor: str = "assistant") -> bool:
        kit = self.user_tools if requestor == "user" else self.tools
        t = kit.tools.get(name) if kit is not None else None
        return t is not None and t.kind == "write"

    # -- state ----------------------------------------------------------------------------------
    def run_function(self, fn: EnvFunctionCall) -> Any:
        """An initialization action or assertion: any public method of the toolkit, tool or not."""
        kit = self.toolkit(fn.env_type)
        method = getattr(kit, fn.func_name, None)
        if method is None or fn.func_name.startswith("_"):
            raise ToolError(f"{fn.env_type} toolkit of {self.domain} has no function {fn.func_name!r}")
        return method(**fn.arguments)

    def set_state(self, initial: InitialState | None, history: Iterable[Message] = ()) -> None:
        """Apply a task's initial data and actions, then replay the tool calls of a message log."""
        if initial is not None:
            data = initial.initialization_data or {}
            if data.get("agent_data"):
                deep_update(self.tools.db, data["agent_data"])
            if data.get("user_data"):
                if self.user_tools is None:
                    raise ToolError(f"task has user_data but domain {self.domain} has no user database")
                deep_update(self.user_tools.db, data["user_data"])
            for fn in initial.initialization_actions or []:
                self.run_function(fn)
        for msg in history:
            for call in msg.tool_calls if msg.role in ("assistant", "user") else ():
                try:
                    self.call(call)
                except (ToolError, ValueError, KeyError, TypeError):
                    pass  # a failed call changed nothing, as when it was first made

    def run_assertion(self, assertion: EnvAssertion) -> bool:
        try:
            value = bool(self.run_function(assertion))
        except (ToolError, ValueError, KeyError, TypeError):
            return False
        return value == assertion.assert_value

    def db_hash(self) -> str:
        return db_hash(self.tools.db)

    def user_db_hash(self) -> str:
        return db_hash(self.user_tools.db if self.user_tools is not None else None)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return self.tools.schemas()
