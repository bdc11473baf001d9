"""Flags and settings that used to be silently ignored or silently stretched are refused in one line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from memrl.config import ConfigError
from memrl.models.resolve import load_tokenizer
from memrl.train.preflight import check_config
from memrl.train.trainer import Trainer
from tests.train.helpers import coin_engine, config


def invoke(*args: str):
    from memrl.cli.main import app

    return CliRunner().invoke(app, list(map(str, args)))


@pytest.mark.parametrize("flag, value", [("--max-samples", "2"), ("--data", "somewhere"), ("--docs", "50"),
                                         ("--repeats", "3"), ("--tasks", "niah_single_1")])
def test_qa_flags_with_tool_agent_are_refused(tmp_path, flag, value):
    out = tmp_path / "out"
    r = invoke("eval", "--workflow", "tool_agent", "--model", "tiny", "--domain", "library", "--split", "test",
               flag, value, "--out", out)
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert lines[0].startswith(f"error: {flag} does not apply to --workflow tool_agent")
    assert not out.exists()  # refused before anything is written


def test_trials_with_a_qa_workflow_is_refused(tmp_path):
    r = invoke("eval", "--workflow", "memagent", "--trials", "3", "--data", tmp_path, "--docs", "50",
               "--out", tmp_path / "out")
    assert r.exit_code == 2 and "--trials applies to --workflow tool_agent only" in r.output


@pytest.mark.parametrize("flag, value", [("--task-ids", "task_1"), ("--num-tasks", "2"), ("--domain", "library"),
                                         ("--split", "test"), ("--data-dir", "/tmp")])
def test_task_flags_with_a_qa_workflow_are_refused(tmp_path, flag, value):
    r = invoke("eval", "--workflow", "memagent", flag, value, "--data", tmp_path, "--docs", "50",
               "--out", tmp_path / "out")
    assert r.exit_code == 2 and f"error: {flag} applies to --workflow tool_agent only" in r.output


def test_prompts_per_step_beyond_the_dataset_is_refused(tmp_path):
    cfg = config(tmp_path, trainer__prompts_per_step=13)  # the task file has 12 samples
    with pytest.raises(ConfigError) as err:
        Trainer(cfg, engine=coin_engine(load_tokenizer("tiny")))
    msg = str(err.value)
    assert "trainer.prompts_per_step=13" in msg and "12 samples" in msg and "\n" not in msg
    Trainer(config(tmp_path, trainer__prompts_per_step=12), engine=coin_engine(load_tokenizer("tiny")))


def test_more_mini_batches_than_prompts_is_refused_at_config_time(tmp_path):
    cfg = config(tmp_path, trainer__mini_batches=3, algorithm__n=2)  # 2 prompts x n=2: 4 rows, but 2 prompts
    with pytest.raises(ConfigError, match=r"trainer.mini_batches=3 cannot split trainer.prompts_per_step=2"):
        check_config(cfg)
    check_config(config(tmp_path, trainer__mini_batches=2, algorithm__n=2))


@pytest.mark.parametrize("args, said", [(["--task", "foo"], "error: --task must be needle or tools, not 'foo'"),
                                        (["--record", "turns"], "error: --record applies to --task tools only"),
                                        (["--estimator", "nope"], "error: --estimator: ")])
def test_the_demos_own_checks_are_one_line_errors(tmp_path, args, said):
    """Like every other command's (they were Click's five-line boxed usage panel)."""
    r = invoke("demo", "--out", tmp_path / "d", *args)
    assert r.exit_code == 2 and r.output.strip().startswith(said) and "╭" not in r.output
