"""memrl.rl.rollout_correction on hand-checked inputs (verl 0.9's options and metric names)."""

from __future__ import annotations

import math

import pytest
import torch

from memrl.rl import rollout_correction

LN2, LN4 = math.log(2.0), math.log(4.0)
# log r = old - rollout per token; row 0: ratios 2, 1/2, 4; row 1: ratios 1/2, 1 and one padding token
LOG_RATIO = torch.tensor([[LN2, -LN2, LN4], [-LN2, 0.0, 5.0]], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
ROLLOUT = torch.full((2, 3), -1.0, dtype=torch.float64)
OLD = ROLLOUT + LOG_RATIO


def _run(**kw):
    return rollout_correction(OLD, ROLLOUT, MASK, **kw)


def test_token_tis_truncates_each_ratio_at_the_bound() -> None:
    w, mask, m = _run(rollout_is="token", rollout_is_threshold=2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 2.0], [0.5, 1.0, 0.0]], dtype=torch.float64))
    assert torch.equal(mask, MASK)  # IS alone rejects nothing
    assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)  # the 4
    assert m["rollout_corr/rollout_is_mean"] == pytest.approx(6.0 / 5)


def test_sequence_weight_is_the_product_of_a_rows_ratios() -> None:
    w, _, _ = _run(rollout_is="sequence", rollout_is_threshold=2.0)
    # row 0: 2 * 1/2 * 4 = 4, truncated to 2; row 1: 1/2 * 1 = 1/2 (padding ignored, weight 0)
    assert torch.allclose(w, torch.tensor([[2.0, 2.0, 2.0], [0.5, 0.5, 0.0]], dtype=torch.float64))


def test_icepop_zeroes_weights_outside_the_band() -> None:
    w, _, m = _run(rollout_is="token", rollout_is_threshold="0.4_3")
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 0.0], [0.5, 1.0, 0.0]], dtype=torch.float64))
    assert m["rollout_corr/rollout_is_oob_ratio"] == pytest.approx(1 / 5)


def test_batch_normalisation_gives_mean_one() -> None:
    w, _, m = _run(rollout_is="token", rollout_is_threshold=2.0, rollout_is_batch_normalize=True)
    assert m["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(1.2)
    assert float((w * MASK).sum() / MASK.sum()) == pytest.approx(1.0)


def test_token_k1_rejects_tokens_outside_the_ratio_band() -> None:
    # k1 = -log r: row 0 (-ln2, ln2, -ln4), row 1 (ln2, 0); band [ln 0.6, ln 1.5]
    w, mask, m = _run(rollout_rs="token_k1", rollout_rs_threshold="0.6_1.5")
    assert w is None
    assert torch.equal(mask, torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64))
    assert m["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(4 / 5)
    assert m["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(1.0)


def test_geometric_mean_rejects_whole_rows() -> None:
    # seq_mean_k1: row 0 mean -ln4/3 = -0.462 < ln(2/3) = -0.405 -> rejected; row 1 ln2/2 = 0.347 kept
    _, mask, m = _run(rollout_rs="seq_mean_k1", rollout_rs_threshold=1.5)
    assert torch.equal(mask, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]], dtype=torch.float64))
    assert m["rollout_corr/rollout_rs_seq_mean_k1_seq_masked_fraction"] == pytest.approx(0.5)


def test_chained_options_must_all_pass() -> None:
    # token_k2 = (log r)^2 / 2 <= 0.3 keeps |log r| <= 0.775: the ln4 token fails; seq_max_k3 row 0 max = 4-1-ln4
    _, mask, _ = _run(rollout_rs="token_k2,seq_max_k3", rollout_rs_threshold="0.3,1.0")
    assert torch.equal(mask, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]], dtype=torch.float64))
    _, mask, _ = _run(rollout_rs="token_k2,seq_max_k3", rollout_rs_threshold="0.3,2.0")
    assert torch.equal(mask, torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]], dtype=torch.float64))


def test_offpolicy_metrics_by_hand() -> None:
    _, _, m = _run()
    assert m["rollout_corr/kl"] == pytest.approx(-LN2 / 5)  # mean(rollout - old) = -(ln4 - ln2)/5
    assert m["rollout_corr/chi2_token"] == pytest.approx((4 + 0.25 + 16 + 0.25 + 1) / 5 - 1)
    k3 = [r - math.log(r) - 1 for r in (2, 0.5, 4, 0.5, 1)]
    assert m["rollout_corr/k3_kl"] == pytest.approx(sum(k3) / 5)
    assert m["rollout_corr/chi2_seq"] == pytest.approx((16 + 0.25) / 2 - 1)


def test_conversation_level_rejects_the_episode() -> None:
    rollout = ROLLOUT.repeat(2, 1)
    old, mask = OLD.repeat(2, 1), MASK.repeat(2, 1)
    old[2:] = rollout[2:]  # episode 1's conversations agree exactly
    episodes = torch.tensor([0, 0, 1, 1])
    # seq_mean_k1 rejects conversation 0 only; with "any" its episode loses conversation 1 as well
    _, row_mask, _ = rollout_correction(old, rollout, mask, rollout_rs="seq_mean_k1", rollout_rs_threshold=1.5)
    assert row_mask[1].sum() == 2
    _, ep_mask, m = rollout_correction(old, rollout, mask, rollout_rs="seq_mean_k1", rollout_rs_threshold=1.5,
                                       episode_ids=episodes, episode_rejection="any")
    assert ep_mask[:2].sum() == 0 and torch.equal(ep_mask[2:], mask[2:])
    assert m["rollout_corr/rollout_rs_episode_rejected_fraction"] == pytest.approx(0.5)
    # a fraction: 1 of 2 conversations rejected is below 0.75, so episode 0 keeps conversation 1
    _, frac_mask, _ = rollout_correction(old, rollout, mask, rollout_rs="seq_mean_k1", rollout_rs_threshold=1.5,
                                         episode_ids=episodes, episode_rejection=0.75)
    assert torch.equal(frac_mask, row_mask)


@pytest.mark.parametrize("kw, message", [
    (dict(rollout_is="episode"), "rollout_is must be one of"),
    (dict(rollout_is="token", rollout_is_threshold="3_1"), "lower <= upper"),
    (dict(rollout_rs="token_k4", rollout_rs_threshold=1.0), "unknown option 'token_k4'"),
    (dict(rollout_rs="token_k1"), "rollout_rs_threshold is required"),
    (dict(rollout_rs="token_k2", rollout_rs_threshold="0.1_0.2"), "one upper bound"),
    (dict(rollout_rs="token_k2,token_k3", rollout_rs_threshold="1,2,3"), "exactly 2"),
    (dict(rollout_rs="token_k2", rollout_rs_threshold=1.0, episode_rejection="any"), "needs episode_ids"),
])
def test_bad_options_are_named(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _run(**kw)
