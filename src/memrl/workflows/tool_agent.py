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

With ``workflow.tool_protocol=openai_chat`` the same episode runs against any
OpenAI-compatible chat server instead: the context is OpenAI chat messages, the
tools go in ``tools=`` and calls come back as ``message.tool_calls``. The message
log and its grading are the same; no token ids come back, so that mode cannot train.

An episode ends when the agent writes text in solo mode or ``###STOP###``, when
the user simulator stops, transfers or leaves, on a transfer tool call, or at
the turn/token limits (graded 0, as τ²-bench grades premature endings).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memrl.engines.base import Engine, SamplingParams
from memrl.envs.domain import Domain, task_env
from memrl.envs.evaluate import evaluate_async, history_messages
from memrl.envs.messages import Message
from memrl.envs.progress import episode_reward, progress_reward
from memrl.envs.tasks import Task
from memrl.envs.user_sim import AGENT_OPENING, UserSimulator, ends_conversation
from memrl.types import Conversation, Trajectory
from memrl.workflows.common import anchor, decode, encode_text, stop_token_ids, strip_stop, turn_seed
from memrl.text.tool_calls import (FORMATS, ParsedTurn, TemplateFormat, get_parser, openai_messages,
                                        read_openai_call)

AGENT_STOP = "###STOP###"
TRANSFER_TOOL = "transfer_to_human_agents"


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


async def _user_turn(sample: TaskSample, env: Any, messages: list[Message], seed: int | None) -> list[Message]:
    """The user's next turn. In a dual-control domain (the user has tools, e.g. telecom's phone) a simulator
    that can act (``act``) calls them first; those calls and results join the graded log, and the agent
    is shown only the final text (the last message)."""
    user = sample.user
    if env.user_tools is not None and env.user_tools.tools and hasattr(user, "act"):
        return await user.act(sample.task, messages, env, seed=seed)  # type: ignore[union-attr]
    return [Message("user", await user.reply(sample.task, messages, seed=seed))]  # type: ignore[union-attr]


class _TokenSide:
    """Token mode: the agent's context is one growing token sequence (what the trainer scores).

    The prompt is encoded once; each model turn is appended as sampled (loss 1); tool results,
    user turns and the end token of a cut turn are encoded as loss-0 segments.
    """

    def __init__(self, engine: Engine, tokenizer: Any, config: Any, env: Any) -> None:
        self.engine, self.tokenizer, self.config, self.env = engine, tokenizer, config, env
        self.fmt = TemplateFormat(tokenizer) if config.tool_format == "template" else FORMATS[config.tool_format]
        self.parse = get_parser(config.tool_parser)
        self.stops = stop_token_ids(tokenizer)
        self.conv = Conversation()
        self.end_ids: list[int] = []
        self.turns: list[Conversation] | None = [] if getattr(config, "record", "episode") == "turns" else None

    def start(self, policy: str, tools: list[dict[str, Any]], messages: list[Message]) -> None:
        self.conv.append(encode_text(self.tokenizer, self.fmt.prompt(policy, tools, messages)), generated=False)
        self.end_ids = encode_text(self.tokenizer, self.fmt.end)  # a template's end token is known once rendered

    def budget(self) -> int:
        return min(self.config.turn_tokens, self.config.max_total_tokens - len(self.conv.token_ids))

    async def respond(self, params: SamplingParams) -> tuple[ParsedTurn, bool]:
        """The model's next turn, parsed; and whether it hit the turn's token limit."""
        res = await self.engine.generate(self.conv.token_ids, params)
        if self.turns is not None:
            self._record_turn(res)
        self.conv.append(res.token_ids, generated=True, logprobs=res.logprobs)
        truncated = False
        if not res.token_ids or res.token_ids[-1] not in self.stops:
            truncated = res.finish_reason == "length"
            self.conv.append(self.end_ids, generated=False)  # close the turn so the next segment is well formed
        return self.parse(decode(self.tokenizer, strip_stop(res.token_ids, self.stops))), truncated

    def _record_turn(self, res: Any) -> None:
        """``record=turns``: this call as its own conversation, the context so far as its prompt, anchored at
        the database state and that context (shared by the episodes that reached both alike)."""
        prompt = list(self.conv.token_ids)
        self.turns.append(Conversation.from_prompt_response(  # type: ignore[union-attr]
            prompt, res.token_ids, res.logprobs,
            meta={"finish": res.finish_reason, "state": anchor(self.env.db_hash(), prompt)}))

    def conversations(self) -> list[Conversation]:
        """What the episode trains on: the one growing context, or with ``record=turns`` each call's own
        conversation (the prompt-only context when no call was made)."""
        return self.turns or [self.conv]

    def tool_results(self, results: list[str], errors: list[str]) -> None:
        self._add(self.fmt.after_tool_results(results + [f"Error: {err}" for err in errors]))

    def user_turn(self, text: str) -> None:
        self._add(self.fmt.after_user(text))

    def _add(self, text: str) -> None:
        self.conv.append(encode_text(self.tokenizer, text), generated=False)

    @property
    def response_tokens(self) -> int:
        return self.conv.num_generated

    def final_text(self) -> str:
        return decode(self.tokenizer, self.conv.generated_ids())


class _ChatSide:
    """Chat mode (``workflow.tool_protocol=openai_chat``): the agent's context is a list of OpenAI chat
    messages sent to ``/v1/chat/completions`` with the tools; the server's chat template and tool
    parser turn them into a prompt and the reply into ``tool_calls``. No token ids: eval and serving only.

    ``max_total_tokens`` is checked against the server's ``usage`` (prompt + completion of the last
    turn) when it reports one.
    """

    stops: tuple[int, ...] = ()

    def __init__(self, engine: Engine, config: Any) -> None:
        if not callable(getattr(engine, "chat", None)):
            raise ValueError("workflow.tool_protocol=openai_chat needs an engine that speaks /v1/chat/completions "
                             f"(engine.kind=openai), got {type(engine).__name__}")
        self.engine, self.config = engine, config
        self.conv = Conversation()  # stays empty: nothing to train on
        self.chat: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.context_tokens = 0
        self.response_tokens = 0
        self._texts: list[str] = []
        self._pending: list[tuple[str, bool]] = []  # (tool_call_id, parsed) of the last turn's calls, in order
        self._made = 0

    def start(self, policy: str, tools: list[dict[str, Any]], messages: list[Message]) -> None:
        self.chat, self.tools = openai_messages(policy, messages), tools

    def budget(self) -> int:
        return min(self.config.turn_tokens, self.config.max_total_tokens - self.context_tokens)

    async def respond(self, params: SamplingParams) -> tuple[ParsedTurn, bool]:
        omit = tuple(getattr(self.config, "chat_omit", ()))
        reply = await self.engine.chat(self.chat, self.tools, params, omit=omit)  # type: ignore[attr-defined]
        self.context_tokens = (reply.prompt_tokens or 0) + (reply.completion_tokens or 0)
        self.response_tokens += reply.completion_tokens or 0
        self._texts.append(reply.content or "")
        parsed = ParsedTurn((reply.content or "").strip())
        echoed, self._pending = [], []
        for raw in reply.tool_calls:
            self._made += 1
            call_id, call, err = read_openai_call(raw, f"call_{self._made}")
            if call is not None:
                parsed.calls.append(call)
            else:
                parsed.errors.append(err or "invalid tool call")
            self._pending.append((call_id, call is not None))
            echoed.append(_echo_call(raw, call_id, call))
        entry: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if echoed:
            entry["tool_calls"] = echoed
        self.chat.append(entry)
        return parsed, reply.finish_reason == "length"

    def tool_results(self, results: list[str], errors: list[str]) -> None:
        """Answer every call of the last turn, in its order, by ``tool_call_id`` (the API requires all)."""
        ok, bad = iter(results), iter(errors)
        for call_id, parsed in self._pending:
            content = next(ok) if parsed else f"Error: {next(bad)}"
            self.chat.append({"role": "tool", "tool_call_id": call_id, "content": content})

    def user_turn(self, text: str) -> None:
        self.chat.append({"role": "user", "content": text})

    def final_text(self) -> str:
        return "\n".join(t for t in self._texts if t)

    def conversations(self) -> list[Conversation]:
        return [self.conv]


def _echo_call(raw: Any, call_id: str, call: Any) -> dict[str, Any]:
    """A server's tool call as it goes back in the assistant message. A call that parsed goes back as
    τ²-bench sends it (its arguments re-written by ``json.dumps``, whatever spacing or escapes the model
    used); one that did not keeps the text the model wrote."""
    fn = raw.get("function") if isinstance(raw, dict) else None
    fn = fn if isinstance(fn, dict) else {}
    args = fn.get("arguments", "")
    if call is not None:
        args = json.dumps(call.arguments)
    return {"id": call_id, "type": "function",
            "function": {"name": str(fn.get("name") or ""),
                         "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}}


async def tool_agent(sample: TaskSample, engine: Engine, tokenizer: Any, config: Any, *,
                     sampling: SamplingParams | None = None, sample_id: str | None = None,
                     group_id: str | None = None) -> Trajectory:
    """Run one episode of ``sample.task`` and grade it with the τ²-bench rules."""
    task, domain = sample.task, sample.domain
    if not sample.solo and sample.user is None:
        raise ValueError("tool_agent outside solo mode needs a user simulator (env.user.model)")
    chat = getattr(config, "tool_protocol", "tokens") == "openai_chat"
    messages = history_messages(task)
    env = task_env(domain, task, solo=sample.solo)
    env.set_state(task.initial_state, messages)
    side: _TokenSide | _ChatSide = _ChatSide(engine, config) if chat else _TokenSide(engine, tokenizer, config, env)
    base = (sampling or SamplingParams()).with_(stop_token_ids=side.stops)

    opening: list[Message] = []
    if sample.solo:
        opening.append(Message("user", task.first_message()))
    elif not messages:
        opening.append(Message("assistant", AGENT_OPENING))
        opening += await _user_turn(sample, env, opening, base.seed)
    messages += opening
    side.start(env.system_prompt(), env.tool_schemas(), messages)
    side.conv.meta["state"] = anchor(env.db_hash(), len(messages))  # the episode's one conversation starts here

    stats = {"turns": 0.0, "tool_calls": 0.0, "invalid_tool_calls": 0.0, "tool_errors": 0.0,
             "turn_truncated": 0.0, "user_turns": 0.0, "user_tool_calls": 0.0,
             "prompt_too_long": 0.0}
    ending = "max_turns"
    if not sample.solo and ends_conversation(opening[-1].content or ""):
        ending = "user_stop"
    for turn in range(config.max_turns if ending == "max_turns" else 0):
        budget = side.budget()
        if budget <= 0:
            ending = "max_tokens"
            stats["prompt_too_long"] = float(turn == 0)  # cut before the agent said anything: nothing to train
            break
        parsed, truncated = await side.respond(turn_seed(base, turn).with_(max_new_tokens=budget))
        stats["turns"] += 1
        stats["turn_truncated"] += float(truncated)
        msg = Message("assistant", parsed.content or None, parsed.calls)
        messages.append(msg)
        stats["tool_calls"] += len(parsed.calls) + len(parsed.errors)
        stats["invalid_tool_calls"] += len(parsed.errors)
        if parsed.calls or parsed.errors:
            results = _run_calls(env, parsed.calls, messages, stats)
            if any(c.name == TRANSFER_TOOL for c in parsed.calls):
                ending = "transfer"
                break
            side.tool_results(results, parsed.errors)  # errors are shown to the model, not part of the graded log
            continue
        if AGENT_STOP in parsed.content or sample.solo:
            ending = "agent_stop"
            break
        reply, user_ending = await _user_reply(sample, env, messages, stats, turn_seed(base, 10_000 + turn).seed)
        if user_ending is not None:
            ending = user_ending
            break
        side.user_turn(reply)
    return await _graded(sample, messages, ending, stats, side, sample_id, group_id)


def _run_calls(env: Any, calls: list[Any], messages: list[Message], stats: dict[str, float]) -> list[str]:
    """Each tool call's observation, appended to the graded log; their texts for the model."""
    results = []
    for call in calls:
        obs = env.step(call)
        messages.append(obs)
        stats["tool_errors"] += float(obs.error)
        results.append(obs.content or "")
    return results


async def _user_reply(sample: TaskSample, env: Any, messages: list[Message], stats: dict[str, float],
                      seed: int | None) -> tuple[str, str | None]:
    """The simulated user's reply, and the episode's ending if the reply ends it."""
    user_msgs = await _user_turn(sample, env, messages, seed)
    messages += user_msgs
    stats["user_tool_calls"] += sum(len(m.tool_calls) for m in user_msgs)
    reply = user_msgs[-1].content or ""
    stats["user_turns"] += 1
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
    metrics = {**stats, "num_conversations": float(len(convs)), "response_tokens": float(side.response_tokens),
               "tool_call_validity": valid / attempted if attempted else 0.0,
               "made_tool_call": float(attempted > 0),
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

        return ChatUserSimulator(engine, system_prompt=read_user_prompt(e.user.prompt), **kw)
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
