"""``algorithm.adaptive_entropy``: TRL's use_adaptive_entropy (trl/trainer/grpo_trainer.py at f2cd577: the
coefficient applied in an optimizer step is the one set at the previous step's end, and 0 unless that step's
world entropy was <= entropy_target; after each step it moves by entropy_coef_delta within [min, max])."""

from __future__ import annotations

import json
import math

import pytest
import torch

from memrl.config.algorithm import AlgorithmConfig
from memrl.rl import policy_objective
from memrl.rl.entropy_control import AdaptiveEntropy


def trl_controller(entropies, coef, target, delta, low, high):
    """TRL's loop, step by step: (applied coefficient, coefficient after the step) per optimizer step."""
    last, out = float("inf"), []
    for world in entropies:
        applied = coef if last <= target else 0.0
        coef = min(coef + delta, high) if world <= target else max(coef - delta, low)
        last = world
        out.append((applied, coef))
    return out


def test_the_controller_moves_as_trls_through_a_run():
    entropies = [0.5, 0.125, 0.25, 0.375, 0.0625, 0.0625, 0.0625, 0.875, 0.125, 0.125, 0.0625, 0.0625]
    control = AdaptiveEntropy(coef=0.004, target=0.2, delta=0.004, low=0.002, high=0.02)
    got = []
    for e in entropies:
        applied = control.applied()
        control.observe(e * 3.0, 2.0)  # two micro-batches: 3 tokens, then 1 token of the same mean
        control.observe(e * 1.0, 1.0)
        control.end_step(control.window())
        got.append((applied, control.coef))
    want = trl_controller(entropies, 0.004, 0.2, 0.004, 0.002, 0.02)
    assert [x for pair in got for x in pair] == pytest.approx([x for pair in want for x in pair])
    assert want[0][0] == 0.0 and want[2][0] > 0  # nothing applied before a step was measured; then on
    assert max(c for _, c in want) == 0.02 and min(c for _, c in want) == pytest.approx(0.002)  # both bounds


def test_the_state_survives_json_and_restores():
    control = AdaptiveEntropy(coef=0.1, target=1.0, delta=0.01, low=0.0, high=1.0)
    fresh = AdaptiveEntropy(coef=0.1, target=1.0, delta=0.01, low=0.0, high=1.0)
    fresh.restore(json.loads(json.dumps(control.state())))
    assert math.isinf(fresh.last_entropy) and fresh.applied() == 0.0
    control.end_step([2.0, 4.0])  # 0.5 <= 1: up
    fresh.restore(json.loads(json.dumps(control.state())))
    assert (fresh.coef, fresh.last_entropy, fresh.applied()) == pytest.approx((0.11, 0.5, 0.11))


def test_the_objective_uses_the_applied_coefficient():
    entropy = torch.tensor([[0.4, 0.2]], requires_grad=True)
    zeros, mask = torch.zeros(1, 2), torch.ones(1, 2)
    a = AlgorithmConfig(adaptive_entropy=True, entropy_coef=0.5)
    off, _ = policy_objective(zeros, zeros, zeros, mask, a, entropy=entropy, entropy_coef=0.0)
    on, _ = policy_objective(zeros, zeros, zeros, mask, a, entropy=entropy, entropy_coef=0.25)
    assert off.item() == 0.0 and on.item() == pytest.approx(-0.25 * 0.3)
    on.backward()
    assert torch.allclose(entropy.grad, torch.full((1, 2), -0.25 / 2))


@pytest.mark.parametrize("settings, message", [
    ({"entropy_target": 0.5}, "entropy_target is read with adaptive_entropy=true only"),
    ({"adaptive_entropy": True, "entropy_coef_min": 0.3, "entropy_coef_max": 0.2},
     "entropy_coef_min 0.3 is above entropy_coef_max 0.2"),
])
def test_settings_that_would_do_nothing_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        AlgorithmConfig(**settings)


def test_a_run_moves_the_coefficient_every_optimizer_step_and_a_resume_keeps_it(tmp_path):
    """A target far above the tiny model's entropy: +delta at each of the 2 optimizer steps a training step
    takes; the checkpoint carries the coefficient into the resumed run's next step."""
    from memrl.models.resolve import load_tokenizer
    from memrl.train.trainer import Trainer
    from tests.train.helpers import coin_engine, config

    over = {"algorithm__adaptive_entropy": True, "algorithm__entropy_coef": 0.01, "algorithm__entropy_target": 50.0,
            "algorithm__entropy_coef_delta": 0.002, "trainer__mini_batches": 2}
    first = Trainer(config(tmp_path, trainer__total_steps=1, **over), engine=coin_engine(load_tokenizer("tiny")))
    metrics = first.run()
    assert metrics["entropy_coef"] == pytest.approx(0.014)
    saved = json.loads(next((tmp_path / "run" / "checkpoints").glob("step_*/state.json")).read_text())
    assert saved["entropy_control"]["coef"] == pytest.approx(0.014) and saved["entropy_control"]["last_entropy"] < 50
    resumed = Trainer(config(tmp_path, trainer__total_steps=2, **over), engine=coin_engine(load_tokenizer("tiny")))
    assert resumed.updater.entropy_control.applied() == pytest.approx(0.014)
    assert resumed.train_step()["entropy_coef"] == pytest.approx(0.018)


def test_the_loss_gets_the_controllers_coefficient_and_the_window_the_kept_tokens(tmp_path, monkeypatch):
    """Two optimizer steps: the first applies 0 (no entropy measured yet), the second the moved coefficient; under
    top_entropy_quantile=0.5 the window counts only the kept tokens, about half of them."""
    import memrl.train.update as update
    from memrl.models.resolve import load_tokenizer
    from memrl.train.trainer import Trainer
    from tests.train.helpers import coin_engine, config

    applied, windows = [], []
    real = update.policy_objective

    def spy(*args, **kw):
        applied.append(kw["entropy_coef"])
        return real(*args, **kw)

    monkeypatch.setattr(update, "policy_objective", spy)
    over = {"algorithm__adaptive_entropy": True, "algorithm__entropy_coef": 0.01, "algorithm__entropy_target": 50.0,
            "algorithm__entropy_coef_delta": 0.002, "trainer__mini_batches": 2, "trainer__total_steps": 1,
            "algorithm__top_entropy_quantile": 0.5}
    t = Trainer(config(tmp_path, **over), engine=coin_engine(load_tokenizer("tiny")))
    real_end = t.updater.entropy_control.end_step
    monkeypatch.setattr(t.updater.entropy_control, "end_step", lambda totals: (windows.append(totals),
                                                                                 real_end(totals)))
    t.step += 1
    metrics = t.train_step()
    assert set(applied[: len(applied) // 2]) == {0.0} and set(applied[len(applied) // 2:]) == {0.012}
    trained = metrics["train_tokens"]
    kept = sum(w[1] for w in windows)  # the two mini-batches' kept tokens: about half of all
    assert len(windows) == 2 and 0.4 * trained < kept < 0.65 * trained
