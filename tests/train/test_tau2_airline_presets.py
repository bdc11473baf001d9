"""AReaL's tau2-bench airline setups as presets: each maps the seed's settings and trains 2 steps on a CPU
with tiny models (the agent and the simulated user), in the preset's own asynchronous mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memrl.config import load_config
from memrl.train.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PRESETS = sorted(CONFIGS.glob("tau2_airline_*.yaml"))

# (model, prompts per step, trainers, rollout replicas x GPUs, lr) of each AReaL config
SEEDS = {
    "tau2_airline_qwen3_1.7b.yaml": ("Qwen/Qwen3-1.7B", 16, 2, (6, 1), 1.7e-5),
    "tau2_airline_qwen3_8b.yaml": ("Qwen/Qwen3-8B", 30, 8, (16, 1), 1.7e-5),
    "tau2_airline_qwen3_30b_a3b.yaml": ("Qwen/Qwen3-30B-A3B", 16, 32, (8, 4), 5e-6),
}


def test_every_airline_preset_maps_its_seed():
    assert sorted(p.name for p in PRESETS) == sorted(SEEDS)
    for path in PRESETS:
        cfg = load_config(path, [])
        model, prompts, trainers, (replicas, gpus), lr = SEEDS[path.name]
        assert (cfg.model.path, cfg.trainer.prompts_per_step, cfg.cluster.trainers, cfg.trainer.lr) == (
            model, prompts, trainers, lr), path.name
        assert (cfg.cluster.rollout_replicas, cfg.cluster.replica_gpus) == (replicas, gpus), path.name
        assert (cfg.env.domain, cfg.env.solo, cfg.env.train_split, cfg.env.eval_split) == (
            "airline", False, "train", "test")
        assert cfg.env.user_engine == "openai" and cfg.env.user_temperature == 0.0
        assert (cfg.algorithm.adv_estimator, cfg.algorithm.clip_ratio_low, cfg.algorithm.clip_ratio_high) == (
            "reinforce_plus_plus", 0.4, 0.4)
        assert cfg.algorithm.off_policy == "decoupled" and cfg.algorithm.behav_imp_weight_cap == 5.0
        assert cfg.algorithm.dynamic_sampling and cfg.algorithm.kl_coef == 0.0
        assert (cfg.trainer.mode, cfg.trainer.max_staleness, cfg.workflow.max_turns) == ("async", 2, 25)
        assert "| AReaL setting" in path.read_text()  # the seed-to-memrl table


@pytest.fixture(scope="module")
def tiny_airline(tmp_path_factory, tau2_dir):
    """A tiny random model whose tokenizer learnt the airline policy and tasks: the agent's and the user's
    prompts are a few thousand tokens."""
    from memrl.models.tiny import build_tiny_model

    texts = [(tau2_dir / "airline" / name).read_text(encoding="utf-8") for name in ("policy.md", "tasks.json")]
    return build_tiny_model(tmp_path_factory.mktemp("airline_model"), corpus=texts, vocab_size=4096,
                            max_position_embeddings=32768)


# After the CPU overrides the presets differ only in what the mapping test above checks, so the default suite
# trains the first one and MEMRL_SLOW=1 (make test-slow) all three.
@pytest.mark.timeout(900)
@pytest.mark.parametrize("preset", [p.name if i == 0 else pytest.param(p.name, marks=pytest.mark.slow)
                                    for i, p in enumerate(PRESETS)])
def test_preset_trains_two_steps_on_cpu(tmp_path, tau2_dir, tiny_airline, preset):
    cfg = load_config(CONFIGS / preset, [
        f"env.data_dir={tau2_dir}", f"model.path={tiny_airline}", "model.dtype=float32", "engine.kind=hf",
        f"env.user_model={tiny_airline}", "env.user_engine=hf", "env.user_base_url=null", "env.user_max_tokens=4",
        "cluster.rollout_replicas=0", "cluster.trainers=1", "cluster.strategy=ddp", "trainer.total_steps=2",
        "trainer.prompts_per_step=1", "algorithm.n=2", "algorithm.dynamic_sampling=false",
        "trainer.gradient_checkpointing=false", "workflow.max_turns=1", "workflow.turn_tokens=8",
        f"trainer.output_dir={tmp_path / 'run'}", "trainer.micro_batch_tokens=65536"])
    Trainer(cfg).run()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train_rows" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["train_rows"] == 2 and r.get("prompt_too_long", 0) == 0 for r in steps)
