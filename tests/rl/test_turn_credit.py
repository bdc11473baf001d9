"""Turn-level credit: discounted returns, GiGPO and step-REINFORCE (hand-checked values, ROLL parity)."""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import pytest
import torch

from memrl.rl import TurnRows, get_estimator, gigpo_advantages, group_norm, turn_advantages, turn_returns
from memrl.rl.turn_credit import step_reinforce_advantages


def test_turn_returns_by_hand() -> None:
    assert turn_returns([0.0, 0.0, 1.0], 0.9).tolist() == pytest.approx([0.81, 0.9, 1.0])
    assert turn_returns([1.0, 0.0, 2.0], 0.5).tolist() == pytest.approx([1.5, 1.0, 2.0])  # 1 + .5 * (0 + .5 * 2)
    assert turn_returns([3.0, 4.0], 1.0).tolist() == [7.0, 4.0]
    assert turn_returns([], 0.9).numel() == 0
    assert turn_returns([1.0, 2.0], 0.9).dtype == torch.float32


def test_group_norm_unbiased_std_and_degenerate_groups() -> None:
    out = group_norm(torch.tensor([1.0, 3.0, 5.0, 2.0, 2.0, 7.0]), ["a", "a", "a", "b", "b", "c"])
    # group a: mean 3, unbiased std 2 -> (-1, 0, 1) / (1 + 5e-7); b has std 0 and c one entry: both 0
    assert out.tolist() == pytest.approx([-2 / (2 + 1e-6), 0.0, 2 / (2 + 1e-6), 0.0, 0.0, 0.0])
    assert group_norm(torch.tensor([1.0, 3.0, 7.0]), [0, 0, 1], "mean").tolist() == [-1.0, 1.0, 0.0]
    assert group_norm(torch.tensor([1.0, 3.0]), [0, 1], "identity").tolist() == [1.0, 3.0]
    # keys compare as str(), as ROLL's DataProto.group_by does
    assert group_norm(torch.tensor([0.0, 2.0]), [1, "1"]).tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)],
                                                                                  rel=1e-5)


def test_gigpo_by_hand() -> None:
    # one prompt group: episode 0 (score 1) and episode 1 (score 0), two steps each, anchors s then t
    adv = gigpo_advantages([1, 1, 0, 0], [1.0, 0.9, 0.0, 0.0], ["g"] * 4, ["s", "t", "s", "t"])
    episode = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # per-step scores 1,1,0,0: mean .5, unbiased std sqrt(1/3)
    step_s = 0.5 / (math.sqrt(0.5) + 1e-6)  # anchor s: returns 1, 0; anchor t: .9, 0 -> same magnitude
    step_t = 0.45 / (math.sqrt(0.405) + 1e-6)
    assert adv.tolist() == pytest.approx([episode + step_s, episode + step_t, -episode - step_s, -episode - step_t])
    weighted = gigpo_advantages([1, 1, 0, 0], [1.0, 0.9, 0.0, 0.0], ["g"] * 4, ["s", "t", "s", "t"],
                                episode_weight=0.5, step_weight=2.0)
    assert weighted[0].item() == pytest.approx(0.5 * episode + 2 * step_s)
    # an anchor seen once contributes nothing at the step level
    alone = gigpo_advantages([1, 0], [1.0, 0.0], ["g", "g"], ["s", "t"])
    assert alone.tolist() == pytest.approx([1 / (math.sqrt(0.5) + 1e-6) * 0.5, -0.5 / (math.sqrt(0.5) + 1e-6)])
    with pytest.raises(ValueError, match="one entry per step"):
        gigpo_advantages([1, 0], [1.0], ["g", "g"], ["s", "t"])


def test_step_reinforce_by_hand() -> None:
    adv = step_reinforce_advantages([2.0, 0.0, 1.0, 5.0], ["a", "a", "a", "b"])
    assert adv.tolist() == pytest.approx([1 / (1 + 1e-6), -1 / (1 + 1e-6), 0.0, 0.0])


def _rows() -> TurnRows:
    # two episodes of one group: 3 turns (turn rewards .5, -, -; outcome 1) and 2 turns (outcome 0)
    return TurnRows(episode=[0, 0, 0, 1, 1], turn=[0, 1, 2, 0, 1], group=["g"] * 5,
                    state=["s0", "s1", None, "s0", "s1"], scores=[1.0, 0.0],
                    turn_rewards=[[0.5, 0.0, 0.0], [0.0, 0.0]])


def test_turn_rows_returns_and_anchors() -> None:
    rows = _rows()
    assert rows.step_rewards(0) == [0.5, 0.0, 1.0]  # the outcome lands on the last turn
    assert rows.step_returns(0.5).tolist() == pytest.approx([0.75, 0.5, 1.0, 0.0, 0.0])
    assert rows.anchors() == ["g|s0", "g|s1", "g|#0.2", "g|s0", "g|s1"]


def test_registered_turn_estimators_use_the_pure_functions() -> None:
    rows = _rows()
    assert get_estimator("gigpo").turns is not None and get_estimator("gigpo").needs_group
    got = turn_advantages("gigpo", rows, gamma=0.5, episode_weight=1.0, step_weight=0.5)
    want = gigpo_advantages([1, 1, 1, 0, 0], [0.75, 0.5, 1.0, 0.0, 0.0], ["g"] * 5,
                            ["g|s0", "g|s1", "g|#0.2", "g|s0", "g|s1"], step_weight=0.5)
    assert torch.equal(got, want)
    assert torch.equal(turn_advantages("step_reinforce", rows, gamma=0.5),
                       step_reinforce_advantages([0.75, 0.5, 1.0, 0.0, 0.0], ["g"] * 5))
    assert turn_advantages("grpo", rows) is None


def fixed_batch(seed: int = 0) -> tuple[list[list[float]], list[float], list[str], list[list[str]]]:
    """36 steps in 3 prompt groups of 4 episodes, 1-5 turns each, anchor states repeated within and
    across episodes (and one key shared by two groups), some ties; step scores in halves."""
    rng = random.Random(seed)
    lengths = [3, 1, 5, 3, 2, 4, 3, 3, 4, 2, 5, 1]
    assert sum(lengths) == 36
    scores, episode, groups, states = [], [], [], []
    for e, n in enumerate(lengths):
        g = e // 4
        scores.append([rng.choice([0.0, 0.0, 0.5, 1.0, -0.5]) for _ in range(n)])
        episode.append(sum(scores[-1]))
        groups.append(f"group{g}")
        states.append([("shared" if t == 0 and g < 2 else f"g{g}s{rng.choice([t, t, 0, 1])}") for t in range(n)])
    return scores, episode, groups, states


ROLL = os.environ.get("MEMRL_ROLL_REPO")


@pytest.mark.skipif(not ROLL, reason="set MEMRL_ROLL_REPO to a ROLL checkout to compare with ROLL's own code")
@pytest.mark.parametrize("weights", [(1.0, 1.0), (0.7, 0.3)])
@pytest.mark.parametrize("method", ["mean_std", "mean"])
def test_gigpo_equals_roll(weights: tuple[float, float], method: str) -> None:
    pytest.importorskip("tensordict")
    from tests.rl.roll_gigpo import roll_gigpo

    scores, episode, groups, states = fixed_batch()
    gamma = 0.95
    roll_returns, roll_adv = roll_gigpo(Path(str(ROLL)), scores, episode, groups, states, gamma=gamma,
                                        episode_weight=weights[0], step_weight=weights[1], method=method)
    returns = torch.cat([turn_returns(s, gamma) for s in scores])
    assert torch.equal(returns, roll_returns)
    per_step = [(episode[e], groups[e], s) for e in range(len(scores)) for s in states[e]]
    ours = gigpo_advantages([p[0] for p in per_step], returns, [p[1] for p in per_step], [p[2] for p in per_step],
                            episode_weight=weights[0], step_weight=weights[1], method=method)  # type: ignore[arg-type]
    torch.testing.assert_close(ours, roll_adv, rtol=0, atol=1e-6)
    _, roll_sr = roll_gigpo(Path(str(ROLL)), scores, episode, groups, states, gamma=gamma, episode_weight=1,
                            step_weight=1, method=method, estimator="step_reinforce")
    sr = step_reinforce_advantages(returns, [p[1] for p in per_step], method=method)  # type: ignore[arg-type]
    torch.testing.assert_close(sr, roll_sr, rtol=0, atol=1e-6)


def test_step_rewards_and_a_per_turn_estimator_are_refused_together() -> None:
    from memrl.config.algorithm import AlgorithmConfig

    assert AlgorithmConfig(adv_estimator="gigpo", episode_weight=0.5).step_weight == 1.0
    with pytest.raises(ValueError, match="both give each turn its own advantage"):
        AlgorithmConfig(step_rewards=True, adv_estimator="gigpo")


VERL_AGENT = os.environ.get("MEMRL_VERL_AGENT_REPO")


@pytest.mark.skipif(not VERL_AGENT, reason="set MEMRL_VERL_AGENT_REPO to a verl-agent checkout to compare with "
                    "GiGPO's own code (gigpo/core_gigpo.py)")
@pytest.mark.parametrize("gamma", [0.95, 1.0])
@pytest.mark.parametrize("step_weight", [1.0, 0.4])
@pytest.mark.parametrize(("mode", "norm"), [("mean_std_norm", "mean_std"), ("mean_norm", "mean")])
def test_gigpo_equals_verl_agent(gamma: float, step_weight: float, mode: str, norm: str) -> None:
    """The trainer's path (TurnRows -> the registered gigpo with algorithm.turn_norm) against verl-agent's
    compute_gigpo_outcome_advantage, anchors grouped within each prompt group as verl-agent groups them."""
    from tests.rl.verl_agent_gigpo import verl_agent_gigpo

    for seed in range(3):
        rewards, episode, groups, states = fixed_batch(seed)
        va_returns, va_adv = verl_agent_gigpo(Path(str(VERL_AGENT)), rewards, groups, states, gamma=gamma,
                                              step_weight=step_weight, mode=mode)
        # memrl's episode: its outcome (here the sum verl-agent's reward manager gives every step) and the
        # turn rewards that, with the outcome added to the last turn, are the env's per-step rewards
        rows = TurnRows(episode=[e for e in range(len(rewards)) for _ in rewards[e]],
                        turn=[t for e in range(len(rewards)) for t in range(len(rewards[e]))],
                        group=[groups[e] for e in range(len(rewards)) for _ in rewards[e]],
                        state=[s for e in range(len(rewards)) for s in states[e]], scores=episode,
                        turn_rewards=[r[:-1] + [r[-1] - episode[e]] for e, r in enumerate(rewards)])
        torch.testing.assert_close(rows.step_returns(gamma), va_returns, rtol=0, atol=1e-6)
        ours = turn_advantages("gigpo", rows, gamma=gamma, step_weight=step_weight, norm=norm)
        assert ours is not None
        torch.testing.assert_close(ours, va_adv.float(), rtol=0, atol=1e-5)
