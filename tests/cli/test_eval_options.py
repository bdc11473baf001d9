"""``memrl eval`` options: sampling from the config file is kept, protocol/repeats flags, --suite ruler."""

import sys

import pytest
from typer.testing import CliRunner

from memrl.cli.main import app
from memrl.testing.scripted import ScriptedEngine
from tests.eval.helpers import needle_eval_dir


@pytest.fixture()
def captured(monkeypatch):
    """Replace the engine and the QA runner; record the config the runner got."""
    seen = {}

    async def fake_run_eval(cfg, engine, tokenizer, data_dir, docs, out, **kw):
        seen["cfg"], seen["docs"] = cfg, docs
        return {"workflow": cfg.workflow.name, "model": cfg.model.path, "by_docs": {}, "protocol": cfg.eval.protocol}

    monkeypatch.setattr("memrl.eval.runner.run_eval", fake_run_eval)
    monkeypatch.setattr("memrl.engines.factory.build_engine", lambda cfg: ScriptedEngine(lambda p, s: []))
    return seen


def _eval(tmp_path, *args):
    data = needle_eval_dir(tmp_path / "data")
    return CliRunner().invoke(app, ["eval", *map(str, args), "--model", "tiny", "--data", str(data), "--docs", "3",
                                    "--out", str(tmp_path / "out")])


@pytest.mark.parametrize(
    "yaml_text, flags, expected",
    [
        ("sampling:\n  temperature: 0.7\n", [], (0.7, 1.0)),  # was overwritten by the flag's default 0.0
        ("", [], (0.0, 1.0)),  # nothing anywhere: greedy
        ("sampling:\n  temperature: 0.7\n", ["--temperature", "0.2", "--top-p", "0.9"], (0.2, 0.9)),
        ("", ["--protocol", "memagent"], (0.7, 0.95)),  # the paper's eval sampling
    ],
)
def test_sampling_from_the_file_is_kept(tmp_path, captured, yaml_text, flags, expected):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(yaml_text)
    r = _eval(tmp_path, cfg_file, *flags)
    assert r.exit_code == 0, r.output
    s = captured["cfg"].sampling
    assert (s.temperature, s.top_p) == expected


def test_repeats_flag_and_greedy_warning(tmp_path, captured):
    r = _eval(tmp_path, "--repeats", "4")
    assert r.exit_code == 0, r.output
    assert captured["cfg"].eval.repeats == 4 and "same answer every time" in r.output


def test_suite_ruler_calls_the_ruler_suite(tmp_path, captured, monkeypatch):
    called = {}

    async def fake_suite(cfg, engine, tokenizer, data_dir, out, *, lengths, tasks, max_samples, on_start=None,
                         on_episode=None):
        called.update(lengths=lengths, tasks=tasks, max_samples=max_samples)
        return {"workflow": "memagent", "model": "tiny", "lengths": [], "by_task": {}, "average": {}}

    monkeypatch.setattr("memrl.eval.ruler_suite.run_ruler_suite", fake_suite)
    r = CliRunner().invoke(app, ["eval", "--suite", "ruler", "--model", "tiny", "--data", str(tmp_path),
                                 "--docs", "4096,8192", "--tasks", "niah_single_1, vt", "--max-samples", "2",
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert called == {"lengths": [4096, 8192], "tasks": ["niah_single_1", "vt"], "max_samples": 2}
    assert "docs" not in captured  # the QA runner is not used


def test_suite_ruler_without_the_module_is_one_clear_line(tmp_path, captured, monkeypatch):
    monkeypatch.setitem(sys.modules, "memrl.eval.ruler_suite", None)  # import fails
    r = CliRunner().invoke(app, ["eval", "--suite", "ruler", "--model", "tiny", "--data", str(tmp_path),
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 1 and "--suite ruler is not available" in r.output


def test_qa_suite_still_needs_docs_and_a_known_suite(tmp_path, captured):
    r = CliRunner().invoke(app, ["eval", "--model", "tiny", "--data", str(tmp_path), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--docs" in r.output
    r = CliRunner().invoke(app, ["eval", "--suite", "longbench", "--model", "tiny", "--data", str(tmp_path),
                                 "--docs", "3"])
    assert r.exit_code == 2 and "--suite" in r.output


@pytest.mark.parametrize("args, warned", [([], True), (["--model", "tiny"], False), (["model.path=tiny"], False)])
def test_an_eval_without_a_model_says_it_scores_the_random_test_model(tmp_path, captured, args, warned):
    data = needle_eval_dir(tmp_path / "data")
    r = CliRunner().invoke(app, ["eval", *args, "--workflow", "memagent", "--data", str(data), "--docs", "3",
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    assert ("warning: no --model: evaluating model.path's default 'tiny'" in said) == warned
