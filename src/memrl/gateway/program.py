"""Running one agent program for one episode: an async function in this process, or a command.

A function ``async def fn(client: openai.AsyncOpenAI, sample: dict) -> float | dict`` gets a
client whose base URL and key are the episode's (``client.model_name`` is the served name,
also in ``$MEMRL_MODEL``). A command (any language) gets ``OPENAI_BASE_URL``,
``OPENAI_API_KEY`` and ``MEMRL_MODEL`` in its environment (and the endpoint under other SDKs'
names: :func:`memrl.gateway.command.sdk_environment`) and the sample as JSON on stdin,
and prints its result as JSON on its last stdout line. Either result is the reward (a
number) or ``{"reward": r, "metrics": {"name": value, ...}, "turn_rewards": [...]}``: per-call
rewards (:mod:`memrl.gateway.online_rewards`), which a program may also post while it runs to
``client.reward_url`` (``$MEMRL_REWARD_URL``, the episode's ``POST .../reward``).

Anything a program does wrong is an :class:`AgentProgramError` naming the program and what
happened, which fails the episode and leaves the run going.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import dataclasses
import inspect
import json
import numbers
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from memrl.gateway.command import MAX_LINE_BYTES, CommandError, run_command
from memrl.gateway.online_rewards import BadField, turn_rewards_of
from memrl.gateway.server import Endpoint
from memrl.plugins import finite_number, finite_reward


class AgentProgramError(RuntimeError):
    """The agent program failed this episode (raised, hung, printed no result, ...)."""


def load_program(spec: str) -> Callable[..., Awaitable[Any]]:
    """The async function at ``package.module:function``, or a one-line ValueError."""
    from memrl.plugins import load_object

    fn = load_object(spec, "workflow.options.program")
    if not inspect.iscoroutinefunction(fn):
        raise ValueError(f"workflow.options.program {spec!r} must be an async function (client, sample) -> reward")
    return fn  # type: ignore[no-any-return]


def parse_result(value: Any, what: str) -> tuple[float, dict[str, float], list[tuple[int, float]]]:
    """(reward, metrics, per-call rewards) of a program's result: a number, or
    ``{"reward": r, "metrics": {...}, "turn_rewards": [{"call": i, "reward": r}, ...]}``."""
    if isinstance(value, dict):
        if "reward" not in value:
            raise AgentProgramError(f"{what} returned a dict without a 'reward' key (keys: {sorted(value)[:8]})")
        metrics = value.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise AgentProgramError(f"{what} returned metrics that are not a dict of numbers")
        checked = {str(k): _number(v, what, f"metric {k!r}") for k, v in metrics.items()}
        turns: list[tuple[int, float]] = []
        if value.get("turn_rewards") is not None:
            try:
                turns = turn_rewards_of(value["turn_rewards"])
            except BadField as exc:
                raise AgentProgramError(f"{what} returned {exc}") from None
        return _number(value["reward"], what), checked, turns
    return _number(value, what), {}, []


def reward_url(base_url: str) -> str:
    """The episode's ``POST .../reward`` (per-call rewards) next to its ``.../v1`` base URL."""
    return base_url.rstrip("/").removesuffix("/v1") + "/reward"


def _number(value: Any, what: str, field: str = "reward") -> float:
    """``value`` as a finite float; a numpy scalar (``np.float32(1)``) counts, a bool or a string does not.

    Checked here, not only by ``ep.reward``/``ep.metric``, so that a NaN or a string is reported with the
    program that returned it rather than as the agent workflow's own fault."""
    lead = f"{what} returned {field}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = "the reward must be a number or {'reward': r, 'metrics': {...}}" if field == "reward" else \
            "a metric must be a number"
        raise AgentProgramError(f"{lead} {str(value)[:80]!r} ({type(value).__name__}): {hint}")
    try:
        return (finite_reward if field == "reward" else finite_number)(value, lead)
    except ValueError as exc:
        raise AgentProgramError(str(exc)) from None


def plain_sample(sample: Any) -> Any:
    """A copy of the sample the program may change freely; a dataclass (memrl eval's long-context
    samples: question, answers, context, ...) as a dict, the form a program is written for."""
    if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
        return dataclasses.asdict(sample)
    return copy.deepcopy(sample)


def _where(exc: BaseException) -> str:
    """`` (at file:line)`` of the innermost frame of the traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "" if tb is None else f" (at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno})"


async def call_function(fn: Callable[..., Awaitable[Any]], endpoint: Endpoint, model_name: str, sample: Any,
                        what: str) -> Any:
    """``fn(client, sample)`` with a client bound to the episode; its exception as AgentProgramError.

    The program runs on an event loop of its own in a thread of its own, so a program that
    blocks (a synchronous client, heavy tool code) stalls neither the episode's loop, which
    serves its model calls, nor other episodes. Cancelling this coroutine (the timeout)
    cancels the program's task; a program blocked outside its loop is left to finish alone.
    """
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()
    cancel: list[Callable[[], Any]] = []

    async def main() -> Any:
        import openai

        client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
        client.model_name = model_name  # type: ignore[attr-defined]
        client.reward_url = reward_url(endpoint.base_url)  # type: ignore[attr-defined]
        try:
            return await fn(client, plain_sample(sample))
        finally:
            await client.close()

    def thread() -> None:
        loop = asyncio.new_event_loop()
        task = loop.create_task(main())
        cancel.append(lambda: loop.call_soon_threadsafe(task.cancel))
        try:
            outcome: tuple[Any, BaseException | None] = (loop.run_until_complete(task), None)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting episode
            outcome = (None, exc if isinstance(exc, Exception) else _stopped_itself(exc, what))
        finally:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: no "Task exception was never retrieved" at exit
            loop.close()
        with contextlib.suppress(concurrent.futures.InvalidStateError):  # the episode stopped waiting
            done.set_result(outcome[0]) if outcome[1] is None else done.set_exception(outcome[1])

    threading.Thread(target=thread, name="memrl-agent-program", daemon=True).start()
    try:
        return await asyncio.wrap_future(done)
    except asyncio.CancelledError:
        for stop in cancel:
            with contextlib.suppress(RuntimeError):  # the program's loop has already closed
                stop()
        raise
    except AgentProgramError:
        raise
    except Exception as exc:
        message = " ".join(str(exc).split())[:300]
        raise AgentProgramError(f"{what} raised {type(exc).__name__}: {message}{_where(exc)}") from exc


def _stopped_itself(exc: BaseException, what: str) -> AgentProgramError:
    """A program's own ``sys.exit()``, KeyboardInterrupt or CancelledError, as the failure of its episode.

    The program runs in a thread of its own, where no signal ever raises KeyboardInterrupt and
    only the episode's timeout cancels it (and then nobody waits for this): so these come from the
    program, and must end its episode only, not the run.
    """
    detail = " ".join(str(exc).split())[:300]
    err = AgentProgramError(f"{what} raised {type(exc).__name__}" + (f": {detail}" if detail else "")
                            + _where(exc) + " (an agent program must return a reward, not stop the process)")
    err.__cause__ = exc
    return err


async def call_command(command: Sequence[str], endpoint: Endpoint, model_name: str, sample: Any, what: str) -> Any:
    """Run ``command`` with the episode's endpoint in its environment; the JSON on its last stdout line.

    It runs in a process group of its own, killed when the episode ends (:mod:`memrl.gateway.command`).
    """
    env = {**os.environ, "OPENAI_BASE_URL": endpoint.base_url, "OPENAI_API_KEY": endpoint.api_key,
           "MEMRL_MODEL": model_name, "MEMRL_REWARD_URL": reward_url(endpoint.base_url)}
    stdin = json.dumps(plain_sample(sample), ensure_ascii=False, default=str).encode()
    try:
        code, last, tail = await run_command(command, env, stdin)
    except CommandError as exc:
        raise AgentProgramError(f"{what}: {exc}") from None
    if code != 0:
        status = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        raise AgentProgramError(f"{what} {status}" + (f"; stderr:\n{tail}" if tail else ""))
    if last is None:
        raise AgentProgramError(f"{what} printed nothing: its last stdout line must be the reward as JSON")
    line, cut = last
    if cut:
        raise AgentProgramError(f"{what}: last stdout line is over {MAX_LINE_BYTES >> 20} MB; print the result "
                                "as one short JSON line")
    text = line.decode(errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise AgentProgramError(f"{what}: last stdout line {text[:80]!r} is not JSON (a number or "
                                '{"reward": r, "metrics": {...}})') from None


def describe(program: str | None, command: Sequence[str] | None) -> str:
    """How errors name the program: ``program pkg.mod:fn`` or ``command 'python agent.py'``."""
    if program is not None:
        return f"program {program}"
    return "command " + repr(" ".join(command or ()))[:120]

