"""Seed 004's preset (AReaL's GRPO on tau2-bench telecom, solo) trains on a CPU with a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memrl.config import load_config
from memrl.train.trainer import Trainer

PRESET = Path(__file__).resolve().parents[2] / "configs" / "tau2_telecom_solo_grpo.yaml"


def test_preset_maps_the_seed_settings():
    cfg = load_config(PRESET, [])
    assert (cfg.env.domain, cfg.env.solo, cfg.env.train_split, cfg.env.eval_split) == ("telecom", True, "small", "test")
    assert (cfg.trainer.prompts_per_step, cfg.trainer.eval_samples, cfg.trainer.mini_batches) == (4, 16, 4)
    assert (cfg.lora.enabled, cfg.lora.r, cfg.lora.alpha, cfg.lora.dropout) == (True, 8, 64, 0.1)
    assert cfg.model.path == "Qwen/Qwen2.5-3B-Instruct" and cfg.engine.kind == "vllm"


@pytest.mark.timeout(900)
def test_preset_trains_two_steps_on_cpu(tmp_path, tau2_dir):
    cfg = load_config(PRESET, [f"env.data_dir={tau2_dir}", "model.path=tiny", "model.dtype=float32", "engine.kind=hf",
                               "cluster.rollout_replicas=0", "cluster.trainers=1", "trainer.total_steps=2",
                               "trainer.prompts_per_step=1", "trainer.mini_batches=1", "algorithm.n=2",
                               "trainer.eval_every=0", "workflow.max_turns=1", "workflow.turn_tokens=8",
                               f"trainer.output_dir={tmp_path / 'run'}", "trainer.micro_batch_tokens=65536"])
    Trainer(cfg).run()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["rollout_episodes"] == 2 and r["prompt_too_long"] == 0 for r in steps)
    assert all(r["train_rows"] == 2 for r in steps)  # the solo telecom prompts fit and were trained on
