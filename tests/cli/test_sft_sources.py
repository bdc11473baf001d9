"""sft/rft on a training run say that its rollouts are a sample of what it generated, not all of it."""

from __future__ import annotations

import yaml

from memrl.cli.sft import run_sample_note


def run_folder(tmp_path, **trainer):
    tmp_path.mkdir(parents=True, exist_ok=True)
    settings = {"algorithm": {"n": 4}, "trainer": {"prompts_per_step": 3, "rollouts_per_step": 4,
                                                   "rollouts_every": 1, **trainer}}
    (tmp_path / "config.yaml").write_text("# memrl train\n" + yaml.safe_dump(settings))
    return tmp_path


def test_a_training_runs_rollouts_are_said_to_be_a_sample(tmp_path):
    note = run_sample_note(run_folder(tmp_path / "run"))
    assert note == (f"note: {tmp_path / 'run'} is a training run: it kept 4 of the 12 episodes of each step (best, "
                    "worst and random: trainer.rollouts_per_step, trainer.rollouts_every); memrl eval --out DIR "
                    "keeps every episode it samples")
    assert "each step it recorded (one in 5)" in run_sample_note(run_folder(tmp_path / "sparse", rollouts_every=5))


def test_folders_that_hold_every_episode_get_no_note(tmp_path):
    assert run_sample_note(run_folder(tmp_path / "all", rollouts_per_step=12)) is None
    evaluated = run_folder(tmp_path / "eval")
    (evaluated / "eval_config.yaml").write_text("model: {path: tiny}\n")
    assert run_sample_note(evaluated) is None
    file = tmp_path / "r.jsonl"
    file.write_text("")
    assert run_sample_note(file) is None
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.yaml").write_text("trainer: [")
    assert run_sample_note(broken) is None


def test_a_conversation_longer_than_the_window_is_refused_naming_it(tmp_path):
    from types import SimpleNamespace

    import pytest

    from memrl.cli.sft import _check_window

    def traj(*lengths):
        return SimpleNamespace(conversations=[SimpleNamespace(token_ids=[1] * n) for n in lengths])

    trajs = [traj(10, 20), traj(5, 64, 65)]
    _check_window(trajs[:1], 64, "tiny", tmp_path)
    _check_window(trajs, None, "tiny", tmp_path)  # a config without a window: nothing to check against
    with pytest.raises(ValueError, match=r"trajectory 2, conversations\[2\]: 65 tokens, more than tiny's context "
                                         r"window of 64"):
        _check_window(trajs, 64, "tiny", tmp_path)
