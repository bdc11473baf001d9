"""``tool_agent``: a multi-turn tool-using agent in one growing context (τ²-bench style).

The whole episode is one conversation. Token-in/token-out: the prompt is
encoded once; each model turn is appended exactly as sampled (loss 1), and
everything else (tool results, user turns, the end-of-turn token when a turn hit
its length limit) is encoded as its own segment and appended with loss 0.
Earlier turns are never re-tokenized, so the trainer scores exactly the tokens
the engine produced.

An episode ends when the agent writes text in solo mode or ``###STOP###``, when
the user simulator stops, transfers or leaves, on a transfer tool call, or at
the turn/token limits (graded 0, as τ²-bench grades premature endings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memrl.engines.base import Engine, SamplingParams
from memrl.envs.domain import Domain
from memrl.envs.evaluate import evaluate_async, history_messages
from memrl.envs.messages import Message
from memrl.envs.tasks import Task
from memrl.envs.user_sim import UserSimulator, ends_conversation
from memrl.types import Conversation, Trajectory
from memrl.workflows.common import decode, encode_text, stop_token_ids, strip_stop, turn_seed
from memrl.workflows.tool_calls import FORMATS, get_parser, render_call

AGENT_GREETING = "Hi! How can I help you today?"
AGENT_STOP = "###STOP###"
TRANSFER_TOOL = "transfer_to_human_agents"


@dataclass
class TaskSample:
    """One task bound to its domain and, outside solo mode, a user simulator."""

    domain: Domain
    task: Task
    solo: bool = True
    partial: bool = False
    user: UserSimulator | None = None
    nl_judge: Any = None  # memrl.envs.nl_judge.LLMNLJudge (env.nl_judge_model), None: assertions not judged

    @property
    def index(self) -> str:
        return self.task.id


def _render_history(fmt: Any, msgs: list[Message]) -> str:
    out = []
    for m in msgs:
        if m.role == "tool" and m.requestor == "user" or m.role == "user" and (m.tool_calls or not m.content):
            continue  # the user's own device calls and their results are not the agent's to see
        if m.role == "tool":
            out.append(fmt.tool_results([m.content or ""]))
        elif m.role == "assistant":
            text = "\n".join([m.content or ""] + [render_call(c) for c in m.tool_calls]).strip()
            out.append(fmt.turn("assistant", text))
        elif m.role == "user":
            out.append(fmt.turn("user", m.content or ""))
    return "".join(out)


async def _user_turn(sample: TaskSample, env: Any, messages: list[Message], seed: int | None) -> list[Message]:
    """The user's next turn. In a dual-control domain (the user has tools, e.g. telecom's phone) a simulator
    that can act (``act``) calls them first; those calls and results join the graded log, and the agent
    is shown only the final text (the last message)."""
    user = sample.user
    if env.user_tools is not None and env.user_tools.tools and hasattr(user, "act"):
        return await user.act(sample.task, messages, env, seed=seed)  # type: ignore[union-attr]
    return [Message("user", await user.reply(sample.task, messages, seed=seed))]  # type: ignore[union-attr]


async def tool_agent(sample: TaskSample, engine: Engine, tokenizer: Any, config: Any, *,
                     sampling: SamplingParams | None = None, sample_id: str | None = None,
                     group_id: str | None = None) -> Trajectory:
    """Run one episode of ``sample.task`` and grade it with the τ²-bench rules."""
    task, domain = sample.task, sample.domain
    if not sample.solo and sample.user is None:
        raise ValueError("tool_agent outside solo mode needs a user simulator (env.user_model)")
    fmt = FORMATS[config.tool_format]
    parse = get_parser(config.tool_parser)
    messages = history_messages(task)
    env = domain.new_env(solo=sample.solo)
    env.set_state(task.initial_state, messages)
    stops = stop_token_ids(tokenizer)
    end_ids = encode_text(tokenizer, fmt.end)
    base = (sampling or SamplingParams()).with_(stop_token_ids=stops)

    opening: list[Message] = []
    if sample.solo:
        opening.append(Message("user", task.first_message()))
    elif not messages:
        opening.append(Message("assistant", AGENT_GREETING))
        opening += await _user_turn(sample, env, opening, base.seed)
    messages += opening
    prompt = fmt.system(env.policy, env.tool_schemas()) + _render_history(fmt, messages) + fmt.assistant_start
    conv = Conversation()
    conv.append(encode_text(tokenizer, prompt), generated=False)

    stats = {"turns": 0.0, "tool_calls": 0.0, "invalid_tool_calls": 0.0, "tool_errors": 0.0,
             "turn_truncated": 0.0, "user_turns": 0.0, "user_tool_calls": 0.0,
             "prompt_too_long": 0.0}
    ending = "max_turns"
    if not sample.solo and ends_conversation(opening[-1].content or ""):
        ending = "user_stop"
    for turn in range(config.max_turns if ending == "max_turns" else 0):
        budget = min(config.turn_tokens, config.max_total_tokens - len(conv.token_ids))
        if budget <= 0:
            ending = "max_tokens"
            stats["prompt_too_long"] = float(turn == 0)  # cut before the agent said anything: nothing to train
            break
        res = await engine.generate(conv.token_ids, turn_seed(base, turn).with_(max_new_tokens=budget))
        conv.append(res.token_ids, generated=True, logprobs=res.logprobs)
        stats["turns"] += 1
        if not res.token_ids or res.token_ids[-1] not in stops:
            stats["turn_truncated"] += float(res.finish_reason == "length")
            conv.append(end_ids, generated=False)  # close the turn so the next segment is well formed
        text = decode(tokenizer, strip_stop(res.token_ids, stops))
        parsed = parse(text)
        msg = Message("assistant", parsed.content or None, parsed.calls)
        messages.append(msg)
        stats["tool_calls"] += len(parsed.calls) + len(parsed.errors)
        stats["invalid_tool_calls"] += len(parsed.errors)
        if parsed.calls or parsed.errors:
            results = []
            for call in parsed.calls:
                obs = env.step(call)
                messages.append(obs)
                stats["tool_errors"] += float(obs.error)
                results.append(obs.content or "")
            for err in parsed.errors:  # shown to the model, not part of the graded log
                results.append(f"Error: {err}")
            if any(c.name == TRANSFER_TOOL for c in parsed.calls):
                ending = "transfer"
                break
            conv.append(encode_text(tokenizer, "\n" + fmt.tool_results(results) + fmt.assistant_start),
                        generated=False)
            continue
        if AGENT_STOP in text or sample.solo:
            ending = "agent_stop"
            break
        user_msgs = await _user_turn(sample, env, messages, turn_seed(base, 10_000 + turn).seed)
        messages += user_msgs
        stats["user_tool_calls"] += sum(len(m.tool_calls) for m in user_msgs)
        reply = user_msgs[-1].content or ""
        stats["user_turns"] += 1
        marker = ends_conversation(reply)
        if marker is not None:
            ending = "transfer" if marker == "###TRANSFER###" else "user_stop"
            break
        conv.append(encode_text(tokenizer, "\n" + fmt.turn("user", reply) + fmt.assistant_start), generated=False)

    grade = await evaluate_async(domain, task, messages, ending=ending, solo=sample.solo, partial=sample.partial,
                                 nl_judge=sample.nl_judge)
    attempted = stats["tool_calls"]
    valid = attempted - stats["invalid_tool_calls"] - stats["tool_errors"]
    metrics = {**stats, "num_conversations": 1.0, "response_tokens": float(conv.num_generated),
               "tool_call_validity": valid / attempted if attempted else 0.0,
               "made_tool_call": float(attempted > 0),
               "db_match": float(bool(grade.db_match)), "nl_unchecked": float(grade.nl_unchecked),
               "completed": float(ending in ("agent_stop", "user_stop", "transfer"))}
    return Trajectory(conversations=[conv], reward=grade.reward,
                      sample_id=sample_id if sample_id is not None else task.id,
                      group_id=group_id if group_id is not None else task.id, metrics=metrics,
                      info={"task_id": task.id, "ending": ending, "messages": [m.to_dict() for m in messages],
                            "reward_breakdown": grade.breakdown, "note": grade.note,
                            "nl_unchecked": grade.nl_unchecked,
                            "final_text": decode(tokenizer, conv.generated_ids())[-2000:]})


def build_user_simulator(cfg: Any) -> UserSimulator:
    """The user simulator of ``cfg.env``: a local HF model or an OpenAI-compatible server."""
    from memrl.envs.user_sim import LLMUserSimulator
    from memrl.engines.factory import build_side_engine

    e = cfg.env
    if e.user_model is None:
        raise ValueError("env.solo=false needs env.user_model (the simulator's model, or its tokenizer for "
                         "env.user_engine=openai)")
    if e.user_engine == "openai" and not e.user_base_url:
        raise ValueError("env.user_engine=openai needs env.user_base_url")
    engine, tokenizer = build_side_engine(cfg, e.user_model, e.user_engine, e.user_base_url, e.user_served_model,
                                          e.user_api_key_env)
    return LLMUserSimulator.from_prompt_file(engine, tokenizer, e.user_prompt, max_tokens=e.user_max_tokens,
                                             temperature=e.user_temperature)


_USERS: dict[str, UserSimulator] = {}  # by env config: train and eval samples share one simulator
_JUDGES: dict[str, Any] = {}  # likewise one NL-assertion judge


def task_samples(cfg: Any, split: str | None, user: UserSimulator | None = None) -> list[TaskSample]:
    """The tasks of ``split`` bound to their domain (and one shared user simulator outside solo mode)."""
    from memrl.envs.domain import load_domain

    from memrl.envs.nl_judge import build_nl_judge

    domain = load_domain(cfg.env.domain, cfg.env.data_dir, tool_options=cfg.env.tool_options)
    key = cfg.env.model_dump_json()
    if not cfg.env.solo and user is None:
        if key not in _USERS:
            _USERS[key] = build_user_simulator(cfg)
        user = _USERS[key]
    if key not in _JUDGES:
        _JUDGES[key] = build_nl_judge(cfg)
    return [TaskSample(domain, t, solo=cfg.env.solo, partial=cfg.env.partial_credit, user=user,
                       nl_judge=_JUDGES[key]) for t in domain.get_tasks(split)]
