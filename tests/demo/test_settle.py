"""The needle demo trains on while its training reward has not settled, and only then (memrl_demo.settle)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from memrl.data import LongContextSample, write_samples
from memrl.models.resolve import load_tokenizer
from memrl.train.trainer import Trainer
from memrl_demo.settle import recent_reward, train_until_settled
from tests.demo.test_determinism import TIMING
from tests.train.helpers import coin_engine, config


def _rows(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


def test_recent_reward_is_the_mean_of_the_last_training_steps_not_eval_rows(tmp_path):
    rows = [{"step": 0, "eval/accuracy": 90.0}] + [{"step": s, "reward": r} for s, r in enumerate([0.1, 0.2, 1.0, 0.8], 1)]
    rows.append({"step": 4, "eval/accuracy": 100.0})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert recent_reward(tmp_path, window=2) == pytest.approx(0.9)
    assert recent_reward(tmp_path, window=10) == pytest.approx(0.525)
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(ValueError, match="no training reward yet"):
        recent_reward(tmp_path)


def test_an_unsettled_run_trains_on_in_chunks_and_continues_the_same_run(tmp_path):
    tok = load_tokenizer("tiny")
    buf = io.StringIO()
    cfg = config(tmp_path / "settle", trainer__total_steps=1, trainer__save_every=1)
    trainer, extra = train_until_settled(cfg, Console(file=buf, width=300), max_extra=2, chunk=1,
                                         engine=coin_engine(tok, p_right=0.25, seed=1))
    assert extra == 2 and trainer.step == 3
    said = [line for line in buf.getvalue().splitlines() if line.startswith("GRPO: ")]
    assert len(said) == 2 and all("< 0.90, not settled: 1 more steps (at most 2 more in all)" in s for s in said)
    straight = config(tmp_path / "straight", trainer__total_steps=3, trainer__save_every=1)
    Trainer(straight, engine=coin_engine(tok, p_right=0.25, seed=1), tracker_console=Console(file=io.StringIO())).run()
    # resumed twice, the run is the first 3 steps of a 3-step run: the same rewards, losses and data order
    assert _rows(tmp_path / "settle" / "run") == _rows(tmp_path / "straight" / "run")


def test_a_settled_run_stops_at_its_steps(tmp_path):
    buf = io.StringIO()
    samples = [LongContextSample(index=i, question=f"Which letter {i}?", answers=["c"], context="x y z " * 12,
                                 num_docs=1) for i in range(6)]
    data = tmp_path / "all_c.jsonl"
    write_samples(samples, data, fmt="jsonl")
    cfg = config(tmp_path, trainer__total_steps=2, data__train_file=str(data))  # p_right=1: always right
    trainer, extra = train_until_settled(cfg, Console(file=buf, width=300), max_extra=20,
                                         engine=coin_engine(load_tokenizer("tiny"), p_right=1.0))
    assert extra == 0 and trainer.step == 2 and "GRPO: " not in buf.getvalue()
