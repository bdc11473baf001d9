"""GiGPO with similar anchor states grouped (``algorithm.state_similarity``, verl-agent's ``enable_similarity``)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

from memrl.config.algorithm import AlgorithmConfig
from memrl.rl import TurnRows, turn_advantages
from memrl.rl.turn_credit import similar_anchors

ROOMS = ["You are in the kitchen. A key lies on the table.", "You are in the hall. The door is locked.",
         "You are in the garden. It is raining."]


def _rows(states, groups=None):
    n = len(states)
    return TurnRows(episode=list(range(n)), turn=[0] * n, group=groups or ["g"] * n, state=states,
                    scores=[float(i % 2) for i in range(n)], turn_rewards=[[0.0]] * n)


def test_each_state_joins_the_first_cluster_whose_first_state_is_similar_enough():
    # ratio("aaaaaaaaaa", "aaaaaaaaab") = 2*9/20 = 0.90; ("aaaaaaaaaa", "aaaaaaaabb") = 0.80 although
    # ("aaaaaaaaab", "aaaaaaaabb") = 0.90: a state is compared with a cluster's first state only
    a, b, c = "a" * 10, "a" * 9 + "b", "a" * 8 + "bb"
    rows = _rows([a, "zzzz", b, c, None, a], groups=["g", "g", "g", "g", "g", "h"])
    assert similar_anchors(rows, 0.9) == ["g|~0", "g|~1", "g|~0", "g|~2", "g|#4.0", "h|~0"]
    assert similar_anchors(rows, 0.95) == ["g|~0", "g|~1", "g|~2", "g|~3", "g|#4.0", "h|~0"]


def test_similarity_groups_turns_that_equal_states_keep_apart():
    # two observations of one room that differ by a step counter: equal keys never match, 0.9 groups them
    states = [ROOMS[0] + " Step 1.", ROOMS[0] + " Step 2.", ROOMS[1], ROOMS[1] + " "]
    rows = TurnRows(episode=[0, 1, 2, 3], turn=[0, 0, 0, 0], group=["g"] * 4, state=states,
                    scores=[1.0, 0.0, 1.0, 0.0], turn_rewards=[[0.0]] * 4)
    exact = turn_advantages("gigpo", rows, step_weight=1.0)
    similar = turn_advantages("gigpo", rows, step_weight=1.0, similarity=0.9)
    assert exact is not None and similar is not None
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0])
    # episode term: scores 1, 0, 1, 0 deviate by 0.5 from their mean, unbiased std sqrt(1/3): 0.8660
    torch.testing.assert_close(exact, 0.8660254 * sign)  # each step alone in its anchor group: step term 0
    # step term: returns (1, 0) per pair of similar rooms, std sqrt(1/2): 0.5 / 0.7071 = 0.7071
    torch.testing.assert_close(similar, (0.8660254 + 0.7071068) * sign)


def test_state_similarity_is_refused_where_nothing_reads_it():
    assert AlgorithmConfig(adv_estimator="gigpo", state_similarity=0.9).state_similarity == 0.9
    with pytest.raises(ValueError, match=r"state_similarity is read by adv_estimator=gigpo only \(adv_estimator is "
                                         r"'grpo'\)"):
        AlgorithmConfig(state_similarity=0.9)
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match="state_similarity"):
            AlgorithmConfig(adv_estimator="gigpo", state_similarity=bad)


def text_batch(seed: int) -> tuple[list[list[float]], list[str], list[list[str]]]:
    """12 episodes in 3 prompt groups, 1-4 turns, each state a room's text with small random edits."""
    rng = random.Random(seed)
    rewards, groups, states = [], [], []
    for e in range(12):
        n = rng.randint(1, 4)
        rewards.append([rng.choice([0.0, 0.0, 0.5, 1.0]) for _ in range(n)])
        groups.append(f"group{e // 4}")
        texts = []
        for _ in range(n):
            text = list(rng.choice(ROOMS))
            for _ in range(rng.choice([0, 1, 4, 12])):
                text[rng.randrange(len(text))] = rng.choice("xyz ")
            texts.append("".join(text))
        states.append(texts)
    return rewards, groups, states


VERL_AGENT = os.environ.get("MEMRL_VERL_AGENT_REPO")


@pytest.mark.skipif(not VERL_AGENT, reason="set MEMRL_VERL_AGENT_REPO to a verl-agent checkout to compare with "
                    "GiGPO's own code (gigpo/core_gigpo.py)")
@pytest.mark.parametrize("threshold", [0.8, 0.9, 0.95])
def test_similar_states_group_as_verl_agent_groups_them(threshold: float) -> None:
    from tests.rl.verl_agent_gigpo import verl_agent_gigpo

    for seed in range(3):
        rewards, groups, states = text_batch(seed)
        _, va_adv = verl_agent_gigpo(Path(str(VERL_AGENT)), rewards, groups, states, gamma=0.95, step_weight=1.0,
                                     mode="mean_std_norm", similarity=threshold)
        episode = [sum(r) for r in rewards]
        rows = TurnRows(episode=[e for e in range(12) for _ in rewards[e]],
                        turn=[t for e in range(12) for t in range(len(rewards[e]))],
                        group=[groups[e] for e in range(12) for _ in rewards[e]],
                        state=[s for e in range(12) for s in states[e]], scores=episode,
                        turn_rewards=[r[:-1] + [r[-1] - episode[e]] for e, r in enumerate(rewards)])
        ours = turn_advantages("gigpo", rows, gamma=0.95, similarity=threshold)
        exact = turn_advantages("gigpo", rows, gamma=0.95)
        assert ours is not None and exact is not None
        torch.testing.assert_close(ours, va_adv.float(), rtol=0, atol=1e-5)
        assert not torch.allclose(ours, exact)  # the batch has similar, unequal states: grouping them matters
