import math

import pytest
import torch

from memrl.rl.advantages import (
    broadcast,
    combine_step_advantages,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_rloo_outcome_advantage,
    episode_advantages,
)


def token_rewards(scores, width=3):
    r = torch.zeros(len(scores), width)
    r[:, -1] = torch.tensor(scores)
    return r


def test_grpo_by_hand():
    # group a = [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3); group b = [0.7] alone -> mean 0, std 1
    scores = [1.0, 0.0, 0.0, 1.0, 0.7]
    index = ["a", "a", "a", "a", "b"]
    mask = torch.ones(5, 3)
    mask[4, 2] = 0
    adv, ret = compute_grpo_outcome_advantage(token_rewards(scores), mask, index)
    s = math.sqrt(1 / 3)
    assert adv[:4, 0].tolist() == pytest.approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6), -0.5 / (s + 1e-6),
                                                 0.5 / (s + 1e-6)])
    assert adv[4].tolist() == pytest.approx([0.7 / (1 + 1e-6), 0.7 / (1 + 1e-6), 0.0])  # masked token is 0
    assert torch.equal(adv, ret)
    dr, _ = compute_grpo_outcome_advantage(token_rewards(scores), mask, index, norm_adv_by_std_in_grpo=False)
    assert dr[:, 0].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.7])


def test_rloo_by_hand():
    adv, _ = compute_rloo_outcome_advantage(token_rewards([1.0, 0.0, 0.0, 1.0, 0.7]), torch.ones(5, 3),
                                            ["a"] * 4 + ["b"])
    # r - mean(others): 1 - 1/3 = 2/3, 0 - 2/3 = -2/3; a lone sample keeps its reward
    assert adv[:, 0].tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.7])


def test_reinforce_pp_baseline_by_hand():
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    adv, _ = compute_reinforce_plus_plus_baseline_outcome_advantage(token_rewards([1.0, 0.0, 3.0], 2), mask,
                                                                    ["g", "g", "h"])
    # centred [0.5, -0.5, 3] on tokens [0.5, 0.5, -0.5, 3]: mean 0.875, unbiased var 2.2291667
    std = math.sqrt(6.6875 / 4 * 4 / 3)
    expected = [[(0.5 - 0.875) / std] * 2, [(-0.5 - 0.875) / std, 0.0], [(3 - 0.875) / std, 0.0]]
    torch.testing.assert_close(adv, torch.tensor(expected), atol=1e-5, rtol=0)


def test_reinforce_pp_discounted_returns():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    torch.testing.assert_close(ret, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]]))
    # whitened over the 5 valid returns [0.25, 0.5, 1, 1, 2]
    vals = torch.tensor([0.25, 0.5, 1.0, 1.0, 2.0])
    z = (vals - vals.mean()) / vals.std()
    assert adv[mask.bool()].tolist() == pytest.approx(z.tolist(), abs=1e-5)
    assert adv[1, 2] == 0


def test_reinforce_pp_carries_the_return_across_a_gap_in_the_mask():
    # one row, two assistant turns with a tool's tokens (mask 0) between them; reward 1 on the last token
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 1.0], [0.0] * 6])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 1.0]] * 2)
    adv, ret = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    # t5: 1; t4: 0.5; the gap passes 0.5 on undiscounted and gets 0; t1: 0.25; t0: 0.125
    torch.testing.assert_close(ret[0], torch.tensor([0.125, 0.25, 0.0, 0.0, 0.5, 1.0]))
    vals = torch.tensor([0.125, 0.25, 0.5, 1.0, 0.0, 0.0, 0.0, 0.0])
    z = (vals - vals.mean()) / vals.std()
    assert adv[0][mask[0].bool()].tolist() == pytest.approx(z[:4].tolist(), abs=1e-5)
    assert adv[0, 2] == adv[0, 3] == 0


def test_episode_advantage_is_not_weighted_by_conversation_count():
    # episode 0 has 3 conversations and reward 1, episode 1 has 1 conversation and reward 0
    ep = episode_advantages(torch.tensor([1.0, 0.0]), ["q", "q"], "grpo")
    s = math.sqrt(0.5)
    assert ep.tolist() == pytest.approx([0.5 / (s + 1e-6), -0.5 / (s + 1e-6)])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    tok = broadcast(ep, [0, 0, 0, 1], mask, "grpo")
    assert tok[:3][mask[:3].bool()].tolist() == pytest.approx([ep[0].item()] * 5)
    assert tok[3].tolist() == pytest.approx([ep[1].item()] * 2)
    assert tok[1, 1] == 0
    # naive per-row statistics would have given rows [1,1,1,0] mean 0.75 -> +0.5/-1.5: not what we do
    assert episode_advantages(torch.tensor([1.0, 0.0]), ["q", "q"], "dr_grpo").tolist() == [0.5, -0.5]


def test_broadcast_reinforce_variants_match_token_level_functions():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    scores = torch.tensor([2.0, 0.0, 1.0])
    ids = ["a", "a", "b"]
    ep = episode_advantages(scores, ids, "reinforce_plus_plus_baseline")
    want, _ = compute_reinforce_plus_plus_baseline_outcome_advantage(
        torch.stack([torch.tensor([0.0, 2.0, 0.0]), torch.tensor([0.0, 0.0, 0.0]), torch.tensor([1.0, 0, 0])]),
        mask, ids)
    torch.testing.assert_close(broadcast(ep, [0, 1, 2], mask, "reinforce_plus_plus_baseline"), want)
    ep = episode_advantages(scores, ids, "reinforce_plus_plus")
    rewards = torch.tensor([[0.0, 2.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    want, _ = compute_reinforce_plus_plus_outcome_advantage(rewards, mask)
    torch.testing.assert_close(broadcast(ep, [0, 1, 2], mask, "reinforce_plus_plus"), want)
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        episode_advantages(scores, ids, "ppo")


def test_rememr1_step_advantages_by_hand():
    # episodes 0 and 1 answer the same question; each has turns at steps 0 and 1
    outcome = torch.tensor([1.0, -1.0])
    step_rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])  # rows: ep0 s0, ep0 s1, ep1 s0, ep1 s1
    adv = combine_step_advantages(outcome, step_rewards, [0, 0, 1, 1], ["q", "q"], [0, 1, 0, 1], alpha=0.8)
    # step-0 group [1, 0] centres to [0.5, -0.5]; step-1 group [0, 0] to [0, 0]
    assert adv.tolist() == pytest.approx([0.9, 0.8, -0.9, -0.8])
