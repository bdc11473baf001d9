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


def telecom_tiny_model(folder: Path, tau2_dir: Path) -> Path:
    """A tiny random model whose tokenizer was trained on telecom's texts: the ~37K-character solo prompt
    becomes a few thousand tokens instead of ~15K, so a CPU trains on it in seconds and a few GiB."""
    from memrl.models.tiny import build_tiny_model

    corpus = [p.read_text(encoding="utf-8") for p in sorted((tau2_dir / "telecom").glob("*.md"))]
    corpus.append((tau2_dir / "telecom" / "tasks.json").read_text(encoding="utf-8")[:200_000])
    return build_tiny_model(folder, corpus=corpus, vocab_size=4096, max_position_embeddings=32768)


@pytest.mark.timeout(900)
def test_preset_trains_two_steps_on_cpu(tmp_path, tau2_dir):
    model = telecom_tiny_model(tmp_path / "model", tau2_dir)
    cfg = load_config(PRESET, [f"env.data_dir={tau2_dir}", f"model.path={model}", "model.dtype=float32",
                               "engine.kind=hf",
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
