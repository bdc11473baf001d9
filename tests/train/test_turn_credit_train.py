"""Per-turn credit end to end: a workflow with anchor states and turn rewards trains under gigpo and
step_reinforce, and the rollout records hold, per conversation, the advantage the pure function gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from memrl import Trainer
from memrl.rl import gigpo_advantages, turn_returns
from memrl.rl.turn_credit import step_reinforce_advantages
from memrl.workflows import Episode, Workflow, anchor

WORDS = [{"word": w} for w in ("apple", "river")]


class Steps(Workflow):
    """Three turns; the first two share an anchor across a group's episodes (the second by the parity of
    what the first said), the third has none. Turn 1 is rewarded by its parity, the episode by its length."""

    name = "steps"

    async def run(self, ep: Episode) -> None:
        word = ep.sample["word"]
        a = await ep.generate(f"Say {word}:", max_new_tokens=3, state=anchor(word, 0))
        b = await ep.generate(f"Then: {a}", max_new_tokens=2, state=anchor(word, 1, sum(a.ids) % 2))
        ep.turn_reward(float(sum(b.ids) % 2))
        await ep.generate(f"Last: {b}", max_new_tokens=2)
        ep.reward(float(len(a.ids) + len(b.ids)) / 5)


def _config(tmp_path: Path, estimator: str) -> dict:
    return {"model": {"path": "tiny"}, "engine": {"device": "cpu"},
            "algorithm": {"n": 4, "adv_estimator": estimator, "gamma": 0.9, "episode_weight": 1.0,
                          "step_weight": 0.5},
            "trainer": {"total_steps": 2, "prompts_per_step": 2, "lr": 1e-3, "rollouts_per_step": 8,
                        "output_dir": str(tmp_path / "run")}}


def _expected(records: list[dict], estimator: str, norm: str = "mean_std", by_turn: bool = False
              ) -> tuple[list[float], list[float]]:
    """(advantages the pure functions give every generated conversation, those the records hold);
    ``by_turn``: a turn's anchor is its position (where similarity groups each position's states)."""
    scores, returns, groups, states, recorded = [], [], [], [], []
    for rec in records:
        convs = rec["conversations"]
        rewards = [c["reward"] or 0.0 for c in convs]
        rewards[-1] += rec["reward"]  # the outcome is the last turn's reward
        g = turn_returns(rewards, 0.9)
        for t, c in enumerate(convs):
            if "advantage" not in c:
                continue
            scores.append(rec["reward"]), returns.append(float(g[t])), groups.append(rec["group_id"])
            state = c["meta"].get("state")
            key = t if by_turn else state
            states.append(f"{rec['group_id']}|{key}" if state else f"alone#{len(recorded)}")
            recorded.append(c["advantage"])
    if estimator == "gigpo":
        want = gigpo_advantages(scores, returns, groups, states, episode_weight=1.0, step_weight=0.5,
                                method=norm)  # type: ignore[arg-type]
    else:
        want = step_reinforce_advantages(returns, groups)
    return want.tolist(), recorded


@pytest.mark.parametrize("estimator", ["gigpo", "step_reinforce"])
def test_turn_rewards_and_states_reach_the_rollout_records(tmp_path: Path, estimator: str) -> None:
    trainer = Trainer(_config(tmp_path, estimator), workflow=Steps(), train=WORDS)
    trainer.run()
    assert trainer.step == 2
    for f in sorted((tmp_path / "run" / "rollouts").glob("*.jsonl")):
        records = [json.loads(line) for line in f.read_text().splitlines()]
        assert len(records) == 8  # every episode of the step, so the groups are whole
        states = [c["meta"].get("state") for r in records for c in r["conversations"]]
        assert states.count(None) == 8 and len(set(states)) < len(states)  # anchors repeat across episodes
        assert {c["reward"] for r in records for c in r["conversations"][1:2]} <= {0.0, 1.0}
        want, got = _expected(records, estimator)
        assert got == pytest.approx(want, abs=1e-6)
        assert len({round(a, 6) for a in got}) > 2  # turns of one episode differ


def test_the_cli_trains_the_same_workflow_under_gigpo(tmp_path: Path) -> None:
    """Through the CLI, with verl-agent's mean_norm (algorithm.turn_norm=mean): centred, not divided by the std."""
    data = tmp_path / "words.jsonl"
    data.write_text("".join(json.dumps(w) + "\n" for w in WORDS))
    from typer.testing import CliRunner

    from memrl.cli.main import app

    out = CliRunner().invoke(app, ["train", "model.path=tiny", "engine.device=cpu",
                          "workflow.name=tests.train.test_turn_credit_train:Steps", f"data.train_file={data}",
                          "algorithm.n=4", "algorithm.adv_estimator=gigpo", "algorithm.gamma=0.9",
                          "algorithm.step_weight=0.5", "algorithm.turn_norm=mean", "trainer.total_steps=2", "trainer.prompts_per_step=2",
                          "trainer.rollouts_per_step=8", f"trainer.output_dir={tmp_path / 'run'}"])
    assert out.exit_code == 0, (out.output[-2000:], out.exception)
    files = sorted((tmp_path / "run" / "rollouts").glob("*.jsonl"))
    assert len(files) == 2
    for f in files:
        records = [json.loads(line) for line in f.read_text().splitlines()]
        want, got = _expected(records, "gigpo", norm="mean")
        assert got == pytest.approx(want, abs=1e-6)
        assert got != pytest.approx(_expected(records, "gigpo")[0], abs=1e-3)  # not the default's numbers


def test_turn_reward_needs_a_conversation_and_adds_up() -> None:
    from memrl.testing import ScriptedEngine

    class Merged(Workflow):
        async def run(self, ep: Episode) -> None:
            with pytest.raises(ValueError, match="before any ep.generate"):
                ep.turn_reward(1.0)
            a = await ep.generate([1, 2], max_new_tokens=1, state="s")
            ep.turn_reward(0.5)
            await ep.generate(list(a.prompt_ids) + a.token_ids + [3], max_new_tokens=1, merge=True, state="t")
            ep.turn_reward(0.25)
            ep.reward(1.0)

    import asyncio

    from memrl.engines.base import SamplingParams
    from memrl.models.resolve import load_tokenizer
    traj = asyncio.run(Merged().episode({}, engine=ScriptedEngine(lambda p, s: [7]), tokenizer=load_tokenizer("tiny"),
                                        sampling=SamplingParams(greedy=True)))
    assert traj.num_conversations == 1 and traj.conversations[0].reward == 0.75
    assert traj.conversations[0].state == "s" and traj.reward == 1.0
    assert torch.equal(turn_returns([0.75 + 1.0], 0.5), torch.tensor([1.75]))


class RoomSteps(Steps):
    """Steps with observation-text anchors: the second turn's text differs between episodes by a count only."""

    name = "room_steps"

    async def run(self, ep: Episode) -> None:
        word = ep.sample["word"]
        a = await ep.generate(f"Say {word}:", max_new_tokens=3, state=f"A quiet market; a buyer asks for {word}.")
        b = await ep.generate(f"Then: {a}", max_new_tokens=2,
                              state=f"The stall keeper has answered you; your count so far is {sum(a.ids) % 10}.")
        ep.turn_reward(float(sum(b.ids) % 2))
        await ep.generate(f"Last: {b}", max_new_tokens=2)
        ep.reward(float(len(a.ids) + len(b.ids)) / 5)


def test_similar_text_states_share_an_anchor_in_training(tmp_path: Path) -> None:
    """algorithm.state_similarity=0.9: the second turns' texts (one digit apart) form one anchor group."""
    cfg = _config(tmp_path, "gigpo")
    cfg["algorithm"]["state_similarity"] = 0.9
    Trainer(cfg, workflow=RoomSteps(), train=WORDS).run()
    split = False
    for f in sorted((tmp_path / "run" / "rollouts").glob("*.jsonl")):
        records = [json.loads(line) for line in f.read_text().splitlines()]
        want, got = _expected(records, "gigpo", by_turn=True)
        assert got == pytest.approx(want, abs=1e-5)  # float32 sums in another order
        split = split or got != pytest.approx(_expected(records, "gigpo")[0], abs=1e-4)
    assert split  # some group's second turns had unequal texts, which equal-state grouping keeps apart
