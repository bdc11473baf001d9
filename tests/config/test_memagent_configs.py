"""configs/memagent_*.yaml load and hold MemAgent's published settings."""

from pathlib import Path

from memrl.config.load import load_config
from memrl.eval.runner import with_eval_sampling

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_paper_config():
    cfg = load_config(CONFIGS / "memagent_paper.yaml")
    w, a, t = cfg.workflow, cfg.algorithm, cfg.trainer
    assert (w.name, w.chunk_tokens, w.memory_tokens, w.final_tokens, w.question_tokens, w.max_chunks) == (
        "memagent", 5000, 1024, 1024, 1024, 8)
    assert (w.reward, w.answer_format) == ("memagent_strict", "boxed")
    assert (a.adv_estimator, a.n, a.kl_coef, a.kl_estimator, a.clip_ratio_low, a.clip_ratio_high) == (
        "dr_grpo", 16, 0.001, "low_var_kl", 0.2, 0.2)
    assert (t.lr, t.warmup_steps, t.prompts_per_step, t.prompts_per_step // t.mini_batches) == (1e-6, 20, 128, 8)
    assert (t.eval_n, t.eval_temperature, t.eval_top_p) == (4, 1.0, 0.7)
    assert cfg.sampling.temperature == 1.0 and cfg.eval.protocol == "memagent"
    evaluated = with_eval_sampling(cfg)  # memrl eval samples as the paper's eval script
    assert (evaluated.sampling.temperature, evaluated.sampling.top_p) == (0.7, 0.95)


def test_example_config_uses_the_strict_reward():
    cfg = load_config(CONFIGS / "memagent_grpo.yaml")
    assert (cfg.workflow.reward, cfg.workflow.max_chunks) == ("memagent_strict", 8)


def test_eval_section_defaults_and_checks():
    cfg = load_config(None)
    assert (cfg.eval.protocol, cfg.eval.repeats, cfg.workflow.answer_format) == ("memrl", 1, "boxed")
    for bad in (["eval.protocol=ruler"], ["eval.repeats=0"], ["workflow.answer_format=json"],
                ["workflow.answer_format=regex:("], ["trainer.eval.n=0"]):
        try:
            load_config(None, bad)
        except Exception as exc:  # ConfigError names the key
            assert bad[0].split("=")[0] in str(exc)
        else:
            raise AssertionError(f"{bad} was accepted")


def test_a_paper_configs_eval_runs_as_the_papers_eval_client():
    """The YAML holds training budgets; under its protocol the eval reads whole contexts and samples as the
    client did, unless the command line says otherwise."""
    mem = with_eval_sampling(load_config(CONFIGS / "memagent_paper.yaml"), None, set())
    assert (mem.workflow.max_chunks, mem.workflow.options["slot_fill"]) == (None, "text")  # no 40K cut
    assert mem.workflow.question_tokens is None  # its client never cuts the question (training cut it at 1024)
    rem_cfg = load_config(CONFIGS / "rememr1_paper.yaml", ["eval.protocol=rememr1"])
    assert (rem_cfg.sampling.temperature, rem_cfg.workflow.recall_pool) == (1.0, "previous")  # training's
    rem = with_eval_sampling(rem_cfg, None, {"eval.protocol"})
    assert (rem.sampling.temperature, rem.sampling.top_p) == (0.7, 0.95)  # ReMemR1's test_qa.py
    assert (rem.workflow.max_chunks, rem.workflow.recall_pool) == (None, "including_current")  # its eval code
    assert rem.workflow.question_tokens is None
    chosen = load_config(CONFIGS / "rememr1_paper.yaml", ["eval.protocol=rememr1", "sampling.temperature=0.2",
                                                          "workflow.options.max_chunks=3"])
    kept = with_eval_sampling(chosen, None, {"eval.protocol", "sampling.temperature", "workflow.options.max_chunks"})
    assert (kept.sampling.temperature, kept.sampling.top_p, kept.workflow.max_chunks) == (0.2, 0.95, 3)
    plain = with_eval_sampling(load_config(CONFIGS / "rememr1_paper.yaml", ["eval.protocol=memrl"]), None,
                               {"eval.protocol"})
    assert (plain.sampling.temperature, plain.workflow.max_chunks) == (1.0, 8)
    assert load_config(CONFIGS / "rememr1_paper.yaml").eval.protocol == "rememr1"  # its eval scores as the paper
