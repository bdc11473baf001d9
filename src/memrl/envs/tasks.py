"""τ²-bench task records: user scenario, initial state and evaluation criteria.

The models follow τ²-bench's published task schema closely enough to read its
``tasks.json`` files unchanged; unknown extra keys are kept (``extra='allow'``)
so newer task files still load. Defaults match the benchmark: a task without a
``reward_basis`` is graded on DB and COMMUNICATE.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memrl.data.errors import DataError
from memrl.io.text_files import read_json

RewardType = Literal["DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE", "NL_ASSERTION"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Action(_Model):
    """A gold tool call; ``compare_args`` None compares every argument, [] only the name."""

    action_id: str = ""
    requestor: Literal["assistant", "user"] = "assistant"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    info: str | None = None
    compare_args: list[str] | None = None

    def matches(self, name: str, arguments: dict[str, Any]) -> bool:
        """τ²-bench's comparison: same name, and equal values on the compared keys.

        With ``compare_args`` None the keys are those of the *call*, so a call
        that adds an argument the gold action lacks does not match.
        """
        if name != self.name:
            return False
        keys = list(arguments) if self.compare_args is None else self.compare_args
        if not keys:
            return True
        return ({k: v for k, v in arguments.items() if k in keys}
                == {k: v for k, v in self.arguments.items() if k in keys})


class EnvFunctionCall(_Model):
    env_type: Literal["assistant", "user"] = "assistant"
    func_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class EnvAssertion(EnvFunctionCall):
    assert_value: bool = True
    message: str | None = None


class EvaluationCriteria(_Model):
    actions: list[Action] | None = None
    env_assertions: list[EnvAssertion] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[RewardType] = Field(default_factory=lambda: ["DB", "COMMUNICATE"])


class InitialState(_Model):
    initialization_data: dict[str, Any] | None = None
    initialization_actions: list[EnvFunctionCall] | None = None
    message_history: list[dict[str, Any]] | None = None


class UserScenario(_Model):
    persona: str | None = None
    instructions: str | dict[str, Any] = ""

    def render(self) -> str:
        """The scenario as the text a user simulator is prompted with."""
        parts = []
        if self.persona:
            parts.append(f"Persona:\n{self.persona}")
        ins = self.instructions
        if isinstance(ins, dict):
            labels = (("domain", "Domain"), ("reason_for_call", "Reason for call"), ("known_info", "Known info"),
                      ("unknown_info", "Unknown info"), ("task_instructions", "Task instructions"))
            ins = "\n".join(f"{label}: {ins[k]}" for k, label in labels if ins.get(k))
        parts.append(f"Instructions:\n{ins}")
        return "\n\n".join(parts)


class Task(_Model):
    id: str
    description: dict[str, Any] | str | None = None
    user_scenario: UserScenario | None = None
    ticket: str | None = None
    initial_state: InitialState | None = None
    evaluation_criteria: EvaluationCriteria | None = None

    def first_message(self) -> str:
        """What the agent is told in solo mode: the ticket, else the user's reason for calling."""
        if self.ticket:
            return self.ticket
        if self.user_scenario is not None:
            ins = self.user_scenario.instructions
            if isinstance(ins, dict):
                return str(ins.get("reason_for_call") or ins.get("task_instructions") or "")
            return str(ins)
        raise ValueError(f"task {self.id} has neither a ticket nor a user scenario")


def read_tasks(path: str | Path) -> list[Task]:
    """Tasks from a τ²-bench ``tasks.json``; a bad record fails with ``file:row:field``."""
    path = Path(path)
    raw = read_json(path)
    if not isinstance(raw, list):
        raise DataError(path, None, None, "expected a JSON list of tasks")
    tasks = []
    for i, rec in enumerate(raw, 1):
        try:
            tasks.append(Task.model_validate(rec))
        except ValidationError as err:
            e = err.errors()[0]
            raise DataError(path, i, ".".join(str(x) for x in e["loc"]), e["msg"]) from None
    ids = [t.id for t in tasks]
    dup = next((x for x in ids if ids.count(x) > 1), None)
    if dup is not None:
        raise DataError(path, ids.index(dup) + 1, "id", f"duplicate task id {dup!r}")
    return tasks
