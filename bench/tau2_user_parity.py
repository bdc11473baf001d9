"""memrl's chat-protocol user simulator and judge beside τ²-bench's own, against one local fake chat server.

For each task, the same scripted agent talks to τ²-bench's ``UserSimulator`` (imported from your
clone, reaching the server through LiteLLM as τ²-bench does) and to memrl's ``ChatUserSimulator``
(``env.user.protocol=chat``). The agent greets, asks the user to check their phone's status bar and
turn mobile data on, then asks whether anything else is needed. The fake server answers from the
request alone: where tools are offered and the user was just asked to act, two tool calls
(``check_status_bar``, ``toggle_data``) in one message; otherwise a line of text. τ²-bench's user
calls run in τ²-bench's environment, memrl's in memrl's. Printed per task: whether every request's
messages, tools and sampling fields are equal, and the number of requests. Then the NL-assertion
judge: τ²-bench's ``NLAssertionsEvaluator`` beside memrl's ``LLMNLJudge`` with ``chat=True`` and
τ²-bench's prompt (``env.prompts=tau2``).

    pip install loguru pandas toml addict deepdiff python-dotenv litellm   # what importing τ²-bench needs
    TAU2_DATA_DIR=~/tau2-bench/data PYTHONPATH=~/tau2-bench/src \
        python bench/tau2_user_parity.py --data ../shared/tau2

Nothing leaves the machine: both clients talk to the fake server on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from fake_openai import FakeServer, comparable

MODEL = "gpt-4.1-2025-04-14"  # τ²-bench's default user and judge model
AGENT = ["Hi! How can I help you today?",
         "Could you check your status bar, and turn mobile data on?",
         "Thanks. Is there anything else I can help with?"]
SENT = ("messages", "tools", "tool_choice", "temperature", "max_tokens", "seed", "model")


def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Two device calls right after the agent asked for them (tools offered), else text; ids from the request."""
    msgs = body["messages"]
    asked = msgs[-1]["role"] == "user" and "status bar" in (msgs[-1]["content"] or "")
    message: dict[str, Any] = {"role": "assistant", "content": f"Reply to message {len(msgs)}."}
    if body.get("tools") and asked:
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{len(msgs)}_{k}", "type": "function", "function": {"name": name, "arguments": "{}"}}
            for k, name in enumerate(("check_status_bar", "toggle_data"))]}
    return 200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def normal(raw: str) -> dict[str, Any]:
    """The request fields both clients set (LiteLLM's artefacts set aside)."""
    return comparable(json.loads(raw), SENT)


def theirs(domain: str, task_id: str, url: str) -> None:
    """τ²-bench's user through the scripted conversation, its device calls run in τ²-bench's environment."""
    from tau2.data_model.message import AssistantMessage, MultiToolMessage
    from tau2.registry import registry
    from tau2.user.user_simulator import UserSimulator

    env = registry.get_env_constructor(domain)()
    task = next(t for t in registry.get_tasks_loader(domain)() if t.id == task_id)
    init = task.initial_state
    env.set_state(init.initialization_data if init else None, init.initialization_actions if init else None, [])
    tools = env.get_user_tools(include=task.user_tools) if env.user_tools is not None else None
    user = UserSimulator(llm=f"openai/{MODEL}", instructions=str(task.user_scenario), tools=tools or None,
                         llm_args={"temperature": 0.0, "api_base": url, "api_key": "sk-local"})
    state = user.get_init_state()
    for text in AGENT:
        reply, state = user.generate_next_message(AssistantMessage(role="assistant", content=text), state)
        while reply.is_tool_call():
            results = [env.get_response(c) for c in reply.tool_calls]
            wrapped = results[0] if len(results) == 1 else MultiToolMessage(role="tool", tool_messages=results)
            reply, state = user.generate_next_message(wrapped, state)


def ours(domain: str, task_id: str, url: str, data: Path) -> None:
    """memrl's chat-protocol user through the same conversation, its calls run in memrl's environment."""
    from memrl.engines.openai import OpenAIEngine
    from memrl.envs.domain import load_domain
    from memrl.envs.messages import Message
    from memrl.envs.user_chat import ChatUserSimulator

    lib = load_domain(domain, data, prompts="tau2")
    task = next(t for t in lib.tasks if t.id == task_id)
    env = lib.new_env()
    env.set_state(task.initial_state)
    user = ChatUserSimulator(OpenAIEngine(url, MODEL, api_key_env="OPENAI_API_KEY"), temperature=0.0,
                             prompts="tau2")
    log: list[Message] = []
    for text in AGENT:
        log.append(Message("assistant", text))
        if env.user_tools is not None and env.user_tools.tools:
            log += asyncio.run(user.act(task, log, env))
        else:
            log.append(Message("user", asyncio.run(user.reply(task, log))))


def judges() -> bool:
    """Both judges on one conversation: equal requests."""
    from tau2.data_model.message import AssistantMessage, UserMessage
    from tau2.evaluator.evaluator_nl_assertions import NLAssertionsEvaluator

    from memrl.engines.openai import OpenAIEngine
    from memrl.envs.messages import Message
    from memrl.envs.nl_judge import LLMNLJudge

    talk = [("assistant", AGENT[0]), ("user", "My data does not work."), ("assistant", "Data is on now.")]
    assertions = ["Agent turns mobile data on", "Agent offers a refund"]
    server = FakeServer(lambda body: answer({**body, "tools": None}))
    os.environ.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-local")
    kinds = {"assistant": AssistantMessage, "user": UserMessage}
    try:
        NLAssertionsEvaluator.evaluate_nl_assertions([kinds[r](role=r, content=c) for r, c in talk], assertions)
    except json.JSONDecodeError:  # the fake verdict is not JSON: only the request matters here
        pass
    judge = LLMNLJudge(OpenAIEngine(server.url, MODEL), None, max_tokens=None, seed=None, chat=True, prompts="tau2")
    asyncio.run(judge.check(assertions, [Message(r, c) for r, c in talk]))
    server.close()
    return normal(server.requests[0]) == normal(server.requests[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="memrl's env.data_dir (τ²-bench's domain files)")
    ap.add_argument("--tasks", type=int, default=6, help="tasks per domain")
    args = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-local")
    from loguru import logger
    from tau2.registry import registry

    logger.remove()  # τ²-bench logs every turn at DEBUG

    equal = total = 0
    for domain in ("telecom", "retail", "airline"):
        for task in registry.get_tasks_loader(domain)()[: args.tasks]:
            runs = []
            for run in (lambda u: theirs(domain, task.id, u), lambda u: ours(domain, task.id, u, args.data)):
                server = FakeServer(answer)
                run(server.url)
                server.close()
                runs.append([normal(r) for r in server.requests])
            same = runs[0] == runs[1]
            equal, total = equal + same, total + 1
            calls = sum(len(m.get("tool_calls", [])) for m in runs[1][-1]["messages"]) if runs[1] else 0
            print(f"{domain:8} {task.id[:58]:58} requests {len(runs[0])}/{len(runs[1])}  user calls {calls}  "
                  f"equal {same}")
            if not same:
                diff = next(i for i, (a, b) in enumerate(zip(*runs)) if a != b) if min(map(len, runs)) else 0
                print("  first differing request:", diff)
    print(f"user simulator: {equal}/{total} tasks with equal requests")
    print(f"NL-assertion judge: equal request {judges()}")


if __name__ == "__main__":
    main()
