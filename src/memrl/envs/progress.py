"""Progress reward (``env.reward=progress``): partial credit for a tool-agent episode. NOT a τ²-bench number.

τ²-bench's reward is all or nothing: 1 when every component of the task's
``reward_basis`` passes, else 0. A weak model seldom earns a 1, so most GRPO groups
have equal rewards and no gradient. The progress reward counts, over one flat list
of checks taken from the same grading (:func:`memrl.envs.evaluate.evaluate`):

- the database check: the episode's final database equals the gold one (1 check,
  whenever the task has gold actions or environment assertions);
- each environment assertion that holds;
- each gold action the agent made (τ²-bench's action matching: same tool, equal
  compared arguments), whether or not ``reward_basis`` names ACTION;
- each required ``communicate_info`` string the agent said;
- each NL assertion a judge passed (only when one judged them);

and scores ``passed / total``. Every check counts once, whatever component it belongs
to and whatever the task's ``reward_basis`` says, so an agent that made two of the
three gold calls of a task and left the database wrong scores 2/4 = 0.5.

An episode that τ²-bench does not grade (turn or token limit, a message log that
cannot be replayed) scores 0, as in τ²-bench, so the agent is never paid for running
out its turns. A task without any check scores its τ²-bench reward.

Every check passed implies τ²-bench success, but not the other way round: τ²-bench
ignores gold actions unless the basis names ACTION (a right database reached by other
calls scores 1 there, less here). Reports must label progress numbers as such; the
tool_agent workflow keeps every episode's τ²-bench reward in ``metrics["tau2_reward"]``.
"""

from __future__ import annotations

from typing import Any

from memrl.envs.evaluate import RewardInfo


def progress_checks(info: RewardInfo) -> list[bool]:
    """The flat list of pass/fail checks of a graded episode (empty when it was not graded)."""
    checks: list[bool] = [] if info.db_match is None else [bool(info.db_match)]
    for part in (info.env_assertion_checks, info.action_checks, info.communicate_checks, info.nl_checks):
        checks += [bool(c) for c in part]
    return checks


def progress_reward(info: RewardInfo) -> float:
    """Fraction of :func:`progress_checks` passed; the τ²-bench reward where there are none."""
    checks = progress_checks(info)
    return sum(checks) / len(checks) if checks else info.reward


def tau2(text: str, *, sample: Any = None, grade: RewardInfo | None = None, **kw: Any) -> float:
    """τ²-bench's reward of a graded tool-agent episode (all or nothing over the task's reward basis)."""
    return _graded(grade, "tau2").reward


def progress(text: str, *, sample: Any = None, grade: RewardInfo | None = None, **kw: Any) -> float:
    """The fraction of the episode's checks passed (see this module); not a τ²-bench number."""
    return progress_reward(_graded(grade, "progress"))


def _graded(grade: RewardInfo | None, name: str) -> RewardInfo:
    if grade is None:
        raise ValueError(f"reward {name!r} scores a graded tool-agent episode (env.reward); it got no grade")
    return grade


def episode_reward(kind: str, info: RewardInfo, text: str = "", sample: Any = None) -> float:
    """The training reward ``env.reward`` names (``tau2``, ``progress`` or yours), given the episode's grade.

    Rewards are one registry (:data:`memrl.plugins.REWARDS`) with one signature: a tool-agent reward
    gets the final text, the sample and ``grade=`` (the τ²-bench :class:`RewardInfo`)."""
    from memrl.plugins import reward_value

    return reward_value(kind, text, [], None, sample, grade=info)
