"""tool_agent episodes that end ``prompt_too_long`` before any turn are refused up front or reported,
never a silent ``avg reward 0.000``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from memrl.config import ConfigError, load_config
from memrl.models.resolve import load_tokenizer
from memrl.train.preflight import check_tool_prompt_budget, tool_prompt_floor
from memrl.workflows import load_samples


def invoke(*args: object):
    from memrl.cli.main import app

    return CliRunner().invoke(app, list(map(str, args)))


def library(*over: str):
    cfg = load_config(None, ["workflow.name=tool_agent", "env.domain=library", "env.eval_split=test", *over])
    return cfg, load_samples(cfg, "eval")


def test_budget_below_the_system_prompt_is_refused_naming_the_setting():
    tok = load_tokenizer("tiny")
    cfg, samples = library()
    floor = tool_prompt_floor(cfg, tok, samples[0])
    assert 100 < floor < cfg.workflow.max_total_tokens
    warnings: list[str] = []
    check_tool_prompt_budget(cfg, tok, samples, warnings.append)
    assert warnings == []
    low, _ = library(f"workflow.max_total_tokens={floor}")
    with pytest.raises(ConfigError) as err:
        check_tool_prompt_budget(low, tok, samples, warnings.append)
    msg = str(err.value)
    assert "\n" not in msg and f"workflow.options.max_total_tokens={floor}" in msg and str(floor) in msg
    assert "prompt_too_long" in msg and "workflow.options.max_total_tokens=" in msg.split("e.g.")[1]
    tight, _ = library(f"workflow.max_total_tokens={floor + 10}")
    check_tool_prompt_budget(tight, tok, samples, warnings.append)
    assert len(warnings) == 1 and "leaves 10 tokens" in warnings[0]


def test_telecom_default_budget_is_refused_before_any_episode(tmp_path, tau2_dir):
    out = tmp_path / "out"
    r = invoke("eval", "--workflow", "tool_agent", "--model", "tiny", "--domain", "telecom", "--data-dir",
               tau2_dir, "--split", "small", "--out", out)
    lines = [x for x in r.output.strip().splitlines() if x.startswith("error:")]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "workflow.options.max_total_tokens=8192" in lines[0] and "telecom" in lines[0]
    assert not (out / "episodes").exists()


def test_trials_cut_before_the_first_turn_are_counted_on_the_console_and_in_results(tmp_path):
    tok = load_tokenizer("tiny")
    cfg, samples = library()
    floor = tool_prompt_floor(cfg, tok, samples[0])  # the ticket itself does not fit: every trial is cut
    out = tmp_path / "out"
    r = invoke("eval", "--workflow", "tool_agent", "--model", "tiny", "--domain", "library", "--split", "test",
               "--out", out, f"workflow.max_total_tokens={floor + 2}")
    assert r.exit_code == 0, r.output
    results = json.loads((out / "results.json").read_text())
    assert results["endings"] == {"prompt_too_long": len(samples)}
    md = (out / "results.md").read_text()
    assert f"episode endings: prompt_too_long {len(samples)}" in md
    assert "every one of the trials ended before the agent's first turn" in md
    assert f"{len(samples)} trial(s) ended before the agent's first turn" in r.output
