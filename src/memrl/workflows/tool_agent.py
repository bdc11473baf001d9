"""``tool_agent``: a multi-turn tool-using agent in one growing context (τ²-bench style).

The whole episode is one conversation. Token-in/token-out: the prompt is
encoded once; each model turn is appended exactly as sampled (loss 1), and
everything else (tool results, user turns, the end-of-turn token when a turn hit
its length limit) is encoded as its own segment and appended with loss 0.
Earlier turns are never re-tokenized, so the trainer scores exactly the tokens
the engine produced.

With ``workflow.options.record=turns`` the episode runs the same, but each model
call is recorded as a conversation of its own: the whole context so far as its
prompt (the ids the engine was given), that call's tokens trained, and its anchor
state the database and that context, so ``gigpo`` compares turns that acted from
the same place.

With ``workflow.options.tool_protocol=openai_chat`` the same episode runs against any
OpenAI-compatible chat server instead: the context is OpenAI chat messages, the
tools go in ``tools=`` and calls come back as ``message.tool_calls``. The message
log and its grading are the same; no token ids come back, so that mode cannot train.

An episode ends when the agent writes text in solo mode (or ``###STOP###`` there),
when the user simulator stops, transfers or leaves (``###TRANSFER###`` after the agent
handed it over), or at the turn/token limits (graded 0, as τ²-bench grades premature
endings). As in τ²-bench, a ``transfer_to_human_agents`` call is a tool call like any
other: its result goes back to the agent, which then tells the user (the retail and
airline policies require a message), and outside solo mode ``###STOP###`` in the
agent's text is just text that the user reads. With
``env.prompts=tau2`` in solo mode the agent is τ²-bench's solo agent: it stops by
calling its ``done`` tool, and text without ``###STOP###`` is an agent error (0).
The two ways the context is kept are in :mod:`memrl.workflows.tool_sides`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memrl.engines.base import Engine, SamplingParams
from memrl.engines.usage import metering, usage_metrics
from memrl.envs.domain import Domain, task_env
from memrl.envs.evaluate import evaluate_async, history_messages
from memrl.envs.messages import USER_GAVE_UP, Message
from memrl.envs.progress import episode_reward, progress_reward
from memrl.envs.tasks import Task
from memrl.envs.user_sim import AGENT_OPENING, UserSimulator, ends_conversation
from memrl.types import Trajectory
from memrl.workflows.common import anchor, turn_seed
from memrl.workflows.tool_sides import ChatSide, TokenSide
from memrl.workflows.tool_steps import (StepLimits, breaks_protocol, check_agent_message, check_user_messages,
                                        first_protocol_break)

AGENT_STOP = "###STOP###"


@dataclass
class TaskSample:
    """One task bound to its domain and, outside solo mode, a user simulator."""

    domain: Domain
    task: Task
    solo: bool = True
    partial: bool = False
    reward: str = "tau2"  # env.reward: tau2, or progress (memrl.envs.progress; not a tau2-bench number)
    user: UserSimulator | None = None
    nl_judge: Any = None  # memrl.envs.nl_judge.LLMNLJudge (env.judge.model), None: assertions not judged

    @property
    def index(self) -> str:
        return self.task.id


@dataclass
class CallSeeds:
    """The seed of each model call of a seeded episode. memrl's: every call its own (the agent's turn ``t``
    ``turn_seed(base, t)``, the user's after it ``turn_seed(base, 10_000 + t)``, the opening ``base.seed``,
    a user's device-tool rounds stepped from there). ``tau2``: τ²-bench's, ``base.seed`` on every agent and
    user call (its orchestrator sets the trial's seed in both models' arguments)."""

    base: SamplingParams
    tau2: bool = False

    def agent(self, turn: int) -> SamplingParams:
        return self.base if self.tau2 else turn_seed(self.base, turn)

    def user(self, turn: int | None) -> tuple[int | None, bool]:
        """(seed, whether a user's tool rounds step it) for the user's turn after the agent's ``turn``
        (``None``: the opening)."""
        if self.tau2 or turn is None:
            return self.base.seed, not self.tau2
        return turn_seed(self.base, 10_000 + turn).seed, True


async def _user_turn(run: _Run, messages: list[Message], turn: int | None) -> tuple[list[Message], str | None]:
    """The user's turn after the agent's ``turn`` (``None``: the opening), counted against τ²-bench's limits:
    what of it τ²-bench would have let happen, and the limit that cut it. In a dual-control domain (the
    user has tools, e.g. telecom's phone) a simulator that can act (``act``) calls them first; those calls
    and results join the graded log, and the agent is shown only the final text (the last message)."""
    user, env = run.sample.user, run.env
    seed, step_seed = run.seeds.user(turn)
    if env.user_tools is not None and env.user_tools.tools and hasattr(user, "act"):
        kw: dict[str, Any] = {} if step_seed else {"step_seed": False}
        if run.strict:
            kw["strict"] = True  # a reply whose calls cannot be read raises, as in τ²-bench
        if run.limits.active or run.enforce:
            kw["halt"] = lambda msgs: run.limits.would_stop(msgs) or (run.enforce and
                                                                     first_protocol_break(msgs) is not None)
        if run.limits.max_steps is not None:
            kw["max_rounds"] = None  # τ²-bench's step limit ends a looping user, as there (no round cap of memrl's)
        said = await user.act(run.sample.task, messages, env, seed=seed, **kw)  # type: ignore[union-attr]
        if said and said[-1].content == USER_GAVE_UP:  # its tool rounds ran out: τ²-bench would run to max_steps
            return said[:-1], "max_steps"
    else:
        said = [Message("user", await user.reply(run.sample.task, messages, seed=seed))]  # type: ignore[union-attr]
    if run.strict:
        check_user_messages(said)
    bad = first_protocol_break(said) if run.enforce else None
    if bad is not None:  # τ²'s orchestrator ends the run at that message (its calls are not run there)
        kept, hit = run.limits.user_turn(said[:bad])
        if hit is not None:
            return kept, hit
        run.limits.step()
        return said[:bad + 1], run.limits.reached(stopped=True) or "user_error"
    stops = bool(said) and ends_conversation(said[-1].content or "") is not None
    return run.limits.user_turn(said, stops=stops)


async def tool_agent(sample: TaskSample, engine: Engine, tokenizer: Any, config: Any, *,
                     sampling: SamplingParams | None = None, sample_id: str | None = None,
                     group_id: str | None = None) -> Trajectory:
    """Run one episode of ``sample.task`` and grade it with the τ²-bench rules. Chat requests (agent, user,
    judge) add their requests and tokens to the episode's metrics (:mod:`memrl.engines.usage`)."""
    with metering() as meter:
        traj = await _episode(sample, engine, tokenizer, config, sampling, sample_id, group_id)
    traj.metrics.update(usage_metrics(meter))
    return traj


@dataclass
class _Run:
    """One episode in progress: what its turns read and change."""

    sample: TaskSample
    env: Any
    side: Any
    seeds: CallSeeds
    messages: list[Message]
    limits: StepLimits
    enforce: bool = False  # τ²-bench's communication rule (workflow.options.enforce_protocol)
    strict: bool = False  # raise where τ²-bench raises (workflow.options.invalid_messages=tau2)
    stats: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("turns", "tool_calls", "invalid_tool_calls", "tool_errors", "turn_truncated", "user_turns",
         "user_tool_calls", "prompt_too_long"), 0.0))


async def _episode(sample: TaskSample, engine: Engine, tokenizer: Any, config: Any, sampling: SamplingParams | None,
                   sample_id: str | None, group_id: str | None) -> Trajectory:
    task, domain = sample.task, sample.domain
    if not sample.solo and sample.user is None:
        raise ValueError("tool_agent outside solo mode needs a user simulator (env.user.model)")
    chat = getattr(config, "tool_protocol", "tokens") == "openai_chat"
    messages = history_messages(task)
    env = task_env(domain, task, solo=sample.solo)
    env.set_state(task.initial_state, messages)
    side: TokenSide | ChatSide = ChatSide(engine, config) if chat else TokenSide(engine, tokenizer, config, env)
    base = (sampling or SamplingParams()).with_(stop_token_ids=side.stops)
    run = _Run(sample, env, side, CallSeeds(base, tau2=getattr(config, "seeds", "memrl") == "tau2"), messages,
               StepLimits(getattr(config, "max_steps", None), getattr(config, "max_errors", None),
                          getattr(config, "timeout_s", None)), enforce=bool(getattr(config, "enforce_protocol", False)),
               strict=getattr(config, "invalid_messages", "memrl") == "tau2")
    opening, ending = await _opening(run)
    messages += opening
    side.start(env.system_prompt(task), env.tool_schemas(), messages)
    if isinstance(side, ChatSide) and env.stop_tool is not None:
        side.tool_choice = "required"  # τ²-bench's solo agent must call a tool every turn
    side.conv.meta["state"] = anchor(env.db_hash(), len(messages))  # the episode's one conversation starts here
    for turn in range(config.max_turns if ending is None else 0):
        ending = await _agent_turn(run, turn)
        if ending is not None:
            break
    return await _graded(sample, messages, ending or "max_turns", run.stats, side, sample_id, group_id)


async def _agent_turn(run: _Run, turn: int) -> str | None:
    """One model turn and what follows it (its tool results, or the user's reply); the episode's ending if
    this turn ends it. Steps are counted as τ²-bench counts them (:mod:`memrl.workflows.tool_steps`)."""
    side, env, messages, stats, limits = run.side, run.env, run.messages, run.stats, run.limits
    budget = side.budget()
    if budget <= 0:
        stats["prompt_too_long"] = float(turn == 0)  # cut before the agent said anything: nothing to train
        return "max_tokens"
    parsed, truncated = await side.respond(run.seeds.agent(turn).with_(max_new_tokens=budget))
    stats["turns"] += 1
    stats["turn_truncated"] += float(truncated)
    if run.strict:
        check_agent_message(parsed.content, bool(parsed.calls), parsed.errors if isinstance(side, ChatSide) else (),
                            run.sample.solo and env.stop_tool is not None and not (parsed.calls or parsed.errors))
    if not (run.sample.solo and turn == 0):  # τ²'s solo agent's first message is its initial state
        limits.step()
    if run.enforce and breaks_protocol(parsed.content, bool(parsed.calls or parsed.errors)):
        messages.append(Message("assistant", parsed.content or None, parsed.calls))  # its calls are not run
        _count_calls(stats, parsed)
        return limits.reached(stopped=True) or "agent_error"
    if env.stop_tool is not None and any(c.name == env.stop_tool for c in parsed.calls):
        messages.append(Message("assistant", AGENT_STOP))  # τ²'s solo agent: the turn becomes its stop message
        return limits.reached(stopped=True) or "agent_stop"
    messages.append(Message("assistant", parsed.content or None, parsed.calls))
    _count_calls(stats, parsed)
    if parsed.calls or parsed.errors:
        results = await _run_calls(env, parsed.calls, messages, stats)
        limits.step(results, unreadable=len(parsed.errors))
        hit = limits.reached()
        if hit:
            return hit
        side.tool_results([r.content or "" for r in results], parsed.errors)  # errors: shown, not graded
        return None
    if run.sample.solo:  # τ²'s solo agent may only stop by its tool (its LLMAgent has no stop of its own)
        if env.stop_tool is None:  # memrl's solo agent: its text turn is its last word
            return limits.reached(stopped=True) or "agent_stop"
        return "agent_error"  # τ²'s solo agent raises on any text turn, ###STOP### or not, before its step counts
    hit = limits.reached()
    if hit:
        return hit
    reply, user_ending = await _user_reply(run, turn)
    if user_ending is None:
        side.user_turn(reply)
    return user_ending


async def _opening(run: _Run) -> tuple[list[Message], str | None]:
    """What precedes the agent's first turn, and the episode's ending if it ends there: memrl's solo agent
    reads the ticket as a user message (τ²-bench's reads it in its system prompt); outside solo mode the
    agent greets and the user answers, or the user answers the task's message history."""
    sample, env, history = run.sample, run.env, run.messages
    if sample.solo:
        return ([] if env.stop_tool is not None else [Message("user", sample.task.first_message())]), None
    opening: list[Message] = []
    if history:  # as τ²'s orchestrator: a history ending with the agent's words is the user's to answer
        last = history[-1]
        if not (last.role == "assistant" and bool(last.content) and not last.tool_calls):
            return [], None
    else:
        opening = [Message("assistant", AGENT_OPENING)]
    said, hit = await _user_turn(run, history + opening, None)
    ending = hit or ("user_stop" if said and ends_conversation(said[-1].content or "") else None)
    return opening + said, ending


def _count_calls(stats: dict[str, float], parsed: Any) -> None:
    stats["tool_calls"] += len(parsed.calls) + len(parsed.errors)
    stats["invalid_tool_calls"] += len(parsed.errors)


async def _run_calls(env: Any, calls: list[Any], messages: list[Message], stats: dict[str, float]) -> list[Message]:
    """Each tool call's observation, appended to the graded log and returned (one call after the other)."""
    results = [await env.step_async(call) for call in calls]
    for call, obs in zip(calls, results):
        call.id = call.id or obs.call_id  # a call read from text has none: the log pairs it with its result by id
    messages += results
    stats["tool_errors"] += sum(float(obs.error) for obs in results)
    return results


async def _user_reply(run: _Run, turn: int) -> tuple[str, str | None]:
    """The simulated user's reply after the agent's ``turn``, and the episode's ending if the reply ends it
    (or a τ²-bench limit cut the user's turn: what followed the cut is left out)."""
    user_msgs, hit = await _user_turn(run, run.messages, turn)
    run.messages += user_msgs
    run.stats["user_tool_calls"] += sum(len(m.tool_calls) for m in user_msgs)
    run.stats["user_turns"] += 1
    reply = user_msgs[-1].content or ""
    if hit is not None:
        return reply, hit
    marker = ends_conversation(reply)
    if marker is None:
        return reply, None
    return reply, "transfer" if marker == "###TRANSFER###" else "user_stop"


async def _graded(sample: TaskSample, messages: list[Message], ending: str, stats: dict[str, float], side: Any,
                  sample_id: str | None, group_id: str | None) -> Trajectory:
    """Grade the episode with τ²-bench's rules and assemble it."""
    task, domain, convs = sample.task, sample.domain, side.conversations()
    grade = await evaluate_async(domain, task, messages, ending=ending, solo=sample.solo, partial=sample.partial,
                                 nl_judge=sample.nl_judge)
    # the tau2-bench reward stays in metrics["tau2_reward"]
    reward = episode_reward(sample.reward, grade, side.final_text(), sample)
    attempted = stats["tool_calls"]
    valid = attempted - stats["invalid_tool_calls"] - stats["tool_errors"]
    # the valid share of the calls made: none made, none to share (left out, so a step's mean is over the episodes
    # that called; made_tool_call says how many did)
    validity = {"tool_call_validity": valid / attempted} if attempted else {}
    metrics = {**stats, "num_conversations": float(len(convs)), "response_tokens": float(side.response_tokens),
               **validity, "made_tool_call": float(attempted > 0),
               "db_match": float(bool(grade.db_match)), "nl_unchecked": float(grade.nl_unchecked),
               "completed": float(ending in ("agent_stop", "user_stop", "transfer")),
               "tau2_reward": grade.reward, "progress": progress_reward(grade)}
    return Trajectory(conversations=convs, reward=reward,
                      sample_id=sample_id if sample_id is not None else task.id,
                      group_id=group_id if group_id is not None else task.id, metrics=metrics,
                      info={"task_id": task.id, "ending": ending, "messages": [m.to_dict() for m in messages],
                            "reward_breakdown": grade.breakdown, "note": grade.note,
                            "nl_unchecked": grade.nl_unchecked,
                            "final_text": side.final_text()[-2000:]})


def build_user_simulator(cfg: Any) -> UserSimulator:
    """The user simulator of ``cfg.env``: a local HF model or an OpenAI-compatible server."""
    from memrl.envs.user_sim import LLMUserSimulator, read_user_prompt
    from memrl.engines.factory import build_side_engine

    e = cfg.env
    if e.user.model is None:
        raise ValueError("env.solo=false needs env.user.model (the simulator's model, or its tokenizer for "
                         "env.user.engine=openai)")
    if e.prompts != "memrl" and e.user.prompt:
        raise ValueError(f"env.user.prompt is memrl's user prompt; env.prompts={e.prompts} prompts the user "
                         "simulator with tau2-bench's own: leave one of them out")
    engine, tokenizer = build_side_engine(cfg, e.user, "env.user")
    kw = dict(max_tokens=e.user.reply_tokens(), temperature=e.user.temperature, prompts=e.prompts)
    if e.user.protocol == "chat":
        from memrl.envs.user_chat import ChatUserSimulator
        from memrl.text.template_chat import as_chat

        return ChatUserSimulator(as_chat(engine, tokenizer), system_prompt=read_user_prompt(e.user.prompt), **kw)
    return LLMUserSimulator(engine, tokenizer, system_prompt=read_user_prompt(e.user.prompt), **kw)


def pick_tasks(tasks: list[Any], task_ids: list[str] | None, num_tasks: int | None, split: str | None) -> list[Any]:
    """``tasks`` narrowed as τ²-bench's ``--task-ids`` and ``--num-tasks`` narrow a run: the listed ids in the
    split's order (every one must be there), then the first ``num_tasks``."""
    if task_ids is not None:
        wanted = set(task_ids)
        missing = sorted(wanted - {t.id for t in tasks})
        if missing:
            raise ValueError(f"env.task_ids: split {split!r} has no task {', '.join(missing[:5])}"
                             f"{' ...' if len(missing) > 5 else ''}")
        tasks = [t for t in tasks if t.id in wanted]
    return tasks if num_tasks is None else tasks[:num_tasks]


def task_samples(cfg: Any, split: str | None, user: UserSimulator | None = None, *,
                 side_models: bool = True, evaluating: bool = False) -> list[TaskSample]:
    """The tasks of ``split`` bound to their domain (``evaluating``: narrowed by env.task_ids, env.num_tasks).

    ``side_models=False``: no user simulator or NL judge is built here (the workflow's services,
    built once per run, supply them at episode time); otherwise they are built for these samples.
    """
    from memrl.envs.domain import load_domain
    from memrl.envs.nl_judge import build_nl_judge

    domain = load_domain(cfg.env.domain, cfg.env.data_dir, tool_options=cfg.env.tool_options,
                         prompts=cfg.env.prompts)
    judge = None
    if side_models:
        if not cfg.env.solo and user is None:
            user = build_user_simulator(cfg)
        judge = build_nl_judge(cfg)
    tasks = domain.get_tasks(split)
    if evaluating:
        tasks = pick_tasks(tasks, cfg.env.task_ids, cfg.env.num_tasks, split)
    return [TaskSample(domain, t, solo=cfg.env.solo, partial=cfg.env.partial_credit, reward=cfg.env.reward, user=user,
                       nl_judge=judge) for t in tasks]
