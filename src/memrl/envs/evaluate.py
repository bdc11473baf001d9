"""Grade a tool-agent episode the way τ²-bench does.

- Premature endings (turn or token limit, crash) score 0: only an agent stop or
  a user stop is graded. memrl's ``transfer`` ending (the user simulator wrote
  ``###TRANSFER###``, as it does once the agent has transferred it) is a user stop.
- DB: the episode's state-changing (write) tool calls are replayed on a fresh
  environment (after the task's initial state) and its database hashes (agent
  and user side) are compared with those of a fresh environment on which the
  gold actions were replayed. As in τ²-bench the log must be well formed: every
  tool call followed by its result, and each replayed write returning what the
  log says it returned; a log that is not scores 0 (τ²-bench refuses it). The gold actions run
  without the post-call synchronisation of a dual-control domain, as τ²-bench's grader runs them,
  so on telecom the databases can differ where the agent's replay synced (telecom's reward does
  not count DB).
- ENV_ASSERTION: each assertion function must return its ``assert_value``.
- ACTION: every gold action must appear among the calls (see ``Action.matches``).
- COMMUNICATE: every required string must occur, case-insensitively, in an
  agent text message with commas removed.
- NL_ASSERTION: judged by an LLM (:mod:`memrl.envs.nl_judge`) whenever the task
  has assertions; a task whose basis names NL_ASSERTION without any scores 1 on it.
  Without a judge the component is left out of the product, counted in
  ``nl_unchecked`` and said in ``note``: such rewards are higher than τ²-bench's.

The task reward is the product of the components named in ``reward_basis``
(all or nothing). With ``partial=True`` each component scores the fraction of
its checks met and the reward is the mean over the components: a denser signal
for RL on weak models, not a τ²-bench number.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memrl.envs.domain import task_env
from memrl.envs.environment import ReplayError
from memrl.envs.messages import Message, ToolCall
from memrl.envs.tasks import Task

if TYPE_CHECKING:
    from memrl.envs.domain import Domain

NLJudge = Callable[[Sequence[str], Sequence[Message]], Sequence[bool]]
GRADED_ENDINGS = ("agent_stop", "user_stop", "transfer")  # τ²: all but max steps / too many errors


@dataclass
class RewardInfo:
    reward: float
    breakdown: dict[str, float] = field(default_factory=dict)
    db_match: bool | None = None
    action_checks: list[bool] = field(default_factory=list)
    communicate_checks: list[bool] = field(default_factory=list)
    env_assertion_checks: list[bool] = field(default_factory=list)
    nl_checks: list[bool] = field(default_factory=list)
    nl_justifications: list[str] = field(default_factory=list)
    nl_unchecked: int = 0
    note: str = ""


def history_messages(task: Task) -> list[Message]:
    """The task's pre-filled message history (τ² ``initial_state.message_history``)."""
    hist = task.initial_state.message_history if task.initial_state is not None else None
    return [Message.from_dict(m) for m in hist or []]


def tool_calls(messages: Sequence[Message]) -> list[ToolCall]:
    return [c for m in messages if m.role in ("assistant", "user") for c in m.tool_calls]


def communicated(info: str, messages: Sequence[Message]) -> bool:
    needle = info.lower()
    return any(m.role == "assistant" and m.content and needle in m.content.lower().replace(",", "")
               for m in messages)


def _replay_state(domain: Domain, task: Task, messages: Sequence[Message], solo: bool, info: RewardInfo) -> str | None:
    """DB and ENV_ASSERTION into ``info``: the episode's calls and the gold actions replayed on fresh
    environments, their databases compared; or why the log cannot be replayed."""
    crit = task.evaluation_criteria
    assert crit is not None
    predicted = task_env(domain, task, solo=solo)
    try:
        predicted.set_state(task.initial_state, messages, strict=True)
    except ReplayError as err:
        return f"message log cannot be replayed: {err}"
    gold = task_env(domain, task)
    gold.set_state(task.initial_state, history_messages(task))
    for action in crit.actions or []:
        try:
            gold.call(ToolCall(action.name, dict(action.arguments), requestor=action.requestor), sync=False)
        except Exception as err:  # noqa: BLE001 - a failing gold action changes nothing, as in τ²-bench
            _gold_failed(domain, task, action, err)
    info.db_match = (predicted.db_hash() == gold.db_hash()
                     and predicted.user_db_hash() == gold.user_db_hash())
    info.env_assertion_checks = [predicted.run_assertion(a) for a in crit.env_assertions or []]
    return None


_WARNED: set[tuple[str, str, str]] = set()


def _gold_failed(domain: Domain, task: Task, action: Any, err: BaseException) -> None:
    """Say once per process what τ²-bench logs: a gold action that raised changes nothing, so the task's target
    database lacks its effect (an agent doing nothing may match it)."""
    key = (domain.name, task.id, action.name)
    kinds = [getattr(getattr(k, action.name, None), "__memrl_tool__", None)
             for k in (getattr(domain, "toolkit", None), getattr(domain, "user_toolkit", None))]
    if "read" in kinds:  # a lookup that fails changes nothing either way (τ²-bench's retail has some)
        return
    if key not in _WARNED:
        _WARNED.add(key)
        print(f"warning: {domain.name} task {task.id}: gold action {action.name}({dict(action.arguments)}) failed "
              f"({type(err).__name__}: {err}); the target database lacks its effect", file=sys.stderr)


def _combine(basis: Sequence[str], comps: dict[str, list[bool]], partial: bool) -> tuple[dict[str, float], float]:
    """Each component's score and the task reward: all or nothing and their product, or (``partial``)
    the fraction of checks met and their mean. No components: a reward of 1."""
    scores: dict[str, float] = {}
    for name in basis:
        checks = comps.get(name, [])
        if partial:
            scores[name] = sum(checks) / len(checks) if checks else 1.0
        else:
            scores[name] = 1.0 if all(checks) else 0.0
    if not scores:
        return scores, 1.0
    if partial:
        return scores, sum(scores.values()) / len(scores)
    return scores, math.prod(scores.values())


def evaluate(domain: Domain, task: Task, messages: Sequence[Message], *, ending: str = "agent_stop",
             solo: bool = False, partial: bool = False, nl_judge: NLJudge | None = None) -> RewardInfo:
    """Score an episode. ``messages`` is the whole log, including the task's own history."""
    if ending not in GRADED_ENDINGS:
        return RewardInfo(0.0, note=f"episode ended early ({ending})")
    crit = task.evaluation_criteria
    if crit is None:
        return RewardInfo(1.0, note="no evaluation criteria")
    basis = list(crit.reward_basis)
    comps: dict[str, list[bool]] = {}
    info = RewardInfo(0.0)

    if crit.actions is None and crit.env_assertions is None:
        info.db_match = True
    elif note := _replay_state(domain, task, messages, solo, info):
        return RewardInfo(0.0, note=note)
    comps["DB"] = [bool(info.db_match)]  # set above on every path that gets here
    comps["ENV_ASSERTION"] = info.env_assertion_checks

    calls = tool_calls(messages)
    info.action_checks = [any(a.matches(c.name, c.arguments) for c in calls) for a in crit.actions or []]
    comps["ACTION"] = info.action_checks
    info.communicate_checks = [communicated(s, messages) for s in crit.communicate_info or []]
    comps["COMMUNICATE"] = info.communicate_checks
    nl = list(crit.nl_assertions or [])
    if nl and nl_judge is not None:
        info.nl_checks = [bool(x) for x in nl_judge(nl, messages)]
        comps["NL_ASSERTION"] = info.nl_checks
    elif nl:
        if "NL_ASSERTION" in basis:
            info.nl_unchecked = len(nl)
            info.note = (f"{len(nl)} NL assertion(s) not judged (no env.judge.model): "
                         "left out of the reward, which is higher than tau2-bench's")
        basis = [b for b in basis if b != "NL_ASSERTION"]
    else:
        comps["NL_ASSERTION"] = []

    info.breakdown, info.reward = _combine(basis, comps, partial)
    return info


async def evaluate_async(domain: Domain, task: Task, messages: Sequence[Message], *, ending: str = "agent_stop",
                         nl_judge: Any = None, **kwargs: Any) -> RewardInfo:
    """:func:`evaluate` with an engine-backed judge (:class:`memrl.envs.nl_judge.LLMNLJudge`, or any
    object with ``async check(assertions, messages)``). The judge runs only where it counts: a graded
    ending, and a task whose reward basis names NL_ASSERTION and that has assertions."""
    crit = task.evaluation_criteria
    nl = list(crit.nl_assertions or []) if crit is not None else []
    if nl_judge is None or not nl or "NL_ASSERTION" not in crit.reward_basis or ending not in GRADED_ENDINGS:
        return evaluate(domain, task, messages, ending=ending, **kwargs)
    checks = await nl_judge.check(nl, messages)
    info = evaluate(domain, task, messages, ending=ending, nl_judge=lambda _a, _m: [c.met for c in checks], **kwargs)
    info.nl_justifications = [c.justification for c in checks]
    return info


def run_calls(domain: Domain, task: Task, calls: Sequence[ToolCall], *, solo: bool = False) -> list[Message]:
    """The message log of an episode that makes ``calls`` one by one after the task's history: each
    call in its own message, followed by the observation a live environment returned."""
    msgs = history_messages(task)
    env = task_env(domain, task, solo=solo)
    env.set_state(task.initial_state, msgs)
    for i, call in enumerate(calls):
        call = ToolCall(call.name, call.arguments, id=call.id or f"call_{i}", requestor=call.requestor)
        msgs.append(Message("user" if call.requestor == "user" else "assistant", None, [call]))
        msgs.append(env.step(call))
    return msgs


def replay_gold(domain: Domain, task: Task, *, solo: bool = False, **kwargs: Any) -> RewardInfo:
    """Grade an episode made only of the gold actions (and the task's history): should be 1.0.

    Each required ``communicate_info`` string is said by the agent at the end,
    as a correct agent would.
    """
    crit = task.evaluation_criteria
    calls = [ToolCall(a.name, dict(a.arguments), id=f"gold_{i}", requestor=a.requestor)
             for i, a in enumerate(crit.actions or [] if crit else [])]
    msgs = run_calls(domain, task, calls, solo=solo)
    if crit and crit.communicate_info:
        msgs.append(Message("assistant", " ".join(crit.communicate_info)))
    return evaluate(domain, task, msgs, solo=solo, **kwargs)
