"""An environment instance: a database, the tools acting on it, and their observations.

``step`` never raises for a bad call: unknown tools, malformed arguments and
tool refusals come back as error observations (``Error: ...``, as τ²-bench
writes them), because an agent under RL produces all of these and must see
(and be penalised through) the result.

Every environment owns its data: task initialization data, initialization
arguments and call arguments are deep-copied before they reach a database, so
a write in one environment can never show up in another one or in the Task.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from memrl.envs.messages import Message, ToolCall
from memrl.envs.tasks import EnvAssertion, EnvFunctionCall, InitialState
from memrl.envs.toolkit import ToolError, Toolkit, to_text


class ReplayError(ValueError):
    """A message log that τ²-bench refuses to replay (a tool call without its result, or a result
    that the replayed call does not reproduce)."""


def db_hash(db: dict[str, Any] | None) -> str:
    """Hash of a database's canonical JSON, computed as τ²-bench hashes its ``model_dump()``."""
    text = json.dumps(db, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def deep_update(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Merge ``patch`` into ``target`` recursively (τ²-bench initialization_data).

    Values are deep copies: the patch belongs to a Task shared by every environment.
    """
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            deep_update(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _parsed(text: str | None) -> Any:
    try:
        return json.loads(text or "")
    except json.JSONDecodeError:
        return text


class Environment:
    """Agent tools (and, for dual-control domains, user tools) over in-memory databases."""

    def __init__(self, domain: str, policy: str, tools: Toolkit, user_tools: Toolkit | None = None,
                 solo: bool = False, prompts: str = "memrl") -> None:
        self.domain = domain
        self.policy = policy
        self.tools = tools
        self.user_tools = user_tools
        self.prompts = prompts
        for kit in (tools, user_tools):  # whose tool descriptions the agent and the user read
            if kit is not None:
                kit.schema_source = prompts
        self.solo = solo
        self._calls = 0
        self.sync()
        if self._solo_user_tools() and set(tools.tools) & set(user_tools.tools):  # type: ignore[union-attr]
            raise ValueError(f"solo mode: tool names overlap: {sorted(set(tools.tools) & set(user_tools.tools))}")

    # -- acting -------------------------------------------------------------------------------
    def toolkit(self, requestor: str) -> Toolkit:
        if requestor == "user":
            if self.user_tools is None:
                raise ToolError(f"domain {self.domain} has no user tools")
            return self.user_tools
        return self.tools

    def _route(self, name: str, requestor: str) -> Toolkit:
        """The toolkit that answers a call, by τ²-bench's rules: the user may not act in solo mode, and
        in solo mode the agent reaches the user's tools (device actions) by name."""
        if requestor == "user":
            if self.solo:
                raise ToolError("User tool calls are not allowed in solo mode")
            if self.user_tools is None:
                raise ToolError("User tools not available")
            return self.user_tools
        if self._solo_user_tools() and name in self.user_tools.tools:  # type: ignore[union-attr]
            return self.user_tools  # type: ignore[return-value]
        return self.tools

    def _solo_user_tools(self) -> bool:
        """Whether the agent works the user's tools itself (solo mode, a toolkit that allows it)."""
        return self.solo and self.user_tools is not None and self.user_tools.agent_in_solo

    def sync(self) -> None:
        """τ²-bench's ``sync_tools``, run after every successful call, initialization action and
        assertion: an agent toolkit with ``sync_user_state`` pushes its state into the user's world."""
        hook = getattr(self.tools, "sync_user_state", None)
        if hook is not None and self.user_tools is not None:
            hook(self.user_tools)

    def call(self, call: ToolCall, sync: bool = True) -> Any:
        """Run a call and return the raw result; raises (any exception) on refusal. ``sync=False`` skips
        the post-call synchronisation, as τ²-bench's ``make_tool_call`` does for the grader's gold actions."""
        if not isinstance(call.arguments, dict):
            raise ToolError(f"arguments of {call.name} must be a JSON object")
        result = self._route(call.name, call.requestor).call(call.name, copy.deepcopy(call.arguments))
        if sync:
            self.sync()
        return result

    def step(self, call: ToolCall) -> Message:
        """Run one tool call; the observation is the result, or ``Error: ...`` with ``error=True``.

        Any exception a tool raises is an error observation, as in τ²-bench (``f"Error: {e}"``).
        """
        self._calls += 1
        call_id = call.id or f"call_{self._calls}"
        try:
            return Message("tool", to_text(self.call(call)), call_id=call_id, requestor=call.requestor)
        except Exception as err:  # noqa: BLE001 - the agent sees every failure as text
            return Message("tool", f"Error: {err}", error=True, call_id=call_id, requestor=call.requestor)

    async def step_async(self, call: ToolCall) -> Message:
        """:meth:`step`, in a worker thread for a tool marked ``blocking`` (a sandboxed command, a rating
        server): the event loop, and with it every other episode and the engine's answers, goes on meanwhile.
        The same observation either way."""
        try:
            blocking = self._route(call.name, call.requestor).blocking(call.name)
        except ToolError:
            blocking = False  # step answers with the refusal
        return await asyncio.to_thread(self.step, call) if blocking else self.step(call)

    def has_tool(self, name: str, requestor: str = "assistant") -> bool:
        try:
            return name in self._route(name, requestor).tools
        except ToolError:
            return False

    def is_write(self, name: str, requestor: str = "assistant") -> bool:
        """Whether a tool may change a database (τ²-bench's ``mutates_state``: its WRITE tools)."""
        try:
            t = self._route(name, requestor).tools.get(name)
        except ToolError:
            return False
        return t is not None and t.kind == "write"

    # -- state ----------------------------------------------------------------------------------
    def run_function(self, fn: EnvFunctionCall) -> Any:
        """An initialization action or assertion: any public method of the toolkit, tool or not."""
        kit = self.toolkit(fn.env_type)
        method = getattr(kit, fn.func_name, None)
        if method is None or fn.func_name.startswith("_"):
            raise ToolError(f"{fn.env_type} toolkit of {self.domain} has no function {fn.func_name!r}")
        result = method(**copy.deepcopy(fn.arguments))
        self.sync()
        return result

    def _apply_data(self, data: dict[str, Any]) -> None:
        """τ²-bench's initialization data: merged into a copy of the database, which is then
        revalidated. As in τ²-bench, the other side's toolkit is then pointed at the updated
        database (one shared database afterwards)."""
        if data.get("agent_data") is not None:
            db = copy.deepcopy(self.tools.db)
            deep_update(db, data["agent_data"])
            self.tools.db = self.tools.normalize_db(db)
            if self.user_tools is not None and self.user_tools.db is not None:
                self.user_tools.db = self.tools.db
        if data.get("user_data") is not None:
            if self.user_tools is None:
                raise ToolError(f"task has user_data but domain {self.domain} has no user database")
            db = copy.deepcopy(self.user_tools.db)
            deep_update(db, data["user_data"])
            self.user_tools.db = self.user_tools.normalize_db(db)
            self.tools.db = self.user_tools.db

    def set_state(self, initial: InitialState | None, history: Iterable[Message] = (), *,
                  strict: bool = False) -> None:
        """Apply a task's initial data and actions, then replay the state-changing tool calls of a log.

        Only write tools are replayed (τ²-bench's ``mutates_state``); reads cannot change a database.
        With ``strict`` the log must be well formed as τ²-bench requires (every tool call followed by
        its result, no stray results), and each replayed result must equal the logged one; a
        violation raises :class:`ReplayError`. Without it, calls are replayed and failures ignored
        (a failed call changed nothing when it was first made).
        """
        if initial is not None:
            self._apply_data(initial.initialization_data or {})
            for fn in initial.initialization_actions or []:
                self.run_function(fn)
        msgs = list(history)  # (memrl's solo log opens with the ticket as a user message: allowed)
        i = 0
        while i < len(msgs):
            msg = msgs[i]
            i += 1
            if msg.role == "tool":
                if strict:
                    raise ReplayError("Tool message not expected. Tool messages should always follow a tool call.")
                continue
            for call in msg.tool_calls if msg.role in ("assistant", "user") else ():
                result = msgs[i] if i < len(msgs) and msgs[i].role == "tool" else None
                if result is not None:
                    i += 1
                if strict:
                    if result is None:
                        raise ReplayError(f"Tool message expected after the call to {call.name}")
                    if call.id and result.call_id and call.id != result.call_id:
                        raise ReplayError(f"Tool call id mismatch. Got {call.id} and {result.call_id}")
                if not self.has_tool(call.name, call.requestor) or not self.is_write(call.name, call.requestor):
                    continue
                obs = self.step(call)
                if strict and _parsed(obs.content) != _parsed(result.content):  # type: ignore[union-attr]
                    raise ReplayError(f"Replayed call to {call.name} returned {obs.content!r}, "
                                      f"the log says {result.content!r}")  # type: ignore[union-attr]
        self.sync()

    def run_assertion(self, assertion: EnvAssertion) -> bool:
        try:
            value = self.run_function(assertion)
        except Exception:  # noqa: BLE001 - a failing assertion function is a failed check
            return False
        return isinstance(value, bool) and value == assertion.assert_value

    def db_hash(self) -> str:
        return db_hash(self.tools.db)

    def user_db_hash(self) -> str:
        return db_hash(self.user_tools.db if self.user_tools is not None else None)

    def system_prompt(self, task: Any = None) -> str:
        """The agent's system prompt: the policy, or with ``prompts`` tau2 τ²-bench's agent instructions around it
        (in solo mode τ²-bench's solo agent's, which hold the ``task``'s ticket)."""
        if self.prompts == "tau2":
            from memrl.envs.tau2_schemas import tau2_solo_prompt, tau2_system_prompt

            return tau2_solo_prompt(self.policy, task) if self.solo else tau2_system_prompt(self.policy)
        return self.policy

    @property
    def stop_tool(self) -> str | None:
        """The tool whose call ends a solo episode: τ²-bench's solo agent's ``done`` (``prompts`` tau2), else None
        (memrl's solo agent ends by writing text)."""
        if self.prompts == "tau2" and self.solo:
            from memrl.envs.tau2_schemas import tau2_stop_tool

            return tau2_stop_tool()[0]
        return None

    def tool_schemas(self) -> list[dict[str, Any]]:
        """What the agent sees: its tools, plus the user's device tools in solo mode (and the stop tool)."""
        schemas = self.tools.schemas()
        if self._solo_user_tools():
            schemas += self.user_tools.schemas()  # type: ignore[union-attr]
        if self.stop_tool is not None:
            from memrl.envs.tau2_schemas import tau2_stop_tool

            schemas.append(tau2_stop_tool()[1])
        return schemas
