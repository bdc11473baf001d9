"""Rollout records on disk: what a step trained on, readable by people, by Trajectory and by memrl sft."""

from __future__ import annotations

import json
import subprocess
import sys

from memrl.models.resolve import load_tokenizer
from memrl.train.rollouts import pick_episodes
from memrl.train.trainer import Trainer
from memrl.types import Conversation, Trajectory
from tests.train.helpers import coin_engine, config


def test_pick_best_worst_then_random():
    rewards = [0.5, 1.0, 0.0, 0.5, 0.25]
    picks = pick_episodes(rewards, 4, seed=0)
    assert picks[:2] == [(1, "best"), (2, "worst")]
    assert [why for _, why in picks[2:]] == ["random", "random"] and len({i for i, _ in picks}) == 4
    assert picks == pick_episodes(rewards, 4, seed=0) and pick_episodes(rewards, 0, 0) == []
    assert pick_episodes([1.0], 3, 0) == [(0, "best")]


def test_training_writes_rollouts_that_sft_reads(tmp_path):
    tok = load_tokenizer("tiny")
    cfg = config(tmp_path, trainer__total_steps=2, trainer__rollouts_per_step=3)
    Trainer(cfg, engine=coin_engine(tok)).run()
    files = sorted((tmp_path / "run" / "rollouts").glob("*.jsonl"))
    assert [f.name for f in files] == ["step_000001.jsonl", "step_000002.jsonl"]
    records = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert [r["pick"] for r in records] == ["best", "worst", "random"] and records[0]["reward"] >= records[1]["reward"]
    for rec in records:
        assert rec["format"] == 1 and rec["step"] == 1 and rec["policy_version"] == 0
        traj = Trajectory.from_dict(rec)  # the record is a trajectory
        assert traj.num_conversations == len(rec["conversations"]) > 1
        for conv, out in zip(traj.conversations, rec["conversations"]):
            assert out["text"]["response"] == tok.decode(conv.token_ids[conv.prompt_length:],
                                                         skip_special_tokens=False)
            if conv.num_generated:
                assert isinstance(out["advantage"], float)
                lps = out["trainer_logprobs"]
                assert len(lps) == len(conv.token_ids)
                assert all(v == 0.0 for v, m in zip(lps, conv.loss_mask) if not m)
                assert all(v < 0 for v, m in zip(lps, conv.loss_mask) if m)
    # advantages of an episode are the same for each of its conversations (the episode's advantage)
    assert len({c["advantage"] for c in records[0]["conversations"] if "advantage" in c}) == 1

    r = subprocess.run([sys.executable, "-m", "memrl.cli.main", "sft", "--trajectories", tmp_path / "run",
                        "--model", "tiny", "--out", tmp_path / "sft", "--min-reward", "0"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "6 trajectories" in r.stdout and (tmp_path / "sft" / "config.json").is_file()


def test_an_asynchronous_episode_records_the_version_that_sampled_it():
    """Its oldest token's weights (the rollout format's policy_version), not the step's: a step-3 episode whose
    tokens came from versions 0 and 1 was sampled by version 0."""
    from memrl.train.rollouts import sampled_version

    conv = Conversation(token_ids=[1, 2, 3], loss_mask=[0, 1, 1], logprobs=[0.0] * 3)
    late = Trajectory(conversations=[conv], reward=1.0, sample_id="s", group_id="g",
                      info={"policy_versions": [[0, 2], [3, 0], [2, 1]]})
    assert sampled_version(late, step=3) == 0
    assert sampled_version(Trajectory(conversations=[conv], reward=1.0, sample_id="s", group_id="g"), step=3) == 2
