"""A reward (or plug-in workflow) giving NaN/inf: one line naming it, the episode failed, never trained on,
never written to the rollouts; plug-ins that fail to import are one line too."""

from __future__ import annotations

import io
import json
import textwrap

import pytest
from rich.console import Console

from memrl.config import ConfigError, load_config
from memrl.models.resolve import load_tokenizer
from memrl.plugins import reward_value
from memrl.train.guards import NothingTrainableError
from memrl.train.trainer import Trainer
from tests.train.helpers import coin_engine, config


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A module ``nanplug`` on sys.path with a NaN reward, an inf reward, a text reward and a NaN workflow."""
    (tmp_path / "nanplug.py").write_text(textwrap.dedent("""
        from memrl.workflows.memagent import memagent

        def nan_reward(text, golds, answer):
            return float("nan")

        def inf_reward(text, golds, answer):
            return float("-inf")

        def text_reward(text, golds, answer):
            return "high"

        async def nan_workflow(sample, engine, tokenizer, config, **kw):
            traj = await memagent(sample, engine, tokenizer, config, **kw)
            traj.reward = float("nan")
            return traj
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("fn, shown", [("nan_reward", "nan"), ("inf_reward", "-inf"), ("text_reward", "'high'")])
def test_reward_value_refuses_what_is_not_a_finite_number(plugins, fn, shown):
    with pytest.raises(ValueError) as err:
        reward_value(f"nanplug:{fn}", "\\boxed{b}", ["b"], "b")
    msg = str(err.value)
    assert "\n" not in msg and f"nanplug:{fn}" in msg and shown in msg


def _train(tmp_path, **over):
    out = io.StringIO()
    trainer = Trainer(config(tmp_path, trainer__max_failed_steps=2, trainer__total_steps=3, **over),
                      engine=coin_engine(load_tokenizer("tiny")), tracker_console=Console(file=out, width=300))
    with pytest.raises(NothingTrainableError) as err:
        trainer.run()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return trainer, str(err.value), out.getvalue(), rows


def test_nan_reward_plugin_never_trains(plugins, tmp_path):
    trainer, err, log, rows = _train(tmp_path, workflow__reward="nanplug:nan_reward")
    assert "nanplug:nan_reward" in err and "finite" in err and "\n" not in err
    for r in rows:
        assert "reward" not in r and "grad_norm" not in r  # nothing averaged, no update
    assert trainer.failed_episodes == 2 * 2 * 4  # every episode of both steps
    assert not (tmp_path / "run" / "rollouts").exists() or not list((tmp_path / "run" / "rollouts").iterdir())


def test_nan_from_a_plugin_workflow_is_a_failed_episode(plugins, tmp_path):
    trainer, err, log, rows = _train(tmp_path, workflow__name="nanplug:nan_workflow")
    assert "nanplug:nan_workflow" in err and "nan" in err
    assert "nanplug:nan_workflow" in log
    for r in rows:
        assert "reward" not in r and "grad_norm" not in r  # nothing averaged, no update
    rollouts = tmp_path / "run" / "rollouts"
    assert not rollouts.exists() or not list(rollouts.iterdir())


# -- plug-ins that fail at import ----------------------------------------------------------------
@pytest.mark.parametrize("name, source, wanted", [
    ("brokenplug", "def reward(text, golds, answer)\n    return 1.0\n", ("brokenplug.py:1", "syntax error")),
    ("raisingplug", "X = 1\nraise RuntimeError('no licence key\\nset MY_KEY')\n",
     ("RuntimeError: no licence key set MY_KEY", "raisingplug.py:2")),
])
def test_plugin_failing_at_import_is_one_line(tmp_path, monkeypatch, name, source, wanted):
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"workflow.reward={name}:reward"])
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in wanted), msg
