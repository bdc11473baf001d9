"""configs/rememr1_paper.yaml loads and holds the released ReMemR1 settings."""

from pathlib import Path

from memrl.config.load import load_config

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "rememr1_paper.yaml"


def test_paper_config():
    cfg = load_config(CONFIG)
    w, a, t = cfg.workflow, cfg.algorithm, cfg.trainer
    assert (w.name, w.rememr1_variant, w.recall_pool) == ("rememr1", "released", "previous")
    assert (w.chunk_tokens, w.max_chunks, w.memory_tokens, w.final_tokens, w.question_tokens) == (
        5000, 8, 2048, 2048, 2048)
    assert w.state_reward_alpha == 0.8 and w.reward == "memagent_strict"  # ReMemR1's reward_metric em: MemAgent's strict reward
    assert (a.adv_estimator, a.step_rewards, a.n, a.kl_coef, a.kl_estimator) == (
        "dr_grpo", True, 16, 0.001, "low_var_kl")
    assert (t.lr, t.prompts_per_step, t.prompts_per_step // t.mini_batches) == (1e-6, 128, 8)
    assert cfg.sampling.temperature == 1.0


def test_variant_override():
    cfg = load_config(CONFIG, ["workflow.rememr1_variant=memrl", "workflow.recall_pool=including_current"])
    assert (cfg.workflow.rememr1_variant, cfg.workflow.recall_pool) == ("memrl", "including_current")
