"""``workflow.name: agent``: train (or evaluate) any program that talks to an OpenAI-compatible API.

::

    workflow:
      name: agent
      options:
        program: my_pkg.agent:solve        # async def solve(client, sample) -> float | dict
        # command: [python, my_agent.py]   # or any process: OPENAI_BASE_URL/OPENAI_API_KEY, sample on stdin
        max_calls: 64                      # model calls per episode before it fails
        timeout_s: 600                     # seconds per episode before it fails

Each episode opens its own base URL and key on the run's gateway (:mod:`memrl.gateway`); the
program's calls are recorded as that episode's conversations, and what it returns is the
reward. A call whose prompt extends the previous call's prompt and answer token for token
extends that conversation (``merge``); any other call (a summary, a rewritten memory, a
sub-agent) is a new conversation of the same episode. Per-call rewards (``turn_rewards``,
returned or posted: :mod:`memrl.gateway.online_rewards`) go to the calls' conversations.

``mode: online`` runs no program: external agents ask the run for episodes and post their
rewards (:mod:`memrl.gateway.online`, :mod:`memrl.gateway.online_run`).
"""

from __future__ import annotations

import os
import threading
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memrl.engines.base import EngineDeadError
from memrl.gateway.command import cannot_run
from memrl.gateway.online_rewards import BadField, apply_turn_rewards, resolve_calls
from memrl.gateway.online_run import open_online_gateway, run_online
from memrl.gateway.program import (AgentProgramError, call_command, call_function, describe, load_program,
                                   parse_result)
from memrl.gateway.server import Gateway
from memrl.gateway.sessions import CallSettings, Session
from memrl.gateway.tool_parser import resolve_tool_parser
from memrl.workflows.api import Episode, Workflow

_shared: Gateway | None = None
_shared_lock = threading.Lock()


class AgentOptions(BaseModel):
    """``workflow.options`` of the agent workflow."""

    model_config = ConfigDict(extra="forbid")

    program: str | None = Field(None, description="'package.module:function': async def fn(client: "
                                "openai.AsyncOpenAI, sample: dict) -> float | {'reward': r, 'metrics': {...}}.")
    command: list[str] | None = Field(None, description="A process to run per episode instead: OPENAI_BASE_URL, "
                                      "OPENAI_API_KEY and MEMRL_MODEL in its environment (also OPENAI_API_BASE, "
                                      "ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY/AUTH_TOKEN), the sample as JSON on "
                                      "stdin, the result as JSON on its last stdout line.")
    max_calls: int = Field(64, ge=1, description="Model calls per episode; one more fails the episode.")
    timeout_s: float = Field(600.0, gt=0, description="Seconds per episode before the program is stopped and the "
                             "episode fails.")
    max_tokens: int = Field(1024, ge=1, description="New tokens of one call when the program sets none, and the "
                            "most it may ask for: a larger max_tokens is lowered to this, not refused (an "
                            "answer cut here ends with finish_reason length / stop_reason max_tokens).")
    tool_parser: str = Field("hermes", description="How tool calls are read from the model's text: hermes (= qwen), "
                             "json, or 'package.module:function' (text -> memrl.text.tool_calls.ParsedTurn).")
    merge: bool = Field(True, description="A call whose prompt extends the last conversation token for token "
                        "extends it; otherwise every call is its own conversation.")
    request_sampling: bool = Field(True, description="Honour the temperature/top_p a program sends; false: the "
                                   "trainer's sampling applies to every call.")
    served_name: str = Field("policy", description="The model name the gateway reports (client.model_name, "
                             "$MEMRL_MODEL); requests may name any model.")
    mode: Literal["program", "online"] = Field("program", description="program: run program/command once per "
                                               "episode; online: external agents ask for episodes (POST /rl/episodes "
                                               "with the session key, $MEMRL_SESSION_KEY or printed at start) and "
                                               "post their rewards (POST /rl/episodes/{id}/reward).")
    host: str = Field("127.0.0.1", description="online: the address the endpoint listens on (0.0.0.0: every "
                      "interface; agents on other machines need one).")
    port: int = Field(0, ge=0, le=65535, description="online: the endpoint's port (0: a free one, printed at start "
                      "and written to RUN/online.json).")
    episode_timeout_s: float = Field(600.0, gt=0, description="online: seconds from an episode's hand-out to its "
                                     "reward; past them it is dropped (its group trains without it) and a late "
                                     "reward gets a 410.")

    @model_validator(mode="after")
    def _one_program(self) -> AgentOptions:
        if self.mode == "online":
            if self.program is not None or self.command is not None:
                raise ValueError("workflow.options.mode online runs no program: external agents run the episodes; "
                                 "leave out workflow.options.program and command")
            return self
        if (self.program is None) == (self.command is None):
            raise ValueError("give exactly one of workflow.options.program ('package.module:function') or "
                             "workflow.options.command ([executable, args...])")
        if self.command is not None and not self.command:
            raise ValueError("workflow.options.command must not be empty")
        return self

    @field_validator("program", mode="before")
    @classmethod
    def _a_path_not_an_object(cls, v: Any) -> Any:
        if callable(v) and not isinstance(v, str):  # the run records the program by name (config.yaml, resume)
            where = f"{getattr(v, '__module__', 'module')}:{getattr(v, '__qualname__', 'function')}"
            raise ValueError(f"program is named by its import path, not passed as an object: program={where!r} "
                             "(a module the run can import)")
        return v

    @field_validator("program")
    @classmethod
    def _loadable(cls, v: str | None) -> str | None:
        if v is not None:
            load_program(v)
        return v

    @field_validator("command")
    @classmethod
    def _runnable(cls, v: list[str] | None) -> list[str] | None:
        problem = cannot_run(v[0]) if v else None
        if problem:
            raise ValueError(f"workflow.options.command: {problem}")
        return v

    @field_validator("tool_parser")
    @classmethod
    def _parser(cls, v: str) -> str:
        resolve_tool_parser(v)
        return v


def shared_gateway() -> Gateway:
    """The process's gateway for episodes run without the run's services (plain Python, tests)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Gateway()
        return _shared


class AgentWorkflow(Workflow):
    """Runs ``workflow.options.program`` (or ``command``) once per episode against its own endpoint."""

    name: ClassVar[str] = "agent"
    Options: ClassVar[type[BaseModel]] = AgentOptions

    def build_services(self, config: Any) -> dict[str, Any]:
        os.environ["MEMRL_MODEL"] = self.options.served_name
        if self.options.mode == "online":
            return {"gateway": open_online_gateway(self.options, config)}
        return {"gateway": Gateway(self.options.served_name)}

    async def run(self, ep: Episode) -> None:
        o = self.options
        gateway = ep.services.get("gateway") if hasattr(ep.services, "get") else None
        gateway = gateway or shared_gateway()
        settings = CallSettings(max_calls=o.max_calls, max_tokens=o.max_tokens, merge=o.merge,
                                request_sampling=o.request_sampling, tool_parser=resolve_tool_parser(o.tool_parser))
        if o.mode == "online":
            outcome, session = await run_online(ep, gateway, settings, o.episode_timeout_s)
            what = f"online episode {session.id}"
            _raise_failure(session.failure, what, None)  # e.g. the call cap: the agent's reward cannot save it
            reward, metrics, pairs = outcome.reward, outcome.metrics, session.online.pairs
        else:
            what = describe(o.program, o.command)
            reward, metrics, pairs, session = await self._program_episode(ep, gateway, settings, what)
        if not ep.conversations:
            raise AgentProgramError(f"{what} returned without calling the model: the episode has nothing to train on")
        assert reward is not None
        ep.reward(reward)
        apply_turn_rewards([*session.turn_rewards, *pairs])  # posted while it ran, then with its result
        for key, value in metrics.items():
            ep.metric(key, value)
        ep.metric("model_calls", session.calls)
        ep.metric("invalid_tool_calls", session.invalid_tool_calls)

    async def _program_episode(self, ep: Episode, gateway: Gateway, settings: CallSettings,
                               what: str) -> tuple[float, dict[str, float], list[tuple[Any, float]], Session]:
        """Run the program for ``ep``: (reward, metrics, its returned (conversation, turn reward)s, session)."""
        with gateway.episode(ep, settings) as endpoint:
            session = endpoint.session
            try:
                result = await self._launch(endpoint, ep.sample, what)
            except Exception as exc:
                _raise_failure(session.failure, what, exc)
                raise
        _raise_failure(session.failure, what, None)  # e.g. the call cap, when the program caught the error
        reward, metrics, turns = parse_result(result, what)
        try:
            pairs = resolve_calls(session.recorded, turns)
        except BadField as exc:
            raise AgentProgramError(f"{what} returned {exc}") from None
        return reward, metrics, pairs, session

    async def _launch(self, endpoint: Any, sample: Any, what: str) -> Any:
        """The program's result, within ``timeout_s``."""
        import asyncio

        o = self.options
        try:
            async with asyncio.timeout(o.timeout_s) as scope:
                if o.program is not None:
                    return await call_function(load_program(o.program), endpoint, o.served_name, sample, what)
                return await call_command(o.command or [], endpoint, o.served_name, sample, what)
        except TimeoutError:
            if scope.expired():
                raise AgentProgramError(f"{what} did not finish within {o.timeout_s:g} s "
                                        "(workflow.options.timeout_s)") from None
            raise


def _raise_failure(failure: BaseException | None, what: str, cause: BaseException | None) -> None:
    """Raise what made the gateway fail the episode, if anything: a dead engine as itself (it stops the run)."""
    if failure is None:
        return
    if isinstance(failure, EngineDeadError):
        raise failure
    raise AgentProgramError(f"{what}: {failure}") from cause or failure
