"""A misspelt TRL field or verl override is listed as a typo of the name the original has, never as a missing
memrl feature; a real field of either is never taken for a typo."""

from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest
import yaml
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.config.field_typos import TRL_OWN_FIELDS, trl_fields
from memrl.config.from_trl import translate_trl, why_skipped as trl_why
from memrl.config.from_verl import VERL_DEFAULTS, why_skipped as verl_why


@pytest.mark.parametrize("typo, meant", [("learning_rat", "learning_rate"), ("num_generation", "num_generations"),
                                         ("max_completion_lenght", "max_completion_length"),
                                         ("per_device_train_batchsize", "per_device_train_batch_size")])
def test_a_trl_typo_names_the_field(typo, meant):
    assert trl_why(typo).endswith(f"did you mean {meant}?")
    out = translate_trl({typo: 1, "num_generations": 4}, 1)
    assert out.skipped[typo].endswith(f"did you mean {meant}?")


def test_no_trl_field_is_taken_for_a_typo():
    from transformers import TrainingArguments

    every = TRL_OWN_FIELDS | {f.name for f in dataclasses.fields(TrainingArguments)}
    assert every <= trl_fields()
    assert not [name for name in every if "did you mean" in trl_why(name)]


def test_a_scripts_own_flag_far_from_any_field_stays_without_a_guess():
    assert trl_why("my_reward_temperature_schedule") == "no memrl counterpart"


@pytest.mark.parametrize("typo, meant", [("actor_rollout_ref.actor.kl_los_coef", "actor_rollout_ref.actor.kl_loss_coef"),
                                         ("actor_rollout_ref.actor.clip_ratio_hi",
                                          "actor_rollout_ref.actor.clip_ratio_high"),
                                         ("algorithm.norm_adv_by_std_in_grp", "algorithm.norm_adv_by_std_in_grpo")])
def test_a_verl_typo_names_the_override(typo, meant):
    assert verl_why(typo).endswith(f"did you mean {meant}?")
    script = f"python -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=4 {typo}=0.1\n"
    r = CliRunner().invoke(app, ["config", "from-verl", "-"], input=script)
    assert r.exit_code == 0, r.output
    assert f"did you mean {meant}? (1): {typo}" in " ".join(r.output.split())


def test_a_typo_under_another_parent_is_not_matched_across_sections():
    assert "did you mean" not in verl_why("critic.optim.kl_los_coef")


VERL = os.environ.get("MEMRL_VERL_REPO")


@pytest.mark.skipif(not VERL, reason="set MEMRL_VERL_REPO to a verl checkout to check its every config key")
def test_no_verl_key_is_taken_for_a_typo():
    text = subprocess.run(["git", "-C", str(VERL), "show", "v0.9.0:verl/trainer/config/_generated_ppo_trainer.yaml"],
                          capture_output=True, text=True, check=True).stdout
    keys: list[str] = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, [*path, str(k)])
        else:
            keys.append(".".join(path))

    walk(yaml.safe_load(text), [])
    assert len(keys) > 400 and len(set(VERL_DEFAULTS) & set(keys)) > 20  # the file read is the config tree
    assert not [k for k in keys if "did you mean" in verl_why(k)]
