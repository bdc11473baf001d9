"""A whole τ²-bench run beside a whole ``memrl eval``, agent, user and judge all played by one fake chat server.

τ²-bench runs each task with its own runner (``run_single_task``: ``LLMAgent``, ``UserSimulator``,
orchestrator, evaluator with the NL-assertion judge), every model reached through LiteLLM. memrl runs
the same tasks with ``memrl eval --workflow tool_agent`` as a user would, the agent over
``workflow.options.tool_protocol=openai_chat`` and the user and judge over ``protocol=chat``, with
``env.prompts=tau2``. The fake server answers from the request alone: the agent calls a lookup tool
(arguments written compactly, one with a non-ASCII name), then the task's gold actions, one a turn,
then writes text (with the task's ``communicate_info``); the user (on telecom) looks at its phone's
status bar and makes its gold device calls before its second line, and stops after its third; the
judge meets every assertion. Every fourth task leaves its last gold call out. Printed per task: whether the agent's, the user's
and the judge's requests are equal, and both rewards. Compared: messages, tools, tool_choice,
temperature, max_tokens, top_p, seed, model; and each run's agent and user cost (LiteLLM's prices of the fake
usage, 1,000 prompt tokens a reply of which 512 cached, and 50 completion tokens). The seed is the first trial's of a run seeded 300 (τ²-bench's
default): its batch runner hands ``run_single_task`` that seed, which goes on every agent and user call;
memrl sends the same with ``workflow.options.seeds=tau2 sampling.seed=300``.

Both runs have τ²-bench's limits, 200 steps and 10 tool errors (``--max-steps``, ``--max-errors``; memrl's
``workflow.options.max_steps``/``max_errors``), and each line prints both termination reasons. With
``--errors`` every other task's agent looks a user up with wrong arguments, again and again, until the error
limit ends the run (``too_many_errors``); a small ``--max-steps`` (9, say) cuts the others (``max_steps``).
``--timeout S`` gives both runs τ²-bench's wall-clock limit (memrl's ``workflow.options.timeout_s``) and
``--user-delay D`` makes every user reply take D seconds. With ``--timeout 7 --user-delay 2`` the user's
fourth request ends at 8 s: where it is the user's stop, the stop is recorded (``user_stop``); where a
telecom user is still at its phone, the run ends after that round (``timeout``), the clock read where
τ²-bench reads it (a margin of 1 s either way, so a loaded machine does not move the cut).
``--enforce`` turns on τ²-bench's communication rule in both (``--enforce-communication-protocol``;
memrl's ``workflow.options.enforce_protocol``) and has some agents and telecom users write text beside a
tool call: those runs end as ``agent_error`` / ``user_error``, the others as before.

With ``--solo``, τ²-bench's solo agent (``llm_agent_solo``, no user) on telecom's tickets beside
``env.solo=true env.prompts=tau2``: the fake agent makes the task's gold calls and then calls ``done``
(every fourth task writes text instead: τ²-bench's solo agent raises, which this script scores 0, as memrl's
default ends it, ``agent_error``, 0; with ``--invalid`` both go through the retries below instead).

``--invalid`` sets memrl's ``workflow.options.invalid_messages=tau2`` and ``--max-retries 3``, and runs
τ²-bench's task through its batch runner's ``run_with_retry`` (3 retries, its default): the agent of every
fourth task (from the second) sends an empty message after its lookup, and that of every fourth (from the
third) writes its lookup's arguments as broken JSON. τ²-bench raises on both; every try sends the same
requests (the fake server answers from the request alone), so both runs end as ``infrastructure_error``
after four tries, without a reward.

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
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fake_openai import FakeServer, comparable

MODEL = "gpt-4.1-2025-04-14"
BAD_LOOKUP = {"retail": '{"first_name":"No","last_name":"Body","zip":"00000"}', "airline": '{"user_id":"nobody_0"}',
              "telecom": '{"phone_number":"000-000-0000"}'}
LOOKUP = {"retail": ("find_user_id_by_name_zip", '{"first_name":"Zoë","last_name":"Rossi","zip":"19122"}'),
          "airline": ("get_user_details", '{"user_id":"mia_li_3668"}'),
          "telecom": ("get_customer_by_phone", '{"phone_number":"555-123-2002"}')}
SENT = ("messages", "tools", "tool_choice", "temperature", "max_tokens", "top_p", "seed", "model")
RUN_SEED = 300  # τ²-bench's default --seed


def who(body: dict[str, Any]) -> str:
    system = body["messages"][0]["content"]
    return "judge" if "expectedOutcome" in system else "user" if "<scenario>" in system else "agent"


def answer(domain: str, plan: list[tuple[str, str]], say: str = "", text_end: bool = False,
           user_plan: list[tuple[str, str]] = (), fail: bool = False, user_delay: float = 0.0,
           mixed: str = "", invalid: str = ""):
    """The fake server's part for ``domain``: agent, user or judge, decided from the request alone (``plan``:
    the agent's gold calls; ``say``: what it must tell the user; ``text_end``: the solo agent then writes
    text instead of calling done; ``user_plan``: the user's gold device calls; ``fail``: the agent repeats a
    lookup with wrong arguments; ``user_delay``: seconds each user reply takes; ``mixed``: "agent" or "user"
    writes text beside its first tool call, which τ²-bench's communication rule refuses; ``invalid``: "empty",
    the agent's message after its lookup is empty, or "json", its lookup's arguments are broken JSON)."""
    def reply(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        msgs, role = body["messages"], who(body)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if role == "judge":
            outcomes = ast.literal_eval(msgs[1]["content"].split("expectedOutcomes:")[1].strip())
            message["content"] = json.dumps({"results": [
                {"expectedOutcome": o, "reasoning": "seen", "metExpectation": True} for o in outcomes]})
        elif role == "user":
            time.sleep(user_delay)
            said = sum(m["role"] == "assistant" for m in msgs)
            calls, done = [("check_status_bar", "{}"), *user_plan], sum(m["role"] == "tool" for m in msgs)
            if body.get("tools") and said >= 1 and done < len(calls):  # telecom: the status bar, then its gold calls
                message["tool_calls"] = [{"id": f"ucall_{done}", "type": "function",
                                          "function": {"name": calls[done][0], "arguments": calls[done][1]}}]
                message["content"] = "One moment." if mixed == "user" else None
            else:
                message["content"] = "###STOP###" if said >= 3 else f"Line {said + 1}: I need help with my account."
        elif body.get("tool_choice") == "required":  # τ²-bench's solo agent: the gold calls, then done (or text)
            tools = sum(m["role"] == "tool" for m in msgs)
            name, args = (plan + [("done", "{}")])[min(tools, len(plan))]
            if tools == len(plan) and text_end:
                message["content"] = "I think the ticket is solved."
            else:
                message["tool_calls"] = [{"id": f"call_{len(msgs)}", "type": "function",
                                          "function": {"name": name, "arguments": args}}]
        else:  # the agent: a lookup, then its gold calls, one a turn; then text (with what it must tell)
            calls, tools = [LOOKUP[domain], *plan], sum(m["role"] == "tool" for m in msgs)
            if fail:
                calls, tools = [(LOOKUP[domain][0], BAD_LOOKUP[domain])], 0
            if invalid == "json":
                calls = [(calls[0][0], calls[0][1][:-3])]
            if invalid == "empty" and tools == 1:
                message["content"] = ""
            elif tools < len(calls):
                message["tool_calls"] = [{"id": f"call_{len(msgs)}", "type": "function",
                                          "function": {"name": calls[tools][0], "arguments": calls[tools][1]}}]
                message["content"] = "Let me look that up." if mixed == "agent" else None
            else:
                message["content"] = f"Done ({len(msgs)} messages so far). {say}".strip()
        return 200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "message": message,
                                  "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                     "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
                               "prompt_tokens_details": {"cached_tokens": 512}}}
    return reply


def normal(raw: str) -> tuple[str, dict[str, Any]]:
    """(whose, the fields compared), LiteLLM's artefacts set aside."""
    body = json.loads(raw)
    return who(body), comparable(body, SENT)


Limits = tuple[int, int, "float | None", bool, bool]  # max steps, max errors, timeout (s), enforce, invalid=tau2


def theirs(domain: str, task_id: str, url: str, solo: bool, limits: Limits) -> tuple[float, str]:
    from tau2.data_model.simulation import TextRunConfig
    from tau2.registry import registry
    from tau2.runner.batch import run_single_task

    if solo:
        _quiet_dummy_user(registry)
    args = {"temperature": 0.0, "api_base": url, "api_key": "sk-local"}
    config = TextRunConfig(domain=domain, agent="llm_agent_solo" if solo else "llm_agent",
                           user="dummy_user" if solo else "user_simulator", llm_agent=f"openai/{MODEL}",
                           llm_args_agent=args, llm_user=f"openai/{MODEL}", llm_args_user=dict(args),
                           max_steps=limits[0], max_errors=limits[1], timeout=limits[2],
                           enforce_communication_protocol=limits[3])
    task = next(t for t in registry.get_tasks_loader(domain)() if t.id == task_id)
    random.seed(RUN_SEED)  # what τ²-bench's batch runner does before it draws each trial's seed
    seed = random.randint(0, 1000000)
    if limits[4]:  # through its batch runner's retries: a run that raises ends as infrastructure_error
        from tau2.runner.progress import run_with_retry

        sim = run_with_retry(lambda: run_single_task(config, task, seed=seed), task, 0, seed, max_retries=3,
                             retry_delay=0.0, console_display=False)
        reward = sim.reward_info.reward if sim.reward_info else None
        return reward, sim.termination_reason.value, _cents(sim.agent_cost, sim.user_cost)
    try:
        sim = run_single_task(config, task, seed=seed)
        return sim.reward_info.reward, sim.termination_reason.value, _cents(sim.agent_cost, sim.user_cost)
    except ValueError as err:  # its solo agent raises on a text turn; its batch runner scores that run 0
        if "only supports tool calls" not in str(err):
            raise
        return 0.0, "agent_error", None


def _quiet_dummy_user(registry: Any) -> None:
    """τ²-bench (a2c0247)'s runner builds every user with ``tools``, ``instructions``, ``llm`` and ``llm_args``,
    which its ``DummyUser`` (the solo run's user) does not take; it gets a ``DummyUser`` that ignores them."""
    from tau2.user.user_simulator import DummyUser

    class Dummy(DummyUser):
        def __init__(self, **_: Any) -> None:
            super().__init__()

    registry._users["dummy_user"] = Dummy


def ours(domain: str, task_id: str, url: str, data: Path, solo: bool, limits: Limits) -> tuple[float, str]:
    from memrl.eval.tau2_results import TERMINATION

    out = Path(tempfile.mkdtemp(prefix="memrl_parity_"))
    side = [f"env.{s}.{k}={v}" for s in ("user", "judge") for k, v in
            (("protocol", "chat"), ("engine", "openai"), ("base_url", url), ("model", MODEL))]
    cmd = [sys.executable, "-m", "memrl.cli.main", "eval", "--workflow", "tool_agent", "--domain", domain,
           "--data-dir", str(data), "--split", "base", "--task-ids", task_id, "--engine", "openai", "--base-url", url,
           "--model", MODEL, "--temperature", "0", "--out", str(out),
           "workflow.options.tool_protocol=openai_chat", "workflow.options.chat_omit=[max_tokens,top_p]",
           "workflow.options.seeds=tau2", f"sampling.seed={RUN_SEED}", f"workflow.options.max_turns={limits[0]}",
           f"workflow.options.max_steps={limits[0]}", f"workflow.options.max_errors={limits[1]}",
           f"env.solo={str(solo).lower()}", "env.prompts=tau2", "env.user.temperature=0", *side,
           *([f"workflow.options.timeout_s={limits[2]}"] if limits[2] else []),
           f"workflow.options.enforce_protocol={str(limits[3]).lower()}",
           *(["workflow.options.invalid_messages=tau2", "--max-retries", "3", "eval.retry_delay_s=0"]
             if limits[4] else [])]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"memrl eval failed:\n{done.stderr[-3000:]}")
    result = json.loads((out / "results.json").read_text())
    sim = json.loads((out / "tau2_results.json").read_text())["simulations"][0]
    if sim["termination_reason"] == "infrastructure_error":
        return None, sim["termination_reason"], _cents(sim["agent_cost"], sim["user_cost"])
    ending = json.loads(next((out / "episodes").rglob("0.json")).read_text())["info"]["ending"]
    costs = None if solo and ending == "agent_error" else _cents(sim["agent_cost"], sim["user_cost"])  # τ² raised
    return result["per_task"][task_id]["rewards"][0], TERMINATION.get(ending, "agent_error"), costs


def _cents(*costs: float | None) -> tuple[float | None, ...]:
    """Costs in US cents to 9 places (what is compared: τ²-bench sums per response, memrl prices the sums)."""
    return tuple(None if c is None else round(100 * c, 9) for c in costs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a τ²-bench clone (memrl's env.data_dir)")
    ap.add_argument("--tasks", type=int, default=4, help="tasks per domain (the first of each)")
    ap.add_argument("--domains", default="retail,airline,telecom", help="comma-separated")
    ap.add_argument("--solo", action="store_true", help="τ²-bench's solo agent (no user) on telecom's tickets "
                    "(--domains is then telecom)")
    ap.add_argument("--max-steps", type=int, default=200, help="both runs' step limit (τ²-bench's default 200)")
    ap.add_argument("--max-errors", type=int, default=10, help="both runs' tool-error limit (τ²-bench's default 10)")
    ap.add_argument("--errors", action="store_true", help="every other task's agent repeats a failing lookup")
    ap.add_argument("--timeout", type=float, default=None, help="both runs' wall-clock limit in seconds "
                    "(τ²-bench's default: none)")
    ap.add_argument("--user-delay", type=float, default=0.0, help="seconds every user reply takes")
    ap.add_argument("--enforce", action="store_true", help="both runs enforce τ²-bench's communication rule; "
                    "the agent of every fourth task (from the second) and the telecom user of every fourth (from "
                    "the third) write text beside a tool call")
    ap.add_argument("--invalid", action="store_true", help="memrl's invalid_messages=tau2 and both runs' retries; "
                    "some agents send an empty message or broken JSON arguments (see above)")
    args = ap.parse_args()
    limits = (args.max_steps, args.max_errors, args.timeout, args.enforce, args.invalid)
    os.environ.update(OPENAI_API_KEY="sk-local", LITELLM_LOCAL_MODEL_COST_MAP="True")
    from loguru import logger
    from tau2.registry import registry

    logger.remove()
    equal = total = 0
    for domain in ("telecom",) if args.solo else args.domains.split(","):
        for i, task in enumerate(registry.get_tasks_loader(domain)()[: args.tasks]):
            gold = task.evaluation_criteria
            plan = [(a.name, json.dumps(a.arguments)) for a in gold.actions or []
                    if args.solo or a.requestor == "assistant"]
            say = " ".join(gold.communicate_info or [])
            user_plan = [(a.name, json.dumps(a.arguments)) for a in gold.actions or []
                         if not args.solo and a.requestor == "user"]
            if i % 4 == 3 and not args.solo:  # every fourth task one gold call short (should score 0)
                plan, user_plan = (plan[:-1], user_plan) if plan else (plan, user_plan[:-1])
            runs, rewards = [], []
            for run in (lambda u: theirs(domain, task.id, u, args.solo, limits),
                        lambda u: ours(domain, task.id, u, args.data, args.solo, limits)):
                server = FakeServer(answer(domain, plan, say, text_end=i % 4 == 3, user_plan=user_plan,
                                           fail=args.errors and i % 2 == 1, user_delay=args.user_delay,
                                           mixed={1: "agent", 2: "user"}.get(i % 4, "") if args.enforce else "",
                                           invalid={1: "empty", 2: "json"}.get(i % 4, "") if args.invalid else ""))
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
                  + f"  tau2 {rewards[0][0]} {rewards[0][1]}  memrl {rewards[1][0]} {rewards[1][1]}"
                  + f"  costs {'equal' if rewards[0][2] == rewards[1][2] else 'DIFFER'} (cents {rewards[0][2]})")
    print(f"{equal}/{total} tasks: equal requests, rewards, termination reasons and costs")


if __name__ == "__main__":
    main()
