"""``algorithm.ref_sync_every``: TR-DPO's reference update as TRL runs it (SyncRefModelCallback at f2cd577:
every ref_model_sync_steps optimizer steps, ref = alpha * policy + (1 - alpha) * ref), kept in checkpoints."""

from __future__ import annotations

import pytest
import torch

from memrl.config import ConfigError, load_config
from memrl.config.algorithm import AlgorithmConfig
from memrl.train.trainer import Trainer
from tests.train.helpers import coin_engine, config

OVER = {"algorithm__kl_coef": 0.01, "algorithm__ref_sync_every": 2, "algorithm__ref_mixup_alpha": 0.5,
        "trainer__mini_batches": 2}


def _params(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_every_second_optimizer_step_mixes_the_policy_into_the_reference(tmp_path):
    """One step of two optimizer steps: one mix, after the second, with the policy as it then is."""
    from memrl.models.resolve import load_tokenizer

    t = Trainer(config(tmp_path, trainer__total_steps=1, **OVER), engine=coin_engine(load_tokenizer("tiny")))
    initial = _params(t.reference.frozen)
    t.step += 1
    t.train_step()
    for ref, start, now in zip(_params(t.reference.frozen), initial, _params(t.policy)):
        torch.testing.assert_close(ref, 0.5 * now + 0.5 * start)
    assert any(not torch.equal(a, b) for a, b in zip(_params(t.reference.frozen), initial))


def test_a_resumed_run_keeps_the_moved_reference(tmp_path):
    from memrl.models.resolve import load_tokenizer

    tok = load_tokenizer("tiny")
    first = Trainer(config(tmp_path, trainer__total_steps=1, **OVER), engine=coin_engine(tok))
    first.run()
    moved = _params(first.reference.frozen)
    assert (next((tmp_path / "run" / "checkpoints").glob("step_*")) / "reference").is_dir()
    resumed = Trainer(config(tmp_path, trainer__total_steps=2, **OVER), engine=coin_engine(tok))
    for a, b in zip(_params(resumed.reference.frozen), moved):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("settings, message", [
    ({"ref_sync_every": 4}, "ref_sync_every updates the reference of the KL term: set kl_coef > 0"),
    ({"ref_mixup_alpha": 0.3}, "ref_mixup_alpha is read with ref_sync_every only"),
])
def test_settings_that_would_do_nothing_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        AlgorithmConfig(**settings)


def test_lora_is_refused_as_trl_refuses_peft():
    with pytest.raises(ConfigError, match="a LoRA run's reference is the base model"):
        load_config(None, ["algorithm.kl_coef=0.01", "algorithm.ref_sync_every=8", "lora.enabled=true"])


def test_trls_names_translate():
    from memrl.config.from_trl import translate_trl

    t = translate_trl({"sync_ref_model": True, "ref_model_sync_steps": 64, "beta": 0.04}, 1)
    assert t.settings["algorithm.ref_sync_every"][0] == 64 and t.settings["algorithm.ref_mixup_alpha"][0] == 0.6
    t = translate_trl({"sync_ref_model": True}, 1)  # beta 0: TRL refuses
    assert "algorithm.ref_sync_every" not in t.settings and "beta=0" in t.skipped["sync_ref_model"]


def test_a_run_resumed_without_ref_sync_keeps_the_moved_reference(tmp_path):
    """Turning ref_sync_every off at resume (trainer.allow_changes) keeps the reference where it had moved, as the
    fixed one, and keeps saving it; it does not jump back to the step-0 weights."""
    from memrl.models.resolve import load_tokenizer

    tok = load_tokenizer("tiny")
    first = Trainer(config(tmp_path, trainer__total_steps=1, **OVER), engine=coin_engine(tok))
    first.run()
    moved = _params(first.reference.frozen)
    kept = {k: v for k, v in OVER.items() if not k.startswith("algorithm__ref_")}
    resumed = Trainer(config(tmp_path, trainer__total_steps=2, trainer__allow_changes=[
        "algorithm.ref_sync_every", "algorithm.ref_mixup_alpha"], **kept), engine=coin_engine(tok))
    for a, b in zip(_params(resumed.reference.frozen), moved):
        torch.testing.assert_close(a, b)
    resumed.run()
    latest = sorted((tmp_path / "run" / "checkpoints").glob("step_*"))[-1]
    assert (latest / "reference").is_dir()
    for a, b in zip(_params(resumed.reference.frozen), moved):  # fixed from then on
        torch.testing.assert_close(a, b)
