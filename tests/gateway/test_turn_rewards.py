"""Per-call rewards from agent programs: returned with the reward or posted to the episode's reward URL,
they reach the conversation that recorded each call, and the per-turn estimators train on them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from memrl import Trainer
from memrl.engines.base import SamplingParams
from memrl.gateway.online_rewards import BadField, outcome_of, resolve_calls, turn_rewards_of
from memrl.gateway.program import AgentProgramError
from memrl.gateway.workflow import AgentWorkflow
from memrl.rl import turn_returns
from memrl.rl.turn_credit import step_reinforce_advantages
from memrl.testing.scripted import ScriptedEngine

HERE = "tests.gateway.test_turn_rewards"


async def _post(client, body) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(client.reward_url, json=body, headers={"Authorization": f"Bearer {client.api_key}"})


async def _ask(client, messages) -> str:
    r = await client.chat.completions.create(model=client.model_name, max_tokens=4, messages=messages)
    return r.choices[0].message.content or ""


async def scored_calls(client, sample):
    """Two unmerged calls: call 0 rewarded by a post while the program runs, the last one in its result."""
    said = await _ask(client, [{"role": "user", "content": f"Say {sample['word']}"}])
    judged = await _ask(client, [{"role": "system", "content": "Judge."}, {"role": "user", "content": said or "-"}])
    posted = await _post(client, {"turn_rewards": [{"call": 0, "reward": float(len(said) % 3)}]})
    assert posted.status_code == 200, posted.text
    return {"reward": float(len(judged) % 2), "turn_rewards": [{"call": -1, "reward": 0.5}]}


async def chat_turns(client, sample):
    """A chat continued turn by turn (merged into one conversation), then a separate call; numbers per call."""
    history = [{"role": "user", "content": "Hello"}]
    history.append({"role": "assistant", "content": await _ask(client, history)})
    history.append({"role": "user", "content": "More"})
    await _ask(client, history)
    await _ask(client, [{"role": "user", "content": "Unrelated"}])
    return {"reward": 1.0, "turn_rewards": [1.0, 2.0, 4.0]}


SEEN: list[tuple[int, str]] = []  # (status, named field) of each refused post, kept by refused_posts


async def refused_posts(client, sample):
    """What the reward URL refuses while a program runs (it returns its reward, so a posted one is refused)."""
    bodies = [{"turn_rewards": [{"call": 0, "reward": 1}]}]  # before any call
    answers = [await _post(client, bodies[0])]
    await _ask(client, [{"role": "user", "content": "hi"}])
    for body in [{"reward": 1.0}, {"metrics": {"x": 1}}, {"turn_rewards": [{"call": 3, "reward": 1}]},
                 {"turn_rewards": [{"call": 0, "reward": "high"}]}, {"turn_rewards": {"0": 1}}, {"rewards": []}]:
        answers.append(await _post(client, body))
    SEEN.extend((a.status_code, a.json()["error"]["param"]) for a in answers)
    return 0.0


async def bad_call_index(client, sample):
    await _ask(client, [{"role": "user", "content": "hi"}])
    return {"reward": 1.0, "turn_rewards": [{"call": 1, "reward": 1.0}]}


def _episode(gateway, tok, program: str, sample=None):
    wf = AgentWorkflow(program=f"{HERE}:{program}", merge=True)
    engine = ScriptedEngine(lambda prompt, params: tok.encode(" y", add_special_tokens=False)
                            + [tok.eos_token_id])
    return asyncio.run(wf.episode(sample or {"word": "apple"}, engine=engine, tokenizer=tok,
                                  sampling=SamplingParams(seed=1), services={"gateway": gateway}))


def test_posted_and_returned_call_rewards_reach_their_conversations(gateway, tools_tokenizer):
    traj = _episode(gateway, tools_tokenizer, "scored_calls")
    assert traj.num_conversations == 2 and traj.reward == 0.0  # len(" y") % 2
    assert [c.reward for c in traj.conversations] == [2.0, 0.5]  # len(" y") % 3, then the returned one


def test_merged_calls_sum_their_rewards(gateway, tools_tokenizer):
    traj = _episode(gateway, tools_tokenizer, "chat_turns")
    assert traj.num_conversations == 2  # calls 0 and 1 are one conversation, call 2 its own
    assert [c.reward for c in traj.conversations] == [3.0, 4.0]


def test_the_reward_url_refuses_what_it_cannot_use(gateway, tools_tokenizer):
    SEEN.clear()
    traj = _episode(gateway, tools_tokenizer, "refused_posts")
    assert SEEN == [(400, "turn_rewards[0].call"), (400, "reward"), (400, "metrics"), (400, "turn_rewards[0].call"),
                    (400, "turn_rewards[0].reward"), (400, "turn_rewards"), (400, "rewards")]
    assert [c.reward for c in traj.conversations] == [None]  # nothing refused was applied


def test_a_returned_call_that_was_not_made_fails_the_episode(gateway, tools_tokenizer):
    with pytest.raises(AgentProgramError, match=r"returned turn_rewards\[0\].call: no call 1: the episode has made "
                                                r"1 call so far"):
        _episode(gateway, tools_tokenizer, "bad_call_index")


def test_reports_are_checked_field_by_field():
    assert turn_rewards_of([0.5, {"call": -1, "reward": 2}]) == [(0, 0.5), (-1, 2.0)]
    for body, param in [({"reward": float("nan")}, "reward"), ({"reward": True}, "reward"),
                        ({"reward": 1, "metrics": {"a": "x"}}, "metrics.a"), ({"metrics": {}}, "reward"),
                        ({"reward": 1, "turn_rewards": [{"call": 1.5, "reward": 1}]}, "turn_rewards[0].call"),
                        ({"reward": 1, "turn_rewards": [{"call": 0, "reward": 1, "why": 2}]}, "turn_rewards[0].why"),
                        ({"reward": 1, "extra": 1}, "extra"), ([1], "body"),
                        ({"reward": 1, "metrics": {f"m{i}": 1 for i in range(65)}}, "metrics"),
                        ({"reward": 1, "metrics": {"x" * 201: 1}}, "metrics")]:
        with pytest.raises(BadField) as err:
            outcome_of(body, need_reward=True)
        assert err.value.param == param
    assert len(outcome_of({"reward": 1, "metrics": {f"m{i}": 1 for i in range(64)}}, need_reward=True).metrics) == 64
    with pytest.raises(BadField, match=r"turn_rewards\[1\].call: no call -3"):
        resolve_calls(["a", "b"], [(1, 1.0), (-3, 1.0)])
    assert resolve_calls(["a", "b"], [(-1, 1.0), (0, 2.0)]) == [("b", 1.0), ("a", 2.0)]


def test_call_rewards_train_per_conversation_advantages(tmp_path: Path, monkeypatch) -> None:
    """step_reinforce on a program's per-call rewards: each conversation's advantage is the pure function's."""
    cfg = {"model": {"path": "tiny"}, "engine": {"device": "cpu"},
           "algorithm": {"n": 4, "adv_estimator": "step_reinforce", "gamma": 0.9},
           "workflow": {"name": "agent", "options": {"program": f"{HERE}:scored_calls", "max_tokens": 4}},
           "trainer": {"total_steps": 2, "prompts_per_step": 1, "lr": 1e-3, "rollouts_per_step": 4,
                       "output_dir": str(tmp_path / "run")}}
    trainer = Trainer(cfg, train=[{"word": "apple"}, {"word": "river"}])
    trainer.run()
    assert trainer.step == 2
    for f in sorted((tmp_path / "run" / "rollouts").glob("*.jsonl")):
        records = [json.loads(line) for line in f.read_text().splitlines()]
        assert len(records) == 4 and all(len(r["conversations"]) == 2 for r in records)
        returns, groups, got = [], [], []
        for rec in records:
            rewards = [c["reward"] or 0.0 for c in rec["conversations"]]
            assert rewards[1] == 0.5 and rewards[0] in (0.0, 1.0, 2.0)
            rewards[-1] += rec["reward"]
            for t, g in enumerate(turn_returns(rewards, 0.9).tolist()):
                returns.append(g), groups.append(rec["group_id"])
                got.append(rec["conversations"][t]["advantage"])
        assert got == pytest.approx(step_reinforce_advantages(returns, groups).tolist(), abs=1e-6)
        assert any(round(r["conversations"][0]["advantage"], 5) != round(r["conversations"][1]["advantage"], 5)
                   for r in records)


def test_an_online_outcome_may_not_use_a_metric_name_the_trainer_writes():
    from memrl.gateway.online_rewards import BadField, outcome_of

    assert outcome_of({"reward": 1, "metrics": {"steps": 3}}, need_reward=True).metrics == {"steps": 3.0}
    for name in ("step", "reward", "time/agent"):
        with pytest.raises(BadField, match="a name the trainer writes itself") as err:
            outcome_of({"reward": 1, "metrics": {name: 3}}, need_reward=True)
        assert err.value.param == f"metrics.{name}"
    with pytest.raises(BadField, match="within") as err:
        outcome_of({"reward": 1e308}, need_reward=True)  # one agent's number must not wreck the step's update
    assert err.value.param == "reward"
