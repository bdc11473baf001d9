"""Tools: schema from signatures, validation, and error observations instead of crashes."""

from __future__ import annotations

from typing import Literal

from memrl.envs.environment import Environment, db_hash
from memrl.envs.messages import Message, ToolCall
from memrl.envs.toolkit import ToolError, Toolkit, tool


class Counter(Toolkit):
    @tool("write")
    def add(self, key: str, amount: int = 1, mode: Literal["inc", "dec"] = "inc") -> dict:
        """Add to a counter.

        Args:
            key: Which counter.
            amount: How much, such as 2.
            mode: 'inc' or 'dec'.
        """
        if key not in self.db:
            raise ToolError(f"no counter {key}")
        self.db[key] += amount if mode == "inc" else -amount
        return {key: self.db[key]}

    @tool("read")
    def get(self, key: str) -> int:
        """Read a counter.

        Args:
            key: Which counter.
        """
        return self.db[key]

    def helper(self) -> None:  # not a tool
        return None


def env() -> Environment:
    return Environment("counter", "policy", Counter({"a": 1}))


def test_schema_comes_from_signature_and_docstring():
    schema = {s["function"]["name"]: s["function"] for s in Counter({}).schemas()}
    assert set(schema) == {"add", "get"}
    add = schema["add"]
    assert add["description"] == "Add to a counter."
    params = add["parameters"]
    assert params["required"] == ["key"]
    assert params["properties"]["amount"] == {"default": 1, "description": "How much, such as 2.", "type": "integer"}
    assert params["properties"]["mode"]["enum"] == ["inc", "dec"]
    assert params["additionalProperties"] is False


def test_step_runs_a_valid_call_and_changes_the_db():
    e = env()
    obs = e.step(ToolCall("add", {"key": "a", "amount": 2}))
    assert not obs.error and obs.content == '{"a": 3}'
    assert e.tools.db == {"a": 3}


def test_bad_calls_are_error_observations_not_crashes():
    e = env()
    before = db_hash(e.tools.db)
    cases = [
        (ToolCall("nope", {}), "Tool 'nope' not found."),
        (ToolCall("add", {}), "key: Field required"),
        (ToolCall("add", {"key": "a", "amount": "lots"}), "amount"),
        (ToolCall("add", {"key": "a", "extra": 1}), "extra: Extra inputs are not permitted"),
        (ToolCall("add", {"key": "a", "mode": "double"}), "mode"),
        (ToolCall("add", {"key": "zzz"}), "no counter zzz"),
        (ToolCall("get", {"key": "zzz"}), "zzz"),  # a KeyError inside the tool
        (ToolCall("add", ["a"]), "must be a JSON object"),  # type: ignore[arg-type]
        (ToolCall("helper", {}), "Tool 'helper' not found."),
    ]
    for call, text in cases:
        obs = e.step(call)
        assert obs.error and obs.content.startswith("Error: ") and text in obs.content, (call, obs.content)
    assert db_hash(e.tools.db) == before


def test_db_hash_ignores_key_order_but_not_values():
    assert db_hash({"a": 1, "b": [1, 2]}) == db_hash({"b": [1, 2], "a": 1})
    assert db_hash({"a": 1}) != db_hash({"a": 1.5})


class Device(Toolkit):
    @tool("write")
    def toggle(self) -> str:
        """Toggle the device."""
        self.db["on"] = not self.db["on"]
        return "ok"


class Line(Counter):
    def sync_user_state(self, user: Toolkit) -> None:
        user.db["signal"] = self.db["a"]


def test_solo_mode_routes_device_tools_to_the_agent_and_refuses_user_calls():
    solo = Environment("d", "p", Counter({"a": 1}), Device({"on": False}), solo=True)
    assert {s["function"]["name"] for s in solo.tool_schemas()} == {"add", "get", "toggle"}
    assert solo.step(ToolCall("toggle", {})).content == "ok" and solo.user_tools.db["on"] is True
    refused = solo.step(ToolCall("toggle", {}, requestor="user"))
    assert refused.error and refused.content == "Error: User tool calls are not allowed in solo mode"
    duo = Environment("d", "p", Counter({"a": 1}), Device({"on": False}))
    assert {s["function"]["name"] for s in duo.tool_schemas()} == {"add", "get"}
    assert duo.step(ToolCall("toggle", {})).content == "Error: Tool 'toggle' not found."
    by_user = duo.step(ToolCall("toggle", {}, requestor="user"))
    assert not by_user.error and by_user.requestor == "user"
    assert Message.from_dict(by_user.to_dict()) == by_user


def test_sync_runs_after_successful_calls_only():
    e = Environment("d", "p", Line({"a": 1}), Device({"on": False}))
    assert e.user_tools.db["signal"] == 1  # at construction, as tau2-bench
    e.step(ToolCall("add", {"key": "a", "amount": 4}))
    assert e.user_tools.db["signal"] == 5
    e.user_tools.db["signal"] = -1
    assert e.step(ToolCall("add", {"key": "zzz"})).error and e.user_tools.db["signal"] == -1
