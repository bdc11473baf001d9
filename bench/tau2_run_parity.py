"""A whole τ²-bench run beside a whole ``memrl eval``, agent, user and judge all played by one fake chat server.

τ²-bench runs each task with its own runner (``run_single_task``: ``LLMAgent``, ``UserSimulator``,
orchestrator, evaluator with the NL-assertion judge), every model reached through LiteLLM. memrl runs
the same tasks with ``memrl eval --workflow tool_agent`` as a user would, the agent over
``workflow.options.tool_protocol=openai_chat`` and the user and judge over ``protocol=chat``, with
``env.prompts=tau2``. The fake server answers from the request alone: the agent calls a lookup tool
(arguments written compactly, one with a non-ASCII name) after odd user turns and writes text
otherwise; the user (on telecom) looks at its phone's status bar before its second line and stops
after its third; the judge meets every assertion. Printed per task:
whether the agent's, the user's and the judge's requests are equal, and both rewards.

    pip install loguru pandas toml addict deepdiff python-dotenv litellm   # what importing τ²-bench needs
    TAU2_DATA_DIR=~/tau2-bench/data PYTHONPATH=~/tau2-bench/src \
        python bench/tau2_run_parity.py --data ~/tau2-bench

Nothing leaves the machine: both runs talk to fake servers on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fake_openai import FakeServer

MODEL = "gpt-4.1-2025-04-14"
LOOKUP = {"retail": ("find_user_id_by_name_zip", '{"first_name":"Zoë","last_name":"Rossi","zip":"19122"}'),
          "airline": ("get_user_details", '{"user_id":"mia_li_3668"}'),
          "telecom": ("get_customer_by_phone", '{"phone_number":"555-123-2002"}')}
SENT = ("messages", "tools", "tool_choice", "temperature", "max_tokens", "top_p", "model")


def who(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    return "judge" if "expectedOutcome" in system else "user" if "<scenario>" in system else "agent"


def answer(domain: str):
    """The fake server's part for ``domain``: agent, user or judge, decided from the request alone."""
    def reply(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        msgs, role = body["messages"], who(body)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if role == "judge":
            outcomes = ast.literal_eval(msgs[1]["content"].split("expectedOutcomes:")[1].strip())
            message["content"] = json.dumps({"results": [
                {"expectedOutcome": o, "reasoning": "seen", "metExpectation": True} for o in outcomes]})
        elif role == "user":
            said = sum(m["role"] == "assistant" for m in msgs)
            if body.get("tools") and said == 1 and msgs[-1]["role"] == "user":  # telecom: look at the phone first
                message["tool_calls"] = [{"id": "ucall_1", "type": "function",
                                          "function": {"name": "check_status_bar", "arguments": "{}"}}]
            else:
                message["content"] = "###STOP###" if said >= 3 else f"Line {said + 1}: I need help with my account."
        else:
            users = sum(m["role"] == "user" for m in msgs)
            if msgs[-1]["role"] == "user" and users % 2 == 1:
                name, args = LOOKUP[domain]
                message["tool_calls"] = [{"id": f"call_{len(msgs)}", "type": "function",
                                          "function": {"name": name, "arguments": args}}]
            else:
                message["content"] = f"Noted ({len(msgs)} messages so far). What else can I do?"
        return 200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "message": message,
                                  "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
    return reply


def normal(raw: str) -> tuple[str, dict[str, Any]]:
    """(whose, the fields compared); LiteLLM's ``name`` beside ``function`` and None-valued keys set aside."""
    body = json.loads(raw)
    out = {k: body[k] for k in SENT if k in body}
    out["messages"] = [{k: v for k, v in m.items() if v is not None} for m in body["messages"]]
    for m in out["messages"]:
        for c in m.get("tool_calls", []):
            c.pop("name", None)
    return who(body), out


def theirs(domain: str, task_id: str, url: str) -> float:
    from tau2.data_model.simulation import TextRunConfig
    from tau2.registry import registry
    from tau2.runner.batch import run_single_task

    args = {"temperature": 0.0, "api_base": url, "api_key": "sk-local"}
    config = TextRunConfig(domain=domain, agent="llm_agent", user="user_simulator", llm_agent=f"openai/{MODEL}",
                           llm_args_agent=args, llm_user=f"openai/{MODEL}", llm_args_user=dict(args))
    task = next(t for t in registry.get_tasks_loader(domain)() if t.id == task_id)
    return run_single_task(config, task).reward_info.reward


def ours(domain: str, task_id: str, url: str, data: Path) -> float:
    out = Path(tempfile.mkdtemp(prefix="memrl_parity_"))
    side = [f"env.{s}.{k}={v}" for s in ("user", "judge") for k, v in
            (("protocol", "chat"), ("engine", "openai"), ("base_url", url), ("model", MODEL))]
    cmd = [sys.executable, "-m", "memrl.cli.main", "eval", "--workflow", "tool_agent", "--domain", domain,
           "--data-dir", str(data), "--split", "base", "--task-ids", task_id, "--engine", "openai", "--base-url", url,
           "--model", MODEL, "--temperature", "0", "--out", str(out),
           "workflow.options.tool_protocol=openai_chat", "workflow.options.chat_omit=[max_tokens,top_p]",
           "env.solo=false", "env.prompts=tau2",
           "env.user.temperature=0", *side]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"memrl eval failed:\n{done.stderr[-3000:]}")
    result = json.loads((out / "results.json").read_text())
    return result["per_task"][task_id]["rewards"][0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a τ²-bench clone (memrl's env.data_dir)")
    ap.add_argument("--tasks", type=int, default=4, help="tasks per domain (the first of each)")
    ap.add_argument("--domains", default="retail,airline,telecom", help="comma-separated")
    args = ap.parse_args()
    os.environ.update(OPENAI_API_KEY="sk-local", LITELLM_LOCAL_MODEL_COST_MAP="True")
    from loguru import logger
    from tau2.registry import registry

    logger.remove()
    equal = total = 0
    for domain in args.domains.split(","):
        for task in registry.get_tasks_loader(domain)()[: args.tasks]:
            runs, rewards = [], []
            for run in (lambda u: theirs(domain, task.id, u), lambda u: ours(domain, task.id, u, args.data)):
                server = FakeServer(answer(domain))
                os.environ["OPENAI_BASE_URL"] = server.url  # τ²-bench's judge model is reached this way
                rewards.append(run(server.url))
                server.close()
                runs.append([normal(r) for r in server.requests])
            verdict = {}
            for part in ("agent", "user", "judge"):
                a, b = ([body for w, body in r if w == part] for r in runs)
                verdict[part] = f"{len(a)}/{len(b)} {'equal' if a == b else 'DIFFER'}"
            same = all(v.endswith("equal") for v in verdict.values()) and rewards[0] == rewards[1]
            equal, total = equal + same, total + 1
            print(f"{domain:8} {task.id[:40]:40} " + "  ".join(f"{k} {v}" for k, v in verdict.items())
                  + f"  reward tau2 {rewards[0]} memrl {rewards[1]}")
    print(f"{equal}/{total} tasks: equal requests and equal rewards")


if __name__ == "__main__":
    main()
