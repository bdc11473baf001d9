"""What a newcomer's first mistakes print: the right column of a broken JSONL row, a --tokenizer that does
not load, and the memrl name of a setting given under another library's name."""

from __future__ import annotations

import pytest

from memrl.data.errors import DataError
from memrl.data.records import iter_records


@pytest.mark.parametrize("row, column", [('{"a": 1, "b": ', 15), ('{"a": 1', 8), ('{"a" 1}', 6)])
def test_a_broken_jsonl_row_names_its_own_column(tmp_path, row, column):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 0}\n' + row + '\n{"a": 2}\r\n')
    with pytest.raises(DataError, match=rf"rows.jsonl:2: not valid JSON: .* \(column {column}\)$"):
        list(iter_records(path))


def test_every_alias_names_a_real_key():
    from memrl.config.aliases import ALIASES
    from memrl.config.load import all_keys

    assert set(ALIASES.values()) <= set(all_keys())


@pytest.mark.parametrize("override, meant", [("trainer.learning_rate=1e-6", "trainer.lr"),
                                             ("model.name=x", "model.path"),
                                             ("model_name_or_path=x", "model.path"),
                                             ("algorithm.num_generations=8", "algorithm.n"),
                                             ("trainer.max_steps=3", "trainer.total_steps"),
                                             ("trainer.total_step=3", "trainer.total_steps")])  # a typo
def test_another_librarys_name_points_to_memrls_key(override, meant):
    from memrl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=rf"unknown config key '{override.split('=')[0]}': did you mean '{meant}'\?$"):
        load_config(None, [override])


def test_a_misspelt_workflow_gets_a_did_you_mean():
    from memrl.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"unknown workflow 'memagnet' \(did you mean 'memagent'\?\): choose "):
        load_config(None, ["workflow.name=memagnet"])


@pytest.mark.parametrize("args, hint", [(["--lr", "1e-6"], "e.g. trainer.lr=1e-6"),
                                        (["--learning-rate=2e-6"], "e.g. trainer.lr=2e-6"),
                                        (["--num-generations", "8", "trainer.lr=1"], "e.g. algorithm.n=8"),
                                        (["--frobnicate"], "e.g. trainer.lr=1e-6 (memrl config schema lists the "
                                                           "keys)")])
def test_train_flags_are_answered_with_the_override(tmp_path, args, hint):
    from typer.testing import CliRunner

    from memrl.cli.main import app

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("trainer: {total_steps: 1}\n")
    r = CliRunner().invoke(app, ["train", str(cfg), *args])
    flag = args[0].split("=")[0]
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        f"error: memrl train has no {flag} option: settings are key=value overrides after the config, {hint}"]


@pytest.mark.parametrize("typo", ["--alow-changes", "--allow-change", "--allow_changes"])
def test_a_typo_of_trains_own_option_is_suggested(tmp_path, typo):
    from typer.testing import CliRunner

    from memrl.cli.main import app

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("trainer: {total_steps: 1}\n")
    r = CliRunner().invoke(app, ["train", str(cfg), typo, "trainer.lr"])
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        f"error: memrl train has no {typo} option; did you mean --allow-changes? (memrl train --help)"]


def test_counts_read_in_the_right_number():
    from memrl.cli.common import counted

    assert [counted(1, "step"), counted(2, "step"), counted(0, "file")] == ["1 step", "2 steps", "0 files"]
    assert [counted(1, "trajectory", "trajectories"), counted(3, "trajectory", "trajectories")] == [
        "1 trajectory", "3 trajectories"]


def test_export_and_demo_silence_the_hub_progress_bars(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import memrl.cli.demo
    import memrl.cli.train
    import memrl.train.export
    import memrl_demo.run
    from memrl.cli.main import app

    quieted: list[str] = []
    monkeypatch.setattr(memrl.cli.train, "quiet_hub_progress", lambda: quieted.append("export"))
    monkeypatch.setattr(memrl.cli.demo, "quiet_hub_progress", lambda: quieted.append("demo"))
    monkeypatch.setattr(memrl.train.export, "export_run", lambda run, out, step, force: out)
    monkeypatch.setattr(memrl_demo.run, "run_demo", lambda *args, **kwargs: None)
    assert CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--out", str(tmp_path / "m")]).exit_code == 0
    assert CliRunner().invoke(app, ["demo", "--out", str(tmp_path / "demo")]).exit_code == 0
    assert quieted == ["export", "demo"]
