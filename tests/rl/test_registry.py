"""Algorithm pieces registered by name: built-ins once, yours by decorator or import path, bad names in one line."""

import subprocess
import sys
import textwrap

import pytest
import torch

from memrl.config import ConfigError, load_config
from memrl.config.registry import ADV_ESTIMATORS, KL_ESTIMATORS, LOSS_AGGREGATIONS, OFF_POLICY
from memrl.rl import (
    agg_loss,
    broadcast,
    episode_advantages,
    get_estimator,
    kl_penalty,
    loss_aggregation,
    objective_metric_names,
    off_policy_loss,
    register_adv_est,
    register_kl,
    register_loss_agg,
    register_off_policy,
)


@pytest.fixture
def forget():
    """Names a test registers, removed afterwards so tests do not leak plug-ins into each other."""
    added: list[tuple] = []
    yield lambda registry, name: added.append((registry, name))
    for registry, name in added:
        registry.remove(name)


def test_builtin_names():
    assert ADV_ESTIMATORS.names == ("grpo", "dr_grpo", "grpo_batch_std", "rloo", "reinforce_plus_plus",
                                    "reinforce_plus_plus_baseline", "gigpo", "step_reinforce", "grpo_passk", "gpg",
                                    "gdpo", "normalize_then_sum", "opo", "remax", "optimal_token_baseline")
    assert LOSS_AGGREGATIONS.names == ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                                       "seq-mean-token-sum-norm")
    assert KL_ESTIMATORS.names == ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k1+", "kl+", "abs+", "k2+",
                                   "mse+", "k3+", "low_var_kl+")
    assert OFF_POLICY.names == ("none", "decoupled", "tis")
    assert [n for n in ADV_ESTIMATORS.names if get_estimator(n).needs_group] == [
        "grpo", "dr_grpo", "grpo_batch_std", "rloo", "gigpo", "step_reinforce", "grpo_passk", "gpg", "gdpo",
        "normalize_then_sum", "opo", "optimal_token_baseline"]
    assert [n for n in ADV_ESTIMATORS.names if get_estimator(n).baselines] == ["remax"]
    assert [n for n in LOSS_AGGREGATIONS.names if loss_aggregation(n).per_token] == ["token-mean", "token-sum"]
    assert [n for n in LOSS_AGGREGATIONS.names if loss_aggregation(n).summed] == ["token-sum"]


@pytest.mark.parametrize("override, message", [
    ("algorithm.adv_estimator=gpro", "unknown advantage estimator 'gpro' (did you mean 'grpo'?): choose grpo, "
                                     "dr_grpo, grpo_batch_std, rloo, reinforce_plus_plus, "
                                     "reinforce_plus_plus_baseline, gigpo, step_reinforce, grpo_passk, gpg, gdpo, "
                                     "normalize_then_sum, opo, remax, optimal_token_baseline or an import path"),
    ("algorithm.loss_agg_mode=token_mean", "(did you mean 'token-mean'?)"),
    ("algorithm.kl_estimator=low_var", "(did you mean 'low_var_kl'?)"),
    ("algorithm.off_policy=decouple", "(did you mean 'decoupled'?)"),
    ("algorithm.off_policy=zzz", "unknown off_policy kind 'zzz': choose none, decoupled, tis or"),
])
def test_unknown_names_fail_in_one_line_with_the_nearest(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    text = str(info.value)
    assert message in text and override.split("=")[0] in text and "\n" not in text


def test_decorated_estimator_is_used_by_name(forget):
    forget(ADV_ESTIMATORS, "best_of_group")

    @register_adv_est("best_of_group", needs_group=True)
    def best_of_group(scores, group_ids, *, epsilon):
        """1 for the best episode of each group, 0 for the others."""
        out = torch.zeros_like(scores)
        for g in set(group_ids):
            rows = [i for i, x in enumerate(group_ids) if x == g]
            out[max(rows, key=lambda i: scores[i])] = 1.0
        return out

    scores = torch.tensor([0.2, 0.9, 0.5, 0.1])
    ep = episode_advantages(scores, ["a", "a", "b", "b"], "best_of_group")
    assert ep.tolist() == [0.0, 1.0, 1.0, 0.0]
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert broadcast(ep, [1, 1, 2], mask, "best_of_group").tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1]]
    assert load_config(None, ["algorithm.adv_estimator=best_of_group"]).algorithm.adv_estimator == "best_of_group"
    with pytest.raises(ValueError, match="'best_of_group' is already registered"):
        register_adv_est("best_of_group")(lambda scores, group_ids, **kw: scores)


def test_estimator_by_import_path(tmp_path, monkeypatch):
    (tmp_path / "my_estimators.py").write_text(textwrap.dedent("""
        import torch
        from memrl.rl import register_adv_est

        def doubled(scores, group_ids, *, epsilon):
            return 2 * scores

        def last_token(per_row, mask, *, gamma):
            out = torch.zeros_like(mask)
            out[:, -1] = per_row
            return out * mask

        @register_adv_est("my_last_token", tokens=last_token)
        def raw(scores, group_ids, *, epsilon):
            return scores.float()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_estimators", raising=False)
    try:
        cfg = load_config(None, ["algorithm.adv_estimator=my_estimators:doubled"])
        scores, mask = torch.tensor([1.0, -0.5]), torch.ones(2, 2)
        ep = episode_advantages(scores, ["a", "a"], cfg.algorithm.adv_estimator)  # a plain function
        assert ep.tolist() == [2.0, -1.0]
        assert broadcast(ep, [0, 1], mask, cfg.algorithm.adv_estimator).tolist() == [[2, 2], [-1, -1]]
        ep = episode_advantages(scores, ["a", "a"], "my_estimators:raw")  # decorated: its token stage
        assert broadcast(ep, [0, 1], mask, "my_estimators:raw").tolist() == [[0, 1], [0, -0.5]]
    finally:
        ADV_ESTIMATORS.remove("my_last_token")
    with pytest.raises(ConfigError, match="module my_estimators has no attribute nope"):
        load_config(None, ["algorithm.adv_estimator=my_estimators:nope"])
    with pytest.raises(ConfigError, match="cannot import no_such_module"):
        load_config(None, ["algorithm.adv_estimator=no_such_module:f"])


def test_own_aggregation_kl_and_correction(forget):
    for registry, name in ((LOSS_AGGREGATIONS, "row-max"), (KL_ESTIMATORS, "sq"), (OFF_POLICY, "clip_only")):
        forget(registry, name)

    @register_loss_agg("row-max")
    def row_max(loss_mat, loss_mask, norm_length):
        return (loss_mat * loss_mask).max(dim=-1).values.mean()

    @register_kl("sq")
    def sq(logprob, ref_logprob):
        return (logprob - ref_logprob) ** 2

    @register_off_policy("clip_only", uses_behaviour=False, stats=("ratio_max",))
    def clip_only(log_prob, old_log_prob, behaviour_log_prob, advantages, response_mask, **cfg):
        ratio = torch.exp(log_prob - old_log_prob)
        loss = agg_loss(-advantages * ratio.clamp(max=1.5), response_mask, cfg["loss_agg_mode"])
        zero = torch.zeros(())
        return loss, {"clipfrac": zero, "ppo_kl": zero, "clipfrac_lower": zero, "ratio_max": ratio.max()}

    loss = torch.tensor([[1.0, 5.0], [2.0, 3.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert agg_loss(loss, mask, "row-max").item() == 2.0  # (1 + 3) / 2
    assert kl_penalty(torch.tensor([1.0]), torch.tensor([3.0]), "sq").item() == 4.0
    logp = torch.log(torch.tensor([[2.0, 1.0]]))
    out, stats = off_policy_loss("clip_only", logp, torch.zeros(1, 2), None, torch.ones(1, 2), torch.ones(1, 2),
                                 loss_agg_mode="token-mean")
    assert out.item() == pytest.approx(-1.25) and stats["ratio_max"].item() == pytest.approx(2.0)
    cfg = load_config(None, ["algorithm.off_policy=clip_only", "algorithm.loss_agg_mode=row-max",
                             "algorithm.kl_estimator=sq"])
    assert objective_metric_names(cfg.algorithm)[-1] == "ratio_max"


def test_a_cap_needs_a_correction_that_reads_it():
    with pytest.raises(ConfigError, match="behav_imp_weight_cap needs off_policy=decoupled \\(off_policy is 'tis'\\)"):
        load_config(None, ["algorithm.off_policy=tis", "algorithm.behav_imp_weight_cap=3"])


def test_import_path_to_a_non_function_fails():
    with pytest.raises(ConfigError, match="advantage estimator 'math:pi': float object is not callable"):
        load_config(None, ["algorithm.adv_estimator=math:pi"])


def test_builtins_load_on_first_lookup_only():
    """Validating a config that keeps the default names (memrl config show) imports neither rl nor the engines."""
    code = ("import sys; from memrl.config import load_config; load_config(None, ['engine.max_batch_size=4']); "
            "print(sorted(m for m in ('memrl.rl', 'memrl.engines.factory') if m in sys.modules)); "
            "load_config(None, ['algorithm.adv_estimator=rloo', 'engine.kind=openai']); "
            "print(sorted(m for m in ('memrl.rl', 'memrl.engines.factory') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "['memrl.engines.factory', 'memrl.rl']"]
