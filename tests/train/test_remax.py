"""``adv_estimator=remax``: each group runs one more, greedy, episode whose reward is the baseline of its n
sampled ones and which is never trained on (verl's ReMax); by hand, in the rollout, in both trainers, and against
verl's own ``compute_remax_outcome_advantage`` cut out of a checkout (``MEMRL_VERL_REPO``)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch

from memrl.config import MemRLConfig
from memrl.rl.outcome_estimators import remax
from memrl.train.batch import rows_from_trajectories
from memrl.train.rollout import RolloutRunner
from memrl.train.sampler import ResumableSampler
from memrl.train.scoring import assign_advantages
from memrl.types import Conversation, Trajectory
from tests.train.helpers import config

VERL = os.environ.get("MEMRL_VERL_REPO")


class GreedyHalf:
    """Greedy episodes score ``greedy`` (or fail for the samples in ``broken``); sampled ones 1 or 0 by their seed
    (``sampled``: that reward instead)."""

    def __init__(self, broken: tuple[str, ...] = (), greedy: float = 0.5, sampled: float | None = None) -> None:
        self.broken, self.greedy, self.sampled = broken, greedy, sampled

    async def episode(self, sample, *, engine, tokenizer, sampling, sample_id, group_id, **kw):
        if sampling.is_greedy and sample_id in self.broken:
            raise RuntimeError("greedy episode broke")
        coin = float(sampling.seed % 2) if self.sampled is None else self.sampled
        reward = self.greedy if sampling.is_greedy else coin
        return Trajectory(conversations=[Conversation.from_prompt_response([1], [2, 3], [0.0, 0.0])], reward=reward,
                          sample_id=sample_id, group_id=group_id, info={"greedy": sampling.is_greedy})


@pytest.fixture(autouse=True)
def _outside_the_checkout(tmp_path, monkeypatch):
    """The runner writes a failed episode's traceback under trainer.output_dir (runs/default), relative to here."""
    monkeypatch.chdir(tmp_path)


def runner(n: int, workflow: GreedyHalf, warnings: list[str], **algorithm) -> RolloutRunner:
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"},
                                      "algorithm": {"n": n, "adv_estimator": "remax", **algorithm},
                                      "trainer": {"prompts_per_step": 3}})
    out = RolloutRunner(cfg, workflow, list(range(6)), ResumableSampler(6, 0), None, warnings.append)
    out.engine = object()
    return out


@pytest.mark.parametrize("n", [1, 3])
def test_the_greedy_episode_is_the_groups_baseline_and_is_not_trained(n):
    warnings: list[str] = []
    run = runner(n, GreedyHalf(), warnings)
    kept, generated, stats = run.rollout(1)
    assert len(kept) == 3 * n and not any(t.info["greedy"] for t in kept)  # 3 prompts x n sampled, no greedy one
    assert Counter(t.group_id for t in kept) == Counter({g: n for g in {t.group_id for t in kept}})
    assert {t.metrics["baseline_reward"] for t in kept} == {0.5} and not warnings
    rows = rows_from_trajectories(kept)
    assign_advantages(run.cfg, kept, rows)
    for t, r in zip(kept, rows):  # r - 0.5 on both generated tokens: +-0.5
        assert r.advantages.tolist() == [t.reward - 0.5] * 2


def test_a_group_whose_greedy_episode_failed_is_left_out_and_said_once():
    warnings: list[str] = []
    run = runner(2, GreedyHalf(broken=tuple(str(i) for i in range(6))), warnings)
    kept, _, _ = run.rollout(1)
    assert kept == []
    said = [w for w in warnings if "greedy baseline" in w]
    assert len(said) == 1 and "its group is left out" in said[0]
    assert run.tally.baseline_failed == 3 and run.tally.repeated == 2  # the 2 other raised episodes, not the notes
    assert "the greedy baseline episode failed in 3 group(s)" in run.tally.cause(run.cfg)
    first = str(ResumableSampler(6, 0).take(3)[0])
    run = runner(2, GreedyHalf(broken=(first,)), [])
    kept, _, _ = run.rollout(1)
    assert len(kept) == 4 and all(t.sample_id != first for t in kept)  # the two other groups train


def test_a_non_finite_greedy_reward_is_a_failed_episode():
    warnings: list[str] = []
    run = runner(2, GreedyHalf(greedy=float("nan")), warnings)
    kept, _, _ = run.rollout(1)
    assert kept == [] and run.failed_episodes == 3 and run.tally.failed == 3 and run.tally.baseline_failed == 3
    assert any("returned reward nan" in w for w in warnings)
    assert "every episode failed" not in run.tally.cause(run.cfg)  # 3 of 9 failed: the baseline is the cause
    assert "greedy baseline episode failed in 3 group(s)" in run.tally.cause(run.cfg)


def test_a_sample_drawn_twice_gives_its_greedy_episodes_seeds_of_their_own():
    seen: list[tuple[bool, int]] = []

    class Seeds(GreedyHalf):
        async def episode(self, sample, *, sampling, **kw):
            seen.append((sampling.is_greedy, sampling.seed))
            return await super().episode(sample, sampling=sampling, **kw)

    import asyncio

    run = runner(2, Seeds(), [])
    asyncio.run(run.episodes([4, 4, 5], 1, 0))
    assert len(seen) == 9 and len({seed for _, seed in seen}) == 9


def test_dynamic_sampling_keeps_a_group_whose_baseline_differs_from_its_equal_rewards():
    """Every sampled episode scores 1: GRPO's groups would all be dropped; against a greedy 0.5 each has r - b = 0.5.
    Against a greedy 1 they have nothing to learn: dropped."""
    run = runner(2, GreedyHalf(greedy=0.5, sampled=1.0), [], dynamic_sampling=True, max_gen_batches=1)
    kept, _, stats = run.rollout(1)
    assert len(kept) == 6 and stats["dropped_groups"] == 0
    run = runner(2, GreedyHalf(greedy=1.0, sampled=1.0), [], dynamic_sampling=True, max_gen_batches=1)
    kept, _, stats = run.rollout(1)
    assert kept == [] and stats["dropped_groups"] == 3


def test_dynamic_sampling_on_scores_compares_them_with_the_greedy_score():
    """With the overlong penalty the rewards are shaped and the scores are not: the filter on scores reads the
    greedy episode's score, so a group whose scores all equal it (every r - b on scores 0) is dropped."""
    from memrl.train.greedy_baseline import with_baseline
    from memrl.train.rollout import dynamic_sampling_keeps

    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "algorithm": {
        "n": 2, "adv_estimator": "remax", "dynamic_sampling": True, "dynamic_sampling_metric": "score"}})

    def ep(reward: float, score: float) -> Trajectory:
        return Trajectory(conversations=[Conversation.from_prompt_response([1], [2], [0.0])], reward=reward,
                          sample_id="0", group_id="g", metrics={"score": score})

    kept = with_baseline([ep(0.9, 1.0), ep(0.9, 1.0), ep(0.9, 1.0)], lambda reason: None)
    assert dynamic_sampling_keeps(cfg, kept) == [False, False]
    kept = with_baseline([ep(0.9, 1.0), ep(0.9, 1.0), ep(0.7, 0.5)], lambda reason: None)
    assert dynamic_sampling_keeps(cfg, kept) == [True, True]


def test_an_episode_without_a_baseline_is_named():
    cfg = MemRLConfig.model_validate({"model": {"path": "tiny"}, "algorithm": {"adv_estimator": "remax"}})
    traj = Trajectory(conversations=[Conversation.from_prompt_response([1], [2], [0.0])], reward=1.0,
                      sample_id="7", group_id="1:0:7")
    with pytest.raises(ValueError, match="episode 7 of group 1:0:7 has none"):
        assign_advantages(cfg, [traj], rows_from_trajectories([traj]))


def test_remax_by_hand():
    out = remax(torch.tensor([1.0, 0.0, 0.25]), ["a", "a", "b"], baselines=torch.tensor([0.5, 0.5, 1.0]))
    assert out.tolist() == [0.5, -0.5, -0.75]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_both_trainers_train_remax_on_the_sampled_episodes_only(tmp_path, mode):
    from tests.train.test_async import _run

    over = {"algorithm__adv_estimator": "remax", "algorithm__n": 2, "trainer__total_steps": 2,
            "sampling__temperature": 1.0}
    if mode == "async":
        over.update(trainer__mode="async", trainer__max_staleness=0)  # a step takes its own groups only
    _, steps = _run(config(tmp_path, **over))
    for s in steps:
        assert s["rollout_episodes"] == 4 and "baseline_reward" in s  # 2 prompts x n=2, the greedy ones apart
        assert all(torch.isfinite(torch.tensor(s[k])) for k in ("pg_loss", "grad_norm"))


@pytest.mark.parametrize("seed", range(20))
def test_remax_equals_verls(seed):
    """verl: the baseline on each row of a prompt (repeated n times), the reward on the last valid token, the
    reverse cumulative sum of the token rewards minus the baseline; compared on the valid tokens."""
    if not VERL:
        pytest.skip("set MEMRL_VERL_REPO to a verl checkout to compare with verl's own estimators")
    from tests.rl.verl_policy_losses import verl_estimators

    verl_remax = verl_estimators(str(VERL), "REMAX")["compute_remax_outcome_advantage"]
    g = torch.Generator().manual_seed(seed)
    prompts, n = 3, 1 + seed % 4
    b = prompts * n
    lengths = torch.randint(1, 9, (b,), generator=g)
    mask = torch.zeros(b, 8)
    for i, k in enumerate(lengths.tolist()):
        mask[i, :k] = 1.0
    scores = torch.rand(b, generator=g) if seed % 2 else (torch.rand(b, generator=g) > 0.5).float()
    rewards = torch.zeros(b, 8)
    rewards[torch.arange(b), lengths - 1] = scores
    baselines = torch.rand(prompts, generator=g).repeat_interleave(n)
    want, returns = verl_remax(rewards, baselines, mask)
    groups = [str(i // n) for i in range(b)]
    torch.testing.assert_close(remax(scores, groups, baselines=baselines)[:, None] * mask, want * mask)
    torch.testing.assert_close(returns * mask, scores[:, None] * mask)
